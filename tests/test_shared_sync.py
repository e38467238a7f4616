"""memlane.shared's sync methods and their async_ twins run one plan: same writes, same views."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlane import SQLiteStore
from memlane.shared import (
    HierarchicalMessageStoreMemory,
    LocalAgentMemory,
    ManagerHistoryFilter,
    MessageStoreMemory,
    ProcessSharedMemory,
    SharedMemory,
    SharedStateStore,
    StoreMessageStore,
    WorkerHistoryFilter,
)
from memlane.shared.message_builder import (
    create_action,
    create_final,
    create_observation,
    create_task_entry,
    create_user_message,
)
from memlane.shared.view_memory import ViewMemory

Message = dict[str, Any]
Team = tuple[ViewMemory, ViewMemory, ViewMemory]


def contents(messages: list[Message]) -> list[Any]:
    return [m["content"] for m in messages]


def untimed(messages: list[Message]) -> list[Message]:
    """The messages without the timestamps the two jobs were written at."""
    return [{k: v for k, v in m.items() if k != "timestamp"} for m in messages]


def in_process(tmp_path: Path, location: str) -> Team:
    state = SharedStateStore()
    return (
        ProcessSharedMemory(location, "boss", subordinates=["w1", "w2"], state=state),
        ProcessSharedMemory(location, "w1", state=state),
        ProcessSharedMemory(location, "w2", state=state),
    )


def on_sqlite(tmp_path: Path, location: str) -> Team:
    store = StoreMessageStore(SQLiteStore(tmp_path / f"{location}.db"))
    return (
        HierarchicalMessageStoreMemory(store, location, "boss", ["w1", "w2"]),
        MessageStoreMemory(store, location, "w1"),
        SharedMemory(store, location, "w2"),
    )


TEAMS: list[Callable[[Path, str], Team]] = [in_process, on_sqlite]

JOB: list[tuple[int, str, Message]] = [
    (0, "message", create_user_message("Which tables grew?")),
    (0, "message", create_task_entry("Check sales", agent_key="w1")),
    (1, "message", create_action("count_rows", {"table": "sales"})),
    (1, "message", create_observation("12 new rows")),
    (2, "message", create_action("count_rows", {"table": "users"})),
    (2, "message", create_observation("3 new rows")),
    (0, "global", {"type": "global_observation", "content": "users is archived"}),
    (1, "message", create_final("sales: +12")),
]

VIEWS: list[dict[str, Any]] = [
    {},
    {"limit": 3},
    {"max_tokens": 40},
    {"filter": ManagerHistoryFilter()},
    {"filter": WorkerHistoryFilter(), "max_tokens": 30},
]


@pytest.mark.parametrize("team", TEAMS, ids=lambda t: t.__name__)
class TestSyncAndAsyncAgree:
    """A job written with the sync methods reads as the same job written with the async ones."""

    def write_sync(self, team: Team) -> None:
        for who, how, message in JOB:
            if how == "global":
                team[who].add_global_message(message)
            else:
                team[who].add_message(message)

    async def write_async(self, team: Team) -> None:
        for who, how, message in JOB:
            if how == "global":
                await team[who].async_add_global_message(message)
            else:
                await team[who].async_add_message(message)

    async def test_the_views_match(self, team: Callable[[Path, str], Team], tmp_path: Path) -> None:
        blocking, awaited = team(tmp_path, "sync-job"), team(tmp_path, "async-job")
        self.write_sync(blocking)
        await self.write_async(awaited)
        for member in range(3):
            for view in VIEWS:
                got = blocking[member].get_message_history(**view)
                assert got == await blocking[member].async_get_message_history(**view)
                other = await awaited[member].async_get_message_history(**view)
                assert untimed(got) == untimed(other)
        whole = blocking[0].get_message_history()
        assert len(whole) >= len(JOB) - 1  # a manager view leaves out the conversation
        assert blocking[0].get_message_history(limit=2) == whole[-2:]

    def test_bad_arguments_are_named(
        self, team: Callable[[Path, str], Team], tmp_path: Path
    ) -> None:
        boss = team(tmp_path, "bad")[0]
        with pytest.raises(ValueError, match="limit"):
            boss.get_message_history(limit=0)
        with pytest.raises(TypeError, match="filter"):
            boss.get_message_history(filter="manager")  # type: ignore[arg-type]  # the bad call
        with pytest.raises(TypeError, match="dict"):
            boss.add_message(["not", "a", "dict"])  # type: ignore[arg-type]  # the bad call


class TestLocalAgentMemory:
    """One agent's memory lists what it added, in order, from either method family."""

    async def test_mixed(self) -> None:
        memory = LocalAgentMemory()
        memory.add_message(create_user_message("u"))
        await memory.async_add_message(create_action("a", {}))
        assert contents(memory.get_message_history()) == ["u", "a({})"]


class TestSharedStateStoreNames:
    """The state store's readable sync names and async twins write the three feeds."""

    async def test_feeds(self) -> None:
        state = SharedStateStore()
        state.append_agent_message("job", "w1", create_user_message("to w1"))
        await state.async_append_agent_message("job", "w1", create_action("a", {}))
        state.append_conversation_message("job", create_user_message("u"))
        await state.async_append_conversation_message("job", create_user_message("v"))
        state.append_global_message("job", {"type": "global_observation", "content": "g"})
        await state.async_append_global_message("job", {"type": "note", "content": "h"})
        assert contents(state.get_agent_messages("job", "w1")) == ["to w1", "a({})"]
        assert contents(state.get_conversation_messages("job")) == ["u", "v"]
        assert [m["is_global"] for m in state.get_global_messages("job")] == [True, True]
        with pytest.raises(ValueError, match="conversation message"):
            state.append_conversation_message("job", create_final("f"))
