"""Workload 6: what fleet consistency costs a host, and what background summaries buy it.

A conversation on a persistent store is shared by every host: before each read or append, a
host with the conversation cached asks the store for turns other hosts committed, with one
range read (``load_range``) from the conversation's next log key; turns are written with a
conditional write (``save_if``). This workload puts a price on both halves of that promise.

Part (a), the coherence check, per store, over conversations of 20 turns held in the cache:

* ``read``: ``get_message_history`` of a cached conversation: the check, then the read.
* ``check``: the check alone, ``store.load_range(namespace, next log key, end of the log)``,
  an empty range when no other host wrote.
* ``add``: ``add_turn`` without a summarizer: the check, the conditional write, bookkeeping.
* ``check`` again on one conversation of 100 turns: "one small indexed read" should not grow
  with the conversation.

InMemoryStore lives in one process, so it does no check: its read is the bookkeeping alone,
the reference for "a read without the check". A diagnostic contender, an InMemoryStore that
ConversationMemory treats as shared, runs the coherent path against an in-process store, which
separates the plan's own cost from the store's round trip. Stores are those of workload 4.

Part (b), ``add_turn`` latency on SQLite (Rust path) with a summarizer that sleeps like a slow
LLM call: inline (the turn waits for it), in the background (``summarize_in_background``: the
turn returns once stored) and with no summarizer, for ``add_turn`` and ``async_add_turn``.
After the timed turns, ``flush`` waits for background summaries (off the clock), and a fresh
reader checks that every turn is in the summary or still kept, exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from benches.bench_stores import FILE, MONGO, PG, PY_MEM, PY_SQL, RUST_MEM, RUST_SQL, _Servers
from benches.bench_stores import make_store as make_plain_store
from benches.bench_turns import pool_for
from benches.harness import (
    Config,
    Row,
    Unavailable,
    WorkloadResult,
    filesystem_of,
    fill_rows,
    find,
    fmt_ratio,
    fmt_time,
    implementation,
    interleave,
    judge,
    memlane_backend,
)

BUDGET = 4000
SUMMARY_ROOM = 1024
TURNS_CACHED = 20
TURNS_LONG = 100
SHARED_MEM = "InMemoryStore (Rust) treated as shared (diagnostic)"
STORES = [RUST_MEM, PY_MEM, SHARED_MEM, RUST_SQL, PY_SQL, FILE, PG, MONGO]
TWINS = {PY_MEM, PY_SQL}
# The read without a check that each store's read is compared with: the same implementation's
# in-memory read (ledger and window of the same path).
BOOKKEEPING = {PY_MEM: PY_MEM, PY_SQL: PY_MEM}
READ = "get_message_history of a cached 20-turn conversation (check + read)"
CHECK = "coherence check alone: load_range of the empty range after the conversation's head"
CHECK_LONG = f"coherence check alone, {TURNS_LONG}-turn conversation (diagnostic: does it grow?)"
ADD = "add_turn, no summarizer (check + conditional write)"

NONE, INLINE, BACKGROUND = "no summarizer", "inline", "in the background"
SYNC_CONTENDERS = [NONE, f"{INLINE}, blocking summarizer", f"{BACKGROUND}, blocking summarizer"]
ASYNC_CONTENDERS = [
    NONE,
    f"{INLINE}, async summarizer",
    f"{BACKGROUND}, async summarizer",
    f"{INLINE}, blocking summarizer (worker thread)",
    f"{BACKGROUND}, blocking summarizer (worker thread)",
]
MARK = re.compile(r"\[t\d{3}\]")


# ---------------------------------------------------------------------------- part (a)


class _CountingStore:
    """Forwards to a store and counts its public method calls: what one operation asks of it."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


