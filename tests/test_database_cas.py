"""save_if and load_range on PostgreSQLStore and MongoDBStore against real servers.

The compare-and-swap is judged where it matters: by racing writers in one process and in
several processes (each a fresh interpreter connecting by URL). Tables and collections
written before versions existed keep working; options written in a connection URL win over
the store's defaults.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from db_servers import Server
from memlane import _backend
from memlane.errors import InvalidValueError, StoreConnectionError, UnstorableValueError
from memlane.stores import MongoDBStore, PostgreSQLStore
from memlane.stores.protocol import ConditionalStore
from memlane.types import MemoryEntry, utc_now
from test_database_stores import (
    BlackHole,
    Store,
    StoreFactory,
    collect_cancelled_connects,
    dead_port,
    initialized,
    server_for,
    store_url,
    unique_name,
)

STEP_TIMEOUT = 120.0


def keyed(key: str, content: Any = None, **kwargs: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **kwargs)


@pytest.fixture(params=["postgres", "mongodb", "motor"])
async def factory(
    request: pytest.FixtureRequest, impl: _backend.Implementation
) -> AsyncIterator[StoreFactory]:
    made = StoreFactory(request.param, server_for(request, request.param))
    yield made
    await made.cleanup()


@pytest.fixture
async def store(factory: StoreFactory) -> Store:
    return await initialized(factory.make())


@pytest.fixture(params=["postgres", "mongodb"])
async def own_factory(
    request: pytest.FixtureRequest, impl: _backend.Implementation
) -> AsyncIterator[StoreFactory]:
    """Stores that make their own clients from the URL (what other processes do too)."""
    made = StoreFactory(request.param, server_for(request, request.param))
    yield made
    await made.cleanup()


# ---------------------------------------------------------------------------- save_if


class TestSaveIfWinsOnlyOnTheExpectedVersion:
    """save_if writes only when the key is at the expected version, and then stores one more."""

    async def test_absent_wins_once(self, store: Store) -> None:
        assert isinstance(store, ConditionalStore)
        first = keyed("k", "first")
        assert await store.async_save_if("ns", first, None) is True
        assert await store.async_save_if("ns", keyed("k", "second"), None) is False
        loaded = await store.async_load_by_key("ns", "k")
        assert loaded is not None
        assert (loaded.entry_id, loaded.content, loaded.version) == (first.entry_id, "first", 1)

    async def test_versions_increment(self, store: Store) -> None:
        held = keyed("k", 0)
        assert await store.async_save_if("ns", held, None)
        for expected in range(1, 5):
            current = await store.async_load_by_key("ns", "k")
            assert current is not None
            assert current.version == expected
            changed = current.model_copy(update={"content": expected})
            assert await store.async_save_if("ns", changed, current.version)
        final = await store.async_load_by_key("ns", "k")
        assert final is not None
        assert (final.entry_id, final.content, final.version) == (held.entry_id, 4, 5)
        assert [e.version for e in await store.async_load("ns")] == [5]

    async def test_a_loss_changes_nothing(self, store: Store) -> None:
        await store.async_save_if("ns", keyed("k", "kept", importance=0.7), None)
        await store.async_save("ns", keyed("other", "x"))
        before = await store.async_load("ns")
        for expected in (None, 0, 2, 99):
            assert await store.async_save_if("ns", keyed("k", "lost"), expected) is False
        # The loser's entry_id is elsewhere: a loss must not move it either.
        other = before[1]
        moved = other.model_copy(update={"key": "k", "content": "lost"})
        assert await store.async_save_if("ns", moved, 7) is False
        assert await store.async_load("ns") == before

    async def test_an_int_never_wins_over_an_absent_key(self, store: Store) -> None:
        assert await store.async_save_if("ns", keyed("k"), 0) is False
        assert await store.async_load("ns") == []

    async def test_an_expired_holder_counts_as_absent(self, store: Store) -> None:
        past = utc_now() - timedelta(seconds=1)
        await store.async_save("ns", keyed("k", "old", expires_at=past))
        assert await store.async_save_if("ns", keyed("k", "stale hope"), 0) is False
        fresh = keyed("k", "new")
        assert await store.async_save_if("ns", fresh, None) is True
        assert await store.async_load("ns") == [fresh.model_copy(update={"version": 1})]
        assert await store.async_cleanup_expired() == 0  # the expired holder was replaced

    async def test_plain_saves_store_version_zero(self, store: Store) -> None:
        assert await store.async_save_if("ns", keyed("k", 1), None)
        await store.async_save("ns", keyed("k", 2))
        loaded = await store.async_load_by_key("ns", "k")
        assert loaded is not None
        assert (loaded.content, loaded.version) == (2, 0)
        assert await store.async_save_if("ns", keyed("k", 3, version=41), 0)
        await store.async_save_many("ns", [keyed("k", 4), keyed("j", 5)])
        assert [(e.key, e.version) for e in await store.async_load("ns")] == [("k", 0), ("j", 0)]

    async def test_a_win_follows_the_rules_of_save(self, store: Store) -> None:
        a, b = keyed("a", "a"), keyed("b", "b")
        elsewhere = keyed("x", "elsewhere")
        await store.async_save_many("ns", [a, b])
        await store.async_save("other", elsewhere)
        # Another entry holds the key: it is replaced. An entry_id held under another key
        # of the namespace, or in another namespace, moves onto the key.
        assert await store.async_save_if("ns", keyed("a", "new a"), 0)
        assert await store.async_save_if("ns", b.model_copy(update={"key": "c"}), None)
        assert await store.async_save_if("ns", elsewhere.model_copy(update={"key": "c"}), 1)
        assert await store.async_load("other") == []
        assert [(e.key, e.content, e.version) for e in await store.async_load("ns")] == [
            ("a", "new a", 1),
            ("c", "elsewhere", 2),
        ]
        assert await store.async_load_by_key("ns", "b") is None

    async def test_sync_twin_inside_a_coroutine(self, store: Store) -> None:
        assert store.save_if("ns", keyed("k", 1), None) is True
        assert store.save_if("ns", keyed("k", 2), None) is False
        assert [e.version for e in store.load_range("ns", "k", "l")] == [1]

    async def test_a_retried_attempt_recognises_its_own_win(self, store: Store) -> None:
        won = keyed("k", "mine")
        assert await store.async_save_if("ns", won, None)

        async def retried(attempted: MemoryEntry) -> bool:
            prepared = store._prepare("ns", [attempted])[0]
            return bool(
                await store._call(lambda r: store._do_save_if(r, "ns", prepared, None, retry=True))
            )

        # The first attempt's connection dropped after it won: the retry reports the win...
        assert await retried(won) is True
        # ...but not someone else's.
        assert await retried(won.model_copy(update={"entry_id": "somebody else"})) is False
        assert [e.version for e in await store.async_load("ns")] == [1]


class TestSaveIfArguments:
    """save_if checks its arguments as save does, before any I/O, naming what is wrong."""

    @pytest.mark.parametrize(
        ("expected", "error"),
        [
            ("1", TypeError),
            (True, TypeError),
            (1.0, TypeError),
            (-1, ValueError),
            (2**63 - 1, ValueError),
        ],
    )
    async def test_expected_version(
        self, store: Store, expected: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error, match="expected_version"):
            await store.async_save_if("ns", keyed("k"), expected)
        with pytest.raises(error, match="expected_version"):
            store.save_if("ns", keyed("k"), expected)
        assert await store.async_load("ns") == []

    async def test_entry_and_namespace(self, store: Store) -> None:
        with pytest.raises(TypeError, match="key"):
            await store.async_save_if("ns", MemoryEntry(content=1), None)
        with pytest.raises(TypeError, match="entry"):
            await store.async_save_if("ns", {"key": "k"}, None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="namespace"):
            await store.async_save_if(None, keyed("k"), None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="namespace"):
            await store.async_save_if("", keyed("k"), None)
        with pytest.raises(UnstorableValueError, match="content"):
            await store.async_save_if("ns", keyed("k", {1: "x"}), None)
        assert await store.async_load("ns") == []

    async def test_values_postgresql_cannot_hold(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store = await initialized(made.make())
            with pytest.raises(InvalidValueError, match="key"):
                await store.async_save_if("ns", keyed("a\x00b"), None)
            with pytest.raises(InvalidValueError, match="start"):
                await store.async_load_range("ns", "a\x00", "b")
        finally:
            await made.cleanup()


class TestSaveIfRacesInOneProcess:
    """Writers racing through separate connection pools: one winner per expected version."""

    async def test_one_winner_of_many(self, factory: StoreFactory) -> None:
        stores = [await initialized(factory.make()) for _ in range(3)]
        for key in ("a", "b", "c"):
            results = await asyncio.gather(
                *(stores[n % 3].async_save_if("ns", keyed(key, n), None) for n in range(12))
            )
            assert results.count(True) == 1
            winner = await stores[0].async_load_by_key("ns", key)
            assert winner is not None
            assert winner.content == results.index(True)

    async def test_read_modify_write_loses_no_increment(self, factory: StoreFactory) -> None:
        stores = [await initialized(factory.make()) for _ in range(3)]
        assert await stores[0].async_save_if("ns", keyed("n", 0), None)

        async def increment(store: Store, times: int, fresh_ids: bool) -> None:
            for _ in range(times):
                while True:
                    held = await store.async_load_by_key("ns", "n")
                    assert held is not None
                    new = keyed("n", held.content + 1) if fresh_ids else held
                    new = new.model_copy(update={"content": held.content + 1})
                    if await store.async_save_if("ns", new, held.version):
                        break

        await asyncio.gather(*(increment(s, 8, n % 2 == 1) for n, s in enumerate(stores)))
        final = await stores[0].async_load("ns")
        assert [(e.content, e.version) for e in final] == [(24, 25)]


# ---------------------------------------------------------------------------- shared entry_id

RaceOnce = Callable[[dict[str, Any]], Awaitable[list[bool]]]
"""Runs one race: every racer ``n`` saves_if ``{**spec["content"], "racer": n}`` under
``spec["entry_id"]`` onto ``spec["key"]``, expecting ``spec["expected"][n]``; returns who won."""

EXPECTATIONS = ["absent", "held", "mixed"]
"""What the racers of a round expect: all None (the key free, or held by an expired entry), all
the holder's version (the holder being the shared entry itself or another one), or half each."""

