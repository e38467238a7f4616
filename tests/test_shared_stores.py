"""Shared memory on every store and both implementations: namespace isolation, broadcasts,
each role's view, ``limit``, budgets, bad input, 500 coroutines appending at once, two
processes on one namespace, and views that read only what they show."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import FileStore, InMemoryStore, SQLiteStore, TokenEstimator, _backend
from memlane.shared import (
    HierarchicalMessageStoreMemory,
    ManagerHistoryFilter,
    MessageStoreMemory,
    OrchestratorHistoryFilter,
    SharedMemory,
    StoreMessageStore,
    WorkerHistoryFilter,
    render,
)
from memlane.shared.message_builder import (
    create_action,
    create_assistant_message,
    create_final,
    create_observation,
    create_synthesis,
    create_task_entry,
    create_user_message,
)
from memlane.stores import MemoryStore
from test_database_stores import StoreFactory, initialized, server_for

STORES = ["memory", "file", "sqlite", "postgres", "mongodb"]
STEP_TIMEOUT = 120.0


class Made:
    """A store of one kind, and what another process needs to open the same one."""

    def __init__(self, kind: str, store: MemoryStore, cfg: dict[str, Any]) -> None:
        self.kind = kind
        self.store = store
        self.cfg = cfg


async def _make(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Made]:
    if kind in ("postgres", "mongodb"):
        factory = StoreFactory(kind, server_for(request, kind))
        store = await initialized(factory.make())
        yield Made(kind, store, {"url": factory.server.url, "name": factory.name})
        await factory.cleanup()
        return
    local: MemoryStore
    path = tmp_path / ("shared.sqlite3" if kind == "sqlite" else "shared")
    if kind == "memory":
        local = InMemoryStore()
    elif kind == "sqlite":
        local = SQLiteStore(path)
    else:
        local = FileStore(path)
    yield Made(kind, local, {"path": str(path)})
    local.close()


@pytest.fixture(params=STORES)
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind, built by ``impl``."""
    async for one in _make(request.param, request, tmp_path):
        yield one


