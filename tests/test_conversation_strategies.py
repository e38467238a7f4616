"""Memory strategies at work under ConversationMemory and MemoryManager, on both paths.

Short-term strategies choose what each read of the history sends; a long-term strategy's
triggers, checked after every turn, fold the oldest interactions into a chain-of-density
summary (summarizer) or erase them (neuralyzer). Models are pydantic-ai's offline
``FunctionModel``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from memlane import ConversationMemory, MemoryManager, SQLiteStore, _backend
from memlane.strategies import (
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    Strategy,
    SummarizerStrategy,
    ToolResultClearing,
)

SHORT_JSON = {
    "memory_strategy_id": "max_tokens",
    "memory_max_tokens": 8000,
    "conditions": ["message.role != 'tool'"],
}
LONG_JSON = {
    "long_term_memory_id": "summarizer",
    "interaction_threshold_qty": 15,
    "interaction_threshold_tokens": 15000,
    "cod_max_loops": 3,
    "interaction_keep": 2,
    "instructions": "Focus on decisions made and action items.",
    "knowledge_base": {"collection_id": "session-memory", "search_mode": "always", "top_k": 3},
}


class Densifier:
    """A chain-of-density model: each call answers a denser summary; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompts: list[str] = []
        self.instructions = ""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        self.prompts.append(" ".join(str(getattr(p, "content", "")) for p in request.parts))
        self.instructions = str(request.instructions)
        step = {"missing_entities": [f"entity {self.calls}"], "summary": f"summary v{self.calls}"}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, step)])


def tool_turn(i: int, *, failed: bool = False, input_tokens: int = 0) -> list[ModelMessage]:
    """A turn with a tool call and its return (or a retry when ``failed``)."""
    back: Any = (
        ToolReturnPart(
            tool_name="search", content="try again", tool_call_id=f"t{i}", outcome="retried"
        )
        if failed
        else ToolReturnPart(
            tool_name="search",
            content=f"result {i}: " + "a long page of text " * 40,
            tool_call_id=f"t{i}",
        )
    )
    return [
        ModelRequest(parts=[UserPromptPart(content=f"question {i}")]),
        ModelResponse(parts=[ToolCallPart("search", {"q": i}, tool_call_id=f"t{i}")]),
        ModelRequest(parts=[back]),
        ModelResponse(
            parts=[TextPart(content=f"answer {i}")],
            usage=RequestUsage(input_tokens=input_tokens),
        ),
    ]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path) -> Any:
    return None if request.param == "memory" else SQLiteStore(tmp_path / "s.sqlite3")


class TestTheIssuesJson:
    """Both JSON examples load and work on a conversation."""

    def test_both_examples(self, store: Any) -> None:
        densifier = Densifier()
        long_term = Strategy.from_config(LONG_JSON)
        assert isinstance(long_term, SummarizerStrategy)
        long_term = long_term.model_copy(update={"model": FunctionModel(densifier)})
        memory = ConversationMemory(short_term=SHORT_JSON, long_term=long_term, store=store)
        for i in range(15):
            memory.add_turn("c", f"q{i}", f"a{i}", tool_turn(i))
        # The 15th interaction fired the quantity trigger: 13 folded, 2 kept.
        assert [t.turn_id for t in memory.get_turns("c")] == [13, 14]
        assert memory.get_summary("c") == "summary v3"
        assert densifier.calls == 3  # cod_max_loops
        assert "Focus on decisions made and action items." in densifier.instructions
        history = memory.get_message_history("c")
        parts = [p for m in history for p in m.parts]
        assert not any(isinstance(p, ToolCallPart | ToolReturnPart) for p in parts)
        assert [t.turn_id for t in memory.get_transcript("c")] == list(range(15))

    def test_json_strings_too(self, store: Any) -> None:
        import json

        memory = ConversationMemory(
            short_term=json.dumps(SHORT_JSON),
            long_term=json.dumps({"long_term_memory_id": "neuralyzer", "interaction_keep": 1}),
            store=store,
        )
        assert isinstance(memory.short_term[0], MemoryMaxTokensStrategy)
        assert isinstance(memory.long_term_strategy, NeuralyzerStrategy)


