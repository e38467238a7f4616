"""How much of a store a shared-memory view reads: the same whatever the job's size.

Counted, not timed: store calls and the entries they return, on a job of 100 and of 5,000
messages, with a worker's 300 newest observations (which a manager's view leaves out) on
top, as in the shared-memory benchmark. Also what the kept feed windows must never do: hand
out the objects they keep, miss what another message store appended, or outgrow their
bound.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memlane import InMemoryStore, SQLiteStore, _backend
from memlane.shared import (
    HierarchicalMessageStoreMemory,
    InMemoryMessageStore,
    ManagerHistoryFilter,
    MessageStoreMemory,
    OrchestratorHistoryFilter,
    SharedMemory,
    StoreMessageStore,
    WorkerHistoryFilter,
)
from memlane.shared.feed_cache import Windows
from memlane.shared.filters import HistoryFilter, Role
from memlane.shared.message_builder import create_observation
from memlane.shared.persistent import BLOCK, _slice, bulk_entries
from memlane.stores import MemoryStore
from memlane.types import MemoryEntry

BUDGET = 150
WORKERS = ("worker_1", "worker_2")
EXTRA = 300
VIEWS = ["worker", "manager", "orchestrator", "feed"]


def job(n: int) -> list[dict[str, Any]]:
    """``n`` messages of a manager and two workers, timestamps rising."""
    messages: list[dict[str, Any]] = []
    r = 0
    while len(messages) < n:
        messages.append({"type": "user_message", "content": f"question {r}"})
        for w in WORKERS:
            messages += [
                {"type": "task", "content": f"task {r}", "agent_key": w},
                {"type": "action", "content": f"count {r}", "tool": "count", "agent_key": w},
                {"type": "observation", "content": f"{r} rows", "agent_key": w},
                {"type": "final", "content": f"{w} result {r}", "agent_key": w},
            ]
        messages.append({"type": "assistant_message", "content": f"answer {r}"})
        if r % 5 == 0:
            messages.append(
                {"type": "note", "content": f"broadcast {r}", "is_global": True,
                 "agent_key": "manager"}
            )  # fmt: skip
        r += 1
    del messages[n:]
    for i, message in enumerate(messages):
        message["timestamp"] = (
            f"2026-01-01T00:{i // 60000:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}+00:00"
        )
    return messages


class Counting:
    """A store's calls and the entries they return, passed through."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.entries = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not name.startswith(("load", "async_load", "save", "async_save")):
            return method
        counted = name.removeprefix("async_")

        def count(found: Any) -> Any:
            self.calls[counted] += 1
            if isinstance(found, list):
                self.entries += len(found)
            elif isinstance(found, MemoryEntry):
                self.entries += 1
            return found

        if name.startswith("async_"):

            async def awaited(*args: Any) -> Any:
                return count(await method(*args))

            return awaited
        return lambda *args: count(method(*args))


class CountingMemoryStore(InMemoryStore):
    """An InMemoryStore (so read as one) counting the entries its reads return."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.entries = 0

    def load(self, namespace: str) -> list[MemoryEntry]:
        found = super().load(namespace)
        self.calls["load"] += 1
        self.entries += len(found)
        return found

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        self.calls["load_range"] += 1
        return super().load_range(namespace, start, stop)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        self.calls["load_by_key"] += 1
        return super().load_by_key(namespace, key)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        return self.load(namespace)

    async def async_load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        return self.load_range(namespace, start, stop)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.load_by_key(namespace, key)


class Job:
    """A loaded job with the memories of its manager and a worker, on one counted store."""

    def __init__(self, store: Any, n: int) -> None:
        self.store = store
        self.messages = job(n)
        blocks: dict[str, list[MemoryEntry]] = {}
        for ns, entry in bulk_entries("job", self.messages):
            blocks.setdefault(ns, []).append(entry)
        for ns, entries in blocks.items():
            store.save_many(ns, entries)
        shared = StoreMessageStore(store)
        self.worker = SharedMemory(shared, "job", "worker_1")
        self.manager = SharedMemory(shared, "job", "manager", subordinates=WORKERS)

    async def add_extra(self) -> None:
        for i in range(EXTRA):
            stamp = f"2026-06-01T00:00:{i // 1000:02d}.{i % 1000:03d}+00:00"
            message = create_observation(f"extra {i}")
            message["timestamp"] = stamp
            self.messages.append({**message, "agent_key": "worker_1"})
            await self.worker.async_add_message(message)

    async def view(self, op: str) -> list[dict[str, Any]]:
        if op == "worker":
            return await self.worker.async_get_message_history(
                filter=WorkerHistoryFilter(), max_tokens=BUDGET
            )
        if op == "manager":
            return await self.manager.async_get_message_history(
                filter=ManagerHistoryFilter(), max_tokens=BUDGET
            )
        if op == "orchestrator":
            return await self.manager.async_get_message_history(
                filter=OrchestratorHistoryFilter(), max_tokens=BUDGET
            )
        return await self.manager.async_get_message_history(limit=20)


async def reference(messages: list[dict[str, Any]], op: str) -> list[dict[str, Any]]:
    """The view computed over the whole job in this process's message store."""
    store = InMemoryMessageStore()
    for message in messages:
        store.append("job", message)
    if op == "worker":
        worker = MessageStoreMemory(store, "job", "worker_1")
        return await worker.async_get_message_history(
            filter=WorkerHistoryFilter(), max_tokens=BUDGET
        )
    boss = HierarchicalMessageStoreMemory(store, "job", "manager", list(WORKERS))
    if op == "manager":
        return await boss.async_get_message_history(
            filter=ManagerHistoryFilter(), max_tokens=BUDGET
        )
    if op == "orchestrator":
        return await boss.async_get_message_history(
            filter=OrchestratorHistoryFilter(), max_tokens=BUDGET
        )
    every = [*store.get_conversation_messages("job"), *store.get_global_messages("job")]
    every += store.get_all_agent_messages("job")
    every.sort(key=lambda m: m["timestamp"])
    return every[-20:]


