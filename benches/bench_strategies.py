"""Workload 9: the max-tokens strategy with two conditions against the plain budget.

One turn is what an agent host does per request: ``add_turn(cid, prompt, response, messages)``
with the run's pydantic-ai messages, then ``get_message_history(cid)``. Every third turn calls
a tool (a ``ToolCallPart`` and its ``ToolReturnPart``); every other tool return is longer than
2,000 characters. Contenders, side by side in one run, on the Rust path and on its
pure-Python twin, in memory and on SQLite:

* the plain budget: ``ConversationMemory(max_tokens=4000)``;
* the strategy: ``ConversationMemory(short_term=MemoryMaxTokensStrategy(memory_max_tokens=4000,
  conditions=["message.role != 'tool'", "len(message.content) < 2000"]))``.

Each contender's conversation is grown to the case's length with ``add_turn`` alone (off the
clock), then every repetition times a block of turns (add + read) at that length, the
contenders interleaved; all of them see the same turns in the same order. The target: the
strategy's per-turn cost at most 1.5x the plain budget's, per store, on the Rust path, at
every length.

Every history read in a timed block is checked: within the budget in memlane's count and in
exact tokens (tiktoken, the parts' texts); with the strategy, no tool part and no part of
2,000 characters or more; with the plain budget, every tool call sent with its return. The
twin's histories are compared with the Rust path's.
"""

from __future__ import annotations

import functools
import os
import random
import re
import tempfile
from collections.abc import Callable
from typing import Any

from benches.bench_tokens import tiktoken_encoding
from benches.bench_turns import pool_for
from benches.harness import (
    Config,
    Row,
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
    profile,
    require_rust,
    timed,
)

BUDGET = 4000
CONDITIONS = ["message.role != 'tool'", "len(message.content) < 2000"]
LONG_CHARS = 2000
TOOL_EVERY = 3

PLAIN_RUST = "plain budget (Rust)"
STRAT_RUST = "max-tokens strategy, 2 conditions (Rust)"
PLAIN_PY = "plain budget (pure-Python twin)"
STRAT_PY = "max-tokens strategy, 2 conditions (pure-Python twin)"
CONTENDERS = [PLAIN_RUST, STRAT_RUST, PLAIN_PY, STRAT_PY]
STORES = {"memory": "InMemoryStore", "sqlite": "SQLiteStore"}

Turn = tuple[str, str, list[Any]]  # prompt, response, the run's messages


