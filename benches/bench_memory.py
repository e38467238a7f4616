"""Workload 5: resident bytes per stored turn of the turn loop of workload 2.

Each contender runs in a fresh child process (``python -m benches.bench_memory --child ...``)
so that nothing else shares its heap. The child prepares the turn pool, starts the contender, warms it
up on a conversation of its own, then measures around the turn loop:

* RSS delta (psutil) — everything, Rust allocations and SQLite's page cache included;
* tracemalloc delta (a separate child, tracing slows the loop) — the Python heap only, so for
  Rust-backed contenders it leaves out what the extension holds.

Turn texts are fresh string copies made inside the loop and dropped by the host after the
turn, as an agent host does: what stays resident is what the memory keeps, text included.
The text's own size per turn is reported next to it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from benches.harness import (
    REPO,
    Config,
    Row,
    Unavailable,
    WorkloadResult,
    find,
    fmt_bytes,
    judge,
)

CONTENDERS = [
    "memlane (Rust), InMemoryStore",
    "memlane (Rust), SQLiteStore",
    "memlane pure-Python twin, InMemoryStore",
    "memlane pure-Python twin, SQLiteStore",
    "LangChain trim_messages + tiktoken, cached counts",
]


class _FreshPool:
    """Hands out new copies of the pool's strings, so each turn's text is its own object."""

    def __init__(self, pool: list[tuple[str, str]]) -> None:
        self.pool = pool
        self.text_bytes = 0

    def __len__(self) -> int:
        return len(self.pool)

    def __getitem__(self, i: int) -> tuple[str, str]:
        p, r = self.pool[i]
        p, r = (p + " ")[:-1], (r + " ")[:-1]
        self.text_bytes += sys.getsizeof(p) + sys.getsizeof(r)
        return p, r


def _trim() -> None:
    """Returns freed heap memory to the OS (glibc), so that the RSS delta counts new memory."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _measure(
    name: str, conversations: int, turns: int, mode: str, pool: list[tuple[str, str]], seed: int
) -> dict[str, Any]:
    import psutil

    from benches.bench_turns import make_contenders, schedule_for

    contender = make_contenders([name])[name]
    try:
        contender.start(conversations + 1)
    except Unavailable as exc:
        return {"status": f"unavailable: {exc}"}
    # Warm-up on an extra conversation, off the books: rank tables, regex caches and first-use
    # allocations are per process, not per turn. 200 turns pack a block of retained turns, so
    # the thread's compression context (~0.4 MB, made once) is not charged to the first turns.
    contender.run([(conversations, i) for i in range(200)], pool)
    schedule = schedule_for(0, conversations, turns, len(pool), seed)
    fresh = _FreshPool(pool)
    proc = psutil.Process()
    gc.collect()
    _trim()
    if mode == "trace":
        tracemalloc.start()
    before = proc.memory_info().rss if mode == "rss" else tracemalloc.get_traced_memory()[0]
    last = contender.run(schedule, fresh)
    del last
    gc.collect()
    after = proc.memory_info().rss if mode == "rss" else tracemalloc.get_traced_memory()[0]
    if mode == "trace":
        tracemalloc.stop()
    disk = 0
    tmp = getattr(contender, "_tmp", None)
    if tmp is not None:
        disk = sum(os.path.getsize(os.path.join(tmp.name, f)) for f in os.listdir(tmp.name))
    n = len(schedule)
    out = {
        "status": "ok",
        "turns": n,
        "bytes_per_turn": (after - before) / n,
        "text_bytes_per_turn": fresh.text_bytes / n,
        "disk_bytes_per_turn": disk / n,
    }
    contender.close()
    return out


def child(name: str, shapes: dict[str, tuple[int, int]], seed: int, quick: bool) -> dict[str, Any]:
    """Both measurements of one contender, RSS first (tracing would inflate it)."""
    from benches.bench_turns import pool_for

    _, pool = pool_for(Config(quick=quick, seed=seed))
    out = {}
    for mode in ("rss", "trace"):
        if mode in shapes:
            out[mode] = _measure(name, *shapes[mode], mode, pool, seed)
            gc.collect()
    return out


