"""Budgets that count what the model is sent, on both paths, with pydantic-ai's offline models.

A MemoryAgent (and memory_history) keeps every request — instructions, working-memory and
long-term context, tool definitions, history and the run's own messages — within the budget,
dropping the oldest turns whole; a calibration learnt from reported usage scales the counts
per model; the agent's own short-term and long-term strategies shape and fold its history.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from memlane import (
    InMemoryStore,
    MemoryManager,
    SQLiteStore,
    TokenEstimator,
    _backend,
)
from memlane.agents import (
    Calibration,
    MemoryAgent,
    RequestBudget,
    async_store_run,
    count_request,
    memory_history,
)
from memlane.longterm import LongTermMemory
from memlane.messages import message_texts
from memlane.strategies import (
    KnowledgeBases,
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    SummarizerStrategy,
    ToolResultClearing,
)

INSTRUCTIONS = "You are a careful research assistant. Cite every source you use. " * 8
TOOL_DOC = "Searches the library catalogue for books, articles and reports on a topic. " * 4


def request_tokens(messages: list[ModelMessage], info: AgentInfo) -> int:
    """What a request carries, counted independently of memlane's budget code."""
    estimator = TokenEstimator()
    texts = [*message_texts(messages), info.instructions or ""]
    for tool in [*info.function_tools, *info.output_tools]:
        texts += [tool.name, tool.description or ""]
        texts.append(json.dumps(tool.parameters_json_schema, separators=(",", ":")))
    return sum(estimator.estimate_many([t for t in texts if t]))


def last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    return ""


def pairing_errors(messages: list[ModelMessage]) -> list[str]:
    calls: set[str] = set()
    returns: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                returns.add(part.tool_call_id)
    return sorted(calls ^ returns)


class Meter:
    """A model that calls ``search`` once per prompt, records what each request carried, and
    reports ``factor`` times memlane's count as its input tokens (from provider ``acme``)."""

    def __init__(self, factor: float = 1.0, *, provider: str | None = "acme") -> None:
        self.factor = factor
        self.provider = provider
        self.counted: list[int] = []
        self.requests: list[list[ModelMessage]] = []
        self.instructions: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tokens = request_tokens(messages, info)
        self.counted.append(tokens)
        self.requests.append(list(messages))
        self.instructions.append(info.instructions or "")
        prompt = last_prompt(messages)
        answered = isinstance(messages[-1], ModelRequest) and any(
            isinstance(p, ToolReturnPart) for p in messages[-1].parts
        )
        usage = RequestUsage(input_tokens=round(tokens * self.factor), output_tokens=5)
        if info.function_tools and not answered:
            call = ToolCallPart("search", {"topic": prompt}, tool_call_id=f"c{len(self.counted)}")
            return ModelResponse(parts=[call], usage=usage, provider_name=self.provider)
        return ModelResponse(
            parts=[TextPart(f"about {prompt}: " + "findings " * 15)],
            usage=usage,
            provider_name=self.provider,
        )

    @property
    def reported(self) -> list[int]:
        return [round(t * self.factor) for t in self.counted]


def research_agent(meter: Meter, memory: MemoryManager, **kwargs: Any) -> MemoryAgent[str]:
    inner = Agent(FunctionModel(meter), instructions=INSTRUCTIONS)

    @inner.tool_plain(description=TOOL_DOC)
    def search(topic: str, year_from: int = 1900, year_to: int = 2030) -> str:
        return f"{topic}: " + "a catalogue entry with a long abstract " * 6

    return MemoryAgent(inner, memory=memory, **kwargs)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path) -> Any:
    if request.param == "memory":
        return InMemoryStore()
    return SQLiteStore(tmp_path / "budget.sqlite3")


