"""The embedded stores follow one contract: InMemoryStore, SQLiteStore and FileStore."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import (
    CorruptStoreError,
    FileStore,
    InMemoryStore,
    MemoryEntry,
    MemoryScope,
    MemoryStore,
    SQLiteStore,
    UnstorableValueError,
)
from memlane.store import namespace_filename

STORES = ["memory", "sqlite", "file"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each embedded store on the active backend."""
    kind = request.param
    if kind == "memory":
        yield InMemoryStore()
    elif kind == "sqlite":
        s = SQLiteStore(tmp_path / "deep" / "dir" / "m.sqlite3")
        yield s
        s.close()
    else:
        yield FileStore(tmp_path / "files")


def entry(key: str | None = None, content: Any = "v", **kw: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **kw)


class TestProtocol:
    """Every store satisfies the MemoryStore protocol."""

    def test_isinstance(self, store: Any) -> None:
        assert isinstance(store, MemoryStore)


class TestSaveAndLoad:
    """save/load keep insertion order, replace by entry_id in place, and round-trip content."""

    def test_round_trip_and_order(self, store: Any) -> None:
        entries = [entry(f"k{i}", {"i": i, "nested": [1, "two", None, True, 2.5]}) for i in range(5)]
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
        assert found is not None and found.content == 2

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
        e = entry("k", "v", metadata={"source": "tool", "n": 3}, scope=MemoryScope.LONG_TERM, importance=0.9)
        store.save("ns", e)
        got = store.load_by_key("ns", "k")
        assert (got.metadata, got.scope, got.importance) == ({"source": "tool", "n": 3}, MemoryScope.LONG_TERM, 0.9)

    @pytest.mark.parametrize(
        "weird",
        ["quote ' \" `", "$where: 1", "a.b.c", "\x01\x1f control", "🎉 ünïcødé", "../../etc/passwd", "x" * 300],
    )
    def test_hostile_names_round_trip_verbatim(self, store: Any, weird: str) -> None:
        store.save(weird, entry(weird, {weird: weird}))
        got = store.load_by_key(weird, weird)
        assert got is not None and got.content == {weird: weird} and got.key == weird


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

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_unserialisable_content_names_key_and_type(self, tmp_path: Path, kind: str) -> None:
        s: Any = SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else FileStore(tmp_path)
        s.save("ns", entry("k", "original"))
        for bad, type_name in [(object(), "object"), ({1: "int key"}, "int"), (float("nan"), "float"), ({"d": datetime.now()}, "datetime")]:
            with pytest.raises(TypeError) as info:
                s.save("ns", entry("k", bad))
            assert isinstance(info.value, UnstorableValueError)
            assert "'k'" in str(info.value) and type_name in str(info.value)
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
        with pytest.raises(ValueError):
            MemoryEntry(importance=1.01)
        with pytest.raises(ValueError):
            MemoryEntry(importance=float("nan"))


class TestAsyncTwins:
    """async_* methods give the same results and run concurrently."""

    async def test_async_round_trip(self, store: Any) -> None:
        entries = [entry(f"k{i}", i) for i in range(20)]
        await asyncio.gather(*(store.async_save(f"ns{i % 2}", e) for i, e in enumerate(entries)))
        loaded = await store.async_load("ns0")
        assert sorted(e.content for e in loaded) == list(range(0, 20, 2))
        got = await store.async_load_by_key("ns1", "k1")
        assert got is not None and got.content == 1
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
        assert len(loaded) == 1 and loaded[0].key == "shared"


class TestSQLiteFile:
    """SQLiteStore creates its directories and survives reopening."""

    def test_reopen(self, tmp_path: Path) -> None:
        path = tmp_path / "a" / "b" / "mem.sqlite3"
        s = SQLiteStore(path)
        s.save("ns", entry("k", [1, 2]))
        s.close()
        assert SQLiteStore(path).load_by_key("ns", "k").content == [1, 2]

    def test_save_many_is_atomic(self, tmp_path: Path) -> None:
        s = SQLiteStore(tmp_path / "m.db")
        with pytest.raises(TypeError):
            s.save_many("ns", [entry("ok", 1), entry("bad", object())])
        assert s.load("ns") == []


class TestFileStore:
    """One readable JSON file per namespace; no collisions, no escapes, no silent overwrite."""

    def test_filenames_are_unique_and_contained(self, tmp_path: Path) -> None:
        names = ["a/b", "a_b", "a%2Fb", "..", "../x", "/etc/passwd", "A_B", "a\\b", "con", "a b", "a" * 500]
        files = {namespace_filename(n) for n in names}
        assert len(files) == len(names)
        fs = FileStore(tmp_path / "base")
        for n in names:
            fs.save(n, entry("k", n))
        for path in (tmp_path / "base").iterdir():
            assert path.resolve().parent == (tmp_path / "base").resolve()
        assert not (tmp_path / "x.json").exists()
        for n in names:
            assert fs.load_by_key(n, "k").content == n

    def test_file_is_human_readable_json(self, tmp_path: Path) -> None:
        fs = FileStore(tmp_path)
        fs.save("notes", entry("greeting", "héllo"))
        (path,) = [p for p in tmp_path.iterdir() if p.suffix == ".json"]
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["namespace"] == "notes"
        assert data["entries"][0]["content"] == "héllo"
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
