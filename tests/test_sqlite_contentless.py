"""The SQLite search index keeps no copy of the texts, and older files are rebuilt to match.

A searchable write then dirties one page less (no ``memory_search_content`` row). A file whose
index kept copies (memlane before this) is rebuilt on its first writable open, once, with the
same search results; opened read-only it is searched as it is and left byte for byte.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

from memlane import _backend
from memlane._pure.store import SCHEMA, SEARCH, SEARCH_SCHEMA, match_query
from memlane.stores import SQLiteStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry

NS = "facts"

# The index as memlane made it before it was contentless: FTS5 kept each text a second time.
OLD_SEARCH_SCHEMA = """
CREATE VIRTUAL TABLE memory_search USING fts5(
    text, tokenize = "unicode61 remove_diacritics 0 categories 'L* N*'"
);
CREATE TRIGGER memory_search_insert AFTER INSERT ON memory_entries
WHEN json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
    = 'text'
BEGIN
    INSERT INTO memory_search (rowid, text)
    VALUES (new.seq, json_extract(new.metadata, '$.search_text'));
END;
CREATE TRIGGER memory_search_delete AFTER DELETE ON memory_entries
BEGIN
    DELETE FROM memory_search WHERE rowid = old.seq;
END;
CREATE TRIGGER memory_search_update AFTER UPDATE OF metadata ON memory_entries
WHEN old.metadata IS NOT new.metadata
BEGIN
    DELETE FROM memory_search WHERE rowid = old.seq;
    INSERT INTO memory_search (rowid, text)
    SELECT new.seq, json_extract(new.metadata, '$.search_text')
    WHERE json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
        = 'text';
END;
"""

TEXTS = ["apple banana", "banana cherry", "cherry apple apple", "durian", "apple"]

_TABLES = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(json.dumps([r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]))
"""


def names(path: Path) -> list[str]:
    """The file's schema objects, read in another process: closing a second SQLite library's
    connection in this one would drop the store's POSIX locks on the file."""
    out = subprocess.run(
        [sys.executable, "-c", _TABLES, str(path)], check=True, capture_output=True, text=True
    )
    found: list[str] = json.loads(out.stdout)
    return found


def old_file(path: Path) -> None:
    """A store file whose index keeps copies, holding ``TEXTS`` and an unsearchable entry."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(SCHEMA + OLD_SEARCH_SCHEMA)
        for i, text in enumerate([*TEXTS, None]):
            conn.execute(
                "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata,"
                " created_at, importance) VALUES (?, ?, 'working', '1', ?,"
                " '2026-01-01T00:00:00+00:00', ?)",
                (f"e{i}", NS, json.dumps({SEARCH_TEXT: text} if text else {}), 0.1 * (i + 1)),
            )
        conn.commit()
    finally:
        conn.close()


def ranked(store: SQLiteStore, query: str) -> list[tuple[str, float]]:
    return [(h.entry.entry_id, round(h.score, 9)) for h in store.search([NS], query, limit=10)]


class TestContentlessIndex:
    """No copy of the texts; an older file is rebuilt once and searches as before."""

    def test_a_new_file_keeps_no_copy(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "new.sqlite3"
        with SQLiteStore(path) as store:
            store.save(NS, MemoryEntry(content=1, metadata={SEARCH_TEXT: "kiwi"}))
            assert [h.entry.content for h in store.search([NS], "kiwi")] == [1]
        tables = names(path)
        assert "memory_search" in tables
        assert "memory_search_content" not in tables

    def test_an_older_file_is_rebuilt_with_the_same_results(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        old_file(path)
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as reader:
            expected = {q: ranked(reader, q) for q in ("apple", "banana cherry", "durian", "fig")}
        assert path.read_bytes() == before  # a read-only open rebuilds nothing
        assert expected["apple"]
        with SQLiteStore(path) as store:
            assert "memory_search_content" not in names(path)
            assert {q: ranked(store, q) for q in expected} == expected
            # The rebuilt triggers keep the index right for every later write.
            store.delete(NS, "e0")
            gone = [e for e, _ in ranked(store, "apple")]
            assert "e0" not in gone
            assert gone
            entry = store.load(NS)[0]
            store.save(NS, entry.model_copy(update={"metadata": {SEARCH_TEXT: "fig"}}))
            assert [e for e, _ in ranked(store, "fig")] == [entry.entry_id]
            assert entry.entry_id not in [e for e, _ in ranked(store, "banana")]
        with SQLiteStore(path) as again:  # opened again: nothing left to rebuild
            assert [e for e, _ in ranked(again, "fig")] == [entry.entry_id]
        conn = sqlite3.connect(path)
        try:
            check = conn.execute(
                "INSERT INTO memory_search (memory_search) VALUES ('integrity-check')"
            ).fetchall()
        finally:
            conn.close()
        assert check == []


class TestTriggersAgainstACopyKeepingIndex:
    """Random writes leave the contentless index ranking exactly as one that keeps copies."""

    def test_random_writes(self) -> None:
        rng = random.Random(20261127)
        words = ["alpha", "beta", "gamma", "delta", "café", "straße", "ß", "x1"]
        conns = []
        for search in (OLD_SEARCH_SCHEMA, SEARCH_SCHEMA):
            conn = sqlite3.connect(":memory:", isolation_level=None)
            conn.executescript(SCHEMA + search)
            conns.append(conn)
        live: list[str] = []

        def metadata() -> str:
            if rng.random() < 0.8:
                text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
                return json.dumps({SEARCH_TEXT: text})
            return rng.choice(["{}", "not json", '{"search_text": 3}'])

        for step in range(1500):
            roll = rng.random()
            if roll < 0.5 or not live:
                live.append(f"e{step}")
                sql = (
                    "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata,"
                    " created_at, importance) VALUES (?, 'n', 'working', '1', ?, 't', ?)"
                )
                args: tuple[object, ...] = (live[-1], metadata(), rng.random())
            elif roll < 0.75:
                sql = "UPDATE memory_entries SET metadata = ? WHERE entry_id = ?"
                args = (metadata(), rng.choice(live))
            else:
                sql = "DELETE FROM memory_entries WHERE entry_id = ?"
                args = (live.pop(rng.randrange(len(live))),)
            for conn in conns:
                conn.execute(sql, args)
            if step % 50 == 0:
                query = match_query([rng.choice(words), rng.choice(words)])
                found = [
                    conn.execute(SEARCH, (query, '["n"]', 0.0, 0.0, 100)).fetchall()
                    for conn in conns
                ]
                assert found[0] == found[1]
        for conn in conns:
            check = "INSERT INTO memory_search (memory_search) VALUES ('integrity-check')"
            assert conn.execute(check).fetchall() == []
            conn.close()
