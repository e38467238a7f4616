"""Vectors in the database-server stores, against real servers.

PostgreSQL runs twice: Debian's server, which has no pgvector (memlane scores the vectors,
with one VectorFallbackWarning), and the pgserver wheel's PostgreSQL 16, which has it (the
server scores them, through HNSW once the table is large). MongoDB is FerretDB, which has no
``$vectorSearch``. Every kind keeps the whole vector contract of ``test_store_vectors``; the
tests here add what is particular to a server: the fallback warning, the tables and their
migration, values as bound parameters, read-only stores, and processes sharing one store.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import asyncpg
import pytest

import db_servers
from memlane.errors import InvalidValueError, ReadOnlyStoreError
from memlane.stores import EntryVector, VectorFallbackWarning, VectorStore, _pg_vectors
from memlane.stores._network_vectors import best_vectors
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import encode_vector, text_digest, unit
from store_kinds import Made
from test_database_stores import StoreFactory, initialized, server_for
from test_store_vectors import MODEL, VectorStoreContract, contents, doc, vec

VECTOR_KINDS = ["postgres", "pgvector", "mongodb"]
"""Debian's PostgreSQL (no pgvector), pgserver's (pgvector), FerretDB (no $vectorSearch)."""

FALLBACK = {"postgres": "pgvector", "mongodb": r"\$vectorSearch"}
"""What each fallback kind's warning names as missing."""


@pytest.fixture(scope="session")
def pgvector_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[db_servers.Server]:
    """A second PostgreSQL, with pgvector, for the whole run (started here unless given)."""
    try:
        server = db_servers.start_pgvector_postgres(tmp_path_factory.mktemp("pgvector"))
    except db_servers.ServerError as exc:
        pytest.fail(
            f"the pgvector PostgreSQL could not start (pip install -e '.[test]' installs "
            f"pgserver, or set {db_servers.PGVECTOR_URL_ENV}):\n{exc}",
            pytrace=False,
        )
    yield server
    server.stop()


def factory_for(request: pytest.FixtureRequest, kind: str) -> StoreFactory:
    """A factory of isolated stores of ``kind`` (one of :data:`VECTOR_KINDS`)."""
    if kind == "pgvector":
        return StoreFactory("postgres", request.getfixturevalue("pgvector_server"))
    return StoreFactory(kind, server_for(request, kind))


async def first_vector_call(store: Any, kind: str) -> None:
    """The first vector operation of a store: a fallback kind warns, once, naming what its
    server lacks; pgvector does not warn."""
    if kind in FALLBACK:
        with pytest.warns(VectorFallbackWarning, match=FALLBACK[kind]):
            assert await store.async_vector_search(["ns"], [1.0], model="probe") == []
    else:
        assert await store.async_vector_search(["ns"], [1.0], model="probe") == []


@pytest.fixture(params=VECTOR_KINDS)
async def vstore(request: pytest.FixtureRequest) -> AsyncIterator[Made]:
    """A fresh store of each kind, past its one fallback warning."""
    factory = factory_for(request, request.param)
    store = await initialized(factory.make())
    await first_vector_call(store, request.param)
    yield Made(request.param, store, {"url": factory.server.url, "name": factory.name})
    await factory.cleanup()


class TestDatabaseStoresKeepTheVectorContract(VectorStoreContract):
    """PostgreSQL with and without pgvector, and MongoDB, keep every rule of VectorStore."""


