"""The embedded stores follow one contract: InMemoryStore, SQLiteStore and FileStore.

InMemoryStore and SQLiteStore run on each implementation in turn (the ``impl`` fixture).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import CONDITIONAL_METHODS, SYNC_METHODS
from memlane import (
    CorruptStoreError,
    FileStore,
    InMemoryStore,
    MemlaneError,
    MemoryEntry,
    MemoryScope,
    MemoryStore,
    SQLiteStore,
    StoreConnectionError,
    UnstorableValueError,
    _backend,
)
from memlane.errors import StoreClosedError, StoreError, StorePathError
from memlane.stores import ConditionalStore
from memlane.stores.file import namespace_filename

STORES = ["memory", "sqlite", "file"]


@pytest.fixture(params=STORES)
def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> Iterator[Any]:
    """Each embedded store, its tables built by ``impl``."""
    made: MemoryStore
    if request.param == "memory":
        made = InMemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "deep" / "dir" / "m.sqlite3")
    else:
        made = FileStore(tmp_path / "files")
    yield made
    made.close()


def entry(key: str | None = None, content: Any = "v", **kw: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **kw)


class TestProtocol:
    """Every store satisfies the MemoryStore protocol."""

    def test_isinstance(self, store: Any) -> None:
        assert isinstance(store, MemoryStore)


class TestSaveAndLoad:
    """save/load keep insertion order, replace by entry_id in place, and round-trip content."""

    def test_round_trip_and_order(self, store: Any) -> None:
        entries = [
            entry(f"k{i}", {"i": i, "nested": [1, "two", None, True, 2.5]}) for i in range(5)
        ]
        for e in entries:
            store.save("ns", e)
        loaded = store.load("ns")
        assert [e.entry_id for e in loaded] == [e.entry_id for e in entries]
        assert [e.content for e in loaded] == [e.content for e in entries]
        assert loaded[0].created_at == entries[0].created_at
        assert loaded[0].created_at.tzinfo is not None

    def test_same_entry_id_replaces_in_place(self, store: Any) -> None:
        a, b = entry("a", 1), entry("b", 2)
        store.save("ns", a)
        store.save("ns", b)
        store.save("ns", a.model_copy(update={"content": 10}))
        assert [(e.key, e.content) for e in store.load("ns")] == [("a", 10), ("b", 2)]

    def test_key_is_unique_within_namespace(self, store: Any) -> None:
        store.save("ns", entry("k", 1))
        store.save("ns", entry("k", 2))
        loaded = store.load("ns")
        assert [(e.key, e.content) for e in loaded] == [("k", 2)]
        found = store.load_by_key("ns", "k")
        assert found is not None
        assert found.content == 2

    def test_namespaces_are_isolated(self, store: Any) -> None:
        store.save("a/b", entry("k", "slash"))
        store.save("a_b", entry("k", "underscore"))
        store.save("A_B", entry("k", "upper"))
        assert store.load_by_key("a/b", "k").content == "slash"
        assert store.load_by_key("a_b", "k").content == "underscore"
        assert store.load_by_key("A_B", "k").content == "upper"

    def test_load_by_key_missing(self, store: Any) -> None:
        assert store.load_by_key("ns", "nope") is None
        assert store.load("empty") == []

    def test_delete_and_clear(self, store: Any) -> None:
        a, b = entry("a"), entry("b")
        store.save("ns", a)
        store.save("ns", b)
        assert store.delete("ns", a.entry_id) is True
        assert store.delete("ns", a.entry_id) is False
        assert store.delete("other", b.entry_id) is False
        assert [e.key for e in store.load("ns")] == ["b"]
        assert store.clear("ns") == 1
        assert store.load("ns") == []
        assert store.clear("ns") == 0

    def test_metadata_scope_importance_round_trip(self, store: Any) -> None:
        e = entry(
            "k",
            "v",
            metadata={"source": "tool", "n": 3},
            scope=MemoryScope.LONG_TERM,
            importance=0.9,
        )
        store.save("ns", e)
        got = store.load_by_key("ns", "k")
        assert (got.metadata, got.scope, got.importance) == (
            {"source": "tool", "n": 3},
            MemoryScope.LONG_TERM,
            0.9,
        )

    @pytest.mark.parametrize(
        "weird",
        [
            "quote ' \" `",
            "$where: 1",
            "a.b.c",
            "\x01\x1f control",
            "🎉 ünïcødé",
            "../../etc/passwd",
            "x" * 300,
        ],
    )
    def test_hostile_names_round_trip_verbatim(self, store: Any, weird: str) -> None:
        store.save(weird, entry(weird, {weird: weird}))
        got = store.load_by_key(weird, weird)
        assert got is not None
        assert got.content == {weird: weird}
        assert got.key == weird


class TestExpiry:
    """Expired entries never come back; cleanup removes them."""

    def test_expired_entries_are_filtered(self, store: Any) -> None:
        past = datetime.now(UTC) - timedelta(seconds=1)
        future = datetime.now(UTC) + timedelta(hours=1)
        store.save("ns", entry("old", expires_at=past))
        store.save("ns", entry("new", expires_at=future))
        assert [e.key for e in store.load("ns")] == ["new"]
        assert store.load_by_key("ns", "old") is None
        assert store.cleanup_expired() == 1
        assert store.cleanup_expired() == 0

    def test_naive_expiry_is_utc(self, store: Any) -> None:
        naive_past = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=5)
        store.save("ns", entry("k", expires_at=naive_past))
        assert store.load_by_key("ns", "k") is None


class TestBadInput:
    """Bad arguments raise precise errors and leave stored data untouched."""

    def test_unserialisable_content_names_key_and_type(self, store: Any) -> None:
        s = store
        s.save("ns", entry("k", "original"))
        for bad, type_name in [
            (object(), "object"),
            ({1: "int key"}, "int"),
            (float("nan"), "float"),
            ({"d": datetime.now(UTC)}, "datetime"),
        ]:
            with pytest.raises(TypeError) as info:
                s.save("ns", entry("k", bad))
            assert isinstance(info.value, UnstorableValueError)
            assert "'k'" in str(info.value)
            assert type_name in str(info.value)
        assert s.load_by_key("ns", "k").content == "original"

    def test_non_string_arguments(self, store: Any) -> None:
        with pytest.raises(TypeError, match="namespace must be str, not int"):
            store.save(1, entry("k"))
        with pytest.raises(TypeError, match="entry must be MemoryEntry, not dict"):
            store.save("ns", {"key": "k"})
        with pytest.raises(TypeError, match="key must be str, not int"):
            store.load_by_key("ns", 5)
        with pytest.raises(ValueError, match="namespace must be a non-empty string"):
            store.load("")

    def test_importance_out_of_range(self) -> None:
        with pytest.raises(ValueError, match="importance"):
            MemoryEntry(importance=1.01)
        with pytest.raises(ValueError, match="importance"):
            MemoryEntry(importance=float("nan"))


class TestAsyncTwins:
    """async_* methods give the same results and run concurrently."""

    async def test_async_round_trip(self, store: Any) -> None:
        entries = [entry(f"k{i}", i) for i in range(20)]
        await asyncio.gather(*(store.async_save(f"ns{i % 2}", e) for i, e in enumerate(entries)))
        loaded = await store.async_load("ns0")
        assert sorted(e.content for e in loaded) == list(range(0, 20, 2))
        got = await store.async_load_by_key("ns1", "k1")
        assert got is not None
        assert got.content == 1
        assert await store.async_delete("ns1", got.entry_id)
        assert await store.async_clear("ns1") == 9


class TestConcurrentWriters:
    """Threads writing the same key never leave two entries for it."""

    def test_same_key_from_many_threads(self, store: Any) -> None:
        def writer(n: int) -> None:
            for i in range(20):
                store.save("ns", entry("shared", n * 100 + i))

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        loaded = store.load("ns")
        assert len(loaded) == 1
        assert loaded[0].key == "shared"


class TestSQLiteFile:
    """SQLiteStore creates its directories and survives reopening."""

    def test_reopen(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "a" / "b" / "mem.sqlite3"
        s = SQLiteStore(path)
        s.save("ns", entry("k", [1, 2]))
        s.close()
        found = SQLiteStore(path).load_by_key("ns", "k")
        assert found is not None
        assert found.content == [1, 2]

    def test_save_many_is_atomic(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        s = SQLiteStore(tmp_path / "m.db")
        with pytest.raises(TypeError):
            s.save_many("ns", [entry("ok", 1), entry("bad", object())])
        assert s.load("ns") == []


class TestFileStore:
    """One readable JSON file per namespace; no collisions, no escapes, no silent overwrite."""

    def test_filenames_are_unique_and_contained(self, tmp_path: Path) -> None:
        names = [
            "a/b",
            "a_b",
            "a%2Fb",
            "..",
            "../x",
            "/etc/passwd",
            "A_B",
            "a\\b",
            "con",
            "a b",
            "a" * 500,
        ]
        files = {namespace_filename(n) for n in names}
        assert len(files) == len(names)
        fs = FileStore(tmp_path / "base")
        for n in names:
            fs.save(n, entry("k", n))
        for path in (tmp_path / "base").iterdir():
            assert path.resolve().parent == (tmp_path / "base").resolve()
        assert not (tmp_path / "x.json").exists()
        for n in names:
            found = fs.load_by_key(n, "k")
            assert found is not None
            assert found.content == n

    def test_file_is_human_readable_json(self, tmp_path: Path) -> None:
        fs = FileStore(tmp_path)
        fs.save("notes", entry("greeting", "héllo"))
        (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
        header, put = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        assert header["namespace"] == "notes"
        assert put["entry"]["content"] == "héllo"
        assert "héllo" in path.read_text(encoding="utf-8")

    def test_corrupt_file_is_reported_not_overwritten(self, tmp_path: Path) -> None:
        fs = FileStore(tmp_path)
        fs.save("ns", entry("k", 1))
        path = tmp_path / namespace_filename("ns")
        path.write_text("{ not json", encoding="utf-8")
        with pytest.raises(CorruptStoreError, match=str(path.name)):
            fs.load("ns")
        with pytest.raises(CorruptStoreError):
            fs.save("ns", entry("k2", 2))
        assert path.read_text(encoding="utf-8") == "{ not json"

    def test_no_temp_files_left(self, tmp_path: Path) -> None:
        fs = FileStore(tmp_path)
        for i in range(10):
            fs.save("ns", entry(f"k{i}", i))
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


class TestUniformMethods:
    """Every store has every sync method, its async_ twin, and both context managers."""

    def test_method_set(self, store: Any) -> None:
        assert isinstance(store, ConditionalStore)
        for name in [*SYNC_METHODS, *CONDITIONAL_METHODS]:
            assert callable(getattr(store, name)), name
            assert not inspect.iscoroutinefunction(getattr(store, name)), name
            assert inspect.iscoroutinefunction(getattr(store, f"async_{name}")), name

    async def test_async_twins_match_sync(self, store: Any) -> None:
        await store.async_initialize()
        a, b = entry("a", 1), entry("b", 2, expires_at=datetime.now(UTC) - timedelta(seconds=1))
        await store.async_save_many("ns", [a, b])
        assert await store.async_load("ns") == store.load("ns") == [a]
        assert await store.async_namespaces() == store.namespaces() == ["ns"]
        assert await store.async_cleanup_expired() == 1
        assert await store.async_load_by_key("ns", "a") == a
        assert await store.async_delete("ns", a.entry_id) is True
        assert await store.async_clear("ns") == 0

    def test_with_closes(self, store: Any) -> None:
        with store as same:
            assert same is store
            store.save("ns", entry("k"))
        with pytest.raises(StoreClosedError):
            store.load("ns")

    async def test_async_with_closes(self, store: Any) -> None:
        async with store as same:
            assert same is store
            await store.async_save("ns", entry("k"))
        with pytest.raises(StoreClosedError):
            await store.async_load("ns")


class TestClose:
    """close() is plain and final: every later call raises StoreClosedError (a ValueError)."""

    def test_every_operation_refuses_after_close(self, store: Any) -> None:
        store.save("ns", entry("k"))
        store.close()
        store.close()  # idempotent, as for files
        calls: list[Callable[[], object]] = [
            lambda: store.save("ns", entry("k2")),
            lambda: store.save_many("ns", [entry("k2")]),
            lambda: store.load("ns"),
            lambda: store.load_by_key("ns", "k"),
            lambda: store.delete("ns", "x"),
            lambda: store.clear("ns"),
            lambda: store.namespaces(),
            lambda: store.cleanup_expired(),
            lambda: store.initialize(),
        ]
        for call in calls:
            with pytest.raises(StoreClosedError, match="is closed") as info:
                call()
            assert isinstance(info.value, ValueError)
            assert isinstance(info.value, MemlaneError)

    async def test_async_close(self, store: Any) -> None:
        await store.async_close()
        with pytest.raises(StoreClosedError):
            await store.async_save("ns", entry("k"))

    def test_closed_sqlite_releases_the_file(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.db"
        store = SQLiteStore(path)
        store.save("ns", entry("k", 1))
        store.close()
        # Only a closed connection lets another process take an exclusive lock at once.
        with sqlite3.connect(path, timeout=0) as conn:
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("ROLLBACK")
        with pytest.raises(StoreClosedError, match=re.escape(str(path))):
            store.load("ns")


class TestOneValueRule:
    """Every store rejects what is not plain JSON with the same message, and saves nothing of it."""

    @pytest.mark.parametrize(
        ("content", "metadata", "where"),
        [
            (object(), {}, "content (type object)"),
            ({"ok": [1, {2: "x"}]}, {}, "content['ok'][1] (dict key 2 of type int)"),
            (
                "fine",
                {"when": datetime(2024, 1, 1, tzinfo=UTC)},
                "metadata['when'] (type datetime)",
            ),
            (float("inf"), {}, "content (non-finite float inf)"),
        ],
    )
    def test_save_and_save_many(self, store: Any, content: Any, metadata: Any, where: str) -> None:
        expected = f"cannot store entry with key 'bad': {where} is not JSON-serialisable"
        bad = entry("bad", content, metadata=metadata)
        with pytest.raises(UnstorableValueError) as info:
            store.save("ns", bad)
        assert str(info.value) == expected
        with pytest.raises(UnstorableValueError) as info:
            store.save_many("ns", [entry("ok", 1), bad])
        assert str(info.value) == expected
        assert store.load("ns") == []
        assert store.namespaces() == []

    async def test_async_save(self, store: Any) -> None:
        with pytest.raises(UnstorableValueError, match="content \\(type set\\)"):
            await store.async_save("ns", entry("k", {1, 2}))
        with pytest.raises(UnstorableValueError):
            await store.async_save_many("ns", [entry("ok"), entry("k", {1, 2})])
        assert await store.async_load("ns") == []


class TestPathErrors:
    """A path that cannot hold a store is a StorePathError (an OSError) naming the path."""

    def test_sqlite_on_a_directory(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        with pytest.raises(StorePathError, match=re.escape(str(tmp_path))) as info:
            SQLiteStore(tmp_path)
        assert isinstance(info.value, OSError)
        assert isinstance(info.value, MemlaneError)
        assert "directory" in str(info.value)

    def test_sqlite_under_a_file(self, impl: _backend.Implementation) -> None:
        with pytest.raises(StorePathError, match=re.escape("/dev/null/x.db")):
            SQLiteStore("/dev/null/x.db")

    def test_file_store_on_a_file(self, tmp_path: Path) -> None:
        target = tmp_path / "plain.txt"
        target.write_text("x")
        with pytest.raises(StorePathError, match=re.escape(str(target))) as info:
            FileStore(target)
        assert isinstance(info.value, OSError)
        with pytest.raises(StorePathError, match=re.escape(str(target / "sub"))):
            FileStore(target / "sub")


class TestSQLiteErrors:
    """SQLite failures are memlane errors naming the file, on both implementations."""

    def test_not_a_database(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "m.db"
        path.write_bytes(b"this is not an SQLite file, not at all, no header here" * 20)
        with pytest.raises(CorruptStoreError, match=re.escape(str(path))) as info:
            SQLiteStore(path)
        assert isinstance(info.value, StoreError)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value.__cause__, sqlite3.DatabaseError)

    def test_failure_during_an_operation(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.db"
        store = SQLiteStore(path)
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE memory_entries")
        conn.close()
        for call in (lambda: store.load("ns"), lambda: store.save("ns", entry("k"))):
            with pytest.raises(StoreError, match=re.escape(str(path))) as info:
                call()
            assert not isinstance(info.value, CorruptStoreError)
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        store.close()

    def test_unreadable_row(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "m.db"
        store = SQLiteStore(path)
        store.save("ns", entry("k", 1))
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE memory_entries SET content = '{not json'")
        conn.close()
        with pytest.raises(CorruptStoreError, match=re.escape(str(path))):
            store.load("ns")
        store.close()


class TestErrorHierarchy:
    """Store failures share StoreError, and each keeps the built-in callers already catch."""

    def test_bases(self) -> None:
        assert issubclass(StoreConnectionError, StoreError)
        assert issubclass(StoreConnectionError, ConnectionError)
        assert issubclass(CorruptStoreError, StoreError)
        assert issubclass(CorruptStoreError, ValueError)
        assert issubclass(StorePathError, StoreError)
        assert issubclass(StoreError, OSError)
        assert issubclass(StoreClosedError, MemlaneError)
        assert issubclass(StoreClosedError, ValueError)


class TestOldImportPaths:
    """memlane.store and memlane.database_store still export what they used to."""

    def test_names(self) -> None:
        from memlane import database_store, store, stores

        for name in ["FileStore", "InMemoryStore", "MemoryStore", "SQLiteStore"]:
            assert getattr(store, name) is getattr(stores, name)
        for name in ["PostgreSQLStore", "MongoDBStore", "IndexFallbackWarning"]:
            assert getattr(database_store, name) is getattr(stores, name)
        helpers = ["check_namespace", "check_key", "check_key_like", "check_entry", "dumps_json"]
        helpers += ["entry_to_row", "row_to_entry", "_find_unstorable", "namespace_filename"]
        for name in helpers:
            assert callable(getattr(store, name)), name
        assert callable(database_store.check_mongo_name)
        assert callable(database_store.check_schema_name)
