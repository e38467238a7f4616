"""PostgreSQLStore and MongoDBStore against real servers: the shared store rules, injection,
values a backend cannot hold, sync use inside and outside an event loop, concurrency, and
servers that are down or restart mid-run.

Behaviour shared by every backend runs three times: PostgreSQL, MongoDB through PyMongo's
``AsyncMongoClient`` (made by the store), and MongoDB through a user-supplied Motor client.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient
from pymongo.errors import InvalidOperation

from conftest import CONDITIONAL_METHODS, SYNC_METHODS
from db_servers import Server
from memlane import ConversationMemory, InMemoryStore, MemoryManager, MemoryStore
from memlane.errors import (
    InvalidValueError,
    StoreConnectionError,
    StoreError,
    UnstorableValueError,
)
from memlane.stores import ConditionalStore, IndexFallbackWarning, MongoDBStore, PostgreSQLStore
from memlane.types import MemoryEntry, MemoryScope, utc_now

KINDS = ["postgres", "mongodb", "motor"]
Store = PostgreSQLStore | MongoDBStore


def unique_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def entry(**kwargs: Any) -> MemoryEntry:
    return MemoryEntry(**kwargs)


def ids(entries: list[MemoryEntry]) -> list[str]:
    return [e.entry_id for e in entries]


async def initialized(store: Store) -> Store:
    """Initialises, ignoring the partial-index fallback warning (tested on its own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IndexFallbackWarning)
        await store.async_initialize()
    return store


class StoreFactory:
    """Makes isolated stores of one kind (own schema or collection) and cleans them up."""

    def __init__(self, kind: str, server: Server) -> None:
        self.kind = kind
        self.server = server
        self.name = unique_name()
        self._made: list[Store] = []
        self._motor: list[Any] = []

    def make(self, **kwargs: Any) -> Store:
        store: Store
        if self.kind == "postgres":
            kwargs.setdefault("schema_name", self.name)
            kwargs.setdefault("pool_min_size", 1)
            kwargs.setdefault("pool_size", 4)
            store = PostgreSQLStore(self.server.url, **kwargs)
        else:
            kwargs.setdefault("collection", self.name)
            if self.kind == "motor" and "client" not in kwargs:
                motor: AsyncIOMotorClient[dict[str, Any]] = AsyncIOMotorClient(
                    self.server.url, serverSelectionTimeoutMS=10_000
                )
                self._motor.append(motor)
                kwargs["client"] = motor
            store = MongoDBStore(self.server.url, **kwargs)
        self._made.append(store)
        return store

    async def cleanup(self) -> None:
        for store in self._made:
            await store.async_close()
        for motor in self._motor:
            motor.close()
        if self.kind == "postgres":
            con = await asyncpg.connect(self.server.url)
            try:
                await con.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
            finally:
                await con.close()
        else:
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.server.url)
            try:
                await client["memlane"].drop_collection(self.name)
            finally:
                await client.close()
            collect_cancelled_connects()


