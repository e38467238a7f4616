"""Workloads 2 and 3: the agent-host turn loop, and its per-turn cost as conversations grow.

One turn is what an agent host does per request: record the exchange, then fetch the history
to send with the next request, kept under a 4,000-token budget.

* memlane: ``ConversationMemory(max_tokens=4000).add_turn(cid, prompt, response)`` then
  ``get_message_history(cid)``, on the Rust path (``InMemoryStore`` / ``SQLiteStore``) and on
  its pure-Python twin, exact o200k_base counting unless the case says heuristic.
* LangChain, the common do-it-yourself approach: a plain list of ``HumanMessage`` /
  ``AIMessage``, and per turn ``trim_messages(messages, max_tokens=4000, strategy="last",
  start_on="human", token_counter=...)`` with a tiktoken counter of the message contents
  (what memlane counts, so both keep the same turns). "recount" is the counter as usually
  written (every call re-encodes every message it is given); "cached counts" looks each
  message's count up in a dict filled once when the message is appended (the strongest fair
  version: the counting cost is paid once per message, as memlane pays it).

* The counting floor: no turn can cost less than counting its new text once, so counting each
  turn's prompt and response once with memlane's Rust counter (the call ``add_turn`` makes, on
  the same texts) is timed as a contender of its own, and memlane's turn is reported as a
  multiple of it: everything above it is bookkeeping.

Every contender's histories are checked against the budget with tiktoken, independently of
memlane's own counter, and their lengths compared turn by turn with memlane's.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benches import corpus as corpus_mod
from benches.bench_tokens import tiktoken_encoding
from benches.harness import (
    Config,
    Row,
    Unavailable,
    WorkloadResult,
    filesystem_of,
    fill_rows,
    find,
    fmt_time,
    implementation,
    interleave,
    judge,
    memlane_backend,
    profile,
    require_rust,
    timed,
)

BUDGET = 4000
PROMPT_TOKENS, RESPONSE_TOKENS = 60, 200

RUST_MEM = "memlane (Rust), InMemoryStore"
RUST_SQL = "memlane (Rust), SQLiteStore"
PY_MEM = "memlane pure-Python twin, InMemoryStore"
PY_SQL = "memlane pure-Python twin, SQLiteStore"
LC_CACHED = "LangChain trim_messages + tiktoken, cached counts"
LC_RECOUNT = "LangChain trim_messages + tiktoken, recount (as usually written)"
RUST_HEUR = "memlane (Rust), InMemoryStore, heuristic mode"
PY_HEUR = "memlane pure-Python twin, InMemoryStore, heuristic mode"
FLOOR = "counting floor: each turn's new text counted once (memlane Rust counter)"

Schedule = list[tuple[int, int]]  # (conversation index, pool index) per turn, in order


class MemlaneTurns:
    """memlane's ConversationMemory on one backend and store."""

    def __init__(self, name: str, *, rust: bool, store: str, mode: str = "exact") -> None:
        self.name, self.rust, self.store_kind, self.mode = name, rust, store, mode
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.cm: Any = None
        self.cids: list[str] = []

    def start(self, conversations: int) -> None:
        """A fresh memory and store with ``conversations`` conversations (off the clock)."""
        from memlane.conversation import ConversationMemory
        from memlane.store import InMemoryStore, SQLiteStore
        from memlane.tokens import TokenEstimator

        self.close()
        if self.rust:
            require_rust(
                "Encoder",
                "BudgetLedger",
                "MemoryTable" if self.store_kind == "memory" else "SqliteTable",
            )
        with memlane_backend(self.rust):
            est = TokenEstimator(mode=self.mode)
            if self.store_kind == "memory":
                store: Any = InMemoryStore()
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-")
                store = SQLiteStore(os.path.join(self._tmp.name, "turns.sqlite3"))
            self.cm = ConversationMemory(max_tokens=BUDGET, estimator=est, store=store)
            self.cids = [self.cm.new_conversation() for _ in range(conversations)]
        want = "rust" if self.rust else "python"
        got = {
            implementation(est),
            implementation(store._table),
            implementation(self.cm._conversations.states[self.cids[0]].ledger),
        }
        if got != {want}:
            raise RuntimeError(f"{self.name}: backend switch failed, got {got}")

    def run(self, schedule: Schedule, pool: list[tuple[str, str]]) -> list[Any]:
        """The timed loop; returns the last history of every conversation."""
        add, history = self.cm.add_turn, self.cm.get_message_history
        cids = self.cids
        last: list[Any] = [None] * len(cids)
        for ci, pi in schedule:
            prompt, response = pool[pi]
            cid = cids[ci]
            add(cid, prompt, response)
            last[ci] = history(cid)
        return last

    def step(self, ci: int, prompt: str, response: str) -> Any:
        cid = self.cids[ci]
        self.cm.add_turn(cid, prompt, response)
        return self.cm.get_message_history(cid)

    @staticmethod
    def texts(history: Any) -> list[str]:
        return [
            p.content
            for m in history
            for p in m.parts
            if isinstance(getattr(p, "content", None), str)
        ]

    def close(self) -> None:
        if self.cm is not None and hasattr(self.cm.store, "close"):
            self.cm.store.close()
        self.cm = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class LangChainTurns:
    """A plain message list trimmed by langchain_core's trim_messages every turn."""

    def __init__(self, name: str, *, cached: bool) -> None:
        self.name, self.cached = name, cached
        self.convs: list[tuple[list[Any], dict[int, int]]] = []
        self._enc: Any = None

    def start(self, conversations: int) -> None:
        try:
            from langchain_core.messages import trim_messages  # noqa: F401
        except ImportError as exc:
            raise Unavailable(
                "langchain-core is not installed (pip install -r benches/requirements.txt)"
            ) from exc
        self._enc = tiktoken_encoding()
        self.convs = [([], {}) for _ in range(conversations)]

    def _counter(self, cache: dict[int, int]) -> Callable[[list[Any]], int]:
        encode = self._enc.encode_ordinary
        if self.cached:
            get = cache.__getitem__

            def cached_counter(messages: list[Any]) -> int:
                return sum(map(get, map(id, messages)))

            return cached_counter

        def recount(messages: list[Any]) -> int:
            return sum(len(encode(m.content)) for m in messages)

        return recount

    def run(self, schedule: Schedule, pool: list[tuple[str, str]]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, trim_messages

        encode = self._enc.encode_ordinary
        counters = [self._counter(cache) for _, cache in self.convs]
        last: list[Any] = [None] * len(self.convs)
        cached = self.cached
        for ci, pi in schedule:
            prompt, response = pool[pi]
            messages, cache = self.convs[ci]
            human, ai = HumanMessage(prompt), AIMessage(response)
            if cached:
                cache[id(human)] = len(encode(prompt))
                cache[id(ai)] = len(encode(response))
            messages.append(human)
            messages.append(ai)
            last[ci] = trim_messages(
                messages,
                max_tokens=BUDGET,
                strategy="last",
                start_on="human",
                token_counter=counters[ci],
            )
        return last

    def step(self, ci: int, prompt: str, response: str) -> Any:
        return self.run([(ci, 0)], [(prompt, response)])[ci]

    def prefill(self, ci: int, pairs: list[tuple[str, str]]) -> None:
        """Appends turns without trimming: the list an application would hold (off the clock)."""
        from langchain_core.messages import AIMessage, HumanMessage

        messages, cache = self.convs[ci]
        encode = self._enc.encode_ordinary
        for prompt, response in pairs:
            human, ai = HumanMessage(prompt), AIMessage(response)
            if self.cached:
                cache[id(human)] = len(encode(prompt))
                cache[id(ai)] = len(encode(response))
            messages.append(human)
            messages.append(ai)

    @staticmethod
    def texts(history: Any) -> list[str]:
        return [m.content for m in history]

    def close(self) -> None:
        self.convs = []


class CountingFloor:
    """The least a turn can cost: its prompt and response counted once, nothing kept.

    The same call ``add_turn`` makes to count a turn's texts (the Rust encoder's ``count_many``
    on ``[prompt, response]``), with no history: there is nothing to check against the budget.
    """

    name = FLOOR

    def __init__(self) -> None:
        self._count: Callable[[list[str]], list[int]] | None = None
        self.conversations = 0

    def start(self, conversations: int) -> None:
        from memlane.tokens import TokenEstimator

        require_rust("Encoder")
        with memlane_backend(rust=True):
            est = TokenEstimator()
        if implementation(est) != "rust":
            raise RuntimeError(f"{self.name}: backend switch failed")
        self._count = getattr(est, "_count_many", est.estimate_many)
        self.conversations = conversations

    def run(self, schedule: Schedule, pool: list[tuple[str, str]]) -> list[Any]:
        count = self._count
        assert count is not None
        for _, pi in schedule:
            prompt, response = pool[pi]
            sum(count([prompt, response]))
        return [None] * self.conversations

    def close(self) -> None:
        self._count = None


def make_contenders(names: list[str]) -> dict[str, Any]:
    table = {
        RUST_MEM: lambda: MemlaneTurns(RUST_MEM, rust=True, store="memory"),
        RUST_SQL: lambda: MemlaneTurns(RUST_SQL, rust=True, store="sqlite"),
        PY_MEM: lambda: MemlaneTurns(PY_MEM, rust=False, store="memory"),
        PY_SQL: lambda: MemlaneTurns(PY_SQL, rust=False, store="sqlite"),
        LC_CACHED: lambda: LangChainTurns(LC_CACHED, cached=True),
        LC_RECOUNT: lambda: LangChainTurns(LC_RECOUNT, cached=False),
        RUST_HEUR: lambda: MemlaneTurns(RUST_HEUR, rust=True, store="memory", mode="heuristic"),
        PY_HEUR: lambda: MemlaneTurns(PY_HEUR, rust=False, store="memory", mode="heuristic"),
        FLOOR: CountingFloor,
    }
    return {n: table[n]() for n in names}


def pool_for(cfg: Config) -> tuple[corpus_mod.Corpus, list[tuple[str, str]]]:
    corpus = corpus_mod.build(corpus_mod.corpus_size(cfg.quick), cfg.seed)
    enc = tiktoken_encoding()
    encode = enc.encode_ordinary  # type: ignore[attr-defined]
    pool = corpus_mod.turn_pool(
        corpus, 1000 if cfg.quick else 4000, cfg.seed, lambda t: len(encode(t))
    )
    return corpus, pool


def schedule_for(rep: int, conversations: int, turns: int, pool_size: int, seed: int) -> Schedule:
    rng = random.Random(seed * 1000 + rep)
    return [(c, rng.randrange(pool_size)) for _ in range(turns) for c in range(conversations)]


def verify(
    contender: Any,
    pool: list[tuple[str, str]],
    turns: int,
    seed: int,
    encode: Callable[[str], list[int]],
) -> tuple[int, int, list[int]]:
    """One conversation of ``turns`` turns, every history checked in exact tokens (tiktoken).

    Returns (max exact tokens seen, turns over budget, history length in messages per turn).
    """
    contender.start(1)
    rng = random.Random(seed)
    worst, over, lengths = 0, 0, []
    try:
        for _ in range(turns):
            prompt, response = pool[rng.randrange(len(pool))]
            history = contender.step(0, prompt, response)
            tokens = sum(len(encode(t)) for t in contender.texts(history))
            worst = max(worst, tokens)
            over += tokens > BUDGET
            lengths.append(len(history))
    finally:
        contender.close()
    return worst, over, lengths


# ---------------------------------------------------------------------------- workload 2


def run_turns(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "turns", "2. Agent-host turn loop (add_turn + get_message_history)", quick=cfg.quick
    )
    corpus, pool = pool_for(cfg)
    enc = tiktoken_encoding()
    encode = enc.encode_ordinary  # type: ignore[attr-defined]
    p_tok = sum(len(encode(p)) for p, _ in pool) / len(pool)
    r_tok = sum(len(encode(r)) for _, r in pool) / len(pool)
    reps, per_rep, turns = (cfg.reps, 3, 100) if cfg.quick else (5, 20, 500)
    # Conversations per repetition. The pure-Python twins (exact counting in Python, milliseconds
    # per turn on CJK text) and the recount variant (re-encodes the whole list every call) would
    # take many minutes over 100 conversations; their per-turn cost does not depend on how many
    # conversations are served, so they run fewer conversations of the same length.
    slow = (
        {PY_MEM: 2, PY_SQL: 2, LC_RECOUNT: 1}
        if not cfg.quick
        else {PY_MEM: 1, PY_SQL: 1, LC_RECOUNT: 1}
    )
    conversations = {
        n: slow.get(n, per_rep)
        for n in (
            RUST_MEM,
            RUST_SQL,
            PY_MEM,
            PY_SQL,
            LC_CACHED,
            LC_RECOUNT,
            RUST_HEUR,
            PY_HEUR,
            FLOOR,
        )
    }
    result.notes += [
        (
            f"Turn pool: {len(pool):,} (prompt, response) pairs cut from the token-counting corpus "
            f"({corpus.digest}); mean {p_tok:.0f} + {r_tok:.0f} exact tokens per turn. Budget {BUDGET:,} tokens."
        ),
        f"{reps} interleaved repetitions; in each, a contender serves its conversations round-robin for {turns} "
        f"turns each; the median per-turn time over repetitions is reported. Conversations per repetition: "
        + ", ".join(f"{n} {c}" for n, c in conversations.items())
        + f" (so {reps * per_rep} conversations × {turns} turns for the fast contenders; the slow ones run "
        "fewer conversations of the same length, which leaves their per-turn cost unchanged).",
        (
            f"SQLite files live in {tempfile.gettempdir()} ({filesystem_of(tempfile.gettempdir())}); "
            "WAL + synchronous=NORMAL on both backends."
        ),
        (
            "The counting floor counts each turn's prompt and response once with memlane's Rust "
            "counter, the call add_turn makes on the same texts, and keeps nothing: a turn cannot cost "
            "less. memlane's Rust rows give their turn as a multiple of it in the check column."
        ),
        (
            "Heuristic mode budgets with its own estimate (whitespace words × 1.33), so its histories are "
            "expected to overshoot the budget in exact tokens on code, JSON and CJK text; the check column "
            "reports by how much rather than failing the run."
        ),
        (
            "In-process backend switch: memlane._backend.core / memlane.store.core / "
            "memlane.conversation.core are set to the extension or None while a contender is built; "
            "the classes obtained (estimator, table, ledger) are checked to be Rust or Python as named."
        ),
    ]
    if cfg.quick:
        result.notes.append(f"--quick: {turns} turns per conversation instead of 500.")
    log(
        f"  pool: {len(pool)} pairs, {p_tok:.0f}+{r_tok:.0f} tokens/turn; {reps} reps × ≤{per_rep} conversations × {turns} turns"
    )

    exact = [RUST_MEM, RUST_SQL, PY_MEM, PY_SQL, LC_CACHED, LC_RECOUNT, FLOOR]
    heuristic = [RUST_HEUR, PY_HEUR]
    for case, names in (("exact counting", exact), ("heuristic mode", heuristic)):
        contenders = make_contenders(names)
        last_histories: dict[str, list[Any]] = {}

        def rep_fn(
            name: str,
            contenders: dict[str, Any] = contenders,
            last_histories: dict[str, list[Any]] = last_histories,
        ) -> Callable[[int], float]:
            contender = contenders[name]

            def rep(rep_index: int) -> float:
                n_conv = conversations[name]
                schedule = schedule_for(rep_index, n_conv, turns, len(pool), cfg.seed)
                contender.start(n_conv)
                try:
                    elapsed, last = timed(lambda: contender.run(schedule, pool))
                finally:
                    contender.close()
                last_histories.setdefault(name, []).extend(last)
                return elapsed / len(schedule)

            return rep

        log(f"  {case}")
        samples, failed = interleave(reps, [(n, rep_fn(n)) for n in names], log=log)
        ref = RUST_MEM if case == "exact counting" else RUST_HEUR
        rows = fill_rows(
            result.rows,
            samples,
            failed,
            case,
            "turn",
            ref,
            throughput=lambda s: f"{1 / s:,.0f} turns/s",
        )
        _checks(rows, contenders, last_histories, pool, cfg, encode, turns)
        result.plot[case] = {r.contender: r.median_s for r in rows if r.median_s}

    exact_rows = [r for r in result.rows if r.case == "exact counting"]

    def ratio(slow: str, fast: str) -> float | None:
        a, b = find(exact_rows, "exact counting", slow), find(exact_rows, "exact counting", fast)
        return a.median_s / b.median_s if a and b and a.median_s and b.median_s else None

    for name in (RUST_MEM, RUST_SQL):
        row, floor = find(exact_rows, "exact counting", name), ratio(name, FLOOR)
        if row and floor is not None:
            row.check += f"; {floor:.2f}x the counting floor"
    rust_mem = find(exact_rows, "exact counting", RUST_MEM)
    judge(
        result,
        "memlane Rust (InMemoryStore) turn ≤ 1.2x the counting floor (its new text counted once)",
        ratio(RUST_MEM, FLOOR),
        1.2,
        at_least=False,
        rows=[rust_mem],
        next_step=(
            "Everything above the floor is Python bookkeeping, a fixed ~12 us a turn (profile "
            "above): argument checks, the ConversationTurn, the ledger push, the lock, building "
            "the turn's two pydantic-ai messages for the history (~2.4 us) and copying the "
            "history list. 1.2x the floor leaves ~4 us for all of it. Next: one Rust call per "
            "turn that counts, pushes the ledger and returns the window's bounds, and the "
            "history's messages built when a caller reads them rather than on every turn."
        ),
    )
    for store, twin in ((RUST_MEM, PY_MEM), (RUST_SQL, PY_SQL)):
        label = store.split(", ")[1]
        if store == RUST_MEM:
            # On SQLite a turn commits before it returns: issue 28 judges it against the floor
            # of the same durability (workload 12), not against LangChain's in-memory list.
            judge(
                result,
                f"memlane Rust ({label}) ≥ 6x LangChain trim_messages with cached counts",
                ratio(LC_CACHED, store),
                6,
                at_least=True,
                rows=[find(exact_rows, "exact counting", store)],
                next_step=(
                    "The profile above: counting, then the fixed Python bookkeeping of a turn "
                    "(see the counting-floor target). Next: the same one-call turn in Rust."
                ),
            )
        judge(
            result,
            f"memlane Rust ({label}) ≥ 5x its pure-Python twin",
            ratio(twin, store),
            5,
            at_least=True,
            rows=[find(exact_rows, "exact counting", store)],
        )
    heur = find(result.rows, "heuristic mode", RUST_HEUR)
    judge(
        result,
        "heuristic mode: memlane Rust < 10 µs per turn",
        heur.median_s if heur else None,
        10e-6,
        at_least=False,
        fmt=fmt_time,
        rows=[heur],
        next_step=(
            "With counting at ~1 us (eight ASCII bytes at a time), the rest is the turn's fixed "
            "Python bookkeeping (profile above), of which building the two pydantic-ai messages "
            "of the history is ~2.4 us and the ConversationTurn ~1.5 us. Next: as for the "
            "counting-floor target, one Rust call per turn and messages built when read."
        ),
    )

    if cfg.profile:
        _profile_misses(cfg, result, pool, log)
    return result


def _checks(
    rows: list[Row],
    contenders: dict[str, Any],
    last: dict[str, list[Any]],
    pool: list[tuple[str, str]],
    cfg: Config,
    encode: Callable[[str], list[int]],
    turns: int,
) -> None:
    """Budget in exact tokens: every turn of one verification conversation + every final history."""
    lengths: dict[str, list[int]] = {}
    for row in rows:
        if row.status != "ok":
            continue
        if row.contender == FLOOR:
            row.check = "counts only: keeps no history"
            continue
        contender = contenders[row.contender]
        # Re-encoding the whole list every call makes the recount variant slow; 40 turns are
        # well past the ~15 turns that fill the budget.
        n_verify = min(turns, 40) if row.contender == LC_RECOUNT else turns
        worst, over, lengths[row.contender] = verify(
            contender, pool, n_verify, cfg.seed + 7, encode
        )
        checked = n_verify
        finals = [
            sum(len(encode(t)) for t in contender.texts(h))
            for h in last.get(row.contender, [])
            if h is not None
        ]
        worst = max([worst, *finals])
        over += sum(1 for f in finals if f > BUDGET)
        checked += len(finals)
        row.check = (
            f"fits {BUDGET:,} exact tokens in {checked:,}/{checked:,} checked histories (max {worst:,})"
            if not over
            else f"OVER BUDGET in {over:,}/{checked:,} checked histories (max {worst:,} exact tokens)"
        )
    ref = next((r.contender for r in rows if r.is_ref and r.contender in lengths), None)
    for name, seq in lengths.items():
        if ref and name != ref:
            same = seq == lengths[ref][: len(seq)]
            row = find(rows, rows[0].case, name)
            if row:
                row.check += (
                    "; same turns as memlane" if same else "; history differs from memlane's"
                )


def _profile_misses(
    cfg: Config, result: WorkloadResult, pool: list[tuple[str, str]], log: Callable[[str], None]
) -> None:
    turns = 1000 if cfg.quick else 3000
    jobs = []
    for target in result.targets:
        if target.met is not False:
            continue
        if "heuristic" in target.text:
            jobs.append((target.text, RUST_HEUR))
        elif "(SQLiteStore)" in target.text or "SQLiteStore turn" in target.text:
            jobs.append((target.text, RUST_SQL))
        else:
            jobs.append((target.text, RUST_MEM))
    done: dict[str, str] = {}
    for text, name in jobs:
        if name not in done:
            log(f"  profiling {name} ({turns} turns)")
            contender = make_contenders([name])[name]
            contender.start(1)
            schedule = schedule_for(99, 1, turns, len(pool), cfg.seed)
            try:
                done[name] = f"cProfile of {name}, {turns} turns of one conversation:\n" + profile(
                    lambda c=contender, s=schedule: c.run(s, pool)
                )
            finally:
                contender.close()
        result.profiles[text] = done[name]


# ---------------------------------------------------------------------------- workload 3

CHECKPOINTS = [100, 300, 1_000, 3_000, 10_000, 30_000, 100_000]


def run_scaling(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "scaling", "3. Per-turn cost against conversation length", quick=cfg.quick
    )
    _, pool = pool_for(cfg)
    # The pure-Python twins cost milliseconds per turn with exact counting and the recount variant
    # grows linearly: they stop earlier so that the run stays within its time budget.
    if cfg.quick:
        limits = {
            RUST_MEM: 3_000,
            RUST_SQL: 1_000,
            PY_MEM: 100,
            PY_SQL: 100,
            LC_CACHED: 3_000,
            LC_RECOUNT: 100,
        }
    else:
        limits = {
            RUST_MEM: 100_000,
            RUST_SQL: 100_000,
            PY_MEM: 3_000,
            PY_SQL: 3_000,
            LC_CACHED: 100_000,
            LC_RECOUNT: 3_000,
        }
    blocks = 3 if cfg.quick else 7
    budget_s = 0.03 if cfg.quick else 0.15
    result.notes += [
        (
            "One conversation per contender grows turn by turn (memlane through add_turn; the LangChain list "
            "is appended to directly between checkpoints, trimming only inside the measured turns, since its "
            "per-turn cost depends only on the list's length). At each checkpoint length L every contender "
            f"runs {blocks} interleaved blocks of turns (as many as fit in ~{budget_s * 1e3:.0f} ms, at most 200); "
            "the median per-turn time of the blocks is reported."
        ),
        "Largest length per contender: " + ", ".join(f"{n} {v:,}" for n, v in limits.items()) + ".",
    ]
    contenders = make_contenders(list(limits))
    active: dict[str, Any] = {}
    for name, c in contenders.items():
        try:
            c.start(1)
            active[name] = c
        except Unavailable as exc:
            result.rows.append(
                Row(case="all lengths", contender=name, unit="turn", status=f"unavailable: {exc}")
            )
    rng = random.Random(cfg.seed + 3)
    length = dict.fromkeys(active, 0)
    curves: dict[str, dict[int, float]] = {n: {} for n in active}
    k_turns: dict[str, int] = {}

    def grow(name: str, target: int) -> None:
        c = active[name]
        need = target - length[name]
        pairs = [pool[rng.randrange(len(pool))] for _ in range(need)]
        if isinstance(c, LangChainTurns):
            c.prefill(0, pairs)
        else:
            c.run([(0, i) for i in range(need)], pairs)
        length[name] = target

    try:
        for checkpoint in CHECKPOINTS:
            names = [n for n in active if limits[n] >= checkpoint]
            if not names:
                break
            start = time.perf_counter()
            for name in names:
                grow(name, checkpoint)
            samples: dict[str, list[float]] = {n: [] for n in names}
            for b in range(blocks):
                order = names[b % len(names) :] + names[: b % len(names)]
                for name in order:
                    c = active[name]
                    if name not in k_turns or b == 0:
                        one, _ = timed(lambda c=c: c.step(0, *pool[rng.randrange(len(pool))]))
                        k_turns[name] = max(1, min(200, int(budget_s / max(one, 1e-9))))
                    k = k_turns[name]
                    sched = [(0, rng.randrange(len(pool))) for _ in range(k)]
                    elapsed, _ = timed(lambda c=c, s=sched: c.run(s, pool))
                    samples[name].append(elapsed / k)
                    length[name] += k
            for name in names:
                curves[name][checkpoint] = sorted(samples[name])[len(samples[name]) // 2]
            log(
                f"  length {checkpoint:>7,}: "
                + ", ".join(
                    f"{n.split(',')[0][:18]}… {fmt_time(curves[n][checkpoint])}" for n in names
                )
                + f"  ({time.perf_counter() - start:.1f} s)"
            )
    finally:
        for c in active.values():
            c.close()

    for name, curve in curves.items():
        for checkpoint, value in curve.items():
            result.rows.append(
                Row(
                    case=f"length {checkpoint:,}",
                    contender=name,
                    unit="turn",
                    median_s=value,
                    reps=blocks,
                    throughput=f"{1 / value:,.0f} turns/s",
                )
            )
    for row in result.rows:  # ratios against memlane Rust at the same length
        ref = find(result.rows, row.case, RUST_MEM)
        if ref and ref.median_s and row.median_s:
            row.ratio = row.median_s / ref.median_s
            row.is_ref = row.contender == RUST_MEM
    result.plot["curves"] = {n: {str(k): v for k, v in c.items()} for n, c in curves.items()}
    for name, c in curves.items():
        first, last = min(c, default=None), max(c, default=None)
        if first is None or last is None or first == last:
            continue
        growth = c[last] / c[first]
        exponent = math.log(growth) / math.log(last / first)
        row = find(result.rows, f"length {last:,}", name)
        if row:
            row.check = f"{growth:.2f}x the {first:,}-turn cost (∝ L^{exponent:.2f})"
    mem = curves.get(RUST_MEM, {})
    top = max(mem, default=100_000)  # --quick stops at 3,000 turns
    judge(
        result,
        f"memlane Rust: per-turn cost at {top:,} turns ≤ 1.5x that at 100 turns",
        mem[top] / mem[100] if top in mem and 100 in mem and top > 100 else None,
        1.5,
        at_least=False,
        rows=[find(result.rows, f"length {top:,}", RUST_MEM)],
    )
    if cfg.profile and result.targets[-1].met is False:
        _profile_scaling(cfg, result, pool, log)
    return result


def _profile_scaling(
    cfg: Config, result: WorkloadResult, pool: list[tuple[str, str]], log: Callable[[str], None]
) -> None:
    log("  profiling memlane Rust at 100 vs 100,000 turns")
    c = make_contenders([RUST_MEM])[RUST_MEM]
    c.start(1)
    try:
        c.run([(0, i % len(pool)) for i in range(100)], pool)
        early = profile(lambda: c.run([(0, i % len(pool)) for i in range(1000)], pool), top=12)
        c.run([(0, i % len(pool)) for i in range(99_000)], pool)
        late = profile(lambda: c.run([(0, i % len(pool)) for i in range(1000)], pool), top=12)
    finally:
        c.close()
    result.profiles[result.targets[-1].text] = (
        f"1,000 turns after 100 turns:\n{early}\n\n1,000 turns after 100,000 turns:\n{late}"
    )
