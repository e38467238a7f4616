"""LongTermMemory by meaning, on every local store and both implementations.

With an embedder, facts, procedures and episodes are embedded in the background as they are
written; ``search`` is hybrid by default (meaning, plus selective words and exact
identifiers), ``semantic`` or ``keyword`` on request; ``flush`` waits for the vectors and
``reembed`` fills in what another model (or no model) left. The local WordLlama model makes
the meaning tests real and offline; a counting wrapper around it says how often the embedder
ran.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.embeddings import (
    Embedder,
    EmbeddingResult,
    EmbeddingSettings,
    TestEmbeddingModel,
    WrapperEmbeddingModel,
)
from pydantic_ai.embeddings.result import EmbedInputType

from memlane import _backend
from memlane.embeddings import local_embedding_model
from memlane.longterm import Episode, Fact, LongTermMemory, Procedure
from memlane.stores import InMemoryStore
from store_kinds import open_store
from test_database_stores import initialized
from test_database_vectors import (  # the session's pgvector server, for the pgvector kind
    factory_for,
    first_vector_call,
    pgvector_server,  # noqa: F401  # a fixture: pytest finds it in this module
)

LOCAL_STORES = ["memory", "file", "sqlite"]
SERVER_STORES = ["postgres", "pgvector", "mongodb"]
"""PostgreSQL without pgvector, PostgreSQL with it, MongoDB (FerretDB)."""
VECTOR_STORES = [*LOCAL_STORES, *SERVER_STORES]


class Counting(WrapperEmbeddingModel):
    """The local model, recording each call as ``(input_type, number of texts)``."""

    def __init__(self) -> None:
        super().__init__(local_embedding_model())
        self.calls: list[tuple[str, int]] = []

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        self.calls.append((input_type, 1 if isinstance(inputs, str) else len(inputs)))
        return await super().embed(inputs, input_type=input_type, settings=settings)

    def documents(self) -> int:
        """How many texts were embedded as documents."""
        return sum(n for kind, n in self.calls if kind == "document")


class Held(WrapperEmbeddingModel):
    """The local model, whose document embeddings wait until :attr:`go` is set (calls are
    recorded as by :class:`Counting`)."""

    def __init__(self) -> None:
        super().__init__(local_embedding_model())
        self.go = threading.Event()
        self.calls: list[tuple[str, int]] = []

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        self.calls.append((input_type, 1 if isinstance(inputs, str) else len(inputs)))
        if input_type == "document":
            await asyncio.to_thread(self.go.wait, 30)
        return await super().embed(inputs, input_type=input_type, settings=settings)


class Failing(WrapperEmbeddingModel):
    """The local model, whose document embeddings fail (a provider that is down)."""

    def __init__(self) -> None:
        super().__init__(local_embedding_model())

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        if input_type == "document":
            raise ConnectionError("the embedding provider is down")
        return await super().embed(inputs, input_type=input_type, settings=settings)


class Blind(WrapperEmbeddingModel):
    """The local model, giving texts that hold "blank" no direction (the zero vector)."""

    def __init__(self) -> None:
        super().__init__(local_embedding_model())

    async def embed(
        self,
        inputs: str | Sequence[str],
        *,
        input_type: EmbedInputType,
        settings: EmbeddingSettings | None = None,
    ) -> EmbeddingResult:
        result = await super().embed(inputs, input_type=input_type, settings=settings)
        rows = [
            [0.0] * len(row) if "blank" in text else row
            for text, row in zip(result.inputs, result.embeddings, strict=True)
        ]
        return dataclasses.replace(result, embeddings=rows)


@pytest.fixture(params=VECTOR_STORES)
async def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Any]:
    """Each store kind that keeps vectors, built by ``impl``."""
    async for kept in vector_store(request, tmp_path):
        yield kept


async def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh store of the kind ``request.param`` names: a local one, or one on a database
    server past its one fallback warning (PostgreSQL without pgvector, FerretDB)."""
    kind = request.param
    if kind in SERVER_STORES:
        factory = factory_for(request, kind)
        server_store = await initialized(factory.make())
        await first_vector_call(server_store, kind)
        yield server_store
        await factory.cleanup()
        return
    async for made in open_store(kind, request, tmp_path, "sem"):
        yield made.store