def _make_store(name: str, tmp: str, servers: _Servers) -> Any:
    if name != SHARED_MEM:
        return make_plain_store(name, tmp, servers)
    from memlane.store import InMemoryStore

    class SharedInMemoryStore(InMemoryStore):
        """An InMemoryStore that ConversationMemory checks and writes as if it were shared."""

        persistent = True

    with memlane_backend(rust=True):
        return SharedInMemoryStore()


class FleetStore:
    """One store and a host (ConversationMemory) with cached conversations on it."""

    def __init__(
        self,
        name: str,
        tmp: str,
        servers: _Servers,
        pool: list[tuple[str, str]],
        conversations: int,
    ) -> None:
        from memlane.conversation import ConversationMemory
        from memlane.tokens import TokenEstimator

        self.name = name
        self.pool = pool
        self.store = _make_store(name, tmp, servers)
        self.rust = name not in TWINS
        # Counting is the same for every store: the Rust engine counts for all of them, so
        # the rows differ by store (and, for the twins, by table and ledger) alone.
        with memlane_backend(rust=True):
            estimator = TokenEstimator()
        # Ledgers are made when a conversation is first loaded: all of them are, here.
        with memlane_backend(self.rust):
            self.cm = ConversationMemory(max_tokens=BUDGET, estimator=estimator, store=self.store)
            self.reads = [self._conversation(i, TURNS_CACHED) for i in range(conversations)]
            self.writes = [
                self._conversation(i + conversations, TURNS_CACHED) for i in range(conversations)
            ]
            self.long = self._conversation(-1, TURNS_LONG)
        got = implementation(self.cm._conversations.states[self.reads[0]].ledger)
        if got != ("rust" if self.rust else "python"):
            raise RuntimeError(f"{name}: backend switch failed, got a {got} ledger")
        native = getattr(self.store, "load_range", None)
        self.load_range: Callable[[str, str, str], list[Any]]
        if native is not None:
            self.load_range = native
        else:  # a store without it: the check the runner falls back to
            from memlane._runner import LoadRange, run_sync

            self.load_range = lambda *args: run_sync(LoadRange(*args), self.store)

    def _conversation(self, seed: int, turns: int) -> str:
        cid = self.cm.new_conversation()
        rng = random.Random(seed)
        for _ in range(turns):
            self.cm.add_turn(cid, *self.pool[rng.randrange(len(self.pool))])
        return cid

    def check_args(self, cid: str) -> tuple[str, str, str]:
        """What the conversation's coherence check asks the store for."""
        from memlane.conversation.state import LOG_STOP, log_key

        return self.cm.namespace(cid), log_key(self.cm._conversations.states[cid].head), LOG_STOP

    def ops(self, op: str, count: int, rng: random.Random) -> Callable[[], int]:
        """A timed callable doing ``count`` operations; returns a total to keep the work live."""
        reads = self.reads
        if op == "read":
            history = self.cm.get_message_history
            order = [rng.choice(reads) for _ in range(count)]
            return lambda: sum(len(history(cid)) for cid in order)
        if op in ("check", "check_long"):
            load_range = self.load_range
            args = [
                self.check_args(self.long if op == "check_long" else rng.choice(reads))
                for _ in range(count)
            ]
            return lambda: sum(len(load_range(*a)) for a in args)
        if op == "add":
            add, writes, pool = self.cm.add_turn, self.writes, self.pool
            jobs = [
                (writes[i % len(writes)], *pool[rng.randrange(len(pool))]) for i in range(count)
            ]
            return lambda: sum(add(*job).turn_id for job in jobs)
        raise ValueError(op)

    def verify(self) -> tuple[str, str]:
        """Store calls per read and per add_turn, and whether a fresh host reads the same."""
        from memlane.conversation import ConversationMemory

        counting = _CountingStore(self.store)
        with memlane_backend(self.rust):
            probe = ConversationMemory(
                max_tokens=BUDGET, estimator=self.cm.estimator, store=counting
            )
            cid = probe.new_conversation()
            probe.add_turn(cid, *self.pool[0])
            counting.calls.clear()
            probe.get_message_history(cid)
            per_read = dict(counting.calls)
            counting.calls.clear()
            probe.add_turn(cid, *self.pool[1])
            per_add = dict(counting.calls)
            probe.clear(cid)
        same = "same history as a fresh host"
        if self.cm._conversations.persistent:
            fresh = ConversationMemory(
                max_tokens=BUDGET, estimator=self.cm.estimator, store=self.store
            )
            for c in self.reads:
                if _texts(fresh.get_message_history(c)) != _texts(self.cm.get_message_history(c)):
                    same = "HISTORY DIFFERS from a fresh host's"
        else:
            same = "no check (the store is this process's memory)"
        return _calls(per_read) + "; " + same, _calls(per_add)

    def close(self) -> None:
        for cid in [*self.reads, *self.writes, self.long]:
            with contextlib.suppress(Exception):  # leave no bench data on servers, best effort
                self.cm.clear(cid)
        close = getattr(self.store, "close_sync", None) or getattr(self.store, "close", None)
        if close is not None:
            close()