ROUNDS = 30
SHARED_TEXT = "A turn of a conversation that several hosts try to record at once. " * 50
"""A few KB, as a real conversation record is, shared by every racer of a round."""


async def race_rounds(checker: Store, expecting: str, race: RaceOnce, racers: int) -> None:
    """Races ``racers`` writers sharing ONE entry_id over ``ROUNDS`` keys, checking each round.

    The entry_id is the same in every round, so from the second round on it lives under the
    previous key, and a win moves it (save's rules); the last key then holds it alone.
    """
    entry_id = uuid.uuid4().hex
    past = utc_now() - timedelta(seconds=1)
    for i in range(ROUNDS):
        key = f"key-{i:02d}"
        if expecting == "absent":
            if i % 3 == 2:
                await checker.async_save("ns", keyed(key, "expired", expires_at=past))
            expected: list[int | None] = [None] * racers
        else:
            holder_id = entry_id if i % 2 else uuid.uuid4().hex
            holder = MemoryEntry(entry_id=holder_id, key=key, content="holder")
            assert await checker.async_save_if("ns", holder, None)
            expected = [None if expecting == "mixed" and n % 2 else 1 for n in range(racers)]
        results = await race(
            {
                "key": key,
                "entry_id": entry_id,
                "content": {"text": SHARED_TEXT},
                "expected": expected,
            }
        )
        assert results.count(True) == 1, (key, results)
        winner = results.index(True)
        assert expecting == "absent" or expected[winner] == 1, (key, results)
        held = await checker.async_load_by_key("ns", key)
        assert held is not None, key
        assert (held.entry_id, held.version) == (entry_id, 1 if expecting == "absent" else 2)
        assert held.content == {"text": SHARED_TEXT, "racer": winner}, key
    stored = [e for e in await checker.async_load("ns") if e.entry_id == entry_id]
    assert [e.key for e in stored] == [f"key-{ROUNDS - 1:02d}"]


