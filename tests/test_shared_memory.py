"""memlane.shared in one process: builders and the message rule, SharedStateStore under 500
coroutines, the in-memory memories, a custom BaseMessageStore with only five methods under
every memory, views as pydantic-ai messages, DelegationRouter's record, and configuration."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from memlane import MemoryManager, SQLiteStore, TokenEstimator
from memlane.agents import DelegationRouter, RoundRobinStrategy
from memlane.shared import (
    BaseMemory,
    BaseMessageStore,
    HierarchicalMessageStoreMemory,
    LocalAgentMemory,
    ManagerHistoryFilter,
    MessageStoreMemory,
    OrchestratorHistoryFilter,
    ProcessSharedMemory,
    SharedMemory,
    SharedStateStore,
    StoreMessageStore,
    WorkerHistoryFilter,
    constants,
    render,
    to_model_messages,
)
from memlane.shared.message_builder import (
    create_action,
    create_assistant_message,
    create_error,
    create_final,
    create_observation,
    create_script_instruction,
    create_strategic_plan,
    create_suggested_plan,
    create_synthesis,
    create_task_entry,
    create_user_message,
)

Message = dict[str, Any]


def contents(messages: list[Message]) -> list[Any]:
    return [m["content"] for m in messages]


class TestBuilders:
    """Builders make the documented fields with an ISO-8601 UTC timestamp."""

    def test_fields(self) -> None:
        assert create_user_message("hi")["type"] == constants.USER_MESSAGE
        assert create_assistant_message("yo")["type"] == constants.ASSISTANT_MESSAGE
        action = create_action("search", {"q": "x"}, agent_key="w")
        assert (action["type"], action["tool"], action["args"], action["agent_key"]) == (
            "action",
            "search",
            {"q": "x"},
            "w",
        )
        assert create_synthesis("s", phase_id=2)["phase_id"] == 2
        built = [
            create_task_entry("t"),
            create_observation("o"),
            create_error("e"),
            create_final("f"),
            create_strategic_plan("p"),
            create_suggested_plan("p"),
            create_script_instruction("i"),
        ]
        assert [m["type"] for m in built] == [
            "task", "observation", "error", "final",
            "strategic_plan", "suggested_plan", "script_instruction",
        ]  # fmt: skip
        for message in built:
            stamp = datetime.fromisoformat(message["timestamp"])
            offset = stamp.utcoffset()
            assert offset is not None
            assert offset.total_seconds() == 0
            assert "agent_key" not in message
        assert set(constants.MESSAGE_TYPES) >= constants.CONVERSATION_TYPES

    def test_bad_builder_input(self) -> None:
        with pytest.raises(TypeError, match="tool"):
            create_action(3, {})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="JSON"):
            create_action("t", {"x": object()})
        with pytest.raises(ValueError, match="JSON"):
            create_final({1, 2})
        with pytest.raises(ValueError, match="agent_key"):
            create_final("x", agent_key="")


class TestSharedStateStore:
    """The process-wide state: the framework API, hundreds of coroutines losing nothing."""

    async def test_api(self) -> None:
        state = SharedStateStore()
        await state.async_append_agent_message("job", "w1", {"type": "action", "content": "a"})
        await state.async_append_global_message(
            "job", {"type": "global_observation", "content": "g"}
        )
        await state.async_append_conversation_message("job", create_user_message("u"))
        assert contents(await state.async_get_agent_messages("job", "w1")) == ["a"]
        assert contents(await state.async_get_global_messages("job")) == ["g"]
        assert contents(await state.async_get_conversation_messages("job")) == ["u"]
        assert await state.async_get_agent_messages("other", "w1") == []
        with pytest.raises(ValueError, match="conversation"):
            await state.async_append_conversation_message("job", create_final("f"))
        assert SharedStateStore.default() is SharedStateStore.default()

    async def test_an_agent_message_of_any_type_is_listed(self) -> None:
        # append_agent_msg writes to the agent's feed whatever the type, as in the framework.
        state = SharedStateStore()
        await state.async_append_agent_message("job", "w1", create_user_message("u"))
        await state.async_append_agent_message("job", "w1", create_assistant_message("a"))
        assert contents(await state.async_get_agent_messages("job", "w1")) == ["u", "a"]
        assert await state.async_get_conversation_messages("job") == []
        memory = ProcessSharedMemory("job", "w1", state=state)
        assert contents(await memory.async_get_message_history()) == ["u", "a"]
        with pytest.raises(ValueError, match="namespace"):
            await state.async_append_agent_message("", "w1", create_user_message("u"))

    async def test_500_coroutines_and_threads(self) -> None:
        state = SharedStateStore()

        async def step(i: int) -> None:
            memory = ProcessSharedMemory("job", f"a{i % 5}", state=state)
            await memory.async_add_message(create_action("step", {"i": i}))
            await memory.async_add_message(create_observation(str(i)))

        def thread(t: int) -> None:
            for i in range(50):
                state.append("job", create_final(f"t{t}:{i}", agent_key="threads"))

        await asyncio.gather(
            *(step(i) for i in range(500)), *(asyncio.to_thread(thread, t) for t in range(4))
        )
        for agent in range(5):
            seen = contents(state.get_agent_messages("job", f"a{agent}"))
            assert len(seen) == 200
            for i in range(agent, 500, 5):
                assert seen.index(f'step({{"i": {i}}})') < seen.index(str(i))
        threads = contents(state.get_agent_messages("job", "threads"))
        assert sorted(threads) == sorted(f"t{t}:{i}" for t in range(4) for i in range(50))
        for t in range(4):
            assert [c for c in threads if c.startswith(f"t{t}:")] == [
                f"t{t}:{i}" for i in range(50)
            ]


class TestInMemoryMemories:
    """LocalAgentMemory is one agent's own; ProcessSharedMemory shares by namespace."""

    async def test_in_memory_memory(self) -> None:
        memory, other = LocalAgentMemory(), LocalAgentMemory()
        assert isinstance(memory, BaseMemory)
        await memory.async_add_message(create_user_message("u"))
        await memory.async_add_message({"type": "action", "content": "a"})
        await memory.async_add_message(create_observation("o"))
        assert contents(await memory.async_get_message_history()) == ["u", "a", "o"]
        assert await other.async_get_message_history() == []
        assert contents(await memory.async_get_message_history(limit=2)) == ["a", "o"]

    async def test_shared_in_memory_memory(self) -> None:
        state = SharedStateStore()
        w1 = ProcessSharedMemory("job", "worker_1", state=state)
        w2 = ProcessSharedMemory("job", "worker_2", state=state)
        elsewhere = ProcessSharedMemory("other", "worker_2", state=state)
        await w1.async_add_message(create_action("t", {}))
        await w1.async_add_global_message({"type": "global_observation", "content": "g"})
        assert contents(await w2.async_get_message_history()) == ["t({})", "g"]
        assert contents(await w2.async_get_message_history(filter=WorkerHistoryFilter())) == ["g"]
        assert await elsewhere.async_get_message_history() == []
        assert w1.namespace == "job"

    async def test_the_default_state_is_process_wide(self) -> None:
        a = ProcessSharedMemory("test_shared_memory:default", "a")
        b = ProcessSharedMemory("test_shared_memory:default", "b")
        await a.async_add_message(create_final("from a"))
        assert "from a" in contents(await b.async_get_message_history())


