"""Stores opened read-only: nothing is created, migrated or written, every write is refused
with ReadOnlyStoreError, and a place that is not a memlane store is refused by name."""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from memlane import (
    ConversationMemory,
    FileStore,
    InMemoryStore,
    MemoryEntry,
    MemoryManager,
    MongoDBStore,
    PostgreSQLStore,
    SQLiteStore,
)
from memlane.config import MemlaneSettings
from memlane.errors import NotAStoreError, ReadOnlyStoreError, StoreError
from memlane.stores import IndexFallbackWarning
from test_database_stores import StoreFactory, initialized, server_for, unique_name

Store = Any


def writes(store: Store) -> list[Callable[[], object]]:
    """Every sync write of the store protocol, each on valid arguments."""
    e = MemoryEntry(key="k2", content=2)
    return [
        lambda: store.save("ns", e),
        lambda: store.save_many("ns", [e]),
        lambda: store.save_if("ns", e, None),
        lambda: store.delete("ns", "x"),
        lambda: store.delete_many("ns", ["x"]),
        lambda: store.clear("ns"),
        lambda: store.cleanup_expired(),
    ]


def async_writes(store: Store) -> list[Callable[[], Coroutine[Any, Any, object]]]:
    """Every async write of the store protocol, each on valid arguments."""
    e = MemoryEntry(key="k2", content=2)
    return [
        lambda: store.async_save("ns", e),
        lambda: store.async_save_many("ns", [e]),
        lambda: store.async_save_if("ns", e, None),
        lambda: store.async_delete("ns", "x"),
        lambda: store.async_delete_many("ns", ["x"]),
        lambda: store.async_clear("ns"),
        lambda: store.async_cleanup_expired(),
    ]


def fill(store: Store) -> list[MemoryEntry]:
    entries = [
        MemoryEntry(key="k", content={"a": 1}),
        MemoryEntry(content="two", metadata={"search_text": "lisbon weather"}),
    ]
    for e in entries:
        store.save("ns", e)
    return entries


def foreign_sqlite(path: Path) -> bytes:
    """Another application's SQLite database at ``path``; its bytes."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    con.execute("INSERT INTO orders (item) VALUES ('tea')")
    con.commit()
    con.close()
    return path.read_bytes()


class TestSQLiteRefusesWhatIsNotAStore:
    """A foreign database, an empty file or a missing file is NotAStoreError naming the
    file, and is left byte for byte as it was."""

    @pytest.mark.parametrize("read_only", [True, False])
    def test_foreign_database(self, tmp_path: Path, read_only: bool) -> None:
        path = tmp_path / "shop.db"
        before = foreign_sqlite(path)
        with pytest.raises(NotAStoreError, match="not a memlane store") as info:
            SQLiteStore(path, read_only=read_only)
        assert str(path) in str(info.value)
        assert path.read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["shop.db"]

    def test_empty_file(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.sqlite3"
        path.touch()
        with pytest.raises(NotAStoreError, match="empty") as info:
            SQLiteStore(path, read_only=True)
        assert str(path) in str(info.value)
        assert path.read_bytes() == b""
        assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite3"]

    def test_missing_file_and_directory(self, tmp_path: Path) -> None:
        path = tmp_path / "typo" / "memory.sqlite3"
        with pytest.raises(NotAStoreError, match="no such file") as info:
            SQLiteStore(path, read_only=True)
        assert str(path) in str(info.value)
        assert list(tmp_path.iterdir()) == []

    def test_a_file_that_is_not_sqlite(self, tmp_path: Path) -> None:
        path = tmp_path / "notes.txt"
        path.write_text("not a database " * 100)
        with pytest.raises(NotAStoreError, match="not an SQLite database"):
            SQLiteStore(path, read_only=True)
        assert path.read_text() == "not a database " * 100

    def test_in_memory_database(self) -> None:
        with pytest.raises(NotAStoreError, match=":memory:"):
            SQLiteStore(":memory:", read_only=True)

    def test_writable_open_of_an_empty_file_makes_a_store(self, tmp_path: Path) -> None:
        path = tmp_path / "new.sqlite3"
        path.touch()
        with SQLiteStore(path) as store:
            store.save("ns", MemoryEntry(content=1))
        with SQLiteStore(path, read_only=True) as store:
            assert [e.content for e in store.load("ns")] == [1]


class TestSQLiteReadOnly:
    """A memlane file opened read-only reads everything and refuses every write; the file is
    unchanged."""

    @pytest.fixture
    def made(self, tmp_path: Path) -> tuple[Path, list[MemoryEntry]]:
        path = tmp_path / "memory.sqlite3"
        with SQLiteStore(path) as store:
            entries = fill(store)
        return path, entries

    def test_reads(self, made: tuple[Path, list[MemoryEntry]]) -> None:
        path, entries = made
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as store:
            assert store.read_only is True
            assert store.load("ns") == entries
            assert store.load_by_key("ns", "k") == entries[0]
            assert store.load_range("ns", "a", "z") == [entries[0]]
            assert [h.entry for h in store.search(["ns"], "lisbon")] == [entries[1]]
            assert store.namespaces() == ["ns"]
        assert path.read_bytes() == before

    def test_every_write_refused(self, made: tuple[Path, list[MemoryEntry]]) -> None:
        path, entries = made
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as store:
            for write in writes(store):
                with pytest.raises(ReadOnlyStoreError, match=str(path)):
                    write()
            assert store.load("ns") == entries
        assert path.read_bytes() == before

    async def test_every_async_write_refused(self, made: tuple[Path, list[MemoryEntry]]) -> None:
        path, _ = made
        store = SQLiteStore(path, read_only=True)
        for write in async_writes(store):
            with pytest.raises(ReadOnlyStoreError):
                await write()
        await store.async_close()

    def test_sqlite_itself_refuses_a_write(self, made: tuple[Path, list[MemoryEntry]]) -> None:
        """Below the store's own check, the connection is read-only too."""
        path, _ = made
        store = SQLiteStore(path, read_only=True)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._table.save("ns", ("id", "working", None, "1", "{}", "2024-01-01", None, 0.5, 0))
        store.close()

    def test_a_file_needing_migration_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "old.sqlite3"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE memory_entries (seq INTEGER PRIMARY KEY, entry_id TEXT)")
        con.commit()
        con.close()
        before = path.read_bytes()
        with pytest.raises(StoreError, match="older memlane") as info:
            SQLiteStore(path, read_only=True)
        assert not isinstance(info.value, NotAStoreError)
        assert path.read_bytes() == before