class TestSaveIfRacersSharingAnEntryId:
    """Racers writing one entry_id onto one key: exactly one wins, and its entry is stored."""

    @pytest.mark.parametrize("expecting", EXPECTATIONS)
    async def test_threads(self, own_factory: StoreFactory, expecting: str) -> None:
        stores = [await initialized(own_factory.make()) for _ in range(8)]

        def save_if(n: int, spec: dict[str, Any], barrier: threading.Barrier) -> bool:
            new = MemoryEntry(
                entry_id=spec["entry_id"], key=spec["key"], content={**spec["content"], "racer": n}
            )
            barrier.wait(STEP_TIMEOUT)
            return stores[n].save_if("ns", new, spec["expected"][n])

        with ThreadPoolExecutor(len(stores)) as pool:

            async def race(spec: dict[str, Any]) -> list[bool]:
                barrier = threading.Barrier(len(stores))
                futures = [pool.submit(save_if, n, spec, barrier) for n in range(len(stores))]
                return [await asyncio.wrap_future(f) for f in futures]

            # Each store connects on its own loop (the sync methods' one) before the race.
            warm = [pool.submit(s.load, "warm-up") for s in stores]
            for f in warm:
                await asyncio.wrap_future(f)
            await race_rounds(stores[0], expecting, race, len(stores))


