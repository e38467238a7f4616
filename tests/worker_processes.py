"""Worker processes for the multi-process tests: start scripts, release them together, and
always reap them, so a failed assertion never leaves a writer running against the next test's
file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from memlane import _backend

STEP_TIMEOUT = 180.0


def backends() -> list[str]:
    """The implementations worker processes alternate between: both where the extension exists."""
    return ["rust", "python"] if _backend.rust_core() is not None else ["python"]


def either_backend_env() -> dict[str, str]:
    """This process's environment without ``MEMLANE_PURE_PYTHON``, for workers that pick their
    implementation themselves (from :func:`backends`)."""
    return {k: v for k, v in os.environ.items() if k != "MEMLANE_PURE_PYTHON"}


@contextmanager
def started(
    script: str, cfgs: Iterable[dict[str, Any]], *, env: dict[str, str] | None = None
) -> Iterator[list[subprocess.Popen[str]]]:
    """Runs ``python -c script <cfg as JSON>`` once per config, with pipes to talk to each;
    on leaving, kills any still running and closes their pipes."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for cfg in cfgs
    ]
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()


def release(procs: list[subprocess.Popen[str]]) -> None:
    """Waits for every worker's "ready", then sends each "go": their writes start together."""
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()


def release_together(procs: list[subprocess.Popen[str]]) -> list[Any]:
    """:func:`release`, then what each worker printed (JSON) once it exited cleanly."""
    release(procs)
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=STEP_TIMEOUT)
        assert p.returncode == 0
        results.append(json.loads(out))
    return results