class TestLocalStoresReadOnly:
    """FileStore and InMemoryStore take read_only: nothing is created, writes are refused."""

    def test_file_store_missing_directory(self, tmp_path: Path) -> None:
        with pytest.raises(NotAStoreError, match="no such directory") as info:
            FileStore(tmp_path / "nowhere", read_only=True)
        assert "nowhere" in str(info.value)
        assert list(tmp_path.iterdir()) == []

    def test_file_store_reads_and_refuses(self, tmp_path: Path) -> None:
        with FileStore(tmp_path / "store") as writable:
            entries = fill(writable)
        files = {p.name: p.read_bytes() for p in (tmp_path / "store").iterdir()}
        with FileStore(tmp_path / "store", read_only=True) as store:
            assert store.load("ns") == entries
            assert store.namespaces() == ["ns"]
            assert [h.entry for h in store.search(["ns"], "weather")] == [entries[1]]
            for write in writes(store):
                with pytest.raises(ReadOnlyStoreError):
                    write()
        assert {p.name: p.read_bytes() for p in (tmp_path / "store").iterdir()} == files

    async def test_in_memory_store(self) -> None:
        store = InMemoryStore(read_only=True)
        for write in writes(store):
            with pytest.raises(ReadOnlyStoreError):
                write()
        for async_write in async_writes(store):
            with pytest.raises(ReadOnlyStoreError):
                await async_write()
        assert store.load("ns") == []


class TestManagerReadOnly:
    """MemoryManager.from_config(read_only=True) opens the store read-only, and reading a
    conversation there never writes."""

    def settings(self, path: Path) -> MemlaneSettings:
        return MemlaneSettings(backend="sqlite", sqlite_path=str(path))

    def test_reads_a_conversation_without_writing(self, tmp_path: Path) -> None:
        path = tmp_path / "memory.sqlite3"
        writer = MemoryManager.from_config(self.settings(path))
        cid = writer.conversation.new_conversation()
        writer.conversation.add_turn(cid, "hi", "hello")
        writer.close()
        before = path.read_bytes()
        manager = MemoryManager.from_config(self.settings(path), read_only=True)
        memory = manager.conversation
        assert [t.user_prompt for t in memory.get_turns(cid)] == ["hi"]
        assert memory.conversation_ids == [cid]
        assert memory.get_turns("unknown") == []
        with pytest.raises(ReadOnlyStoreError):
            memory.add_turn(cid, "more", "text")
        with pytest.raises(ReadOnlyStoreError):
            memory.clear(cid)
        manager.close()
        assert path.read_bytes() == before

    async def test_async_from_config(self, tmp_path: Path) -> None:
        path = tmp_path / "shop.db"
        before = foreign_sqlite(path)
        with pytest.raises(NotAStoreError, match=r"shop\.db"):
            await MemoryManager.afrom_config(self.settings(path), read_only=True)
        with pytest.raises(NotAStoreError, match=r"shop\.db"):
            MemoryManager.from_config(self.settings(path), read_only=True)
        assert path.read_bytes() == before

    def test_expired_conversation_reads_as_gone_without_a_write(self, tmp_path: Path) -> None:
        path = tmp_path / "memory.sqlite3"
        store = SQLiteStore(path)
        writer = ConversationMemory(store=store, conversation_ttl=0.001)
        cid = writer.new_conversation()
        writer.add_turn(cid, "hi", "hello")
        store.close()
        before = path.read_bytes()
        # Past its ttl by the time it is read (the ttl is 1 ms).
        reader_store = SQLiteStore(path, read_only=True)
        reader = ConversationMemory(store=reader_store, conversation_ttl=0.001)
        assert reader.get_turns(cid) == []
        with pytest.raises(ReadOnlyStoreError):
            reader.cleanup_expired_conversations()
        reader_store.close()
        assert path.read_bytes() == before