@pytest.fixture
def memory(store: Any) -> Iterator[LongTermMemory]:
    """Long-term memory with the local model on ``store``; its vectors are flushed before
    the store closes (a write after closing would reopen a server store's connections)."""
    memory = LongTermMemory(store, embedder="local")
    yield memory
    memory.flush()


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> str:
    """Whether a test calls the blocking methods or their ``async_`` twins."""
    return str(request.param)


async def call(way: str, memory: LongTermMemory, name: str, *args: Any, **kwargs: Any) -> Any:
    if way == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, "async_" + name)(*args, **kwargs)


def keys(found: list[Any]) -> list[str]:
    return [f.key for f in found]


PREFERENCES = {
    "coffee_order": "Ada drinks coffee black, no sugar",
    "pet": "Ada has a grey cat called Turing",
    "commute": "Ada cycles to the office along the river",
    "music": "Ada listens to jazz while she writes code",
    "allergy": "Ada is allergic to peanuts",
    "home": "Ada lives in a flat in Lisbon",
}


class TestSearchModes:
    """hybrid by default with an embedder, keyword without; no silent fallback."""

    async def test_a_preference_stated_in_other_words(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(way, memory, "remember_many", PREFERENCES, scope="user", scope_id="ada")
        await call(way, memory, "flush")
        question = "how does she take her hot drink"  # no word in common with the fact
        for mode in (None, "hybrid", "semantic"):
            found = await call(way, memory, "search", question, user_id="ada", mode=mode)
            assert keys(found)[0] == "coffee_order", mode

    async def test_an_identifier_ranks_its_own_record_first(
        self, memory: LongTermMemory, way: str
    ) -> None:
        facts = {
            "invoice_a": "Invoice INV-48213 for the Lisbon offsite was paid",
            "invoice_b": "Invoice INV-48231 for the Lisbon offsite is overdue",
            "invoice_c": "Invoice INV-84213 for office chairs was paid",
            "server_a": "The staging server answers on 10.42.7.19",
            "server_b": "The build server answers on 10.42.19.7",
        }
        await call(way, memory, "remember_many", facts)
        await call(way, memory, "flush")
        for question, wanted in (
            ("was INV-48213 paid?", "invoice_a"),
            ("which server is 10.42.19.7", "server_b"),
        ):
            assert keys(await call(way, memory, "search", question))[0] == wanted

    async def test_keyword_is_the_default_without_an_embedder(self, store: Any) -> None:
        memory = LongTermMemory(store)
        memory.remember("drink", "coffee, black")
        assert keys(memory.search("coffee")) == ["drink"]
        assert keys(memory.search("coffee", mode="keyword")) == ["drink"]

    @pytest.mark.parametrize("mode", ["semantic", "hybrid"])
    async def test_meaning_without_an_embedder_names_it(self, store: Any, mode: str) -> None:
        memory = LongTermMemory(store)
        with pytest.raises(ValueError, match="needs an embedder"):
            memory.search("coffee", mode=mode)
        with pytest.raises(ValueError, match="embedder"):
            await memory.async_search("coffee", mode=mode)

    @pytest.mark.parametrize("bad", ["dense", "", "HYBRID", 1])
    async def test_an_unknown_mode_names_it(self, memory: LongTermMemory, bad: object) -> None:
        with pytest.raises(ValueError, match=r"^mode must be one of"):
            memory.search("coffee", mode=bad)  # type: ignore[arg-type]  # what a caller might pass

    async def test_a_more_specific_scope_hides_the_same_key(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(way, memory, "remember", "drink", "espresso with sugar")
        await call(way, memory, "remember", "drink", "black coffee", scope="user", scope_id="u")
        await call(way, memory, "flush")
        for mode in ("hybrid", "semantic"):
            seen = await call(way, memory, "search", "coffee drink", user_id="u", mode=mode)
            assert [f.value for f in seen] == ["black coffee"], mode
            unseen = await call(way, memory, "search", "coffee drink", mode=mode)
            assert [f.value for f in unseen] == ["espresso with sugar"], mode

    async def test_min_confidence_and_limit(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "tea", "green tea in the morning", confidence=0.3)
        await call(way, memory, "remember", "coffee", "black coffee after lunch", confidence=0.9)
        await call(way, memory, "remember", "juice", "orange juice at breakfast", confidence=0.7)
        await call(way, memory, "flush")
        for mode in ("hybrid", "semantic"):
            found = await call(way, memory, "search", "hot drinks", mode=mode)
            assert sorted(keys(found)) == ["coffee", "juice"], mode
            low = await call(way, memory, "search", "hot drinks", mode=mode, min_confidence=0.0)
            assert len(low) == 3
            assert len(await call(way, memory, "search", "hot drinks", mode=mode, limit=1)) == 1

    async def test_procedures_and_episodes_by_meaning(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(
            way, memory, "add_procedure", "restart_database",
            trigger_conditions={"goal_contains": ["postgres"]},
            procedure_type="tool_sequence", content="Stop the postgres service, then start it again",
        )  # fmt: skip
        await call(
            way, memory, "record_episode", agent_id="ops", trigger="page",
            input="the nightly backup job", success=False,
            error="disk full on the backup volume",
            actions=[{"tool": "df", "args": {"path": "/backup"}, "result": "100% used"}],
        )  # fmt: skip
        await call(way, memory, "remember", "office", "The office is in Lisbon")
        await call(way, memory, "flush")
        kinds = await call(way, memory, "search", "storage ran out of space", mode="semantic")
        assert isinstance(kinds[0], Episode)
        assert kinds[0].outcome.error == "disk full on the backup volume"
        procedures = await call(
            way, memory, "search", "reboot the db server", memory_type="procedures"
        )
        assert [type(p) for p in procedures] == [Procedure]
        facts = await call(way, memory, "search", "where do we work", memory_type="facts")
        assert all(isinstance(f, Fact) for f in facts)

    async def test_until_flush_keyword_finds_a_record(self, store: Any) -> None:
        held = Held()
        memory = LongTermMemory(store, embedder=held)
        memory.remember("drink", "Ada drinks it black, no sugar")
        # The vector is being computed (held): the hybrid search finds it by its words.
        assert keys(memory.search("ada sugar")) == ["drink"]
        assert memory.search("ada sugar", mode="semantic") == []
        held.go.set()
        memory.flush()
        assert keys(memory.search("ada sugar", mode="semantic")) == ["drink"]


class TestVectorsFollowRecords:
    """A deleted or changed record never comes back from a search by meaning."""

    async def test_forget_and_update(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "pet", "a grey cat called Turing")
        await call(way, memory, "remember", "drink", "black coffee, no sugar")
        await call(way, memory, "flush")
        await call(way, memory, "forget", "pet")
        found = await call(way, memory, "search", "kitten", mode="semantic")
        assert keys(found) == ["drink"]
        await call(way, memory, "remember", "drink", "green tea with honey")
        await call(way, memory, "flush")
        found = await call(way, memory, "search", "tea", mode="semantic")
        assert [f.value for f in found] == ["green tea with honey"]

    async def test_confirmed_and_contradicted_facts_keep_a_vector(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(way, memory, "remember", "drink", "black coffee, no sugar")
        await call(way, memory, "remember", "drink", "black coffee, no sugar")
        await call(way, memory, "contradict", "drink", penalty=0.1)
        await call(way, memory, "flush")
        found = await call(way, memory, "search", "espresso", mode="semantic")
        assert keys(found) == ["drink"]
        assert found[0].times_confirmed == 1


class TestFlushAndReembed:
    """flush waits; reembed fills gaps; reopening with the same model embeds only queries."""

    async def test_reopening_with_the_same_model_embeds_only_queries(self, store: Any) -> None:
        first = LongTermMemory(store, embedder="local")
        first.remember_many(PREFERENCES, scope="user", scope_id="ada")
        first.flush()
        counting = Counting()
        again = LongTermMemory(store, embedder=counting)
        assert again.embedding_model == first.embedding_model == "wordllama:l2_supercat"
        assert keys(again.search("how does she take her hot drink", user_id="ada"))[0] == (
            "coffee_order"
        )
        assert await again.async_reembed() == 0
        again.flush()
        assert counting.calls == [("query", 1)]

    async def test_records_written_without_an_embedder(self, store: Any, way: str) -> None:
        LongTermMemory(store).remember_many(PREFERENCES, scope="user", scope_id="ada")
        counting = Counting()
        memory = LongTermMemory(store, embedder=counting)
        assert await call(way, memory, "search", "coffee", user_id="ada", mode="semantic") == []
        totals: list[int] = []
        embedded = await call(way, memory, "reembed", batch_size=2, progress=totals.append)
        assert embedded == len(PREFERENCES)
        assert totals == [2, 4, 6]
        assert counting.documents() == len(PREFERENCES)
        found = await call(way, memory, "search", "coffee", user_id="ada", mode="semantic")
        assert keys(found)[0] == "coffee_order"
        assert await call(way, memory, "reembed") == 0

    async def test_texts_without_a_direction_do_not_stop_the_rest(
        self, store: Any, way: str
    ) -> None:
        # The oldest records are ones the model gives no direction: they are listed as
        # missing again and again, and must not hide the records after them from a batch.
        plain = LongTermMemory(store)
        for key in ("first", "second", "third"):
            plain.remember(key, "blank", scope="user", scope_id="ada")
        plain.remember_many(PREFERENCES, scope="user", scope_id="ada")
        memory = LongTermMemory(store, embedder=Blind())
        embedded = await call(way, memory, "reembed", batch_size=2)
        assert embedded == len(PREFERENCES)
        assert await call(way, memory, "reembed", batch_size=2) == 0
        found = await call(way, memory, "search", "hot drink", user_id="ada", mode="semantic")
        assert keys(found)[0] == "coffee_order"

    async def test_vectors_of_another_model_are_never_compared(self, store: Any) -> None:
        local = LongTermMemory(store, embedder="local")
        local.remember_many(PREFERENCES)
        local.flush()
        other = LongTermMemory(store, embedder=TestEmbeddingModel(dimensions=256))
        assert other.search("coffee", mode="semantic") == []
        assert other.reembed() == len(PREFERENCES)
        assert len(other.search("coffee", mode="semantic")) == len(PREFERENCES)
        # The local model's vectors were replaced: it needs its own again.
        assert local.search("coffee", mode="semantic") == []
        assert local.reembed() == len(PREFERENCES)

    async def test_reembed_needs_an_embedder(self, store: Any) -> None:
        memory = LongTermMemory(store)
        with pytest.raises(ValueError, match="reembed needs an embedder"):
            memory.reembed()
        memory.flush()  # nothing to wait for
        await memory.async_flush()
        with pytest.raises(TypeError, match="progress must be callable"):
            LongTermMemory(store, embedder="local").reembed(progress=3)  # type: ignore[arg-type]  # what a caller might pass

    async def test_an_embedder_failure_is_raised_by_flush(self, store: Any) -> None:
        memory = LongTermMemory(store, embedder=Failing())
        memory.remember("drink", "black coffee")  # stored: the failure comes later
        with pytest.raises(ConnectionError, match="provider is down"):
            memory.flush()
        memory.flush()  # raised once
        assert keys(memory.search("coffee")) == ["drink"]  # found by its words meanwhile

    def test_a_store_without_vectors_is_refused(self) -> None:
        class Plain(InMemoryStore):
            save_vectors = None  # type: ignore[assignment]  # a custom store written before vectors

        with pytest.raises(TypeError, match="keeps vectors"):
            LongTermMemory(Plain(), embedder="local")


class TestDedupe:
    """remember(dedupe=...) confirms a fact of the scope whose value means the same."""

    async def test_confirms_a_near_duplicate(self, memory: LongTermMemory, way: str) -> None:
        await call(
            way, memory, "remember", "coffee", "Ada drinks her coffee black with no sugar",
            scope="user", scope_id="ada",
        )  # fmt: skip
        result = await call(
            way, memory, "remember", "drink_order", "Ada drinks her coffee black, no sugar",
            scope="user", scope_id="ada", dedupe=0.92,
        )  # fmt: skip
        assert result.status == "confirmed"
        assert result.fact.key == "coffee"
        assert result.fact.times_confirmed == 1
        held = await call(way, memory, "facts", scope="user", scope_id="ada")
        assert keys(held) == ["coffee"]

    async def test_different_meanings_and_scopes_are_added(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(way, memory, "remember", "coffee", "Ada drinks her coffee black, no sugar")
        other = await call(way, memory, "remember", "pet", "Ada has a grey cat", dedupe=0.92)
        assert other.status == "created"
        elsewhere = await call(
            way, memory, "remember", "drink", "Ada drinks her coffee black, no sugar",
            scope="user", scope_id="ada", dedupe=0.92,
        )  # fmt: skip
        assert elsewhere.status == "created"
        same_key = await call(way, memory, "remember", "coffee", "tea", dedupe=0.92)
        assert same_key.status == "updated"  # the key itself: remember's own rules

    async def test_off_by_default_and_checked(self, store: Any) -> None:
        memory = LongTermMemory(store, embedder="local")
        memory.remember("a", "Ada drinks her coffee black, no sugar")
        assert memory.remember("b", "Ada drinks her coffee black, no sugar").status == "created"
        memory.flush()
        with pytest.raises(ValueError, match="dedupe must be"):
            memory.remember("c", "x", dedupe=1.5)
        with pytest.raises(ValueError, match="dedupe needs an embedder"):
            LongTermMemory(store).remember("c", "x", dedupe=0.9)
        assert LongTermMemory(store).get_fact("c") is None


class TestRememberMany:
    """remember_many remembers each fact as remember would, embedding them together."""

    async def test_statuses_in_order(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "held", "old")
        results = await call(
            way, memory, "remember_many", [("new", 1), ("held", "new"), ("new", 1)],
            scope="global", confidence=0.9,
        )  # fmt: skip
        assert [(r.fact.key, r.status) for r in results] == [
            ("new", "created"),
            ("held", "updated"),
            ("new", "confirmed"),
        ]
        skipped = await call(way, memory, "remember_many", {"held": "x"}, overwrite=False)
        assert skipped[0].status == "skipped"

    async def test_embedded_in_batches(self, store: Any) -> None:
        held = Held()
        memory = LongTermMemory(store, embedder=held)
        facts = {f"note_{i}": f"note number {i} about the garden" for i in range(1200)}
        # The first batch is held in the embedder: everything written meanwhile waits for
        # the next calls, at most batch_size (512) texts each.
        memory.remember_many(facts)
        held.go.set()
        memory.flush()
        documents = [n for kind, n in held.calls if kind == "document"]
        assert sum(documents) == 1200
        assert len(documents) <= 1 + -(-1200 // 512)
        assert max(documents) <= 512
        assert len(memory.search("garden", mode="semantic", limit=50)) == 50

    async def test_the_local_model_embeds_a_batch_before_returning(
        self, memory: LongTermMemory, way: str
    ) -> None:
        """In-process, the batch is embedded on the caller's thread: no flush needed."""
        await call(way, memory, "remember_many", PREFERENCES, scope="user", scope_id="ada")
        found = await call(way, memory, "search", "kitten", user_id="ada", mode="semantic")
        assert keys(found)[0] == "pet"
        assert len(found) == len(PREFERENCES)

    @pytest.mark.parametrize(
        ("facts", "problem"),
        [
            ([("ok", 1), ("", 2)], "key"),
            ([("ok", 1), ("bad", object())], "value"),
            ([("ok", 1), ("x",)], "pairs"),
            ("key=value", "mapping"),
            (42, "mapping"),
        ],
    )
    async def test_bad_input_writes_nothing(
        self, memory: LongTermMemory, facts: Any, problem: str
    ) -> None:
        with pytest.raises((TypeError, ValueError), match=problem):
            memory.remember_many(facts)
        assert memory.facts() == []

    async def test_user_preferences_follow(self, memory: LongTermMemory) -> None:
        user = memory.identify_user("telegram", 7)
        memory.remember_many(
            {"lang": "en", "tz": "UTC"},
            scope="user",
            scope_id=user.id,
            fact_type="user_preference",
        )
        assert memory.get_user(user.id).preferences == {"lang": "en", "tz": "UTC"}  # type: ignore[union-attr]  # the user exists


class TestFuzzyRecallStaysFuzzy:
    """recall(query=...) keeps the rule (words in order) with an embedder too."""

    async def test_local_time_is_not_time_local(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "time_local", "09:30")
        await call(way, memory, "remember", "local_time_zone", "Australia/Adelaide")
        await call(way, memory, "flush")
        found = await call(way, memory, "recall", query="local time")
        assert keys(found) == ["local_time_zone"]
        assert keys(await call(way, memory, "recall", "local time")) == ["local_time_zone"]


class TestEmbedderWithAnyModel:
    """Any pydantic-ai model works: TestEmbeddingModel's constant vectors tie, by confidence."""

    async def test_ties_by_confidence(self, store: Any, way: str) -> None:
        memory = LongTermMemory(store, embedder=Embedder(TestEmbeddingModel()))
        await call(way, memory, "remember", "a", "alpha", confidence=0.6)
        await call(way, memory, "remember", "b", "beta", confidence=0.9)
        await call(way, memory, "flush")
        assert keys(await call(way, memory, "search", "gamma", mode="semantic")) == ["b", "a"]


def _writer_process(kind: str, path: str, impl: _backend.BackendName, prefix: str) -> None:
    """One process's share: 40 facts remembered with the local model, flushed."""
    from memlane import FileStore, SQLiteStore, _backend

    with _backend.use(impl):
        store = SQLiteStore(path) if kind == "sqlite" else FileStore(path)
        try:
            memory = LongTermMemory(store, embedder="local")
            memory.remember_many(
                {f"{prefix}_{i}": f"{prefix} note {i} about the garden" for i in range(40)}
            )
            memory.remember(f"{prefix}_pet", f"{prefix} keeps a grey cat")
            memory.flush()
        finally:
            store.close()


class TestProcessesShareVectors:
    """Processes embedding into one store: each sees every record's vector, once flushed."""

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    async def test_two_writers_one_searcher(
        self, kind: str, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        import multiprocessing

        path = str(tmp_path / ("shared.sqlite3" if kind == "sqlite" else "shared"))
        context = multiprocessing.get_context("spawn")
        workers = [
            context.Process(target=_writer_process, args=(kind, path, impl.name, prefix))
            for prefix in ("alpha", "beta")
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            await asyncio.to_thread(worker.join, 120)
            assert worker.exitcode == 0
        from memlane import FileStore, SQLiteStore

        store = SQLiteStore(path) if kind == "sqlite" else FileStore(path)
        try:
            counting = Counting()
            memory = LongTermMemory(store, embedder=counting)
            assert memory.reembed() == 0  # every record has its vector already
            found = memory.search("kitten", mode="semantic", limit=2)
            assert sorted(keys(found)) == ["alpha_pet", "beta_pet"]
            assert len(memory.search("garden", mode="semantic", limit=100)) == 82
            assert counting.documents() == 0
        finally:
            store.close()