def _texts(history: list[Any]) -> list[str]:
    return [p.content for m in history for p in m.parts if isinstance(p.content, str)]


def _calls(calls: dict[str, int]) -> str:
    if not calls:
        return "store calls: none"
    return "store calls: " + ", ".join(f"{k} ×{v}" for k, v in sorted(calls.items()))


def _calibrate(bench: FleetStore, op: str, budget: float, max_ops: int) -> int:
    """How many operations fit in ``budget`` seconds: doubling probes until a quarter is used."""
    k = 1
    while True:
        fn = bench.ops(op, k, random.Random(k))
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        if elapsed >= budget / 4 or k >= max_ops:
            return max(1, min(max_ops, int(k * budget / max(elapsed, 1e-9))))
        k *= 2


def _coherence(result: WorkloadResult, cfg: Config, log: Callable[[str], None]) -> None:
    _, pool = pool_for(cfg)
    conversations = 4 if cfg.quick else 8
    budget = 0.03 if cfg.quick else 0.15
    max_ops = 2_000 if cfg.quick else 10_000
    servers = _Servers(start=not cfg.quick)
    tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-fleet-")
    benches: dict[str, FleetStore] = {}
    unavailable: dict[str, str] = {}
    result.notes += [
        (
            f"Part (a): per store, one host (ConversationMemory, budget {BUDGET:,} tokens, exact counting on "
            f"the Rust engine for every store) with {conversations} conversations of {TURNS_CACHED} turns "
            f"(from workload 2's turn pool) read and {conversations} more appended to, all cached. Each "
            f"repetition runs as many operations as fit in ≈{budget * 1e3:.0f} ms (at most {max_ops:,}); "
            f"the median per-operation time over {cfg.reps} interleaved repetitions is reported; "
            f"'vs memlane' is against {RUST_MEM}, whose read does no check."
        ),
        (
            "The check column of the read rows gives the check's share of the read and what the coherent "
            "read costs over the same implementation's in-memory read (the plan, the lock and the check); "
            "store calls are counted on a separate conversation through a counting proxy. The check "
            "and the read are timed separately: where the check is nearly all of the read, its share "
            "can come out above 100 % by noise."
        ),
        f"Files live in {tempfile.gettempdir()} ({filesystem_of(tempfile.gettempdir())}).",
    ]
    try:
        for name in STORES:
            try:
                log(f"  preparing {name}")
                benches[name] = FleetStore(name, tmp.name, servers, pool, conversations)
            except Unavailable as exc:
                unavailable[name] = f"unavailable: {exc}"
            except Exception as exc:  # noqa: BLE001 - one broken store must not hide the others
                unavailable[name] = f"error: {type(exc).__name__}: {exc}"
        counts: dict[tuple[str, str], int] = {}
        for op, case in (
            ("read", READ),
            ("check", CHECK),
            ("add", ADD),
            ("check_long", CHECK_LONG),
        ):
            log(f"  {case}")

            def rep_fn(name: str, op: str = op) -> Callable[[int], float]:
                def rep(r: int) -> float:
                    if name in unavailable:
                        raise Unavailable(unavailable[name].removeprefix("unavailable: "))
                    bench = benches[name]
                    if (name, op) not in counts:
                        counts[name, op] = _calibrate(bench, op, budget, max_ops)
                    count = counts[name, op]
                    fn = bench.ops(op, count, random.Random(cfg.seed * 31 + r))
                    import gc

                    gc.collect()
                    start = time.perf_counter()
                    fn()
                    return (time.perf_counter() - start) / count

                return rep

            samples, failed = interleave(cfg.reps, [(n, rep_fn(n)) for n in STORES], log=log)
            failed.update(unavailable)
            fill_rows(
                result.rows,
                samples,
                failed,
                case,
                "op",
                RUST_MEM,
                throughput=lambda s: f"{1 / s:,.0f} ops/s",
            )
        _coherence_checks(result, benches, log)
        result.notes += [f"Server — {d}." for d in servers.described]
    finally:
        for b in benches.values():
            b.close()
        servers.stop()
        tmp.cleanup()


