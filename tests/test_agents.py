"""memlane.agents with real pydantic-ai agents on its offline FunctionModel and TestModel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, assert_type

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelHTTPError, UserError
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from memlane import FileStore, InMemoryStore, MemoryManager, SQLiteStore
from memlane.agents import (
    DelegationRouter,
    DelegationStrategy,
    MemlaneConversationStore,
    MemoryAgent,
    MemoryRunResult,
    MemoryStreamedRun,
    RoundRobinStrategy,
    async_store_run,
    memory_history,
    store_run,
)

SYNTHESIZED = "pydantic_ai_synthesized_tool_return"


# ---------------------------------------------------------------------------- helpers


def _text_model(reply: str = "ok") -> FunctionModel:
    return FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(reply)]))


class Recorder:
    """A FunctionModel that records what each request carried and answers by a script."""

    def __init__(
        self, respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse] | None = None
    ) -> None:
        self.calls: list[list[ModelMessage]] = []
        self.instructions: list[str | None] = []
        self._respond = respond or (
            lambda messages, info: ModelResponse(parts=[TextPart(f"answer {len(self.calls)}")])
        )

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append(list(messages))
        self.instructions.append(info.instructions)
        return self._respond(messages, info)

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self)


def _parts(messages: list[ModelMessage]) -> list[ModelRequestPart | ModelResponsePart]:
    return [part for message in messages for part in message.parts]


def _signature(messages: list[ModelMessage]) -> list[tuple[str, str | None, str]]:
    """What a model is told, part by part (request merging by pydantic-ai does not change it)."""
    out: list[tuple[str, str | None, str]] = []
    for part in _parts(messages):
        if isinstance(part, ToolCallPart):
            out.append((part.part_kind, part.tool_call_id, part.args_as_json_str()))
        elif isinstance(part, ToolReturnPart):
            out.append((part.part_kind, part.tool_call_id, part.model_response_str()))
        else:
            out.append((part.part_kind, None, str(getattr(part, "content", ""))))
    return out


def _tool_pairing_errors(messages: list[ModelMessage]) -> list[str]:
    """Orphan returns, calls without returns, and returns pydantic-ai synthesised."""
    errors: list[str] = []
    called: set[str] = set()
    returned: set[str] = set()
    for part in _parts(messages):
        if isinstance(part, ToolCallPart):
            called.add(part.tool_call_id)
        elif isinstance(part, ToolReturnPart):
            if part.tool_call_id not in called:
                errors.append(f"return without its call: {part.tool_call_id}")
            if (part.metadata or {}).get(SYNTHESIZED):
                errors.append(f"synthesised return: {part.tool_call_id}")
            returned.add(part.tool_call_id)
    errors.extend(f"call without its return: {cid}" for cid in sorted(called - returned))
    return errors


def _assert_budgeted_first_request(
    received: list[ModelMessage], sent: list[ModelMessage], prompt: str
) -> None:
    """``received`` is the prompt after the newest whole turns of ``sent``, its summary first.

    The whole request (tool definitions included) is kept within the budget, so the oldest
    turns of the memory's history may be left out; none is cut in half and nothing else is.
    """
    got, full = _signature(received), _signature(sent)
    assert got[-1] == ("user-prompt", None, prompt)
    got = got[:-1]
    head = 1 if full and full[0][0] == "system-prompt" else 0
    assert got[:head] == full[:head]
    rest = got[head:]
    assert rest == full[len(full) - len(rest) :] if rest else True
    if rest:
        assert rest[0][0] == "user-prompt"  # whole turns: the oldest sent starts at its prompt


def _last_prompt(messages: list[ModelMessage]) -> str:
    for part in reversed(_parts(messages)):
        if isinstance(part, UserPromptPart):
            assert isinstance(part.content, str)
            return part.content
    raise AssertionError("no user prompt")


def _texts(messages: list[ModelMessage]) -> str:
    return "\n".join(str(getattr(p, "content", "")) for p in _parts(messages))


@pytest.fixture
def memory() -> MemoryManager:
    return MemoryManager(max_conversation_tokens=4000, summarize_threshold=3000)


# ---------------------------------------------------------------------------- MemoryAgent


class TestMemoryAgentWrapsAnAgent:
    """MemoryAgent wraps a pydantic-ai Agent, or builds one, and keeps its API at .agent."""

    def test_wraps_an_agent(self, memory: MemoryManager) -> None:
        agent = Agent(_text_model("hi"), name="helper")
        wrapped = MemoryAgent(agent, memory=memory)
        assert wrapped.agent is agent
        assert wrapped.name == "helper"
        assert wrapped.run_sync("hello").output == "hi"

    def test_builds_from_a_model_with_agent_kwargs(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        wrapped = MemoryAgent(recorder.model, memory=memory, name="built", instructions="Be brief.")
        assert isinstance(wrapped.agent, Agent)
        assert wrapped.agent.name == "built"
        wrapped.run_sync("hello")
        assert recorder.instructions == ["Be brief."]

    def test_builds_from_a_model_string(self, memory: MemoryManager) -> None:
        wrapped = MemoryAgent("test", memory=memory)
        assert wrapped.run_sync("hello").output == "success (no tool calls)"

    def test_test_model_with_a_tool(self, memory: MemoryManager) -> None:
        agent = Agent(TestModel())

        @agent.tool_plain
        def lookup(q: str) -> str:
            return f"found {q}"

        result = MemoryAgent(agent, memory=memory).run_sync("look it up")
        stored = memory.conversation.get_turns(result.conversation_id)[0].raw_messages
        assert [p.part_kind for p in _parts(stored)] == [
            "user-prompt",
            "tool-call",
            "tool-return",
            "text",
        ]

    def test_agent_kwargs_with_an_agent_are_refused(self, memory: MemoryManager) -> None:
        with pytest.raises(TypeError, match="instructions"):
            # The overloads refuse this call already; the check guards untyped callers.
            MemoryAgent(Agent(_text_model()), memory=memory, instructions="x")  # type: ignore[call-overload]

    def test_memory_must_be_a_manager(self) -> None:
        with pytest.raises(TypeError, match="MemoryManager"):
            MemoryAgent(Agent(_text_model()), memory=InMemoryStore())  # type: ignore[call-overload]

    @pytest.mark.parametrize("kwarg", ["message_history", "conversation"])
    def test_history_kwargs_are_refused(self, memory: MemoryManager, kwarg: str) -> None:
        wrapped = MemoryAgent(Agent(_text_model()), memory=memory)
        with pytest.raises(TypeError, match=f"{kwarg}= is supplied by memory"):
            wrapped.run_sync("hi", conversation_id="c", **{kwarg: []})
        assert memory.conversation.conversation_ids == []

    def test_reserved_new_id_is_refused(self, memory: MemoryManager) -> None:
        with pytest.raises(ValueError, match="reserved"):
            MemoryAgent(Agent(_text_model()), memory=memory).run_sync("hi", conversation_id="new")


class TestRunsAreTurns:
    """A run is sent the conversation's history and stored as one turn of its new messages."""

    async def test_run_without_id_starts_a_conversation(self, memory: MemoryManager) -> None:
        result = await MemoryAgent(Agent(_text_model("hello back")), memory=memory).run("hello")
        assert isinstance(result, MemoryRunResult)
        assert result.conversation_id in memory.conversation.conversation_ids
        [turn] = memory.conversation.get_turns(result.conversation_id)
        assert turn == result.turn
        assert (turn.user_prompt, turn.assistant_response) == ("hello", "hello back")
        assert turn.raw_messages == result.new_messages()
        assert result.result.conversation_id == result.conversation_id  # pydantic-ai tags the run

    async def test_run_with_id_is_sent_the_history(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        wrapped = MemoryAgent(Agent(recorder.model), memory=memory)
        first = await wrapped.run("my name is Ada")
        await wrapped.run("what is my name?", conversation_id=first.conversation_id)
        assert _signature(recorder.calls[1]) == _signature(
            [*first.new_messages(), ModelRequest(parts=[UserPromptPart("what is my name?")])]
        )
        assert len(memory.conversation.get_turns(first.conversation_id)) == 2

    def test_run_sync_is_the_same(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        wrapped = MemoryAgent(Agent(recorder.model), memory=memory)
        first = wrapped.run_sync("one")
        second = wrapped.run_sync("two", conversation_id=first.conversation_id)
        assert second.conversation_id == first.conversation_id
        assert "one" in _texts(recorder.calls[1])
        assert [t.user_prompt for t in memory.conversation.get_turns(first.conversation_id)] == [
            "one",
            "two",
        ]

    async def test_unknown_id_starts_that_conversation(self, memory: MemoryManager) -> None:
        result = await MemoryAgent(Agent(_text_model()), memory=memory).run(
            "hi", conversation_id="mine"
        )
        assert result.conversation_id == "mine"
        assert len(memory.conversation.get_turns("mine")) == 1

    async def test_structured_output_is_stored_as_json(self, memory: MemoryManager) -> None:
        class City(BaseModel):
            name: str
            population: int

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            tool = info.output_tools[0].name
            return ModelResponse(
                parts=[ToolCallPart(tool, {"name": "Lisbon", "population": 545000})]
            )

        result = await MemoryAgent(
            Agent(FunctionModel(respond), output_type=City), memory=memory
        ).run("a city")
        assert result.output == City(name="Lisbon", population=545000)
        assert json.loads(result.turn.assistant_response) == {
            "name": "Lisbon",
            "population": 545000,
        }

    async def test_a_failed_run_stores_nothing(self, memory: MemoryManager) -> None:
        def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise ModelHTTPError(503, "fake-model")

        with pytest.raises(ModelHTTPError):
            await MemoryAgent(Agent(FunctionModel(fail)), memory=memory).run(
                "hi", conversation_id="c"
            )
        assert memory.conversation.get_turns("c") == []

    async def test_the_summary_heads_the_history_it_is_sent(self) -> None:
        memory = MemoryManager(
            max_conversation_tokens=80, summarize_threshold=60, summarizer=lambda turns: "SUMMARY"
        )
        recorder = Recorder()
        wrapped = MemoryAgent(Agent(recorder.model), memory=memory)
        cid = (await wrapped.run("first " * 20)).conversation_id
        for i in range(4):
            await wrapped.run(f"turn {i} " * 10, conversation_id=cid)
        first_part = recorder.calls[-1][0].parts[0]
        assert isinstance(first_part, SystemPromptPart)
        assert first_part.content.endswith("SUMMARY")


class City(BaseModel):
    name: str
    population: int


def _city_model() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, {"name": "Lisbon", "population": 1})]
        )

    return FunctionModel(respond)