class TestShortTerm:
    """Short-term strategies decide what each read sends; pairs stay whole."""

    def test_tool_results_cleared_then_budgeted(self, store: Any) -> None:
        memory = ConversationMemory(
            short_term=[ToolResultClearing(keep_last=1), MemoryMaxTokensStrategy()],
            store=store,
        )
        for i in range(4):
            memory.add_turn("c", f"q{i}", f"a{i}", tool_turn(i))
        returns = [
            p
            for m in memory.get_message_history("c")
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        assert [str(r.content).startswith("result") for r in returns] == [
            False,
            False,
            False,
            True,
        ]
        assert memory.get_history_tokens("c") > 0

    def test_minus_one_sends_nothing_but_the_summary(self, store: Any) -> None:
        memory = ConversationMemory(
            short_term=MemoryMaxTokensStrategy(memory_max_tokens=-1), store=store
        )
        memory.add_turn("c", "q", "a")
        assert memory.get_message_history("c") == []
        assert memory.get_history_tokens("c") == 0
        assert len(memory.get_turns("c")) == 1


class TestLongTermTriggers:
    """Each trigger folds the interactions beyond interaction_keep, once it fires."""

    def test_neuralyzer_erases_and_keeps_the_transcript(self, store: Any) -> None:
        memory = ConversationMemory(
            long_term=NeuralyzerStrategy(interaction_threshold_qty=3, interaction_keep=1),
            store=store,
        )
        for i in range(5):
            memory.add_turn("c", f"q{i}", f"a{i}")
        assert [t.turn_id for t in memory.get_turns("c")] == [4]
        assert memory.get_summary("c") is None
        assert [t.turn_id for t in memory.get_transcript("c")] == [0, 1, 2, 3, 4]
        if store is not None:  # another host reads the same conversation
            other = ConversationMemory(store=store, long_term=memory.long_term_strategy)
            assert [t.turn_id for t in other.get_turns("c")] == [4]

    def test_reported_input_tokens(self, store: Any) -> None:
        memory = ConversationMemory(
            long_term=NeuralyzerStrategy(input_tokens_threshold=1000, interaction_keep=0),
            store=store,
        )
        memory.add_turn("c", "q0", "a0", tool_turn(0, input_tokens=500))
        assert len(memory.get_turns("c")) == 1
        memory.add_turn("c", "q1", "a1", tool_turn(1, input_tokens=1500))
        assert memory.get_turns("c") == []

    def test_a_tool_error(self, store: Any) -> None:
        memory = ConversationMemory(
            long_term=NeuralyzerStrategy(on_tools_error_threshold=["search"], interaction_keep=1),
            store=store,
        )
        memory.add_turn("c", "q0", "a0", tool_turn(0))
        memory.add_turn("c", "q1", "a1", tool_turn(1))
        assert len(memory.get_turns("c")) == 2
        memory.add_turn("c", "q2", "a2", tool_turn(2, failed=True))
        assert [t.turn_id for t in memory.get_turns("c")] == [2]

    async def test_summarizer_async(self, store: Any) -> None:
        densifier = Densifier()
        memory = ConversationMemory(
            long_term=SummarizerStrategy(
                interaction_threshold_qty=3,
                interaction_keep=1,
                cod_max_loops=2,
                model=FunctionModel(densifier),
            ),
            store=store,
        )
        for i in range(3):
            await memory.async_add_turn("c", f"q{i}", f"a{i}")
        assert await memory.async_get_summary("c") == "summary v2"
        assert densifier.calls == 2

    def test_without_a_model_the_memorys_summarizer(self, store: Any) -> None:
        memory = ConversationMemory(
            long_term=SummarizerStrategy(interaction_threshold_qty=2, interaction_keep=0),
            summarizer=lambda turns: f"plain summary of {len(turns)}",
            store=store,
        )
        memory.add_turn("c", "q0", "a0")
        memory.add_turn("c", "q1", "a1")
        assert memory.get_summary("c") == "plain summary of 2"
        with pytest.raises(ValueError, match="model"):
            ConversationMemory(long_term=SummarizerStrategy())


class Topics:
    """A chain-of-density model answering one of a few summaries in turn, in one loop."""

    SUMMARIES = (
        "Ada chose the blue plan; invoices are due Friday.",
        "The Lisbon trip is booked for May; vegetarian meals.",
        "Bob prefers green tea in the morning.",
    )

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        summary = self.SUMMARIES[self.calls % len(self.SUMMARIES)]
        self.calls += 1
        step = {"missing_entities": [], "summary": summary}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, step)])