def _coherence_checks(
    result: WorkloadResult, benches: dict[str, FleetStore], log: Callable[[str], None]
) -> None:
    """Store calls, fresh-host agreement, the check's share; the one-round-trip target."""
    one_call: list[str] = []
    shares: list[str] = []
    differing: list[Row | None] = []
    for name, bench in benches.items():
        log(f"  verifying {name}")
        read_row, check_row, add_row, long_row = (
            find(result.rows, c, name) for c in (READ, CHECK, ADD, CHECK_LONG)
        )
        per_read, per_add = bench.verify()
        expected = (
            "store calls: load_range ×1"
            if bench.cm._conversations.persistent
            else "store calls: none"
        )
        if not per_read.startswith(expected + ";"):
            one_call.append(f"{name}: {per_read}")
            differing.append(read_row)
        if add_row:
            add_row.check = per_add
        if check_row and check_row.status == "ok":
            returned = sum(len(bench.load_range(*bench.check_args(c))) for c in bench.reads)
            check_row.check = f"{returned} entries returned" + (
                ""
                if bench.cm._conversations.persistent
                else "; ConversationMemory does not call it here"
            )
        if long_row and long_row.median_s and check_row and check_row.median_s:
            returned = len(bench.load_range(*bench.check_args(bench.long)))
            long_row.check = (
                f"{returned} entries returned; "
                f"{long_row.median_s / check_row.median_s:.2f}x the {TURNS_CACHED}-turn check"
            )
        if not read_row:
            continue
        read_row.check = per_read
        plain = find(result.rows, READ, BOOKKEEPING.get(name, RUST_MEM))
        if (
            bench.cm._conversations.persistent
            and read_row.median_s
            and check_row
            and check_row.median_s
            and plain
            and plain.median_s
        ):
            share = check_row.median_s / read_row.median_s
            over = read_row.median_s - plain.median_s
            read_row.check += (
                f"; check {fmt_time(check_row.median_s)} = {share:.0%} of the read; "
                f"{fmt_time(over)} over {plain.contender}'s read"
            )
            shares.append(
                f"{name} {fmt_time(check_row.median_s)} ({share:.0%} of a "
                f"{fmt_time(read_row.median_s)} read, which costs {fmt_time(over)} more than "
                "the in-memory read)"
            )
    if shares:
        result.notes.append("Coherence check per read: " + "; ".join(shares) + ".")
    judge(
        result,
        "a read of a cached conversation asks a shared store one load_range, and InMemoryStore nothing",
        float(len(one_call)) if benches else None,
        0,
        at_least=False,
        fmt=lambda v: f"{v:.0f} stores differing",
        rows=differing,
        detail="; ".join(one_call),
    )


