"""search on PostgreSQLStore and MongoDBStore against real servers.

PostgreSQL ranks from a ``tsvector`` GIN index and fills short answers from a ``pg_trgm``
index; MongoDB uses a text index where the server has one and whole-word patterns elsewhere
(FerretDB). Both are held to the same behaviour: ranking, scope, writes reflected at once,
queries that are data only, argument checks, tables and collections from the previous schema,
and several processes writing to one namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from db_servers import Server
from memlane import _backend
from memlane.stores import (
    IndexFallbackWarning,
    PostgreSQLStore,
    SearchableStore,
    SearchHit,
)
from memlane.stores.protocol import SEARCH_TEXT, rank_entries, search_terms
from memlane.types import MemoryEntry, utc_now
from test_database_cas import OLD_POSTGRES_DDL
from test_database_stores import (
    Store,
    StoreFactory,
    dead_port,
    down_store,
    initialized,
    server_for,
    unique_name,
)

STEP_TIMEOUT = 120.0


def doc(
    text: str | None, *, key: str | None = None, importance: float = 0.5, **kwargs: Any
) -> MemoryEntry:
    """An entry searchable by ``text`` (not searchable for ``None``)."""
    metadata = {} if text is None else {SEARCH_TEXT: text}
    return MemoryEntry(
        key=key, content={"text": text}, metadata=metadata, importance=importance, **kwargs
    )


def texts(hits: list[SearchHit]) -> list[str]:
    return [hit.entry.metadata[SEARCH_TEXT] for hit in hits]


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


@pytest.fixture
async def pg(request: pytest.FixtureRequest, impl: _backend.Implementation) -> AsyncIterator[Any]:
    made = StoreFactory("postgres", server_for(request, "postgres"))
    store = await initialized(made.make())
    assert isinstance(store, PostgreSQLStore)
    yield store
    await made.cleanup()


# ---------------------------------------------------------------------------- ranking


class TestRanking:
    """Rarer terms weigh more, more matched terms rank higher, ties go to importance."""

    async def test_rarer_terms_weigh_more(self, store: Store) -> None:
        await store.async_save_many("ns", [doc(f"common filler {i}") for i in range(15)])
        await store.async_save_many("ns", [doc("rare thing"), doc("common thing")])
        # One term each, same length: only the terms' rarity tells them apart.
        found = texts(await store.async_search(["ns"], "common rare", limit=2))
        assert found[0] == "rare thing"
        both = doc("rare common")
        await store.async_save("ns", both)
        assert texts(await store.async_search(["ns"], "common rare", limit=2)) == [
            "rare common",
            "rare thing",
        ]

    async def test_more_matched_terms_rank_higher(self, store: Store) -> None:
        await store.async_save_many(
            "ns",
            [
                doc("apple only"),
                doc("apple banana cherry"),
                doc("apple banana"),
                *[doc(f"noise {i}") for i in range(5)],
            ],
        )
        hits = await store.async_search(["ns"], "cherry banana apple")
        assert texts(hits) == ["apple banana cherry", "apple banana", "apple only"]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(h.score > 0 for h in hits)

    async def test_ties_go_to_importance(self, store: Store) -> None:
        for importance in (0.3, 0.9, 0.6, 0.1):
            await store.async_save("ns", doc("same words", importance=importance))
        hits = await store.async_search(["ns"], "words")
        assert [h.entry.importance for h in hits] == [0.9, 0.6, 0.3, 0.1]

    async def test_repeated_terms_and_short_texts(self, store: Store) -> None:
        await store.async_save_many(
            "ns", [doc("fox and a long tail of other words"), doc("fox fox fox"), doc("fox")]
        )
        # More occurrences and shorter texts both weigh more (BM25's tf and length norm).
        found = texts(await store.async_search(["ns"], "fox"))
        assert found[-1] == "fox and a long tail of other words"

    async def test_agrees_with_the_reference(self, store: Store) -> None:
        corpus = [
            "the quick brown fox",
            "quick thinking saves the day",
            "a brown dog sleeps",
            "foxes and dogs",
            "the the the",
            "brown brown brown fox",
            "nothing relevant here",
        ]
        entries = [doc(text) for text in corpus]
        await store.async_save_many("ns", entries)
        for query in ["brown fox", "quick", "the dog", "fox quick brown", "dogs"]:
            terms = list(dict.fromkeys(search_terms(query)))
            expected = texts(rank_entries(entries, terms, 10, 0.0))
            found = texts(await store.async_search(["ns"], query))
            assert sorted(found) == sorted(expected), query
            assert found[0] == expected[0], query


# ---------------------------------------------------------------------------- scope


class TestScope:
    """Only unexpired entries of the searched namespaces, at or above min_importance, up to limit."""

    async def test_namespaces_are_isolated(self, store: Store) -> None:
        for namespace in ("a", "b", "c"):
            await store.async_save(namespace, doc(f"alpha in {namespace}"))
        assert sorted(texts(await store.async_search(["a", "c", "a"], "alpha"))) == [
            "alpha in a",
            "alpha in c",
        ]
        assert texts(await store.async_search(("b",), "alpha")) == ["alpha in b"]
        assert await store.async_search(["missing"], "alpha") == []
        assert await store.async_search([], "alpha") == []
        # A namespace the backend could never hold was never stored: nothing, not an error.
        assert await store.async_search(["\ud800"], "alpha") == []

    async def test_expired_entries_are_not_found(self, store: Store) -> None:
        past = utc_now() - timedelta(seconds=5)
        future = utc_now() + timedelta(hours=1)
        await store.async_save_many(
            "ns",
            [doc("alpha old", expires_at=past), doc("alpha later", expires_at=future)],
        )
        await store.async_save("ns", doc("alpha new"))
        assert sorted(texts(await store.async_search(["ns"], "alpha old"))) == [
            "alpha later",
            "alpha new",
        ]

    async def test_min_importance(self, store: Store) -> None:
        await store.async_save_many(
            "ns", [doc("alpha low", importance=0.2), doc("alpha high", importance=0.9)]
        )
        assert texts(await store.async_search(["ns"], "alpha", min_importance=0.5)) == [
            "alpha high"
        ]
        assert texts(await store.async_search(["ns"], "alpha", min_importance=0.9)) == [
            "alpha high"
        ]
        assert await store.async_search(["ns"], "alpha", min_importance=1) == []

    async def test_limit(self, store: Store) -> None:
        await store.async_save_many("ns", [doc(f"alpha {i}", importance=i / 10) for i in range(10)])
        hits = await store.async_search(["ns"], "alpha", limit=3)
        assert [h.entry.importance for h in hits] == [0.9, 0.8, 0.7]
        assert len(await store.async_search(["ns"], "alpha", limit=100)) == 10

    async def test_only_search_text_is_searched(self, store: Store) -> None:
        await store.async_save_many(
            "ns",
            [
                MemoryEntry(content="alpha", metadata={"note": "alpha"}),
                MemoryEntry(content="x", metadata={SEARCH_TEXT: 3}),
                MemoryEntry(content="x", metadata={SEARCH_TEXT: ["alpha"]}),
                MemoryEntry(content="x", metadata={SEARCH_TEXT: None}),
                MemoryEntry(content="x", metadata={"nested": {SEARCH_TEXT: "alpha"}}),
            ],
        )
        assert await store.async_search(["ns"], "alpha") == []

    async def test_hits_carry_whole_entries(self, store: Store) -> None:
        saved = doc("alpha", key="k", importance=0.7)
        assert await store.async_save_if("ns", saved, None)
        [hit] = await store.async_search(["ns"], "ALPHA")
        assert hit.entry == saved.model_copy(update={"version": 1})
        assert hit.score > 0

    async def test_terms_split_like_the_tokenizer(self, store: Store) -> None:
        await store.async_save_many(
            "ns",
            [
                doc("user_timezone = Australia/Adelaide"),
                doc("get-local-time"),
                doc("Straße in Zürich, CAFÉ"),
                doc("100% sure (v2.5)"),
            ],
        )
        for query, found in [
            ("timezone", "user_timezone = Australia/Adelaide"),
            ("USER", "user_timezone = Australia/Adelaide"),
            ("local", "get-local-time"),
            ("strasse", "Straße in Zürich, CAFÉ"),
            ("ZÜRICH", "Straße in Zürich, CAFÉ"),
            ("café", "Straße in Zürich, CAFÉ"),
            ("100", "100% sure (v2.5)"),
            ("v2", "100% sure (v2.5)"),
        ]:
            assert texts(await store.async_search(["ns"], query)) == [found], query


# ---------------------------------------------------------------------------- writes


class TestWritesAreReflected:
    """Every kind of write changes what search finds at once."""

    async def test_replace_by_id_and_by_key(self, store: Store) -> None:
        first = doc("alpha", key="k")
        await store.async_save("ns", first)
        await store.async_save("ns", first.model_copy(update={"metadata": {SEARCH_TEXT: "beta"}}))
        assert await store.async_search(["ns"], "alpha") == []
        assert texts(await store.async_search(["ns"], "beta")) == ["beta"]
        await store.async_save("ns", doc("gamma", key="k"))
        assert await store.async_search(["ns"], "beta") == []
        assert texts(await store.async_search(["ns"], "gamma")) == ["gamma"]
        await store.async_save("ns", doc(None, key="k"))
        assert await store.async_search(["ns"], "gamma") == []

    async def test_save_if(self, store: Store) -> None:
        assert await store.async_save_if("ns", doc("alpha", key="k"), None)
        assert await store.async_save_if("ns", doc("beta", key="k"), 1)
        assert not await store.async_save_if("ns", doc("gamma", key="k"), 1)
        assert await store.async_search(["ns"], "alpha gamma") == []
        [hit] = await store.async_search(["ns"], "beta")
        assert hit.entry.version == 2

    async def test_moving_between_namespaces(self, store: Store) -> None:
        moving = doc("alpha")
        await store.async_save("a", moving)
        await store.async_save("b", moving)
        assert await store.async_search(["a"], "alpha") == []
        assert texts(await store.async_search(["b"], "alpha")) == ["alpha"]

    async def test_delete_clear_and_cleanup(self, store: Store) -> None:
        one, two = doc("alpha one"), doc("alpha two")
        await store.async_save_many("ns", [one, two])
        await store.async_save("other", doc("alpha other"))
        assert await store.async_delete("ns", one.entry_id)
        assert texts(await store.async_search(["ns"], "alpha")) == ["alpha two"]
        await store.async_clear("ns")
        assert await store.async_search(["ns"], "alpha") == []
        assert texts(await store.async_search(["ns", "other"], "alpha")) == ["alpha other"]
        await store.async_save("ns", doc("alpha gone", expires_at=utc_now() - timedelta(1)))
        assert await store.async_cleanup_expired() == 1
        assert texts(await store.async_search(["ns", "other"], "alpha")) == ["alpha other"]

    async def test_sync_twin(self, store: Store) -> None:
        assert isinstance(store, SearchableStore)
        store.save("ns", doc("alpha beta"))
        assert texts(store.search(["ns"], "beta")) == ["alpha beta"]
        assert texts(await asyncio.to_thread(store.search, ["ns"], "alpha", limit=1)) == [
            "alpha beta"
        ]


# ---------------------------------------------------------------------------- data only

HOSTILE = [
    '"x" OR y*',
    "a & !b",
    "a:*",
    "%",
    "_",
    "'; DROP TABLE x; --",
    '{"$where": 1}',
    '{"$where": "sleep(1)", "$regex": ".*"}',
    ".*",
    "(",
    "\\",
    "x|y",
    "a AND -b",
    "NEAR(a b)",
    "$text",
]

CORPUS = [
    "x marks the spot",
    "y axis",
    "a and b",
    "where did it go",
    "drop table x",
    "100% of the_rest",
    "text of everything",
    "nothing to see",
]


class TestQueriesAreData:
    """Quotes, tsquery, LIKE, SQL, MongoDB operators and regex metacharacters search as words."""

    @pytest.mark.parametrize("query", HOSTILE)
    async def test_hostile_queries_search_their_words(self, store: Store, query: str) -> None:
        await store.async_save_many("ns", [doc(text) for text in CORPUS])
        found = set(texts(await store.async_search(["ns"], query, limit=50)))
        wanted = set(search_terms(query))
        assert found == {t for t in CORPUS if wanted & set(search_terms(t))}, query
        assert len(await store.async_load("ns")) == len(CORPUS)

    async def test_hostile_search_texts_are_data(self, store: Store) -> None:
        await store.async_save_many("ns", [doc(text) for text in HOSTILE])
        await store.async_save("ns", doc("plain words"))
        assert sorted(texts(await store.async_search(["ns"], "where"))) == sorted(
            t for t in HOSTILE if "where" in search_terms(t)
        )
        assert texts(await store.async_search(["ns"], "plain")) == ["plain words"]
        assert await store.async_search(["ns"], "%_.*") == []


class TestBadArguments:
    """Bad arguments raise TypeError or ValueError naming the argument, before any I/O."""

    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "name"),
        [
            (("ns", "q"), {}, TypeError, "namespaces"),
            ((None, "q"), {}, TypeError, "namespaces"),
            ((["ns"], 3), {}, TypeError, "query"),
            ((["ns"], b"q"), {}, TypeError, "query"),
            (([""], "q"), {}, ValueError, "namespace"),
            ((["a\x00"], "q"), {}, ValueError, "namespace"),
            (([3], "q"), {}, TypeError, "namespace"),
            ((["ns"], "q"), {"limit": 0}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": True}, TypeError, "limit"),
            ((["ns"], "q"), {"limit": 2.0}, TypeError, "limit"),
            ((["ns"], "q"), {"min_importance": 1.5}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": -0.1}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": "x"}, TypeError, "min_importance"),
        ],
    )
    @pytest.mark.parametrize("kind", ["postgres", "mongodb"])
    async def test_named_before_connecting(
        self,
        kind: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        name: str,
        impl: _backend.Implementation,
    ) -> None:
        # Nothing listens on the port: a check that ran after connecting would report that.
        store = down_store(kind, dead_port(), timeout=0.5)
        try:
            with pytest.raises(error, match=name):
                await store.async_search(*args, **kwargs)
            with pytest.raises(error, match=name):
                store.search(*args, **kwargs)
        finally:
            await store.async_close()

    async def test_queries_without_terms_find_nothing(self, store: Store) -> None:
        await store.async_save("ns", doc("alpha"))
        for query in ["", "   ", "%", "_", "-- !! ()", "\ud800"]:
            assert await store.async_search(["ns"], query) == []


# ---------------------------------------------------------------------------- PostgreSQL


class TestPostgreSQLTrigrams:
    """pg_trgm fills a short answer with entries close to a term no entry holds, after every word match."""

    CORPUS = (
        "user_timezone = Australia/Adelaide",
        "the server's timezone is UTC",
        "favourite colour: green",
        "time flies",
    )

    async def test_prefixes_and_typos(self, pg: PostgreSQLStore) -> None:
        await pg.async_save_many("ns", [doc(t) for t in self.CORPUS])
        # Closest first: both timezones, then the word "time" (one letter from "timez").
        found = texts(await pg.async_search(["ns"], "timez"))
        assert (sorted(found[:2]), found[2:]) == (sorted(self.CORPUS[:2]), ["time flies"])
        assert sorted(texts(await pg.async_search(["ns"], "timezome"))) == sorted(self.CORPUS[:2])
        assert texts(await pg.async_search(["ns"], "adelaid")) == [self.CORPUS[0]]
        assert await pg.async_search(["ns"], "xylophone") == []

    async def test_after_every_word_match(self, pg: PostgreSQLStore) -> None:
        await pg.async_save_many("ns", [doc(t, importance=0.1) for t in self.CORPUS[:2]])
        await pg.async_save("ns", doc(self.CORPUS[2], importance=0.0))
        hits = await pg.async_search(["ns"], "green timez")
        assert texts(hits)[0] == "favourite colour: green"
        assert sorted(texts(hits)[1:]) == sorted(self.CORPUS[:2])
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert hits[0].score > hits[1].score > 0
        # Word matches that fill the limit leave no room for trigram matches.
        assert texts(await pg.async_search(["ns"], "green timez", limit=1)) == [
            "favourite colour: green"
        ]

    async def test_a_term_that_is_a_word_means_that_word(self, pg: PostgreSQLStore) -> None:
        await pg.async_save_many("ns", [doc(t) for t in self.CORPUS])
        assert texts(await pg.async_search(["ns"], "time")) == ["time flies"]
        assert sorted(texts(await pg.async_search(["ns"], "timezone"))) == sorted(self.CORPUS[:2])

    async def test_same_scope_as_words(self, pg: PostgreSQLStore) -> None:
        past = utc_now() - timedelta(seconds=5)
        await pg.async_save("other", doc("timezone elsewhere"))
        await pg.async_save("ns", doc("timezone expired", expires_at=past))
        await pg.async_save("ns", doc("timezone unimportant", importance=0.1))
        await pg.async_save("ns", doc("timezone kept", importance=0.8))
        assert texts(await pg.async_search(["ns"], "timez", min_importance=0.5)) == [
            "timezone kept"
        ]

    async def test_trigram_queries_are_data(self, pg: PostgreSQLStore) -> None:
        await pg.async_save_many("ns", [doc(t) for t in self.CORPUS])
        # No term is a word here, so every term goes to pg_trgm: still data.
        for query in ["timez%", "%timez", "timez' OR '1'='1", "time_z"]:
            found = texts(await pg.async_search(["ns"], query))
            assert set(found) <= set(self.CORPUS), query
        assert len(await pg.async_load("ns")) == len(self.CORPUS)


async def explain(url: str, statement: str, *params: Any) -> str:
    con = await asyncpg.connect(url)
    try:
        return "\n".join(r[0] for r in await con.fetch(f"EXPLAIN {statement}", *params))
    finally:
        await con.close()


class TestPostgreSQLIndexes:
    """The search columns are filled by a trigger, indexed, and a selective search reads no
    table in full."""

    async def test_layout(self, pg: PostgreSQLStore, postgres_server: Server) -> None:
        con = await asyncpg.connect(postgres_server.url)
        try:
            generated = dict(
                await con.fetch(
                    "SELECT column_name, is_generated FROM information_schema.columns "
                    "WHERE table_schema = $1 AND table_name = 'memory_entries' "
                    "AND column_name LIKE 'search%'",
                    pg.schema_name,
                )
            )
            indexes = {
                r["indexname"]: r["indexdef"]
                for r in await con.fetch(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1",
                    pg.schema_name,
                )
            }
            mark = await con.fetchval(
                f"SELECT obj_description('\"{pg.schema_name}\".memory_entries'::regclass)"
            )
            body = await con.fetchval(
                "SELECT prosrc FROM pg_proc WHERE proname = 'search_words' "
                "AND pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)",
                pg.schema_name,
            )
        finally:
            await con.close()
        # Plain columns a trigger fills for searchable rows: a generated column's expression
        # is prepared again for every insert, search text or not.
        assert generated == {"search_words": "NEVER", "search_vector": "NEVER"}
        # The word index leads with the namespace (btree_gin), under the collation only it
        # has: a search steps through its namespaces' entries only where a query word is.
        words = indexes["memory_entries_namespace_search"]
        trigrams = indexes["memory_entries_search_trgm"]
        assert re.search(r'gin \(namespace COLLATE "C"( \S+)?, search_vector\)', words), words
        assert "WHERE (search_vector IS NOT NULL)" in words
        assert "gin (search_words" in trigrams
        assert "gin_trgm_ops" in trigrams
        assert "WHERE (search_words IS NOT NULL)" in trigrams
        assert "memory_entries_search" not in indexes
        # No pending list: every search would read the rows written since the last vacuum.
        assert "fastupdate=off" in words.replace(" ", "")
        assert "fastupdate=off" in trigrams.replace(" ", "")
        assert mark == "memlane schema 7"
        assert "und-x-icu" in body  # the test server has ICU: Unicode letters split right

    async def test_older_indexes_are_replaced(
        self, pg: PostgreSQLStore, postgres_server: Server
    ) -> None:
        s = f'"{pg.schema_name}"'
        await pg.async_save_many("ns", [doc("timezone Adelaide"), doc("green tea")])
        await pg.async_save("other", doc("timezone Perth"))
        con = await asyncpg.connect(postgres_server.url)
        try:
            # Schema 4: the word index without the namespace, both with GIN's pending list.
            await con.execute(
                f"""
                DROP INDEX {s}.memory_entries_namespace_search;
                CREATE INDEX memory_entries_search ON {s}.memory_entries
                    USING gin (search_vector) WITH (fastupdate = on);
                ALTER INDEX {s}.memory_entries_search_trgm SET (fastupdate = on);
                COMMENT ON TABLE {s}.memory_entries IS 'memlane schema 4';
                """
            )
            again = await initialized(
                PostgreSQLStore(postgres_server.url, schema_name=pg.schema_name, pool_min_size=1)
            )
            try:
                assert texts(await again.async_search(["ns"], "timezone")) == ["timezone Adelaide"]
                assert texts(await again.async_search(["ns"], "timez")) == ["timezone Adelaide"]
            finally:
                await again.async_close()
            options = dict(
                await con.fetch(
                    "SELECT c.relname, array_to_string(c.reloptions, ',') FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = $1 AND c.relname LIKE 'memory_entries%search%'",
                    pg.schema_name,
                )
            )
            mark = await con.fetchval(
                f"SELECT obj_description('{s}.memory_entries'::regclass, 'pg_class')"
            )
        finally:
            await con.close()
        assert options == {
            "memory_entries_namespace_search": "fastupdate=off",
            "memory_entries_search_trgm": "fastupdate=off",
        }
        assert mark == "memlane schema 7"

    async def test_a_selective_search_uses_the_indexes(
        self, pg: PostgreSQLStore, postgres_server: Server
    ) -> None:
        words = [f"w{i}" for i in range(300)]
        for namespace in ("ns", "other"):
            batch = [
                doc(" ".join(words[(i * 7 + j * 31) % 300] for j in range(8))) for i in range(2000)
            ]
            await pg.async_save_many(namespace, batch)
        await pg.async_save("ns", doc("needle in a haystack"))
        con = await asyncpg.connect(postgres_server.url)
        try:
            await con.execute(f'ANALYZE "{pg.schema_name}".memory_entries')
        finally:
            await con.close()
        for terms in (["needle"], ["needl"], ["needle", "haystak"]):
            plan = await explain(postgres_server.url, pg._search, ["ns"], utc_now(), terms, 0.0, 10)
            assert not re.search(r"Seq Scan on memory_entries", plan), plan
            assert "Bitmap Index Scan on memory_entries_namespace_search " in plan, plan
            assert "Bitmap Index Scan on memory_entries_search_trgm" in plan, plan
            # The namespace is served by the search indexes, never read whole from its own.
            assert "on memory_entries_namespace " not in plan, plan
        assert texts(await pg.async_search(["ns"], "needle w1"))[0] == "needle in a haystack"
        assert texts(await pg.async_search(["ns"], "needl")) == ["needle in a haystack"]
        assert texts(await pg.async_search(["ns"], "haystak")) == ["needle in a haystack"]

    @pytest.mark.parametrize("plans", ["force_custom_plan", "force_generic_plan"])
    async def test_a_search_reads_rows_bounded_by_its_matches(
        self, pg: PostgreSQLStore, postgres_server: Server, plans: str
    ) -> None:
        # One big namespace written just now (no statistics yet), as a bulk load leaves it:
        # the planner once ANDed the word index with the whole namespace's (namespace, seq)
        # entries, so a search read every row of the namespace for three matches.
        words = [f"w{i}" for i in range(300)]
        batch = [
            doc(" ".join(words[(i * 7 + j * 31) % 300] for j in range(8))) for i in range(6000)
        ]
        await pg.async_save_many("ns", batch)
        await pg.async_save_many(
            "ns", [doc(f"daylight saving time {i}", importance=0.7) for i in range(3)]
        )
        await pg.async_save("other", doc("daylight saving elsewhere"))
        for terms in (["daylight", "saving"], ["daylight", "savng"], ["dayligh"]):
            read = await rows_read(postgres_server.url, pg._search, plans, terms)
            # Each word's 3 or 4 rows, counted then ranked: never the namespace's 6,000.
            assert all(n <= 30 for n in read.values()), (terms, read)
        assert len(await pg.async_search(["ns"], "daylight saving")) == 3
        assert len(await pg.async_search(["ns"], "daylight savng")) == 3


async def rows_read(url: str, statement: str, plans: str, terms: list[str]) -> dict[str, int]:
    """Rows each scan of the prepared search (planned as ``plans`` says) took from an index
    or the table, kept or filtered out, summed by scan: what grows with the namespace when a
    scan reads it whole."""
    con = await asyncpg.connect(url)
    try:
        await con.execute(f"SET plan_cache_mode = {plans}")
        await con.execute(f"PREPARE q(text[], timestamptz, text[], float8, int) AS {statement}")
        # EXECUTE takes no parameters: the test's own words, as literals.
        words = ", ".join(f"'{term}'" for term in terms)
        [[plan]] = await con.fetch(
            "EXPLAIN (ANALYZE, FORMAT JSON) "
            f"EXECUTE q(ARRAY['ns', 'ns2'], now(), ARRAY[{words}], 0.5, 10)"
        )
    finally:
        await con.close()
    read: dict[str, int] = {}

    def walk(node: dict[str, Any]) -> None:
        if node["Node Type"] in ("Seq Scan", "Index Scan", "Bitmap Index Scan", "Bitmap Heap Scan"):
            name = f"{node['Node Type']} {node.get('Index Name', node.get('Relation Name'))}"
            loops = node.get("Actual Loops", 0)
            taken = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
            taken += node.get("Rows Removed by Index Recheck", 0)
            read[name] = read.get(name, 0) + round(taken * loops)
        for child in node.get("Plans", []):
            walk(child)

    walk(json.loads(plan)[0]["Plan"])
    return read


@contextlib.asynccontextmanager
async def fresh_database(server: Server, options: str = "") -> AsyncIterator[str]:
    """A new database of the test server (without pg_trgm), made with ``options``; its URL."""
    name = unique_name()
    admin = await asyncpg.connect(server.url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" {options}')
    finally:
        await admin.close()
    try:
        yield server.url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        admin = await asyncpg.connect(server.url)
        try:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        finally:
            await admin.close()


class TestPostgreSQLWithoutICU:
    """A database ICU cannot serve splits words by its own locale: ASCII text searches as anywhere."""

    async def test_sql_ascii(self, postgres_server: Server, impl: _backend.Implementation) -> None:
        options = "ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
        async with fresh_database(postgres_server, options) as url:
            store = PostgreSQLStore(url, schema_name="mem")
            try:
                await store.async_save_many(
                    "ns", [doc("user_timezone = Australia/Adelaide"), doc("get-local-time")]
                )
                for query, found in [
                    ("timezone", ["user_timezone = Australia/Adelaide"]),
                    ("ADELAIDE local", ["get-local-time", "user_timezone = Australia/Adelaide"]),
                    ("adelaid", ["user_timezone = Australia/Adelaide"]),
                    ("%_", []),
                ]:
                    assert sorted(texts(await store.async_search(["ns"], query))) == found
            finally:
                await store.async_close()
            con = await asyncpg.connect(url)
            try:
                body = await con.fetchval(
                    "SELECT prosrc FROM pg_proc WHERE proname = 'search_words' "
                    "AND pronamespace = 'mem'::regnamespace"
                )
            finally:
                await con.close()
            assert "und-x-icu" not in body  # the database's own locale splits


class TestPostgreSQLWithoutTrigrams:
    """Without pg_trgm the store warns, searches by words alone, and indexes once pg_trgm appears."""

    @pytest.fixture
    async def database(self, postgres_server: Server) -> AsyncIterator[str]:
        async with fresh_database(postgres_server) as url:
            yield url

    async def test_warns_then_recovers(self, database: str, impl: _backend.Implementation) -> None:
        # With no schema on the search path, CREATE EXTENSION has nowhere to go and fails.
        store = PostgreSQLStore(f"{database}?search_path=nowhere", schema_name="mem")
        try:
            with pytest.warns(IndexFallbackWarning, match="pg_trgm"):
                await store.async_initialize()
            await store.async_save_many("ns", [doc("timezone Adelaide"), doc("green")])
            assert texts(await store.async_search(["ns"], "timezone")) == ["timezone Adelaide"]
            assert await store.async_search(["ns"], "timez") == []
        finally:
            await store.async_close()
        admin = await asyncpg.connect(database)
        try:
            await admin.execute("CREATE EXTENSION pg_trgm SCHEMA public")
            await admin.execute("CREATE EXTENSION btree_gin SCHEMA public")
        finally:
            await admin.close()
        again = PostgreSQLStore(f"{database}?search_path=nowhere", schema_name="mem")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await again.async_initialize()
            assert texts(await again.async_search(["ns"], "timez")) == ["timezone Adelaide"]
        finally:
            await again.async_close()


async def index_names(url: str, schema: str) -> set[str]:
    con = await asyncpg.connect(url)
    try:
        rows = await con.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = $1", schema)
    finally:
        await con.close()
    return {r[0] for r in rows}


class TestPostgreSQLWithoutBtreeGin:
    """Without btree_gin the store warns and keeps the word index without the namespace,
    finding the same entries; once btree_gin appears, the next store leads the index with it."""

    @pytest.fixture
    async def database(self, postgres_server: Server) -> AsyncIterator[str]:
        async with fresh_database(postgres_server) as url:
            admin = await asyncpg.connect(url)
            try:
                await admin.execute("CREATE EXTENSION pg_trgm SCHEMA public")
            finally:
                await admin.close()
            yield url

    async def answers(self, store: PostgreSQLStore) -> list[list[str]]:
        return [
            texts(await store.async_search(namespaces, query, min_importance=least))
            for namespaces, query, least in [
                (["ns"], "timezone", 0.0),
                (["ns"], "timez", 0.0),
                (["ns"], "timezone perth", 0.0),
                (["ns"], "timezone", 0.6),
                (["ns", "other"], "darwin timezone", 0.0),
                (["other"], "adelaide", 0.0),
            ]
        ]

    async def test_warns_then_recovers(self, database: str, impl: _backend.Implementation) -> None:
        # With no schema on the search path, CREATE EXTENSION btree_gin has nowhere to go.
        url = f"{database}?search_path=nowhere"
        expected = [
            ["timezone Adelaide", "timezone Perth"],
            ["timezone Adelaide", "timezone Perth"],
            ["timezone Perth", "timezone Adelaide"],
            ["timezone Adelaide"],
            ["timezone Darwin", "timezone Adelaide", "timezone Perth"],
            [],
        ]
        store = PostgreSQLStore(url, schema_name="mem")
        try:
            with pytest.warns(IndexFallbackWarning, match="no btree_gin") as caught:
                await store.async_initialize()
            assert "no trigram index" not in str(caught[0].message)
            assert 'COLLATE "C"' not in store._search  # today's statement, for today's index
            await store.async_save_many(
                "ns",
                [doc("timezone Adelaide", importance=0.9), doc("timezone Perth"), doc("green")],
            )
            await store.async_save("other", doc("timezone Darwin", importance=0.8))
            assert await self.answers(store) == expected
        finally:
            await store.async_close()
        indexes = await index_names(database, "mem")
        assert {"memory_entries_search", "memory_entries_search_trgm"} <= indexes
        assert "memory_entries_namespace_search" not in indexes
        admin = await asyncpg.connect(database)
        try:
            await admin.execute("CREATE EXTENSION btree_gin SCHEMA public")
        finally:
            await admin.close()
        again = PostgreSQLStore(url, schema_name="mem")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await again.async_initialize()
            assert 'COLLATE "C"' in again._search
            assert await self.answers(again) == expected
        finally:
            await again.async_close()
        indexes = await index_names(database, "mem")
        assert {"memory_entries_namespace_search", "memory_entries_search_trgm"} <= indexes
        assert "memory_entries_search" not in indexes


# ---------------------------------------------------------------------------- migration


async def make_schema_3(url: str, name: str) -> None:
    """What the release before search left: the current table without the search columns,
    functions, trigger and indexes, marked schema 3."""
    store = await initialized(PostgreSQLStore(url, schema_name=name, pool_min_size=1))
    await store.async_close()
    s = f'"{name}"'
    con = await asyncpg.connect(url)
    try:
        await con.execute(
            f"""
            DROP TRIGGER memory_entries_search_text ON {s}.memory_entries;
            DROP FUNCTION {s}.index_search_text();
            ALTER TABLE {s}.memory_entries DROP COLUMN search_vector, DROP COLUMN search_words;
            DROP FUNCTION {s}.search_words(text);
            COMMENT ON TABLE {s}.memory_entries IS 'memlane schema 3';
            """
        )
    finally:
        await con.close()


async def add_legacy_rows(url: str, name: str) -> None:
    """Rows written by an older release: the search text is in the metadata, nothing else."""
    con = await asyncpg.connect(url)
    try:
        await con.executemany(
            f'INSERT INTO "{name}".memory_entries (entry_id, namespace, scope, key, content, '
            "metadata) VALUES ($1, 'ns', 'working', $2, '1', $3::jsonb)",
            [
                ("old-1", "k1", json.dumps({SEARCH_TEXT: "legacy alpha"})),
                ("old-2", None, json.dumps({SEARCH_TEXT: "legacy beta", "x": 1})),
                ("old-3", None, json.dumps({SEARCH_TEXT: 5})),
                ("old-4", None, "{}"),
            ],
        )
    finally:
        await con.close()


async def make_legacy_collection(url: str, name: str) -> None:
    """Documents written before ``search_terms`` existed, and no search index."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        await client["memlane"][name].insert_many(
            [
                {
                    "_id": json.dumps([None, entry_id]),
                    "entry_id": entry_id,
                    "namespace": "ns",
                    "scope": "working",
                    "key": None,
                    "content": "1",
                    "metadata": metadata,
                    "created_at": utc_now().isoformat(),
                    "expires_at": None,
                    "importance": 0.5,
                    "seq": seq,
                }
                for seq, (entry_id, metadata) in enumerate(
                    [
                        ("old-1", json.dumps({SEARCH_TEXT: "legacy alpha"})),
                        ("old-2", json.dumps({SEARCH_TEXT: "legacy beta", "x": 1})),
                        ("old-3", json.dumps({SEARCH_TEXT: 5})),
                        ("old-4", "{}"),
                    ]
                )
            ]
        )
    finally:
        await client.close()