@pytest.fixture(params=[kind for kind in STORES if kind != "memory"])
async def shared(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind other processes can open too, built by ``impl``."""
    async for one in _make(request.param, request, tmp_path):
        yield one


def contents(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages]


async def _job(store: MemoryStore, namespace: str = "job") -> None:
    """A manager, two workers, the conversation and a broadcast, in a known order."""
    manager = SharedMemory(store, namespace, "manager")
    w1 = SharedMemory(store, namespace, "worker_1")
    w2 = SharedMemory(store, namespace, "worker_2")
    await manager.async_add_message(create_user_message("u1"))
    await manager.async_add_message(create_task_entry("t1", agent_key="worker_1"))
    await manager.async_add_message(create_task_entry("t2", agent_key="worker_2"))
    await w1.async_add_message(create_action("search", {"q": "a"}))
    await w1.async_add_message(create_observation("o1"))
    await w2.async_add_message(create_action("search", {"q": "b"}))
    await w2.async_add_message(create_observation("o2"))
    await w1.async_add_message(create_final("f1"))
    await w2.async_add_message(create_final("f2"))
    await manager.async_add_message(create_synthesis("s1", phase_id=1))
    await manager.async_add_global_message({"type": "global_observation", "content": "g1"})
    await manager.async_add_message(create_assistant_message("a1"))
    await manager.async_add_message(create_user_message("u2"))
    await manager.async_add_message(create_task_entry("t3", agent_key="worker_1"))
    await w1.async_add_message(create_observation("o3"))


class TestIsolationAndBroadcast:
    """Agents of one namespace share its feed; broadcasts reach them all; namespaces never meet."""

    async def test_whole_feed_is_shared(self, made: Made) -> None:
        await _job(made.store)
        await SharedMemory(made.store, "other", "worker_1").async_add_message(
            create_final("elsewhere")
        )
        expected = [
            "u1", "t1", "t2", 'search({"q": "a"})', "o1", 'search({"q": "b"})', "o2",
            "f1", "f2", "s1", "g1", "a1", "u2", "t3", "o3",
        ]  # fmt: skip
        for agent in ("manager", "worker_1", "worker_2", "newcomer"):
            assert (
                contents(await SharedMemory(made.store, "job", agent).async_get_message_history())
                == expected
            )
        assert contents(
            await SharedMemory(made.store, "other", "x").async_get_message_history()
        ) == ["elsewhere"]

    async def test_broadcast_reaches_every_agent_of_its_namespace_only(self, made: Made) -> None:
        messages = StoreMessageStore(made.store)
        await SharedMemory(messages, "a", "boss").async_add_global_message(
            {"type": "note", "content": "hi"}
        )
        for agent in ("w1", "w2"):
            view = await MessageStoreMemory(messages, "a", agent).async_get_message_history()
            assert contents(view) == ["hi"]
            assert view[0]["is_global"] is True
            assert await MessageStoreMemory(messages, "b", agent).async_get_message_history() == []

    async def test_names_are_escaped(self, made: Made) -> None:
        """A namespace or agent named with separators never reaches another's feed."""
        messages = StoreMessageStore(made.store)
        await SharedMemory(messages, "a:b", "x").async_add_message(create_final("ab"))
        await SharedMemory(messages, "a", "b:x").async_add_message(create_final("a-bx"))
        await SharedMemory(messages, "a%3Ab", "x%").async_add_message(create_final("escaped"))
        assert contents(messages.get_agent_messages("a:b", "x")) == ["ab"]
        assert contents(messages.get_agent_messages("a", "b:x")) == ["a-bx"]
        assert messages.get_agent_messages("a", "b") == []
        assert contents(messages.get_agent_messages("a%3Ab", "x%")) == ["escaped"]
        assert messages.get_agent_messages("a%3Ab", "x") == []


class TestRoleViews:
    """Each role sees its slice: worker, manager, orchestrator, and the filters."""

    async def test_worker_view(self, made: Made) -> None:
        await _job(made.store)
        worker = MessageStoreMemory(StoreMessageStore(made.store), "job", "worker_1")
        assert contents(await worker.async_get_message_history()) == [
            "u1", "t1", 'search({"q": "a"})', "o1", "f1", "g1", "a1", "u2", "t3", "o3",
        ]  # fmt: skip
        current = await worker.async_get_message_history(filter=WorkerHistoryFilter())
        assert contents(current) == ["u1", "g1", "a1", "u2", "t3", "o3"]

    async def test_manager_view(self, made: Made) -> None:
        await _job(made.store)
        manager = HierarchicalMessageStoreMemory(
            StoreMessageStore(made.store), "job", "manager", subordinates=["worker_1", "worker_2"]
        )
        assert contents(await manager.async_get_message_history()) == [
            "t1", "t2", 'search({"q": "a"})', "o1", 'search({"q": "b"})', "o2",
            "f1", "f2", "s1", "g1", "t3", "o3",
        ]  # fmt: skip
        # The tasks the manager handed out are its workers' (their agent_key), so the
        # filtered view keeps of them only the results and the synthesis.
        assert contents(await manager.async_get_message_history(filter=ManagerHistoryFilter())) == [
            "f1",
            "f2",
            "s1",
            "g1",
        ]

    async def test_orchestrator_view(self, made: Made) -> None:
        await _job(made.store)
        orchestrator = SharedMemory(made.store, "job", "manager")
        # The conversation only (the "conversation only, newest N turns"): no trace
        # of the orchestrator's own and no broadcast.
        last = await orchestrator.async_get_message_history(filter=OrchestratorHistoryFilter(1))
        assert contents(last) == ["u2"]
        both = await orchestrator.async_get_message_history(filter=OrchestratorHistoryFilter())
        assert contents(both) == ["u1", "a1", "u2"]
        assert OrchestratorHistoryFilter().max_conversation_turns == 10

    async def test_filter_set_on_the_memory(self, made: Made) -> None:
        await _job(made.store)
        worker = SharedMemory(made.store, "job", "worker_2", filter=WorkerHistoryFilter())
        assert contents(await worker.async_get_message_history()) == [
            "u1", "t2", 'search({"q": "b"})', "o2", "f2", "g1", "a1", "u2",
        ]  # fmt: skip


class TestLimit:
    """``limit`` gives the newest N, oldest first, on the stores and on every view."""

    async def test_message_store_limits(self, made: Made) -> None:
        await _job(made.store)
        messages = StoreMessageStore(made.store)
        assert contents(messages.get_agent_messages("job", "worker_1", limit=2)) == ["t3", "o3"]
        assert contents(await messages.async_get_conversation_messages("job", 2)) == ["a1", "u2"]
        assert contents(messages.get_global_messages("job", limit=5)) == ["g1"]
        team = messages.get_team_messages("job", ["worker_1", "worker_2"], limit=3)
        assert contents(team) == ["f2", "t3", "o3"]
        assert len(messages.get_agent_messages("job", "worker_1", limit=100)) == 6

    async def test_view_limits(self, made: Made) -> None:
        await _job(made.store)
        view = SharedMemory(made.store, "job", "x")
        everything = await view.async_get_message_history()
        for n in (1, 4, 15, 50):
            assert await view.async_get_message_history(limit=n) == everything[-n:]
        worker = SharedMemory(made.store, "job", "worker_1")
        whole = await worker.async_get_message_history(filter=WorkerHistoryFilter())
        assert (
            await worker.async_get_message_history(filter=WorkerHistoryFilter(), limit=3)
            == whole[-3:]
        )


def _reference(view: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """The budget by brute force: the longest suffix that fits and splits no pair."""
    estimator = TokenEstimator()
    costs = [estimator.estimate(render(m)) for m in view]
    for start in range(len(view) + 1):
        split = 0 < start < len(view) and (
            view[start]["type"] == "observation" and view[start - 1]["type"] == "action"
        )
        if sum(costs[start:]) <= max_tokens and not split:
            return view[start:]
    return []


class TestBudget:
    """``max_tokens`` keeps the newest messages that fit, never an action without its
    observation, reading more of a feed only when the answer needs it."""

    async def test_budgets_match_the_reference(self, made: Made) -> None:
        memory = SharedMemory(made.store, "job", "w")
        await memory.async_add_message(create_user_message("please look into this"))
        for i in range(150):
            await memory.async_add_message(create_action("lookup", {"item": i}))
            await memory.async_add_message(create_observation(f"item {i} is " + "long " * (i % 7)))
        view = await memory.async_get_message_history()
        estimator = TokenEstimator()
        for budget in (1, 5, 17, 40, 99, 500, 3_000, 100_000):
            got = await memory.async_get_message_history(max_tokens=budget)
            assert got == _reference(view, budget), budget
            assert sum(estimator.estimate(render(m)) for m in got) <= budget
            if got:
                assert got[0]["type"] != "observation"

    async def test_budget_with_limit_and_filter(self, made: Made) -> None:
        await _job(made.store)
        worker = SharedMemory(made.store, "job", "worker_1")
        whole = await worker.async_get_message_history(filter=WorkerHistoryFilter())
        got = await worker.async_get_message_history(
            filter=WorkerHistoryFilter(), max_tokens=12, limit=4
        )
        assert got == _reference(whole[-4:], 12)
        assert got


class TestBadInput:
    """Bad messages and arguments raise TypeError or ValueError and write nothing."""

    async def test_nothing_is_written(self, made: Made) -> None:
        memory = SharedMemory(made.store, "job", "w")
        bad: list[tuple[Any, type[Exception]]] = [
            ("text", TypeError),
            (["type", "final"], TypeError),
            ({"content": "no type"}, ValueError),
            ({"type": "", "content": "x"}, ValueError),
            ({"type": 3, "content": "x"}, ValueError),
            ({"type": "final", "content": {1, 2}}, ValueError),
            ({"type": "final", "content": float("nan")}, ValueError),
            ({"type": "final", "content": {1: "int key"}}, ValueError),
            ({"type": "final", "content": "x", "agent_key": 7}, ValueError),
            ({"type": "final", "content": "x", "is_global": "yes"}, ValueError),
            ({"type": "final", "content": "x", "timestamp": "yesterday"}, ValueError),
        ]
        for message, error in bad:
            with pytest.raises(error):
                await memory.async_add_message(message)
            with pytest.raises(error):
                await memory.async_add_global_message(message)
        messages = StoreMessageStore(made.store)
        with pytest.raises(TypeError):
            messages.append("job", "text")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="location"):
            messages.append("", {"type": "final", "content": "x"})
        assert await memory.async_get_message_history() == []
        assert made.store.namespaces() == []

    async def test_bad_arguments(self, made: Made) -> None:
        messages = StoreMessageStore(made.store)
        memory = SharedMemory(messages, "job", "w")
        with pytest.raises(TypeError, match="limit"):
            await memory.async_get_message_history(limit="3")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            messages.get_global_messages("job", limit=0)
        with pytest.raises(ValueError, match="max_tokens"):
            await memory.async_get_message_history(max_tokens=-1)
        with pytest.raises(TypeError, match="filter"):
            await memory.async_get_message_history(filter="worker")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="agent_keys"):
            messages.get_team_messages("job", "w")
        with pytest.raises(ValueError, match="agent_key"):
            SharedMemory(messages, "job", "")
        with pytest.raises(TypeError, match="namespace"):
            SharedMemory(messages, 5, "w")  # type: ignore[arg-type]


