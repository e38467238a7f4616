"""Long-term episodes, procedures and users on every store and both implementations.

Every operation runs on InMemory, File, SQLite, PostgreSQL and MongoDB stores, through the
blocking methods and their ``async_`` twins. Episodes are also built from real pydantic-ai
runs (FunctionModel calling a tool). Concurrency is judged where it matters: tasks and
threads on every store, and two real processes on every store they can share, identifying
the same new person (one user) and recording procedure uses (every use counts).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
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

from memlane import UnstorableValueError, _backend
from memlane.longterm import LongTermMemory
from memlane.longterm.episodes import Episode
from memlane.longterm.procedures import Procedure, ProcedureNotFoundError
from memlane.longterm.users import USERS_NAMESPACE, UserContext, UserNotFoundError
from store_kinds import SHARED_STORES, STORES, Made, open_store

STEP_TIMEOUT = 120.0


@pytest.fixture(params=STORES)
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind, built by ``impl``."""
    async for one in open_store(request.param, request, tmp_path, "lt"):
        yield one


@pytest.fixture(params=SHARED_STORES)
async def shared(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind other processes can open too, built by ``impl``."""
    async for one in open_store(request.param, request, tmp_path, "lt"):
        yield one


@pytest.fixture
def memory(made: Made) -> LongTermMemory:
    return LongTermMemory(made.store)


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> str:
    """Whether a test calls the blocking methods or their ``async_`` twins."""
    return str(request.param)


async def call(way: str, memory: LongTermMemory, name: str, *args: Any, **kwargs: Any) -> Any:
    if way == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, "async_" + name)(*args, **kwargs)


def at(seconds: float) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


# ============================================================================ episodes


class TestEpisodes:
    """Episodes are stored whole and listed most recent first, filtered by agent, user, outcome."""

    async def test_record_and_list(self, memory: LongTermMemory, way: str) -> None:
        first = await call(
            way,
            memory,
            "record_episode",
            agent_id="bot",
            trigger="user_message",
            input={"text": "weather?"},
            messages=[{"role": "user", "content": "weather?"}],
            actions=[{"tool": "weather", "args": {"city": "Adelaide"}, "result": "sunny"}],
            success=True,
            output="sunny",
            user_id="u1",
            conversation_id="c1",
            started_at=at(0),
            ended_at=at(2.5),
            rating=4,
            comment="good",
        )
        assert isinstance(first, Episode)
        assert (first.duration, first.rating, first.success) == (2.5, 4.0, True)
        assert first.outcome.output == "sunny"
        failed = await call(
            way,
            memory,
            "record_episode",
            agent_id="bot",
            trigger="schedule",
            input=None,
            success=False,
            error="timeout",
            ended_at=at(10),
        )
        assert (failed.started_at, failed.duration, failed.outcome.error) == (
            at(10),
            0.0,
            "timeout",
        )
        other = await call(
            way, memory, "record_episode", agent_id="helper", trigger="t", input=1, success=True
        )
        listed = await call(way, memory, "episodes")
        assert [e.id for e in listed] == [other.id, failed.id, first.id]
        assert listed[2] == first  # every field survives the store
        assert [e.id for e in await call(way, memory, "episodes", agent_id="bot")] == [
            failed.id,
            first.id,
        ]
        assert [e.id for e in await call(way, memory, "episodes", user_id="u1")] == [first.id]
        assert [e.id for e in await call(way, memory, "episodes", success=False)] == [failed.id]
        assert [e.id for e in await call(way, memory, "episodes", limit=1)] == [other.id]
        tupled = await call(
            way, memory, "record_episode", agent_id="bot", trigger="t", input=(1, (2,)),
            success=True, output={"a": (3,)}, actions=({"tool": "x", "args": {"l": (4,)}},),
        )  # fmt: skip
        assert (tupled.input, tupled.outcome.output) == ([1, [2]], {"a": [3]})
        assert (await call(way, memory, "episodes", limit=1)) == [tupled]
        found = await call(way, memory, "recall", query="weather", memory_type="episodes")
        assert [e.id for e in found] == [first.id]


def _weather_model() -> FunctionModel:
    """Calls the weather tool once, then answers with what it returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(part, UserPromptPart) for part in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Adelaide"})])
        return ModelResponse(parts=[TextPart("sunny in Adelaide")])

    return FunctionModel(respond)


def _weather_agent() -> Agent[None, str]:
    agent = Agent(_weather_model())

    @agent.tool_plain
    def weather(city: str) -> dict[str, str]:
        return {"city": city, "sky": "sunny"}

    return agent


class City(BaseModel):
    name: str
    population: int


class TestEpisodeFromRun:
    """A pydantic-ai run becomes a stored episode: its messages, tool calls with returns, timing, output."""

    async def test_tool_calls_matched_with_returns(self, memory: LongTermMemory, way: str) -> None:
        history = await _weather_agent().run("earlier question")
        result = await _weather_agent().run(
            "weather in Adelaide?", message_history=history.all_messages()
        )
        episode = await call(
            way, memory, "episode_from_run", result, agent_id="bot", user_id="u1", rating=5
        )
        assert episode.trigger == "agent_run"
        assert episode.input == "weather in Adelaide?"
        assert episode.outcome.model_dump() == {
            "success": True,
            "output": "sunny in Adelaide",
            "error": None,
        }
        assert len(episode.actions) == 1
        action = episode.actions[0]
        assert (action["tool"], action["args"], action["result"], action["outcome"]) == (
            "weather",
            {"city": "Adelaide"},
            {"city": "Adelaide", "sky": "sunny"},
            "success",
        )
        # Only this run's messages, round-tripping as pydantic-ai messages.
        assert episode.model_messages() == result.new_messages()
        first, *_, last = result.new_messages()
        assert isinstance(first, ModelRequest)
        assert isinstance(last, ModelResponse)
        assert episode.started_at <= last.timestamp == episode.ended_at
        assert episode.duration == (episode.ended_at - episode.started_at).total_seconds()
        assert await call(way, memory, "episodes", user_id="u1") == [episode]

    async def test_structured_output(self, memory: LongTermMemory, way: str) -> None:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            args = {"name": "Lisbon", "population": 545000}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

        result = await Agent(FunctionModel(respond), output_type=City).run("a city")
        episode = await call(
            way, memory, "episode_from_run", result, agent_id="bot", trigger="cli", input="x"
        )
        assert (episode.trigger, episode.input) == ("cli", "x")
        assert episode.outcome.output == {"name": "Lisbon", "population": 545000}
        assert episode.actions == []  # the output tool carries the output, not an action

    def test_not_a_run_result(self) -> None:
        memory = LongTermMemory()
        with pytest.raises(TypeError, match="AgentRunResult"):
            memory.episode_from_run("nope", agent_id="bot")  # type: ignore[arg-type]
        assert memory.episodes() == []


# ============================================================================ procedures


class TestProcedures:
    """Procedures match goals by their conditions and keep a track record of their uses."""

    async def test_add_match_and_track(self, memory: LongTermMemory, way: str) -> None:
        weather = await call(
            way,
            memory,
            "add_procedure",
            "weather lookup",
            trigger_conditions={"goal_contains": ["Weather", "forecast"]},
            procedure_type="tool_sequence",
            content=({"tool": "weather", "args": {}},),
        )
        assert weather.content == [{"tool": "weather", "args": {}}]
        assert isinstance(weather, Procedure)
        assert (weather.times_used, weather.success_rate, weather.avg_duration) == (0, 0.0, None)
        greeting = await call(
            way,
            memory,
            "add_procedure",
            "greeting",
            trigger_conditions={"goal_contains_all": ["hello", "there"], "goal_excludes": "bye"},
            procedure_type="prompt_template",
            content="Say hello to {name}",
        )
        always = await call(
            way,
            memory,
            "add_procedure",
            "fallback",
            trigger_conditions={},
            procedure_type="code_snippet",
            content="pass",
        )
        names = [p.name for p in await call(way, memory, "procedures")]
        assert names == ["weather lookup", "greeting", "fallback"]
        assert await call(way, memory, "get_procedure", weather.id) == weather
        assert await call(way, memory, "get_procedure", "missing") is None

        async def matching(goal: str) -> list[str]:
            return [p.name for p in await call(way, memory, "match_procedures", goal)]

        assert await matching("What's the WEATHER like?") == ["weather lookup", "fallback"]
        assert await matching("hello THERE") == ["greeting", "fallback"]
        assert await matching("hello there, bye") == ["fallback"]
        assert await matching("hello") == ["fallback"]

        await call(way, memory, "record_procedure_use", weather.id, success=True, duration=2)
        await call(way, memory, "record_procedure_use", weather.id, success=False)
        used = await call(
            way, memory, "record_procedure_use", weather.id, success=True, duration=4.0
        )
        assert (used.times_used, used.successes) == (3, 2)
        assert used.success_rate == pytest.approx(2 / 3)
        assert used.avg_duration == 3.0
        assert await call(way, memory, "get_procedure", weather.id) == used
        await call(way, memory, "record_procedure_use", always.id, success=False)
        # The best track record first.
        assert await matching("weather") == ["weather lookup", "fallback"]
        assert greeting.procedure_type.value == "prompt_template"

        with pytest.raises(ProcedureNotFoundError, match="missing"):
            await call(way, memory, "record_procedure_use", "missing", success=True)
        found = await call(way, memory, "recall", query="forecast", memory_type="procedures")
        assert [p.name for p in found] == ["weather lookup"]


# ============================================================================ users


class TestUsers:
    """One person across channels: identified, merged, counted, in context, one thread."""

    async def test_identify(self, memory: LongTermMemory, way: str) -> None:
        ann = await call(way, memory, "identify_user", "telegram", 12345, display_name="Ann")
        assert (ann.canonical_id, ann.telegram_id, ann.email) == ("telegram:12345", "12345", None)
        assert ann.display_name == "Ann"
        again = await call(way, memory, "identify_user", "telegram", "12345")
        assert again == ann
        renamed = await call(way, memory, "identify_user", "telegram", "12345", display_name="A")
        assert (renamed.id, renamed.display_name) == (ann.id, "A")
        other = await call(way, memory, "identify_user", "email", "12345")
        assert other.id != ann.id
        assert await call(way, memory, "get_user", ann.id) == renamed
        assert await call(way, memory, "get_user", "missing") is None

    async def test_merge_activity_context_and_thread(
        self, memory: LongTermMemory, way: str
    ) -> None:
        ann = await call(way, memory, "identify_user", "telegram", "1", display_name="Ann")
        mail = await call(way, memory, "identify_user", "email", "ann@example.com")
        await call(
            way,
            memory,
            "remember",
            "color",
            "blue",
            scope="user",
            scope_id=mail.id,
            fact_type="user_preference",
        )
        await call(way, memory, "remember", "city", "Adelaide", scope="user", scope_id=mail.id)
        await call(
            way,
            memory,
            "remember",
            "color",
            "red",
            scope="user",
            scope_id=ann.id,
            fact_type="user_preference",
        )
        await call(way, memory, "record_user_activity", mail.id, messages=3, conversation_id="c1")
        await call(way, memory, "record_user_activity", ann.id, messages=2, conversation_id="c2")
        counted = await call(
            way, memory, "record_user_activity", ann.id, messages=1, conversation_id="c2"
        )
        assert (counted.message_count, counted.conversation_count) == (3, 1)
        assert counted.last_seen_at is not None
        episode = await call(
            way, memory, "record_episode", agent_id="bot", trigger="t", input="hi",
            success=True, user_id=mail.id,
        )  # fmt: skip
        thread = await call(way, memory, "thread_id", ann.id, "chat-9", "support")
        assert thread != await call(way, memory, "thread_id", mail.id, "chat-9", "support")

        merged = await call(way, memory, "merge_users", mail.id, ann.id)
        assert merged.id == ann.id
        assert merged.identifiers == {"telegram": ["1"], "email": ["ann@example.com"]}
        assert (merged.email, merged.canonical_id, merged.display_name) == (
            "ann@example.com",
            "telegram:1",
            "Ann",
        )
        assert (merged.message_count, merged.conversation_count) == (6, 2)
        assert merged.merged_ids == [mail.id]
        # The fact updated last wins; the other joins its history.
        assert merged.preferences == {"color": "red"}
        facts = {f.key: f for f in await call(way, memory, "facts", scope="user", scope_id=ann.id)}
        assert {k: f.value for k, f in facts.items()} == {"color": "red", "city": "Adelaide"}
        assert await call(way, memory, "facts", scope="user", scope_id=mail.id) == []

        # The merged user is found through every identifier and its old id.
        via_mail = await call(way, memory, "identify_user", "email", "ann@example.com")
        assert via_mail.id == ann.id
        assert (await call(way, memory, "get_user", mail.id)).id == ann.id
        retired = memory.store.load_by_key(USERS_NAMESPACE, mail.id)
        assert retired is not None
        assert retired.content["merged_into_id"] == ann.id
        # The same person on the same workflow continues one conversation on any channel.
        assert await call(way, memory, "thread_id", mail.id, 77, "support") == thread
        assert await call(way, memory, "thread_id", ann.id, "x", "sales") != thread

        context = await call(way, memory, "user_context", mail.id)
        assert isinstance(context, UserContext)
        assert context.user.id == ann.id
        assert context.preferences == {"color": "red"}
        assert sorted(f.key for f in context.facts) == ["city", "color"]
        assert context.recent_episodes == [episode]
        text = context.to_context_string()
        assert "User: Ann" in text
        assert "- color = red" in text
        assert "- t: hi (succeeded)" in text
        assert await call(way, memory, "merge_users", mail.id, ann.id) == merged  # no-op

    async def test_merges_chain(self, memory: LongTermMemory, way: str) -> None:
        a = await call(way, memory, "identify_user", "sms", "1")
        b = await call(way, memory, "identify_user", "sms", "2")
        c = await call(way, memory, "identify_user", "sms", "3")
        episode = await call(
            way, memory, "record_episode", agent_id="bot", trigger="t", input=None,
            success=True, user_id=a.id,
        )  # fmt: skip
        await call(way, memory, "merge_users", a.id, b.id)
        merged = await call(way, memory, "merge_users", b.id, c.id)
        assert merged.identifiers == {"sms": ["3", "2", "1"]}
        assert sorted(merged.merged_ids) == sorted([a.id, b.id])
        for number in "123":
            assert (await call(way, memory, "identify_user", "sms", number)).id == c.id
        assert (await call(way, memory, "user_context", a.id)).recent_episodes == [episode]
        # Merging what already became one user changes nothing.
        assert await call(way, memory, "merge_users", a.id, c.id) == merged

    async def test_preferences_follow_the_facts(self, memory: LongTermMemory, way: str) -> None:
        user = await call(way, memory, "identify_user", "slack", "U1")
        assert user.preferences == {}
        for value in ("en", "pt"):
            await call(
                way,
                memory,
                "remember",
                "language",
                value,
                scope="user",
                scope_id=user.id,
                fact_type="user_preference",
            )
            # The stored copy is refreshed at once, not only when read through the users API.
            stored = memory.store.load_by_key(USERS_NAMESPACE, user.id)
            assert stored is not None
            assert stored.content["preferences"] == {"language": value}
            assert (await call(way, memory, "get_user", user.id)).preferences == {"language": value}
        await call(way, memory, "forget", "language", scope="user", scope_id=user.id)
        stored = memory.store.load_by_key(USERS_NAMESPACE, user.id)
        assert stored is not None
        assert stored.content["preferences"] == {}
        assert (await call(way, memory, "identify_user", "slack", "U1")).preferences == {}
        context = await call(way, memory, "user_context", user.id)
        assert context.preferences == context.user.preferences == {}

    async def test_unknown_users(self, memory: LongTermMemory, way: str) -> None:
        known = await call(way, memory, "identify_user", "email", "a@b.c")
        for name, args in [
            ("merge_users", ("missing", known.id)),
            ("merge_users", (known.id, "missing")),
            ("user_context", ("missing",)),
            ("record_user_activity", ("missing",)),
            ("thread_id", ("missing", "chat", "wf")),
        ]:
            with pytest.raises(UserNotFoundError, match="missing"):
                await call(way, memory, name, *args)
        assert await call(way, memory, "get_user", known.id) == known


# ============================================================================ bad input


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    ("record_episode", (), {"agent_id": "", "trigger": "t", "input": 1, "success": True},
     ValueError, "agent_id"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": 1, "success": 1},
     TypeError, "success"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": {1}, "success": True},
     UnstorableValueError, "input"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": 1, "success": True,
                            "started_at": at(2), "ended_at": at(1)}, ValueError, "started_at"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": 1, "success": True,
                            "actions": [{"args": {}}]}, TypeError, "tool"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": 1, "success": True,
                            "messages": ["hi"]}, TypeError, "messages"),
    ("record_episode", (), {"agent_id": "a", "trigger": "t", "input": 1, "success": True,
                            "rating": float("nan")}, ValueError, "rating"),
    ("episodes", (), {"limit": 0}, ValueError, "limit"),
    ("add_procedure", ("p",), {"trigger_conditions": {"goal_regex": "x"},
                               "procedure_type": "code_snippet", "content": ""},
     ValueError, "goal_regex"),
    ("add_procedure", ("p",), {"trigger_conditions": {"goal_contains": []},
                               "procedure_type": "code_snippet", "content": ""},
     ValueError, "goal_contains"),
    ("add_procedure", ("p",), {"trigger_conditions": {}, "procedure_type": "recipe",
                               "content": ""}, ValueError, "procedure_type"),
    ("add_procedure", ("p",), {"trigger_conditions": {}, "procedure_type": "code_snippet",
                               "content": float("inf")}, UnstorableValueError, "content"),
    ("record_procedure_use", ("id",), {"success": True, "duration": -1}, ValueError, "duration"),
    ("match_procedures", (None,), {}, TypeError, "goal"),
    ("identify_user", ("tele:gram", "1"), {}, ValueError, "channel"),
    ("identify_user", ("telegram", 1.5), {}, TypeError, "channel_user_id"),
    ("identify_user", ("telegram", ""), {}, ValueError, "channel_user_id"),
    ("record_user_activity", ("u",), {"messages": -1}, ValueError, "messages"),
    ("thread_id", ("u", None, "wf"), {}, TypeError, "chat_id"),
]  # fmt: skip


