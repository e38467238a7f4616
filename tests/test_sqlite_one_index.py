"""One SQLite index serves a namespace's keys and its order; older files are migrated to it.

A file used to carry two namespace indexes, ``(namespace, seq)`` and ``(namespace, key)`` for
keyed rows only: every write paid a page (and splits) in each. Now ``(namespace, key)`` holds
every row (SQLite counts NULL keys as distinct, so the index stays unique), its entries end in
``seq``, and a namespace's rows are read in ``seq`` order from it without sorting rows. A file
with the two indexes is migrated on its first writable open (whichever process gets there
first); read-only it is read as it is and left byte for byte, with the same results.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memlane import _backend
from memlane._pure import store as pure
from memlane._pure.sqlite_vectors import VECTOR_SCHEMA
from memlane.errors import ReadOnlyStoreError
from memlane.stores import SQLiteStore
from memlane.types import MemoryEntry, MemoryScope
from worker_processes import backends, either_backend_env, release_together, started

# The two namespace indexes of files made before this change, as memlane made them.
OLD_INDEXES = """
DROP INDEX memory_entries_namespace_key;
CREATE INDEX memory_entries_namespace ON memory_entries (namespace, seq);
CREATE UNIQUE INDEX memory_entries_namespace_key
    ON memory_entries (namespace, key) WHERE key IS NOT NULL;
"""

_INDEXES = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(json.dumps(dict(conn.execute(
    "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'memory_entries'"
    " AND sql IS NOT NULL"
))))
"""


def indexes(path: Path) -> dict[str, str]:
    """The file's indexes on the entries by name, read in another process: closing a second
    SQLite library's connection in this one would drop the store's POSIX locks on the file."""
    out = subprocess.run(
        [sys.executable, "-c", _INDEXES, str(path)], check=True, capture_output=True, text=True
    )
    found: dict[str, str] = json.loads(out.stdout)
    return found


def entry(i: int, key: str | None) -> MemoryEntry:
    return MemoryEntry(entry_id=f"e{i:03d}", scope=MemoryScope.WORKING, key=key, content={"n": i})


def old_file(path: Path) -> None:
    """A store file with the two namespace indexes, holding keyed and unkeyed entries of three
    namespaces written interleaved, keys out of insertion order."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(pure.SCHEMA + pure.SEARCH_SCHEMA + VECTOR_SCHEMA + OLD_INDEXES)
        for i in range(30):
            key = None if i % 4 == 0 else f"k{(i * 7) % 30:02d}"
            conn.execute(
                "INSERT INTO memory_entries (entry_id, namespace, scope, key, content,"
                " created_at) VALUES (?, ?, 'working', ?, ?, '2026-01-01T00:00:00+00:00')",
                (f"e{i:03d}", f"ns{i % 3}", key, json.dumps({"n": i})),
            )
        conn.commit()
    finally:
        conn.close()


def reads(store: SQLiteStore) -> dict[str, object]:
    """Everything a reader can ask the file, by namespace."""
    out: dict[str, object] = {"namespaces": store.namespaces()}
    for ns in ("ns0", "ns1", "ns2"):
        out[ns] = [(e.entry_id, e.key, e.content) for e in store.load(ns)]
        out[f"{ns} range"] = [e.entry_id for e in store.load_range(ns, "k05", "k20")]
        found = store.load_by_key(ns, "k07")
        out[f"{ns} k07"] = None if found is None else found.entry_id
    return out


def is_one_index(found: dict[str, str]) -> bool:
    return "memory_entries_namespace" not in found and "WHERE" not in found.get(
        "memory_entries_namespace_key", "WHERE"
    )


class TestOneNamespaceIndex:
    """A new file has the one index, and it keeps keys unique and loads in insertion order."""

    def test_a_new_file_has_one_namespace_index(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "new.sqlite3"
        with SQLiteStore(path) as store:
            store.save("a", entry(1, "k"))
        found = indexes(path)
        assert is_one_index(found)
        assert "UNIQUE" in found["memory_entries_namespace_key"]

    def test_keys_stay_unique_and_unkeyed_entries_never_collide(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        with SQLiteStore(tmp_path / "m.sqlite3") as store:
            for i in range(5):
                store.save("a", entry(i, None))
            store.save("a", entry(10, "k"))
            store.save("a", entry(11, "k"))  # takes the key over from e010
            assert store.save_if("a", entry(12, "k"), None) is False
            assert [(e.entry_id, e.key) for e in store.load("a")] == [
                *[(f"e{i:03d}", None) for i in range(5)],
                ("e011", "k"),
            ]

    def test_random_writes_load_in_insertion_order(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        """Saves (new, replaced in place, moved between namespaces), key takeovers and deletes:
        load returns a namespace's live entries by ``seq``, as a plain ``ORDER BY seq`` does."""
        rng = random.Random(28)
        path = tmp_path / "r.sqlite3"
        with SQLiteStore(path) as store:
            for step in range(400):
                ns = rng.choice(["a", "b"])
                i = rng.randrange(60)
                if rng.random() < 0.15:
                    store.delete(ns, f"e{i:03d}")
                    continue
                key = None if rng.random() < 0.4 else f"k{rng.randrange(25):02d}"
                store.save(ns, entry(i, key).model_copy(update={"content": {"step": step}}))
            loaded = {ns: [e.entry_id for e in store.load(ns)] for ns in ("a", "b")}
        conn = sqlite3.connect(path)  # the store is closed: no lock of its left to drop
        try:
            expected = {
                ns: [
                    r[0]
                    for r in conn.execute(
                        "SELECT entry_id FROM memory_entries WHERE namespace = ? ORDER BY seq",
                        (ns,),
                    )
                ]
                for ns in ("a", "b")
            }
        finally:
            conn.close()
        assert loaded == expected
        assert all(loaded.values())