class TestConcurrency:
    """500 coroutines appending at once: every message once, each agent's order kept."""

    async def test_500_coroutines(self, made: Made) -> None:
        messages = StoreMessageStore(made.store)

        async def agent_step(i: int) -> None:
            memory = SharedMemory(messages, "job", f"a{i % 5}")
            await memory.async_add_message(create_action("step", {"i": i}))
            await memory.async_add_message(create_observation(f"{i}"))

        await asyncio.gather(*(agent_step(i) for i in range(500)))
        # A fresh reader (another process's view) finds every message exactly once.
        fresh = StoreMessageStore(made.store)
        for agent in range(5):
            trace = fresh.get_agent_messages("job", f"a{agent}")
            assert len(trace) == 200
            seen = [m["content"] for m in trace]
            steps = [i for i in range(500) if i % 5 == agent]
            assert sorted(seen) == sorted(
                [f'step({{"i": {i}}})' for i in steps] + [str(i) for i in steps]
            )
            # Each coroutine's action comes before its observation.
            for i in steps:
                assert seen.index(f'step({{"i": {i}}})') < seen.index(str(i))
        assert len(await SharedMemory(fresh, "job", "u").async_get_message_history()) == 1000


class CountingStore:
    """Passes every call to a store, counting the entries its range reads return."""

    def __init__(self, store: MemoryStore) -> None:
        self.inner = store
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name in ("load", "async_load"):
            raise AssertionError("a shared-memory view must not load a whole namespace")
        if name == "async_load_range":

            async def counted(*args: Any) -> Any:
                found = await method(*args)
                self.read += len(found)
                return found

            return counted
        return method