class TestPostgreSQLSaveIfInterleavings:
    """PostgreSQL's save_if with the winner's transaction held open: a waiting loser stays a loser."""

    @pytest.fixture
    async def pg(self, request: pytest.FixtureRequest) -> AsyncIterator[PostgreSQLStore]:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        store = await initialized(made.make())
        assert isinstance(store, PostgreSQLStore)
        yield store
        await made.cleanup()

    @staticmethod
    async def call(
        con: asyncpg.Connection, store: PostgreSQLStore, new: MemoryEntry, expected: int | None
    ) -> bool:
        """The store's save_if statement on ``con``, whose transaction the test controls."""
        params = store._prepare("ns", [new])[0]
        return await store._do_save_if(con, "ns", params, expected, retry=False)

    @pytest.mark.parametrize(
        ("holder", "expected"),
        [("none", None), ("expired", None), ("other", 1), ("shared", 1), ("moving", None)],
    )
    async def test_the_second_racer_waits_then_loses(
        self, pg: PostgreSQLStore, postgres_server: Server, holder: str, expected: int | None
    ) -> None:
        shared = keyed("k", {"racer": 0, "text": SHARED_TEXT})
        past = utc_now() - timedelta(seconds=1)
        if holder == "expired":
            await pg.async_save("ns", keyed("k", "expired", expires_at=past))
        elif holder == "other":
            assert await pg.async_save_if("ns", keyed("k", "holder"), None)
        elif holder == "shared":
            assert await pg.async_save_if("ns", shared.model_copy(update={"content": 0}), None)
        elif holder == "moving":
            await pg.async_save("ns", shared.model_copy(update={"key": "elsewhere"}))
        first, second = [await asyncpg.connect(postgres_server.url) for _ in range(2)]
        try:
            async with first.transaction():
                assert await self.call(first, pg, shared, expected)
                loser = shared.model_copy(update={"content": {"racer": 1, "text": SHARED_TEXT}})
                waiting = asyncio.ensure_future(self.call(second, pg, loser, expected))
                # The second racer reaches the first one's row lock (the key's holder or the
                # entry_id's new row) and waits there until the first commits.
                pid = second.get_server_pid()
                for _ in range(int(STEP_TIMEOUT * 100)):
                    state = await first.fetchval(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
                    )
                    if state == "Lock" or waiting.done():
                        break
                    await asyncio.sleep(0.01)
                assert not waiting.done()
            assert await asyncio.wait_for(waiting, STEP_TIMEOUT) is False
        finally:
            await first.close()
            await second.close()
        held = await pg.async_load_by_key("ns", "k")
        assert held is not None
        assert (held.content, held.version) == (shared.content, 1 if expected is None else 2)
        assert await pg.async_load_by_key("ns", "elsewhere") is None

    async def test_a_table_of_the_previous_schema_gets_the_current_function(
        self, pg: PostgreSQLStore, postgres_server: Server
    ) -> None:
        s = f'"{pg.schema_name}"'
        con = await asyncpg.connect(postgres_server.url)
        try:
            # What an older release left behind: its mark, and a save_if of its own.
            await con.execute(
                f"""
                CREATE OR REPLACE FUNCTION {s}.save_entry_if(
                    p_namespace TEXT, p_entry_id TEXT, p_scope TEXT, p_key TEXT,
                    p_content JSONB, p_metadata JSONB, p_created_at TIMESTAMPTZ,
                    p_expires_at TIMESTAMPTZ, p_importance FLOAT, p_expected BIGINT,
                    p_now TIMESTAMPTZ, p_retry BOOLEAN
                ) RETURNS BOOLEAN LANGUAGE sql AS 'SELECT TRUE';
                COMMENT ON TABLE {s}.memory_entries IS 'memlane schema 2';
                """
            )
        finally:
            await con.close()
        store = await initialized(PostgreSQLStore(postgres_server.url, schema_name=pg.schema_name))
        try:
            assert await store.async_save_if("ns", keyed("k", 1), None) is True
            assert await store.async_save_if("ns", keyed("k", 2), None) is False
        finally:
            await store.async_close()


