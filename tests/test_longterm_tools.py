"""memory_tools: the recall and remember tools under real pydantic-ai agents on the offline
FunctionModel, on every store and both implementations, with the exact answers the issue
fixes; plus the toolset's settings and how refused arguments reach the model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memlane import FileStore, InMemoryStore, MemoryManager, SQLiteStore, _backend
from memlane.agents import memory_tools
from memlane.longterm import LongTermMemory
from memlane.stores import MemoryStore
from test_database_stores import StoreFactory, initialized, server_for
from test_database_vectors import pgvector_server  # noqa: F401  # a fixture pytest finds here
from test_longterm_semantic import VECTOR_STORES, vector_store

STORES = ["memory", "file", "sqlite", "postgres", "mongodb"]

Call = tuple[str, dict[str, Any]]


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[MemoryStore]:
    """Each store kind, built by ``impl``."""
    kind = request.param
    if kind in ("postgres", "mongodb"):
        factory = StoreFactory(kind, server_for(request, kind))
        yield await initialized(factory.make())
        await factory.cleanup()
        return
    local: MemoryStore
    if kind == "memory":
        local = InMemoryStore()
    elif kind == "sqlite":
        local = SQLiteStore(tmp_path / "tools.sqlite3")
    else:
        local = FileStore(tmp_path / "tools")
    yield local
    local.close()


def scripted(calls: list[Call]) -> tuple[FunctionModel, list[str]]:
    """A model that makes ``calls`` one per step, then answers; and the tool answers it saw."""
    seen: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    seen.append(part.model_response_str())
                elif isinstance(part, RetryPromptPart):
                    seen.append(f"retry: {part.model_response()}")
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step < len(calls):
            name, args = calls[step]
            return ModelResponse(parts=[ToolCallPart(name, args)])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond), seen


async def run(long_term: LongTermMemory, calls: list[Call], **settings: Any) -> list[str]:
    model, seen = scripted(calls)
    agent = Agent(model, toolsets=[memory_tools(long_term, **settings)])
    result = await agent.run("go")
    assert result.output == "done"
    return seen


class TestToolAnswers:
    """remember and recall answer exactly in the issue's format, on every store."""

    async def test_remember_then_recall(self, store: MemoryStore) -> None:
        memory = LongTermMemory(store)
        seen = await run(
            memory,
            [
                ("remember", {"key": "color", "value": "blue"}),
                ("remember", {"key": "color", "value": "blue"}),
                ("remember", {"key": "color", "value": "red"}),
                ("remember", {"key": "timezone", "value": "Australia/Adelaide"}),
                ("remember", {"key": "sizes", "value": [1, 2]}),
                ("recall", {"key": "timezone"}),
                ("recall", {"key": "color"}),
                ("recall", {"query": "adelaide"}),
                ("recall", {"key": "time"}),
                ("recall", {}),
                ("recall", {"key": "nothing here"}),
                ("recall", {"query": "zzz"}),
            ],
        )
        assert seen == [
            "Remembered: color = blue (created)",
            "Remembered: color = blue (confirmed)",
            "Remembered: color = red (updated)",
            "Remembered: timezone = Australia/Adelaide (created)",
            "Remembered: sizes = [1, 2] (created)",
            "timezone = Australia/Adelaide",
            "color = red",
            "timezone = Australia/Adelaide",
            "timezone = Australia/Adelaide",
            "color = red\ntimezone = Australia/Adelaide\nsizes = [1, 2]",
            "Nothing remembered about nothing here.",
            "Nothing remembered about zzz.",
        ]
        fact = await memory.async_get_fact("color")
        assert fact is not None
        assert (fact.value, fact.times_confirmed, [r.value for r in fact.history]) == (
            "red",
            2,
            ["blue"],
        )


class TestToolSettings:
    """The toolset's settings shape what the tools write and what they see."""

    async def test_scope_type_and_overwrite(self) -> None:
        memory = LongTermMemory()
        await memory.async_remember("lang", "en", scope="user", scope_id="u1")
        seen = await run(
            memory,
            [
                ("remember", {"key": "lang", "value": "fr"}),
                ("remember", {"key": "pet", "value": {"name": "Rex"}}),
                ("recall", {}),
            ],
            scope="user",
            scope_id="u1",
            user_id="u1",
            fact_type="user_preference",
            overwrite=False,
        )
        assert seen == [
            "Remembered: lang = en (skipped)",
            'Remembered: pet = {"name": "Rex"} (created)',
            'lang = en\npet = {"name": "Rex"}',
        ]
        pet = await memory.async_get_fact("pet", user_id="u1")
        assert pet is not None
        assert pet.fact_type.value == "user_preference"
        assert await memory.async_get_fact("pet") is None  # written to the user's scope

    async def test_min_confidence_limit_and_other_memories(self) -> None:
        memory = LongTermMemory()
        await memory.async_remember("a_weak", 1, confidence=0.2)
        await memory.async_remember("b_strong", 2, confidence=0.9)
        await memory.async_remember("c_mid", 3, confidence=0.7)
        await memory.async_add_procedure(
            "weather lookup",
            trigger_conditions={"goal_contains": ["weather"]},
            procedure_type="tool_sequence",
            content=["get_weather"],
        )
        await memory.async_record_episode(
            agent_id="a", trigger="chat", input="weather today?", success=True, output="sunny"
        )
        assert await run(memory, [("recall", {})], limit=1) == ["b_strong = 2"]
        assert await run(memory, [("recall", {})], min_confidence=0.0) == [
            "b_strong = 2\nc_mid = 3\na_weak = 1"
        ]
        assert await run(memory, [("recall", {"query": "weather"})], memory_type="all") == [
            'procedure weather lookup = ["get_weather"]\nepisode chat = weather today? -> sunny'
        ]

    def test_refused_settings(self) -> None:
        memory = LongTermMemory()
        bad: list[tuple[dict[str, Any], type[Exception], str]] = [
            ({"memory_type": "dreams"}, ValueError, "memory_type"),
            ({"limit": 0}, ValueError, "limit"),
            ({"min_confidence": 3}, ValueError, "min_confidence"),
            ({"fact_type": "gossip"}, ValueError, "fact_type"),
            ({"overwrite": 1}, TypeError, "overwrite"),
            ({"scope": "user"}, ValueError, "scope_id"),
            ({"scope_id": "u"}, ValueError, "global"),
            ({"user_id": ""}, ValueError, "user_id"),
        ]
        for settings, error, message in bad:
            with pytest.raises(error, match=message):
                memory_tools(memory, **settings)
        with pytest.raises(TypeError, match="long_term must be LongTermMemory"):
            memory_tools(InMemoryStore())  # type: ignore[arg-type]


