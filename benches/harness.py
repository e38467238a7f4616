"""What every workload shares: interleaved timing, result rows, targets, the backend switch.

Timing rules, the same for every workload:

* Contenders run in the same process, interleaved: repetition ``r`` runs every contender once,
  in an order rotated by ``r``, so a slow minute on a shared machine hits all of them.
* The reported number is the median over repetitions of the time per unit (per message, per
  turn, per operation); ``min``/``max`` are kept in ``results.json``.
* ``gc.collect()`` runs before each timed block; the collector stays enabled inside it, as it
  is for users.
* A contender that cannot run yet (a Rust class not built, a server that is not up) raises
  :class:`Unavailable` and is reported as ``unavailable: <reason>``, never silently dropped.
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


class Unavailable(Exception):
    """A contender that cannot run on this machine or build (yet); the message says why."""


@dataclass
class Config:
    """Sizes of one run. ``quick`` is the smoke run; the full run is what gets committed."""

    quick: bool = False
    seed: int = 20_251_125
    profile: bool = True

    @property
    def reps(self) -> int:
        return 1 if self.quick else 7


@dataclass
class Row:
    """One contender on one case of a workload."""

    case: str
    contender: str
    unit: str  # what one measured unit is: "message", "turn", "op", "call", "corpus"
    metric: str = "time"  # "time": median_s is seconds per unit; "bytes": bytes per unit
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    reps: int = 0
    ratio: float | None = None  # median_s / the reference's median_s (> 1: memlane is faster)
    is_ref: bool = False
    throughput: str = ""
    check: str = ""
    status: str = "ok"  # "ok", "unavailable: ...", "error: ..."
    target: str = ""  # e.g. "MISSED (needs >= 1.5x)"
    samples: list[float] = field(default_factory=list)


@dataclass
class Target:
    """One target of the issue, with what was measured."""

    workload: str
    text: str  # what the issue asks for, in words
    measured: str  # the measured value, formatted
    met: bool | None  # None: could not be measured (a contender unavailable)
    detail: str = ""
    # Where the time goes and what would close the gap, reported only when the target is
    # missed (the issue asks for "the profile and the next step" of each missed target).
    next_step: str = ""

    @property
    def verdict(self) -> str:
        return "not measured" if self.met is None else ("met" if self.met else "MISSED")


@dataclass
class WorkloadResult:
    """Everything one workload reports."""

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)
    plot: dict[str, Any] = field(default_factory=dict)
    quick: bool = False
    date: str = ""
    elapsed_s: float = 0.0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkloadResult:
        data = dict(data)
        data["rows"] = [Row(**r) for r in data.get("rows", [])]
        data["targets"] = [Target(**t) for t in data.get("targets", [])]
        return cls(**data)


# ---------------------------------------------------------------------------- timing


def median(values: list[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by ``fn()`` and its result, after a collection outside the clock."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def interleave(
    reps: int,
    contenders: list[tuple[str, Callable[[int], float]]],
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Runs ``fn(rep)`` for every contender, ``reps`` times, rotating the order each time.

    ``fn`` times its own work (so that set-up stays off the clock) and returns seconds per
    unit. Returns the samples per contender and, for those that could not run, the reason.
    """
    samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
    failed: dict[str, str] = {}
    for rep in range(reps):
        shift = rep % len(contenders)
        for name, fn in contenders[shift:] + contenders[:shift]:
            if name in failed:
                continue
            try:
                samples[name].append(fn(rep))
            except Unavailable as exc:
                failed[name] = f"unavailable: {exc}"
            except Exception as exc:  # noqa: BLE001 - a contender bug must not hide the others' results
                failed[name] = f"error: {type(exc).__name__}: {exc}"
                if log:
                    import traceback

                    log(traceback.format_exc())
        if log:
            done = ", ".join(f"{n} {fmt_time(s[-1])}" for n, s in samples.items() if len(s) > rep)
            log(f"    rep {rep + 1}/{reps}: {done}")
    return samples, failed


def fill_rows(
    rows: list[Row],
    samples: dict[str, list[float]],
    failed: dict[str, str],
    case: str,
    unit: str,
    ref: str,
    *,
    throughput: Callable[[float], str] | None = None,
) -> list[Row]:
    """Rows of one case, ratios against contender ``ref`` (memlane)."""
    ref_samples = samples.get(ref) or []
    ref_median = median(ref_samples) if ref_samples and ref not in failed else None
    out = []
    for name, values in samples.items():
        row = Row(case=case, contender=name, unit=unit, is_ref=name == ref)
        if name in failed:
            row.status = failed[name]
        elif values:
            row.samples = values
            row.reps = len(values)
            row.median_s = median(values)
            row.min_s, row.max_s = min(values), max(values)
            if ref_median:
                row.ratio = row.median_s / ref_median
            if throughput and row.median_s > 0:
                row.throughput = throughput(row.median_s)
        out.append(row)
    rows.extend(out)
    return out


def find(rows: list[Row], case: str, contender: str) -> Row | None:
    for row in rows:
        if row.case == case and row.contender == contender:
            return row
    return None


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.0f} ns"