def digest_vector(text: str, dims: int = 16) -> list[float]:
    """A vector that is a function of ``text`` alone: a hit's score then shows which text
    the vector it was found by was made from."""
    raw = hashlib.blake2b(text.encode(), digest_size=dims).digest()
    return unit([b - 127.5 for b in raw])


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class TestTheFallbackWarnsOnce:
    """A server that cannot rank vectors gives one warning per store, naming what it lacks."""

    @pytest.mark.parametrize("kind", ["postgres", "mongodb"])
    async def test_once_per_store(self, request: pytest.FixtureRequest, kind: str) -> None:
        factory = factory_for(request, kind)
        try:
            store = await initialized(factory.make())
            a = doc("coffee black")
            await store.async_save("ns", a)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
                assert contents(await store.async_vector_search(["ns"], [1, 0], model=MODEL))
                assert store.vector_search(["ns"], [1, 0], model=MODEL)
            assert [w.category for w in caught] == [VectorFallbackWarning]
            message = str(caught[0].message)
            assert store.address in message
            if kind == "postgres":
                assert "has no pgvector: the 'vector' extension cannot be created" in message
            else:
                assert "has no $vectorSearch" in message
            # Another store of the same server warns again: each may be the first a
            # process opens.
            other = await initialized(factory.make())
            assert await other.async_missing_vectors(["ns"], MODEL) == []
            with pytest.warns(VectorFallbackWarning):
                await other.async_vector_search(["ns"], [1, 0], model=MODEL)
        finally:
            await factory.cleanup()


async def fetch(server: db_servers.Server, sql: str, *args: Any) -> list[Any]:
    con = await asyncpg.connect(server.url)
    try:
        return list(await con.fetch(sql, *args))
    finally:
        await con.close()


async def script(server: db_servers.Server, sql: str) -> None:
    """Runs several statements (no parameters) on ``server``."""
    con = await asyncpg.connect(server.url)
    try:
        await con.execute(sql)
    finally:
        await con.close()