async def make_legacy(factory: StoreFactory) -> None:
    if factory.kind == "postgres":
        await make_schema_3(factory.server.url, factory.name)
        await add_legacy_rows(factory.server.url, factory.name)
    else:
        await make_legacy_collection(factory.server.url, factory.name)


class TestPreviousSchema:
    """A table or collection written before search existed is migrated in place, its entries found."""

    async def test_back_filled(self, own_factory: StoreFactory) -> None:
        await make_legacy(own_factory)
        store = await initialized(own_factory.make())
        assert [h.entry.entry_id for h in await store.async_search(["ns"], "alpha")] == ["old-1"]
        assert sorted(h.entry.entry_id for h in await store.async_search(["ns"], "legacy")) == [
            "old-1",
            "old-2",
        ]
        await store.async_save("ns", doc("legacy gamma"))
        assert len(await store.async_search(["ns"], "legacy")) == 3
        # Another store (another process, later) finds it up to date.
        again = await initialized(own_factory.make())
        assert len(await again.async_search(["ns"], "legacy")) == 3

    async def test_postgresql_schema_1(
        self, request: pytest.FixtureRequest, impl: _backend.Implementation
    ) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            con = await asyncpg.connect(made.server.url)
            try:
                await con.execute(OLD_POSTGRES_DDL.format(s=f'"{made.name}"'))
                await con.execute(
                    f'UPDATE "{made.name}".memory_entries SET metadata = $1::jsonb '
                    "WHERE entry_id = 'old-k'",
                    json.dumps({SEARCH_TEXT: "from the first schema"}),
                )
            finally:
                await con.close()
            store = await initialized(made.make())
            [hit] = await store.async_search(["ns"], "first")
            assert (hit.entry.entry_id, hit.entry.version) == ("old-k", 0)
        finally:
            await made.cleanup()

    async def test_mongodb_index(
        self, request: pytest.FixtureRequest, impl: _backend.Implementation
    ) -> None:
        made = StoreFactory("mongodb", server_for(request, "mongodb"))
        try:
            store = made.make()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await store.async_initialize()
            client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(made.server.url)
            try:
                info = await client["memlane"][made.name].index_information()
            finally:
                await client.close()
        finally:
            await made.cleanup()
        key = info["search_terms"]["key"]
        messages = [str(w.message) for w in caught if w.category is IndexFallbackWarning]
        if ("_fts", "text") in key:
            assert not any("search_terms" in m for m in messages)
        else:  # FerretDB: no text indexes; the plain one marks the back-fill done
            assert key == [("search_terms", 1)]
            assert any("no text index" in m for m in messages), messages


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
print("ready", flush=True)
sys.stdin.readline()
store.initialize()  # both processes migrate the same legacy table at once
for i in range(cfg["count"]):
    text = f"shared note {i} by writer{cfg['label']}"
    store.save("ns", MemoryEntry(content=i, metadata={"search_text": text}))
