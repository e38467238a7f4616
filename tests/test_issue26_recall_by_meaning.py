"""Issue 26 as a user reads it: the public names, keywords, defaults and errors of recall by
meaning, called the way the issue spells them, sync and async, on the process's code path
(and on both implementations where a test takes ``impl``).

The embedder is the offline local model, loaded once for the module.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.embeddings import EmbeddingModel

from memlane import ConversationMemory, LongTermMemory, MemoryManager, SQLiteStore, _backend
from memlane.config import MemlaneSettings
from memlane.embeddings import local_embedding_model
from memlane.stores import InMemoryStore
from memlane.strategies import KnowledgeBases, SummarizerStrategy
from summary_models import SummaryModel

MODES = ["sync", "async"]


async def run(owner: Any, name: str, way: str, *args: Any, **kwargs: Any) -> Any:
    """``owner.name(...)``, or ``await owner.async_name(...)`` when ``way`` is ``"async"``."""
    if way == "sync":
        return getattr(owner, name)(*args, **kwargs)
    return await getattr(owner, f"async_{name}")(*args, **kwargs)


COFFEE = "Ada drinks her coffee black, no sugar."
QUESTION = "how does she take her hot drink"


@pytest.fixture(scope="module")
def local() -> EmbeddingModel:
    """The offline model, once for the module (every memory below shares it)."""
    return local_embedding_model()


def facts_memory(embedder: Any, store: Any = None) -> LongTermMemory:
    memory = LongTermMemory(store if store is not None else InMemoryStore(), embedder=embedder)
    memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
    memory.remember("pet", "Ada has a grey cat named Turing.", scope="user", scope_id="ada")
    memory.remember("invoice", "Invoice INV-48213 is overdue.", scope="user", scope_id="ada")
    memory.remember("server", "The build server answers on 10.20.30.40.", scope="global")
    memory.flush()
    return memory


class TestEmbedderArgument:
    """Anything but an embedder, a model name or "local" is refused, naming ``embedder``."""

    @pytest.mark.parametrize("bad", [42, 4.2, True, b"local", ["local"], object()])
    def test_wrong_types(self, bad: Any) -> None:
        for build in (
            lambda: LongTermMemory(InMemoryStore(), embedder=bad),
            lambda: MemoryManager(embedder=bad),
            lambda: ConversationMemory(embedder=bad),
        ):
            with pytest.raises(TypeError, match="embedder"):
                build()

    @pytest.mark.parametrize("bad", ["", "   ", "bogus", "nope:some-model"])
    def test_bad_names(self, bad: str) -> None:
        for build in (
            lambda: LongTermMemory(InMemoryStore(), embedder=bad),
            lambda: MemoryManager(embedder=bad),
            lambda: ConversationMemory(embedder=bad),
        ):
            with pytest.raises(ValueError, match="embedder"):
                build()

    @pytest.mark.parametrize("bad", ["", "bogus", "42", "nope:some-model"])
    def test_bad_environment_value(self, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
        monkeypatch.setenv("MEMLANE_EMBEDDER", bad)
        with pytest.raises(ValueError, match="MEMLANE_EMBEDDER") as raised:
            MemoryManager.from_config()
        assert repr(bad) in str(raised.value)

    def test_environment_local(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("MEMLANE_EMBEDDER", "local")
        monkeypatch.setenv("MEMLANE_BACKEND", "sqlite")
        monkeypatch.setenv("MEMLANE_SQLITE_PATH", str(tmp_path / "m.sqlite3"))
        assert MemlaneSettings.from_env().embedder == "local"
        manager = MemoryManager.from_config()
        try:
            assert manager.long_term is not None
            manager.long_term.remember("coffee", COFFEE, scope="user", scope_id="ada")
            manager.flush()
            hits = manager.long_term.search(QUESTION, user_id="ada", mode="semantic", limit=1)
            assert [fact.key for fact in hits] == ["coffee"]
        finally:
            manager.close()
        manager.close()  # a second close is harmless

    def test_the_local_name_and_model_are_the_same(self, local: EmbeddingModel) -> None:
        by_name = LongTermMemory(InMemoryStore(), embedder="local")
        by_model = LongTermMemory(InMemoryStore(), embedder=local)
        assert by_name.embedding_model == by_model.embedding_model == "wordllama:l2_supercat"


class TestSearchSignature:
    """``search`` takes exactly the issue's keywords and defaults, and so does the twin."""

    def test_keywords_and_defaults(self) -> None:
        expected = {
            "memory_type": "all",
            "limit": 10,
            "min_confidence": 0.5,
            "session_id": None,
            "user_id": None,
            "agent_id": None,
            "mode": None,
        }
        for name in ("search", "async_search"):
            parameters = inspect.signature(getattr(LongTermMemory, name)).parameters
            assert list(parameters)[1] == "query"
            for keyword, default in expected.items():
                assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY
                assert parameters[keyword].default == default

    @pytest.mark.parametrize("way", MODES)
    async def test_every_keyword(self, local: EmbeddingModel, way: str) -> None:
        memory = facts_memory(local)
        hits = await run(
            memory,
            "search",
            way,
            QUESTION,
            memory_type="facts",
            limit=1,
            min_confidence=0.5,
            session_id=None,
            user_id="ada",
            agent_id=None,
            mode="hybrid",
        )
        assert [fact.key for fact in hits] == ["coffee"]

    @pytest.mark.parametrize("way", MODES)
    async def test_default_mode_is_hybrid_with_an_embedder(
        self, local: EmbeddingModel, way: str
    ) -> None:
        memory = facts_memory(local)
        default = await run(memory, "search", way, QUESTION, user_id="ada", limit=3)
        hybrid = await run(memory, "search", way, QUESTION, user_id="ada", limit=3, mode="hybrid")
        assert [f.key for f in default] == [f.key for f in hybrid]
        assert default[0].key == "coffee"
        # A question sharing no word with the record: found by meaning, not by keyword.
        paraphrase = "what beverage does she take without sweetener"
        keyword = await run(memory, "search", way, paraphrase, user_id="ada", mode="keyword")
        assert "coffee" not in [f.key for f in keyword]
        meaning = await run(memory, "search", way, paraphrase, user_id="ada", limit=1)
        assert [f.key for f in meaning] == ["coffee"]

    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("wanted", ["semantic", "hybrid"])
    async def test_meaning_without_an_embedder_names_it(self, way: str, wanted: str) -> None:
        memory = LongTermMemory(InMemoryStore())
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        with pytest.raises(ValueError, match="embedder"):
            await run(memory, "search", way, QUESTION, user_id="ada", mode=wanted)
        # Without an embedder the default is keyword search, which works.
        found = await run(memory, "search", way, "coffee", user_id="ada")
        assert [fact.key for fact in found] == ["coffee"]

    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("bad", ["bogus", "Hybrid", "", 1])
    async def test_unknown_mode_names_the_value(
        self, local: EmbeddingModel, way: str, bad: object
    ) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        with pytest.raises((TypeError, ValueError), match="mode") as raised:
            await run(memory, "search", way, QUESTION, mode=bad)
        assert repr(bad) in str(raised.value)

    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("limit", [2**63, 2**64, 10**30])
    async def test_a_limit_past_any_size_gives_everything_found(
        self, impl: _backend.Implementation, local: EmbeddingModel, way: str, limit: int
    ) -> None:
        # ``limit`` is "at most", however large: past a 64-bit integer (which the Rust index
        # and PostgreSQL cannot take) it still means every record found, on both paths.
        memory = facts_memory(local)
        query = "Ada coffee cat invoice server"
        for mode in ("keyword", "semantic", "hybrid"):
            hits = await run(memory, "search", way, query, user_id="ada", mode=mode, limit=limit)
            assert {fact.key for fact in hits} == {"coffee", "pet", "invoice", "server"}
        talk = ConversationMemory(embedder=local)
        talk.add_turn("trip", "I moved to Lisbon last spring", "Nice!")
        talk.flush()
        found = await run(talk, "search_transcripts", way, "Lisbon", limit=limit)
        assert [(match.conversation_id, match.turn_id) for match in found] == [("trip", 0)]
        talk.close()

    def test_identifiers_rank_their_own_record_first(self, local: EmbeddingModel) -> None:
        memory = facts_memory(local)
        assert memory.search("INV-48213", user_id="ada", limit=1)[0].key == "invoice"
        assert memory.search("10.20.30.40", limit=1)[0].key == "server"

    def test_a_more_specific_scope_hides_the_same_key(self, local: EmbeddingModel) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("drink", "Everyone drinks tea with milk.", scope="global")
        memory.remember("drink", COFFEE, scope="user", scope_id="ada")
        memory.flush()
        for wanted in ("semantic", "hybrid"):
            hits = memory.search(QUESTION, user_id="ada", mode=wanted)
            assert [(f.key, f.value) for f in hits] == [("drink", COFFEE)]