class TestTheWholeRequestFits:
    """Every request — instructions, tools, history, the run's messages — fits the budget."""

    def test_large_instructions_and_tools(self, store: Any) -> None:
        memory = MemoryManager(store=store, max_conversation_tokens=900)
        memory.set_fact("project", "a survey of " + "tidal energy " * 10)
        meter = Meter()
        agent = research_agent(meter, memory, calibrate=False)
        assert agent.max_tokens == 900
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 10):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert max(meter.counted) <= 900
        # The memory's own history alone fits 900 tokens, and was cut further to make room.
        assert memory.get_history_tokens(cid) <= 900
        last = meter.requests[-2]  # the last run's first request
        sent_turns = sum(isinstance(p, UserPromptPart) for m in last for p in m.parts) - 1
        assert 0 < sent_turns < len(memory.get_turns(cid))
        assert "tidal energy" in meter.instructions[-1]  # working memory counted and sent
        for request in meter.requests:
            assert pairing_errors(request) == []

    async def test_async(self, store: Any) -> None:
        memory = MemoryManager(store=store, max_conversation_tokens=700)
        meter = Meter()
        agent = research_agent(meter, memory, calibrate=False)
        cid = (await agent.run("topic 0")).conversation_id
        for i in range(1, 7):
            await agent.run(f"topic {i}", conversation_id=cid)
        assert max(meter.counted) <= 700
        assert len(memory.get_turns(cid)) == 7
        assert all(pairing_errors(r) == [] for r in meter.requests)

    async def test_streamed_runs(self, impl: _backend.Implementation) -> None:
        counted: list[int] = []

        async def streamer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            counted.append(request_tokens(messages, info))
            yield "a streamed answer " * 20

        memory = MemoryManager(max_conversation_tokens=500)
        inner = Agent(FunctionModel(Meter(), stream_function=streamer), instructions=INSTRUCTIONS)
        agent = MemoryAgent(
            inner,
            memory=memory,
            calibrate=False,
            long_term=NeuralyzerStrategy(interaction_threshold_qty=4, interaction_keep=1),
        )
        cid: str | None = None
        for i in range(4):
            async with agent.run_stream(f"topic {i}", conversation_id=cid) as streamed:
                await streamed.get_output()
            cid = streamed.conversation_id
        assert cid is not None
        assert max(counted) <= 500
        assert [t.turn_id for t in memory.get_turns(cid)] == [3]  # the 4th interaction fired

    def test_count_request_is_what_the_model_gets(self, impl: _backend.Implementation) -> None:
        seen: list[tuple[int, int]] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            mine = count_request(messages, info.model_request_parameters).total
            seen.append((mine, request_tokens(messages, info)))
            return ModelResponse(parts=[TextPart("ok")])

        inner = Agent(FunctionModel(model), instructions=INSTRUCTIONS)

        @inner.tool_plain(description=TOOL_DOC)
        def search(topic: str) -> str:
            return topic

        agent = MemoryAgent(inner, memory=MemoryManager(), calibrate=False)
        cid = agent.run_sync("one").conversation_id
        agent.run_sync("two", conversation_id=cid)
        assert seen
        assert all(mine == theirs for mine, theirs in seen)

    def test_the_summary_leads(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager(
            max_conversation_tokens=800, summarize_threshold=600, summarizer=lambda t: "SUMMARY"
        )
        meter = Meter()
        agent = research_agent(meter, memory, calibrate=False)
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 8):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert memory.get_summary(cid) == "SUMMARY"
        agent.run_sync("topic 8", conversation_id=cid)
        first = meter.requests[-2][0]
        assert isinstance(first.parts[0], SystemPromptPart)
        assert "SUMMARY" in str(first.parts[0].content)
        assert max(meter.counted) <= 800

    def test_no_room_for_history(
        self, impl: _backend.Implementation, caplog: pytest.LogCaptureFixture
    ) -> None:
        memory = MemoryManager(max_conversation_tokens=400)
        meter = Meter()
        agent = research_agent(meter, memory, calibrate=False)
        cid = agent.run_sync("topic 0").conversation_id
        with caplog.at_level(logging.WARNING, logger="memlane"):
            agent.run_sync("topic 1", conversation_id=cid, instructions="extra " * 400)
        assert "no history sent" in caplog.text
        assert last_prompt(meter.requests[-2]) == "topic 1"
        assert sum(isinstance(p, UserPromptPart) for m in meter.requests[-2] for p in m.parts) == 1

    def test_a_max_tokens_strategy_sets_the_budget(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager(max_conversation_tokens=100_000)
        meter = Meter()
        strategy = MemoryMaxTokensStrategy(memory_max_tokens=800)
        agent = research_agent(meter, memory, calibrate=False, short_term=strategy)
        assert agent.max_tokens == 800
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 6):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert max(meter.counted) <= 800

    async def test_memory_history_too(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager(max_conversation_tokens=100_000)
        meter = Meter()
        agent = Agent(FunctionModel(meter), instructions=INSTRUCTIONS)

        @agent.tool_plain(description=TOOL_DOC)
        def search(topic: str) -> str:
            return f"{topic}: " + "a catalogue entry with a long abstract " * 6

        for i in range(8):
            capability = memory_history(memory, "own", max_tokens=700, calibrate=False)
            result = await agent.run(f"topic {i}", capabilities=[capability])
            await async_store_run(memory, "own", result)
        assert max(meter.counted) <= 700
        assert len(memory.get_turns("own")) == 8
        assert all(pairing_errors(r) == [] for r in meter.requests)


class TestCalibration:
    """A model counting 30% more than o200k stays inside its budget after a run or two."""

    @pytest.mark.parametrize("calibrate", [False, True])
    def test_a_model_counting_more(self, impl: _backend.Implementation, calibrate: bool) -> None:
        meter = Meter(1.3)
        agent = research_agent(
            meter, MemoryManager(max_conversation_tokens=600), calibrate=calibrate
        )
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 8):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert max(meter.counted) <= 600
        # Uncalibrated, the model is sent more than the budget by its own count.
        assert (max(meter.reported) <= 600) is calibrate

    def test_converges_and_persists(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "calibrated.sqlite3"
        meter = Meter(1.3)
        memory = MemoryManager(store=SQLiteStore(path), max_conversation_tokens=600)
        agent = research_agent(meter, memory)
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 8):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        name = FunctionModel(meter).model_name
        assert agent.calibration is not None
        assert agent.calibration.ratio(name) == pytest.approx(1.3, abs=0.01)
        assert max(meter.reported) <= 600
        memory.store.close()

        # A new agent on the same store starts calibrated: its first request fits.
        again = Meter(1.3)
        other = MemoryManager(store=SQLiteStore(path), max_conversation_tokens=600)
        fresh = research_agent(again, other)
        assert fresh.calibration is not None
        assert fresh.calibration.ratio(name) == pytest.approx(1.3, abs=0.01)
        fresh.run_sync("topic 9", conversation_id=cid)
        assert again.counted[0] > 600 / 1.3 - 100  # a full history was sent...
        assert max(again.reported) <= 600  # ...and it fit the model's count
        other.store.close()

    def test_offline_estimates_are_not_learnt(self, impl: _backend.Implementation) -> None:
        meter = Meter(3.0, provider=None)  # pydantic-ai's FunctionModel: no provider
        memory = MemoryManager(max_conversation_tokens=2000)
        agent = research_agent(meter, memory)
        cid = agent.run_sync("topic 0").conversation_id
        agent.run_sync("topic 1", conversation_id=cid)
        assert agent.calibration is not None
        assert agent.calibration.ratio(FunctionModel(meter).model_name) == 1.0

    async def test_memory_history_learns_too(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager(max_conversation_tokens=900)
        meter = Meter(1.3)
        agent = Agent(FunctionModel(meter), instructions=INSTRUCTIONS)
        for i in range(4):
            result = await agent.run(f"topic {i}", capabilities=[memory_history(memory, "own")])
            await async_store_run(memory, "own", result)
        ratio = await Calibration(memory.store).async_ratio(FunctionModel(meter).model_name)
        assert ratio == pytest.approx(1.3, abs=0.01)

    def test_smoothing_bounds_and_hosts(self, store: Any) -> None:
        one, two = Calibration(store), Calibration(store)
        assert one.ratio("m") == 1.0
        assert one.observe("m", counted=100, reported=130) == pytest.approx(1.3)
        # Another host sees it, and its sample merges into the same entry.
        assert two.ratio("m") == pytest.approx(1.3)
        merged = two.observe("m", counted=100, reported=150)
        assert 1.3 < merged < 1.5
        assert one.observe("m", counted=100, reported=150) > merged  # read fresh, then merged
        assert store.load_by_key("calibration", "m").content["samples"] == 3
        assert one.observe("wild", counted=10, reported=10_000) == 3.0  # clamped
        assert one.scale("wild", 10) == 30

    def test_hosts_observing_at_once(self, store: Any) -> None:
        hosts = [Calibration(store), Calibration(store)]

        def observe(calibration: Calibration) -> None:
            for _ in range(20):
                calibration.observe("m", counted=100, reported=120)

        threads = [threading.Thread(target=observe, args=(host,)) for host in hosts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        entry = store.load_by_key("calibration", "m")
        assert entry.content["samples"] == 40  # no sample lost to a concurrent update
        assert entry.content["ratio"] == pytest.approx(1.2)

    def test_bad_arguments(self, impl: _backend.Implementation) -> None:
        calibration = Calibration(InMemoryStore())
        with pytest.raises(ValueError, match="counted"):
            calibration.observe("m", counted=0, reported=5)
        with pytest.raises(ValueError, match="reported"):
            calibration.observe("m", counted=5, reported=True)
        with pytest.raises(ValueError, match="model_name"):
            calibration.observe("", counted=5, reported=5)
        with pytest.raises(ValueError, match="smoothing"):
            Calibration(InMemoryStore(), smoothing=0)
        with pytest.raises(ValueError, match="bounds"):
            Calibration(InMemoryStore(), bounds=(1.5, 3.0))


class TestShortTermOnTheAgent:
    """The agent's short-term strategies shape what it sends; the memory keeps everything."""

    def test_conditions_as_json(self, store: Any) -> None:
        memory = MemoryManager(store=store, max_conversation_tokens=100_000)
        meter = Meter()
        short = {"memory_strategy_id": "max_tokens", "conditions": ["message.role != 'tool'"]}
        agent = research_agent(meter, memory, calibrate=False, short_term=json.dumps(short))
        assert isinstance(agent.short_term[0], MemoryMaxTokensStrategy)
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 4):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        history = meter.requests[-2][:-1]  # the last run's first request, its prompt aside
        assert sum(isinstance(p, UserPromptPart) for m in history for p in m.parts) == 3
        assert not any(
            isinstance(p, ToolCallPart | ToolReturnPart) for m in history for p in m.parts
        )
        stored = [p for t in memory.get_turns(cid) for m in t.raw_messages for p in m.parts]
        assert sum(isinstance(p, ToolReturnPart) for p in stored) == 4

    def test_tool_results_cleared(self, store: Any) -> None:
        memory = MemoryManager(store=store, max_conversation_tokens=100_000)
        meter = Meter()
        agent = research_agent(
            meter, memory, calibrate=False, short_term=[ToolResultClearing(keep_last=1)]
        )
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 4):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        returns = [
            str(p.content)
            for m in meter.requests[-2]
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        assert len(returns) == 3
        assert sum("catalogue entry" in r for r in returns) == 1  # the newest kept
        assert all(pairing_errors(r) == [] for r in meter.requests)


class Researcher:
    """Answers agent runs with a tool loop and chain-of-density steps with a summary."""

    def __init__(self, *, fail_tool: bool = False, input_tokens: int = 0) -> None:
        self.summaries = 0
        self.fail_tool = fail_tool
        self.input_tokens = input_tokens

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        usage = RequestUsage(input_tokens=self.input_tokens)
        if info.output_tools:  # a chain-of-density step
            self.summaries += 1
            step = {"missing_entities": [], "summary": f"digest {self.summaries}"}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, step)])
        last = messages[-1]
        if info.function_tools and not any(
            isinstance(p, ToolReturnPart) or p.part_kind == "retry-prompt" for p in last.parts
        ):
            return ModelResponse(parts=[ToolCallPart("search", {"topic": "x"})], usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)


