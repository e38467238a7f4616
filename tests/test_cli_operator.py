"""The ``memlane`` command as an operator meets it: reads that never write, a server that
starts only where it should, search that finds, edits, and forgetting a person.

Commands run in-process through ``main``; a subprocess only where a real server matters.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient

from memlane import MemoryManager, SQLiteStore
from memlane.cli import main
from memlane.longterm import LongTermMemory
from operator_data import Filled, fill
from serve_process import Served

READ_ONLY_COMMANDS = [
    ["stats"],
    ["stats", "--namespaces"],
    ["conversations"],
    ["show", "c1"],
    ["export", "c1"],
    ["facts"],
    ["episodes"],
    ["procedures"],
    ["users"],
    ["working"],
    ["working", "agent:travel"],
    ["search", "lisbon weather"],
]


class Terminal(io.StringIO):
    """Standard input typed at a terminal: ``isatty()`` and the answers given."""

    def isatty(self) -> bool:
        return True


class Cli:
    """``main`` in-process on one store; returns (status, stdout, stderr)."""

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


def one_error_line(err: str, *parts: str) -> str:
    """``err`` is one ``memlane: error: ...`` line holding every part; the line."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("memlane: error: "), err
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``main(argv)`` is a usage error (exit 2); its message."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage: memlane" in err
    return err


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Filled, Path]:
    """A SQLite store with one of every record; Ada's conversation recorded on her."""
    path = tmp_path / "memory.sqlite3"
    sqlite = SQLiteStore(str(path))
    manager = MemoryManager(store=sqlite, long_term=True)
    filled = fill(manager)
    assert isinstance(manager.long_term, LongTermMemory)
    manager.long_term.record_user_activity(filled.user_id, conversation_id=filled.conversation_id)
    sqlite.close()
    return f"sqlite:///{path}", filled, path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], store: tuple[str, Filled, Path]) -> Cli:
    return Cli(capsys, store[0])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TestReadOnlyCommands:
    """Read-only commands never write: a file that is not a memlane store is refused, unchanged."""

    @pytest.fixture(params=["foreign", "empty"])
    def not_a_store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Path:
        path = tmp_path / f"{request.param}.sqlite3"
        if request.param == "foreign":
            with sqlite3.connect(path) as db:
                db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
                db.execute("INSERT INTO invoices (total) VALUES (12.5)")
            db.close()
        else:
            path.touch()
        return path

    @pytest.mark.parametrize("argv", READ_ONLY_COMMANDS, ids=" ".join)
    def test_refused_and_byte_identical(
        self, argv: list[str], not_a_store: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        before = _digest(not_a_store)
        siblings = sorted(p.name for p in not_a_store.parent.iterdir())
        assert main([*argv, "--store", f"sqlite:///{not_a_store}"]) == 1
        one_error_line(capsys.readouterr().err, str(not_a_store))
        assert _digest(not_a_store) == before
        assert sorted(p.name for p in not_a_store.parent.iterdir()) == siblings

    def test_a_real_store_is_not_written_either(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        url, filled, path = store
        before = _digest(path)
        for argv in READ_ONLY_COMMANDS:
            argv = [filled.conversation_id if a == "c1" else a for a in argv]
            assert main([*argv, "--store", url]) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert _digest(path) == before


class TestServe:
    """``serve`` refuses a missing store, a bad or busy port, and says where its token is."""

    def test_a_missing_store_needs_create(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        missing = tmp_path / "typo.sqlite3"
        code = main(["serve", "--store", f"sqlite:///{missing}", "--token", "t" * 20])
        assert code == 1
        one_error_line(capsys.readouterr().err, str(missing), "no such file")
        assert not missing.exists()

    @pytest.mark.parametrize(
        "argv",
        [
            ["serve", "--token", "t" * 20],
            ["purge-expired"],
            ["delete", "facts", "--all", "--yes"],
            ["facts", "set", "k", "v", "--scope", "global"],
        ],
        ids=" ".join,
    )
    def test_an_empty_file_is_no_store_either(
        self,
        argv: list[str],
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        def serving(*args: object, **kwargs: object) -> None:
            raise AssertionError("memlane serve served an empty file")

        monkeypatch.setattr(uvicorn.Server, "run", serving)
        empty = tmp_path / "touched.sqlite3"
        empty.touch()
        assert main([*argv, "--store", f"sqlite:///{empty}"]) == 1
        one_error_line(capsys.readouterr().err, str(empty), "empty file")
        assert empty.read_bytes() == b""
        assert [p.name for p in tmp_path.iterdir()] == [empty.name]

    @pytest.mark.parametrize("token", ["a&b=c#d+e f%20", "tökén/?;"])
    def test_the_printed_url_signs_in_with_any_chosen_token(
        self,
        token: str,
        store: tuple[str, Filled, Path],
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        served: list[Any] = []

        def run(server: uvicorn.Server, sockets: list[socket.socket]) -> None:
            served.append(server.config.app)

        monkeypatch.setattr(uvicorn.Server, "run", run)
        for name in ("memlane.audit", "memlane.server"):
            # serve adds a handler on this test's standard error; later tests must not log there.
            logger = logging.getLogger(name)
            monkeypatch.setattr(logger, "handlers", list(logger.handlers))
            monkeypatch.setattr(logger, "level", logger.level)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        assert main(["serve", "--store", store[0], "--port", str(port), "--token", token]) == 0
        printed = re.search(r"memlane serve: http://127\.0\.0\.1:\d+(\S+)", capsys.readouterr().err)
        assert printed is not None
        with TestClient(served[0], base_url=f"http://127.0.0.1:{port}") as client:
            page = client.get(printed.group(1))
            assert page.status_code == 200
            # Signed in: the page itself needs the token, now from the cookie.
            assert page.url.path == "/memories"
            assert "<title>memlane · memories</title>" in page.text

    @pytest.mark.parametrize("port", ["99999", "0", "http"])
    def test_a_bad_port_is_a_usage_error(
        self, port: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert "--port" in usage_error(capsys, "serve", "--store", "memory://", "--port", port)

    def test_a_port_in_use(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            port = busy.getsockname()[1]
            code = main(["serve", "--store", store[0], "--port", str(port), "--token", "t" * 20])
        assert code == 1
        err = capsys.readouterr().err
        one_error_line(err, f"127.0.0.1:{port}", "in use")
        assert "http://" not in err

    def test_a_generated_token_is_said_to_be_on_standard_error(
        self, store: tuple[str, Filled, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("MEMLANE_SERVER_TOKEN", raising=False)
        with Served("--store", store[0], log=tmp_path / "serve.log") as served:
            token = served.page_url.rsplit("token=", 1)[1]
            assert httpx.get(served.page_url, follow_redirects=True).status_code == 200
            log = served.log()
        assert "the token was generated for this run and is printed only here" in log
        # Printed where it was announced, once, and never in the access log's lines.
        assert log.count(token) == 2
        assert "/memories?token=[redacted]" in log


class TestImport:
    """``import`` checks a snapshot before it opens or creates anything."""

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('{"foo": 1}', "no 'turns' list (keys found: 'foo'"),
            ("[]", "an empty list"),
            ('{"turns": []}', "no turns and no summary"),
            ('[{"turns": [{"user_prompt": 1}]}]', "user_prompt"),
            ('{"turns": [], "summary": "s", "conversation_id": 7}', "'conversation_id'"),
            ("12", "not a conversation snapshot"),
        ],
    )
    def test_bad_snapshots_create_nothing(
        self, text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        snapshot = tmp_path / "snapshot.json"
        snapshot.write_text(text, encoding="utf-8")
        target = tmp_path / "new.sqlite3"
        assert main(["import", str(snapshot), "--store", f"sqlite:///{target}"]) == 1
        one_error_line(capsys.readouterr().err, "snapshot.json", message)
        assert not target.exists()


class TestSearch:
    """``search`` covers every scope by default and takes a user by any name."""

    def test_every_scope_with_the_scope_shown(
        self, cli: Cli, store: tuple[str, Filled, Path]
    ) -> None:
        code, out, _ = cli("search", "lisbon weather")
        assert code == 0
        lines = out.splitlines()
        assert lines[0] == "type\tscope\tid\trecord"
        assert (
            f'fact\tuser Ada\tuser:{store[1].user_id}:timezone\ttimezone = "Europe/Lisbon"' in lines
        )
        assert any(line.startswith("procedure\t\t") for line in lines)

    @pytest.mark.parametrize("user", ["telegram:1001", "Ada", "ada"])
    def test_a_user_by_channel_id_or_name(
        self, cli: Cli, store: tuple[str, Filled, Path], user: str
    ) -> None:
        hits = cli.json("search", "timezone", "--user", user, "--type", "facts")
        assert hits[0]["id"] == f"user:{store[1].user_id}:timezone"

    def test_an_ambiguous_or_unknown_user(self, cli: Cli, store: tuple[str, Filled, Path]) -> None:
        sqlite = SQLiteStore(str(store[2]))
        other = LongTermMemory(sqlite).identify_user("slack", "U7", display_name="Ada")
        sqlite.close()
        code, _, err = cli("search", "timezone", "--user", "Ada")
        assert code == 1
        one_error_line(err, "'Ada' names 2 users", store[1].user_id, other.id)
        code, _, err = cli("search", "timezone", "--user", "Zed")
        assert code == 1
        one_error_line(err, "no user 'Zed'")


class TestForgetUser:
    """``forget-user`` lists every record of a person, asks once, and deletes them all."""

    def test_dry_run_lists_and_keeps(self, cli: Cli, store: tuple[str, Filled, Path]) -> None:
        filled = store[1]
        report = cli.json("forget-user", "telegram:1001", "--dry-run")
        assert report["dry_run"] is True
        assert report["user_ids"] == [filled.user_id]
        assert sorted(report["facts"]) == sorted(
            [f"user:{filled.user_id}:timezone", f"user:{filled.user_id}:diet"]
        )
        assert report["episodes"] == [filled.episode_id]
        assert report["identifiers"] == ["telegram:1001"]
        assert report["conversations"] == [filled.conversation_id]
        assert len(cli.json("facts")) == 6
        assert len(cli.json("users")) == 2

    def test_refuses_without_a_terminal(self, cli: Cli) -> None:
        code, _, err = cli("forget-user", "Ada")
        assert code == 1
        one_error_line(err, "refusing to forget user", "--yes")
        assert len(cli.json("users")) == 2

    def test_answer_no(self, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
        code, out, err = cli("forget-user", "Ada")
        assert (code, out) == (0, "nothing deleted\n")
        assert "about to delete user" in err
        assert "audit" not in err
        assert len(cli.json("users")) == 2

    def test_answer_yes(
        self, cli: Cli, store: tuple[str, Filled, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        filled = store[1]
        monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
        code, out, err = cli("forget-user", "Ada")
        assert code == 0, err
        listed = err.index(f"fact: user:{filled.user_id}:diet")
        assert listed < err.index("forget user")  # listed before the question
        assert len([line for line in err.splitlines() if "audit" in line]) == 1
        assert out.splitlines()[0] == (
            f"deleted 1 user ({filled.user_id}), 2 facts, 1 episode, 1 channel identifier, "
            "1 conversation"
        )
        assert [u["display_name"] for u in cli.json("users")] == ["Bob"]
        assert {f["scope_id"] for f in cli.json("facts", "--scope", "user")} == {
            filled.other_user_id
        }
        assert cli.json("episodes") == []
        assert [c["id"] for c in cli.json("conversations")] == [filled.other_conversation_id]
        code, _, err = cli("forget-user", "Ada", "--yes")
        assert code == 1
        one_error_line(err, "no user 'Ada'")


class TestEditing:
    """``facts set``, ``working set`` and ``users rename`` change one record each."""

    def test_facts_set(self, cli: Cli, store: tuple[str, Filled, Path]) -> None:
        filled = store[1]
        row = cli.json("facts", "set", "budget", "1200", "--scope", "user", "--user", "Ada")
        assert (row["id"], row["value"], row["status"]) == (
            f"user:{filled.user_id}:budget",
            1200,
            "created",
        )
        code, out, err = cli("facts", "set", "note", "hello world", "--scope", "global")
        assert code == 0
        assert out == 'created fact global:note = "hello world"\n'
        assert "memlane: audit:" in err
        row = cli.json(
            "facts", "set", "cfg", '{"a": [1, 2]}', "--scope", "agent", "--agent", "travel",
            "--confidence", "0.4",
        )  # fmt: skip
        assert (row["value"], row["confidence"]) == ({"a": [1, 2]}, 0.4)
        assert len(cli.json("facts")) == 9
        assert {f["key"] for f in cli.json("facts", "--user", filled.user_id)} == {
            "timezone", "diet", "budget",
        }  # fmt: skip

    def test_facts_set_mistakes(self, cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
        for argv, message in (
            (["facts", "set", "x", "1"], "needs --scope"),
            (["facts", "set", "x"], "facts set KEY VALUE"),
            (["facts", "set", "x", "1", "--scope", "user"], "needs --user ID"),
            (["facts", "--confidence", "0.5"], "--confidence goes with facts set"),
        ):
            code, _, err = cli(*argv)
            assert code == 1
            one_error_line(err, message)
        assert "--confidence" in usage_error(capsys, "facts", "set", "x", "1", "--confidence", "2")

    def test_working_set_and_users_rename(self, cli: Cli, store: tuple[str, Filled, Path]) -> None:
        row = cli.json("working", "set", "agent:travel", "city", "Porto", "--importance", "0.9")
        assert (row["value"], row["importance"]) == ("Porto", 0.9)
        assert cli.json("working", "set", "agent:new", "n", "3")["value"] == 3
        assert {i["key"]: i["value"] for i in cli.json("working", "agent:travel")} == {
            "city": "Porto",
            "budget": 1200,
        }
        renamed = cli.json("users", "rename", "telegram:1001", "Ada Lovelace")
        assert (renamed["id"], renamed["display_name"]) == (store[1].user_id, "Ada Lovelace")
        code, out, _ = cli("users", "rename", "Bob", "Robert")
        assert (code, out) == (0, f"renamed user {store[1].other_user_id} to Robert\n")


class TestSmaller:
    """Totals, usage errors, delete's questions, plain piped output and one-line errors."""

    def test_stats_totals(self, cli: Cli) -> None:
        assert cli.json("stats") == {
            "facts": 6,
            "episodes": 1,
            "procedures": 1,
            "users": 2,
            "conversations": 2,
            "turns": 3,
            "working": 2,
            "bytes": cli.json("stats")["bytes"],
        }
        code, out, _ = cli("stats")
        assert code == 0
        assert "facts\t6" in out.splitlines()
        assert "namespace" not in out

    @pytest.mark.parametrize("command", ["conversations", "facts", "search x", "users"])
    def test_limit_zero_is_a_usage_error(
        self, command: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        err = usage_error(capsys, *command.split(), "--limit", "0", "--store", "memory://")
        assert "must be 1 or more, got 0" in err

    def test_delete_lists_then_asks(
        self, cli: Cli, store: tuple[str, Filled, Path], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cid = store[1].other_conversation_id
        monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
        code, out, err = cli("delete", "conversations", cid)
        assert (code, out) == (0, "nothing deleted\n")
        assert err.splitlines()[:2] == [
            "about to delete 1 conversation:",
            f"  {cid}  1 turn, last activity {cli.json('show', cid)['last_activity']}",
        ]
        monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
        code, out, _ = cli("delete", "conversations", cid)
        assert (code, out) == (0, "deleted 1 conversation\n")
        code, out, _ = cli("delete", "facts", "--scope", "global", "--yes")
        assert (code, out) == (0, "deleted 2 facts\n")
        code, out, err = cli("delete", "users", store[1].other_user_id, "--yes")
        assert (code, out) == (0, "deleted 1 user\n")
        assert "memlane forget-user USER deletes a person entirely" in err

    def test_show_marks_summarised_turns(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "summarised.sqlite3"
        sqlite = SQLiteStore(str(path))
        manager = MemoryManager(
            store=sqlite,
            max_conversation_tokens=300,
            summarize_threshold=120,
            summarizer=lambda turns: "the earlier turns, briefly",
        )
        cid = manager.new_conversation()
        for n in range(8):
            manager.add_turn(cid, f"question {n} " + "word " * 20, f"answer {n}")
        sqlite.close()
        code, out, _ = Cli(capsys, f"sqlite:///{path}")("show", cid)
        assert code == 0
        lines = out.splitlines()
        # The conversation's own budget, not the default of the command's manager.
        assert re.fullmatch(r"history \d+/300 tokens, \d turns kept", lines[1])
        assert "  the earlier turns, briefly" in lines
        turn_lines = [line for line in lines if line.startswith("[turn ")]
        assert len(turn_lines) == 8
        assert turn_lines[0].endswith("(summarised: in the summary, not sent)")
        assert not turn_lines[-1].endswith(")")
        assert not {"░", "█"} & set(out)

    def test_sorting_and_dates(self, cli: Cli, capsys: pytest.CaptureFixture[str]) -> None:
        keys = [f["key"] for f in cli.json("facts", "--sort", "key", "--desc")]
        assert keys == sorted(keys, key=str.casefold, reverse=True)
        assert [u["display_name"] for u in cli.json("users", "--sort", "display_name")] == [
            "Ada",
            "Bob",
        ]
        assert [c["turns"] for c in cli.json("conversations", "--sort", "turns")] == [1, 2]
        # The episode ended on 2026-05-01: a date alone covers the whole day.
        assert len(cli.json("episodes", "--since", "2026-05-01", "--until", "2026-05-01")) == 1
        assert cli.json("episodes", "--until", "2026-04-30") == []
        assert cli.json("procedures", "--since", "2999-01-01T00:00+02:00") == []
        assert "--sort" in usage_error(capsys, "facts", "--sort", "nope", "--store", "memory://")
        assert "not a date or time: 'May'" in usage_error(
            capsys, "users", "--since", "May", "--store", "memory://"
        )

    def test_piped_conversations_have_no_bars(self, cli: Cli) -> None:
        code, out, _ = cli("conversations")
        assert code == 0
        assert "% of 128000" in out
        assert not {"░", "█"} & set(out)

    def test_no_store_given(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.delenv("MEMLANE_BACKEND", raising=False)
        assert main(["facts"]) == 1
        line = one_error_line(capsys.readouterr().err, "no store given", "--store URL")
        assert "(" not in line

    def test_mongodb_unreachable_is_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["facts", "--store", "mongodb://127.0.0.1:1/"]) == 1
        one_error_line(capsys.readouterr().err, "MongoDB", "127.0.0.1:1")


@pytest.mark.postgres
def test_postgresql_without_memlane_tables_is_refused_untouched(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only command on a PostgreSQL schema memlane never made creates nothing there."""
    import asyncio

    import asyncpg

    schema = f"cli_ro_{os.getpid()}"
    monkeypatch.setenv("MEMLANE_POSTGRES_SCHEMA", schema)

    async def tables() -> list[str]:
        con = await asyncpg.connect(postgres_server.url)
        try:
            rows = await con.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
                schema,
            )
            names = await con.fetch(
                "SELECT schema_name FROM information_schema.schemata WHERE schema_name = $1",
                schema,
            )
        finally:
            await con.close()
        return [r["table_name"] for r in rows] + [f"schema {r['schema_name']}" for r in names]

    for argv in (["facts"], ["stats"], ["search", "lisbon"]):
        assert main([*argv, "--store", postgres_server.url]) == 1
        one_error_line(capsys.readouterr().err, "PostgreSQL")
    assert asyncio.run(tables()) == []