class TestOutputsAreTyped:
    """MemoryAgent carries the agent's output type to its results; mypy checks these asserts."""

    def test_a_str_agent_gives_str_results(self, memory: MemoryManager) -> None:
        agent: Agent[None, str] = Agent(_text_model("hi"))
        wrapped = MemoryAgent(agent, memory=memory)
        assert_type(wrapped, MemoryAgent[str])
        result = wrapped.run_sync("hello")
        assert_type(result, MemoryRunResult[str])
        assert_type(result.output, str)
        assert result.output == "hi"

    async def test_a_structured_agent_gives_its_type(self, memory: MemoryManager) -> None:
        wrapped = MemoryAgent(Agent(_city_model(), output_type=City), memory=memory)
        assert_type(wrapped, MemoryAgent[City])
        result = await wrapped.run("a city")
        assert_type(result.output, City)
        assert result.output == City(name="Lisbon", population=1)

    async def test_an_agent_built_from_a_model(self, memory: MemoryManager) -> None:
        assert_type(MemoryAgent(_text_model(), memory=memory), MemoryAgent[str])
        # pydantic-ai's Agent refuses output_type=None; MemoryAgent reads it as the default.
        untyped = MemoryAgent(_text_model("hi"), memory=memory, output_type=None)
        assert_type(untyped, MemoryAgent[str])
        assert (await untyped.run("hello")).output == "hi"
        wrapped = MemoryAgent(_city_model(), memory=memory, output_type=City)
        assert_type(wrapped, MemoryAgent[City])
        assert (await wrapped.run("a city")).output.population == 1

    def test_a_run_output_type_overrides_the_agent_s(self, memory: MemoryManager) -> None:
        wrapped = MemoryAgent(Agent(_city_model()), memory=memory)
        assert_type(wrapped, MemoryAgent[str])
        result = wrapped.run_sync("a city", output_type=City)
        assert_type(result, MemoryRunResult[City])
        assert result.output.name == "Lisbon"

    async def test_a_streamed_run_output_type_overrides_too(self, memory: MemoryManager) -> None:
        wrapped = MemoryAgent(Agent(TestModel()), memory=memory)
        async with wrapped.run_stream("a city", output_type=City) as run:
            assert_type(run, MemoryStreamedRun[City])
            assert isinstance(await run.get_output(), City)

    async def test_a_stream_has_the_agent_s_type(self, memory: MemoryManager) -> None:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            yield "streamed"

        model = FunctionModel(lambda m, i: ModelResponse(parts=[]), stream_function=stream)
        async with MemoryAgent(Agent(model), memory=memory).run_stream("hi") as run:
            assert_type(run, MemoryStreamedRun[str])
            assert_type(await run.get_output(), str)
        assert run.turn is not None