def tool_agent(model: Researcher, memory: MemoryManager, **kwargs: Any) -> MemoryAgent[str]:
    inner = Agent(FunctionModel(model))
    fail = model.fail_tool

    @inner.tool_plain(retries=5)
    def search(topic: str) -> str:
        if fail:
            raise ModelRetry("the catalogue is down")
        return "found"

    return MemoryAgent(inner, memory=memory, calibrate=False, **kwargs)


class TestLongTermOnTheAgent:
    """The agent's long-term strategy fires on what its runs report and folds through memory."""

    def test_neuralyzer_on_input_tokens(self, store: Any) -> None:
        memory = MemoryManager(store=store)
        model = Researcher(input_tokens=50)
        strategy = NeuralyzerStrategy(input_tokens_threshold=100, interaction_keep=1)
        agent = tool_agent(model, memory, long_term=strategy)
        assert agent.long_term is None
        assert agent.long_term_strategy == strategy
        cid = agent.run_sync("look").conversation_id
        for _ in range(2):
            agent.run_sync("look", conversation_id=cid)
        assert len(memory.get_turns(cid)) == 3  # 50 input tokens never exceed 100
        model.input_tokens = 500
        agent.run_sync("look", conversation_id=cid)
        assert [t.turn_id for t in memory.get_turns(cid)] == [3]
        assert memory.get_summary(cid) is None
        assert len(memory.get_transcript(cid)) == 4

    async def test_summarizer_on_a_tool_error_with_the_agents_model(self, store: Any) -> None:
        memory = MemoryManager(store=store)
        model = Researcher()
        strategy = {
            "long_term_memory_id": "summarizer",
            "interaction_threshold_qty": 0,
            "interaction_threshold_tokens": 0,
            "on_tools_error_threshold": ["search"],
            "cod_max_loops": 2,
            "interaction_keep": 1,
        }
        agent = tool_agent(model, memory, long_term_strategy=strategy)
        assert isinstance(agent.long_term_strategy, SummarizerStrategy)
        cid = (await agent.run("look")).conversation_id
        await agent.run("look", conversation_id=cid)
        assert memory.get_summary(cid) is None  # the tool worked: nothing fired
        model.fail_tool = True
        failing = tool_agent(model, memory, long_term_strategy=strategy)
        await failing.run("look", conversation_id=cid)
        assert [t.turn_id for t in memory.get_turns(cid)] == [2]
        assert memory.get_summary(cid) == f"digest {model.summaries}"
        assert 1 <= model.summaries <= 2  # cod_max_loops

    def test_long_term_memory_and_a_strategy_together(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager(long_term=True)
        agent = tool_agent(
            Researcher(input_tokens=500),
            memory,
            long_term=True,
            long_term_strategy=NeuralyzerStrategy(input_tokens_threshold=100),
        )
        assert isinstance(agent.long_term, LongTermMemory)
        cid = agent.run_sync("look").conversation_id
        agent.run_sync("look", conversation_id=cid)
        assert memory.get_turns(cid) == []

    def test_knowledge_reaches_the_instructions(self, impl: _backend.Implementation) -> None:
        strategy = SummarizerStrategy(
            interaction_threshold_qty=3,
            cod_max_loops=1,
            interaction_keep=1,
            knowledge_base=KnowledgeBases(collection_id="kb", search_mode="always", top_k=2),
            model=FunctionModel(Researcher()),
        )
        memory = MemoryManager(long_term=strategy)
        meter = Meter()
        agent = research_agent(meter, memory, calibrate=False)
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 4):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert memory.get_summary(cid) is not None
        agent.run_sync("what was the digest?", conversation_id=cid)
        assert "Relevant earlier summaries:" in meter.instructions[-1]
        assert "digest" in meter.instructions[-1]

    def test_the_agents_own_strategy_fills_its_knowledge_base(
        self, impl: _backend.Implementation
    ) -> None:
        from memlane.conversation.knowledge import knowledge_namespace

        strategy = SummarizerStrategy(
            interaction_threshold_qty=3,
            cod_max_loops=1,
            interaction_keep=1,
            knowledge_base=KnowledgeBases(collection_id="agent-kb", search_mode="always"),
            model=FunctionModel(Researcher()),
        )
        memory = MemoryManager()  # the memory has no strategy: the agent's folds
        agent = research_agent(Meter(), memory, calibrate=False, long_term=strategy)
        cid = agent.run_sync("topic 0").conversation_id
        for i in range(1, 4):
            agent.run_sync(f"topic {i}", conversation_id=cid)
        assert memory.get_summary(cid) is not None
        chunks = memory.store.load(knowledge_namespace("agent-kb"))
        assert chunks
        assert all(c.content["conversation_id"] == cid for c in chunks)