# ---------------------------------------------------------------------------- part (b)


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (linear interpolation between closest ranks)."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


class LatencyRun:
    """One contender of part (b): conversations on a fresh SQLite file, served round-robin."""

    def __init__(
        self, contender: str, *, is_async: bool, sleep: float, threshold: int, max_tokens: int
    ) -> None:
        self.contender, self.is_async, self.sleep = contender, is_async, sleep
        self.threshold, self.max_tokens = threshold, max_tokens
        self.latencies: list[float] = []
        self.turns_checked = 0
        self.summaries = 0
        self.summaries_in_time = 0  # finished before the last timed turn returned
        self.over_budget = 0
        self.problems: list[str] = []

    def _summarizer(self, finished: list[float]) -> Any:
        if self.contender == NONE:
            return None
        sleep = self.sleep

        def text(turns: list[Any]) -> str:
            marks = [m for t in turns for m in MARK.findall(t.user_prompt + t.assistant_response)]
            return "Earlier turns: " + " ".join(marks)

        if "async summarizer" in self.contender:

            async def summarize_async(turns: list[Any]) -> str:
                await asyncio.sleep(sleep)
                finished.append(time.perf_counter())
                return text(turns)

            return summarize_async

        def summarize(turns: list[Any]) -> str:
            time.sleep(sleep)
            finished.append(time.perf_counter())
            return text(turns)

        return summarize

    def run(self, jobs: list[tuple[str, str]], conversations: int) -> float:
        """Times every turn of ``conversations`` conversations, flushes, verifies; returns the
        median seconds per turn."""
        from memlane.conversation import ConversationMemory
        from memlane.store import SQLiteStore

        finished: list[float] = []
        with tempfile.TemporaryDirectory(prefix="memlane-bench-fleet-") as tmp:
            store = SQLiteStore(os.path.join(tmp, "fleet.sqlite3"))
            cm = ConversationMemory(
                max_tokens=self.max_tokens,
                summarize_threshold=self.threshold,
                summarizer=self._summarizer(finished),
                store=store,
                summarize_in_background=self.contender.startswith(BACKGROUND),
            )
            try:
                cids = [cm.new_conversation() for _ in range(conversations)]
                schedule = [(cid, job) for job in jobs for cid in cids]
                if self.is_async:
                    latencies, last = asyncio.run(self._async_turns(cm, schedule))
                else:
                    latencies, last = self._sync_turns(cm, schedule)
                fresh = ConversationMemory(max_tokens=self.max_tokens, store=store)
                for cid in cids:
                    self._verify(fresh, cid, len(jobs))
            finally:
                cm.flush()
                store.close()
        self.latencies += latencies
        self.turns_checked += len(schedule)
        self.summaries += len(finished)
        self.summaries_in_time += sum(t <= last for t in finished)
        return statistics.median(latencies)

    def _sync_turns(
        self, cm: Any, schedule: list[tuple[str, tuple[str, str]]]
    ) -> tuple[list[float], float]:
        latencies = []
        for cid, (prompt, response) in schedule:
            start = time.perf_counter()
            cm.add_turn(cid, prompt, response)
            latencies.append(time.perf_counter() - start)
            self.over_budget += cm.get_history_tokens(cid) > self.max_tokens
        last = time.perf_counter()
        cm.flush()
        return latencies, last

    async def _async_turns(
        self, cm: Any, schedule: list[tuple[str, tuple[str, str]]]
    ) -> tuple[list[float], float]:
        latencies = []
        for cid, (prompt, response) in schedule:
            start = time.perf_counter()
            await cm.async_add_turn(cid, prompt, response)
            latencies.append(time.perf_counter() - start)
            self.over_budget += await cm.async_get_history_tokens(cid) > self.max_tokens
        last = time.perf_counter()
        await cm.async_flush()
        return latencies, last

    def _verify(self, fresh: Any, cid: str, turns: int) -> None:
        """Every turn in the summary or kept, exactly once; turn ids in order (a fresh host)."""
        kept = fresh.get_turns(cid)
        in_kept = [m for t in kept for m in MARK.findall(t.user_prompt)]
        in_summary = MARK.findall(fresh.get_summary(cid) or "")
        expected = [f"[t{i:03d}]" for i in range(turns)]
        seen = Counter(in_kept + in_summary)
        lost = [m for m in expected if not seen[m]]
        doubled = [m for m in expected if seen[m] > 1]
        ids = [t.turn_id for t in kept]
        if lost or doubled:
            self.problems.append(f"lost {lost}, doubled {doubled}")
        if ids != list(range(turns - len(kept), turns)):
            self.problems.append(f"kept turn ids {ids}")