class TestStreamedRuns:
    """A streamed turn is stored when the stream completes, not when it fails or is cancelled."""

    @staticmethod
    def _agent(
        stream: Callable[[list[ModelMessage], AgentInfo], AsyncIterator[str]],
    ) -> Agent[None, str]:
        return Agent(
            FunctionModel(
                lambda m, i: ModelResponse(parts=[TextPart("unused")]), stream_function=stream
            )
        )

    async def test_a_completed_stream_is_stored(self, memory: MemoryManager) -> None:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            for chunk in ["The ", "answer ", "is ", "42."]:
                yield chunk

        wrapped = MemoryAgent(self._agent(stream), memory=memory)
        async with wrapped.run_stream("question", conversation_id="s") as run:
            assert run.conversation_id == "s"
            chunks = [c async for c in run.stream_text(delta=True, debounce_by=None)]
            assert run.is_complete
        assert "".join(chunks) == "The answer is 42."
        assert run.turn is not None
        assert [
            (t.user_prompt, t.assistant_response) for t in memory.conversation.get_turns("s")
        ] == [("question", "The answer is 42.")]

    async def test_get_output_completes_the_stream(self, memory: MemoryManager) -> None:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            yield "done"

        wrapped = MemoryAgent(self._agent(stream), memory=memory)
        async with wrapped.run_stream("q") as run:
            assert await run.get_output() == "done"
        assert len(memory.conversation.get_turns(run.conversation_id)) == 1

    async def test_a_failing_stream_is_not_stored(self, memory: MemoryManager) -> None:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            yield "partial "
            raise ModelHTTPError(500, "fake-model")

        wrapped = MemoryAgent(self._agent(stream), memory=memory)

        async def consume() -> None:
            async with wrapped.run_stream("q", conversation_id="f") as run:
                async for _ in run.stream_text(debounce_by=None):
                    pass

        with pytest.raises(ModelHTTPError):
            await consume()
        assert memory.conversation.get_turns("f") == []

    async def test_a_cancelled_stream_is_not_stored(self, memory: MemoryManager) -> None:
        started = asyncio.Event()

        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            yield "first "
            started.set()
            await asyncio.Event().wait()  # the model stalls until cancelled
            yield "never"

        wrapped = MemoryAgent(self._agent(stream), memory=memory)

        async def consume() -> None:
            async with wrapped.run_stream("q", conversation_id="x") as run:
                async for _ in run.stream_text(debounce_by=None):
                    pass

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert memory.conversation.get_turns("x") == []

    async def test_a_stream_left_early_or_raising_in_the_block_is_not_stored(
        self, memory: MemoryManager
    ) -> None:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            yield "a"
            yield "b"

        wrapped = MemoryAgent(self._agent(stream), memory=memory)
        async with wrapped.run_stream("left", conversation_id="e") as run:
            pass
        assert run.turn is None

        async def fail_in_the_block() -> None:
            async with wrapped.run_stream("raised", conversation_id="e") as run:
                await run.get_output()
                raise RuntimeError("caller failed")

        with pytest.raises(RuntimeError, match="caller"):
            await fail_in_the_block()
        assert memory.conversation.get_turns("e") == []