def collect_cancelled_connects() -> None:
    """Collects sockets PyMongo leaks when client.close() cancels a connect in flight.

    PyMongo 4.20 closes a half-made socket on OSError only, not on cancellation; it then
    lingers in a reference cycle until some later test's garbage collection. Only sockets
    that never got connected (no peer address) are silenced here: any other leak still fails.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"unclosed <socket\.socket [^>]*laddr=\([^)]*\)>$",
            category=ResourceWarning,
        )
        gc.collect()


def server_for(request: pytest.FixtureRequest, kind: str) -> Server:
    name = "postgres_server" if kind == "postgres" else "mongodb_server"
    server: Server = request.getfixturevalue(name)
    return server


@pytest.fixture(params=KINDS)
async def factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    made = StoreFactory(request.param, server_for(request, request.param))
    yield made
    await made.cleanup()


@pytest.fixture
async def store(factory: StoreFactory) -> Store:
    return await initialized(factory.make())


@pytest.fixture(params=["postgres", "mongodb"])
async def own_factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """Stores that make their own clients (what the sync-only and restart tests need)."""
    made = StoreFactory(request.param, server_for(request, request.param))
    yield made
    await made.cleanup()


def dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def store_url(kind: str, port: int) -> str:
    if kind == "postgres":
        return f"postgresql://postgres@127.0.0.1:{port}/memlane_test"
    return f"mongodb://127.0.0.1:{port}/"


def down_store(kind: str, port: int, timeout: float) -> Store:
    if kind == "postgres":
        return PostgreSQLStore(store_url(kind, port), timeout=timeout, schema_name=unique_name())
    return MongoDBStore(store_url(kind, port), timeout=timeout, collection=unique_name())


# ---------------------------------------------------------------------------- shared rules


class TestEntriesRoundTrip:
    """Every field of an entry reads back equal, datetimes aware UTC to the microsecond."""

    async def test_all_fields(self, store: Store) -> None:
        created = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
        original = entry(
            scope=MemoryScope.LONG_TERM,
            key="profile",
            content={
                "name": "Ada",
                "langs": ["en", "fr"],
                "n": 3,
                "pi": 3.14159,
                "ok": True,
                "none": None,
            },
            metadata={"source": "test", "tags": ["a"]},
            created_at=created,
            expires_at=utc_now() + timedelta(days=1),
            importance=0.9,
        )
        await store.async_save("ns", original)
        loaded = await store.async_load_by_key("ns", "profile")
        assert loaded == original
        assert loaded is not None
        assert loaded.created_at.tzinfo is not None
        assert loaded.created_at.utcoffset() == timedelta(0)
        assert loaded.expires_at is not None
        assert loaded.expires_at.utcoffset() == timedelta(0)
        assert await store.async_load("ns") == [original]

    async def test_scalar_and_nested_content(self, store: Store) -> None:
        values: list[Any] = [
            "text",
            0,
            -7,
            2.5,
            True,
            None,
            [],
            {},
            [[1, [2, [3]]]],
            {"a": {"b": {"c": []}}},
        ]
        entries = [entry(content=v) for v in values]
        for e in entries:
            await store.async_save("ns", e)
        assert [e.content for e in await store.async_load("ns")] == values

    @pytest.mark.parametrize(
        "value",
        [1e16, 2.0**70, -1.5e300, 5e-324, 1.5e-7, 0.1, 123456789.125, 2**64 + 1, -(2**80), 10**30],
    )
    async def test_numbers_keep_value_and_type(self, store: Store, value: float) -> None:
        await store.async_save("ns", entry(key="n", content={"v": value, "list": [value]}))
        loaded = await store.async_load_by_key("ns", "n")
        assert loaded is not None
        got = loaded.content["v"]
        assert got == value
        assert type(got) is type(value)
        assert loaded.content["list"] == [value]


class TestEntryIdReplacesInPlace:
    """Saving an entry_id again replaces it and keeps its position; from another namespace it moves to the end."""

    async def test_same_namespace_keeps_position(self, store: Store) -> None:
        a, b, c = entry(content="a"), entry(content="b"), entry(content="c")
        for e in (a, b, c):
            await store.async_save("ns", e)
        b2 = b.model_copy(update={"content": "b2"})
        await store.async_save("ns", b2)
        assert [e.content for e in await store.async_load("ns")] == ["a", "b2", "c"]

    async def test_other_namespace_moves_to_end(self, store: Store) -> None:
        a, b = entry(content="a"), entry(content="b")
        await store.async_save("one", a)
        await store.async_save("two", b)
        await store.async_save("two", a)
        assert await store.async_load("one") == []
        assert ids(await store.async_load("two")) == [b.entry_id, a.entry_id]

    async def test_moving_a_keyed_entry_frees_its_key(self, store: Store) -> None:
        a = entry(key="k", content="a")
        await store.async_save("one", a)
        await store.async_save("two", a)
        assert await store.async_load_by_key("one", "k") is None
        assert await store.async_load_by_key("two", "k") == a
        other = entry(key="k", content="other")
        await store.async_save("one", other)
        assert await store.async_load_by_key("one", "k") == other


class TestKeyIsUniqueWithinNamespace:
    """A keyed save replaces whatever held the key; the new entry goes to the end."""

    async def test_new_entry_takes_key(self, store: Store) -> None:
        first, middle = entry(key="k", content=1), entry(content="x")
        await store.async_save("ns", first)
        await store.async_save("ns", middle)
        second = entry(key="k", content=2)
        await store.async_save("ns", second)
        assert ids(await store.async_load("ns")) == [middle.entry_id, second.entry_id]
        assert await store.async_load_by_key("ns", "k") == second

    async def test_rekeying_onto_a_held_key_keeps_own_position(self, store: Store) -> None:
        a, b = entry(key="a", content="a"), entry(key="b", content="b")
        await store.async_save("ns", a)
        await store.async_save("ns", b)
        await store.async_save("ns", a.model_copy(update={"key": "b", "content": "a as b"}))
        loaded = await store.async_load("ns")
        assert [(e.entry_id, e.key, e.content) for e in loaded] == [(a.entry_id, "b", "a as b")]
        assert await store.async_load_by_key("ns", "a") is None

    async def test_dropping_the_key_frees_it(self, store: Store) -> None:
        a = entry(key="k", content="a")
        await store.async_save("ns", a)
        await store.async_save("ns", a.model_copy(update={"key": None}))
        b = entry(key="k", content="b")
        await store.async_save("ns", b)
        assert ids(await store.async_load("ns")) == [a.entry_id, b.entry_id]

    async def test_adding_a_key_keeps_position(self, store: Store) -> None:
        a, b = entry(content="a"), entry(content="b")
        await store.async_save("ns", a)
        await store.async_save("ns", b)
        keyed = a.model_copy(update={"key": "k"})
        await store.async_save("ns", keyed)
        assert ids(await store.async_load("ns")) == [a.entry_id, b.entry_id]
        assert await store.async_load_by_key("ns", "k") == keyed

    async def test_moving_onto_a_held_key(self, store: Store) -> None:
        mover, holder = entry(key="k", content="mover"), entry(key="k", content="holder")
        await store.async_save("one", mover)
        await store.async_save("two", entry(content="first"))
        await store.async_save("two", holder)
        await store.async_save("two", mover)
        assert await store.async_load("one") == []
        assert [e.content for e in await store.async_load("two")] == ["first", "mover"]
        assert await store.async_load_by_key("two", "k") == mover

    async def test_same_key_in_two_namespaces(self, store: Store) -> None:
        one, two = entry(key="k", content=1), entry(key="k", content=2)
        await store.async_save("one", one)
        await store.async_save("two", two)
        assert await store.async_load_by_key("one", "k") == one
        assert await store.async_load_by_key("two", "k") == two

    async def test_unkeyed_entries_never_collide(self, store: Store) -> None:
        entries = [entry(content=i) for i in range(5)]
        for e in entries:
            await store.async_save("ns", e)
        assert ids(await store.async_load("ns")) == ids(entries)


class TestInsertionOrder:
    """load returns entries in insertion order, including batches and mixed paths."""

    async def test_many_saves_and_batches(self, store: Store) -> None:
        expected: list[str] = []
        for i in range(10):
            e = entry(content=i)
            await store.async_save("ns", e)
            expected.append(e.entry_id)
            batch = [entry(content=f"{i}.{j}") for j in range(3)]
            await store.async_save_many("ns", batch)
            expected += ids(batch)
        assert ids(await store.async_load("ns")) == expected

    async def test_save_many_applies_key_rules_within_the_batch(self, store: Store) -> None:
        a, b, c = entry(key="k", content="a"), entry(content="b"), entry(key="k", content="c")
        await store.async_save_many("ns", [a, b, c])
        assert ids(await store.async_load("ns")) == [b.entry_id, c.entry_id]

    async def test_save_many_of_nothing(self, store: Store) -> None:
        await store.async_save_many("ns", [])
        assert await store.async_load("ns") == []


class TestExpiry:
    """Expired entries are never returned, still hold their key, and cleanup_expired removes them."""

    async def test_expired_entries_are_hidden_and_cleaned(self, store: Store) -> None:
        past = utc_now() - timedelta(seconds=1)
        live, dead = entry(key="live", content=1), entry(key="dead", content=2, expires_at=past)
        await store.async_save("ns", live)
        await store.async_save("ns", dead)
        await store.async_save("other", entry(content=3, expires_at=past))
        assert await store.async_load("ns") == [live]
        assert await store.async_load_by_key("ns", "dead") is None
        assert await store.async_cleanup_expired() == 2
        assert await store.async_cleanup_expired() == 0
        assert await store.async_load("ns") == [live]

    async def test_entry_expires_while_stored(self, store: Store) -> None:
        soon = entry(key="k", content=1, expires_at=utc_now() + timedelta(seconds=0.5))
        await store.async_save("ns", soon)
        assert await store.async_load_by_key("ns", "k") == soon
        await asyncio.sleep(0.6)
        assert await store.async_load_by_key("ns", "k") is None
        replacement = entry(key="k", content=2)
        await store.async_save("ns", replacement)
        assert await store.async_load("ns") == [replacement]


class TestDeleteClearNamespaces:
    """delete removes one entry of its namespace, clear a whole namespace; namespaces lists the rest."""

    async def test_delete(self, store: Store) -> None:
        a = entry(content="a")
        await store.async_save("ns", a)
        assert await store.async_delete("other", a.entry_id) is False
        assert await store.async_delete("ns", a.entry_id) is True
        assert await store.async_delete("ns", a.entry_id) is False
        assert await store.async_load("ns") == []

    async def test_clear_and_namespaces(self, store: Store) -> None:
        await store.async_save("first", entry(content=1))
        await store.async_save_many("second", [entry(content=2), entry(content=3)])
        await store.async_save("first", entry(content=4))
        assert await store.async_namespaces() == ["first", "second"]
        assert await store.async_clear("second") == 2
        assert await store.async_clear("second") == 0
        assert await store.async_namespaces() == ["first"]
        assert len(await store.async_load("first")) == 2


# ---------------------------------------------------------------------------- values


class TestUnstorableContent:
    """Content that is not plain JSON raises UnstorableValueError naming key and type; nothing is stored."""

    @pytest.mark.parametrize(
        ("content", "fragment"),
        [
            ({"when": datetime(2024, 1, 1, tzinfo=UTC)}, "datetime"),
            ({1: "int key"}, "dict key 1"),
            (float("nan"), "nan"),
            ({1, 2}, "set"),
        ],
    )
    async def test_rejected(self, store: Store, content: Any, fragment: str) -> None:
        with pytest.raises(UnstorableValueError) as info:
            await store.async_save("ns", entry(key="bad", content=content))
        assert isinstance(info.value, TypeError)
        assert "'bad'" in str(info.value)
        assert fragment in str(info.value)
        assert await store.async_load("ns") == []

    async def test_metadata_is_checked_too(self, store: Store) -> None:
        with pytest.raises(UnstorableValueError, match="metadata"):
            await store.async_save("ns", entry(key="bad", content=1, metadata={"x": object()}))

    async def test_batch_is_checked_before_writing(self, store: Store) -> None:
        with pytest.raises(UnstorableValueError):
            await store.async_save_many("ns", [entry(content=1), entry(content=object())])
        assert await store.async_load("ns") == []


INJECTION_NAMESPACES = [
    "ns'; DROP TABLE memory_entries; --",
    'ns" OR "1"="1',
    "$where",
    "a.b.c",
    '{"$ne": null}',
    "ctl\x01\x07\x1b\t\n\r\x7f",
    "名前 😀 \u202e",
]
INJECTION_KEYS = [
    "'; DELETE FROM memory_entries; --",
    "$gt",
    "a.b",
    "$set.x",
    '{"$ne": ""}',
    "\x01\x1f",
    "\\",
    "%_*",
]
INJECTION_CONTENT = {
    "$set": {"a.b": 1, "$inc": {"seq": 1}},
    "$where": "function() { return true; }",
    "a.b.c": "'; DROP SCHEMA memlane CASCADE; --",
    "": "empty key",
    "ctl": "\x01\x02\x1b\x7f\u2028",
    "backslash": "\\u0000 is only text here",
    "nested": [{"$regex": ".*"}, {"$ne": None}, "1' OR '1'='1"],
}


class TestInjectionIsStoredVerbatim:
    """Quotes, $ operators, dotted names and control characters are data: stored and read back verbatim."""

    async def test_namespaces_keys_ids_and_content(self, store: Store) -> None:
        bystander = entry(key="keep", content="untouched")
        await store.async_save("bystander", bystander)
        saved: dict[str, list[MemoryEntry]] = {}
        for ns in INJECTION_NAMESPACES:
            batch = [
                entry(
                    entry_id=f"{ns}|{k}|'\"$.",
                    key=k,
                    content=INJECTION_CONTENT,
                    metadata={"$k.": ns},
                )
                for k in INJECTION_KEYS
            ]
            for e in batch:
                await store.async_save(ns, e)
            saved[ns] = batch
        for ns, batch in saved.items():
            assert await store.async_load(ns) == batch
            for e in batch:
                assert e.key is not None
                assert await store.async_load_by_key(ns, e.key) == e
        assert sorted(await store.async_namespaces()) == sorted(
            ["bystander", *INJECTION_NAMESPACES]
        )
        assert await store.async_load("bystander") == [bystander]

    async def test_operator_lookalikes_match_nothing(self, store: Store) -> None:
        await store.async_save("ns", entry(key="real", content=1))
        for probe in ['{"$ne": null}', "$ne", ".*", "%", "' OR '1'='1"]:
            assert await store.async_load_by_key("ns", probe) is None
            assert await store.async_delete("ns", probe) is False
            assert await store.async_load(probe) == []
        assert len(await store.async_load("ns")) == 1


class TestValuesPostgreSQLCannotHold:
    """PostgreSQL rejects NUL and lone surrogates with InvalidValueError naming the field; nothing is stored."""

    @pytest.fixture
    async def pg(self, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        yield await initialized(made.make())
        await made.cleanup()

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"key": "a\x00b"}, "key"),
            ({"entry_id": "id\x00"}, "entry_id"),
            ({"content": "text\x00"}, "content"),
            ({"content": {"deep": ["ok", {"x": "nul\x00"}]}}, "content['deep'][1]['x']"),
            ({"content": {"k\x00": 1}}, "dict key 'k\\x00'"),
            ({"metadata": {"m": "\x00"}}, "metadata['m']"),
            ({"key": "lone \ud800"}, "key"),
            ({"content": ["\udfff"]}, "content[0]"),
        ],
    )
    async def test_rejected_naming_the_field(
        self, pg: Store, kwargs: dict[str, Any], field: str
    ) -> None:
        kwargs.setdefault("content", "x")
        with pytest.raises(InvalidValueError) as info:
            await pg.async_save("ns", entry(**kwargs))
        assert isinstance(info.value, ValueError)
        assert field in str(info.value)
        assert await pg.async_load("ns") == []

    async def test_sync_path_and_batches_too(self, pg: Store) -> None:
        with pytest.raises(InvalidValueError, match="content"):
            await asyncio.to_thread(pg.save, "ns", entry(content="\x00"))
        with pytest.raises(InvalidValueError, match="key"):
            await pg.async_save_many("ns", [entry(content=1), entry(key="\x00", content=2)])
        assert await pg.async_load("ns") == []

    async def test_lookups_of_such_values_are_value_errors_naming_them(self, pg: Store) -> None:
        with pytest.raises(InvalidValueError, match=r"key 'a\\x00' contains a NUL"):
            await pg.async_load_by_key("ns", "a\x00")
        with pytest.raises(InvalidValueError, match="entry_id 'a\\\\x00'"):
            await pg.async_delete("ns", "a\x00")
        with pytest.raises(InvalidValueError, match="namespace 'ns\\\\ud800'"):
            await pg.async_load("ns\ud800")

    async def test_namespace_with_nul_is_a_value_error(self, pg: Store) -> None:
        with pytest.raises(ValueError, match="NUL"):
            await pg.async_save("a\x00b", entry(content=1))


class TestValuesMongoDBHolds:
    """MongoDB stores NUL characters verbatim and lone surrogates in content; a surrogate in a key is InvalidValueError."""

    @pytest.fixture
    async def mongo(self, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        yield await initialized(made.make())
        await made.cleanup()

    async def test_nul_everywhere(self, mongo: Store) -> None:
        e = entry(
            entry_id="id\x00x", key="k\x00", content={"k\x00": "v\x00"}, metadata={"m": "\x00"}
        )
        await mongo.async_save("ns", e)
        assert await mongo.async_load_by_key("ns", "k\x00") == e
        assert await mongo.async_load_by_key("ns", "k") is None

    async def test_surrogates(self, mongo: Store) -> None:
        e = entry(key="k", content={"s": "lone \ud800"}, metadata={"\udfff": 1})
        await mongo.async_save("ns", e)
        assert await mongo.async_load_by_key("ns", "k") == e
        with pytest.raises(InvalidValueError, match="key"):
            await mongo.async_save("ns", entry(key="\ud800", content=1))
        with pytest.raises(InvalidValueError, match="key '\\\\ud800' contains a lone surrogate"):
            await mongo.async_load_by_key("ns", "\ud800")


# ---------------------------------------------------------------------------- sync twins


class TestSyncMethodsOutsideALoop:
    """Sync methods work from plain threads, initialising lazily on the private loop."""

    def test_lazy_sync_use(self, own_factory: StoreFactory) -> None:
        store = own_factory.make()
        a = entry(key="k", content=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            store.save("ns", a)
        store.save_many("ns", [entry(content=2), entry(content=3)])
        assert store.load_by_key("ns", "k") == a
        assert [e.content for e in store.load("ns")] == [1, 2, 3]
        assert store.namespaces() == ["ns"]
        assert store.delete("ns", a.entry_id) is True
        assert store.clear("ns") == 2
        assert store.cleanup_expired() == 0
        store.close()
        assert store.load("ns") == []  # reopens after close
        store.close()

    def test_many_threads(self, own_factory: StoreFactory) -> None:
        store = own_factory.make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            store.initialize()
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(10):
                    store.save("ns", entry(content=[n, i]))
            except BaseException as exc:  # noqa: BLE001  # reported by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        contents = [e.content for e in store.load("ns")]
        assert sorted(contents) == sorted([n, i] for n in range(4) for i in range(10))
        for n in range(4):
            assert [c for c in contents if c[0] == n] == [[n, i] for i in range(10)]
        store.close()

    def test_context_manager(self, own_factory: StoreFactory) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            with own_factory.make() as store:
                store.save("ns", entry(content=1))
                assert len(store.load("ns")) == 1


class TestSyncMethodsInsideALoop:
    """Sync methods called inside a running event loop complete without deadlock, as do memories using them."""

    async def test_sync_calls_in_a_coroutine(self, store: Store) -> None:
        a = entry(key="k", content="sync")
        store.save("ns", a)
        assert store.load_by_key("ns", "k") == a
        assert await store.async_load("ns") == [a]
        assert store.load("ns") == [a]

    async def test_sync_conversation_memory_in_a_coroutine(self, store: Store) -> None:
        memory = ConversationMemory(store=store)
        cid = memory.new_conversation()
        for i in range(3):
            memory.add_turn(cid, f"q{i}", f"a{i}")
        again = ConversationMemory(store=store)
        assert again.get_message_history(cid) == memory.get_message_history(cid)
        assert [t.user_prompt for t in await again.async_get_turns(cid)] == ["q0", "q1", "q2"]

    async def test_async_context_manager(self, factory: StoreFactory) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            async with factory.make() as store:
                await store.async_save("ns", entry(content=1))
                assert len(await store.async_load("ns")) == 1


class TestEachEventLoopGetsItsOwnConnections:
    """One store serves several event loops (each its own pool or client) and the private loop."""

    def test_two_asyncio_runs_and_sync(self, own_factory: StoreFactory) -> None:
        store = own_factory.make()

        async def save(content: int) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IndexFallbackWarning)
                await store.async_save("ns", entry(content=content))
            await store.async_close()

        asyncio.run(save(1))
        asyncio.run(save(2))
        store.save("ns", entry(content=3))
        assert [e.content for e in store.load("ns")] == [1, 2, 3]
        store.close()


# ---------------------------------------------------------------------------- one method set


class TestUniformMethods:
    """Network stores have the method set of every store: each sync method and its async_ twin."""

    async def test_method_set(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
        assert isinstance(store, ConditionalStore)
        for name in [*SYNC_METHODS, *CONDITIONAL_METHODS]:
            assert not inspect.iscoroutinefunction(getattr(store, name)), name
            assert inspect.iscoroutinefunction(getattr(store, f"async_{name}")), name

    async def test_async_lifecycle_and_maintenance(self, store: Store) -> None:
        past = utc_now() - timedelta(seconds=1)
        await store.async_save_many("ns", [entry(content=1), entry(content=2, expires_at=past)])
        assert await store.async_namespaces() == ["ns"]
        assert await store.async_cleanup_expired() == 1
        await store.async_close()
        await store.async_initialize()  # reopens
        assert [e.content for e in await store.async_load("ns")] == [1]

    def test_sync_lifecycle_and_maintenance(self, own_factory: StoreFactory) -> None:
        store = own_factory.make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            store.initialize()
        store.save("ns", entry(content=1, expires_at=utc_now() - timedelta(seconds=1)))
        assert store.cleanup_expired() == 1
        assert store.namespaces() == []
        store.close()

    async def test_unstorable_message_is_the_in_memory_one(self, store: Store) -> None:
        bad = entry(key="bad", content={"a": [1, object()]})
        with pytest.raises(UnstorableValueError) as expected:
            InMemoryStore().save("ns", bad)
        with pytest.raises(UnstorableValueError) as got:
            await store.async_save_many("ns", [entry(content=1), bad])
        assert str(got.value) == str(expected.value)
        with pytest.raises(UnstorableValueError) as got:
            store.save("ns", bad)
        assert str(got.value) == str(expected.value)
        assert await store.async_load("ns") == []


class TestCloseWithoutAwait:
    """A plain close() call closes for real, inside a running event loop and outside one."""

    async def test_inside_the_loop(self, own_factory: StoreFactory) -> None:
        store = await initialized(own_factory.make())
        resource: Any = next(iter(store._resources.values()))
        store.close()
        assert store._resources == {}
        if isinstance(store, PostgreSQLStore):
            with pytest.raises(asyncpg.InterfaceError, match="closed"):
                await resource.fetchval("SELECT 1")
        else:
            # PyMongo's close is a coroutine: close() scheduled it on this loop.
            await asyncio.gather(*store._closing)
            with pytest.raises(InvalidOperation, match="after close"):
                await resource.client.admin.command("ping")

    def test_outside_any_loop(self, own_factory: StoreFactory) -> None:
        store = own_factory.make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            store.save("ns", entry(content=1))
        runner = store._runner
        assert runner.loop is not None
        store.close()
        assert store._resources == {}
        assert runner.loop is None


# ---------------------------------------------------------------------------- concurrency


class TestConcurrentWriters:
    """Concurrent writers through separate connection pools never leave two entries for a key or lose an append."""

    async def test_same_key_many_writers(self, factory: StoreFactory) -> None:
        stores = [await initialized(factory.make()) for _ in range(3)]
        written = [entry(key="k", content=[s, i]) for s in range(3) for i in range(15)]
        await asyncio.gather(*(stores[n % 3].async_save("ns", e) for n, e in enumerate(written)))
        loaded = await stores[0].async_load("ns")
        assert len(loaded) == 1
        assert loaded[0].entry_id in set(ids(written))
        assert await stores[1].async_load_by_key("ns", "k") == loaded[0]

    async def test_appends_are_kept_once_in_one_order(self, factory: StoreFactory) -> None:
        stores = [await initialized(factory.make()) for _ in range(2)]

        async def append(n: int) -> list[str]:
            made = []
            for i in range(20):
                e = entry(content=[n, i])
                await stores[n].async_save("ns", e)
                made.append(e.entry_id)
            return made

        first, second = await asyncio.gather(append(0), append(1))
        seen = [ids(await s.async_load("ns")) for s in stores]
        assert seen[0] == seen[1]
        assert sorted(seen[0]) == sorted(first + second)
        assert [i for i in seen[0] if i in set(first)] == first

    async def test_concurrent_initialize(self, factory: StoreFactory) -> None:
        stores = [factory.make() for _ in range(5)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            await asyncio.gather(*(s.async_initialize() for s in stores))
            await asyncio.gather(*(s.async_initialize() for s in stores))
        await stores[0].async_save("ns", entry(content=1))
        assert len(await stores[4].async_load("ns")) == 1


# ---------------------------------------------------------------------------- failures


class BlackHole:
    """A loopback port that accepts TCP connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])

    def close(self) -> None:
        self.sock.close()


