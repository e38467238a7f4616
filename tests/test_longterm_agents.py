"""Long-term memory under agents, offline on pydantic-ai's FunctionModel: MemoryAgent's context,
tools and episodes, and the fact extractor, on the in-memory and SQLite stores and both
implementations, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from memlane import InMemoryStore, MemoryManager, SQLiteStore, _backend
from memlane.agents import MemoryAgent, MemoryRunResult
from memlane.longterm import (
    ExtractedFact,
    FactExtractor,
    FactType,
    LongTermMemory,
    RememberResult,
)
from memlane.stores import MemoryStore
from memlane.types import ConversationTurn

Call = tuple[str, dict[str, Any]]


@pytest.fixture(params=["memory", "sqlite"])
def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> Iterator[MemoryStore]:
    """The in-memory and SQLite stores, built by ``impl``."""
    made: MemoryStore = (
        InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "lt.sqlite3")
    )
    yield made
    made.close()


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    """Which family of methods a test drives."""
    return str(request.param)


class Scripted:
    """A FunctionModel answering each prompt with its scripted tool calls, then ``done``.

    It records the instructions of every request and the tool answers it was sent.
    """

    def __init__(self, script: dict[str, list[Call]] | None = None) -> None:
        self.script = script or {}
        self.instructions: list[str | None] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions)
        prompt = _last_prompt(messages)
        if prompt == "fail":
            raise RuntimeError("the model is down")
        calls = self.script.get(prompt, [])
        step = _steps_since_prompt(messages)
        if step < len(calls):
            name, args = calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args)])
        return ModelResponse(parts=[TextPart("done")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        self.instructions.append(info.instructions)
        if _last_prompt(messages) == "fail":
            raise RuntimeError("the model is down")
        yield "streamed"

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self, stream_function=self.stream)


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                assert isinstance(part.content, str)
                return part.content
    raise AssertionError("no user prompt")


def _steps_since_prompt(messages: list[ModelMessage]) -> int:
    steps = 0
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and any(
            isinstance(part, UserPromptPart) for part in message.parts
        ):
            return steps
        steps += isinstance(message, ModelResponse)
    return steps


async def run(
    agent: MemoryAgent[str], mode: str, prompt: str, conversation_id: str | None = None
) -> MemoryRunResult[str]:
    if mode == "sync":  # off the test's event loop, as blocking code runs
        return await asyncio.to_thread(run_sync, agent, prompt, conversation_id)
    return await agent.run(prompt, conversation_id=conversation_id)


def run_sync(
    agent: MemoryAgent[str], prompt: str, conversation_id: str | None
) -> MemoryRunResult[str]:
    """``agent.run_sync`` in a worker thread, closing the event loop it leaves there."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return agent.run_sync(prompt, conversation_id=conversation_id)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


REMEMBER = {
    "remember": [("remember", {"key": "timezone", "value": "Australia/Adelaide"})],
    "recall": [("recall", {"key": "timezone"})],
}


# ---------------------------------------------------------------------------- MemoryAgent