class TestFlushAndReembed:
    @pytest.mark.parametrize("way", MODES)
    async def test_flush_then_found_by_meaning(self, local: EmbeddingModel, way: str) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        await run(memory, "flush", way)
        hits = await run(memory, "search", way, QUESTION, user_id="ada", mode="semantic")
        assert [fact.key for fact in hits] == ["coffee"]

    @pytest.mark.parametrize("way", MODES)
    async def test_flush_without_an_embedder_is_a_no_op(self, way: str) -> None:
        memory = LongTermMemory(InMemoryStore())
        assert await run(memory, "flush", way) is None

    @pytest.mark.parametrize("way", MODES)
    async def test_reembed_after_a_change_of_model(
        self, local: EmbeddingModel, way: str, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.sqlite3"
        store = SQLiteStore(path)
        try:
            facts_memory(local, store)
            # Another model's vectors are never compared: a memory on a model of another
            # name finds nothing by meaning until it re-embeds.
            other = LongTermMemory(store, embedder=RenamedModel(local))
            assert other.search(QUESTION, user_id="ada", mode="semantic") == []
            assert await run(other, "reembed", way) == 4
            assert await run(other, "reembed", way) == 0
            hits = other.search(QUESTION, user_id="ada", mode="semantic", limit=1)
            assert [fact.key for fact in hits] == ["coffee"]
        finally:
            store.close()

    def test_reembed_without_an_embedder_names_it(self) -> None:
        with pytest.raises(ValueError, match="embedder"):
            LongTermMemory(InMemoryStore()).reembed()


class RenamedModel(EmbeddingModel):
    """The local model under another name: to the store, another model's vectors."""

    def __init__(self, inner: EmbeddingModel) -> None:
        super().__init__()
        self._inner = inner

    @property
    def model_name(self) -> str:
        return "renamed-l2"

    @property
    def system(self) -> str:
        return "test"

    async def embed(self, inputs: Any, *, input_type: Any, settings: Any = None) -> Any:
        return await self._inner.embed(inputs, input_type=input_type, settings=settings)


class CountingModel(EmbeddingModel):
    """The local model, counting the texts it is asked to embed, by input type."""

    def __init__(self, inner: EmbeddingModel) -> None:
        super().__init__()
        self._inner = inner
        self.texts: dict[str, int] = {}

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def system(self) -> str:
        return self._inner.system

    async def embed(self, inputs: Any, *, input_type: Any, settings: Any = None) -> Any:
        count = 1 if isinstance(inputs, str) else len(inputs)
        self.texts[input_type] = self.texts.get(input_type, 0) + count
        return await self._inner.embed(inputs, input_type=input_type, settings=settings)


class TestReopening:
    def test_the_same_model_embeds_nothing_but_queries(
        self, local: EmbeddingModel, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.sqlite3"
        first = CountingModel(local)
        store = SQLiteStore(path)
        try:
            facts_memory(first, store)
        finally:
            store.close()
        assert first.texts == {"document": 4}
        again = CountingModel(local)
        store = SQLiteStore(path)
        try:
            memory = LongTermMemory(store, embedder=again)
            memory.flush()
            assert memory.reembed() == 0
            hits = memory.search(QUESTION, user_id="ada", limit=1)
            assert [fact.key for fact in hits] == ["coffee"]
        finally:
            store.close()
        assert again.texts == {"query": 1}


class TestDedupe:
    def test_confirms_a_value_that_means_the_same(self, local: EmbeddingModel) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        memory.flush()
        result = memory.remember(
            "coffee_preference", COFFEE, scope="user", scope_id="ada", dedupe=0.92
        )
        assert result.status == "confirmed"
        assert result.fact.key == "coffee"
        assert [f.key for f in memory.facts(scope="user", scope_id="ada")] == ["coffee"]

    def test_adds_a_value_that_means_something_else(self, local: EmbeddingModel) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        result = memory.remember(
            "pet", "Ada has a grey cat.", scope="user", scope_id="ada", dedupe=0.92
        )
        assert (result.status, result.fact.key) == ("created", "pet")

    def test_other_scopes_are_not_duplicates(self, local: EmbeddingModel) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        result = memory.remember("coffee2", COFFEE, scope="user", scope_id="bob", dedupe=0.92)
        assert (result.status, result.fact.scope_id) == ("created", "bob")

    def test_off_by_default(self, local: EmbeddingModel) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        result = memory.remember("coffee_preference", COFFEE, scope="user", scope_id="ada")
        assert result.status == "created"

    @pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, 2, math.nan, math.inf])
    def test_bad_values_name_dedupe(self, local: EmbeddingModel, bad: float) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        memory.remember("coffee", COFFEE, scope="user", scope_id="ada")
        with pytest.raises(ValueError, match="dedupe"):
            memory.remember("other", "Bob likes tea.", scope="user", scope_id="ada", dedupe=bad)
        assert [f.key for f in memory.facts(scope="user", scope_id="ada")] == ["coffee"]

    @pytest.mark.parametrize("bad", ["0.9", True, [0.9]])
    def test_wrong_types_name_dedupe(self, local: EmbeddingModel, bad: object) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder=local)
        with pytest.raises(TypeError, match="dedupe"):
            memory.remember("k", "v", dedupe=bad)  # type: ignore[arg-type]  # wrong on purpose

    def test_without_an_embedder_names_it(self) -> None:
        with pytest.raises(ValueError, match="embedder"):
            LongTermMemory(InMemoryStore()).remember("k", "v", dedupe=0.92)


