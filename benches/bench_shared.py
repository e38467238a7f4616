"""Workload 8: shared multi-agent memory, what ``add`` and each role's view cost as a job grows.

Per store and job size (100 and 100,000 messages in one namespace; ``--quick``: 100 and
2,000), a manager and two workers: each round the user asks, the manager hands each worker a
task, each worker makes a tool call, observes and reports a final result, the manager answers;
every fifth round a broadcast. The job is loaded with ``save_many`` off the clock (the entries
``append`` would write, :func:`memlane.shared.persistent.bulk_entries`), so the large size is
reached without 100,000 conditional writes.

Timed, each on a memory that has read the job before (as an agent's memory has):

* ``add``: a worker's ``SharedMemory.add`` of an observation (the next number of its feed,
  claimed with ``save_if``).
* the worker view: ``get_message_history(filter=WorkerHistoryFilter(), max_tokens=150)``.
* the manager view: ``get_message_history(filter=ManagerHistoryFilter(), max_tokens=150)`` with both
  workers as subordinates.
* the orchestrator view: ``get_message_history(filter=OrchestratorHistoryFilter(), max_tokens=150)``.
* the whole feed: ``get_message_history(limit=20)`` of the namespace.

The budget is one every view fills at both sizes, so both return as many messages and the
100,000/100 ratio shows what the job's size adds: the issue asks for at most 1.5x (views read
the newest keys of the feeds they show, not the job). Each answer is checked against the same
view computed from the whole job in Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benches.bench_stores import (
    FILE,
    MONGO,
    PG,
    PY_MEM,
    PY_SQL,
    RUST_MEM,
    RUST_SQL,
    _Servers,
    make_store,
)
from benches.harness import (
    Config,
    Unavailable,
    WorkloadResult,
    fill_rows,
    find,
    fmt_ratio,
    fmt_time,
    judge,
)

STORES = [RUST_MEM, PY_MEM, RUST_SQL, PY_SQL, FILE, PG, MONGO]
BUDGET = 150
SLOW = 2.0  # seconds for one warm call: a store this slow is reported, not timed 700 times
LIMIT = 20
WORKERS = ("worker_1", "worker_2")
OPS = ["add", "worker", "manager", "orchestrator", "feed"]
LABELS = {
    "add": "add (a worker's observation)",
    "worker": f"worker view, WorkerHistoryFilter, max_tokens={BUDGET}",
    "manager": f"manager view, ManagerHistoryFilter, max_tokens={BUDGET}",
    "orchestrator": f"orchestrator view, OrchestratorHistoryFilter, max_tokens={BUDGET}",
    "feed": f"whole feed, limit={LIMIT}",
}


def job(n: int) -> list[dict[str, Any]]:
    """``n`` messages of a job, in the order they were added (timestamps strictly rising)."""
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 1, 1, tzinfo=UTC)
    messages: list[dict[str, Any]] = []
    r = 0
    while len(messages) < n:
        batch: list[dict[str, Any]] = [
            {"type": "user_message", "content": f"question {r}: which tables grew?"}
        ]
        batch += [{"type": "task", "content": f"check table {r}", "agent_key": w} for w in WORKERS]
        for w in WORKERS:
            batch += [
                {"type": "action", "content": f'count({{"t": {r}}})', "tool": "count",
                 "args": {"t": r}, "agent_key": w},
                {"type": "observation", "content": f"{r * 7 % 100} rows", "agent_key": w},
                {"type": "final", "content": f"table {r}: +{r * 7 % 100}", "agent_key": w},
            ]  # fmt: skip
        batch.append({"type": "assistant_message", "content": f"answer {r}"})
        if r % 5 == 0:
            batch.append({"type": "note", "content": f"broadcast {r}", "is_global": True,
                          "agent_key": "manager"})  # fmt: skip
        messages += batch
        r += 1
    del messages[n:]
    for i, message in enumerate(messages):
        message["timestamp"] = (start + timedelta(milliseconds=i)).isoformat()
    return messages


class Job:
    """One store holding a job of ``n`` messages, and the memories of its three agents."""

    def __init__(self, store: Any, n: int, run_id: str) -> None:
        from memlane.shared import SharedMemory, StoreMessageStore
        from memlane.shared.persistent import bulk_entries

        self.n = n
        self.location = f"bench-{run_id}-{n}"
        self.messages = job(n)
        blocks: dict[str, list[Any]] = {}
        for ns, entry in bulk_entries(self.location, self.messages):
            blocks.setdefault(ns, []).append(entry)
        for ns, entries in blocks.items():
            store.save_many(ns, entries)
        shared = StoreMessageStore(store)
        self.worker = SharedMemory(shared, self.location, "worker_1")
        self.manager = SharedMemory(shared, self.location, "manager", subordinates=WORKERS)
        self.added = 0

    def view(self, op: str) -> Callable[[], Any]:
        """A coroutine function for one call of ``op``."""
        from memlane.shared import (
            ManagerHistoryFilter,
            OrchestratorHistoryFilter,
            WorkerHistoryFilter,
        )
        from memlane.shared.message_builder import create_observation

        if op == "add":

            async def add() -> None:
                self.added += 1
                await self.worker.async_add_message(create_observation(f"extra {self.added}"))

            return add
        memory, kwargs = {
            "worker": (self.worker, {"filter": WorkerHistoryFilter(), "max_tokens": BUDGET}),
            "manager": (self.manager, {"filter": ManagerHistoryFilter(), "max_tokens": BUDGET}),
            "orchestrator": (
                self.manager,
                {"filter": OrchestratorHistoryFilter(), "max_tokens": BUDGET},
            ),
            "feed": (self.manager, {"limit": LIMIT}),
        }[op]
        return lambda: memory.async_get_message_history(**kwargs)


def _expected(messages: list[dict[str, Any]], op: str) -> list[dict[str, Any]]:
    """The view computed from the whole job, in Python: what the store's answer must equal."""
    from memlane import TokenEstimator
    from memlane.shared import InMemoryMemory
    from memlane.shared.message_builder import check_message

    memory = InMemoryMemory(token_estimator=TokenEstimator())
    store = memory.message_store
    for message in messages:
        store.append(memory.location, check_message(message))
    from memlane.shared import (
        HierarchicalMessageStoreMemory,
        ManagerHistoryFilter,
        MessageStoreMemory,
        OrchestratorHistoryFilter,
        WorkerHistoryFilter,
    )

    async def compute() -> list[dict[str, Any]]:
        if op == "worker":
            worker = MessageStoreMemory(store, memory.location, "worker_1")
            return await worker.async_get_message_history(
                filter=WorkerHistoryFilter(), max_tokens=BUDGET
            )
        boss = HierarchicalMessageStoreMemory(store, memory.location, "manager", list(WORKERS))
        if op == "manager":
            return await boss.async_get_message_history(
                filter=ManagerHistoryFilter(), max_tokens=BUDGET
            )
        if op == "orchestrator":
            return await boss.async_get_message_history(
                filter=OrchestratorHistoryFilter(), max_tokens=BUDGET
            )
        return (await memory.async_get_message_history())[-LIMIT:]

    return asyncio.run(compute())


