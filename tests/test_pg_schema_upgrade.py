"""PostgreSQL schema 7: search columns a trigger fills for searchable rows only, a partial
trigram index, lz4 for content, and the upgrade of a schema-6 database made by that
release's own DDL (``tests/pg_schema_6.sql``, kept as it was)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from asyncpg import Connection

from memlane import MemoryEntry, MemoryScope
from memlane.conversation import ConversationMemory
from memlane.stores import PostgreSQLStore
from memlane.stores._pg_search import BTREE_GIN, TRIGRAM, extension_schema
from memlane.stores._pg_sql import PgSql
from test_database_stores import StoreFactory, initialized, server_for
from worker_processes import backends, either_backend_env, release_together, started

SCHEMA_6 = Path(__file__).with_name("pg_schema_6.sql").read_text()

TEXTS = {
    "f1": "daylight saving time starts in spring",
    "f2": "the user prefers green tea in the morning",
    "f3": "timezone Adelaide, daylight saving in October",
    "f4": "green tea and daylight",
}
QUERIES = ["daylight", "green tea", "daylight saving", "dayligt", "timez", "adelaide morning"]


def fact(entry_id: str, text: str | None, **kwargs: Any) -> MemoryEntry:
    metadata = {} if text is None else {"search_text": text}
    return MemoryEntry(
        entry_id=entry_id,
        scope=MemoryScope.LONG_TERM,
        key=kwargs.pop("key", entry_id),
        content={"text": text, "n": entry_id},
        metadata=metadata,
        **kwargs,
    )


ENTRIES = [fact(i, t) for i, t in TEXTS.items()] + [
    fact("plain", None),
    fact("odd", None, key=None).model_copy(update={"metadata": {"search_text": 5}}),
]


UPGRADER = r"""
import asyncio, json, sys, warnings
from memlane import MemoryEntry, MemoryScope, _backend
from memlane.stores import IndexFallbackWarning, PostgreSQLStore

cfg = json.loads(sys.argv[1])


async def main():
    store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
    print("ready", flush=True)
    sys.stdin.readline()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IndexFallbackWarning)
        await store.async_initialize()
    me = f"w{cfg['n']}"
    await store.async_save("ns", MemoryEntry(
        entry_id=me, scope=MemoryScope.LONG_TERM, key=me, content=1,
        metadata={"search_text": f"upgrade{me} written"}))
    found = [h.entry.entry_id for h in await store.async_search(["ns"], f"upgrade{me}")]
    await store.async_close()
    print(json.dumps({"found": found}))


with _backend.use(cfg["backend"]):
    asyncio.run(main())
