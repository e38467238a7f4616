"""The Rust store tables against their pure-Python twins: same answers, same files, same errors.

Both take the typed arguments the public stores pass (``str`` ids, float times, rows of JSON
text); parity is about what those produce, not about error text for inputs the stores reject
before a table sees them.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import require_rust_core
from memlane._pure import store as pure

# Small pools so that operations collide: the same ids, keys and namespaces come up again.
NAMESPACES = ["a", "b", "c", "\ud800"]  # a lone surrogate is a legal str key in memory
ENTRY_IDS = ["e1", "e2", "e3", "e4", "e5"]
KEYS = [None, "k1", "k2", "", "\udcff"]
SQL_NAMESPACES = ["a", "b", "c"]
# Keys whose UTF-16 order differs from their code-point order ("\uffff" < "😀"), so that a
# range read ordering by anything but code points shows up.
SQL_KEYS = [None, "k1", "k2", "", "é", "\uffff", "😀"]
RANGE_BOUNDS = ["", "k", "k1", "k2", "é", "\uffff", "😀", "\U0010ffff"]
VERSIONS = [None, 0, 1, 2, 7]
# Expiry relative to the machine's clock; NaN never compares greater, so it is always expired.
EXPIRY_OFFSETS = [None, -5.0, 0.0, 1.0, 5.0, 60.0, math.nan]


def outcome(call: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """The result of a call, or the class and message of what it raised."""
    try:
        return ("ok", call(*args))
    except Exception as exc:  # noqa: BLE001 - the point is to compare any failure
        return ("raised", type(exc), str(exc))


def expiry(now: float, offset: float | None) -> float | None:
    return None if offset is None else now + offset


class MemoryTableMachine(RuleBasedStateMachine):
    """Drives the Rust and Python memory tables with the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.rust = require_rust_core().MemoryTable()
        self.py = pure.MemoryTable()
        self.now = 1_000.0
        self.serial = 0

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        entry_id=st.sampled_from(ENTRY_IDS),
        key=st.sampled_from(KEYS),
        offset=st.sampled_from(EXPIRY_OFFSETS),
    )
    def save(self, namespace: str, entry_id: str, key: str | None, offset: float | None) -> None:
        self.serial += 1
        payload = ("payload", self.serial)  # one object, given to both: identity is compared
        expires_at = expiry(self.now, offset)
        assert outcome(self.rust.save, namespace, entry_id, key, expires_at, payload) == outcome(
            self.py.save, namespace, entry_id, key, expires_at, payload
        )

    @rule(namespace=st.sampled_from(NAMESPACES))
    def load(self, namespace: str) -> None:
        rust, py = self.rust.load(namespace, self.now), self.py.load(namespace, self.now)
        assert len(rust) == len(py)
        assert all(r is p for r, p in zip(rust, py, strict=True))

    @rule(namespace=st.sampled_from(NAMESPACES), key=st.sampled_from(KEYS[1:]))
    def load_by_key(self, namespace: str, key: str) -> None:
        assert self.rust.load_by_key(namespace, key, self.now) is self.py.load_by_key(
            namespace, key, self.now
        )

    @rule(namespace=st.sampled_from(NAMESPACES), entry_id=st.sampled_from(ENTRY_IDS))
    def delete(self, namespace: str, entry_id: str) -> None:
        assert self.rust.delete(namespace, entry_id) == self.py.delete(namespace, entry_id)

    @rule(namespace=st.sampled_from(NAMESPACES))
    def clear(self, namespace: str) -> None:
        assert self.rust.clear(namespace) == self.py.clear(namespace)

    @rule()
    def cleanup_expired(self) -> None:
        assert self.rust.cleanup_expired(self.now) == self.py.cleanup_expired(self.now)

    @rule(step=st.sampled_from([0.0, 1.0, 5.0, 60.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @invariant()
    def same_namespaces_and_size(self) -> None:
        assert self.rust.namespaces() == self.py.namespaces()
        assert len(self.rust) == len(self.py)


class TestMemoryTablesAgreeOnAnyOperationSequence(MemoryTableMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust and Python memory tables return the same objects, counts and namespaces, step by step."""


rows = st.tuples(
    st.sampled_from(ENTRY_IDS),
    st.sampled_from(["long_term", "session"]),
    st.sampled_from(SQL_KEYS),
    st.text(max_size=4),  # surrogates included: both raise the same UnicodeEncodeError
    st.sampled_from(["{}", '{"a":1}']),
    st.sampled_from(["2024-01-01T00:00:00+00:00", "2025-06-30T12:00:00.5+02:00"]),
    st.sampled_from(EXPIRY_OFFSETS),
    st.sampled_from([0.0, 0.5, 1.0, 1.5, -0.25]),  # 1.5 and -0.25 break the CHECK
    st.sampled_from([0, 1, 7]),
)


class SqliteTableMachine(RuleBasedStateMachine):
    """Drives a Rust and a Python SQLite table, each on its own file, with the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="memlane-twins-"))
        self.rust = require_rust_core().SqliteTable(str(self.dir / "rust" / "memory.sqlite3"))
        self.py = pure.SqliteTable(str(self.dir / "python" / "memory.sqlite3"))
        self.now = 1_000.0

    def teardown(self) -> None:
        self.rust.close()
        self.py.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def row(self, drawn: tuple[Any, ...]) -> pure.Row:
        *head, offset, importance, version = drawn
        return (*head, expiry(self.now, offset), importance, version)

    @rule(namespace=st.sampled_from(SQL_NAMESPACES), drawn=rows)
    def save(self, namespace: str, drawn: tuple[Any, ...]) -> None:
        row = self.row(drawn)
        assert outcome(self.rust.save, namespace, row) == outcome(self.py.save, namespace, row)

    @rule(namespace=st.sampled_from(SQL_NAMESPACES), drawn=st.lists(rows, max_size=4))
    def save_many(self, namespace: str, drawn: list[tuple[Any, ...]]) -> None:
        batch = [self.row(d) for d in drawn]
        assert outcome(self.rust.save_many, namespace, batch) == outcome(
            self.py.save_many, namespace, batch
        )

    @rule(
        namespace=st.sampled_from(SQL_NAMESPACES),
        drawn=rows,
        expected=st.sampled_from(VERSIONS),
    )
    def save_if(self, namespace: str, drawn: tuple[Any, ...], expected: int | None) -> None:
        row = self.row(drawn)
        assert outcome(self.rust.save_if, namespace, row, expected, self.now) == outcome(
            self.py.save_if, namespace, row, expected, self.now
        )

    @rule(namespace=st.sampled_from(SQL_NAMESPACES), key=st.sampled_from(SQL_KEYS[1:]))
    def load_by_key(self, namespace: str, key: str) -> None:
        assert self.rust.load_by_key(namespace, key, self.now) == self.py.load_by_key(
            namespace, key, self.now
        )

    @rule(
        namespace=st.sampled_from(SQL_NAMESPACES),
        start=st.sampled_from(RANGE_BOUNDS),
        stop=st.sampled_from(RANGE_BOUNDS),
    )
    def load_range(self, namespace: str, start: str, stop: str) -> None:
        rust = self.rust.load_range(namespace, start, stop, self.now)
        assert rust == self.py.load_range(namespace, start, stop, self.now)
        keys = [r[2] for r in rust]
        assert keys == sorted(keys)
        assert all(start <= k < stop for k in keys)

    @rule(namespace=st.sampled_from(SQL_NAMESPACES), entry_id=st.sampled_from(ENTRY_IDS))
    def delete(self, namespace: str, entry_id: str) -> None:
        assert self.rust.delete(namespace, entry_id) == self.py.delete(namespace, entry_id)

    @rule(namespace=st.sampled_from(SQL_NAMESPACES))
    def clear(self, namespace: str) -> None:
        assert self.rust.clear(namespace) == self.py.clear(namespace)

    @rule()
    def cleanup_expired(self) -> None:
        assert self.rust.cleanup_expired(self.now) == self.py.cleanup_expired(self.now)

    @rule(step=st.sampled_from([0.0, 1.0, 5.0, 60.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @invariant()
    def same_rows_everywhere(self) -> None:
        assert self.rust.namespaces() == self.py.namespaces()
        for namespace in SQL_NAMESPACES:
            assert self.rust.load(namespace, self.now) == self.py.load(namespace, self.now)


class TestSqliteTablesAgreeOnAnyOperationSequence(SqliteTableMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust and Python SQLite tables return the same rows, counts and errors, step by step."""


def make_sqlite(backend: str, path: Path | str) -> Any:
    if backend == "rust":
        return require_rust_core().SqliteTable(str(path))
    return pure.SqliteTable(str(path))


def row(
    entry_id: str, key: str | None = None, importance: float = 0.5, version: int = 0
) -> pure.Row:
    return (
        entry_id,
        "long_term",
        key,
        '{"text":"hi"}',
        "{}",
        "2024-01-01T00:00:00+00:00",
        None,
        importance,
        version,
    )


class TestFilesAreInterchangeable:
    """A file written by either SQLite table reads back identically through the other."""

    @pytest.mark.parametrize(("writer", "reader"), [("rust", "python"), ("python", "rust")])
    @given(
        batches=st.lists(
            st.tuples(st.sampled_from(SQL_NAMESPACES), st.lists(rows, max_size=3)), max_size=6
        )
    )
    def test_rows_written_by_one_are_read_by_the_other(
        self, writer: str, reader: str, batches: list[tuple[str, list[tuple[Any, ...]]]]
    ) -> None:
        directory = Path(tempfile.mkdtemp(prefix="memlane-files-"))
        try:
            path = directory / "memory.sqlite3"
            written = make_sqlite(writer, path)
            for namespace, drawn in batches:
                batch = [
                    (*d[:6], None if d[6] is None else 1_000.0 + d[6], d[7], d[8]) for d in drawn
                ]
                # A refused batch is refused whole; what was saved before stays.
                with contextlib.suppress(sqlite3.IntegrityError, UnicodeEncodeError):
                    written.save_many(namespace, batch)
            expected = {ns: written.load(ns, 1_000.0) for ns in SQL_NAMESPACES}
            namespaces = written.namespaces()
            written.close()
            read = make_sqlite(reader, path)
            assert read.namespaces() == namespaces
            assert {ns: read.load(ns, 1_000.0) for ns in SQL_NAMESPACES} == expected
            read.close()
        finally:
            shutil.rmtree(directory)

    def test_both_create_the_same_schema(self, tmp_path: Path) -> None:
        schemas = []
        for backend in ("rust", "python"):
            path = tmp_path / backend / "memory.sqlite3"
            make_sqlite(backend, path).close()
            with sqlite3.connect(path) as conn:
                schemas.append(
                    conn.execute(
                        "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
                    ).fetchall()
                )
                assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            conn.close()
        assert schemas[0] == schemas[1]
        assert schemas[0]  # the table and its three indexes


class TestSaveManyIsAtomic:
    """A batch with one bad row fails whole on both tables, with the same error, writing nothing."""

    @pytest.mark.parametrize(
        "bad",
        [
            row("e3", importance=2.0),  # CHECK constraint
            ("e3", "long_term", None, "\ud800", "{}", "2024", None, 0.5, 0),  # not UTF-8 encodable
            ("e3", "long_term", "\udcff", "{}", "{}", "2024", None, 0.5, 0),  # a key, likewise
        ],
    )
    def test_bad_row_rolls_back_the_whole_batch(self, tmp_path: Path, bad: pure.Row) -> None:
        results = []
        for backend in ("rust", "python"):
            table = make_sqlite(backend, tmp_path / backend / "m.sqlite3")
            table.save("a", row("e0", key="k1"))
            failed = outcome(table.save_many, "a", [row("e1", key="k1"), row("e2"), bad, row("e4")])
            results.append((failed, table.load("a", 0.0), table.namespaces()))
            table.close()
        assert results[0] == results[1]
        failed, rows_left, _ = results[0]
        assert failed[0] == "raised"
        assert rows_left == [row("e0", key="k1")]

    def test_check_violation_is_sqlite3_integrity_error(self, tmp_path: Path) -> None:
        table = make_sqlite("rust", tmp_path / "m.sqlite3")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            table.save("a", row("e1", importance=2.0))
        table.close()


class TestFailuresAreTheTwinsExceptions:
    """Opening what cannot be a database raises the twin's exception class on both tables."""

    def test_a_directory_is_sqlite3_operational_error(self, tmp_path: Path) -> None:
        for backend in ("rust", "python"):
            with pytest.raises(sqlite3.OperationalError, match="unable to open database file"):
                make_sqlite(backend, tmp_path)

    @pytest.mark.parametrize(
        ("path", "error"),
        [("/dev/null/x.db", FileExistsError), ("/dev/null/a/x.db", NotADirectoryError)],
    )
    def test_an_uncreatable_directory_is_the_errno_oserror(
        self, path: str, error: type[OSError]
    ) -> None:
        for backend in ("rust", "python"):
            with pytest.raises(error) as info:
                make_sqlite(backend, path)
            assert info.value.filename.startswith("/dev/null")


class TestClosedTableRefusesWork:
    """After close, every operation raises ValueError('SqliteTable is closed'); close is idempotent."""

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_operations_after_close(self, tmp_path: Path, backend: str) -> None:
        table = make_sqlite(backend, tmp_path / "m.sqlite3")
        table.save("a", row("e1"))
        table.close()
        table.close()
        calls: list[tuple[str, tuple[Any, ...]]] = [
            ("save", ("a", row("e2"))),
            ("save_many", ("a", [row("e2")])),
            ("load", ("a", 0.0)),
            ("load_by_key", ("a", "k", 0.0)),
            ("save_if", ("a", row("e2", key="k"), None, 0.0)),
            ("load_range", ("a", "", "z", 0.0)),
            ("delete", ("a", "e1")),
            ("clear", ("a",)),
            ("cleanup_expired", (0.0,)),
            ("namespaces", ()),
        ]
        for method, args in calls:
            with pytest.raises(ValueError, match=r"^SqliteTable is closed$"):
                getattr(table, method)(*args)
        reopened = make_sqlite(backend, tmp_path / "m.sqlite3")
        assert reopened.load("a", 0.0) == [row("e1")]
        reopened.close()


class TestSqliteReleasesTheGil:
    """SQLite calls run without the GIL, so threads overlap and Python keeps running meanwhile."""

    def test_concurrent_savers_all_land(self, tmp_path: Path) -> None:
        table = make_sqlite("rust", tmp_path / "m.sqlite3")
        errors: list[BaseException] = []

        def saver(worker: int) -> None:
            try:
                for i in range(100):
                    table.save(f"ns{worker}", row(f"w{worker}-{i}", key=f"k{i}"))
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=saver, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(table.namespaces()) == ["ns0", "ns1", "ns2", "ns3"]
        for worker in range(4):
            ids = [r[0] for r in table.load(f"ns{worker}", 0.0)]
            assert ids == [f"w{worker}-{i}" for i in range(100)]
        table.close()

    def test_python_runs_while_a_save_waits_on_a_lock(self, tmp_path: Path) -> None:
        path = tmp_path / "m.sqlite3"
        table = make_sqlite("rust", path)
        # The lock is held from another process: POSIX locks taken by the interpreter's own
        # SQLite library would be invisible to the extension's bundled copy in this process.
        blocker = subprocess.Popen(
            [sys.executable, "-c", BLOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert blocker.stdout is not None
        assert blocker.stdin is not None
        assert blocker.stdout.readline() == "locked\n"
        done = threading.Event()

        def save() -> None:
            table.save("a", row("e1"))
            done.set()

        saver = threading.Thread(target=save)
        saver.start()
        # Were the GIL held while the save waits, this loop could not run until SQLite's
        # 30 s busy timeout expired, and the save would then fail.
        spins, deadline = 0, time.monotonic() + 0.3
        while time.monotonic() < deadline:
            spins += 1
        assert not done.is_set()
        assert spins > 1_000
        blocker.stdin.write("release\n")
        blocker.stdin.close()
        assert blocker.wait(timeout=10) == 0
        blocker.stdout.close()
        saver.join(timeout=10)
        assert done.is_set()
        assert table.load("a", 0.0) == [row("e1")]
        table.close()


BLOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
conn.close()
"""


class TestMemoryTableKeys:
    """The Rust memory table keys by exact str value, lone surrogates included, like a dict."""

    @given(
        keys=st.lists(
            st.text(alphabet=st.sampled_from(["a", "\ud800", "\udfff", "é", "\x00"]), max_size=3),
            max_size=8,
        )
    )
    def test_any_str_is_a_distinct_key(self, keys: list[str]) -> None:
        rust, py = require_rust_core().MemoryTable(), pure.MemoryTable()
        for i, key in enumerate(keys):
            for table in (rust, py):
                table.save(key, f"id{i}", key, None, i)
        assert rust.namespaces() == py.namespaces()
        for key in keys:
            assert rust.load_by_key(key, key, 0.0) == py.load_by_key(key, key, 0.0)
            assert rust.load(key, 0.0) == py.load(key, 0.0)

    def test_non_str_arguments_are_refused_by_type(self) -> None:
        table = require_rust_core().MemoryTable()
        with pytest.raises(TypeError):
            table.save(1, "e1", None, None, "x")
        with pytest.raises(TypeError):
            table.load_by_key("a", b"k", 0.0)
        assert len(table) == 0


class TestPayloadFinalisersMayUseTheTable:
    """A payload dropped by an overwrite, delete or clear may call back into the Rust table."""

    def test_finaliser_reenters_without_deadlock(self) -> None:
        table = require_rust_core().MemoryTable()
        seen: list[list[str]] = []

        class Payload:
            def __del__(self) -> None:
                seen.append(table.namespaces())

        table.save("a", "e1", "k", None, Payload())
        table.save("a", "e1", "k", None, "replacement")  # drops the first payload
        table.save("b", "e2", None, None, Payload())
        table.delete("b", "e2")
        table.save("c", "e3", None, 0.0, Payload())
        assert table.cleanup_expired(1.0) == 1
        assert seen == [["a"], ["a"], ["a"]]


LEGACY_SCHEMA = """
CREATE TABLE memory_entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    expires_at REAL,
    importance REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1)
);
CREATE INDEX memory_entries_namespace ON memory_entries (namespace, seq);
CREATE UNIQUE INDEX memory_entries_namespace_key
    ON memory_entries (namespace, key) WHERE key IS NOT NULL;
CREATE INDEX memory_entries_expires_at
    ON memory_entries (expires_at) WHERE expires_at IS NOT NULL;
"""
"""The schema of files written before entries had versions (no ``version`` column)."""


def make_legacy_file(path: Path, rows: list[tuple[str, str | None]]) -> None:
    """An SQLite file in the legacy schema holding ``(entry_id, key)`` rows of namespace "a"."""
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY_SCHEMA)
    conn.executemany(
        "INSERT INTO memory_entries (entry_id, namespace, scope, key, content, created_at) "
        "VALUES (?, 'a', 'long_term', ?, '{\"text\":\"hi\"}', '2024-01-01T00:00:00+00:00')",
        rows,
    )
    conn.commit()
    conn.close()


class TestLegacyFilesAreMigratedAlike:
    """A file without the version column opens on both tables, reads as version 0, and gains the column."""

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_open_migrates_and_reads_version_zero(self, tmp_path: Path, backend: str) -> None:
        path = tmp_path / "old.sqlite3"
        make_legacy_file(path, [("e1", "k1"), ("e2", None)])
        table = make_sqlite(backend, path)
        assert table.load("a", 0.0) == [row("e1", key="k1"), row("e2")]
        assert table.save_if("a", row("e3", key="k1", version=1), 0, 0.0) is True
        assert table.load("a", 0.0) == [row("e2"), row("e3", key="k1", version=1)]
        table.close()
        # Reopened by the other table: already migrated, the same rows.
        other = make_sqlite("python" if backend == "rust" else "rust", path)
        assert other.load("a", 0.0) == [row("e2"), row("e3", key="k1", version=1)]
        other.close()

    def test_both_migrate_to_the_same_columns(self, tmp_path: Path) -> None:
        columns = []
        for backend in ("rust", "python"):
            path = tmp_path / f"{backend}.sqlite3"
            make_legacy_file(path, [])
            make_sqlite(backend, path).close()
            with sqlite3.connect(path) as conn:
                columns.append(conn.execute("PRAGMA table_info(memory_entries)").fetchall())
            conn.close()
        assert columns[0] == columns[1]
        assert columns[0][-1][1:5] == ("version", "INTEGER", 1, "0")

    def test_processes_opening_one_legacy_file_at_once_all_succeed(self, tmp_path: Path) -> None:
        path = tmp_path / "old.sqlite3"
        make_legacy_file(path, [("e1", "k1")])
        # Half on each table: whichever adds the column, the others see it and carry on.
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), "rust" if i % 2 else "python"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(6)
        ]
        outputs = [p.communicate(timeout=60)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6
        assert outputs == ["0\n"] * 6


OPENER = """
import sys
from memlane import _backend
with _backend.use(sys.argv[2]):
    table = _backend.active.SqliteTable(sys.argv[1])
print(table.load_by_key("a", "k1", 0.0)[8])
table.close()
"""


class TestSaveIfIsOneTransaction:
    """save_if reads and writes in one transaction: a refused row changes nothing, a locked file is waited for."""

    def test_refused_winner_rolls_back(self, tmp_path: Path) -> None:
        results = []
        for backend in ("rust", "python"):
            table = make_sqlite(backend, tmp_path / backend / "m.sqlite3")
            table.save("a", row("e1", key="k1"))
            failed = outcome(table.save_if, "a", row("e2", key="k1", importance=2.0), 0, 0.0)
            results.append((failed[:2], table.load("a", 0.0)))
            # The transaction is over: the table still works.
            assert table.save_if("a", row("e2", key="k1", version=1), 0, 0.0) is True
            table.close()
        assert results[0] == results[1]
        assert results[0] == (("raised", sqlite3.IntegrityError), [row("e1", key="k1")])

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_waits_for_another_processs_transaction(self, tmp_path: Path, backend: str) -> None:
        path = tmp_path / "m.sqlite3"
        table = make_sqlite(backend, path)
        blocker = subprocess.Popen(
            [sys.executable, "-c", BLOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert blocker.stdout is not None
        assert blocker.stdin is not None
        assert blocker.stdout.readline() == "locked\n"
        won: list[bool] = []
        saver = threading.Thread(
            target=lambda: won.append(table.save_if("a", row("e1", key="k", version=1), None, 0.0))
        )
        saver.start()
        saver.join(timeout=0.2)
        assert saver.is_alive()  # blocked on the lock, not failed
        blocker.stdin.write("release\n")
        blocker.stdin.close()
        assert blocker.wait(timeout=10) == 0
        blocker.stdout.close()
        saver.join(timeout=30)
        assert won == [True]
        table.close()


class TestLoadRangeWalksTheIndex:
    """The twin's range read is served by the (namespace, key) index, with no sort step."""

    def test_query_plan(self, tmp_path: Path) -> None:
        table = pure.SqliteTable(str(tmp_path / "m.sqlite3"))
        conn = table._conn
        assert conn is not None
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        table.load_range("a", "k1", "k2", 0.0)
        conn.set_trace_callback(None)
        (select,) = [s for s in statements if s.startswith("SELECT")]
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {select}"))
        assert "USING INDEX memory_entries_namespace_key" in plan
        assert "TEMP B-TREE" not in plan
        table.close()
