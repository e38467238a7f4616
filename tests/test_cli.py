"""The ``memlane`` command: every subcommand, its output forms, and every error path.

The real entry points (``python -m memlane`` and the console script) run as subprocesses
where exit statuses, piping and the absence of tracebacks matter; the rest calls ``main``
in-process, which is the same code without an interpreter start per case.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memlane import MemoryManager, SQLiteStore, __version__
from memlane.cli import main
from memlane.cli.output import Output
from operator_data import Filled, fill

CONSOLE_SCRIPT = Path(sys.executable).with_name("memlane")


def run(
    *argv: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m memlane ARGV`` in a subprocess, its output piped."""
    return subprocess.run(
        [sys.executable, "-m", "memlane", *argv],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    """Exit 1 with one line on stderr naming the problem, and no traceback."""
    assert result.returncode == 1, result.stderr
    assert_error_line(result.stderr, *parts)


def assert_error_line(err: str, *parts: str) -> None:
    """``err`` is one ``memlane: error: ...`` line holding every part."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("memlane: error: "), err
    for part in parts:
        assert part in lines[0]


def in_process_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``main(argv)`` exits 1; its one error line."""
    assert main(list(argv)) == 1
    err = capsys.readouterr().err
    assert_error_line(err)
    return err


class Cli:
    """``main`` in-process, with the store given after the subcommand."""

    def __init__(self, capsys: pytest.CaptureFixture[str], store: str) -> None:
        self.capsys = capsys
        self.store = store

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--store", self.store])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> Any:
        code, out, err = self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[str, Filled]:
    """A SQLite file holding one of every record."""
    path = tmp_path / "memory.sqlite3"
    store = SQLiteStore(str(path))
    filled = fill(MemoryManager(store=store, long_term=True))
    store.close()
    return f"sqlite:///{path}", filled


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], sqlite_db: tuple[str, Filled]) -> Cli:
    return Cli(capsys, sqlite_db[0])