def _counted(store: Any) -> tuple[Counter[str], int]:
    return Counter(store.calls), store.entries


def _reset(store: Any) -> None:
    store.calls.clear()
    store.entries = 0


async def _reads(make: Any, n: int, op: str) -> tuple[Counter[str], int, Counter[str], int]:
    """(calls, entries) of a cold view, then of the same view again, on a job of ``n``."""
    loaded = Job(make(), n)
    await loaded.add_extra()
    _reset(loaded.store)
    fresh = Job.__new__(Job)
    fresh.store, fresh.messages = loaded.store, loaded.messages
    shared = StoreMessageStore(loaded.store)
    fresh.worker = SharedMemory(shared, "job", "worker_1")
    fresh.manager = SharedMemory(shared, "job", "manager", subordinates=WORKERS)
    got = await fresh.view(op)
    assert [m["content"] for m in got] == [
        m["content"] for m in await reference(fresh.messages, op)
    ]
    cold = _counted(loaded.store)
    _reset(loaded.store)
    assert await fresh.view(op) == got
    warm = _counted(loaded.store)
    return (*cold, *warm)


def _stores(tmp_path: Path) -> dict[str, Any]:
    count = iter(range(1_000))
    return {
        "memory": CountingMemoryStore,
        "sqlite": lambda: Counting(SQLiteStore(tmp_path / f"s{next(count)}.sqlite3")),
    }


class TestReadsDoNotGrowWithTheJob:
    """Each view reads as much of a 5,000-message job as of a 100-message one."""

    @pytest.mark.parametrize("op", VIEWS)
    @pytest.mark.parametrize("kind", ["memory", "sqlite"])
    async def test_same_reads_small_and_large(
        self, kind: str, op: str, tmp_path: Path, impl: _backend.Implementation
    ) -> None:
        make = _stores(tmp_path)[kind]
        small = await _reads(make, 100, op)
        large = await _reads(make, 5_000, op)
        s_cold_calls, _, s_warm_calls, s_warm = small
        l_cold_calls, l_cold, l_warm_calls, l_warm = large
        # A view that read the job before asks each feed only whether its next number is
        # taken: the same calls, and no entries but the list of agents, at either size.
        assert l_warm_calls == s_warm_calls
        assert s_warm == l_warm <= len(WORKERS)
        assert set(l_warm_calls) <= {"load_by_key", "load_range", "load"}
        # A first view reads the newest entries of the feeds it shows (whole blocks on
        # InMemoryStore, which filters a namespace to answer a range): for the manager, the
        # worker's trace back past the observations it leaves out, in rounds 4x longer.
        bound = 10 * BLOCK if kind == "memory" else 4 * (EXTRA + 64) + 2 * 64
        assert l_cold <= bound
        assert sum(l_cold_calls.values()) <= 2 * sum(s_cold_calls.values()) + 12

    async def test_in_memory_store_never_filters_a_namespace(
        self, impl: _backend.Implementation
    ) -> None:
        store = CountingMemoryStore()
        loaded = Job(store, 2_000)
        await loaded.add_extra()
        for op in VIEWS:
            await loaded.view(op)
        assert store.calls["load_range"] == 0