def fmt_ratio(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def judge(
    result: WorkloadResult,
    text: str,
    value: float | None,
    threshold: float,
    *,
    at_least: bool,
    fmt: Callable[[float], str] = fmt_ratio,
    rows: list[Row | None] | None = None,
    detail: str = "",
    next_step: str = "",
) -> Target:
    """Records a target; marks the rows it is about with met / MISSED.

    ``next_step`` says what stands between memlane and the target and what would close the
    gap; RESULTS.md shows it if the target is missed.
    """
    if value is None:
        target = Target(
            result.key, text, "—", None, detail or "a contender was unavailable", next_step
        )
    else:
        met = value >= threshold if at_least else value <= threshold
        target = Target(result.key, text, fmt(value), met, detail, next_step)
    result.targets.append(target)
    need = f"{'≥' if at_least else '≤'} {fmt(threshold)}"
    for row in rows or []:
        if row is None:
            continue
        mark = f"{target.verdict} ({target.measured}, needs {need})"
        row.target = f"{row.target}; {mark}" if row.target else mark
    return target


# ---------------------------------------------------------------------------- backends


def rust_core() -> Any:
    """The Rust extension module, or :class:`Unavailable`."""
    from memlane._backend import rust_core as load

    core = load()
    if core is None:
        raise Unavailable("memlane._core (the Rust extension) cannot be imported")
    return core


def require_rust(*names: str) -> Any:
    """The Rust extension, if it has every class in ``names``; else :class:`Unavailable`."""
    core = rust_core()
    missing = [n for n in names if not hasattr(core, n)]
    if missing:
        raise Unavailable(f"memlane._core has no {', '.join(missing)} yet")
    return core


@contextlib.contextmanager
def memlane_backend(rust: bool) -> Iterator[None]:
    """Selects memlane's Rust path or its pure-Python twin, inside this process.

    memlane builds its tables and ledger through ``memlane._backend.active`` at construction
    time, so ``_backend.use`` around a contender's construction is the switch; estimators are
    passed explicitly. Callers verify which classes they got.
    """
    from memlane import _backend

    if rust:
        require_rust()
    with _backend.use("rust" if rust else "python"):
        yield


def implementation(obj: Any) -> str:
    """``"rust"`` for an object of the extension, else ``"python"``.

    An estimator is judged by its counting engine: the class is Python on both paths.
    """
    engine = getattr(getattr(obj, "_count", None), "__self__", obj)
    return "rust" if type(engine).__module__.startswith("memlane._core") else "python"


# ---------------------------------------------------------------------------- profiles


def profile(fn: Callable[[], Any], *, top: int = 18, sort: str = "tottime") -> str:
    """cProfile of ``fn()``: the ``top`` functions by own time, in milliseconds and µs per call."""
    prof = cProfile.Profile()
    gc.collect()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(tt for _, _, tt, _, _ in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(
        stats.stats.items(), key=lambda kv: kv[1][2 if sort == "tottime" else 3], reverse=True
    )  # type: ignore[attr-defined]
    lines = [
        f"total {total * 1e3:.1f} ms of profiled time",
        f"{'own ms':>8} {'own %':>6} {'cum ms':>8} {'calls':>8} {'own µs/call':>11}  function",
    ]
    for (filename, line, name), (_, ncalls, tt, ct, _) in rows[:top]:
        where = f"{os.path.basename(filename)}:{line}({name})" if filename != "~" else name
        lines.append(
            f"{tt * 1e3:8.2f} {100 * tt / total if total else 0:5.1f}% {ct * 1e3:8.2f} {ncalls:8d} "
            f"{tt / ncalls * 1e6 if ncalls else 0:11.2f}  {where}"
        )
    return "\n".join(lines)


def perf_report(
    script: str, *, args: list[str] | None = None, sort: str = "dso", top: int = 25
) -> str:
    """``perf record`` of a Python snippet in a child process, top entries; '' if no perf.

    The extension is built stripped, so its samples are reported per DSO (time inside Rust
    against time in the interpreter and libc) rather than per Rust function.
    """
    import shutil
    import tempfile

    if not shutil.which("perf"):
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        code = subprocess.run(
            [
                "perf",
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                "2000",
                "-g",
                "-o",
                data,
                "--",
                sys.executable,
                "-c",
                script,
                *(args or []),
            ],
            check=False,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
        )
        if code.returncode != 0:
            return ""
        rep = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                data,
                "--no-children",
                "--stdio",
                "--sort",
                sort,
                "-g",
                "none",
                "--percent-limit",
                "1",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
    lines = [ln for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return "\n".join(lines[:top])


# ---------------------------------------------------------------------------- environment


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], check=False, cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return fmt_bytes(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return "?"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def filesystem_of(path: str) -> str:
    """The mount type holding ``path`` (SQLite and file-store timings depend on it)."""
    best, kind = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def environment() -> dict[str, str]:
    """Machine and versions, for the header of RESULTS.md."""
    import sqlite3

    import memlane

    try:
        core_version = rust_core().__version__
    except Unavailable:
        core_version = "not importable"
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = (
        " (+ uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    )
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} logical cores ({affinity} usable), {_mem_total()} RAM",
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "memlane": f"{memlane.__version__} (extension {core_version}), git {commit}{dirty}",
        "tiktoken": _version("tiktoken"),
        "bpe-openai": _version("bpe-openai"),
        "langchain-core": _version("langchain-core"),
        "pydantic / pydantic-ai-slim": f"{_version('pydantic')} / {_version('pydantic-ai-slim')}",
        "sqlite (Python's sqlite3)": sqlite3.sqlite_version,
        "load average at start": loadavg(),
    }