class TestQueryPlans:
    """Every read by namespace is served by an index, with either layout: no table scan, and
    no sort of rows."""

    @pytest.mark.parametrize("layout", ["one index", "two indexes"])
    def test_plans(self, tmp_path: Path, layout: str) -> None:
        path = tmp_path / "m.sqlite3"
        pure.SqliteTable(str(path)).close()
        if layout == "two indexes":
            old = sqlite3.connect(path)
            old.executescript(OLD_INDEXES)
            old.close()
        table = pure.SqliteTable(str(path), read_only=True)
        conn = table._conn
        assert conn is not None
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        table.load("a", 0.0)
        table.load_by_key("a", "k", 0.0)
        table.load_range("a", "k1", "k2", 0.0)
        table.namespaces()
        conn.set_trace_callback(None)
        selects = [s for s in statements if s.startswith("SELECT")]
        assert len(selects) == 4
        for select in selects:
            plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {select}"))
            assert re.search(r"SCAN memory_entries(?! USING COVERING INDEX)", plan) is None, plan
            if "GROUP BY" not in select:  # namespaces orders its few groups, not rows
                assert "TEMP B-TREE" not in plan, plan
        table.close()


class TestOlderFiles:
    """A file with the two indexes reads alike, read-only untouched, migrated once writable."""

    def test_read_only_reads_alike_and_leaves_the_file(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        old_file(path)
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as reader:
            seen = reads(reader)
            ns0 = [e.entry_id for e in reader.load("ns0")]
            with pytest.raises(ReadOnlyStoreError):
                reader.save("ns0", entry(99, None))
        assert path.read_bytes() == before
        assert not is_one_index(indexes(path))
        assert seen["ns1 range"]
        assert seen["ns1 k07"] == "e001"
        assert ns0 == [f"e{i:03d}" for i in range(0, 30, 3)]

    def test_writable_open_migrates_with_the_same_results(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        old_file(path)
        with SQLiteStore(path, read_only=True) as reader:
            expected = reads(reader)
        with SQLiteStore(path) as store:
            assert is_one_index(indexes(path))
            assert reads(store) == expected
            assert store.save_if("ns1", entry(50, "k07"), None) is False  # still unique
            store.save("ns1", entry(51, None))
            assert store.load("ns1")[-1].entry_id == "e051"
        with SQLiteStore(path) as again:  # nothing left to migrate
            assert again.load("ns1")[-1].entry_id == "e051"
        assert is_one_index(indexes(path))

    @pytest.mark.twins
    def test_processes_opening_an_old_file_at_once(self, tmp_path: Path) -> None:
        """Three processes (both implementations) open one old file writable together: one
        migrates, the others find it done, and every write lands."""
        path = tmp_path / "old.sqlite3"
        old_file(path)
        script = """
import json, os, sys
cfg = json.loads(sys.argv[1])
if cfg["backend"] == "python":
    os.environ["MEMLANE_PURE_PYTHON"] = "1"
from memlane.stores import SQLiteStore
from memlane.types import MemoryEntry, MemoryScope
print("ready", flush=True)
sys.stdin.readline()
with SQLiteStore(cfg["path"]) as store:
    store.save("ns0", MemoryEntry(entry_id=cfg["id"], scope=MemoryScope.WORKING, content=1))
print(json.dumps(cfg["id"]))
"""
        kinds = backends()
        cfgs = [
            {"path": str(path), "id": f"w{i}", "backend": kinds[i % len(kinds)]} for i in range(3)
        ]
        with started(script, cfgs, env=either_backend_env()) as procs:
            assert release_together(procs) == ["w0", "w1", "w2"]
        assert is_one_index(indexes(path))
        with SQLiteStore(path, read_only=True) as reader:
            ids = [e.entry_id for e in reader.load("ns0")]
        assert ids[:10] == [f"e{i:03d}" for i in range(0, 30, 3)]
        assert sorted(ids[10:]) == ["w0", "w1", "w2"]