class TestMongoDBClaims:
    """MongoDB's claims: one left by a live writer makes others lose; an abandoned one is taken over."""

    @pytest.fixture
    async def mongo(self, request: pytest.FixtureRequest) -> AsyncIterator[MongoDBStore]:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        store = await initialized(made.make(timeout=5.0))
        assert isinstance(store, MongoDBStore)
        yield store
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
        try:
            await client["memlane"].drop_collection(f"{made.name}.claims")
        finally:
            await client.close()
        await made.cleanup()

    async def test_claims(self, mongo: MongoDBStore) -> None:
        await mongo.async_save_if("ns", keyed("k", 1), None)
        claims = next(iter(mongo._resources.values())).claims
        claim_id = json.dumps(["ns", "k", 1])
        await claims.insert_one({"_id": claim_id, "token": "busy", "at": time.time()})
        assert await mongo.async_save_if("ns", keyed("k", 2), 1) is False
        await claims.update_one({"_id": claim_id}, {"$set": {"at": time.time() - 60}})
        assert await mongo.async_save_if("ns", keyed("k", 3), 1) is True
        assert [(e.content, e.version) for e in await mongo.async_load("ns")] == [(3, 2)]
        assert await claims.count_documents({}) == 0


# ---------------------------------------------------------------------------- load_range


class TestLoadRange:
    """load_range: unexpired keyed entries with start <= key < stop, in code-point order."""

    async def test_bounds_order_and_expiry(self, store: Store) -> None:
        keys = ["b", "a", "B", "ba", "é", "z", "😀", "~", "a b", ""]
        past = utc_now() - timedelta(seconds=1)
        await store.async_save_many("ns", [keyed(k, k) for k in keys])
        await store.async_save_many(
            "ns", [MemoryEntry(content="unkeyed"), keyed("bb", "expired", expires_at=past)]
        )
        await store.async_save("other", keyed("b0", "other namespace"))
        everything = await store.async_load_range("ns", "", "\U0010ffff")
        assert [e.key for e in everything] == sorted(keys)
        assert [e.key for e in await store.async_load_range("ns", "a", "c")] == [
            "a",
            "a b",
            "b",
            "ba",
        ]
        assert [e.key for e in await store.async_load_range("ns", "b", "ba")] == ["b"]
        assert await store.async_load_range("ns", "c", "c") == []
        assert await store.async_load_range("ns", "z", "a") == []
        assert await store.async_load_range("nowhere", "", "z") == []
        assert [e.key for e in store.load_range("ns", "~", "\U0010ffff")] == ["~", "é", "😀"]

    async def test_versions_round_trip(self, store: Store) -> None:
        await store.async_save_if("ns", keyed("a", 1), None)
        await store.async_save_if("ns", keyed("b", 1), None)
        held = await store.async_load_by_key("ns", "b")
        assert held is not None
        await store.async_save_if("ns", held, 1)
        await store.async_save("ns", keyed("c", 1))
        ranged = await store.async_load_range("ns", "a", "d")
        assert [(e.key, e.version) for e in ranged] == [("a", 1), ("b", 2), ("c", 0)]
        assert ranged == await store.async_load("ns")

    async def test_bad_bounds(self, store: Store) -> None:
        with pytest.raises(TypeError, match="start"):
            await store.async_load_range("ns", None, "a")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="stop"):
            store.load_range("ns", "a", 3)  # type: ignore[arg-type]

    async def test_postgresql_serves_it_from_the_key_index(
        self, request: pytest.FixtureRequest
    ) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store = await initialized(made.make())
            assert isinstance(store, PostgreSQLStore)
            con = await asyncpg.connect(made.server.url)
            try:
                await con.execute("SET enable_seqscan = off")
                plan = "\n".join(
                    r[0]
                    for r in await con.fetch(
                        f"EXPLAIN {store._sql.load_range}", "ns", utc_now(), "a", "b"
                    )
                )
            finally:
                await con.close()
        finally:
            await made.cleanup()
        assert "memory_entries_namespace_key" in plan
        assert "Sort" not in plan  # the index returns rows in key order