class TestEntryPoints:
    """The console script and ``python -m memlane`` give the version and readable help."""

    def test_version_from_the_console_script(self) -> None:
        result = subprocess.run(
            [str(CONSOLE_SCRIPT), "--version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"memlane {__version__} (backend: ")

    def test_help_is_plain_text_and_lists_every_command(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as exited:
            main(["--help"])
        assert exited.value.code == 0
        out = capsys.readouterr().out
        assert "``" not in out
        assert ":func:" not in out
        for command in (
            "tokens", "demo", "conversations", "show", "export", "import", "facts", "episodes",
            "procedures", "users", "working", "search", "stats", "purge-expired", "delete",
            "forget-user", "serve",
        ):  # fmt: skip
            assert f"\n    {command}" in out

    def test_tokens_help_explains_its_arguments(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            main(["tokens", "--help"])
        out = capsys.readouterr().out
        assert "the file to count ('-' reads standard input)" in out
        assert "cl100k_base (GPT-4, GPT-3.5)" in out
        assert "heuristic: a fast estimate" in out

    @pytest.mark.parametrize(
        "argv",
        [[], ["nope"], ["facts", "--nope"], ["delete"], ["tokens"], ["demo", "--turns", "x"]],
    )
    def test_usage_errors_exit_2(self, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert "usage: memlane" in capsys.readouterr().err


class TestTokens:
    """``tokens`` counts a file's tokens and reports its real size; bad paths are one line."""

    def test_missing_file_and_directory_are_one_line_errors(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert_one_line_error(
            run("tokens", str(tmp_path / "missing.txt")), "missing.txt", "no such file"
        )
        assert "is a directory" in in_process_error(capsys, "tokens", str(tmp_path))

    def test_the_byte_count_is_the_file_size(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        latin1 = tmp_path / "latin1.txt"
        latin1.write_bytes("cafés".encode("latin-1"))
        assert main(["tokens", str(latin1), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["bytes"] == 5
        assert report["tokens"] > 0

    def test_standard_input(self) -> None:
        result = run("tokens", "-", stdin="hello world")
        assert result.returncode == 0, result.stderr
        assert "tokens:     2" in result.stdout
        assert "bytes:      11" in result.stdout


class TestInspecting:
    """Each listing command shows the store's records, as JSON and as plain piped lines."""

    def test_conversations(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        rows = cli.json("conversations")
        assert {r["id"] for r in rows} == {filled.conversation_id, filled.other_conversation_id}
        ada = next(r for r in rows if r["id"] == filled.conversation_id)
        assert ada["turns"] == 2
        assert ada["history_tokens"] > 0
        assert ada["budget"] == 128_000
        assert 0 < ada["budget_used"] < 1
        assert ada["last_activity"]

    def test_plain_output_when_piped(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        code, out, _ = cli("facts")
        assert code == 0
        lines = out.splitlines()
        assert lines[0] == "id\tkey\tvalue\ttype\tconfidence\tupdated"
        assert any(
            line.startswith("global:capital_of_portugal\tcapital_of_portugal\tLisbon\t")
            for line in lines
        )
        assert "\x1b[" not in out

    def test_tables_on_a_terminal(self) -> None:
        class Terminal(io.StringIO):
            def isatty(self) -> bool:
                return True

        stream = Terminal()
        Output(stream=stream).table("facts", ["key", "value"], [("city", "Lisbon")], [])
        drawn = stream.getvalue()
        assert "facts (1)" in drawn
        assert "city" in drawn
        assert "Lisbon" in drawn
        assert "─" in drawn  # rich draws the table

    def test_show(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        cid = sqlite_db[1].conversation_id
        code, out, _ = cli("show", cid)
        assert code == 0
        assert f"conversation {cid}" in out
        assert "user:      Hi, I'm Ada. Planning Lisbon in May." in out
        assert "assistant: Sunny, 22°C." in out
        data = cli.json("show", cid)
        assert [t["user"] for t in data["messages"]] == [
            "Hi, I'm Ada. Planning Lisbon in May.",
            "What's the weather like?",
        ]
        assert all(t["tokens"] > 0 for t in data["messages"])
        assert data["summary"] is None

    def test_facts_filters(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        assert len(cli.json("facts")) == 6
        ada = cli.json("facts", "--user", filled.user_id)
        assert {f["key"] for f in ada} == {"timezone", "diet"}
        assert [f["key"] for f in cli.json("facts", "--type", "user_preference")] == ["diet"]
        assert [f["value"] for f in cli.json("facts", "--scope", "global", "--filter", "utc")] == [
            "UTC"
        ]
        assert [f["key"] for f in cli.json("facts", "--agent", "travel")] == ["style"]

    def test_episodes_procedures_users(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        [episode] = cli.json("episodes", "--agent", "travel", "--outcome", "success")
        assert episode["id"] == filled.episode_id
        assert cli.json("episodes", "--outcome", "failure") == []
        [procedure] = cli.json("procedures")
        assert procedure["name"] == "weather lookup"
        users = cli.json("users")
        assert {u["display_name"] for u in users} == {"Ada", "Bob"}

    def test_working_memory(self, cli: Cli) -> None:
        assert cli.json("working") == [{"scope": "agent:travel", "entries": 2}]
        items = cli.json("working", "agent:travel")
        assert {i["key"]: i["value"] for i in items} == {"city": "Lisbon", "budget": 1200}

    def test_search(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        hits = cli.json("search", "Sintra")
        assert [(h["type"], h["id"]) for h in hits] == [("episode", sqlite_db[1].episode_id)]
        hits = cli.json("search", "timezone", "--user", sqlite_db[1].user_id, "--type", "facts")
        assert [h["record"]["value"] for h in hits] == ["Europe/Lisbon"]

    def test_stats_and_purge(self, cli: Cli) -> None:
        stats = cli.json("stats", "--namespaces")
        names = {row["namespace"] for row in stats["namespaces"]}
        assert "working:agent:travel" in names
        assert "conversations" in names
        assert stats["total"]["entries"] == sum(row["entries"] for row in stats["namespaces"])
        assert stats["total"]["bytes"] > 0
        assert cli.json("purge-expired") == {"removed": 0}


class TestProgress:
    """A progress bar is drawn on a terminal's standard error, and nothing when it is piped."""

    def test_terminal_and_pipe(self) -> None:
        class Terminal(io.StringIO):
            def isatty(self) -> bool:
                return True

        drawn = Terminal()
        with Output(stream=io.StringIO(), err=drawn).progress("importing", 3) as advance:
            for _ in range(3):
                advance(1)
        assert "importing" in drawn.getvalue()
        piped = io.StringIO()
        with Output(stream=io.StringIO(), err=piped).progress("importing", 3) as advance:
            advance(1)
        assert piped.getvalue() == ""


class TestExportImport:
    """A snapshot exported from one store imports into another, keeping its id unless --as."""

    def test_round_trip_through_a_pipe(
        self, sqlite_db: tuple[str, Filled], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store, filled = sqlite_db
        cid = filled.conversation_id
        exported = run("export", cid, "--store", store)
        assert exported.returncode == 0, exported.stderr
        assert json.loads(exported.stdout)["conversation_id"] == cid
        target = f"sqlite:///{tmp_path / 'copy.sqlite3'}"
        imported = run("import", "-", "--store", target, "--json", stdin=exported.stdout)
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout) == {"imported": [cid]}
        # The id is held now: a second import refuses rather than overwriting.
        again = tmp_path / "again.json"
        again.write_text(exported.stdout, encoding="utf-8")
        refused = in_process_error(capsys, "import", str(again), "--store", target)
        assert "already exists; pass --as NEW_ID" in refused
        # An empty --as is refused, not dropped for the snapshot's own id.
        with pytest.raises(SystemExit) as exited:
            main(["import", str(again), "--as", "", "--store", target])
        assert exited.value.code == 2
        assert "--as: must be a non-empty id" in capsys.readouterr().err

    def test_export_to_a_file_and_import_as_a_new_id(
        self, cli: Cli, sqlite_db: tuple[str, Filled], tmp_path: Path
    ) -> None:
        cid = sqlite_db[1].conversation_id
        snapshot = tmp_path / "snapshot.json"
        code, _, err = cli("export", cid, "-o", str(snapshot))
        assert code == 0
        assert "exported 1 conversation to" in err
        code, out, _ = cli("import", str(snapshot), "--as", "copy-1")
        assert code == 0
        assert out == "imported conversation copy-1\n"
        original = cli.json("show", cid)["messages"]
        assert [(t["user"], t["assistant"]) for t in cli.json("show", "copy-1")["messages"]] == [
            (t["user"], t["assistant"]) for t in original
        ]

    def test_bad_files(self, cli: Cli, tmp_path: Path) -> None:
        garbage = tmp_path / "garbage.json"
        garbage.write_text("{not json", encoding="utf-8")
        wrong = tmp_path / "wrong.json"
        wrong.write_text('{"turns": "no"}', encoding="utf-8")
        for name, message in (
            (str(tmp_path / "missing.json"), "no such file"),
            (str(tmp_path), "is a directory"),
            (str(garbage), "not JSON"),
            (str(wrong), "wrong.json"),
        ):
            code, _, err = cli("import", name)
            assert code == 1
            assert err.startswith("memlane: error: ")
            assert message in err
            assert len(err.splitlines()) == 1


class TestDelete:
    """``delete`` removes exactly what it names, asks first, and reports what was missing."""

    def test_by_id(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        ada_tz = f"user:{filled.user_id}:timezone"
        assert cli.json("delete", "facts", ada_tz, "global:capital_of_portugal", "--yes") == {
            "deleted": [ada_tz, "global:capital_of_portugal"],
            "not_found": [],
        }
        left = {f["id"] for f in cli.json("facts")}
        assert ada_tz not in left
        # The same key in other scopes is untouched.
        assert {"global:timezone", f"user:{filled.other_user_id}:timezone"} <= left
        assert len(left) == 4

    def test_every_kind(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        for kind, record_id in (
            ("episodes", filled.episode_id),
            ("procedures", filled.procedure_id),
            ("users", filled.other_user_id),
            ("conversations", filled.other_conversation_id),
        ):
            assert cli.json("delete", kind, record_id, "-y")["deleted"] == [record_id]
        assert cli.json("episodes") == []
        assert cli.json("procedures") == []
        assert [u["display_name"] for u in cli.json("users")] == ["Ada"]
        assert [c["id"] for c in cli.json("conversations")] == [filled.conversation_id]
        assert cli.json("delete", "working", "city", "--scope", "agent:travel", "-y")[
            "deleted"
        ] == ["city"]
        assert [i["key"] for i in cli.json("working", "agent:travel")] == ["budget"]

    def test_by_filter(self, cli: Cli, sqlite_db: tuple[str, Filled]) -> None:
        filled = sqlite_db[1]
        done = cli.json("delete", "facts", "--user", filled.user_id, "--yes")
        assert sorted(done["deleted"]) == sorted(
            [f"user:{filled.user_id}:timezone", f"user:{filled.user_id}:diet"]
        )
        assert len(cli.json("facts")) == 4

    @pytest.mark.parametrize(
        ("kind", "option", "value"),
        [
            ("conversations", "--user", "Ada"),
            ("procedures", "--agent", "travel"),
            ("users", "--scope", "user"),
            ("episodes", "--scope", "user"),
        ],
    )
    def test_a_filter_the_kind_does_not_have_deletes_nothing(
        self, cli: Cli, kind: str, option: str, value: str
    ) -> None:
        before = cli.json("stats")
        code, out, err = cli("delete", kind, option, value, "--yes")
        assert (code, out) == (1, "")
        assert_error_line(err, f"delete {kind} cannot be filtered by {option}")
        assert cli.json("stats") == before

    @pytest.mark.parametrize("argv", [["facts"], ["working", "--scope", "agent:travel"]])
    def test_an_empty_filter_is_a_usage_error(
        self, cli: Cli, argv: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        before = cli.json("stats")
        with pytest.raises(SystemExit) as exited:
            cli("delete", *argv, "--filter", "", "--yes")
        assert exited.value.code == 2
        assert "--filter: must not be empty" in capsys.readouterr().err
        assert cli.json("stats") == before

    def test_unknown_and_malformed_ids(self, cli: Cli) -> None:
        code, out, err = cli("delete", "episodes", "nope", "--yes")
        assert code == 1
        assert out == "deleted 0 episodes\n"
        assert "not found: nope" in err
        for bad in ("nope", "global:", "planet:x:y", "user:onlyscope"):
            code, _, err = cli("delete", "facts", bad, "--yes")
            assert code == 1
            assert "not a fact id" in err
        assert len(cli.json("facts")) == 6
        code, _, err = cli("delete", "facts")
        assert code == 1
        assert "needs ids, a filter" in err

    def test_asks_for_confirmation(self, sqlite_db: tuple[str, Filled], cli: Cli) -> None:
        refused = run("delete", "facts", "global:timezone", "--store", sqlite_db[0])
        assert_one_line_error(refused, "refusing to delete 1 fact without --yes")
        assert "global:timezone" in {f["id"] for f in cli.json("facts")}


class TestStoreErrors:
    """A store that is missing, unusable or unreachable is one line and exit 1."""

    def test_a_missing_sqlite_file_is_not_created(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        missing = tmp_path / "typo.sqlite3"
        err = in_process_error(capsys, "conversations", "--store", f"sqlite:///{missing}")
        assert "no such file" in err
        assert not missing.exists()

    def test_unusable_stores(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        not_a_db = tmp_path / "notes.txt"
        not_a_db.write_text("hello " * 200, encoding="utf-8")
        for store, message in (
            (f"sqlite:///{tmp_path}", "is a directory"),
            (f"sqlite:///{not_a_db}", "not a memlane store"),
            ("redis://localhost", "unknown kind of store 'redis'"),
            ("nothing", "is not a URL"),
            (f"file:///{not_a_db}", "is a file, not a directory"),
        ):
            assert main(["facts", "--store", store]) == 1
            err = capsys.readouterr().err
            assert err.startswith("memlane: error: "), err
            assert message in err
            assert len(err.splitlines()) == 1

    def test_no_store_at_all(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.delenv("MEMLANE_BACKEND", raising=False)
        assert "no store given: pass --store" in in_process_error(capsys, "facts")
        assert main(["facts", "--store", "memory://", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []

    def test_an_unreachable_database_server(self, capsys: pytest.CaptureFixture[str]) -> None:
        url = "postgresql://memlane@127.0.0.1:9/nowhere"
        assert "PostgreSQL" in in_process_error(capsys, "facts", "--store", url)

    def test_an_unknown_conversation(
        self, sqlite_db: tuple[str, Filled], capsys: pytest.CaptureFixture[str]
    ) -> None:
        err = in_process_error(capsys, "show", "nope", "--store", sqlite_db[0])
        assert "no conversation 'nope'" in err

    def test_the_environment_names_the_store(
        self,
        sqlite_db: tuple[str, Filled],
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        path = sqlite_db[0].removeprefix("sqlite:///")
        monkeypatch.setenv("MEMLANE_BACKEND", "sqlite")
        monkeypatch.setenv("MEMLANE_SQLITE_PATH", path)
        assert main(["users", "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)) == 2
        monkeypatch.setenv("MEMLANE_BACKEND", "cassandra")
        assert main(["users"]) == 1
        assert "MEMLANE_BACKEND" in capsys.readouterr().err


@pytest.mark.postgres
def test_postgresql_store(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command reads and deletes on PostgreSQL through ``--store postgresql://…``."""
    schema = f"cli_{os.getpid()}"
    monkeypatch.setenv("MEMLANE_POSTGRES_SCHEMA", schema)
    _database_round_trip(postgres_server.url, capsys, "postgres", schema)


@pytest.mark.mongodb
@pytest.mark.filterwarnings("ignore::memlane.stores.IndexFallbackWarning")  # FerretDB's indexes
def test_mongodb_store(
    mongodb_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command reads and deletes on a MongoDB-wire server through ``--store mongodb://…``."""
    collection = f"cli_{os.getpid()}"
    monkeypatch.setenv("MEMLANE_MONGODB_COLLECTION", collection)
    _database_round_trip(mongodb_server.url, capsys, "mongodb", collection)


def _database_round_trip(
    url: str, capsys: pytest.CaptureFixture[str], kind: str, place: str
) -> None:
    import asyncio

    from conftest import drop_server_place
    from memlane.cli.store import settings_for
    from memlane.config import create_store

    store = create_store(settings_for(url))
    store.initialize()
    try:
        filled = fill(MemoryManager(store=store, long_term=True))
        cli = Cli(capsys, url)
        assert len(cli.json("facts")) == 6
        assert {c["id"] for c in cli.json("conversations")} == {
            filled.conversation_id,
            filled.other_conversation_id,
        }
        assert cli.json("show", filled.conversation_id)["turns"] == 2
        assert cli.json("delete", "users", filled.user_id, "--yes")["deleted"] == [filled.user_id]
        assert [u["display_name"] for u in cli.json("users")] == ["Bob"]
        assert cli.json("search", "chicago", "--type", "facts")[0]["record"]["scope_name"] == "Bob"
        forgotten = cli.json("forget-user", "email:bob@example.com", "--yes")
        assert forgotten["user_ids"] == [filled.other_user_id]
        assert forgotten["facts"] == [f"user:{filled.other_user_id}:timezone"]
        assert cli.json("users") == []
        assert cli.json("stats")["users"] == 0
    finally:
        store.close()
        asyncio.run(drop_server_place(kind, url, place))