class TestViewsReadOnlyWhatTheyShow:
    """A limited or budgeted view reads a few of each feed's newest entries, not the job."""

    async def test_entries_read(self, made: Made) -> None:
        messages = StoreMessageStore(made.store)
        writer = SharedMemory(messages, "job", "w")
        for i in range(400):
            await writer.async_add_message(create_final(f"r{i}", agent_key=f"w{i % 4}"))
            if i % 10 == 0:
                await writer.async_add_message(create_user_message(f"u{i}"))
        counting = CountingStore(made.store)
        reader = SharedMemory(
            StoreMessageStore(counting),
            "job",
            "w1",
            filter=WorkerHistoryFilter(),
        )
        view = await reader.async_get_message_history(limit=10)
        assert len(view) == 10
        first = counting.read
        counting.read = 0
        assert await reader.async_get_message_history(limit=10) == view
        assert counting.read <= 2 * 10  # two feeds with messages, the newest 10 of each
        assert first <= 2 * 10
        counting.read = 0
        await reader.async_get_message_history(max_tokens=30)
        assert counting.read <= 2 * 64


class TestProcesses:
    """Two interpreters on one namespace see each other's messages, in one order."""

    async def test_two_processes(self, shared: Made, impl: _backend.Implementation) -> None:
        await SharedMemory(shared.store, "job", "warm").async_add_message(create_final("warm"))
        cfg = {"kind": shared.kind, **shared.cfg, "rounds": 30}
        views = await asyncio.to_thread(_race, cfg, impl, 2)
        assert views[0] == views[1]
        own = await SharedMemory(shared.store, "job", "x").async_get_message_history()
        assert [m["content"] for m in own] == views[0]
        for p in range(2):
            mine = [c for c in views[0] if c.startswith((f"p{p}:act", f"p{p}:obs"))]
            assert mine == [f"p{p}:{kind}:{i}" for i in range(30) for kind in ("act", "obs")]
            assert sum(c == f"p{p}:said" for c in views[0]) == 1


def _race(cfg: dict[str, Any], impl: _backend.Implementation, n: int) -> list[list[str]]:
    env = dict(os.environ)
    env.pop("MEMLANE_PURE_PYTHON", None)
    if impl.name == "python":
        env["MEMLANE_PURE_PYTHON"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps({**cfg, "me": p})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(n)
    ]
    try:
        for step in ("ready", "written"):
            for proc in procs:
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != step:
                    pytest.fail(_failure(proc))
            for proc in procs:  # every worker reached the step: all go on together
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
        views = []
        for proc in procs:
            out, err = proc.communicate(timeout=STEP_TIMEOUT)
            assert proc.returncode == 0, err
            views.append(json.loads(out))
        return views
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _failure(proc: subprocess.Popen[str]) -> str:
    proc.wait(timeout=STEP_TIMEOUT)
    assert proc.stderr is not None
    return f"worker exited with {proc.returncode}:\n{proc.stderr.read()}"


WORKER = r"""
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")  # e.g. the partial-index fallback notice of FerretDB
cfg = json.loads(sys.argv[1])
from memlane.shared import SharedMemory
from memlane.shared.message_builder import create_action, create_observation, create_user_message
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
me = cfg["me"]


async def main():
    memory = SharedMemory(store, "job", f"p{me}")
    await memory.async_get_message_history(limit=1)  # connected before the race starts
    print("ready", flush=True)
    sys.stdin.readline()
    await memory.async_add_message(create_user_message(f"p{me}:said"))
    for i in range(cfg["rounds"]):
        await memory.async_add_message(create_action("step", {"i": i}) | {"content": f"p{me}:act:{i}"})
        await memory.async_add_message(create_observation(f"p{me}:obs:{i}"))
    print("written", flush=True)
    sys.stdin.readline()
    view = await SharedMemory(store, "job", "reader").async_get_message_history()
    print(json.dumps([m["content"] for m in view]), flush=True)
    await store.async_close()


asyncio.run(main())
"""