class TestServerDownAtInitialize:
    """An unreachable server raises StoreConnectionError (a ConnectionError) naming host and port, within timeout."""

    @pytest.mark.parametrize("kind", ["postgres", "mongodb"])
    async def test_nothing_listening(self, kind: str) -> None:
        port = dead_port()
        store = down_store(kind, port, timeout=2.0)
        started = time.monotonic()
        with pytest.raises(StoreConnectionError) as info:
            await store.async_initialize()
        assert time.monotonic() - started < 2.0 + 1.5
        assert isinstance(info.value, ConnectionError)
        assert f"127.0.0.1:{port}" in str(info.value)
        await store.async_close()

    @pytest.mark.parametrize("kind", ["postgres", "mongodb"])
    async def test_server_that_never_answers(self, kind: str) -> None:
        hole = BlackHole()
        try:
            store = down_store(kind, hole.port, timeout=1.0)
            with warnings.catch_warnings():
                # PyMongo 4.20 leaks the socket of a server check that client.close() cancels
                # mid-handshake (it closes sockets on OSError only); the store did close it.
                warnings.simplefilter("ignore", ResourceWarning)
                started = time.monotonic()
                with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{hole.port}"):
                    await store.async_initialize()
                assert time.monotonic() - started < 1.0 + 1.5
                await store.async_close()
                gc.collect()
            collect_cancelled_connects()
        finally:
            hole.close()

    @pytest.mark.parametrize("kind", ["postgres", "mongodb"])
    def test_sync_first_use(self, kind: str) -> None:
        port = dead_port()
        store = down_store(kind, port, timeout=2.0)
        with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{port}"):
            store.load("ns")
        store.close()

    async def test_motor_client_to_a_dead_server(self) -> None:
        port = dead_port()
        client: AsyncIOMotorClient[dict[str, Any]] = AsyncIOMotorClient(
            store_url("mongodb", port), serverSelectionTimeoutMS=1000
        )
        store = MongoDBStore(store_url("mongodb", port), client=client, timeout=1.0)
        with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{port}"):
            await store.async_initialize()
        await store.async_close()
        client.close()