def _latency(result: WorkloadResult, cfg: Config, log: Callable[[str], None]) -> None:
    from memlane.tokens import TokenEstimator

    _, pool = pool_for(cfg)
    turns, slow_turns = 60, 3
    reps = 1 if cfg.quick else 3
    sleep = 0.5 if cfg.quick else 2.0
    # Inline, every summary costs a turn the summarizer's sleep: one conversation per run. The
    # other contenders serve several, round-robin, for a steadier p99 (a background summary
    # costs one sleep in flush, however many conversations wait for theirs).
    served = 2 if cfg.quick else 5
    estimator = TokenEstimator()
    jobs = [
        (f"[t{i:03d}] {p}", r)
        for i, (p, r) in enumerate(random.Random(cfg.seed).choices(pool, k=turns))
    ]
    # Summaries start once the retained turns pass the threshold and, inline, every turn after
    # that summarises again (each summary only brings the total back under it): a threshold
    # equal to the total of the first turns keeps the slow turns to the last few.
    threshold = sum(estimator.estimate(p) + estimator.estimate(r) for p, r in jobs[:-slow_turns])
    # The budget is the threshold plus the summary's share: a summarizer needs room beside the
    # kept turns (a threshold at or above max_tokens is refused), and the markers of 60 turns fit.
    max_tokens = threshold + SUMMARY_ROOM
    result.notes += [
        (
            f"Part (b): conversations of {turns} turns on a fresh SQLiteStore (Rust path) per run: one "
            f"for the inline contenders, {served} served round-robin for the others; {reps} run(s) per "
            "contender, interleaved; p50/p99 over every turn latency of the runs. The summarizer sleeps "
            f"{sleep:g} s (a slow LLM call) and returns the turn markers it was given. "
            f"summarize_threshold = {threshold:,} tokens, the total of the first {turns - slow_turns} "
            f"turns, so that summaries are asked for by the last {slow_turns} turns of a conversation "
            f"(inline, each of them summarises); max_tokens = {max_tokens:,} (the threshold and "
            f"{SUMMARY_ROOM:,} tokens for the summary). Background summaries still "
            "running after the last turn are waited for with flush() off the clock; a fresh host then "
            "checks that every turn is in the summary or kept, exactly once, with turn ids in order, "
            "and every history was checked against the budget after its turn."
        ),
        (
            "A background summary starts when a turn needs one and none is in flight for that "
            "conversation; it covers the turns over the threshold when it starts, so turns added while "
            "it sleeps are summarised after the next add_turn. Its commit (a conditional write and the "
            "deletes, under the conversation's lock) lands in flush() here, so what a turn arriving "
            "during a commit would wait is not part of these numbers."
        ),
        "'vs memlane' in part (b) is against the no-summarizer row of the same case.",
    ]
    if cfg.quick:
        result.notes.append(f"--quick: the summarizer sleeps {sleep:g} s instead of 2 s.")
    for api, names in (("add_turn", SYNC_CONTENDERS), ("async_add_turn", ASYNC_CONTENDERS)):
        is_async = api.startswith("async")
        runs = {
            n: LatencyRun(
                n, is_async=is_async, sleep=sleep, threshold=threshold, max_tokens=max_tokens
            )
            for n in names
        }
        log(f"  {api}")

        def rep_fn(run: LatencyRun) -> Callable[[int], float]:
            conversations = 1 if run.contender.startswith(INLINE) else served
            return lambda _: run.run(jobs, conversations)

        _, failed = interleave(reps, [(n, rep_fn(runs[n])) for n in names], log=log)
        label = f"on SQLiteStore, summarizer sleeping {sleep:g} s"
        for stat, q in (("p50", 50), ("p99", 99)):
            samples = {n: [percentile(runs[n].latencies, q)] for n in names if runs[n].latencies}
            rows = fill_rows(
                result.rows,
                {n: samples.get(n, []) for n in names},
                failed,
                f"{api} {stat}, {label}",
                "turn",
                NONE,
            )
            for row in rows:
                run = runs[row.contender]
                if not run.latencies:
                    continue
                row.reps = len(run.latencies)
                row.min_s, row.max_s = min(run.latencies), max(run.latencies)
                row.samples = run.latencies if stat == "p50" else []
                row.check = _latency_check(run)
        _latency_target(result, api, f"{api} p99, {label}", sleep)