def _run_child(name: str, shapes: dict[str, tuple[int, int]], cfg: Config) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benches.bench_memory", "--child", name, "--seed", str(cfg.seed)]
    for mode, (c, t) in shapes.items():
        cmd += [f"--{mode}", f"{c},{t}"]
    if cfg.quick:
        cmd.append("--quick")
    proc = subprocess.run(
        cmd,
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {
            mode: {"status": f"error: child exited {proc.returncode}: {tail}"} for mode in shapes
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    result = WorkloadResult("memory", "5. Memory: resident bytes per stored turn", quick=cfg.quick)
    # (conversations, turns) per child. Bytes per turn do not depend on how many turns are kept,
    # so the pure-Python twins (milliseconds per turn with exact counting) keep fewer.
    if cfg.quick:
        shapes = {
            "fast": {"rss": (4, 250), "trace": (2, 100)},
            "twin": {"rss": (1, 100), "trace": (1, 50)},
        }
    else:
        shapes = {
            "fast": {"rss": (100, 500), "trace": (20, 500)},
            "twin": {"rss": (4, 500), "trace": (2, 500)},
        }

    def shape(name: str, mode: str) -> tuple[int, int] | None:
        return shapes["twin" if "twin" in name else "fast"].get(mode)

    result.notes += [
        "Turns kept per child — RSS: "
        + ", ".join(f"{n} {shape(n, 'rss')[0] * shape(n, 'rss')[1]:,}" for n in CONTENDERS)  # type: ignore[index]
        + "; tracemalloc: "
        + ", ".join(f"{n} {shape(n, 'trace')[0] * shape(n, 'trace')[1]:,}" for n in CONTENDERS)  # type: ignore[index]
        + ". One child process per contender (two at a time: memory does not depend on timing) measures "
        "RSS, then tracemalloc on a fresh instance; one run each (memory is deterministic up to "
        "allocator noise). Each instance is warmed up on a conversation of its own first.",
        (
            "RSS counts everything but is coarse (freed memory is reused; malloc_trim runs before the "
            "baseline); tracemalloc is exact for Python objects but blind to what the Rust extension "
            "allocates itself (the Rust tables hold references to the Python entries plus ids and keys; "
            "SQLite's page cache is bounded)."
        ),
        (
            "memlane keeps every retained turn in memory whatever the store, since no summarizer is "
            "set: the turns in the history as they were given, older ones packed 64 at a time "
            "(pickled together, compressed with zstd level 1: memlane.conversation.retained_turns); "
            "a SQLiteStore also writes each turn to disk (disk bytes in the check column)."
        ),
    ]
    rss_case = "RSS delta per stored turn"
    trace_case = "tracemalloc (Python heap) per stored turn"
    # Memory does not depend on timing: two children at a time.
    from concurrent.futures import ThreadPoolExecutor

    def measure(name: str) -> dict[str, Any]:
        dims = {mode: d for mode in ("rss", "trace") if (d := shape(name, mode)) is not None}
        data = _run_child(name, dims, cfg)
        log(
            f"  {name}: "
            + ", ".join(
                f"{m} {fmt_bytes(v['bytes_per_turn'])}/turn"
                if v.get("status") == "ok"
                else f"{m} {v.get('status')}"
                for m, v in data.items()
            )
        )
        return data

    with ThreadPoolExecutor(max_workers=2) as pool:
        measured = dict(zip(CONTENDERS, pool.map(measure, CONTENDERS), strict=True))
    for name in CONTENDERS:
        data_by_mode = measured[name]
        for case, mode in ((rss_case, "rss"), (trace_case, "trace")):
            if mode not in data_by_mode:
                continue
            data = data_by_mode[mode]
            row = Row(
                case=case,
                contender=name,
                unit="turn",
                metric="bytes",
                reps=1,
                is_ref=name == CONTENDERS[0],
            )
            if data["status"] != "ok":
                row.status = data["status"]
            else:
                row.median_s = data["bytes_per_turn"]
                row.check = f"text itself: {fmt_bytes(data['text_bytes_per_turn'])}/turn"
                if data.get("disk_bytes_per_turn"):
                    row.check += f"; on disk: {fmt_bytes(data['disk_bytes_per_turn'])}/turn"
            result.rows.append(row)
    for case in (rss_case, trace_case):
        ref = next((r for r in result.rows if r.case == case and r.is_ref and r.median_s), None)
        for r in result.rows:
            if r.case == case and ref and r.median_s:
                r.ratio = r.median_s / ref.median_s  # type: ignore[operator]
    rust = find(result.rows, rss_case, CONTENDERS[0])
    judge(
        result,
        "memory per stored turn, Rust InMemory path (RSS delta) ≤ 1 KiB",
        rust.median_s if rust and rust.median_s else None,
        1024,
        at_least=False,
        fmt=fmt_bytes,
        rows=[rust],
        detail=rust.check if rust else "",
        next_step=(
            "The turn's own text is 1.4 KiB in CPython's string form (mixed corpus: CJK text takes "
            "2-4 bytes a character); turns that left the history are packed 64 at a time, "
            "compressed with zstd level 1 (~0.5 KiB a turn), and the turns still in the history "
            "(live objects) and the current unpacked block are the rest. Next: fewer live turns "
            "(a smaller block), at a cost per turn measured against the turn target."
        ),
    )
    result.plot["bytes"] = {
        r.contender: r.median_s for r in result.rows if r.case == rss_case and r.median_s
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", required=True)
    parser.add_argument("--rss", help="conversations,turns for the RSS measurement")
    parser.add_argument("--trace", help="conversations,turns for the tracemalloc measurement")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    shapes = {}
    for mode in ("rss", "trace"):
        value = getattr(args, mode)
        if value:
            c, t = value.split(",")
            shapes[mode] = (int(c), int(t))
    out = child(args.child, shapes, args.seed, args.quick)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