def with_knowledge(search_mode: str = "always", top_k: int = 1) -> SummarizerStrategy:
    strategy = Strategy.from_config(
        {
            "long_term_memory_id": "summarizer",
            "interaction_threshold_qty": 3,
            "cod_max_loops": 1,
            "interaction_keep": 1,
            "knowledge_base": {
                "collection_id": "session-memory",
                "search_mode": search_mode,
                "top_k": top_k,
            },
        }
    )
    assert isinstance(strategy, SummarizerStrategy)
    return strategy.model_copy(update={"model": FunctionModel(Topics())})


class TestKnowledgeBase:
    """Summaries go to the knowledge base; the most relevant come back for a new prompt."""

    async def test_relevant_summaries_for_a_prompt(self, store: Any) -> None:
        memory = ConversationMemory(long_term=with_knowledge(top_k=1), store=store)
        for i in range(7):
            memory.add_turn("c", f"point {i}", f"noted {i}")
        assert memory.get_summary("c") is not None
        text = memory.knowledge_for("c", "when are the invoices due?")
        assert text == "Relevant earlier summaries:\n- " + Topics.SUMMARIES[0]
        lisbon = await memory.async_knowledge_for("c", "Which month is the LISBON trip?")
        assert lisbon is not None
        assert Topics.SUMMARIES[1] in lisbon
        assert memory.knowledge_for("c", "zzz qqq") is None
        if store is not None:  # another conversation of the collection, another host
            other = ConversationMemory(long_term=with_knowledge(), store=store)
            found = other.knowledge_for("d", "invoices")
            assert found is not None
            assert Topics.SUMMARIES[0] in found

    def test_never_searched_and_without_a_base(self, store: Any) -> None:
        memory = ConversationMemory(long_term=with_knowledge("never"), store=store)
        for i in range(4):
            memory.add_turn("c", f"point {i}", f"noted {i}")
        assert memory.knowledge_for("c", "invoices") is None
        assert ConversationMemory(store=store).knowledge_for("c", "invoices") is None
        with pytest.raises(TypeError, match="prompt"):
            memory.knowledge_for("c", 5)  # type: ignore[arg-type]  # the point of the test


class TestManagerAndConfig:
    """The manager takes the same arguments; the environment takes their JSON."""

    def test_manager(self, impl: _backend.Implementation) -> None:
        manager = MemoryManager(long_term=NeuralyzerStrategy(interaction_threshold_qty=2))
        assert manager.long_term is None
        assert isinstance(manager.conversation.long_term_strategy, NeuralyzerStrategy)
        both = MemoryManager(
            long_term=True, long_term_strategy={"long_term_memory_id": "neuralyzer"}
        )
        assert both.long_term is not None
        assert isinstance(both.conversation.long_term_strategy, NeuralyzerStrategy)

    def test_environment(
        self, impl: _backend.Implementation, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import json

        monkeypatch.setenv("MEMLANE_SHORT_TERM_STRATEGY", json.dumps(SHORT_JSON))
        monkeypatch.setenv(
            "MEMLANE_LONG_TERM_STRATEGY",
            json.dumps({"long_term_memory_id": "neuralyzer", "interaction_threshold_qty": 3}),
        )
        manager = MemoryManager.from_config()
        assert manager.conversation.short_term == [Strategy.from_config(SHORT_JSON)]
        for i in range(3):
            manager.add_turn("c", f"q{i}", f"a{i}")
        assert manager.get_turns("c") == []
        monkeypatch.setenv("MEMLANE_LONG_TERM_STRATEGY", '{"long_term_memory_id": "nope"}')
        with pytest.raises(ValueError, match="MEMLANE_LONG_TERM_STRATEGY"):
            MemoryManager.from_config()


class TestBadStrategies:
    """A bad strategy is refused when the memory is built, naming what is wrong."""

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"short_term": 5}, TypeError, "short_term"),
            ({"short_term": {"memory_strategy_id": "max_tokens", "bogus": 1}}, ValueError, "bogus"),
            ({"long_term": 5}, TypeError, "long_term"),
            ({"long_term": {"long_term_memory_id": "forget"}}, ValueError, "forget"),
            (
                {"short_term": {"memory_strategy_id": "max_tokens", "conditions": ["nope.x"]}},
                ValueError,
                "nope",
            ),
        ],
    )
    def test_refused(
        self,
        impl: _backend.Implementation,
        kwargs: dict[str, Any],
        error: type[Exception],
        match: str,
    ) -> None:
        with pytest.raises(error, match=match):
            ConversationMemory(**kwargs)