def build_turn(index: int, rng: random.Random, pool: list[tuple[str, str]]) -> Turn:
    """Turn ``index`` of a conversation: fresh message objects, a tool call every third turn."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    prompt, response = pool[rng.randrange(len(pool))]
    ask = ModelRequest(parts=[UserPromptPart(content=prompt)])
    answer = ModelResponse(parts=[TextPart(content=response)])
    if index % TOOL_EVERY != 1:
        return prompt, response, [ask, answer]
    result = pool[rng.randrange(len(pool))][1]
    if index % (2 * TOOL_EVERY) == 1:  # every other tool return is long
        while len(result) < LONG_CHARS + 200:
            result += "\n" + pool[rng.randrange(len(pool))][1]
    call_id = f"call-{index}"
    call = ToolCallPart("search", {"query": prompt[:60]}, tool_call_id=call_id)
    back = ToolReturnPart(tool_name="search", content=result, tool_call_id=call_id)
    return (
        prompt,
        response,
        [ask, ModelResponse(parts=[call]), ModelRequest(parts=[back]), answer],
    )


def build_turns(start: int, count: int, seed: int, pool: list[tuple[str, str]]) -> list[Turn]:
    rng = random.Random(seed)
    return [build_turn(start + i, rng, pool) for i in range(count)]


class StrategyTurns:
    """One ConversationMemory (plain budget or strategy) on one backend and store."""

    def __init__(self, name: str, *, rust: bool, store: str, strategy: bool) -> None:
        self.name, self.rust, self.store_kind, self.strategy = name, rust, store, strategy
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.cm: Any = None
        self.cid = ""
        self.length = 0

    def start(self) -> None:
        """A fresh memory, store and conversation (off the clock)."""
        from memlane.conversation import ConversationMemory
        from memlane.store import InMemoryStore, SQLiteStore
        from memlane.strategies import MemoryMaxTokensStrategy
        from memlane.tokens import TokenEstimator

        self.close()
        if self.rust:
            require_rust(
                "Encoder",
                "BudgetLedger",
                "MemoryTable" if self.store_kind == "memory" else "SqliteTable",
            )
        with memlane_backend(self.rust):
            est = TokenEstimator()
            if self.store_kind == "memory":
                store: Any = InMemoryStore()
            else:
                self._tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-")
                store = SQLiteStore(os.path.join(self._tmp.name, "strategies.sqlite3"))
            if self.strategy:
                short = MemoryMaxTokensStrategy(memory_max_tokens=BUDGET, conditions=CONDITIONS)
                self.cm = ConversationMemory(short_term=short, estimator=est, store=store)
            else:
                self.cm = ConversationMemory(max_tokens=BUDGET, estimator=est, store=store)
            self.cid = self.cm.new_conversation()
        want = "rust" if self.rust else "python"
        got = {
            implementation(est),
            implementation(store._table),
            implementation(self.cm._conversations.states[self.cid].ledger),
        }
        if got != {want}:
            raise RuntimeError(f"{self.name}: backend switch failed, got {got}")
        self.length = 0

    def grow(self, turns: list[Turn]) -> None:
        """Appends turns without reading the history (off the clock)."""
        add = self.cm.add_turn
        for prompt, response, messages in turns:
            add(self.cid, prompt, response, messages)
        self.length += len(turns)

    def run(self, turns: list[Turn]) -> list[Any]:
        """The timed loop; returns every history read."""
        add, history, cid = self.cm.add_turn, self.cm.get_message_history, self.cid
        out = []
        for prompt, response, messages in turns:
            add(cid, prompt, response, messages)
            out.append(history(cid))
        self.length += len(turns)
        return out

    def tokens(self) -> int:
        return int(self.cm.get_history_tokens(self.cid))

    def close(self) -> None:
        if self.cm is not None and hasattr(self.cm.store, "close"):
            self.cm.store.close()
        self.cm = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def make_contender(name: str, store: str) -> StrategyTurns:
    return StrategyTurns(
        name, rust="(Rust)" in name, store=store, strategy=name.startswith("max-tokens")
    )


# ---------------------------------------------------------------------------- checks


def _parts(history: list[Any]) -> list[Any]:
    return [p for m in history for p in m.parts]


def _texts(history: list[Any]) -> list[str]:
    return [p.content for p in _parts(history) if isinstance(getattr(p, "content", None), str)]


def _signature(history: list[Any]) -> list[tuple[str, str]]:
    """What a history sends, part by part: comparable across the two implementations."""
    return [(type(p).__name__, str(getattr(p, "content", ""))) for p in _parts(history)]


def problems(
    history: list[Any], *, strategy: bool, encode: Callable[[str], list[int]]
) -> list[str]:
    """Every way ``history`` breaks what its contender promises (empty: none)."""
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    found = []
    exact = sum(len(encode(t)) for t in _texts(history))
    if exact > BUDGET:
        found.append(f"{exact:,} exact tokens")
    parts = _parts(history)
    calls = {p.tool_call_id for p in parts if isinstance(p, ToolCallPart)}
    returns = {p.tool_call_id for p in parts if isinstance(p, ToolReturnPart)}
    if strategy:
        if calls or returns:
            found.append("tool parts sent")
        if any(len(t) >= LONG_CHARS for t in _texts(history)):
            found.append(f"a part of ≥ {LONG_CHARS:,} characters sent")
    elif calls != returns:
        found.append("a tool call without its return")
    return found


# ---------------------------------------------------------------------------- workload


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult(
        "strategies",
        "9. Memory strategies: max-tokens with two conditions against the plain budget",
        quick=cfg.quick,
    )
    corpus, pool = pool_for(cfg)
    encode = tiktoken_encoding().encode_ordinary  # type: ignore[attr-defined]
    lengths = (50, 200) if cfg.quick else (200, 2_000)
    reps = cfg.reps
    block = 5 if cfg.quick else 10
    result.notes += [
        (
            f"Turn pool: {len(pool):,} (prompt, response) pairs of the token-counting corpus "
            f"({corpus.digest}), as in workload 2. Every {TOOL_EVERY}rd turn carries a tool call "
            f"and its return (every other return longer than {LONG_CHARS:,} characters). "
            f"Budget {BUDGET:,} tokens; conditions {CONDITIONS}."
        ),
        (
            f"Each contender's conversation is grown to L turns with add_turn alone (off the "
            f"clock); then {reps} interleaved repetitions each time a block of {block} turns "
            f"(add_turn + get_message_history) per contender, so a case's length runs from L to "
            f"L + {reps * block}. The median per-turn time over repetitions is reported; the "
            "ratio is against the plain budget on the Rust path with the same store."
        ),
        (
            f"SQLite files live in {tempfile.gettempdir()} "
            f"({filesystem_of(tempfile.gettempdir())}); WAL + synchronous=NORMAL on both paths."
        ),
    ]
    if cfg.quick:
        result.notes.append(
            f"--quick: lengths {lengths[0]:,} and {lengths[1]:,} turns instead of 200 and 2,000."
        )
    log(f"  pool: {len(pool)} pairs; lengths {lengths}; {reps} reps × {block} turns")

    for store, label in STORES.items():
        for length in lengths:
            case = f"{label}, {length:,} turns"
            _run_case(result, case, store, length, reps, block, pool, encode, cfg, log)

    # A per-turn cost that grows with the conversation is what a ratio at one length hides.
    for label in STORES.values():
        for name in CONTENDERS:
            short = find(result.rows, f"{label}, {lengths[0]:,} turns", name)
            long = find(result.rows, f"{label}, {lengths[-1]:,} turns", name)
            if short and long and short.median_s and long.median_s:
                growth = long.median_s / short.median_s
                long.check += f"; {growth:.2f}x its {lengths[0]:,}-turn cost"

    by_store: dict[str, list[tuple[int, float | None, Row | None]]] = {}
    for label in STORES.values():
        for length in lengths:
            case = f"{label}, {length:,} turns"
            row = find(result.rows, case, STRAT_RUST)
            by_store.setdefault(label, []).append((length, row.ratio if row else None, row))
    for label, entries in by_store.items():
        ratios = [r for _, r, _ in entries]
        worst = None if any(r is None for r in ratios) else max(r for r in ratios if r)
        judge(
            result,
            f"{label}: max-tokens strategy with two conditions ≤ 1.5x the plain budget per turn "
            "(Rust path, every length)",
            worst,
            1.5,
            at_least=False,
            rows=[row for _, _, row in entries],
            detail=", ".join(f"{n:,} turns {fmt_ratio(r)}" for n, r, _ in entries),
        )

    if cfg.profile:
        _profile_misses(cfg, result, lengths[-1], pool, log)
    return result


def _run_case(
    result: WorkloadResult,
    case: str,
    store: str,
    length: int,
    reps: int,
    block: int,
    pool: list[tuple[str, str]],
    encode: Callable[[str], list[int]],
    cfg: Config,
    log: Callable[[str], None],
) -> None:
    log(f"  {case}")
    contenders = {name: make_contender(name, store) for name in CONTENDERS}
    seed = cfg.seed + length
    growth = build_turns(0, length, seed, pool)
    ready: dict[str, str] = {}
    for name, contender in contenders.items():
        try:
            contender.start()
            elapsed, _ = timed(functools.partial(contender.grow, growth))
            log(f"    {name}: grown to {length:,} turns in {elapsed:.1f} s")
        except Exception as exc:  # noqa: BLE001 - reported in its row, the others still run
            ready[name] = f"{type(exc).__name__}: {exc}"
    histories: dict[str, list[list[Any]]] = {name: [] for name in contenders}
    tokens: dict[str, list[int]] = {name: [] for name in contenders}

    def rep_fn(name: str) -> Callable[[int], float]:
        contender = contenders[name]

        def rep(index: int) -> float:
            if name in ready:
                raise RuntimeError(ready[name])
            turns = build_turns(length + index * block, block, seed * 100 + index, pool)
            elapsed, seen = timed(lambda: contender.run(turns))
            histories[name].extend(seen)
            tokens[name].append(contender.tokens())
            return elapsed / block

        return rep

    try:
        samples, failed = interleave(reps, [(n, rep_fn(n)) for n in CONTENDERS], log=log)
    finally:
        for contender in contenders.values():
            contender.close()
    rows = fill_rows(
        result.rows,
        samples,
        failed,
        case,
        "turn",
        PLAIN_RUST,
        throughput=lambda s: f"{1 / s:,.0f} turns/s",
    )
    for row in rows:
        if row.status != "ok":
            continue
        strategy = row.contender.startswith("max-tokens")
        seen = histories[row.contender]
        bad = [problems(h, strategy=strategy, encode=encode) for h in seen]
        broken = [b for b in bad if b]
        over = sum(t > BUDGET for t in tokens[row.contender])
        sent = max(
            (sum(1 for m in h for p in m.parts if p.part_kind == "user-prompt") for h in seen),
            default=0,
        )
        if broken or over:
            row.check = (
                f"BROKEN in {len(broken)}/{len(seen)} histories ({'; '.join(broken[0]) if broken else ''})"
                + (f"; memlane's count over budget {over} times" if over else "")
            )
        else:
            what = (
                "no tool part, no part ≥ 2,000 chars"
                if strategy
                else "every tool call with its return"
            )
            row.check = (
                f"{len(seen)}/{len(seen)} histories within {BUDGET:,} tokens, {what}; "
                f"up to {sent} interactions sent"
            )
        twin = {PLAIN_PY: PLAIN_RUST, STRAT_PY: STRAT_RUST}.get(row.contender)
        if twin and histories[twin]:
            same = [_signature(h) for h in seen] == [_signature(h) for h in histories[twin]]
            row.check += (
                "; same histories as the Rust path"
                if same
                else "; HISTORIES DIFFER from the Rust path"
            )
        plain = {STRAT_PY: PLAIN_PY}.get(row.contender)
        base = find(rows, case, plain) if plain else None
        if base and base.median_s and row.median_s:
            row.check += f"; {fmt_ratio(row.median_s / base.median_s)} the twin's plain budget"
    result.plot[case] = {r.contender: r.median_s for r in rows if r.median_s}


def _profile_misses(
    cfg: Config,
    result: WorkloadResult,
    length: int,
    pool: list[tuple[str, str]],
    log: Callable[[str], None],
) -> None:
    """cProfile of the strategy on the Rust path at the longest length, for each missed store."""
    turns = 5 if cfg.quick else 10
    for target in result.targets:
        if target.met is not False:
            continue
        store = next(k for k, v in STORES.items() if target.text.startswith(v))
        log(f"  profiling {STRAT_RUST} on {STORES[store]} at {length:,} turns")
        contender = make_contender(STRAT_RUST, store)
        contender.start()
        try:
            contender.grow(build_turns(0, length, cfg.seed + length, pool))
            block = build_turns(length, turns, cfg.seed - 1, pool)
            text = profile(functools.partial(contender.run, block), top=14)
        finally:
            contender.close()
        result.profiles[target.text] = (
            f"cProfile of {STRAT_RUST}, {STORES[store]}, {turns} turns (add + read) after "
            f"{length:,} turns:\n{text}"
        )
        result.notes.append(
            f"Profile, {STORES[store]} at {length:,} turns: " + _hot_spots(text, turns)
        )


def _hot_spots(text: str, turns: int) -> str:
    """The functions taking the most own time, in words, from :func:`profile`'s table."""
    total = re.search(r"total ([\d.]+) ms", text)
    lines = [ln for ln in text.splitlines()[2:] if ln.strip()]
    spots = []
    for line in lines[:4]:
        fields = line.split(None, 5)
        if len(fields) == 6:
            _, share, _, calls, _, where = fields
            spots.append(f"{where} {share} own ({int(calls) // turns:,} calls a turn)")
    head = f"{fmt_time(float(total.group(1)) / 1e3 / turns)} per turn profiled; " if total else ""
    return head + "most own time in " + "; ".join(spots) + "."
