"""A new SQLite file reuses a deleted highest ``seq`` safely, on both implementations.

New files number entries without ``AUTOINCREMENT`` (no ``sqlite_sequence`` write per insert),
so an entry saved after the highest one was deleted takes that entry's ``seq``. The search
index, the vectors and the vector mirror are all keyed on ``seq``: none of them may let the
deleted entry's text or vector reach the new one.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from memlane import _backend
from memlane.stores import EntryVector, SQLiteStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import text_digest, unit
from memlane.types import MemoryEntry

MODEL = "test:model"
NS = "facts"


_SEQS = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(json.dumps(dict(conn.execute("SELECT entry_id, seq FROM memory_entries").fetchall())))
"""


def seqs(path: Path) -> dict[str, int]:
    """Each entry id's ``seq``, read with plain SQL in another process: closing a second
    SQLite library's connection in this one would drop the store's POSIX locks on the file."""
    out = subprocess.run(
        [sys.executable, "-c", _SEQS, str(path)], check=True, capture_output=True, text=True
    )
    found: dict[str, int] = json.loads(out.stdout)
    return found


def searchable(text: str) -> MemoryEntry:
    return MemoryEntry(content={"text": text}, metadata={SEARCH_TEXT: text})


def attach(store: SQLiteStore, entry: MemoryEntry, vector: list[float]) -> None:
    item = EntryVector(entry.entry_id, text_digest(entry.metadata[SEARCH_TEXT]), vector)
    assert store.save_vectors(NS, MODEL, [item]) == 1


class TestSeqReuse:
    """The entry that takes a deleted entry's seq inherits none of its index rows."""

    def test_new_files_have_no_autoincrement(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "new.sqlite3"
        store = SQLiteStore(path)
        store.save(NS, searchable("first"))
        store.close()
        conn = sqlite3.connect(path)
        try:
            (sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'memory_entries'"
            ).fetchone()
            counters = conn.execute("SELECT name FROM sqlite_sequence").fetchall()
        finally:
            conn.close()
        assert "AUTOINCREMENT" not in sql
        assert ("memory_entries",) not in counters

    def test_reused_seq_finds_neither_old_text_nor_old_vector(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "reuse.sqlite3"
        store = SQLiteStore(path)
        reader = SQLiteStore(path)
        try:
            keep, old = searchable("kept words"), searchable("vanished alpha")
            store.save(NS, keep)
            store.save(NS, old)
            attach(store, keep, unit([1.0, 0.0, 0.0]))
            attach(store, old, unit([0.0, 1.0, 0.0]))
            # The reader's mirror holds the old vector before the delete.
            warm = reader.vector_search([NS], [0.0, 1.0, 0.0], model=MODEL, limit=5)
            assert warm[0].entry.entry_id == old.entry_id

            assert store.delete(NS, old.entry_id)
            plain = MemoryEntry(content={"text": "no search text"})
            store.save(NS, plain)
            assert seqs(path)[plain.entry_id] == 2  # the deleted entry's seq, taken again

            for s in (store, reader, SQLiteStore(path)):
                assert s.search([NS], "vanished alpha") == []
                hits = s.vector_search([NS], [0.0, 1.0, 0.0], model=MODEL, limit=5)
                assert [h.entry.entry_id for h in hits] == [keep.entry_id]
                assert s.missing_vectors([NS], MODEL) == []

            # A new searchable entry at the reused seq is found by its own text and vector only.
            assert store.delete(NS, plain.entry_id)
            new = searchable("fresh beta")
            store.save(NS, new)
            assert seqs(path)[new.entry_id] == 2
            assert [e.entry_id for e in reader.missing_vectors([NS], MODEL)] == [new.entry_id]
            attach(store, new, unit([0.0, 0.0, 1.0]))
            assert reader.search([NS], "vanished") == []
            assert [h.entry.entry_id for h in reader.search([NS], "beta")] == [new.entry_id]
            hits = reader.vector_search([NS], [0.0, 1.0, 0.0], model=MODEL, limit=5)
            assert {h.entry.entry_id for h in hits} == {keep.entry_id, new.entry_id}
            assert all(h.score < 0.5 for h in hits)
        finally:
            store.close()
            reader.close()

    def test_an_autoincrement_file_keeps_its_numbering(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        # A file from before (no version column, no index): migrated on open, its table keeps
        # AUTOINCREMENT, so a deleted highest seq is not handed out again.
        path = tmp_path / "old.sqlite3"
        conn = sqlite3.connect(path)
        try:
            conn.executescript(
                "CREATE TABLE memory_entries (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " entry_id TEXT NOT NULL UNIQUE, namespace TEXT NOT NULL, scope TEXT NOT NULL,"
                " key TEXT, content TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}',"
                " created_at TEXT NOT NULL, expires_at REAL, importance REAL NOT NULL DEFAULT 0.5"
                " CHECK (importance BETWEEN 0 AND 1));"
            )
        finally:
            conn.close()
        store = SQLiteStore(path)
        try:
            first, second = searchable("one"), searchable("two")
            store.save(NS, first)
            store.save(NS, second)
            store.delete(NS, second.entry_id)
            third = searchable("three")
            store.save(NS, third)
            assert seqs(path)[third.entry_id] == 3
            assert [h.entry.entry_id for h in store.search([NS], "three two")] == [third.entry_id]
        finally:
            store.close()