def managed(server: Server) -> Server:
    if server.is_external:
        pytest.skip(f"cannot restart the external server {server.url} from the tests")
    return server


class TestServerRestart:
    """After a server restart the next operation succeeds on fresh connections, and no acknowledged write is lost."""

    async def test_next_operation_succeeds(self, own_factory: StoreFactory) -> None:
        server = managed(own_factory.server)
        store = await initialized(own_factory.make())
        before = entry(key="before", content=1)
        await store.async_save("ns", before)
        await asyncio.to_thread(server.restart)
        after = entry(key="after", content=2)
        await store.async_save("ns", after)
        assert await store.async_load("ns") == [before, after]

    def test_sync_path_recovers(self, own_factory: StoreFactory) -> None:
        server = managed(own_factory.server)
        store = own_factory.make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            store.save("ns", entry(content=1))
        server.restart()
        store.save("ns", entry(content=2))
        assert [e.content for e in store.load("ns")] == [1, 2]
        store.close()

    async def test_motor_client_recovers(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("motor", managed(server_for(request, "motor")))
        try:
            store = await initialized(made.make())
            await store.async_save("ns", entry(content=1))
            await asyncio.to_thread(made.server.restart)
            await store.async_save("ns", entry(content=2))
            assert [e.content for e in await store.async_load("ns")] == [1, 2]
        finally:
            await made.cleanup()

    async def test_acknowledged_writes_survive_a_restart_under_load(
        self, own_factory: StoreFactory
    ) -> None:
        server = managed(own_factory.server)
        store = await initialized(own_factory.make(timeout=5.0))
        acknowledged: list[str] = []
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def writer() -> None:
            for i in range(400):
                if stop.is_set():
                    return
                e = entry(content=i)
                try:
                    await store.async_save("ns", e)
                except StoreConnectionError as exc:
                    failures.append(exc)
                    await asyncio.sleep(0.05)
                    continue
                acknowledged.append(e.entry_id)
                await asyncio.sleep(0.005)

        task = asyncio.create_task(writer())
        await asyncio.sleep(0.2)
        await asyncio.to_thread(server.restart)
        await asyncio.sleep(0.3)
        stop.set()
        await task
        stored = ids(await store.async_load("ns"))
        assert len(acknowledged) > 20
        assert len(stored) == len(set(stored))
        missing = [i for i in acknowledged if i not in set(stored)]
        assert missing == []
        # Acknowledged writes keep their order; unacknowledged ones may or may not have landed.
        assert [i for i in stored if i in set(acknowledged)] == acknowledged


# ---------------------------------------------------------------------------- PostgreSQL specifics


class TestPostgreSQLSchema:
    """The table, its indexes and its schema name are as documented; schema names cannot inject SQL."""

    @pytest.mark.parametrize(
        "name",
        ['x"; DROP SCHEMA public CASCADE; --', "1abc", "a-b", "", "a" * 64, "sp ace", "ümlaut"],
    )
    def test_bad_schema_names_are_rejected_before_connecting(self, name: str) -> None:
        with pytest.raises(InvalidValueError, match="schema_name"):
            PostgreSQLStore("postgresql://127.0.0.1:1/x", schema_name=name)

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"pool_size": 0}, ValueError),
            ({"pool_min_size": 11}, ValueError),
            ({"timeout": 0}, ValueError),
            ({"pool_size": "3"}, TypeError),
            ({"schema_name": 3}, TypeError),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], error: type[Exception]) -> None:
        with pytest.raises(error):
            PostgreSQLStore("postgresql://127.0.0.1:1/x", **kwargs)

    async def test_layout(self, postgres_server: Server) -> None:
        made = StoreFactory("postgres", postgres_server)
        try:
            store = await initialized(made.make())
            await store.async_save("ns", entry(content=1))
            con = await asyncpg.connect(postgres_server.url)
            try:
                columns = dict(
                    await con.fetch(
                        "SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = $1 AND table_name = 'memory_entries'",
                        made.name,
                    )
                )
                key_collation = await con.fetchval(
                    "SELECT collation_name FROM information_schema.columns "
                    "WHERE table_schema = $1 AND table_name = 'memory_entries' "
                    "AND column_name = 'key'",
                    made.name,
                )
                indexes = {
                    r["indexname"]: r["indexdef"]
                    for r in await con.fetch(
                        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1",
                        made.name,
                    )
                }
                with pytest.raises(asyncpg.CheckViolationError):
                    await con.execute(
                        f'INSERT INTO "{made.name}".memory_entries (entry_id, namespace, scope, content, importance) '
                        "VALUES ('x', 'n', 'working', '1', 1.5)"
                    )
            finally:
                await con.close()
        finally:
            await made.cleanup()
        assert columns == {
            "seq": "bigint",
            "entry_id": "text",
            "namespace": "text",
            "scope": "text",
            "key": "text",
            "content": "jsonb",
            "metadata": "jsonb",
            "created_at": "timestamp with time zone",
            "expires_at": "timestamp with time zone",
            "importance": "double precision",
            "version": "bigint",
            "search_words": "text",
            "search_vector": "tsvector",
        }
        assert key_collation == "C"  # code-point order, as load_range promises
        assert "(entry_id)" in indexes["memory_entries_pkey"]
        assert "(namespace, seq)" in indexes["memory_entries_namespace"]
        key_index = indexes["memory_entries_namespace_key"]
        assert "UNIQUE" in key_index
        assert "(namespace, key)" in key_index
        assert "key IS NOT NULL" in key_index
        assert "expires_at IS NOT NULL" in indexes["memory_entries_expires_at"]

    async def test_content_is_queryable_jsonb(self, postgres_server: Server) -> None:
        made = StoreFactory("postgres", postgres_server)
        try:
            store = await initialized(made.make())
            await store.async_save("ns", entry(key="k", content={"city": "Oslo", "n": 1e16}))
            con = await asyncpg.connect(postgres_server.url)
            try:
                city = await con.fetchval(
                    f"SELECT content->>'city' FROM \"{made.name}\".memory_entries WHERE key = 'k'"
                )
                kind = await con.fetchval(
                    f"SELECT jsonb_typeof(content->'n') FROM \"{made.name}\".memory_entries WHERE key = 'k'"
                )
            finally:
                await con.close()
        finally:
            await made.cleanup()
        assert (city, kind) == ("Oslo", "number")