def case_name(op: str, n: int) -> str:
    return f"{LABELS[op]}, {n:,} messages"


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "shared",
        "8. Shared memory: add and each role's view against the job's size",
        quick=cfg.quick,
    )
    sizes = (100, 2_000) if cfg.quick else (100, 100_000)
    calls = 20 if cfg.quick else 100
    servers = _Servers(start=not cfg.quick)
    tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-shared-")
    run_id = f"{time.time_ns():x}"
    loop = asyncio.new_event_loop()
    jobs: dict[tuple[str, int], Job] = {}
    unavailable: dict[str, str] = {}
    stores: list[Any] = []
    try:
        for name in STORES:
            try:
                store = make_store(name, tmp.name, servers)
                stores.append(store)
                for n in sizes:
                    log(f"  filling {name} with {n:,} messages")
                    start = time.perf_counter()
                    jobs[name, n] = Job(store, n, run_id)
                    log(f"    ({time.perf_counter() - start:.1f} s)")
            except Unavailable as exc:
                unavailable[name] = f"unavailable: {exc}"
            except Exception as exc:  # noqa: BLE001 - one broken store must not hide the others
                unavailable[name] = f"error: {type(exc).__name__}: {exc}"
        for op in OPS:
            log(f"  {LABELS[op]}, {sizes[0]:,} and {sizes[1]:,} messages")

            def rep_fn(name: str, n: int, op: str = op) -> Callable[[], float]:
                def rep() -> float:
                    one = jobs[name, n].view(op)
                    warm = time.perf_counter()
                    loop.run_until_complete(one())  # warm: the memory has read the job
                    if time.perf_counter() - warm > SLOW:
                        raise Unavailable(
                            f"one call took {time.perf_counter() - warm:.1f} s at {n:,} "
                            "messages (a server scanning its collection, as FerretDB's SQLite "
                            "backend does), so its 7 x 100 calls were not timed"
                        )
                    gc.collect()
                    start = time.perf_counter()
                    for _ in range(calls):
                        loop.run_until_complete(one())
                    return (time.perf_counter() - start) / calls

                return rep

            samples, failed = _paired(
                cfg.reps, sizes, {nm: rep_fn for nm in STORES if nm not in unavailable}, log
            )
            failed.update(unavailable)
            for n in sizes:
                by_store = {nm: samples.get((nm, n), []) for nm in STORES}
                fill_rows(result.rows, by_store, failed, case_name(op, n), "call", RUST_MEM)
        _checks(result, jobs, sizes, loop)
        _ratios(result, sizes)
    finally:
        for store in stores:
            with contextlib.suppress(Exception):  # best effort at the end of a run
                store.close()
        loop.close()
        servers.stop()
        tmp.cleanup()
    result.notes.append(
        f"Job sizes {sizes[0]:,} and {sizes[1]:,} messages; {calls} calls per repetition, on "
        "memories that read the job once before the clock. Views are budgeted so each fills "
        "its budget at both sizes; the ratio column of the targets is 100k-message time over "
        "100-message time for the same store and view."
    )
    return result


