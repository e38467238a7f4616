"""The sync and async APIs are one logic: mixed callers serialise, and both store the same."""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

import memlane.conversation.conversation_log
import memlane.conversation.conversation_state
import memlane.conversation.rolling_summary
import memlane.conversation.snapshot
import memlane.conversation.turn_plans
import memlane.working
from memlane import ConversationMemory, InMemoryStore, MemoryManager, SQLiteStore, TokenEstimator
from memlane._locks import HybridLock
from memlane.types import ConversationTurn

pytestmark = pytest.mark.usefixtures("impl")


def _store(kind: str, path: Path) -> Any:
    return InMemoryStore() if kind == "memory" else SQLiteStore(path / "mixed.sqlite3")


class TestMixedCallers:
    """Threads and event-loop tasks mixing on one conversation get unique ids in commit order."""

    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    def test_thread_and_tasks_on_one_conversation(self, kind: str, tmp_path: Path) -> None:
        store = _store(kind, tmp_path)
        memory = ConversationMemory(max_tokens=10**6, store=store)
        errors: list[BaseException] = []

        def sync_side() -> None:
            try:
                for i in range(300):
                    memory.add_turn("mixed", f"sync {i}", "ok")
            except BaseException as exc:  # noqa: BLE001  # reported below, not lost in the thread
                errors.append(exc)

        async def task(n: int) -> None:
            for i in range(50):
                await memory.async_add_turn("mixed", f"task {n} {i}", "ok")

        async def async_side() -> None:
            await asyncio.gather(*(task(n) for n in range(6)))

        def loop_thread() -> None:
            try:
                asyncio.run(async_side())
            except BaseException as exc:  # noqa: BLE001  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=sync_side), threading.Thread(target=loop_thread)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        turns = memory.get_turns("mixed")
        assert [t.turn_id for t in turns] == list(range(600))
        prompts = [t.user_prompt for t in turns]
        assert len(set(prompts)) == 600
        # Each caller's own turns keep its order.
        sync_order = [p for p in prompts if p.startswith("sync ")]
        assert sync_order == [f"sync {i}" for i in range(300)]
        for n in range(6):
            mine = [p for p in prompts if p.startswith(f"task {n} ")]
            assert mine == [f"task {n} {i}" for i in range(50)]
        if kind == "sqlite":
            reader = ConversationMemory(
                max_tokens=10**6, store=SQLiteStore(tmp_path / "mixed.sqlite3")
            )
            assert [(t.turn_id, t.user_prompt) for t in reader.get_turns("mixed")] == [
                (t.turn_id, t.user_prompt) for t in turns
            ]

    def test_tasks_on_two_loops(self) -> None:
        memory = ConversationMemory(max_tokens=10**6)

        async def side(tag: str) -> None:
            async def one(n: int) -> None:
                for i in range(40):
                    await memory.async_add_turn("c", f"{tag} {n} {i}", "ok")

            await asyncio.gather(*(one(n) for n in range(3)))

        threads = [threading.Thread(target=asyncio.run, args=(side(tag),)) for tag in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [t.turn_id for t in memory.get_turns("c")] == list(range(240))


class TestHybridLock:
    """One lock for threads and tasks: no wake-up is lost, and cancellation never leaks it."""

    async def test_cancelled_waiter_does_not_keep_the_lock(self) -> None:
        lock = HybridLock()
        await lock.async_acquire()
        waiter = asyncio.create_task(lock.async_acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        lock.release()
        await asyncio.wait_for(lock.async_acquire(), timeout=5)
        lock.release()

    async def test_cancelled_during_hand_over_passes_the_lock_on(self) -> None:
        lock = HybridLock()
        await lock.async_acquire()
        first = asyncio.create_task(lock.async_acquire())
        second = asyncio.create_task(lock.async_acquire())
        await asyncio.sleep(0)
        lock.release()  # wakes `first`, whose wake-up is scheduled
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, timeout=5)  # it got the lock after all
        lock.release()

    async def test_sync_call_on_the_loop_thread_is_refused_not_deadlocked(self) -> None:
        memory = ConversationMemory()
        lock = memory._conversations.locks["c"]
        await lock.async_acquire()
        try:
            with pytest.raises(RuntimeError, match="use the async_\\* method"):
                memory.add_turn("c", "hi", "there")
        finally:
            lock.release()
        memory.add_turn("c", "hi", "there")
        assert len(memory.get_turns("c")) == 1

    def test_every_waiter_is_served_once_and_alone(self) -> None:
        lock = HybridLock()
        lock.acquire()
        served: list[int] = []
        inside = [0]

        def worker(n: int) -> None:
            with lock:
                inside[0] += 1
                assert inside[0] == 1
                served.append(n)
                inside[0] -= 1

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        while len(lock._waiters) < 8:  # all queued behind the holder
            threading.Event().wait(0.001)
        lock.release()
        for t in threads:
            t.join()
        assert sorted(served) == list(range(8))

    async def test_sync_call_behind_a_task_of_its_own_loop_does_not_deadlock(self) -> None:
        # The release wakes the queued task first, but this thread blocks that task's loop:
        # the sync caller must still get the free lock.
        lock = HybridLock()
        lock.acquire()
        task = asyncio.create_task(lock.async_acquire())
        await asyncio.sleep(0)
        threading.Timer(0.05, lock.release).start()
        lock.acquire()
        lock.release()
        await asyncio.wait_for(task, timeout=5)
        lock.release()


# ---------------------------------------------------------------------------- one script, two APIs


@pytest.fixture
def deterministic(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Entry ids and clocks that repeat exactly, so two runs of a script store equal bytes."""

    def reset() -> None:
        counter = itertools.count()
        ticks = itertools.count()
        start = datetime(2026, 1, 1, tzinfo=UTC)
        monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))
        # A turn's entry id is made from random bytes, not by uuid4: counted the same way.
        monkeypatch.setattr(
            memlane.conversation.turn_plans, "new_entry_id", lambda: uuid.uuid4().hex
        )

        def now() -> datetime:
            return start + timedelta(seconds=next(ticks))

        for module in (
            memlane.conversation.turn_plans,
            memlane.conversation.rolling_summary,
            memlane.conversation.conversation_state,
            memlane.conversation.conversation_log,
            memlane.conversation.snapshot,
            memlane.working,
        ):
            monkeypatch.setattr(module, "utc_now", now)

    reset()
    return reset


def _summarize(turns: list[ConversationTurn]) -> str:
    return " / ".join(t.user_prompt or t.assistant_response for t in turns)[:200]


def _tool_turn(i: int) -> list[Any]:
    at = datetime(2025, 6, 1, tzinfo=UTC)
    return [
        ModelRequest(parts=[UserPromptPart(content=f"look up {i}", timestamp=at)]),
        ModelResponse(
            parts=[ToolCallPart(tool_name="lookup", args={"n": i}, tool_call_id=f"c{i}")],
            timestamp=at,
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name="lookup", content=f"value {i}", tool_call_id=f"c{i}", timestamp=at
                )
            ]
        ),
        ModelResponse(parts=[TextPart(content=f"it is {i}")], timestamp=at),
    ]


def _manager(path: Path) -> MemoryManager:
    return MemoryManager(
        store=SQLiteStore(path),
        max_conversation_tokens=120,
        summarize_threshold=40,
        summarizer=_summarize,
        estimator=TokenEstimator(mode="heuristic", tokens_per_word=1.0),
    )


def _sync_script(manager: MemoryManager) -> list[Any]:
    seen: list[Any] = []
    memory = manager.conversation
    cid = manager.new_conversation()
    for i in range(12):
        raw = _tool_turn(i) if i % 3 == 0 else None
        memory.add_turn(cid, f"question {i}", f"answer {i}", raw, metadata={"i": i})
        seen.append(memory.get_history_tokens(cid))
    seen.append(memory.get_message_history(cid))
    snapshot = memory.export_conversation(cid)
    seen.append(memory.import_conversation(snapshot, conversation_id="copy"))
    memory.add_turn("copy", "one more", "sure")
    manager.set_fact("tz", "Australia/Adelaide", importance=0.9)
    manager.set_fact("lang", "en")
    seen.extend(
        [manager.get_fact("tz"), manager.working.delete("lang"), manager.get_working_context()]
    )
    seen.extend(
        [memory.get_summary(cid), memory.get_total_tokens(cid), sorted(memory.conversation_ids)]
    )
    memory.clear(cid)
    seen.append(memory.get_turns(cid))
    return seen


async def _async_script(manager: MemoryManager) -> list[Any]:
    seen: list[Any] = []
    memory = manager.conversation
    cid = await manager.async_new_conversation()
    for i in range(12):
        raw = _tool_turn(i) if i % 3 == 0 else None
        await memory.async_add_turn(cid, f"question {i}", f"answer {i}", raw, metadata={"i": i})
        seen.append(await memory.async_get_history_tokens(cid))
    seen.append(await memory.async_get_message_history(cid))
    snapshot = await memory.async_export_conversation(cid)
    seen.append(await memory.async_import_conversation(snapshot, conversation_id="copy"))
    await memory.async_add_turn("copy", "one more", "sure")
    await manager.async_set_fact("tz", "Australia/Adelaide", importance=0.9)
    await manager.async_set_fact("lang", "en")
    seen.extend(
        [
            await manager.async_get_fact("tz"),
            await manager.working.async_delete("lang"),
            await manager.async_get_working_context(),
        ]
    )
    seen.extend(
        [
            await memory.async_get_summary(cid),
            await memory.async_get_total_tokens(cid),
            sorted(await memory.async_conversation_ids()),
        ]
    )
    await memory.async_clear(cid)
    seen.append(await memory.async_get_turns(cid))
    return seen


def _dump(path: Path) -> list[tuple[Any, ...]]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        # Sorted in Python: some tables (the FTS5 index's shadow tables) have one column.
        return [
            (table, *row)
            for table in tables
            for row in sorted(conn.execute(f'SELECT * FROM "{table}"'), key=repr)
        ]


class TestOneLogic:
    """The same scripted operations through the sync and the async API store identical state."""

    def test_identical_results_and_stored_rows(
        self, tmp_path: Path, deterministic: Callable[[], None]
    ) -> None:
        sync_path, async_path = tmp_path / "sync.sqlite3", tmp_path / "async.sqlite3"
        # Once per process, memlane builds pydantic-ai sample messages (whose default tool call
        # ids come from uuid4): a throwaway run first, so both counted runs start past it
        # whichever test ran before this one.
        _sync_script(_manager(tmp_path / "warm-up.sqlite3"))
        deterministic()
        sync_seen = _sync_script(_manager(sync_path))
        deterministic()
        async_seen = asyncio.run(_async_script(_manager(async_path)))
        assert sync_seen == async_seen
        assert sync_seen[-1] == []  # the script really cleared the conversation
        assert "Australia/Adelaide" in sync_seen
        assert isinstance(sync_seen[-4], str)  # summaries ran (and evicted turns) on both paths
        sync_rows, async_rows = _dump(sync_path), _dump(async_path)
        assert len(sync_rows) >= 10
        assert sync_rows == async_rows