# ---------------------------------------------------------------------------- MongoDB specifics


class TestMongoDBIndexes:
    """Indexes exist; a server without partial indexes gets plain ones and exactly one warning."""

    @pytest.mark.parametrize("client_kind", ["mongodb", "motor"])
    async def test_indexes_and_at_most_one_warning(
        self, request: pytest.FixtureRequest, client_kind: str
    ) -> None:
        made = StoreFactory(client_kind, server_for(request, client_kind))
        try:
            store = made.make()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await store.async_initialize()
                await store.async_initialize()
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
            try:
                info = await client["memlane"][made.name].index_information()
            finally:
                await client.close()
        finally:
            await made.cleanup()
        fallback = [w for w in caught if issubclass(w.category, IndexFallbackWarning)]
        assert len(fallback) <= 1
        assert [w for w in caught if w not in fallback] == []
        assert info["entry_id_unique"]["unique"] is True
        assert info["namespace_seq"]["key"] == [("namespace", 1), ("seq", 1)]
        assert info["namespace_key"]["key"] == [("namespace", 1), ("key", 1)]
        assert info["expires_at"]["key"] == [("expires_at", 1)]
        partial = "partialFilterExpression" in info["namespace_key"]
        assert partial or len(fallback) == 1
        if fallback:
            assert "namespace_key" in str(fallback[0].message)
            assert "expires_at" in str(fallback[0].message)

    def test_bad_names(self) -> None:
        with pytest.raises(InvalidValueError):
            MongoDBStore("mongodb://127.0.0.1:1/", collection="a$b")
        with pytest.raises(TypeError):
            MongoDBStore("mongodb://127.0.0.1:1/", database=None)  # type: ignore[arg-type]

    async def test_field_names_with_dots_and_dollars_are_content(
        self, request: pytest.FixtureRequest
    ) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        try:
            store = await initialized(made.make())
            content = {"$set": {"a.b": 1}, "x.y": {"$inc": 2}}
            await store.async_save("ns", entry(key="k", content=content, metadata={"$m.": True}))
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
            try:
                raw = await client["memlane"][made.name].find_one({"key": "k"})
            finally:
                await client.close()
        finally:
            await made.cleanup()
        assert raw is not None
        assert json.loads(raw["content"]) == content
        assert raw["_id"] == '["ns","k"]'  # the key's document: one per (namespace, key)