def _latency_check(run: LatencyRun) -> str:
    parts = [f"max {fmt_time(max(run.latencies))}"]
    if run.contender != NONE:
        parts.append(
            f"summaries: {run.summaries}, {run.summaries_in_time} of them done before the last "
            "turn returned"
        )
    total = run.turns_checked
    parts.append(
        f"{len(run.latencies)} turns timed; no turn lost or doubled ({total}/{total})"
        if not run.problems
        else "TURNS LOST OR DOUBLED: " + "; ".join(run.problems)
    )
    parts.append(
        "every history within budget" if not run.over_budget else f"{run.over_budget} OVER BUDGET"
    )
    return "; ".join(parts)


def _latency_target(result: WorkloadResult, api: str, case: str, sleep: float) -> None:
    rows = [r for r in result.rows if r.case == case]
    none = find(rows, case, NONE)
    background = [r for r in rows if r.contender.startswith(BACKGROUND)]
    # What the summarizer adds to p99, as a share of its own time (inline: all of it). A
    # ratio to the no-summarizer p99 would judge the scheduler instead: on a busy machine the
    # p99 of a sub-millisecond turn is a preemption of a few milliseconds, either way.
    added = {
        r.contender: (r.median_s - none.median_s) / sleep
        for r in background
        if r.median_s and none and none.median_s
    }
    judge(
        result,
        f"{api} with a slow summarizer in the background: it adds ≤ 2 % of its time to p99 "
        "(inline: all of it)",
        max(added.values()) if background and len(added) == len(background) else None,
        0.02,
        at_least=False,
        fmt=lambda v: f"{v:.1%}",
        rows=list(background),
        detail="; ".join(
            f"{r.contender} {fmt_time(r.median_s)}, {fmt_ratio(r.ratio)} the p99 without one"
            for r in background
        ),
    )
    broken: list[Row | None] = [r for r in rows if "LOST" in r.check or "OVER BUDGET" in r.check]
    judge(
        result,
        f"{api}: no turn lost or doubled and every history within budget, with every summarizer mode",
        float(len(broken)) if rows else None,
        0,
        at_least=False,
        fmt=lambda v: f"{v:.0f} contenders failing",
        rows=broken,
    )


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "fleet",
        "6. Fleet: the coherence check per store, and summaries off the request path",
        quick=cfg.quick,
    )
    log("  (a) the coherence check")
    _coherence(result, cfg, log)
    log("  (b) add_turn latency with a slow summarizer")
    _latency(result, cfg, log)
    return result
