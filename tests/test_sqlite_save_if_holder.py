"""A conditional write on SQLite reads its key's holder once and skips the deletes that could
find nothing: no holder at all (a new turn's key), or the entry itself (an update in place).

Held to the statements it replaced: a reference table that runs both deletes on every write
must end with the same rows, at the same ``seq`` (insertion order), after any sequence of
writes, moves between namespaces, expiries and deletes; on both implementations.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import require_rust_core
from memlane._pure import store as pure

NAMESPACES = ["a", "b"]
ENTRY_IDS = ["e1", "e2", "e3"]
KEYS = ["k1", "k2"]
VERSIONS = [None, 1, 2, 3]
EXPIRY_OFFSETS = [None, -5.0, 5.0]


class FormerSqliteTable(pure.SqliteTable):
    """The conditional write as it was: the live holder's version, then both deletes always."""

    def _check_and_upsert(
        self,
        conn: sqlite3.Connection,
        namespace: str,
        row: pure.Row,
        expected_version: int | None,
        now: float,
    ) -> bool:
        found = conn.execute(
            "SELECT version FROM memory_entries WHERE namespace = ? AND key = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (namespace, row[2], now),
        ).fetchone()
        won = (None if found is None else found[0]) == expected_version
        if won:
            self._upsert(conn, namespace, row)
        return won