def _paired(
    reps: int,
    sizes: tuple[int, int],
    reps_of: dict[str, Callable[[str, int], Callable[[], float]]],
    log: Callable[[str], None],
) -> tuple[dict[tuple[str, int], list[float]], dict[str, str]]:
    """Times each store at both sizes back to back in every repetition (the stores in a
    rotating order, the sizes alternating), so a load that comes and goes on a shared
    machine weighs on both sides of a store's ratio alike."""
    samples: dict[tuple[str, int], list[float]] = {}
    failed: dict[str, str] = {}
    names = list(reps_of)
    for r in range(reps):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if name in failed:
                continue
            for n in sizes if r % 2 == 0 else sizes[::-1]:
                try:
                    samples.setdefault((name, n), []).append(reps_of[name](name, n)())
                except Unavailable as exc:
                    failed[name] = f"unavailable: {exc}"
                    log(f"    {name}: {failed[name]}")
                    break
                except Exception as exc:  # noqa: BLE001 - one broken store must not hide the others
                    failed[name] = f"error: {type(exc).__name__}: {exc}"
                    log(f"    {name} at {n:,} messages: {failed[name]}")
                    break
        done = ", ".join(
            f"{name} {'/'.join(fmt_time(samples[name, n][-1]) for n in sizes)}"
            for name in names
            if name not in failed and all(len(samples.get((name, n), [])) > r for n in sizes)
        )
        log(f"    rep {r + 1}/{reps}: {done}")
    return samples, failed


def _checks(
    result: WorkloadResult,
    jobs: dict[tuple[str, int], Job],
    sizes: tuple[int, int],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Marks each view row with whether its answer equals the view computed in Python."""
    for op in OPS[1:]:
        for n in sizes:
            expected: list[dict[str, Any]] | None = None
            for row in result.rows:
                job_ = jobs.get((row.contender, n))
                if row.case != case_name(op, n) or row.status != "ok" or job_ is None:
                    continue
                if expected is None:
                    # The job as loaded, plus the observations ``add`` appended since.
                    extra = asyncio.run(_worker_trace(job_))
                    expected = _expected(job_.messages + extra, op)
                got = loop.run_until_complete(job_.view(op)())
                same = [m["content"] for m in got] == [m["content"] for m in expected]
                row.check = f"{len(got)} messages, {'= the reference' if same else 'DIFFERS'}"


async def _worker_trace(job_: Job) -> list[dict[str, Any]]:
    from memlane.shared import StoreMessageStore

    store = StoreMessageStore(job_.worker.store)
    trace = await store.async_get_agent_messages(job_.location, "worker_1")
    return [m for m in trace if str(m["content"]).startswith("extra ")]


def _ratios(result: WorkloadResult, sizes: tuple[int, int]) -> None:
    small, large = sizes
    for name in STORES:
        ratios: dict[str, float] = {}
        rows = []
        for op in OPS:
            a, b = (
                find(result.rows, case_name(op, small), name),
                find(result.rows, case_name(op, large), name),
            )
            rows += [a, b]
            if a and b and a.median_s and b.median_s:
                ratios[op] = b.median_s / a.median_s
                b.check = (b.check + "; " if b.check else "") + (
                    f"{fmt_ratio(ratios[op])} the {small:,}-message time"
                )
        worst = max(ratios, key=lambda k: ratios[k]) if ratios else ""
        judge(
            result,
            f"{name}: add and every view at {large:,} messages cost ≤ 1.5x their cost at "
            f"{small:,} (worst: {worst or '—'})",
            ratios.get(worst) if ratios else None,
            1.5,
            at_least=False,
            rows=rows,
        )