# ---------------------------------------------------------------------------- memories on the stores


class TestMemoriesOnNetworkStores:
    """ConversationMemory and MemoryManager persist through the network stores and restore identically."""

    async def test_conversation_restores(self, store: Store) -> None:
        memory = ConversationMemory(store=store)
        cid = await memory.async_new_conversation()
        for i in range(4):
            await memory.async_add_turn(cid, f"question {i}", f"answer {i}", metadata={"i": i})
        restored = ConversationMemory(store=store)
        assert await restored.async_get_message_history(
            cid
        ) == await memory.async_get_message_history(cid)
        assert [t.turn_id for t in await restored.async_get_turns(cid)] == [0, 1, 2, 3]
        assert cid in restored.conversation_ids

    async def test_summaries_restore(self, store: Store) -> None:
        def summarize(turns: list[Any]) -> str:
            return " / ".join(t.assistant_response for t in turns)

        memory = ConversationMemory(store=store, summarize_threshold=30, summarizer=summarize)
        cid = await memory.async_new_conversation()
        for i in range(6):
            await memory.async_add_turn(cid, f"question number {i}", f"answer number {i} " * 3)
        restored = ConversationMemory(store=store, summarize_threshold=30, summarizer=summarize)
        assert await restored.async_get_message_history(
            cid
        ) == await memory.async_get_message_history(cid)
        assert restored.get_summary(cid) == memory.get_summary(cid) is not None

    async def test_working_memory(self, store: Store) -> None:
        manager = MemoryManager(store=store, working_scope_id="agent")
        await manager.working.async_set("city", "Oslo")
        await manager.working.async_set("city", "Bergen", importance=0.9)
        assert await manager.working.async_get("city") == "Bergen"
        assert len(await store.async_load("working:agent")) == 1
        manager.set_fact("temp", 1, ttl=0.3)
        assert manager.get_fact("temp") == 1
        await asyncio.sleep(0.4)
        assert manager.get_fact("temp") is None