class TestBadInputWritesNothing:
    """A bad argument is a ValueError or TypeError naming it, and nothing is written."""

    @pytest.mark.parametrize(
        ("name", "args", "kwargs", "error", "names"),
        BAD_CALLS,
        ids=[f"{c[0]}-{c[4]}-{i}" for i, c in enumerate(BAD_CALLS)],
    )
    async def test_rejected(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        names: str,
        way: str,
    ) -> None:
        memory = LongTermMemory()
        with pytest.raises(error, match=names):
            await call(way, memory, name, *args, **kwargs)
        assert memory.store.namespaces() == []

    async def test_on_every_store(self, memory: LongTermMemory, way: str) -> None:
        with pytest.raises(UnstorableValueError, match="output"):
            await call(
                way, memory, "record_episode", agent_id="a", trigger="t", input=1,
                success=True, output={"when": datetime.now(UTC)},
            )  # fmt: skip
        with pytest.raises(ValueError, match="goal_matches"):
            await call(
                way, memory, "add_procedure", "p", trigger_conditions={"goal_matches": "x"},
                procedure_type="code_snippet", content="",
            )  # fmt: skip
        assert await call(way, memory, "episodes") == []
        assert await call(way, memory, "procedures") == []


# ============================================================================ concurrency


class TestConcurrentWriters:
    """Writers racing in tasks, threads and processes: one user per identifier, every use counted."""

    async def test_tasks_and_threads(self, memory: LongTermMemory) -> None:
        procedure = await memory.async_add_procedure(
            "p", trigger_conditions={}, procedure_type="code_snippet", content=""
        )

        async def task() -> list[str]:
            ids = []
            for i in range(3):
                ids.append((await memory.async_identify_user("telegram", f"n{i}")).id)
                await memory.async_record_procedure_use(procedure.id, success=True, duration=1)
            return ids

        def thread() -> list[str]:
            ids = []
            for i in range(3):
                ids.append(memory.identify_user("telegram", f"n{i}").id)
                memory.record_procedure_use(procedure.id, success=False)
            return ids

        results = await asyncio.gather(
            task(), task(), asyncio.to_thread(thread), asyncio.to_thread(thread)
        )
        assert all(r == results[0] for r in results)
        users = [e for e in await memory.store.async_load(USERS_NAMESPACE) if e.key]
        assert len(users) == 3
        used = await memory.async_get_procedure(procedure.id)
        assert used is not None
        assert (used.times_used, used.successes, used.avg_duration) == (12, 6, 1.0)

    async def test_activity_racing_a_merge(self, memory: LongTermMemory) -> None:
        kept = await memory.async_identify_user("telegram", "1")
        merged = await memory.async_identify_user("email", "a@example.com")

        async def task() -> None:
            for _ in range(8):
                await memory.async_record_user_activity(merged.id, messages=1)

        def thread() -> None:
            for _ in range(8):
                memory.record_user_activity(merged.id, messages=2)

        def merge() -> None:
            memory.merge_users(merged.id, kept.id)

        await asyncio.gather(
            task(), asyncio.to_thread(thread), asyncio.to_thread(merge), asyncio.to_thread(thread)
        )
        # Whether a call landed before the merge or after it, it counts on the survivor.
        user = await memory.async_get_user(merged.id)
        assert user is not None
        assert (user.id, user.message_count) == (kept.id, 40)

    async def test_processes(self, shared: Made, impl: _backend.Implementation) -> None:
        memory = LongTermMemory(shared.store)
        procedure = await memory.async_add_procedure(
            "p", trigger_conditions={}, procedure_type="code_snippet", content=""
        )
        cfg = {"kind": shared.kind, **shared.cfg, "rounds": 10, "procedure": procedure.id}
        outputs = await asyncio.to_thread(_race, cfg, impl, 2)
        assert outputs[0] == outputs[1]  # every new identifier: the same user in both
        users = [e for e in await memory.store.async_load(USERS_NAMESPACE) if e.key]
        assert sorted(e.key or "" for e in users) == sorted(outputs[0])
        used = await memory.async_get_procedure(procedure.id)
        assert used is not None
        assert (used.times_used, used.successes, used.durations_recorded) == (20, 10, 20)