class TestBadArguments:
    """Wrong arguments fail at construction, naming what they should be."""

    def test_agent(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager()
        model = FunctionModel(Meter())
        with pytest.raises(TypeError, match="calibrate"):
            MemoryAgent(model, memory=memory, calibrate="yes")  # type: ignore[call-overload]
        with pytest.raises(TypeError, match="short_term"):
            MemoryAgent(model, memory=memory, short_term=42)
        with pytest.raises(TypeError, match="long_term"):
            MemoryAgent(model, memory=memory, long_term="yes")
        with pytest.raises(TypeError, match="long_term or long_term_strategy"):
            MemoryAgent(
                model,
                memory=memory,
                long_term=NeuralyzerStrategy(),
                long_term_strategy=NeuralyzerStrategy(),
            )
        with pytest.raises(ValueError, match="interaction_keep"):
            MemoryAgent(
                model,
                memory=memory,
                long_term={"long_term_memory_id": "neuralyzer", "interaction_keep": "many"},
            )
        with pytest.raises(ValueError, match="needs a model"):
            MemoryAgent(Agent(), memory=memory, long_term=SummarizerStrategy())

    def test_budgets(self, impl: _backend.Implementation) -> None:
        memory = MemoryManager()
        with pytest.raises(ValueError, match="max_tokens"):
            memory_history(memory, "c", max_tokens=0)
        with pytest.raises(TypeError, match="max_tokens"):
            memory_history(memory, "c", max_tokens=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="calibrate"):
            memory_history(memory, "c", calibrate=None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="max_tokens"):
            RequestBudget(-1)