"""


async def make_schema_6(url: str, name: str) -> None:
    """A schema as the release before schema 7 made it, with the entries it wrote."""
    con = await asyncpg.connect(url)
    try:
        # The extensions exist once per database: a store of another schema creates them
        # (under memlane's own lock, as concurrent test processes may too).
        helper = PostgreSQLStore(url, schema_name=f"{name}_ext", pool_min_size=1)
        await initialized(helper)
        await helper.async_close()
        await con.execute(f'DROP SCHEMA "{name}_ext" CASCADE')
        ext = await con.fetchval(extension_schema(TRIGRAM))
        assert ext == await con.fetchval(extension_schema(BTREE_GIN))
        icu = await con.fetchval("SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'")
        ddl = SCHEMA_6.replace("__SCHEMA__", name).replace("__EXT__", ext)
        if not icu:
            ddl = ddl.replace(' COLLATE "und-x-icu"', "")
        await con.execute(ddl)
        sql = PgSql(name)
        for e in ENTRIES:
            await con.execute(
                sql.save_one,
                "ns",
                e.entry_id,
                e.scope.value,
                e.key,
                json.dumps(e.content),
                json.dumps(e.metadata),
                e.created_at,
                None,
                e.importance,
            )
    finally:
        await con.close()


async def layout(url: str, name: str) -> dict[str, Any]:
    con = await asyncpg.connect(url)
    try:
        t = f'"{name}".memory_entries'
        return {
            "mark": await con.fetchval(f"SELECT obj_description('{t}'::regclass, 'pg_class')"),
            "generated": dict(
                await con.fetch(
                    "SELECT attname, attgenerated::text FROM pg_attribute WHERE attrelid = "
                    f"'{t}'::regclass AND attname LIKE 'search%'"
                )
            ),
            "trigram": await con.fetchval(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 "
                "AND indexname = 'memory_entries_search_trgm'",
                name,
            ),
            "columns": {
                r["entry_id"]: (r["search_words"], r["search_vector"])
                for r in await con.fetch(
                    f"SELECT entry_id, search_words, search_vector::text FROM {t}"
                )
            },
        }
    finally:
        await con.close()


async def results(store: PostgreSQLStore) -> list[list[str]]:
    return [
        [hit.entry.entry_id for hit in await store.async_search(["ns"], query)] for query in QUERIES
    ]


@pytest.fixture
async def factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    made = StoreFactory("postgres", server_for(request, "postgres"))
    yield made
    await made.cleanup()


class TestSchema6Upgrade:
    """A schema-6 database opened by this release is upgraded once: rows read and search
    as before, and a turn still costs one statement to write and one to read."""

    async def test_rows_and_search_survive(self, factory: StoreFactory) -> None:
        url = factory.server.url
        await make_schema_6(url, factory.name)
        before = await layout(url, factory.name)
        assert before["mark"] == "memlane schema 6"
        assert set(before["generated"].values()) == {"s"}
        # The reference: the same entries saved through this release into a new schema.
        fresh = StoreFactory("postgres", factory.server)
        try:
            reference = await initialized(fresh.make())
            assert isinstance(reference, PostgreSQLStore)
            await reference.async_save_many("ns", ENTRIES)
            expected = await results(reference)
            expected_columns = (await layout(url, fresh.name))["columns"]
        finally:
            await fresh.cleanup()

        store = await initialized(factory.make())
        assert isinstance(store, PostgreSQLStore)
        after = await layout(url, factory.name)
        assert after["mark"] == PgSql(factory.name).version
        assert set(after["generated"].values()) == {""}
        assert "WHERE (search_words IS NOT NULL)" in after["trigram"]
        # The generated values are kept as they were, and equal what the trigger computes.
        assert after["columns"] == before["columns"] == expected_columns
        assert after["columns"]["plain"] == (None, None)
        assert after["columns"]["odd"] == (None, None)
        assert sorted(e.entry_id for e in await store.async_load("ns")) == sorted(
            e.entry_id for e in ENTRIES
        )
        assert await results(store) == expected
        # A word search and a misspelling both find rows.
        assert expected[0]
        assert expected[3]

    async def test_writes_after_the_upgrade_keep_the_columns_current(
        self, factory: StoreFactory
    ) -> None:
        await make_schema_6(factory.server.url, factory.name)
        store = await initialized(factory.make())
        assert isinstance(store, PostgreSQLStore)
        # The text goes: the columns empty (the trigger runs for a row that had one).
        await store.async_save("ns", fact("f1", None))
        # A row gains a text; a new row comes with one.
        await store.async_save("ns", fact("plain", "spring cleaning"))
        await store.async_save("ns", fact("new", "daylight in spring"))
        columns = (await layout(factory.server.url, factory.name))["columns"]
        assert columns["f1"] == (None, None)
        assert columns["plain"][0] == "spring cleaning"
        assert columns["new"] == ("daylight in spring", "'daylight':1 'in':2 'spring':3")
        found = await results(store)
        assert "f1" not in found[0]
        assert "new" in found[0]
        hits = [h.entry.entry_id for h in await store.async_search(["ns"], "spring")]
        assert sorted(hits) == ["new", "plain"]

    async def test_concurrent_hosts_upgrade_once(self, factory: StoreFactory) -> None:
        await make_schema_6(factory.server.url, factory.name)
        stores = [factory.make() for _ in range(4)]
        await asyncio.gather(*(initialized(s) for s in stores))
        for store in stores:
            assert isinstance(store, PostgreSQLStore)
            assert len(await store.async_load("ns")) == len(ENTRIES)
        assert (await layout(factory.server.url, factory.name))["mark"] == "memlane schema 7"

    async def test_concurrent_processes_upgrade_once(self, factory: StoreFactory) -> None:
        await make_schema_6(factory.server.url, factory.name)
        cfgs = [
            {"url": factory.server.url, "name": factory.name, "n": n, "backend": b}
            for n, b in enumerate(backends() * 2)
        ]
        with started(UPGRADER, cfgs, env=either_backend_env()) as procs:
            results = release_together(procs)
        expected = sorted([e.entry_id for e in ENTRIES] + [f"w{n}" for n in range(len(cfgs))])
        store = await initialized(factory.make())
        assert sorted(e.entry_id for e in await store.async_load("ns")) == expected
        # Each process saw the old rows and found its own write by search.
        assert [r["found"] for r in results] == [[f"w{n}"] for n in range(len(cfgs))]
        after = await layout(factory.server.url, factory.name)
        assert after["mark"] == "memlane schema 7"
        assert set(after["generated"].values()) == {""}

    async def test_a_turn_is_still_one_statement_each_way(
        self, factory: StoreFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await make_schema_6(factory.server.url, factory.name)
        store = await initialized(factory.make())
        sent = count_statements(monkeypatch)
        memory = ConversationMemory(store=store)
        cid = await memory.async_new_conversation()
        await memory.async_add_turn(cid, "warm", "up")
        for n in range(3):
            sent.clear()
            await memory.async_add_turn(cid, f"q{n}", f"a{n}")
            assert len(sent) == 1, sent
            sent.clear()
            history = await memory.async_get_message_history(cid)
            assert len(sent) == 1, sent
        assert len(history) == 8


class TestSchema7Layout:
    """Turns and other rows without a search text carry no search work."""

    async def test_content_is_lz4_where_the_server_has_it(self, factory: StoreFactory) -> None:
        store = await initialized(factory.make())
        assert isinstance(store, PostgreSQLStore)
        con = await asyncpg.connect(factory.server.url)
        try:
            kinds = await con.fetchval(
                "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
            )
            compression = await con.fetchval(
                "SELECT attcompression::text FROM pg_attribute WHERE attrelid = "
                f"'\"{factory.name}\".memory_entries'::regclass AND attname = 'content'"
            )
        finally:
            await con.close()
        assert compression == ("l" if kinds and "lz4" in kinds else "")

    async def test_a_turn_leaves_the_search_columns_empty(self, factory: StoreFactory) -> None:
        store = await initialized(factory.make())
        memory = ConversationMemory(store=store)
        cid = await memory.async_new_conversation()
        await memory.async_add_turn(cid, "what is daylight saving?", "a clock change")
        columns = (await layout(factory.server.url, factory.name))["columns"]
        assert len(columns) >= 2  # the conversation's events and the turn
        assert set(columns.values()) == {(None, None)}


def count_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement any asyncpg connection of this process sends from now on."""
    sent: list[str] = []
    for name in ("execute", "executemany", "fetch", "fetchval", "fetchrow"):
        real = getattr(Connection, name)

        def spy(real: Any) -> Any:
            @functools.wraps(real)
            async def counted(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
                sent.append(query)
                return await real(self, query, *args, **kwargs)

            return counted

        monkeypatch.setattr(Connection, name, spy(real))
    return sent


def test_the_kept_ddl_is_schema_6() -> None:
    """The fixture is the old release's DDL, not this one's."""
    assert "'memlane schema 6'" in SCHEMA_6
    assert "GENERATED ALWAYS AS" in SCHEMA_6
    assert "index_search_text" not in SCHEMA_6
