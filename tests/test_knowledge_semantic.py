"""A summarizer strategy's knowledge base found by meaning (``conversation/knowledge.py``).

With an embedder, ``knowledge_plan`` embeds the chunks that have no vector of its model (once)
and searches hybrid; without one it keeps the keyword search. Chunks are written the way the
summaries write them (``knowledge_entries`` then ``SaveMany``), on the local stores and both
implementations, with WordLlama's offline model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.embeddings import Embedder
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import ConversationMemory, _backend
from memlane._ops import MissingVectors, SaveMany
from memlane._runner import run_async, run_sync
from memlane.conversation.knowledge import (
    KNOWLEDGE_HEADER,
    catch_up_plan,
    knowledge_entries,
    knowledge_namespace,
    knowledge_plan,
)
from memlane.embeddings import embedder_id, resolve_embedder
from memlane.strategies import KnowledgeBases, SummarizerStrategy
from store_kinds import Made, open_store
from test_database_stores import initialized
from test_database_vectors import (  # pgvector_server: the fixture, found by its name
    VECTOR_KINDS,
    factory_for,
    first_vector_call,
    pgvector_server,  # noqa: F401
)
from zero_vector_model import BlankBlind

LOCAL_VECTOR_STORES = ["memory", "file", "sqlite"]

SUMMARIES = [
    "Ada drinks her coffee black, with no sugar, every morning.",
    "The team moved the release of the billing service to Thursday.",
    "Ben is allergic to peanuts; the caterer was told.",
]


@pytest.fixture(scope="module")
def embedder() -> Any:
    """The offline model, loaded once for the module."""
    return resolve_embedder("local")


@pytest.fixture(params=LOCAL_VECTOR_STORES)
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each local store kind, built by ``impl``."""
    async for opened in open_store(request.param, request, tmp_path):
        yield opened


def strategy(top_k: int = 1, mode: str = "always") -> SummarizerStrategy:
    return SummarizerStrategy(
        knowledge_base=KnowledgeBases(collection_id="kb", search_mode=mode, top_k=top_k)  # type: ignore[arg-type]  # a Literal, checked by pydantic
    )


def store_summaries(store: Any, kb: SummarizerStrategy) -> None:
    at = datetime.now(UTC)
    for i, text in enumerate(SUMMARIES):
        chunks = knowledge_entries(kb, f"c{i}", 3, text, at, lambda t: len(t.split()))
        run_sync(SaveMany(knowledge_namespace("kb"), chunks), store)


class TestFoundByMeaning:
    """A prompt in other words finds the summary chunk that answers it."""

    def test_hybrid_finds_a_paraphrase_keyword_does_not(self, made: Made, embedder: Any) -> None:
        kb = strategy()
        store_summaries(made.store, kb)
        prompt = "preferred hot beverage order?"
        assert run_sync(knowledge_plan(made.store, kb, prompt), made.store) is None
        text = run_sync(knowledge_plan(made.store, kb, prompt, embedder), made.store)
        assert text == f"{KNOWLEDGE_HEADER}\n- {SUMMARIES[0]}"

    async def test_async_runner_agrees(self, made: Made, embedder: Any) -> None:
        kb = strategy(top_k=2)
        store_summaries(made.store, kb)
        prompt = "what food must the guests with nut allergies avoid"
        text = await run_async(knowledge_plan(made.store, kb, prompt, embedder), made.store)
        assert text is not None
        assert text.splitlines()[1] == f"- {SUMMARIES[2]}"
        assert text == run_sync(knowledge_plan(made.store, kb, prompt, embedder), made.store)

    def test_top_k(self, made: Made, embedder: Any) -> None:
        kb = strategy(top_k=2)
        store_summaries(made.store, kb)
        text = run_sync(knowledge_plan(made.store, kb, "when is the release", embedder), made.store)
        assert text is not None
        assert len(text.splitlines()) == 3  # the header and two chunks

    def test_search_mode_never_and_no_strategy(self, made: Made, embedder: Any) -> None:
        store_summaries(made.store, strategy())
        never = strategy(mode="never")
        assert run_sync(knowledge_plan(made.store, never, "coffee", embedder), made.store) is None
        assert run_sync(knowledge_plan(made.store, None, "coffee", embedder), made.store) is None

    def test_an_empty_knowledge_base(self, made: Made, embedder: Any) -> None:
        found = run_sync(knowledge_plan(made.store, strategy(), "coffee", embedder), made.store)
        assert found is None


