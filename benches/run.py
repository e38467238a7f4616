"""Runs memlane's benchmarks and regenerates RESULTS.md, the plots and the README section.

Usage::

    python -m benches                   # every workload, full sizes (< 20 min on 2 cores)
    python -m benches --quick           # smoke run (< 2 min); prints, writes nothing tracked
    python -m benches --quick --write   # smoke run that also rewrites the outputs
    python -m benches --only turns      # one workload; the others keep their stored results
    python -m benches --report          # regenerate RESULTS.md / plots / README from results.json

Workloads: tokens (1), turns (2), scaling (3), stores (4), memory (5), fleet (6), longterm (7),
shared (8), strategies (9), server (10), recall (11), durable (12).
Results are stored per workload in ``benches/results.json``, so a workload can be re-run on its own.
A full run writes results.json, RESULTS.md, the plots and the README section; ``--quick`` writes
none of them unless ``--write`` is given. The exit status is 1 when a workload or a contender
fails with an error (an unavailable contender, such as a server --quick does not start, is not
an error).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # `python benches/run.py`: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benches import (
    bench_durable,
    bench_fleet,
    bench_longterm,
    bench_memory,
    bench_server,
    bench_shared,
    bench_stores,
    bench_strategies,
    bench_tokens,
    bench_turns,
    report,
)
from benches.harness import BENCH_DIR, Config, WorkloadResult, environment, loadavg


def _recall(cfg: Config, log: Callable[[str], None]) -> WorkloadResult:
    # Imported when run: the workload loads the embedding model, which the others do not need.
    from benches import bench_recall

    return bench_recall.run(cfg, log)


WORKLOADS = {
    "tokens": ("1. Token counting (exact o200k_base)", bench_tokens.run),
    "turns": ("2. Agent-host turn loop (add_turn + get_message_history)", bench_turns.run_turns),
    "scaling": ("3. Per-turn cost against conversation length", bench_turns.run_scaling),
    "stores": ("4. Stores: working memory on every store", bench_stores.run),
    "memory": ("5. Memory: resident bytes per stored turn", bench_memory.run),
    "fleet": (
        "6. Fleet: the coherence check per store, and summaries off the request path",
        bench_fleet.run,
    ),
    "longterm": (
        "7. Long-term facts: LongTermMemory beside LangGraph's BaseStore",
        bench_longterm.run,
    ),
    "shared": (
        "8. Shared memory: add and each role's view against the job's size",
        bench_shared.run,
    ),
    "strategies": (
        "9. Memory strategies: max-tokens with two conditions against the plain budget",
        bench_strategies.run,
    ),
    "server": ("10. Server: memlane serve under 20 concurrent clients", bench_server.run),
    "recall": ("11. Recall by meaning: keyword, semantic and hybrid search", _recall),
    "durable": ("12. Durable paths against floors of the same durability", bench_durable.run),
}
RESULTS_JSON = BENCH_DIR / "results.json"


def _load() -> tuple[dict[str, WorkloadResult], dict[str, str]]:
    if not RESULTS_JSON.exists():
        return {}, {}
    data = json.loads(RESULTS_JSON.read_text(encoding="utf-8"))
    results = {
        k: WorkloadResult.from_json(v)
        for k, v in data.get("workloads", {}).items()
        if k in WORKLOADS
    }
    return results, data.get("environment", {})


def _save(results: dict[str, WorkloadResult], env: dict[str, str]) -> None:
    data = {"environment": env, "workloads": {k: v.to_json() for k, v in results.items()}}
    RESULTS_JSON.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke-run sizes (< 2 minutes)")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(WORKLOADS),
        metavar="WORKLOAD",
        help=f"run only this workload (repeatable): {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--report", action="store_true", help="only regenerate the outputs from results.json"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip profiling missed targets")
    parser.add_argument("--no-readme", action="store_true", help="leave README.md alone")
    parser.add_argument(
        "--write",
        action="store_true",
        help="with --quick: write results.json, RESULTS.md, the plots and README.md too",
    )
    parser.add_argument("--seed", type=int, default=Config.seed)
    args = parser.parse_args(argv)

    write = args.write or not args.quick
    # Profiles explain missed targets in RESULTS.md: a smoke run that writes nothing skips them.
    cfg = Config(quick=args.quick, seed=args.seed, profile=write and not args.no_profile)
    results, env = _load()
    command = "python -m benches" + (" --quick" if args.quick else "")
    selected = args.only or list(WORKLOADS)
    if not args.report:
        if not args.only:
            results = {}
        env = environment()
        if args.only:
            command += "".join(f" --only {k}" for k in selected)
        started = time.perf_counter()
        print(
            f"memlane benchmarks ({'quick' if cfg.quick else 'full'}): {', '.join(selected)}",
            flush=True,
        )
        for key in selected:
            title, fn = WORKLOADS[key]
            print(f"\n== {title}", flush=True)
            t0 = time.perf_counter()
            try:
                res = fn(cfg, lambda msg: print(msg, flush=True))
            except Exception:  # noqa: BLE001 - report the failure in RESULTS.md, run the rest
                res = WorkloadResult(key, title, quick=cfg.quick, error=traceback.format_exc())
                print(res.error, file=sys.stderr, flush=True)
            res.elapsed_s = time.perf_counter() - t0
            res.date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            results[key] = res
            for t in res.targets:
                print(f"   target: {t.text}: {t.measured} → {t.verdict}", flush=True)
            print(f"   ({res.elapsed_s:.0f} s)", flush=True)
            if write:
                _save(results, env)
        env["load average at end"] = loadavg()
        env["total run time"] = f"{time.perf_counter() - started:.0f} s"
        if write:
            _save(results, env)
        print(f"\ntotal run time {env['total run time']}", flush=True)
    if not results:
        print("no results to report; run without --report first", file=sys.stderr)
        return 1
    if write:
        path = report.write_all(results, env, list(WORKLOADS), command, readme=not args.no_readme)
        print(
            f"\nwrote {path.relative_to(BENCH_DIR.parent)}"
            + ("" if args.no_readme else " and README.md's performance section"),
            flush=True,
        )
    else:
        ran = [k for k in WORKLOADS if k in results and (args.report or k in selected)]
        print("\n" + report.summary(results, ran), flush=True)
        print("\n(--quick: nothing written; add --write to rewrite the outputs)", flush=True)
    missed = [t for r in results.values() for t in r.targets if t.met is False]
    unmeasured = [t for r in results.values() for t in r.targets if t.met is None]
    print(
        f"targets: {sum(t.met is True for r in results.values() for t in r.targets)} met, "
        f"{len(missed)} missed, {len(unmeasured)} not measured",
        flush=True,
    )
    errors = failures(results)
    for line in errors:
        print(f"FAILED: {line}", file=sys.stderr, flush=True)
    return 1 if errors else 0


def failures(results: dict[str, WorkloadResult]) -> list[str]:
    """Workloads that raised and contenders that failed with an error (not merely unavailable)."""
    out = [
        f"workload {k}: {r.error.strip().splitlines()[-1]}" for k, r in results.items() if r.error
    ]
    out += [
        f"workload {k}, {row.case}, {row.contender}: {row.status}"
        for k, r in results.items()
        for row in r.rows
        if row.status.startswith("error")
    ]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