def stored(path: Path) -> list[tuple[Any, ...]]:
    """Every row of a file with its ``seq``, read by a connection of its own."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT seq, namespace, entry_id, key, content, expires_at, version "
            "FROM memory_entries ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()


def row(
    entry_id: str, key: str, version: int, expires_at: float | None, text: str = "x"
) -> pure.Row:
    return (
        entry_id,
        "conversation",
        key,
        f'{{"text":"{text}"}}',
        "{}",
        "2024-01-01T00:00:00+00:00",
        expires_at,
        0.5,
        version,
    )


class HolderMachine(RuleBasedStateMachine):
    """The Rust table, its twin and the former statements, each on its own file."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="memlane-holder-"))
        self.paths = {name: self.dir / f"{name}.sqlite3" for name in ("rust", "pure", "former")}
        self.tables: dict[str, Any] = {}
        self.open()
        self.now = 1_000.0
        self.serial = 0

    def open(self) -> None:
        self.tables = {
            "rust": require_rust_core().SqliteTable(str(self.paths["rust"])),
            "pure": pure.SqliteTable(str(self.paths["pure"])),
            "former": FormerSqliteTable(str(self.paths["former"])),
        }

    def teardown(self) -> None:
        for table in self.tables.values():
            table.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule()
    def same_seqs_in_the_closed_files(self) -> None:
        # Read with the tables closed: the Rust table's SQLite is a library of its own, and two
        # SQLite libraries in one process must not hold the same file open at once (POSIX
        # locks are the process's, so one library's close drops the other's).
        for table in self.tables.values():
            table.close()
        former = stored(self.paths["former"])
        assert stored(self.paths["rust"]) == former
        assert stored(self.paths["pure"]) == former
        self.open()

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        entry_id=st.sampled_from(ENTRY_IDS),
        key=st.sampled_from(KEYS),
        expected=st.sampled_from(VERSIONS),
        offset=st.sampled_from(EXPIRY_OFFSETS),
    )
    def save_if(
        self,
        namespace: str,
        entry_id: str,
        key: str,
        expected: int | None,
        offset: float | None,
    ) -> None:
        self.serial += 1
        version = 1 if expected is None else expected + 1
        expires_at = None if offset is None else self.now + offset
        written = row(entry_id, key, version, expires_at, str(self.serial))
        won = {
            name: table.save_if(namespace, written, expected, self.now)
            for name, table in self.tables.items()
        }
        assert len(set(won.values())) == 1, won

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        entry_ids=st.lists(st.sampled_from(ENTRY_IDS), min_size=1, max_size=3),
        expected=st.sampled_from(VERSIONS),
    )
    def save_if_many(self, namespace: str, entry_ids: list[str], expected: int | None) -> None:
        self.serial += 1
        version = 1 if expected is None else expected + 1
        ops = [
            (namespace, row(entry_id, KEYS[i % 2], version, None, str(self.serial)), expected, now)
            for i, entry_id in enumerate(entry_ids)
            for now in [self.now]
        ]
        won = {name: table.save_if_many(ops) for name, table in self.tables.items()}
        assert won["rust"] == won["pure"] == won["former"], won

    @rule(namespace=st.sampled_from(NAMESPACES), entry_id=st.sampled_from(ENTRY_IDS))
    def delete(self, namespace: str, entry_id: str) -> None:
        deleted = {name: table.delete(namespace, entry_id) for name, table in self.tables.items()}
        assert len(set(deleted.values())) == 1, deleted

    @rule(step=st.sampled_from([1.0, 10.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @invariant()
    def same_rows_in_the_same_order(self) -> None:
        for namespace in NAMESPACES:
            former = self.tables["former"].load(namespace, self.now)
            assert self.tables["rust"].load(namespace, self.now) == former
            assert self.tables["pure"].load(namespace, self.now) == former


class TestTheHolderReadOnceWritesWhatBothDeletesWrote(HolderMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust, twin and the former statements keep the same rows at the same seq."""

    # Each example opens three files (schema, checkpoint thread) and reopens them on the
    # closed-file rule: a quarter of the suite's default examples keeps this under ~20 s.
    settings = settings(max_examples=max(settings().max_examples // 4, 10))


@pytest.mark.parametrize("kind", ["rust", "pure"])
class TestEachCase:
    """The four holders a conditional write can find, one by one."""

    @pytest.fixture
    def table(self, kind: str, tmp_path: Path) -> Iterator[Any]:
        path = str(tmp_path / "t.sqlite3")
        table = require_rust_core().SqliteTable(path) if kind == "rust" else pure.SqliteTable(path)
        yield table
        table.close()

    def test_no_holder_writes_and_moves_the_entry_from_another_namespace(self, table: Any) -> None:
        assert table.save_if("a", row("e1", "k1", 1, None, "first"), None, 0.0)
        assert table.save_if("b", row("e1", "k2", 1, None, "moved"), None, 0.0)
        assert table.load("a", 0.0) == []
        assert [r[3] for r in table.load("b", 0.0)] == ['{"text":"moved"}']

    def test_the_entry_itself_is_updated_in_place(self, table: Any) -> None:
        assert table.save_if("a", row("e1", "k1", 1, None, "one"), None, 0.0)
        assert table.save_if("a", row("e2", "k2", 1, None, "two"), None, 0.0)
        assert table.save_if("a", row("e1", "k1", 2, None, "one again"), 1, 0.0)
        assert [(r[0], r[3], r[8]) for r in table.load("a", 0.0)] == [
            ("e1", '{"text":"one again"}', 2),
            ("e2", '{"text":"two"}', 1),
        ]

    def test_another_live_holder_is_replaced(self, table: Any) -> None:
        assert table.save_if("a", row("e1", "k1", 1, None, "old"), None, 0.0)
        assert not table.save_if("a", row("e2", "k1", 1, None, "lost"), None, 0.0)
        assert table.save_if("a", row("e2", "k1", 2, None, "new"), 1, 0.0)
        assert [(r[0], r[3]) for r in table.load("a", 0.0)] == [("e2", '{"text":"new"}')]

    def test_an_expired_holder_counts_as_none_and_is_replaced(self, table: Any) -> None:
        assert table.save_if("a", row("e1", "k1", 1, 10.0, "expiring"), None, 0.0)
        assert not table.save_if("a", row("e2", "k1", 2, None, "too late"), 1, 20.0)
        assert table.save_if("a", row("e2", "k1", 1, None, "after"), None, 20.0)
        assert table.load("a", 0.0) == table.load("a", 20.0)
        assert [(r[0], r[3]) for r in table.load("a", 20.0)] == [("e2", '{"text":"after"}')]