class TestImportWithoutExtras:
    """memlane imports without asyncpg and PyMongo; creating a store then names the extra to install."""

    def test_blocked_drivers(self) -> None:
        script = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"asyncpg", "pymongo", "motor", "bson", "gridfs"}:
            raise ImportError(f"blocked {name}")
sys.meta_path.insert(0, Block())
import memlane
from memlane.stores import MongoDBStore, PostgreSQLStore
for make in (lambda: PostgreSQLStore("postgresql://h/db"), lambda: MongoDBStore("mongodb://h/")):
    try:
        make()
    except ImportError as exc:
        print(exc)
print(sorted(m for m in sys.modules if m.split(".")[0] in {"asyncpg", "pymongo", "motor"}))
"""
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
        )
        lines = out.stdout.strip().splitlines()
        assert "memlane[postgres]" in lines[0]
        assert "memlane[mongodb]" in lines[1]
        assert lines[2] == "[]"


# ---------------------------------------------------------------------------- names a server cannot hold

NAME_CALLS: list[tuple[str, Any]] = [
    ("save", lambda s, ns, k, i: s.async_save(ns, entry(entry_id=i, key=k, content=1))),
    ("save_many", lambda s, ns, k, i: s.async_save_many(ns, [entry(entry_id=i, key=k)])),
    ("save_if", lambda s, ns, k, i: s.async_save_if(ns, entry(entry_id=i, key=k), None)),
    ("load", lambda s, ns, k, i: s.async_load(ns)),
    ("load_by_key", lambda s, ns, k, i: s.async_load_by_key(ns, k)),
    ("load_range", lambda s, ns, k, i: s.async_load_range(ns, "", k + "z")),
    ("delete", lambda s, ns, k, i: s.async_delete(ns, i)),
    ("delete_many", lambda s, ns, k, i: s.async_delete_many(ns, ["fine", i])),
    ("clear", lambda s, ns, k, i: s.async_clear(ns)),
]
"""Every store method that takes a namespace, key or id, called with (namespace, key, id).