class TestLongTermContextReachesTheModel:
    """What long-term memory holds joins every run's instructions, read again for each run."""

    async def test_remembered_in_one_run_told_in_the_next(
        self, store: MemoryStore, mode: str
    ) -> None:
        memory = LongTermMemory(store)
        model = Scripted(REMEMBER)
        agent = MemoryAgent(model.model, memory=MemoryManager(), long_term=memory, user_id="u1")
        first = await run(agent, mode, "remember")
        assert "timezone" not in (model.instructions[0] or "")
        await run(agent, mode, "recall", first.conversation_id)
        told = model.instructions[-1]
        assert told is not None
        assert "- timezone = Australia/Adelaide" in told
        recalled = first.result.all_messages()
        assert "Remembered: timezone = Australia/Adelaide (created)" in str(recalled)

    async def test_the_recall_tool_answers_from_the_user_s_facts(
        self, store: MemoryStore, mode: str
    ) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(
            Scripted(REMEMBER).model, memory=MemoryManager(), long_term=memory, user_id="u1"
        )
        await run(agent, mode, "remember")
        result = await run(agent, mode, "recall")
        returns = [
            part.model_response_str()
            for message in result.new_messages()
            for part in message.parts
            if part.part_kind == "tool-return"
        ]
        assert returns == ["timezone = Australia/Adelaide"]

    def test_a_fact_remembered_between_runs_is_told(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        model = Scripted()
        agent = MemoryAgent(model.model, memory=MemoryManager(), long_term=memory)
        agent.run_sync("hi")
        assert model.instructions[-1] is None
        memory.remember("office", "Adelaide")
        agent.run_sync("hi")
        assert model.instructions[-1] == (
            "Long-term memory (read more with the recall tool, add with remember):\n"
            "Known facts:\n- office = Adelaide"
        )

    async def test_a_known_user_is_named_with_their_episodes(
        self, store: MemoryStore, mode: str
    ) -> None:
        memory = LongTermMemory(store)
        user = memory.identify_user("telegram", 42, display_name="Ann")
        memory.remember("color", "blue", scope="user", scope_id=user.id)
        memory.remember("office", "Adelaide")
        memory.remember("secret", "x", scope="user", scope_id="someone else")
        model = Scripted()
        agent = MemoryAgent(
            model.model,
            memory=MemoryManager(),
            long_term=memory,
            user_id=user.id,
            record_episodes=True,
        )
        await run(agent, mode, "hello")
        await run(agent, mode, "again")
        assert model.instructions[-1] == (
            "Long-term memory (read more with the recall tool, add with remember):\n"
            "User: Ann\nKnown facts:\n- color = blue\n- office = Adelaide\n"
            "Recent episodes:\n- agent_run: hello (succeeded)"
        )

    async def test_streamed_runs_are_told_too(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        await memory.async_remember("color", "blue", scope="user", scope_id="u1")
        model = Scripted()
        agent = MemoryAgent(model.model, memory=MemoryManager(), long_term=memory, user_id="u1")
        async with agent.run_stream("hi") as streamed:
            assert await streamed.get_output() == "streamed"
        assert "- color = blue" in (model.instructions[-1] or "")

    def test_run_instructions_and_toolsets_are_kept(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        memory.remember("office", "Adelaide")
        model = Scripted({"hi": [("triple", {"x": 2}), ("recall", {})]})

        def triple(x: int) -> int:
            return 3 * x

        agent = MemoryAgent(model.model, memory=MemoryManager(), long_term=memory)
        result = agent.run_sync(
            "hi", instructions="Be brief.", toolsets=[FunctionToolset([triple])]
        )
        told = model.instructions[-1] or ""
        assert told.startswith("Be brief.")
        assert "- office = Adelaide" in told
        returns = [
            part.model_response_str()
            for message in result.new_messages()
            for part in message.parts
            if part.part_kind == "tool-return"
        ]
        assert returns == ["6", "office = Adelaide"]

    def test_a_merged_user_is_told_the_surviving_user_s_facts(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        ada = memory.identify_user("telegram", 1, display_name="Ada")
        by_mail = memory.identify_user("email", "ada@example.com")
        memory.remember("city", "Adelaide", scope="user", scope_id=by_mail.id)
        memory.merge_users(by_mail.id, ada.id)
        model = Scripted()
        MemoryAgent(
            model.model, memory=MemoryManager(), long_term=memory, user_id=by_mail.id
        ).run_sync("hi")
        told = model.instructions[-1] or ""
        assert "User: Ada" in told
        assert "- city = Adelaide" in told

    def test_the_manager_s_own_long_term_memory(self) -> None:
        manager = MemoryManager(long_term=True)
        assert manager.long_term is not None
        agent = MemoryAgent(Scripted(REMEMBER).model, memory=manager, long_term=True, user_id="u1")
        assert agent.long_term is manager.long_term
        assert (agent.user_id, agent.record_episodes) == ("u1", False)
        agent.run_sync("remember")
        fact = manager.long_term.get_fact("timezone", user_id="u1")
        assert fact is not None
        assert fact.value == "Australia/Adelaide"

    def test_without_long_term_nothing_changes(self) -> None:
        model = Scripted()
        agent = MemoryAgent(model.model, memory=MemoryManager(long_term=True))
        result = agent.run_sync("hi")
        assert agent.long_term is None
        assert result.episode is None
        assert model.instructions == [None]


class TestSettingsAreChecked:
    """Bad long-term settings fail when the agent is made, naming the problem."""

    def test_true_needs_a_manager_with_long_term_memory(self) -> None:
        with pytest.raises(ValueError, match="MemoryManager\\(long_term=True\\)"):
            MemoryAgent(Scripted().model, memory=MemoryManager(), long_term=True)

    @pytest.mark.parametrize(
        "settings", [{"user_id": "u1"}, {"record_episodes": True}], ids=["user", "episodes"]
    )
    def test_user_and_episodes_need_long_term_memory(self, settings: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match="need long_term"):
            MemoryAgent(Scripted().model, memory=MemoryManager(), **settings)

    @pytest.mark.parametrize(
        ("settings", "error"),
        [
            ({"long_term": "yes"}, TypeError),
            ({"long_term": LongTermMemory(), "record_episodes": 1}, TypeError),
            ({"long_term": LongTermMemory(), "user_id": 7}, TypeError),
            ({"long_term": LongTermMemory(), "user_id": ""}, ValueError),
        ],
    )
    def test_wrong_types_and_values(self, settings: dict[str, Any], error: type[Exception]) -> None:
        with pytest.raises(error):
            MemoryAgent(Scripted().model, memory=MemoryManager(), **settings)


class TestFactsLandWhereTheyBelong:
    """remember(key, value) writes to the user's scope when the agent serves a user."""

    async def test_with_a_user_in_the_user_scope(self, store: MemoryStore, mode: str) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(
            Scripted(REMEMBER).model, memory=MemoryManager(), long_term=memory, user_id="u1"
        )
        await run(agent, mode, "remember")
        fact = await memory.async_get_fact("timezone", user_id="u1")
        assert fact is not None
        assert (fact.scope.value, fact.scope_id) == ("user", "u1")
        assert await memory.async_get_fact("timezone") is None
        assert await memory.async_get_fact("timezone", user_id="u2") is None

    async def test_without_a_user_in_the_global_scope(self, store: MemoryStore, mode: str) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(Scripted(REMEMBER).model, memory=MemoryManager(), long_term=memory)
        await run(agent, mode, "remember")
        fact = await memory.async_get_fact("timezone")
        assert fact is not None
        assert fact.scope.value == "global"


class TestRunsBecomeEpisodes:
    """With record_episodes, every run is stored as an episode, tool calls and failures too."""

    async def test_each_run_with_its_tool_actions(self, store: MemoryStore, mode: str) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(
            Scripted(REMEMBER).model,
            memory=MemoryManager(),
            long_term=memory,
            user_id="u1",
            record_episodes=True,
            name="helper",
        )
        first = await run(agent, mode, "remember")
        second = await run(agent, mode, "recall", first.conversation_id)
        episodes = await memory.async_episodes(agent_id="helper")
        assert sorted(e.id for e in episodes) == sorted(
            r.episode.id for r in (first, second) if r.episode is not None
        )
        assert first.episode is not None
        assert second.episode is not None
        assert [(a["tool"], a["args"], a["result"]) for a in first.episode.actions] == [
            (
                "remember",
                {"key": "timezone", "value": "Australia/Adelaide"},
                "Remembered: timezone = Australia/Adelaide (created)",
            )
        ]
        assert [a["result"] for a in second.episode.actions] == ["timezone = Australia/Adelaide"]
        for result in (first, second):
            assert result.episode is not None
            assert result.episode.success
            assert result.episode.outcome.output == "done"
            assert result.episode.user_id == "u1"
            assert result.episode.conversation_id == first.conversation_id
        assert second.episode.input == "recall"

    async def test_a_failing_run_is_a_failed_episode(self, store: MemoryStore, mode: str) -> None:
        memory = LongTermMemory(store)
        manager = MemoryManager()
        agent = MemoryAgent(
            Scripted().model, memory=manager, long_term=memory, record_episodes=True
        )
        first = await run(agent, mode, "hello")
        with pytest.raises(RuntimeError, match="the model is down"):
            await run(agent, mode, "fail", first.conversation_id)
        failed = await memory.async_episodes(success=False)
        assert len(failed) == 1
        episode = failed[0]
        assert episode.outcome.error == "RuntimeError: the model is down"
        assert (episode.agent_id, episode.input) == ("agent", "fail")
        assert episode.conversation_id == first.conversation_id
        assert [_last_prompt(episode.model_messages())] == ["fail"]
        assert len(episode.model_messages()) == 1  # the run's own, not the history
        assert len(manager.get_message_history(first.conversation_id)) == 2

    async def test_streamed_runs(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(
            Scripted().model, memory=MemoryManager(), long_term=memory, record_episodes=True
        )
        async with agent.run_stream("hi") as streamed:
            await streamed.get_output()
        assert streamed.episode is not None
        assert streamed.episode.outcome.output == "streamed"
        with pytest.raises(RuntimeError):
            async with agent.run_stream("fail") as failing:
                await failing.get_output()
        async with agent.run_stream("left early"):
            pass
        episodes = await memory.async_episodes()
        assert sorted((e.input, e.success) for e in episodes) == [("fail", False), ("hi", True)]

    async def test_a_failure_to_record_does_not_hide_the_run_s_error(
        self, mode: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        memory = LongTermMemory()

        def unrecordable(**episode: Any) -> None:
            raise OSError("the store is gone")

        monkeypatch.setattr(memory, "record_episode", unrecordable)
        monkeypatch.setattr(memory, "async_record_episode", unrecordable)
        agent = MemoryAgent(
            Scripted().model, memory=MemoryManager(), long_term=memory, record_episodes=True
        )
        with pytest.raises(RuntimeError, match="the model is down") as raised:
            await run(agent, mode, "fail")
        assert raised.value.__notes__ == [
            "recording the failed run as an episode failed too: OSError('the store is gone')"
        ]

    def test_off_by_default(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        agent = MemoryAgent(Scripted().model, memory=MemoryManager(), long_term=memory)
        assert agent.run_sync("hi").episode is None
        with pytest.raises(RuntimeError):
            agent.run_sync("fail")
        assert memory.episodes() == []

    def test_a_ready_made_agent_keeps_its_own_tools(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        wrapped: Agent[None, str] = Agent(
            Scripted({"go": [("double", {"x": 2}), *REMEMBER["remember"]]}).model
        )

        @wrapped.tool_plain
        def double(x: int) -> int:
            return 2 * x

        agent = MemoryAgent(wrapped, memory=MemoryManager(), long_term=memory, record_episodes=True)
        episode = agent.run_sync("go").episode
        assert episode is not None
        assert [(a["tool"], a["result"]) for a in episode.actions] == [
            ("double", 4),
            ("remember", "Remembered: timezone = Australia/Adelaide (created)"),
        ]


# ---------------------------------------------------------------------------- the extractor


class FactModel:
    """A FunctionModel answering every request with the facts it holds, as structured output."""

    def __init__(self, facts: list[dict[str, Any]]) -> None:
        self.facts = facts
        self.prompts: list[str] = []
        self.instructions: list[str | None] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.prompts.append(_last_prompt(messages))
        self.instructions.append(info.instructions)
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, {"response": self.facts})]
        )

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


TURNS = [
    ConversationTurn(
        turn_id=0, user_prompt="I moved to Adelaide last week.", assistant_response="Welcome!"
    ),
    ConversationTurn(turn_id=1, user_prompt="I prefer metric units.", assistant_response="Noted."),
]

FACTS: list[dict[str, Any]] = [
    {"key": "city", "value": "Adelaide", "fact_type": "world_knowledge", "confidence": 0.9},
    {"key": "units", "value": "metric", "fact_type": "user_preference", "confidence": 0.8},
]


async def apply(
    extractor: FactExtractor, memory: LongTermMemory, mode: str, **where: Any
) -> list[RememberResult]:
    if mode == "sync":

        def blocking() -> list[RememberResult]:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                return extractor.apply(memory, TURNS, **where)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

        return await asyncio.to_thread(blocking)
    return await extractor.async_apply(memory, TURNS, **where)


def summary(results: list[RememberResult]) -> list[tuple[str, Any, str, int]]:
    return [(r.key, r.value, r.status, r.fact.times_confirmed) for r in results]


class TestExtractedFactsAreMerged:
    """Facts a model finds are remembered once: created, then confirmed, then updated."""

    async def test_found_then_confirmed_then_updated(self, store: MemoryStore, mode: str) -> None:
        memory = LongTermMemory(store)
        model = FactModel(FACTS)
        extractor = FactExtractor.from_config(model.model)
        first = await apply(extractor, memory, mode, scope="user", scope_id="u1")
        assert summary(first) == [
            ("city", "Adelaide", "created", 0),
            ("units", "metric", "created", 0),
        ]
        again = await apply(extractor, memory, mode, scope="user", scope_id="u1")
        assert summary(again) == [
            ("city", "Adelaide", "confirmed", 1),
            ("units", "metric", "confirmed", 1),
        ]
        model.facts = [{**FACTS[0], "value": "Melbourne"}]
        changed = await apply(extractor, memory, mode, scope="user", scope_id="u1")
        assert summary(changed) == [("city", "Melbourne", "updated", 2)]
        city = await memory.async_get_fact("city", user_id="u1")
        assert city is not None
        assert [revision.value for revision in city.history] == ["Adelaide"]
        assert sorted(f.key for f in await memory.async_recall(user_id="u1")) == ["city", "units"]
        assert await memory.async_recall() == []  # nothing leaked into the global scope

    async def test_the_model_reads_the_turns(self, mode: str) -> None:
        model = FactModel([])
        extractor = FactExtractor.from_config(model.model, instructions="Find facts.")
        assert await apply(extractor, LongTermMemory(), mode) == []
        assert "User: I moved to Adelaide last week." in model.prompts[0]
        assert "Assistant: Noted." in model.prompts[0]
        assert model.instructions == ["Find facts."]

    async def test_extract_only_asks(self) -> None:
        model = FactModel(FACTS)
        extractor = FactExtractor.from_config(model.model)
        found = await extractor.async_extract(TURNS)
        assert found == [
            ExtractedFact(
                key="city", value="Adelaide", fact_type=FactType.WORLD_KNOWLEDGE, confidence=0.9
            ),
            ExtractedFact(
                key="units", value="metric", fact_type=FactType.USER_PREFERENCE, confidence=0.8
            ),
        ]
        assert [str(fact) for fact in found] == ["city = Adelaide", "units = metric"]
        assert await extractor.async_extract([]) == []
        assert len(model.prompts) == 1  # no turns, no request

    def test_extract_sync(self) -> None:
        extractor = FactExtractor.from_config(FactModel(FACTS).model)
        assert [fact.key for fact in extractor.extract(TURNS)] == ["city", "units"]
        assert extractor.extract([]) == []


class TestBadModelOutputIsSkipped:
    """What the model gets wrong is skipped with a warning; the rest is kept."""

    async def test_bad_facts_are_skipped_with_a_warning(
        self, store: MemoryStore, mode: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        memory = LongTermMemory(store)
        model = FactModel(
            [
                {"key": "kind", "value": 1, "fact_type": "gossip"},
                {"key": "sure", "value": 1, "confidence": 1.5},
                {"key": "unsure", "value": 1, "confidence": -0.1},
                {"key": "", "value": 1},
                {"key": "faint", "value": 1, "confidence": 0.2},
                {"key": "kept", "value": [1, 2]},
            ]
        )
        extractor = FactExtractor.from_config(model.model, fact_type="relationship")
        with caplog.at_level("WARNING", logger="memlane"):
            results = await apply(extractor, memory, mode)
        assert [(r.key, r.value, r.fact.fact_type.value) for r in results] == [
            ("kept", [1, 2], "relationship")
        ]
        skipped = [r.getMessage() for r in caplog.records if r.name == "memlane"]
        assert len(skipped) == 4
        assert "'gossip'" in skipped[0]
        assert "1.5" in skipped[1]
        assert "-0.1" in skipped[2]
        assert [f.key for f in await memory.async_recall()] == ["kept"]

    async def test_min_confidence(self) -> None:
        model = FactModel(FACTS)
        extractor = FactExtractor.from_config(model.model, min_confidence=0.85)
        assert [fact.key for fact in await extractor.async_extract(TURNS)] == ["city"]

    async def test_a_failing_model_raises_and_remembers_nothing(self) -> None:
        def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise RuntimeError("the model is down")

        memory = LongTermMemory()
        with pytest.raises(RuntimeError, match="the model is down"):
            await FactExtractor.from_config(FunctionModel(fail)).async_apply(memory, TURNS)
        assert await memory.async_recall() == []


class TestExtractorSettingsAreChecked:
    """Bad settings fail when the extractor is made or before the model is asked."""

    @pytest.mark.parametrize(
        ("settings", "error"),
        [
            ({"min_confidence": 2}, ValueError),
            ({"min_confidence": "high"}, TypeError),
            ({"fact_type": "gossip"}, ValueError),
            ({"instructions": " "}, ValueError),
            ({"instructions": 3}, TypeError),
        ],
    )
    def test_settings(self, settings: dict[str, Any], error: type[Exception]) -> None:
        with pytest.raises(error):
            FactExtractor.from_config(FactModel([]).model, **settings)

    def test_model(self) -> None:
        with pytest.raises(TypeError, match="model"):
            FactExtractor.from_config(3)  # type: ignore[arg-type]  # refused on purpose

    @pytest.mark.parametrize(
        ("where", "error"),
        [
            ({"scope": "user"}, ValueError),
            ({"scope": "planet", "scope_id": "x"}, ValueError),
            ({"scope_id": "x"}, ValueError),
        ],
    )
    async def test_the_target_is_checked_before_asking(
        self, where: dict[str, Any], error: type[Exception]
    ) -> None:
        model = FactModel(FACTS)
        with pytest.raises(error):
            await FactExtractor.from_config(model.model).async_apply(
                LongTermMemory(), TURNS, **where
            )
        assert model.prompts == []

    async def test_long_term_and_turns_are_checked(self) -> None:
        extractor = FactExtractor.from_config(FactModel(FACTS).model)
        with pytest.raises(TypeError, match="long_term"):
            await extractor.async_apply(object(), TURNS)  # type: ignore[arg-type]  # refused
        with pytest.raises(TypeError, match="ConversationTurn"):
            await extractor.async_extract(["hello"])  # type: ignore[list-item]  # refused