class TestEmbeddedOnceOnRead:
    """Chunks without a vector of the model get one at the first search, and only then."""

    def test_catch_up_embeds_each_chunk_once(self, made: Made, embedder: Any) -> None:
        kb = strategy()
        store_summaries(made.store, kb)
        where, model = knowledge_namespace("kb"), embedder_id(embedder)
        assert len(run_sync(MissingVectors([where], model), made.store)) == len(SUMMARIES)
        assert run_sync(catch_up_plan(made.store, embedder, model, where), made.store) == 3
        assert run_sync(MissingVectors([where], model), made.store) == []
        assert run_sync(catch_up_plan(made.store, embedder, model, where), made.store) == 0

    def test_a_new_summary_is_embedded_at_the_next_search(self, made: Made, embedder: Any) -> None:
        kb = strategy()
        store_summaries(made.store, kb)
        run_sync(knowledge_plan(made.store, kb, "coffee", embedder), made.store)
        late = knowledge_entries(
            kb, "c9", 5, "Carla moved to Lisbon last spring.", datetime.now(UTC), len
        )
        run_sync(SaveMany(knowledge_namespace("kb"), late), made.store)
        text = run_sync(
            knowledge_plan(made.store, kb, "relocated to Portugal?", embedder), made.store
        )
        assert text == f"{KNOWLEDGE_HEADER}\n- Carla moved to Lisbon last spring."

    def test_chunks_without_a_direction_do_not_hide_the_rest(self, made: Made) -> None:
        # A round (1000) of the oldest chunks stays missing: the model gives them no vector.
        # The chunk after them is embedded all the same, once.
        kb = strategy()
        where = knowledge_namespace("kb")
        at = datetime.now(UTC)
        blank = [
            chunk
            for i in range(1000)
            for chunk in knowledge_entries(kb, f"b{i}", 3, f"blank {i}", at, len)
        ]
        run_sync(SaveMany(where, blank), made.store)
        late = knowledge_entries(kb, "c", 3, SUMMARIES[0], at + timedelta(seconds=1), len)
        run_sync(SaveMany(where, late), made.store)
        blind = Embedder(BlankBlind())
        model = embedder_id(blind)
        assert run_sync(catch_up_plan(made.store, blind, model, where), made.store) == 1
        assert len(run_sync(MissingVectors([where], model, limit=2000), made.store)) == 1000


@pytest.fixture(params=VECTOR_KINDS)
async def server_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """PostgreSQL with and without pgvector and MongoDB, past the one fallback warning."""
    factory = factory_for(request, request.param)
    store = await initialized(factory.make())
    await first_vector_call(store, request.param)
    yield store
    await factory.cleanup()


class TestOnDatabaseServers:
    """The knowledge base is embedded on read and found by meaning on the database servers."""

    async def test_found_by_meaning(self, server_store: Any, embedder: Any) -> None:
        kb = strategy()
        at = datetime.now(UTC)
        for i, text in enumerate(SUMMARIES):
            chunks = knowledge_entries(kb, f"c{i}", 3, text, at, len)
            await run_async(SaveMany(knowledge_namespace("kb"), chunks), server_store)
        plan = knowledge_plan(server_store, kb, "preferred hot beverage order?", embedder)
        assert await run_async(plan, server_store) == f"{KNOWLEDGE_HEADER}\n- {SUMMARIES[0]}"
        model = embedder_id(embedder)
        missing = MissingVectors([knowledge_namespace("kb")], model)
        assert await run_async(missing, server_store) == []


class Summaries:
    """A summarizer model that writes one fixed summary per call, in order."""

    TEXTS = (
        "Ada drinks her coffee black, with no sugar, every morning.",
        "Ben's flight to Lisbon leaves on the second of March.",
    )

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        summary = self.TEXTS[self.calls % len(self.TEXTS)]
        self.calls += 1
        step = {"missing_entities": [], "summary": summary}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, step)])


class TestThroughTheMemory:
    """A memory with an embedder folds turns into summaries, and its knowledge_for finds them
    by meaning; without one, the same prompt finds nothing."""

    def test_knowledge_for(self, made: Made, embedder: Any) -> None:
        kb = SummarizerStrategy(
            interaction_threshold_qty=3,
            cod_max_loops=1,
            interaction_keep=1,
            knowledge_base=KnowledgeBases(collection_id="session", top_k=1),
            model=FunctionModel(Summaries()),
        )
        memory = ConversationMemory(long_term=kb, store=made.store, embedder=embedder)
        for i in range(7):
            memory.add_turn("c", f"point {i}", f"noted {i}")
        memory.flush()
        assert memory.get_summary("c") is not None
        prompt = "preferred hot beverage order?"
        assert memory.knowledge_for("c", prompt) == f"{KNOWLEDGE_HEADER}\n- {Summaries.TEXTS[0]}"
        without = ConversationMemory(long_term=kb, store=made.store)
        assert without.knowledge_for("c", prompt) is None
        memory.close()