class TestWorkingMemoryReachesTheModel:
    """The working-memory facts are added to the run's instructions when there are any."""

    def test_facts_are_in_the_instructions(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        memory.set_fact("user_name", "Ada")
        MemoryAgent(Agent(recorder.model, instructions="Be brief."), memory=memory).run_sync("hi")
        assert recorder.instructions == ["Be brief.\n\nWorking Memory:\n- user_name: Ada"]

    def test_no_facts_add_nothing(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        MemoryAgent(Agent(recorder.model), memory=memory).run_sync("hi")
        assert recorder.instructions == [None]

    def test_injection_can_be_turned_off(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        memory.set_fact("secret", "x")
        MemoryAgent(Agent(recorder.model), memory=memory, inject_working_memory=False).run_sync(
            "hi"
        )
        assert recorder.instructions == [None]

    async def test_run_instructions_are_kept(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        memory.set_fact("k", "v")
        wrapped = MemoryAgent(Agent(recorder.model), memory=memory)
        await wrapped.run("hi", instructions="Per run.")
        await wrapped.run("hi", instructions=["One.", "Two."])
        assert recorder.instructions == [
            "Per run.\n\nWorking Memory:\n- k: v",
            "One.\n\nTwo.\n\nWorking Memory:\n- k: v",
        ]

    async def test_a_fact_set_by_a_tool_reaches_the_next_request(
        self, memory: MemoryManager
    ) -> None:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if isinstance(messages[-1].parts[-1], ToolReturnPart):
                return ModelResponse(parts=[TextPart("noted")])
            return ModelResponse(
                parts=[ToolCallPart("remember", {"key": "city", "value": "Lisbon"})]
            )

        recorder = Recorder(respond)
        agent = Agent(recorder.model)

        @agent.tool_plain
        def remember(key: str, value: str) -> str:
            memory.set_fact(key, value)
            return "saved"

        await MemoryAgent(agent, memory=memory).run("I live in Lisbon")
        assert recorder.instructions == [None, "Working Memory:\n- city: Lisbon"]


# ---------------------------------------------------------------------------- tool calls


def _tool_agent(recorder: Recorder) -> Agent[None, str]:
    agent = Agent(recorder.model)

    @agent.tool_plain
    def lookup(topic: str) -> str:
        return f"notes on {topic}: " + "detail " * 12

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    return agent


def _tool_heavy(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Turn n calls lookup; every third turn also add, in parallel; even turns a second step."""
    n = int(_last_prompt(messages).split()[-1])
    steps = 0
    for message in reversed(messages):
        if any(isinstance(p, UserPromptPart) for p in message.parts):
            break
        steps += isinstance(message, ModelResponse)
    if steps == 0:
        calls = [ToolCallPart("lookup", {"topic": f"t{n}"}, tool_call_id=f"look-{n}")]
        if n % 3 == 0:
            calls.append(ToolCallPart("add", {"a": n, "b": 1}, tool_call_id=f"add-{n}"))
        return ModelResponse(parts=[TextPart(f"checking {n}"), *calls])
    if steps == 1 and n % 2 == 0:
        return ModelResponse(
            parts=[ToolCallPart("lookup", {"topic": f"more{n}"}, tool_call_id=f"more-{n}")]
        )
    return ModelResponse(parts=[TextPart(f"answer to question {n}")])


class TestToolCallsSurviveTrimming:
    """Sent histories pair every tool call with its return, so pydantic-ai repairs nothing."""

    @pytest.mark.parametrize("summarize", [False, True], ids=["trimmed", "summarised"])
    async def test_tool_heavy_conversation_with_a_tight_budget(self, summarize: bool) -> None:
        memory = MemoryManager(
            max_conversation_tokens=300,
            summarize_threshold=250 if summarize else 10_000,
            summarizer=(lambda turns: f"{len(turns)} turns about tools") if summarize else None,
        )
        recorder = Recorder(_tool_heavy)
        wrapped = MemoryAgent(_tool_agent(recorder), memory=memory)
        cid = "tools"
        for n in range(1, 25):
            sent = memory.get_message_history(cid)
            first_call = len(recorder.calls)
            result = await wrapped.run(f"question {n}", conversation_id=cid)
            assert result.output == f"answer to question {n}"
            # The first request is the injected history, its oldest turns left out to fit the
            # tool definitions in the budget, and the prompt: nothing else dropped.
            _assert_budgeted_first_request(recorder.calls[first_call], sent, f"question {n}")
            for received in recorder.calls[first_call:]:
                assert _tool_pairing_errors(received) == []
        window = memory.get_message_history(cid)
        first_kept = window[1] if summarize else window[0]
        assert isinstance(first_kept, ModelRequest)
        assert isinstance(first_kept.parts[0], UserPromptPart)
        assert _last_prompt([first_kept]) != "question 1"  # early turns left the window
        assert memory.conversation.get_history_tokens(cid) <= 300
        assert (memory.conversation.get_summary(cid) is not None) is summarize

    def test_the_check_catches_what_pydantic_ai_would_drop(self) -> None:
        """A naive last-N-messages cut starts with an orphan return, which pydantic-ai drops."""
        recorder = Recorder(_tool_heavy)
        agent = _tool_agent(recorder)
        history = agent.run_sync("question 4").all_messages()
        naive = history[2:]  # starts with the return of look-4, its call cut away
        assert _tool_pairing_errors(naive) != []
        first_call = len(recorder.calls)
        agent.run_sync("question 5", message_history=naive)
        received = recorder.calls[first_call]
        expected = [*naive, ModelRequest(parts=[UserPromptPart("question 5")])]
        assert _signature(received) != _signature(expected)
        assert "look-4" not in {sig[1] for sig in _signature(received) if sig[0] == "tool-return"}


class TestMemoryHistoryCapability:
    """memory_history trims an Agent you run yourself; store_run stores new_messages()."""

    async def test_per_run_capability(self) -> None:
        memory = MemoryManager(max_conversation_tokens=250, summarize_threshold=10_000)
        recorder = Recorder(_tool_heavy)
        agent = _tool_agent(recorder)
        cid = "own-agent"
        for n in range(1, 13):
            sent = memory.get_message_history(cid)
            first_call = len(recorder.calls)
            result = await agent.run(f"question {n}", capabilities=[memory_history(memory, cid)])
            turn = await async_store_run(memory, cid, result)
            assert turn.raw_messages == result.new_messages()
            _assert_budgeted_first_request(recorder.calls[first_call], sent, f"question {n}")
            for received in recorder.calls[first_call:]:
                assert _tool_pairing_errors(received) == []
            # pydantic-ai keeps the processed history as the run's own: all_messages() is trimmed.
            assert result.all_messages()[: len(sent)] == sent
        assert len(memory.conversation.get_turns(cid)) == 12
        assert memory.conversation.get_history_tokens(cid) <= 250

    def test_agent_capability_replaces_a_passed_history(self, memory: MemoryManager) -> None:
        recorder = Recorder()
        agent = Agent(recorder.model, capabilities=[memory_history(memory, "c")])
        first = agent.run_sync("one")
        store_run(memory, "c", first)
        second = agent.run_sync("two", message_history=first.all_messages() * 2)
        store_run(memory, "c", second)
        assert _signature(recorder.calls[1]) == _signature(
            [*first.new_messages(), ModelRequest(parts=[UserPromptPart("two")])]
        )
        assert [t.user_prompt for t in memory.conversation.get_turns("c")] == ["one", "two"]

    def test_conversation_id_is_checked(self, memory: MemoryManager) -> None:
        with pytest.raises(ValueError, match="conversation_id"):
            memory_history(memory, "")


# ---------------------------------------------------------------------------- delegation


class TestDelegation:
    """Delegates share the conversation and keep their own facts; round robin takes turns."""

    async def test_round_robin_shared_conversation_own_facts(self, memory: MemoryManager) -> None:
        researcher, writer = Recorder(), Recorder()
        router = DelegationRouter(
            [Agent(researcher.model, name="researcher"), Agent(writer.model, name="writer")],
            RoundRobinStrategy(),
            memory=memory,
        )
        router.delegates["researcher"].memory.set_fact("source", "archive")
        first = await router.route("find the facts")
        second = await router.route("write it up", conversation_id=first.conversation_id)
        third = await router.route("check it", conversation_id=first.conversation_id)
        assert [first.agent_name, second.agent_name, third.agent_name] == [
            "researcher",
            "writer",
            "researcher",
        ]
        # The writer sees what the researcher said; each sees only its own facts.
        assert "find the facts" in _texts(writer.calls[0])
        assert researcher.instructions == ["Working Memory:\n- source: archive"] * 2
        assert writer.instructions == [None]
        assert memory.get_working_context() == ""
        turns = memory.conversation.get_turns(first.conversation_id)
        assert [t.metadata["agent"] for t in turns] == ["researcher", "writer", "researcher"]

    async def test_custom_async_strategy(self, memory: MemoryManager) -> None:
        class ByKeyword:
            async def select(
                self, prompt: Any, delegates: Sequence[MemoryAgent[Any]]
            ) -> MemoryAgent[Any]:
                return delegates[1] if "write" in prompt else delegates[0]

        router = DelegationRouter(
            [
                Agent(_text_model("r"), name="r"),
                MemoryAgent(Agent(_text_model("w")), memory=memory, name="w"),
            ],
            ByKeyword(),
            memory=memory,
        )
        assert (await router.route("please write")).output == "w"
        assert (await router.route("research")).output == "r"

    def test_strategies_follow_the_protocol(self, memory: MemoryManager) -> None:
        assert isinstance(RoundRobinStrategy(), DelegationStrategy)
        with pytest.raises(TypeError, match="select"):
            DelegationRouter(
                [Agent(_text_model(), name="a")],
                object(),  # type: ignore[arg-type]
                memory=memory,
            )

    async def test_a_strategy_must_choose_a_delegate(self, memory: MemoryManager) -> None:
        class Rogue:
            def select(self, prompt: Any, delegates: Any) -> Any:
                return MemoryAgent(Agent(_text_model()), memory=memory, name="rogue")

        router = DelegationRouter([Agent(_text_model(), name="a")], Rogue(), memory=memory)
        with pytest.raises(ValueError, match="not one of the delegates"):
            await router.route("x")

    def test_delegates_need_distinct_names(self, memory: MemoryManager) -> None:
        with pytest.raises(ValueError, match="name"):
            DelegationRouter([Agent(_text_model())], RoundRobinStrategy(), memory=memory)
        with pytest.raises(ValueError, match="'a'"):
            DelegationRouter(
                [Agent(_text_model(), name="a"), Agent(_text_model(), name="a")],
                RoundRobinStrategy(),
                memory=memory,
            )
        with pytest.raises(ValueError, match="at least one"):
            DelegationRouter([], RoundRobinStrategy(), memory=memory)


# ---------------------------------------------------------------------------- ConversationStore


_STORES = ["pydantic-ai", "memlane-memory", "memlane-sqlite", "memlane-file"]


def _make_store(kind: str, tmp_path: Path) -> ConversationStore:
    if kind == "pydantic-ai":
        return InMemoryConversationStore()
    if kind == "memlane-memory":
        return MemlaneConversationStore(MemoryManager())
    if kind == "memlane-sqlite":
        return MemlaneConversationStore(SQLiteStore(tmp_path / "c.sqlite3"))
    return MemlaneConversationStore(FileStore(tmp_path / "files"))


@pytest.fixture(params=_STORES)
def conv_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    store = _make_store(request.param, tmp_path)
    yield store
    inner = getattr(store, "store", None)
    if isinstance(inner, SQLiteStore):
        inner.close()


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart(f"reply to {_last_prompt(messages)!r} (saw {len(messages)} msgs)")]
    )


_agent = Agent(FunctionModel(_echo))


async def _turn(store: ConversationStore, cid: str, prompt: str, **kwargs: Any) -> Any:
    conversation = await store.load(cid) or Conversation(conversation_id=cid)
    result = await _agent.run(prompt, conversation=conversation, **kwargs)
    await store.save(result)
    return result


class TestConversationStoreParity:
    """MemlaneConversationStore behaves like pydantic-ai's InMemoryConversationStore."""

    async def test_save_appends_only_new_messages(self, conv_store: ConversationStore) -> None:
        await _turn(conv_store, "c1", "hello")
        result = await _turn(conv_store, "c1", "second")
        assert result.output == "reply to 'second' (saw 3 msgs)"
        loaded = await conv_store.load("c1")
        assert loaded is not None
        assert loaded.messages == result.all_messages()
        assert loaded.usage.requests == 2
        entries = await conv_store.load_entries("c1")
        assert entries is not None
        assert len(entries) == 4
        assert [e.parent_id for e in entries[1:]] == [e.id for e in entries[:-1]]

    async def test_unknown_conversation(self, conv_store: ConversationStore) -> None:
        assert await conv_store.load("nope") is None
        assert await conv_store.load_entries("nope") is None
        with pytest.raises(UserError):
            await conv_store.load("nope", limit=-1)

    async def test_conflicting_writers(self, conv_store: ConversationStore) -> None:
        await _turn(conv_store, "c1", "hello")
        a, b = await conv_store.load("c1"), await conv_store.load("c1")
        assert a is not None
        assert b is not None
        await conv_store.save(await _agent.run("writer A", conversation=a))
        rb = await _agent.run("writer B", conversation=b)
        with pytest.raises(ConversationConflict) as info:
            await conv_store.save(rb)
        assert info.value.conversation_id == "c1"
        with pytest.raises(ConversationConflict):
            await conv_store.save(Conversation(conversation_id="c1"))
        loaded = await conv_store.load("c1")
        assert loaded is not None
        assert "writer B" not in _texts(loaded.messages)

    async def test_concurrent_writers_one_wins(self, conv_store: ConversationStore) -> None:
        await _turn(conv_store, "c1", "hello")
        loaded = [await conv_store.load("c1") for _ in range(4)]
        results = [await _agent.run(f"writer {i}", conversation=c) for i, c in enumerate(loaded)]
        outcomes = await asyncio.gather(
            *(conv_store.save(r) for r in results), return_exceptions=True
        )
        assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
        assert all(
            isinstance(o, ConversationConflict) for o in outcomes if isinstance(o, BaseException)
        )
        final = await conv_store.load("c1")
        assert final is not None
        assert len(final.messages) == 4

    async def test_saved_result_can_be_continued(self, conv_store: ConversationStore) -> None:
        result = await _agent.run("one", conversation=Conversation(conversation_id="c"))
        await conv_store.save(result)
        again = await _agent.run("two", conversation=result.conversation)
        await conv_store.save(again)
        loaded = await conv_store.load("c")
        assert loaded is not None
        assert len(loaded.messages) == 4

    async def test_load_limit_windows_and_save_appends_to_the_whole(
        self, conv_store: ConversationStore
    ) -> None:
        for prompt in ("one", "two", "three"):
            await _turn(conv_store, "c1", prompt)
        window = await conv_store.load("c1", limit=2)
        assert window is not None
        assert [m.kind for m in window.messages] == ["request", "response"]
        result = await _agent.run("windowed", conversation=window)
        assert result.output == "reply to 'windowed' (saw 3 msgs)"
        await conv_store.save(result)
        whole = await conv_store.load("c1")
        assert whole is not None
        assert len(whole.messages) == 8

    async def test_a_trimmed_run_appends_only_its_new_messages(
        self, conv_store: ConversationStore
    ) -> None:
        for prompt in ("one", "two"):
            await _turn(conv_store, "c1", prompt)
        trimming = Agent(
            FunctionModel(_echo), capabilities=[memory_history(MemoryManager(), "empty")]
        )
        loaded = await conv_store.load("c1")
        result = await trimming.run("trimmed", conversation=loaded)
        assert result.output == "reply to 'trimmed' (saw 1 msgs)"
        await conv_store.save(result)
        whole = await conv_store.load("c1")
        assert whole is not None
        assert len(whole.messages) == 6

    async def test_fork_and_branch(self, conv_store: ConversationStore) -> None:
        for prompt in ("one", "two"):
            await _turn(conv_store, "c1", prompt)
        fork = await conv_store.fork("c1", at=2, new_conversation_id="c1-fork")
        assert len(fork.messages) == 2
        record = await conv_store.read_record("c1-fork")
        assert record is not None
        assert record.forked_from == "c1"
        with pytest.raises(ConversationConflict):
            await conv_store.fork("c1", new_conversation_id="c1-fork")
        current = await conv_store.load("c1")
        assert current is not None
        branch = await conv_store.branch("c1", at=2, expected_revision=current.revision)
        assert len(branch.messages) == 2
        record = await conv_store.read_record("c1")
        assert record is not None
        assert len(record.branches) == 1
        await conv_store.save(await _agent.run("on branch", conversation=branch))
        after = await conv_store.load("c1")
        assert after is not None
        assert len(after.messages) == 4
        assert "on branch" in _texts(after.messages)
        back = await conv_store.load("c1")
        assert back is not None
        restored = await conv_store.branch(
            "c1", from_entry=record.branches[0], expected_revision=back.revision
        )
        assert "two" in _texts(restored.messages)
        with pytest.raises(ConversationConflict):
            await conv_store.branch("c1", at=0, expected_revision=current.revision)

    async def test_list_delete_and_shared_entries(self, conv_store: ConversationStore) -> None:
        await _turn(conv_store, "c1", "one")
        await conv_store.fork("c1", new_conversation_id="c1-fork")
        await _turn(conv_store, "c2", "other")
        listed = await conv_store.list_conversations()
        assert [r.conversation_id for r in listed] == ["c2", "c1-fork", "c1"]
        assert [r.conversation_id for r in await conv_store.list_conversations(limit=1)] == ["c2"]
        await conv_store.delete("c1")
        assert await conv_store.load("c1") is None
        fork = await conv_store.load("c1-fork")
        assert fork is not None
        assert len(fork.messages) == 2
        await conv_store.delete("c1-fork")
        assert {r.conversation_id for r in await conv_store.list_conversations()} == {"c2"}
        await conv_store.delete("never-there")

    async def test_scope(self, conv_store: ConversationStore) -> None:
        result = await _agent.run("mine", conversation=Conversation(conversation_id="s1"))
        await conv_store.save(result, scope="user-1")
        assert await conv_store.load("s1", scope="user-2") is None
        loaded = await conv_store.load("s1", scope="user-1")
        assert loaded is not None
        assert len(loaded.messages) == 2
        assert [r.conversation_id for r in await conv_store.list_conversations(scope="user-1")] == [
            "s1"
        ]
        assert await conv_store.list_conversations(scope="user-2") == []
        await conv_store.delete("s1", scope="user-2")
        assert await conv_store.load("s1") is not None

    async def test_messages_round_trip_exactly(self, conv_store: ConversationStore) -> None:
        def tools(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if isinstance(messages[-1].parts[-1], ToolReturnPart):
                return ModelResponse(parts=[TextPart("sunny")])
            return ModelResponse(
                parts=[ToolCallPart("weather", {"city": "Lisbon"}, tool_call_id="w1")]
            )

        agent = Agent(FunctionModel(tools))

        @agent.tool_plain
        def weather(city: str) -> dict[str, Any]:
            return {"city": city, "sky": "clear", "temps": [18, 24]}

        result = await agent.run("weather?", conversation=Conversation(conversation_id="w"))
        await conv_store.save(result)
        loaded = await conv_store.load("w")
        assert loaded is not None
        assert loaded.messages == result.all_messages()
        assert loaded.usage == result.usage

    async def test_record_fields_round_trip(self, conv_store: ConversationStore) -> None:
        call = ToolCallPart("approve", {"amount": 10}, tool_call_id="p1")
        pending = DeferredToolRequests(calls=[call])
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart("pay 10")]),
            ModelResponse(parts=[ToolCallPart("approve", {"amount": 10}, tool_call_id="p1")]),
        ]
        usage = RunUsage(requests=1, input_tokens=12, output_tokens=3)
        conversation = Conversation(
            conversation_id="d", messages=messages, usage=usage, deferred_tool_requests=pending
        )
        await conv_store.save(conversation, scope="team")
        loaded = await conv_store.load("d")
        assert loaded is not None
        assert loaded.messages == messages
        assert loaded.deferred_tool_requests == pending
        assert loaded.usage == usage
        assert loaded.revision == conversation.revision


class TestMemlaneConversationStore:
    """MemlaneConversationStore persists across restarts and over memlane's stores only."""

    async def test_survives_reopening_the_database(self, tmp_path: Path) -> None:
        path = tmp_path / "m.sqlite3"
        first = SQLiteStore(path)
        result = await _turn(MemlaneConversationStore(first), "c", "hello")
        first.close()
        reopened = SQLiteStore(path)
        try:
            store = MemlaneConversationStore(MemoryManager(store=reopened))
            loaded = await store.load("c")
            assert loaded is not None
            assert loaded.messages == result.all_messages()
            await _turn(store, "c", "again")
            again = await store.load("c")
            assert again is not None
            assert len(again.messages) == 4
        finally:
            reopened.close()

    async def test_instances_over_one_store_see_each_others_writes(self) -> None:
        shared = InMemoryStore()
        a, b = MemlaneConversationStore(shared), MemlaneConversationStore(shared)
        await _turn(a, "c", "hello")
        stale = await b.load("c")
        assert stale is not None
        await _turn(a, "c", "moved on")
        with pytest.raises(ConversationConflict):
            await b.save(await _agent.run("late", conversation=stale))

    async def test_missing_entry_is_a_lookup_error(self) -> None:
        with pytest.raises(LookupError):
            await MemlaneConversationStore(InMemoryStore()).read_entry("nope")

    def test_needs_a_memlane_store(self) -> None:
        with pytest.raises(TypeError, match="MemoryStore"):
            MemlaneConversationStore(object())  # type: ignore[arg-type]