print(json.dumps(len(store.search(["ns"], f"writer{cfg['label']}", limit=1000))), flush=True)
store.close()
"""


class Workers:
    """Worker processes, each running WORKER with its own configuration."""

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

    def read_all(self) -> list[str]:
        lines = []
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                proc.wait(timeout=STEP_TIMEOUT)
                assert proc.stderr is not None
                pytest.fail(f"worker exited with {proc.returncode}:\n{proc.stderr.read()}")
            lines.append(line.strip())
        return lines

    def send_all(self, line: str) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=STEP_TIMEOUT)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def workers() -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for w in made:
        w.close()


class TestTwoProcesses:
    """Two processes that migrate one legacy table at once and write to one namespace are both found."""

    async def test_both_found(
        self,
        own_factory: StoreFactory,
        impl: _backend.Implementation,
        workers: list[Workers],
    ) -> None:
        await make_legacy(own_factory)
        base = {"kind": own_factory.kind, "url": own_factory.server.url, "name": own_factory.name}
        count = 25
        w = Workers([{**base, "label": n, "count": count} for n in range(2)], impl)
        workers.append(w)
        assert await asyncio.to_thread(w.read_all) == ["ready"] * 2
        w.send_all("go")
        assert await asyncio.to_thread(w.read_all) == [str(count)] * 2
        store = await initialized(own_factory.make())
        hits = await store.async_search(["ns"], "shared", limit=1000)
        assert sorted(h.entry.content for h in hits) == sorted(list(range(count)) * 2)
        for label in range(2):
            found = await store.async_search(["ns"], f"writer{label}", limit=1000)
            assert len(found) == count
            assert {h.entry.metadata[SEARCH_TEXT].rsplit(" ", 1)[1] for h in found} == {
                f"writer{label}"
            }
        assert sorted(h.entry.entry_id for h in await store.async_search(["ns"], "legacy")) == [
            "old-1",
            "old-2",
        ]