class TestTranscripts:
    def test_signature(self) -> None:
        for owner in (ConversationMemory, MemoryManager):
            for name in ("search_transcripts", "async_search_transcripts"):
                parameters = inspect.signature(getattr(owner, name)).parameters
                assert list(parameters)[1] == "query"
                assert parameters["conversation_id"].default is None
                assert parameters["user_id"].default is None
                assert parameters["limit"].default == 10
                for keyword in ("conversation_id", "user_id", "limit"):
                    assert parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY

    @pytest.mark.parametrize("way", MODES)
    async def test_what_was_said_in_any_conversation(
        self, impl: _backend.Implementation, local: EmbeddingModel, way: str
    ) -> None:
        manager = MemoryManager(embedder=local)
        conversation = manager.conversation
        conversation.add_turn(
            "trip", "I moved to Lisbon last spring", "Nice!", metadata={"user_id": "ada"}
        )
        conversation.add_turn(
            "pets", "My cat Turing sleeps all day", "Cats do.", metadata={"user_id": "bob"}
        )
        await run(manager, "flush", way)
        question = "which city does she live in now"
        [first, *_] = await run(manager, "search_transcripts", way, question)
        assert (first.conversation_id, first.turn_id) == ("trip", 0)
        scoped = await run(
            manager, "search_transcripts", way, question, conversation_id="pets", limit=5
        )
        assert {match.conversation_id for match in scoped} == {"pets"}
        by_user = await run(manager, "search_transcripts", way, question, user_id="bob")
        assert {match.conversation_id for match in by_user} == {"pets"}
        assert len(await run(manager, "search_transcripts", way, question, limit=1)) == 1
        manager.close()

    @pytest.mark.parametrize(
        ("keywords", "error", "named"),
        [
            ({"limit": 0}, ValueError, "limit"),
            ({"limit": "3"}, TypeError, "limit"),
            ({"conversation_id": 3}, TypeError, "conversation_id"),
            ({"user_id": 3}, TypeError, "user_id"),
        ],
    )
    def test_bad_keywords_are_named(
        self, local: EmbeddingModel, keywords: dict[str, Any], error: type, named: str
    ) -> None:
        memory = ConversationMemory(embedder=local)
        with pytest.raises(error, match=named):
            memory.search_transcripts("city", **keywords)

    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("how", ["clear", "clear_all"])
    async def test_a_cleared_conversation_is_not_found_again(
        self, local: EmbeddingModel, way: str, how: str, tmp_path: Path
    ) -> None:
        store = SQLiteStore(tmp_path / "m.sqlite3")
        writer = ConversationMemory(store=store, embedder=local)
        writer.add_turn("trip", "I moved to Lisbon last spring", "Nice!")
        writer.add_turn("pets", "My cat Turing sleeps all day", "Cats do.")
        writer.flush()
        # Cleared by a memory without an embedder: the copies go all the same.
        plain = ConversationMemory(store=store)
        if how == "clear":
            await run(plain, "clear", way, "trip")
        else:
            await run(plain, "clear_all", way)
        reader = ConversationMemory(store=store, embedder=local)
        found = reader.search_transcripts("which city does she live in now")
        assert "trip" not in {match.conversation_id for match in found}
        assert bool(found) is (how == "clear")
        for memory in (writer, plain, reader):
            memory.close()
        store.close()

    @pytest.mark.parametrize("way", MODES)
    async def test_an_expired_conversation_is_not_found(
        self, local: EmbeddingModel, way: str, tmp_path: Path
    ) -> None:
        store = SQLiteStore(tmp_path / "m.sqlite3")
        memory = ConversationMemory(store=store, embedder=local, conversation_ttl=1.0)
        memory.add_turn("trip", "I moved to Lisbon last spring", "Nice!")
        memory.flush()
        question = "which city does she live in now"
        assert [m.conversation_id for m in await run(memory, "search_transcripts", way, question)]
        await asyncio.sleep(1.3)
        assert memory.conversation_ids == []
        assert await run(memory, "search_transcripts", way, question) == []
        found = await run(memory, "search_transcripts", way, question, conversation_id="trip")
        assert found == []
        # Cleanup by a memory without an embedder reclaims the copies too.
        plain = ConversationMemory(store=store, conversation_ttl=1.0)
        await run(plain, "cleanup_expired_conversations", way)
        leftover = [n for n in store.namespaces() if "transcripts" in n]
        assert all(store.load(n) == [] for n in leftover)
        # A new turn starts the conversation afresh, and it is found again.
        memory.add_turn("trip", "We bought a flat in Porto", "Congratulations!")
        memory.flush()
        [match] = memory.search_transcripts("where did they buy a home", limit=1)
        assert (match.conversation_id, match.turn_id) == ("trip", 0)
        for owner in (memory, plain):
            owner.close()
        store.close()

    def test_without_an_embedder_names_it(self) -> None:
        for owner in (ConversationMemory(), MemoryManager()):
            with pytest.raises(ValueError, match="embedder"):
                owner.search_transcripts("city")