class TestPostgresVectorTables:
    """The vectors' tables: a ``vector`` column with pgvector, bytes without, HNSW when large,
    and the migrations of older schemas."""

    @pytest.mark.parametrize(("kind", "column"), [("pgvector", "vector"), ("postgres", "bytea")])
    async def test_the_column_follows_the_server(
        self, request: pytest.FixtureRequest, kind: str, column: str
    ) -> None:
        factory = factory_for(request, kind)
        try:
            store = await initialized(factory.make())
            await first_vector_call(store, kind)
            rows = await fetch(
                factory.server,
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass($1) AND attname = 'embedding'",
                f'"{factory.name}".entry_vectors',
            )
            assert [r[0] for r in rows] == [column]
        finally:
            await factory.cleanup()

    async def test_a_large_table_is_searched_through_hnsw(
        self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(_pg_vectors, "EXACT_BELOW", 30)
        factory = factory_for(request, "pgvector")
        try:
            store = await initialized(factory.make())
            entries = [doc(f"fact {i}", importance=0.5) for i in range(60)]
            await store.async_save_many("ns", entries[:50])
            await store.async_save_many("few", entries[50:])
            index = f'"{factory.name}".entry_vectors_hnsw_1'
            vectors = [
                EntryVector(e.entry_id, text_digest(f"fact {i}"), digest_vector(f"fact {i}"))
                for i, e in enumerate(entries)
            ]
            assert await store.async_save_vectors("ns", MODEL, vectors[:25]) == 25
            assert (await fetch(factory.server, "SELECT to_regclass($1)", index))[0][0] is None
            assert await store.async_save_vectors("ns", MODEL, vectors[25:50]) == 25
            # The size is judged by the server's statistics, which ANALYZE brings up to date
            # (else they follow within a second or so, or at the next autovacuum).
            await fetch(factory.server, f'ANALYZE "{factory.name}".entry_vectors')
            assert await store.async_save_vectors("few", MODEL, vectors[50:]) == 10
            assert (await fetch(factory.server, "SELECT to_regclass($1)", index))[0][0]
            query = digest_vector("fact 7")
            for names, pool in ((["ns"], range(50)), (["few"], range(50, 60))):
                hits = await store.async_vector_search(names, query, model=MODEL, limit=5)
                expected = sorted(pool, key=lambda i: -dot(digest_vector(f"fact {i}"), query))
                assert [h.entry.entry_id for h in hits] == [
                    entries[i].entry_id for i in expected[:5]
                ]
                for hit in hits:
                    text = hit.entry.metadata[SEARCH_TEXT]
                    assert hit.score == pytest.approx(dot(digest_vector(text), query), abs=1e-5)
            # More than HNSW explores: answered exactly.
            every = await store.async_vector_search(["ns", "few"], query, model=MODEL, limit=2000)
            assert len(every) == 60
        finally:
            await factory.cleanup()

    async def test_byte_vectors_are_converted_when_pgvector_arrives(
        self, request: pytest.FixtureRequest
    ) -> None:
        factory = factory_for(request, "pgvector")
        try:
            store = await initialized(factory.make())
            a = doc("coffee black")
            await store.async_save("ns", a)
            await store.async_close()
            sql = _pg_vectors.PgVectors(f'"{factory.name}"', f'"{factory.name}".memory_entries')
            # The table as a server without pgvector made it, holding one vector.
            await script(factory.server, f"DROP TABLE {sql.table}; {sql.ddl(None)}")
            await fetch(
                factory.server, f"INSERT INTO {sql.models} (model, dims) VALUES ($1, 2)", MODEL
            )
            await fetch(
                factory.server,
                f"INSERT INTO {sql.table} SELECT $1, id, $2, $3 FROM {sql.models}",
                a.entry_id,
                text_digest("coffee black"),
                encode_vector(unit([1.0, 0.0])),
            )
            reopened = await initialized(factory.make())
            # Its vectors are gone with the bytes, and listed for the writer to embed again.
            assert await reopened.async_vector_search(["ns"], [1, 0], model=MODEL) == []
            assert await reopened.async_missing_vectors(["ns"], MODEL) == [a]
            assert await reopened.async_save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
            found = await reopened.async_vector_search(["ns"], [1, 0], model=MODEL)
            assert contents(found) == ["coffee black"]
        finally:
            await factory.cleanup()

    @pytest.mark.parametrize("kind", ["pgvector", "postgres"])
    async def test_a_schema_made_before_vectors(
        self, request: pytest.FixtureRequest, kind: str
    ) -> None:
        factory = factory_for(request, kind)
        try:
            store = await initialized(factory.make())
            a = doc("coffee black")
            await store.async_save("ns", a)
            await store.async_close()
            s = f'"{factory.name}"'
            await script(
                factory.server,
                f"DROP TRIGGER memory_entries_stale_vector ON {s}.memory_entries; "
                f"DROP TABLE {s}.entry_vectors, {s}.vector_models; "
                f"DROP FUNCTION {s}.drop_stale_vector()",
            )
            # Read-only, it finds no vector (and has none to warn about scoring) and misses
            # every one, creating nothing.
            reader = factory.make(read_only=True)
            await reader.async_initialize()
            assert await reader.async_vector_search(["ns"], [1.0, 0.0], model=MODEL) == []
            assert await reader.async_missing_vectors(["ns"], MODEL) == [a]
            with pytest.raises(ReadOnlyStoreError):
                await reader.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
            found = await fetch(factory.server, "SELECT to_regclass($1)", f"{s}.entry_vectors")
            assert found[0][0] is None
            # Writable, it creates the tables and trigger.
            writer = await initialized(factory.make())
            await first_vector_call(writer, kind)
            assert await writer.async_save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
            changed = a.model_copy(update={"metadata": {SEARCH_TEXT: "tea"}})
            await writer.async_save("ns", changed)
            assert await writer.async_missing_vectors(["ns"], MODEL) == [changed]
        finally:
            await factory.cleanup()


class TestValuesAreData:
    """Models, namespaces and ids reach the server as bound values, never as SQL or queries."""

    async def test_hostile_names(self, vstore: Made) -> None:
        store = vstore.store
        assert isinstance(store, VectorStore)
        model = "m'); DROP TABLE memory_entries; --"
        namespace = "ns'\"; $where"
        a = doc("coffee black")
        a = a.model_copy(update={"entry_id": "id' OR '1'='1"})
        await store.async_save(namespace, a)
        assert await store.async_save_vectors(namespace, model, [vec(a, 1, 0)]) == 1
        hits = await store.async_vector_search([namespace], [1, 0], model=model)
        assert [h.entry for h in hits] == [a]
        assert await store.async_missing_vectors([namespace], model) == []
        assert await store.async_load(namespace) == [a]

    async def test_a_model_the_server_cannot_hold_is_named(self, vstore: Made) -> None:
        store = vstore.store
        assert isinstance(store, VectorStore)
        with pytest.raises(InvalidValueError, match="model"):
            await store.async_vector_search(["ns"], [1.0], model="m\ud800")
        with pytest.raises(InvalidValueError, match="model"):
            await store.async_save_vectors("ns", "m\ud800", [])


class TestLargeBatches:
    """A writer's batch of vectors is saved whole, however large (FerretDB stops answering
    during one update command of 100 changed documents: the store sends smaller ones)."""

    async def test_a_batch_of_120(self, vstore: Made) -> None:
        store = vstore.store
        assert isinstance(store, VectorStore)
        entries = [doc(f"fact {i}") for i in range(120)]
        await store.async_save_many("ns", entries)
        vectors = [
            EntryVector(e.entry_id, text_digest(f"fact {i}"), digest_vector(f"fact {i}"))
            for i, e in enumerate(entries)
        ]
        assert await store.async_save_vectors("ns", MODEL, vectors) == 120
        assert await store.async_missing_vectors(["ns"], MODEL) == []
        query = digest_vector("fact 77")
        (hit,) = await store.async_vector_search(["ns"], query, model=MODEL, limit=1)
        assert hit.entry == entries[77]


class TestReadOnlyDatabaseStores:
    """A read-only store refuses save_vectors before any I/O and searches what is there."""

    @pytest.mark.parametrize("kind", VECTOR_KINDS)
    async def test_read_only(self, request: pytest.FixtureRequest, kind: str) -> None:
        factory = factory_for(request, kind)
        try:
            writer = await initialized(factory.make())
            await first_vector_call(writer, kind)
            a = doc("coffee black")
            await writer.async_save("ns", a)
            assert await writer.async_save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
            reader = await initialized(factory.make(read_only=True))
            await first_vector_call(reader, kind)
            with pytest.raises(ReadOnlyStoreError):
                await reader.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
            assert contents(await reader.async_vector_search(["ns"], [1, 0], model=MODEL)) == [
                "coffee black"
            ]
            assert await reader.async_missing_vectors(["ns"], MODEL) == []
        finally:
            await factory.cleanup()


class TestScoringInMemlane:
    """The fallback's ranking is the same with numpy and without."""

    def test_numpy_and_plain_python_agree(self) -> None:
        rows = [digest_vector(f"row {i % 7}", 8) for i in range(40)]
        # Insertion order given apart from the list's order, as PostgreSQL reads them.
        candidates = [(encode_vector(r), (i % 3) / 2, 100 - i) for i, r in enumerate(rows)]
        query = digest_vector("row 3", 8)
        with_numpy = best_vectors(query, candidates, 12)
        plain = best_vectors(query, candidates, 12, use_numpy=False)
        assert [i for i, _ in with_numpy] == [i for i, _ in plain]
        for (_, a), (_, b) in zip(with_numpy, plain, strict=True):
            assert a == pytest.approx(b, abs=1e-6)
        # Equal vectors: higher importance, then earlier insertion.
        ties = [i for i, _ in plain if rows[i] == rows[3]]
        assert len(ties) > 3
        assert ties == sorted(ties, key=lambda i: (-candidates[i][1], candidates[i][2]))
        # A limit that cuts through equal scores keeps the best of them.
        for use_numpy in (True, False):
            cut = best_vectors(query, candidates, 2, use_numpy=use_numpy)
            assert [i for i, _ in cut] == ties[:2]
        assert plain[0][1] == pytest.approx(1.0)
        assert best_vectors(query, [], 5) == []


WORKER = r"""
import hashlib, json, select, sys, warnings
warnings.simplefilter("ignore")  # the fallback's notice: this test is about what is found
cfg = json.loads(sys.argv[1])
from memlane.stores import EntryVector, MongoDBStore, PostgreSQLStore
from memlane.stores.vectors import text_digest, unit
from memlane.types import MemoryEntry

def digest_vector(text, dims=16):
    raw = hashlib.blake2b(text.encode(), digest_size=dims).digest()
    return unit([b - 127.5 for b in raw])

if cfg["kind"] == "mongodb":
    store = MongoDBStore(cfg["url"], collection=cfg["name"], pool_size=2)
else:
    store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
store.initialize()
print(json.dumps({"state": "ready"}), flush=True)
assert sys.stdin.readline().strip() == "go"
model, ns = cfg["model"], "shared"
if cfg["role"] == "writer":
    deleted, late = [], 0
    for i in range(cfg["rounds"]):
        text = f"{cfg['name']} {cfg['who']} fact {i}"
        entry = MemoryEntry(entry_id=f"{cfg['who']}-{i}", content={"i": i},
                            metadata={"search_text": text})
        store.save(ns, entry)
        store.save_vectors(ns, model, [EntryVector(entry.entry_id, text_digest(text),
                                                   digest_vector(text))])
        if i % 3 == 0:
            store.delete(ns, entry.entry_id)
            deleted.append(entry.entry_id)
        elif i % 3 == 1:
            new = text + " changed"
            store.save(ns, entry.model_copy(update={"metadata": {"search_text": new}}))
            # A writer late with the old text's vector: refused.
            late += store.save_vectors(ns, model, [EntryVector(entry.entry_id,
                                                               text_digest(text),
                                                               digest_vector(text))])
    print(json.dumps({"state": "done", "deleted": deleted, "late": late}), flush=True)
else:
    query = digest_vector("query")
    wrong, seen, searches = [], 0, 0
    # Searches while the writers work, until the test says "stop" (at least once).
    while not select.select([sys.stdin], [], [], 0)[0] or searches == 0:
        searches += 1
        for hit in store.vector_search([ns], query, model=model, limit=20):
            seen += 1
            expected = sum(a * b for a, b in zip(digest_vector(hit.entry.metadata["search_text"]), query))
            if abs(hit.score - expected) > 1e-4:
                wrong.append([hit.entry.entry_id, hit.entry.metadata["search_text"], hit.score])
    print(json.dumps({"state": "done", "wrong": wrong, "seen": seen}), flush=True)
store.close()
"""

ROUNDS = 30
WORKER_TIMEOUT = 180.0


@pytest.fixture(params=VECTOR_KINDS)
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[tuple[StoreFactory, Any]]:
    """A store of each kind that worker processes open too (by its factory's name)."""
    factory = factory_for(request, request.param)
    store = await initialized(factory.make())
    await first_vector_call(store, request.param)
    yield factory, store
    await factory.cleanup()


class TestProcessesShareVectors:
    """Two processes save, change and delete entries with vectors while a third searches:
    every hit is found by the vector of its current text, and nothing deleted comes back."""

    def test_two_writers_and_a_searcher(self, shared: tuple[StoreFactory, Any]) -> None:
        factory, store = shared
        base = {"kind": factory.kind, "url": factory.server.url, "name": factory.name}
        roles = [
            {"role": "writer", "who": "a", "rounds": ROUNDS},
            {"role": "writer", "who": "b", "rounds": ROUNDS},
            {"role": "searcher", "rounds": ROUNDS},
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, json.dumps({**base, **role, "model": MODEL})],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for role in roles
        ]
        try:
            for proc in procs:
                assert proc.stdout is not None
                assert json.loads(proc.stdout.readline()) == {"state": "ready"}
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            results = [
                json.loads(proc.communicate(timeout=WORKER_TIMEOUT)[0]) for proc in procs[:2]
            ]
            results.append(json.loads(procs[2].communicate("stop\n", timeout=WORKER_TIMEOUT)[0]))
            assert [proc.returncode for proc in procs] == [0, 0, 0]
            writers, searcher = results[:2], results[2]
            assert [w["late"] for w in writers] == [0, 0]
            assert searcher["wrong"] == []
            assert searcher["seen"] > 0
            deleted = {i for w in writers for i in w["deleted"]}
            assert len(deleted) == 2 * len(range(0, ROUNDS, 3))
            final = store.vector_search(["shared"], digest_vector("query"), model=MODEL, limit=1000)
            found = {h.entry.entry_id for h in final}
            # Those never changed keep their vector; the changed ones lost theirs.
            assert found == {f"{w}-{i}" for w in "ab" for i in range(ROUNDS) if i % 3 == 2}
            assert not found & deleted
            missing = store.missing_vectors(["shared"], MODEL)
            assert {e.entry_id for e in missing} == {
                f"{w}-{i}" for w in "ab" for i in range(ROUNDS) if i % 3 == 1
            }
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