# ---------------------------------------------------------------------------- migration

OLD_POSTGRES_DDL = """
CREATE SCHEMA {s};
CREATE TABLE {s}.memory_entries (
    seq BIGSERIAL NOT NULL,
    entry_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT,
    content JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{{}}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    expires_at TIMESTAMPTZ,
    importance FLOAT NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1)
);
CREATE INDEX memory_entries_namespace ON {s}.memory_entries (namespace, seq);
CREATE UNIQUE INDEX memory_entries_namespace_key
    ON {s}.memory_entries (namespace, key) WHERE key IS NOT NULL;
CREATE INDEX memory_entries_expires_at
    ON {s}.memory_entries (expires_at) WHERE expires_at IS NOT NULL;
COMMENT ON TABLE {s}.memory_entries IS 'memlane schema 1';
INSERT INTO {s}.memory_entries (entry_id, namespace, scope, key, content)
VALUES ('old-k', 'ns', 'working', 'k', '"old"'), ('old-b', 'ns', 'working', 'B', '"B"');
"""
"""The table as memlane made it before versions existed (no version column, key collated
by the database default), with two rows."""


class TestTablesFromBeforeVersions:
    """A table or collection written before versions existed is migrated in place: its entries read as version 0."""

    async def test_postgresql(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            con = await asyncpg.connect(made.server.url)
            try:
                await con.execute(OLD_POSTGRES_DDL.format(s=f'"{made.name}"'))
            finally:
                await con.close()
            store = await initialized(made.make())
            loaded = await store.async_load("ns")
            assert [(e.entry_id, e.version) for e in loaded] == [("old-k", 0), ("old-b", 0)]
            assert await store.async_save_if("ns", keyed("k", "new"), None) is False
            assert await store.async_save_if("ns", keyed("k", "new"), 0) is True
            await store.async_save("ns", keyed("a", "a"))
            ranged = await store.async_load_range("ns", "", "z")
            assert [(e.key, e.version) for e in ranged] == [("B", 0), ("a", 0), ("k", 1)]
            # A second store (another process, later) finds the table up to date.
            again = await initialized(made.make())
            assert await again.async_load("ns") == await store.async_load("ns")
        finally:
            await made.cleanup()

    async def test_mongodb(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        try:
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
            try:
                await client["memlane"][made.name].insert_one(
                    {
                        "_id": '["ns","k"]',
                        "entry_id": "old-k",
                        "namespace": "ns",
                        "scope": "working",
                        "key": "k",
                        "content": '"old"',
                        "metadata": "{}",
                        "created_at": utc_now().isoformat(),
                        "expires_at": None,
                        "importance": 0.5,
                        "seq": 1,
                    }
                )
            finally:
                await client.close()
            store = await initialized(made.make())
            assert [e.version for e in await store.async_load("ns")] == [0]
            assert await store.async_save_if("ns", keyed("k", "new"), None) is False
            assert await store.async_save_if("ns", keyed("k", "new"), 0) is True
            assert [e.version for e in await store.async_load_range("ns", "k", "l")] == [1]
        finally:
            await made.cleanup()


# ---------------------------------------------------------------------------- URL options


class TestUrlOptionsWin:
    """Options written in the connection URL win over the store's timeout and pool_size defaults."""

    @pytest.mark.parametrize("spelling", ["serverSelectionTimeoutMS", "serverselectiontimeoutms"])
    async def test_mongodb_server_selection_timeout(self, spelling: str) -> None:
        port = dead_port()
        store = MongoDBStore(f"mongodb://127.0.0.1:{port}/?{spelling}=1000&connectTimeoutMS=1000")
        assert store.timeout == 30.0
        started = time.monotonic()
        with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{port}"):
            await store.async_initialize()
        # The default would wait 30 s; generous headroom for a loaded machine.
        assert time.monotonic() - started < 15.0
        await store.async_close()
        collect_cancelled_connects()

    async def test_mongodb_pool_size(self, request: pytest.FixtureRequest) -> None:
        server = server_for(request, "mongodb")
        store = MongoDBStore(
            f"{server.url}?maxpoolsize=3", collection=unique_name(), pool_size=7, timeout=4.0
        )
        try:
            await initialized(store)
            client = next(iter(store._resources.values())).client
            assert client.options.pool_options.max_pool_size == 3
            assert (
                client.options.server_selection_timeout == 3.0
            )  # not in the URL: the store's default (3 s)
        finally:
            await store.async_close()

    async def test_postgresql_connect_timeout(self, postgres_server: Server) -> None:
        hole = BlackHole()
        try:
            url = f"postgresql://postgres@127.0.0.1:{hole.port}/x?connect_timeout=1"
            store = PostgreSQLStore(url, schema_name=unique_name())
            assert (store.timeout, store.connect_timeout) == (30.0, 1.0)
            started = time.monotonic()
            with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{hole.port}"):
                await store.async_initialize()
            assert time.monotonic() - started < 15.0
            await store.async_close()
        finally:
            hole.close()
        # asyncpg alone would send the option to the server as a setting, which it refuses.
        made = StoreFactory("postgres", postgres_server)
        try:
            sep = "&" if "?" in postgres_server.url else "?"
            url = f"{postgres_server.url}{sep}connect_timeout=10&application_name=memlane_test"
            await initialized(made.make())
            other = PostgreSQLStore(url, schema_name=made.name, pool_min_size=1)
            try:
                assert await other.async_save_if("ns", keyed("k"), None)
            finally:
                await other.async_close()
        finally:
            await made.cleanup()

    @pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
    def test_postgresql_bad_connect_timeout(self, value: str) -> None:
        with pytest.raises(InvalidValueError, match="connect_timeout"):
            PostgreSQLStore(f"{store_url('postgres', 1)}?connect_timeout={value}")


# ---------------------------------------------------------------------------- processes

WORKER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")  # e.g. the partial-index fallback notice of FerretDB
cfg = json.loads(sys.argv[1])
from memlane.stores import MongoDBStore, PostgreSQLStore
from memlane.types import MemoryEntry

if cfg["kind"] == "postgres":
    store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
else:
    store = MongoDBStore(cfg["url"], collection=cfg["name"], pool_size=2)
store.load("warm-up")  # connect (and migrate) before the race starts
print("ready", flush=True)
if cfg["mode"] == "claim":
    for line in sys.stdin:
        won = store.save_if("ns", MemoryEntry(key=line.strip(), content=cfg["label"]), None)
        print(json.dumps(won), flush=True)
elif cfg["mode"] == "cas":
    for line in sys.stdin:
        race = json.loads(line)
        content = {**race["content"], "racer": cfg["label"]}
        new = MemoryEntry(entry_id=race["entry_id"], key=race["key"], content=content)
        won = store.save_if("ns", new, race["expected"][cfg["label"]])
        print(json.dumps(won), flush=True)
else:
    sys.stdin.readline()
    lost = 0
    for _ in range(cfg["increments"]):
        while True:
            held = store.load_by_key("ns", "counter")
            new = MemoryEntry(key="counter") if cfg["fresh_ids"] else held
            new = new.model_copy(update={"content": held.content + 1})
            if store.save_if("ns", new, held.version):
                break
            lost += 1
    print(json.dumps(lost), flush=True)
store.close()
"""


class Workers:
    """Worker processes driven line by line over stdin/stdout."""

    def __init__(self, cfgs: list[dict[str, Any]], impl: _backend.Implementation) -> None:
        env = dict(os.environ)
        env.pop("MEMLANE_PURE_PYTHON", None)
        if impl.name == "python":
            env["MEMLANE_PURE_PYTHON"] = "1"
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, json.dumps(cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for cfg in cfgs
        ]

    def read(self, proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=STEP_TIMEOUT)
            assert proc.stderr is not None
            pytest.fail(f"worker exited with {proc.returncode}:\n{proc.stderr.read()}")
        return line.strip()

    def send_all(self, line: str) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()

    def read_all(self) -> list[str]:
        return [self.read(proc) for proc in self.procs]

    def finish(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=STEP_TIMEOUT)
            assert proc.stderr is not None
            assert proc.returncode == 0, proc.stderr.read()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def workers() -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for w in made:
        w.close()


class TestSaveIfAcrossProcesses:
    """Processes racing save_if on one key: exactly one winner, and no read-modify-write lost."""

    async def test_one_winner_per_key(
        self,
        own_factory: StoreFactory,
        impl: _backend.Implementation,
        workers: list[Workers],
    ) -> None:
        store = await initialized(own_factory.make())
        base = {"kind": own_factory.kind, "url": own_factory.server.url, "name": own_factory.name}
        w = Workers([{**base, "mode": "claim", "label": n} for n in range(4)], impl)
        workers.append(w)
        assert await asyncio.to_thread(w.read_all) == ["ready"] * 4
        for i in range(20):
            w.send_all(f"key-{i}")
            results = [json.loads(r) for r in await asyncio.to_thread(w.read_all)]
            assert results.count(True) == 1, (i, results)
            held = await store.async_load_by_key("ns", f"key-{i}")
            assert held is not None
            assert (held.content, held.version) == (results.index(True), 1)
        await asyncio.to_thread(w.finish)
        assert len(await store.async_load("ns")) == 20

    async def test_increments_add_up(
        self,
        own_factory: StoreFactory,
        impl: _backend.Implementation,
        workers: list[Workers],
    ) -> None:
        store = await initialized(own_factory.make())
        assert await store.async_save_if("ns", keyed("counter", 0), None)
        base = {"kind": own_factory.kind, "url": own_factory.server.url, "name": own_factory.name}
        cfgs = [
            {**base, "mode": "increment", "increments": 30, "fresh_ids": n == 1} for n in range(3)
        ]
        w = Workers(cfgs, impl)
        workers.append(w)
        assert await asyncio.to_thread(w.read_all) == ["ready"] * 3
        w.send_all("go")
        await asyncio.to_thread(w.read_all)
        await asyncio.to_thread(w.finish)
        final = await store.async_load("ns")
        assert [(e.key, e.content, e.version) for e in final] == [("counter", 90, 91)]

    @pytest.mark.parametrize("expecting", EXPECTATIONS)
    async def test_racers_sharing_an_entry_id(
        self,
        own_factory: StoreFactory,
        impl: _backend.Implementation,
        workers: list[Workers],
        expecting: str,
    ) -> None:
        checker = await initialized(own_factory.make())
        base = {"kind": own_factory.kind, "url": own_factory.server.url, "name": own_factory.name}
        w = Workers([{**base, "mode": "cas", "label": n} for n in range(4)], impl)
        workers.append(w)
        assert await asyncio.to_thread(w.read_all) == ["ready"] * 4

        async def race(spec: dict[str, Any]) -> list[bool]:
            w.send_all(json.dumps(spec))
            return [json.loads(r) for r in await asyncio.to_thread(w.read_all)]

        await race_rounds(checker, expecting, race, 4)
        await asyncio.to_thread(w.finish)