class TestReadOnlyStores:
    """A command that reads never writes: searching a read-only store with an embedder."""

    def test_search_leaves_the_file_as_it_was(
        self, local: EmbeddingModel, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.sqlite3"
        writer = SQLiteStore(path)
        try:
            # Written without an embedder: no record has a vector yet.
            LongTermMemory(writer).remember("coffee", COFFEE, scope="user", scope_id="ada")
        finally:
            writer.close()
        before = path.read_bytes()
        reader = SQLiteStore(path, read_only=True)
        try:
            memory = LongTermMemory(reader, embedder=local)
            for wanted in ("hybrid", "semantic", "keyword"):
                memory.search(QUESTION, user_id="ada", mode=wanted)
            hits = memory.search("coffee", user_id="ada")
            assert [fact.key for fact in hits] == ["coffee"]
            memory.flush()
        finally:
            reader.close()
        assert path.read_bytes() == before

    def test_knowledge_for_leaves_the_file_as_it_was(
        self, local: EmbeddingModel, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        model = SummaryModel("text", ["Ada drinks her coffee black, with no sugar."])
        strategy = SummarizerStrategy(
            interaction_threshold_qty=3,
            interaction_keep=1,
            cod_max_loops=1,
            knowledge_base=KnowledgeBases(collection_id="kb", top_k=1),
            model=model.model,
        )
        path = tmp_path / "m.sqlite3"
        writer = SQLiteStore(path)
        try:
            # Summaries folded without an embedder: no chunk has a vector yet.
            memory = ConversationMemory(long_term=strategy, store=writer)
            for i in range(4):
                memory.add_turn("c", f"point {i}", f"noted {i}")
            assert memory.get_summary("c") is not None
            memory.close()
        finally:
            writer.close()
        before = path.read_bytes()
        reader = SQLiteStore(path, read_only=True)
        try:
            memory = ConversationMemory(long_term=strategy, store=reader, embedder=local)
            found = memory.knowledge_for("c", "coffee sugar")
            assert found is not None
            assert "Ada drinks her coffee black" in found
            memory.close()
        finally:
            reader.close()
        assert path.read_bytes() == before


class TestTextsAModelCannotRead:
    """A ``str`` may hold a lone surrogate and every store keeps it; no tokenizer or provider
    accepts one. What is sent to the model is made valid UTF-8, the stored text unchanged."""

    def test_a_record_with_a_lone_surrogate_is_embedded_with_the_rest(self) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder="local")
        memory.remember("odd", "a\ud800b coffee")
        memory.remember("plain", "black coffee, no sugar")
        memory.flush()

        found = {str(f) for f in memory.search("coffee", mode="semantic", limit=5)}

        assert found == {"odd = a\ud800b coffee", "plain = black coffee, no sugar"}
        assert memory.reembed() == 0  # both have their vector: nothing left to embed
        assert [f.value for f in memory.recall("odd")] == ["a\ud800b coffee"]

    async def test_a_query_with_a_lone_surrogate_is_answered(self) -> None:
        memory = LongTermMemory(InMemoryStore(), embedder="local")
        await memory.async_remember("drink", "Ada drinks her coffee black")
        await memory.async_flush()

        found = await memory.async_search("coffee \udfff", mode="hybrid")

        assert [f.key for f in found] == ["drink"]