def _race(cfg: dict[str, Any], impl: _backend.Implementation, n: int) -> list[list[str]]:
    """Starts ``n`` worker processes on one store, lets them race, returns what each printed."""
    env = dict(os.environ)
    env.pop("MEMLANE_PURE_PYTHON", None)
    if impl.name == "python":
        env["MEMLANE_PURE_PYTHON"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps({**cfg, "label": i})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(n)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                proc.wait(timeout=STEP_TIMEOUT)
                assert proc.stderr is not None
                pytest.fail(f"worker exited with {proc.returncode}:\n{proc.stderr.read()}")
        for proc in procs:  # all are ready: start them together
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=STEP_TIMEOUT)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


WORKER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")  # e.g. the partial-index fallback notice of FerretDB
cfg = json.loads(sys.argv[1])
from memlane.longterm import LongTermMemory
from memlane.stores import FileStore, MongoDBStore, PostgreSQLStore, SQLiteStore

kind = cfg["kind"]
if kind == "postgres":
    store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
elif kind == "mongodb":
    store = MongoDBStore(cfg["url"], collection=cfg["name"], pool_size=2)
elif kind == "sqlite":
    store = SQLiteStore(cfg["path"])
else:
    store = FileStore(cfg["path"])
memory = LongTermMemory(store)
memory.get_procedure(cfg["procedure"])  # connected before the race starts
print("ready", flush=True)
sys.stdin.readline()
ids = []
for i in range(cfg["rounds"]):
    ids.append(memory.identify_user("telegram", f"new-{i}").id)
    memory.record_procedure_use(cfg["procedure"], success=cfg["label"] == 0, duration=0.5)
print(json.dumps(ids), flush=True)
store.close()
"""