``search`` is the exception, by design: it reads many namespaces, and one the server could
never hold is simply not searched (see test_database_search)."""

# (kind, the bad text, what the message says about it); MongoDB holds NUL.
BAD_TEXTS = [
    ("postgres", "bad\ud800", "lone surrogate"),
    ("postgres", "bad\x00", "NUL"),
    ("mongodb", "bad\udfff", "lone surrogate"),
]


class TestNamesAServerCannotHold:
    """A namespace, key or id the server cannot hold is a ValueError naming it, from every
    method, before the driver sees it; nothing is stored and the store keeps working."""

    @pytest.fixture(params=BAD_TEXTS, ids=["pg-surrogate", "pg-nul", "mongo-surrogate"])
    async def case(self, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, str, str]]:
        kind, bad, why = request.param
        made = StoreFactory(kind, server_for(request, kind))
        yield await initialized(made.make()), bad, why
        await made.cleanup()

    @pytest.mark.parametrize(("method", "call"), NAME_CALLS, ids=[n for n, _ in NAME_CALLS])
    @pytest.mark.parametrize("where", ["namespace", "key", "entry_id"])
    async def test_every_method(
        self, case: tuple[Store, str, str], method: str, call: Any, where: str
    ) -> None:
        store, bad, why = case
        ns, key, entry_id = (
            bad if where == "namespace" else "ns",
            bad if where == "key" else "k",
            bad if where == "entry_id" else "id",
        )
        uses = {
            "load": {"namespace"},
            "clear": {"namespace"},
            "load_by_key": {"namespace", "key"},
            "load_range": {"namespace", "key"},
            "delete": {"namespace", "entry_id"},
            "delete_many": {"namespace", "entry_id"},
        }.get(method, {"namespace", "key", "entry_id"})
        if where not in uses:
            return
        with pytest.raises(ValueError, match=why) as info:
            await call(store, ns, key, entry_id)
        assert repr(bad)[1:-1] in str(info.value)
        assert await store.async_load("ns") == []
        await store.async_save("ns", entry(content="still works"))
        assert len(await store.async_load("ns")) == 1

    async def test_search_leaves_such_namespaces_out(self, case: tuple[Store, str, str]) -> None:
        store, bad, _ = case
        await store.async_save("ns", entry(content=1, metadata={"search_text": "word"}))
        if "\x00" in bad:  # no store takes NUL in a namespace: named by the argument check
            with pytest.raises(ValueError, match="NUL"):
                await store.async_search([bad], "word")
            return
        assert await store.async_search([bad], "word") == []
        assert len(await store.async_search([bad, "ns"], "word")) == 1

    async def test_sync_twins_too(self, case: tuple[Store, str, str]) -> None:
        store, bad, why = case
        for call in (
            lambda: store.load_by_key(bad, "k"),
            lambda: store.delete("ns", bad),
            lambda: store.clear(bad),
            lambda: store.delete_many("ns", [bad]),
        ):
            with pytest.raises(ValueError, match=why):
                await asyncio.to_thread(call)


class TestDriverErrorsAreStoreErrors:
    """A failure the server reports (here: the table dropped behind the store's back) is a
    memlane StoreError naming the server, from every method; never a raw asyncpg error."""

    async def test_postgres(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store = await initialized(made.make())
            await store.async_save("ns", entry(key="k", content=1))
            con = await asyncpg.connect(made.server.url)
            try:
                await con.execute(f'DROP TABLE "{made.name}".memory_entries CASCADE')
            finally:
                await con.close()
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: store.async_load("ns"),
                lambda: store.async_load_by_key("ns", "k"),
                lambda: store.async_delete("ns", "x"),
                lambda: store.async_delete_many("ns", ["x"]),
                lambda: store.async_clear("ns"),
                lambda: store.async_save("ns", entry(content=1)),
                lambda: store.async_namespaces(),
                lambda: store.async_cleanup_expired(),
            ]
            for call in calls:
                with pytest.raises(StoreError, match=store.address) as info:
                    await call()
                assert not isinstance(info.value, asyncpg.PostgresError)
                assert "UndefinedTableError" in str(info.value)
        finally:
            await made.cleanup()

    async def test_mongodb(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        try:
            store = await initialized(made.make())
            huge = entry(content="x" * (17 * 1024 * 1024))  # beyond any BSON document
            with pytest.raises(StoreError, match="DocumentTooLarge") as info:
                await store.async_save("ns", huge)
            assert store.address in str(info.value)
            with pytest.raises(StoreError, match="DocumentTooLarge"):
                await asyncio.to_thread(store.save, "ns", huge)
            assert await store.async_load("ns") == []
        finally:
            await made.cleanup()


class TestMongoDBUnreachableInOneLine:
    """An unreachable MongoDB gives up after the store's 3 s server selection, in one line
    naming host and port (no settings, no topology dump)."""

    async def test_the_message(self) -> None:
        store = MongoDBStore("mongodb://127.0.0.1:1")
        assert store.server_selection_timeout == 3.0
        with pytest.raises(StoreConnectionError) as info:
            await store.async_initialize()
        message = str(info.value)
        assert "\n" not in message
        assert message.startswith("cannot connect to MongoDB at 127.0.0.1:1 (no usable server")
        assert "Topology" not in message
        assert "configured timeouts" not in message
        assert len(message) < 200
        await store.async_close()

    async def test_the_client_is_given_it(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        try:
            store = await initialized(made.make())
            mongo: Any = next(iter(store._resources.values()))
            assert mongo.client.options.server_selection_timeout == 3.0
            slow = MongoDBStore(made.server.url, collection=made.name, timeout=60.0)
            assert slow.server_selection_timeout == 3.0
            patient = MongoDBStore(made.server.url, server_selection_timeout=20.0, timeout=10.0)
            assert patient.server_selection_timeout == 10.0  # never beyond timeout
            url = f"{made.server.url.rstrip('/')}/?serverSelectionTimeoutMS=7000"
            from_url = await initialized(MongoDBStore(url, collection=made.name))
            mongo = next(iter(from_url._resources.values()))
            assert mongo.client.options.server_selection_timeout == 7.0  # the URL wins
            await from_url.async_close()
        finally:
            await made.cleanup()