class TestKeptWindows:
    """What a message store keeps of a feed is never handed out, nor stale."""

    async def test_views_hand_out_copies(self, impl: _backend.Implementation) -> None:
        store = InMemoryStore()
        memory = SharedMemory(store, "job", "w")
        await memory.async_add_message(create_observation("o1"))
        first = await memory.async_get_message_history(limit=5)
        first[0]["content"] = "changed"
        assert [m["content"] for m in await memory.async_get_message_history(limit=5)] == ["o1"]
        plain = await memory.message_store.async_get_agent_messages("job", "w")
        plain[0]["content"] = "changed"
        assert [m["content"] for m in await memory.async_get_message_history(limit=5)] == ["o1"]

    async def test_another_message_store_sees_appends(
        self, tmp_path: Path, impl: _backend.Implementation
    ) -> None:
        store = SQLiteStore(tmp_path / "s.sqlite3")
        reader = SharedMemory(store, "job", "w")
        writer = SharedMemory(store, "job", "w")
        seen = []
        for i in range(2 * BLOCK + 5):
            await writer.async_add_message(create_observation(f"o{i}"))
            if i % 97 == 0:
                seen = await reader.async_get_message_history(limit=3)
                assert [m["content"] for m in seen][-1] == f"o{i}"
        everything = await reader.async_get_message_history()
        assert [m["content"] for m in everything] == [f"o{i}" for i in range(2 * BLOCK + 5)]
        store.close()

    async def test_concurrent_views_and_appends(self, impl: _backend.Implementation) -> None:
        store = InMemoryStore()
        memory = SharedMemory(store, "job", "w")

        async def add(i: int) -> None:
            await memory.async_add_message(create_observation(f"o{i}"))

        async def look() -> list[dict[str, Any]]:
            return await SharedMemory(store, "job", "w").async_get_message_history(limit=50)

        await asyncio.gather(*(add(i) for i in range(300)), *(look() for _ in range(30)))
        got = [m["content"] for m in await memory.async_get_message_history()]
        assert sorted(got) == sorted(f"o{i}" for i in range(300))
        assert len(await memory.async_get_message_history(limit=7)) == 7

    def test_windows_stay_within_their_bound(self) -> None:
        windows = Windows(limit=10)
        windows.extend("a", 0, [{"n": i} for i in range(6)])
        windows.extend("b", 0, [{"n": i} for i in range(6)])
        assert len(windows) <= 10
        assert windows.get("a") is None  # the least recently read went first
        windows.extend("b", 6, [{"n": i} for i in range(6, 20)])
        kept = windows.get("b")
        assert kept is not None
        assert (kept.lo, kept.hi, len(windows)) == (10, 20, 10)
        windows.extend("b", 0, [{"n": 0}], replace=False)  # a gap: not joined, not replaced
        assert windows.get("b") is kept
        assert kept.lo == 10
        windows.extend("b", 8, [{"n": 8}, {"n": 9}])  # touching: joined, then trimmed
        assert (kept.lo, kept.hi) == (10, 20)

    def test_a_block_out_of_order_is_sorted(self) -> None:
        def entry(n: int) -> MemoryEntry:
            return MemoryEntry(key=f"{n:012d}", content={"n": n})

        ordered = [entry(n) for n in range(10)]
        assert [e.content["n"] for e in _slice(ordered, 3, 7)] == [3, 4, 5, 6]
        assert _slice(ordered, 12, 20) == []
        shuffled = [ordered[i] for i in (0, 2, 1, 3, 5, 4, 6, 7, 9, 8)]
        assert [e.content["n"] for e in _slice(shuffled, 1, 6)] == [1, 2, 3, 4, 5]
        assert [e.content["n"] for e in _slice(shuffled, 8, 20)] == [8, 9]


class TestEachMessageFilters:
    """Traces read one by one only for filters that keep each message by itself."""

    async def test_a_filter_that_looks_at_neighbours_sees_the_team(
        self, impl: _backend.Implementation
    ) -> None:
        class NewestTwo(HistoryFilter):
            def spec(self, role: Role) -> Any:
                return ManagerHistoryFilter().spec(role)

            def select(
                self, feed: Any, messages: list[dict[str, Any]], role: Role
            ) -> tuple[list[dict[str, Any]], bool]:
                return (messages[-2:], True) if feed == "agents" else (messages, False)

        store = InMemoryStore()
        manager = SharedMemory(store, "job", "m", subordinates=["a", "b"])
        for i, agent in enumerate("abab"):
            message = create_observation(f"{agent}{i}")
            message["timestamp"] = f"2026-01-01T00:00:0{i}+00:00"
            await SharedMemory(store, "job", agent).async_add_message(message)
        view = await manager.async_get_message_history(filter=NewestTwo(), limit=10)
        assert [m["content"] for m in view] == ["a2", "b3"]