class FiveMethodStore(BaseMessageStore):
    """A message store written against the five methods alone, without timestamps."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, Message]] = []

    def _pick(self, location: str, keep: Any, limit: int | None) -> list[Message]:
        found = [
            {k: v for k, v in m.items() if k != "timestamp"}
            for loc, m in self.rows
            if loc == location and keep(m)
        ]
        return found if limit is None else found[-limit:]

    def get_conversation_messages(self, location: str, limit: int | None = None) -> list[Message]:
        return self._pick(
            location, lambda m: m["type"] in ("user_message", "assistant_message"), limit
        )

    def get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> list[Message]:
        return self._pick(
            location,
            lambda m: (
                m.get("agent_key") == agent_key
                and not m.get("is_global")
                and m["type"] not in ("user_message", "assistant_message")
            ),
            limit,
        )

    def get_global_messages(self, location: str, limit: int | None = None) -> list[Message]:
        return self._pick(location, lambda m: bool(m.get("is_global")), limit)

    def get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> list[Message]:
        return self._pick(
            location,
            lambda m: (
                m.get("agent_key") in agent_keys
                and not m.get("is_global")
                and m["type"] not in ("user_message", "assistant_message")
            ),
            limit,
        )

    def append(self, location: str, message: Message) -> None:
        self.rows.append((location, message))


class ByKeyStore(FiveMethodStore):
    """The frameworks' example store: a trace is every message naming the agent, the
    conversation every user or assistant message, broadcasts included."""

    def get_conversation_messages(self, location: str, limit: int | None = None) -> list[Message]:
        return self._pick(
            location, lambda m: m.get("type") in ("user_message", "assistant_message"), limit
        )

    def get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> list[Message]:
        return self._pick(location, lambda m: m.get("agent_key") == agent_key, limit)

    def get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> list[Message]:
        return self._pick(location, lambda m: m.get("agent_key") in agent_keys, limit)


class TestCustomMessageStore:
    """A BaseMessageStore with only the five methods works with every message-store memory."""

    async def test_every_memory_and_filter(self) -> None:
        store = FiveMethodStore()
        manager = HierarchicalMessageStoreMemory(store, "job", "boss", ["w1", "w2"])
        w1 = MessageStoreMemory(store, "job", "w1")
        w2 = MessageStoreMemory(store, "job", "w2")
        await manager.async_add_message(create_user_message("u"))
        await manager.async_add_message(create_task_entry("t1", agent_key="w1"))
        await w1.async_add_message(create_action("a", {}))
        await w1.async_add_message(create_observation("o1"))
        await w2.async_add_message(create_final("f2"))
        await manager.async_add_global_message({"type": "global_observation", "content": "g"})
        # Without timestamps, views list conversation, then traces, then broadcasts.
        assert contents(await w1.async_get_message_history()) == ["u", "t1", "a({})", "o1", "g"]
        assert contents(await w2.async_get_message_history()) == ["u", "f2", "g"]
        assert contents(await manager.async_get_message_history()) == [
            "t1",
            "a({})",
            "o1",
            "f2",
            "g",
        ]
        assert contents(await manager.async_get_message_history(filter=ManagerHistoryFilter())) == [
            "f2",
            "g",
        ]
        assert contents(await w1.async_get_message_history(filter=WorkerHistoryFilter())) == [
            "u", "t1", "a({})", "o1", "g",
        ]  # fmt: skip
        orchestrator = await manager.async_get_message_history(filter=OrchestratorHistoryFilter(1))
        assert contents(orchestrator) == ["u"]
        assert contents(await w1.async_get_message_history(limit=2)) == ["o1", "g"]
        budgeted = await w1.async_get_message_history(max_tokens=25)
        assert budgeted
        assert budgeted[0]["type"] != "observation"
        assert (
            contents(budgeted) == contents(await w1.async_get_message_history())[-len(budgeted) :]
        )

    async def test_feeds_that_overlap_list_each_message_once(self) -> None:
        # The frameworks' example stores select a trace by agent_key alone and the
        # conversation by type alone, so a broadcast also comes back in its sender's trace and
        # a conversation message naming an agent in that agent's trace.
        store = ByKeyStore()
        boss = HierarchicalMessageStoreMemory(store, "job", "boss", subordinates=["w1", "w2"])
        w1 = MessageStoreMemory(store, "job", "w1")
        await w1.async_add_message({"type": "user_message", "content": "u", "agent_key": "w1"})
        await w1.async_add_message(create_task_entry("t"))
        await w1.async_add_global_message({"type": "global_observation", "content": "g1"})
        await boss.async_add_global_message({"type": "global_observation", "content": "g2"})
        await boss.async_add_global_message(create_user_message("gu"))
        assert contents(await w1.async_get_message_history()) == ["u", "t", "g1", "g2", "gu"]
        assert contents(await w1.async_get_message_history(limit=4)) == ["t", "g1", "g2", "gu"]
        assert contents(await w1.async_get_message_history(filter=WorkerHistoryFilter())) == [
            "u", "t", "g1", "g2", "gu",
        ]  # fmt: skip
        assert contents(await boss.async_get_message_history()) == ["t", "g1", "g2", "gu"]
        assert contents(await boss.async_get_message_history(filter=ManagerHistoryFilter())) == [
            "g1", "g2", "gu",
        ]  # fmt: skip

    def test_not_a_message_store(self) -> None:
        with pytest.raises(TypeError, match="BaseMessageStore"):
            MessageStoreMemory(object(), "job", "w")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="abstract"):
            BaseMessageStore()  # type: ignore[abstract]


class TestModelMessages:
    """A view becomes pydantic-ai messages a worker agent runs with."""

    async def test_a_worker_runs_with_its_view(self) -> None:
        memory = LocalAgentMemory()
        await memory.async_add_message(create_user_message("count the rows"))
        await memory.async_add_message(create_action("count", {"table": "sales"}, agent_key="w"))
        await memory.async_add_message(create_observation("42", agent_key="w"))
        await memory.async_add_message(create_assistant_message("there are 42"))
        history = to_model_messages(await memory.async_get_message_history())
        assert [type(m) for m in history] == [ModelRequest, ModelResponse]
        request = history[0]
        assert isinstance(request, ModelRequest)
        assert [p.content for p in request.parts if isinstance(p, UserPromptPart)] == [
            "count the rows",
            '[action from w] count({"table": "sales"})',
            "[observation from w] 42",
        ]
        seen: list[list[ModelMessage]] = []

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            seen.append(messages)
            return ModelResponse(parts=[TextPart("done")])

        result = await Agent(FunctionModel(respond)).run("and now?", message_history=history)
        assert result.output == "done"
        assert seen[0][:2] == history
        assert to_model_messages(await memory.async_get_message_history()) == history
        with pytest.raises(TypeError, match="dict"):
            to_model_messages(["text"])  # type: ignore[list-item]

    def test_render(self) -> None:
        assert render(create_user_message("hi")) == "hi"
        synthesis = create_synthesis({"total": 3}, phase_id=1, agent_key="m")
        assert render(synthesis) == '[synthesis from m, phase 1] {"total": 3}'
        broadcast = {"type": "note", "content": "x", "is_global": True}
        assert render(broadcast) == "[global note] x"


class TestDelegationRecord:
    """DelegationRouter(shared=...) records each delegate's task, actions, observations,
    errors and final output under its name."""

    async def test_record(self, tmp_path: Path) -> None:
        with SQLiteStore(tmp_path / "shared.sqlite3") as store:
            shared = SharedMemory(store, "job", "manager")

            def lookup(city: str) -> str:
                """Looks a city up."""
                return f"{city} has 3 parks"

            researcher = Agent(TestModel(), name="researcher", tools=[lookup])

            def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                raise RuntimeError("model down")

            writer = Agent(FunctionModel(fail), name="writer")
            router = DelegationRouter(
                [researcher, writer], RoundRobinStrategy(), memory=MemoryManager(), shared=shared
            )
            first = await router.route("find parks")
            with pytest.raises(RuntimeError, match="model down"):
                await router.route("write it up")
            manager = HierarchicalMessageStoreMemory(
                StoreMessageStore(store), "job", "manager", ["researcher", "writer"]
            )
            view = await manager.async_get_message_history()
            assert [(m["agent_key"], m["type"]) for m in view] == [
                ("researcher", "task"),
                ("researcher", "action"),
                ("researcher", "observation"),
                ("researcher", "final"),
                ("writer", "task"),
                ("writer", "error"),
            ]
            assert view[0]["content"] == "find parks"
            assert view[1]["tool"] == "lookup"
            assert "has 3 parks" in view[2]["content"]
            assert view[3]["content"] == first.output
            assert view[5]["content"] == "RuntimeError: model down"
            results = await manager.async_get_message_history(filter=ManagerHistoryFilter())
            assert [m["type"] for m in results] == ["final"]

    def test_shared_must_be_a_memory(self) -> None:
        with pytest.raises(TypeError, match="shared"):
            DelegationRouter(
                [Agent(TestModel(), name="a")],
                RoundRobinStrategy(),
                memory=MemoryManager(),
                shared="job",  # type: ignore[arg-type]
            )


class TestConfig:
    """BaseMemory.from_config builds memories from a dict or YAML, ${VAR} from the environment."""

    def test_dict(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("JOB_ID", "job-7")
        memory = BaseMemory.from_config(
            {"type": "ProcessSharedMemory", "config": {"namespace": "${JOB_ID}", "agent_key": "w"}}
        )
        assert isinstance(memory, ProcessSharedMemory)
        assert (memory.namespace, memory.agent_key) == ("job-7", "w")
        assert isinstance(BaseMemory.from_config({"type": "standalone"}), LocalAgentMemory)

    def test_missing_variable_is_named(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("MEMLANE_NO_SUCH_JOB", raising=False)
        options = {"namespace": "${MEMLANE_NO_SUCH_JOB}", "agent_key": "w"}
        config = {"type": "ProcessSharedMemory", "config": options}
        with pytest.raises(ValueError, match="MEMLANE_NO_SUCH_JOB"):
            BaseMemory.from_config(config)
        options["namespace"] = "${MEMLANE_NO_SUCH_JOB:-fallback}"
        fallback = BaseMemory.from_config(config)
        assert isinstance(fallback, ProcessSharedMemory)
        assert fallback.namespace == "fallback"

    async def test_yaml_presets_and_stores(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("JOB_ID", "job-9")
        db = tmp_path / "shared.sqlite3"
        (tmp_path / "worker.yaml").write_text(
            "type: worker\n"
            "config:\n"
            "  namespace: ${JOB_ID}\n"
            "  agent_key: worker_1\n"
            f"  store: {{type: sqlite, path: '{db}'}}\n"
        )
        (tmp_path / "manager.yaml").write_text(
            "type: manager\n"
            "config:\n"
            "  namespace: ${JOB_ID}\n"
            "  agent_key: boss\n"
            "  subordinates: [worker_1]\n"
            f"  store: {{type: sqlite, path: '{db}'}}\n"
        )
        worker = BaseMemory.from_config(tmp_path / "worker.yaml")
        manager = BaseMemory.from_config(str(tmp_path / "manager.yaml"))
        assert isinstance(worker, SharedMemory)
        assert isinstance(worker.filter, WorkerHistoryFilter)
        assert isinstance(manager, SharedMemory)
        assert isinstance(manager.filter, ManagerHistoryFilter)
        await worker.async_add_message(create_action("a", {}))
        await worker.async_add_message(create_final("f"))
        assert contents(await manager.async_get_message_history()) == ["f"]
        hierarchical = BaseMemory.from_config(
            {
                "type": "HierarchicalMessageStoreMemory",
                "config": {
                    "location": "job-9",
                    "agent_key": "boss",
                    "subordinates": ["worker_1"],
                    "filter": {"type": "orchestrator", "max_conversation_turns": 2},
                },
            },
            store=worker.store,
        )
        assert isinstance(hierarchical, HierarchicalMessageStoreMemory)
        assert isinstance(hierarchical.filter, OrchestratorHistoryFilter)
        for memory in (worker, manager):
            memory.store.close()

    def test_bad_configs(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="unknown memory type"):
            BaseMemory.from_config({"type": "Nope"})
        with pytest.raises(ValueError, match="needs a store"):
            BaseMemory.from_config(
                {"type": "SharedMemory", "config": {"namespace": "j", "agent_key": "w"}}
            )
        with pytest.raises(ValueError, match="unknown filter"):
            BaseMemory.from_config({"type": "standalone", "config": {"filter": "boss"}})
        with pytest.raises(TypeError):
            BaseMemory.from_config(["type"])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            BaseMemory.from_config({"type": "standalone", "config": {"colour": "red"}})
        bad = tmp_path / "bad.yaml"
        bad.write_text("type: [unclosed\n")
        with pytest.raises(ValueError, match="YAML"):
            BaseMemory.from_config(bad)

    def test_estimator_is_used(self) -> None:
        estimator = TokenEstimator(mode="heuristic")
        assert LocalAgentMemory(token_estimator=estimator).token_estimator is estimator