# ---------------------------------------------------------------------------- servers


@pytest.fixture(params=["postgres", "mongodb"])
async def factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    made = StoreFactory(request.param, server_for(request, request.param))
    yield made
    await made.cleanup()


async def place_exists(made: StoreFactory) -> bool:
    """Whether the server holds the factory's schema (PostgreSQL) or collection (MongoDB)."""
    if made.kind == "postgres":
        con = await asyncpg.connect(made.server.url)
        try:
            found: bool = await con.fetchval("SELECT to_regnamespace($1) IS NOT NULL", made.name)
            return found
        finally:
            await con.close()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
    try:
        return made.name in await client["memlane"].list_collection_names()
    finally:
        await client.close()


class TestServerStoresReadOnly:
    """PostgreSQL and MongoDB opened read-only create nothing, refuse writes before the
    server sees them, and name a missing table or collection."""

    async def test_missing_place_is_not_a_store(self, factory: StoreFactory) -> None:
        store = factory.make(read_only=True)
        with pytest.raises(NotAStoreError, match=factory.name):
            await store.async_initialize()
        with pytest.raises(NotAStoreError):
            await asyncio.to_thread(store.load, "ns")
        assert not await place_exists(factory)

    async def test_reads_and_refuses_writes(self, factory: StoreFactory) -> None:
        writable = await initialized(factory.make())
        entries = [MemoryEntry(key="k", content={"a": 1}), MemoryEntry(content="two")]
        entries.append(MemoryEntry(content=3, metadata={"search_text": "lisbon weather"}))
        await writable.async_save_many("ns", entries)
        store = factory.make(read_only=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            await store.async_initialize()
        assert await store.async_load("ns") == await writable.async_load("ns")
        assert await store.async_load_by_key("ns", "k") == entries[0]
        assert [e.entry_id for e in await store.async_load_range("ns", "a", "z")] == [
            entries[0].entry_id
        ]
        hits = await store.async_search(["ns"], "lisbon")
        assert [h.entry.entry_id for h in hits] == [entries[2].entry_id]
        assert await store.async_namespaces() == ["ns"]
        for write in async_writes(store):
            with pytest.raises(ReadOnlyStoreError, match=store.address):
                await write()
        for sync_write in writes(store):
            with pytest.raises(ReadOnlyStoreError):
                await asyncio.to_thread(sync_write)
        assert len(await writable.async_load("ns")) == 3

    async def test_postgres_sessions_are_read_only(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            await initialized(made.make())
            store = made.make(read_only=True)
            assert isinstance(store, PostgreSQLStore)
            await store.async_initialize()
            pool = next(iter(store._resources.values()))
            assert await pool.fetchval("SHOW default_transaction_read_only") == "on"
            with pytest.raises(StoreError, match="read-only transaction"):
                await store._call(lambda p: store._do_clear(p, "ns"))
        finally:
            await made.cleanup()

    async def test_mongodb_read_only_creates_no_index(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        name = unique_name()
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
        try:
            await client["memlane"][name].insert_one({"_id": "other", "x": 1})
            store = MongoDBStore(made.server.url, collection=name, read_only=True)
            assert await store.async_load("ns") == []
            info = await client["memlane"][name].index_information()
            assert sorted(info) == ["_id_"]
            await store.async_close()
        finally:
            await client["memlane"].drop_collection(name)
            await client.close()


class TestConversationWritesRefusedEarly:
    """On a read-only store, conversation writes are refused before the memory's cache
    changes, on the in-memory store too (whose turns would otherwise live in the cache)."""

    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    async def test_every_write(self, tmp_path: Path, kind: str) -> None:
        path = tmp_path / "memory.sqlite3"
        cid = "c1"
        if kind == "sqlite":
            writer = ConversationMemory(store=SQLiteStore(path))
            writer.add_turn(cid, "hi", "hello")
            writer.store.close()
        store: Any = InMemoryStore(read_only=True) if kind == "memory" else None
        if store is None:
            store = SQLiteStore(path, read_only=True)
        memory = ConversationMemory(store=store)
        before = memory.get_turns(cid)
        snapshot = {"turns": [{"user_prompt": "a", "assistant_response": "b"}]}
        for write in (
            lambda: memory.add_turn(cid, "more", "text"),
            lambda: memory.new_conversation(),
            lambda: memory.clear(cid),
            lambda: memory.clear_all(),
            lambda: memory.import_conversation(snapshot, conversation_id="c2"),
        ):
            with pytest.raises(ReadOnlyStoreError):
                write()
        with pytest.raises(ReadOnlyStoreError):
            await memory.async_add_turn(cid, "more", "text")
        assert memory.get_turns(cid) == before
        assert memory.get_turns("c2") == []
        store.close()