class TestRefusedArgumentsReachTheModel:
    """An argument the memory refuses is a retry prompt naming it; nothing is written."""

    async def test_retry_prompts(self) -> None:
        memory = LongTermMemory()
        seen = await run(
            memory,
            [
                ("remember", {"key": "", "value": "x"}),
                ("recall", {"query": " _ "}),
                ("remember", {"key": "ok", "value": "fine"}),
            ],
        )
        # pydantic-ai may send a tool's ModelRetry back as a retry prompt or an error return.
        assert "key must be a non-empty string" in seen[0]
        assert "query must hold at least one word" in seen[1]
        assert seen[2] == "Remembered: ok = fine (created)"
        assert [f.key for f in await memory.async_facts()] == ["ok"]


class TestUnderTestModel:
    """pydantic-ai's TestModel calls every tool with generated arguments; both answer."""

    async def test_every_tool_is_called(self) -> None:
        memory = LongTermMemory()
        agent = Agent(TestModel(), toolsets=[memory_tools(memory)])
        result = await agent.run("go")
        returns = [
            part
            for message in result.all_messages()
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        assert sorted(part.tool_name for part in returns) == ["recall", "remember"]
        remembered = next(p for p in returns if p.tool_name == "remember")
        assert remembered.model_response_str().startswith("Remembered: ")
        assert len(await memory.async_facts()) == 1


class TestSyncAgentRun:
    """The tools work from run_sync too, over a manager's long-term memory."""

    def test_run_sync_on_a_manager(self, tmp_path: Path) -> None:
        with SQLiteStore(tmp_path / "m.sqlite3") as store:
            manager = MemoryManager(store=store, long_term=True)
            assert manager.long_term is not None
            model, seen = scripted(
                [("remember", {"key": "k", "value": 1.5}), ("recall", {"key": "k"})]
            )
            Agent(model, toolsets=[memory_tools(manager.long_term)]).run_sync("go")
            assert seen == ["Remembered: k = 1.5 (created)", "k = 1.5"]
            fact = manager.long_term.get_fact("k")
            assert fact is not None
            assert fact.value == 1.5


@pytest.fixture(params=VECTOR_STORES)
async def vstore(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[MemoryStore]:
    """Each store kind that keeps vectors (PostgreSQL with and without pgvector), by ``impl``."""
    async for kept in vector_store(request, tmp_path):
        yield kept


class TestRecallByMeaning:
    """With an embedder, recall(query=...) is long-term memory's hybrid search."""

    async def test_a_question_in_other_words(self, vstore: MemoryStore) -> None:
        memory = LongTermMemory(vstore, embedder="local")
        await memory.async_remember_many(
            {
                "coffee_order": "Ada drinks coffee black, no sugar",
                "pet": "Ada has a grey cat called Turing",
                "invoice": "Invoice INV-48213 was paid on Tuesday",
                "time_local": "09:30",
                "local_time_zone": "Australia/Adelaide",
            },
            scope="user",
            scope_id="ada",
        )
        await memory.async_flush()
        seen = await run(
            memory,
            [
                ("recall", {"query": "how does she take her hot drink"}),
                ("recall", {"query": "was INV-48213 paid"}),
                ("recall", {"key": "local time"}),
                ("recall", {"key": "pet"}),
            ],
            user_id="ada",
            limit=1,
        )
        assert seen == [
            "coffee_order = Ada drinks coffee black, no sugar",
            "invoice = Invoice INV-48213 was paid on Tuesday",
            "local_time_zone = Australia/Adelaide",  # keys keep the fuzzy rule
            "pet = Ada has a grey cat called Turing",
        ]

    async def test_memory_agent_recalls_by_meaning(self) -> None:
        from memlane.agents import MemoryAgent

        memory = LongTermMemory(embedder="local")
        memory.remember("coffee_order", "Ada drinks coffee black, no sugar", scope="user",
                        scope_id="ada")  # fmt: skip
        memory.flush()
        model, seen = scripted([("recall", {"query": "how does she take her hot drink"})])
        agent = MemoryAgent(model, memory=MemoryManager(), long_term=memory, user_id="ada")
        result = await agent.run("How should I make Ada's coffee?", conversation_id="c1")
        assert result.output == "done"
        assert seen[0].splitlines()[0] == "coffee_order = Ada drinks coffee black, no sugar"
