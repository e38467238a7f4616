"""Every script in examples/ runs as a reader would run it, offline, from an empty directory."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import drop_server_place

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, cwd: Path, **env: str) -> str:
    """The example's standard output; its failure fails the test with its stderr."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_tested() -> None:
    """A new example needs a test here."""
    tested = {"agent_sqlite.py", "longterm_facts_tools.py", "fleet_postgres.py", "shared_team.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_agent_sqlite_continues_after_a_restart(tmp_path: Path) -> None:
    """The second run is sent the first run's turns from the database file."""
    first = run_example("agent_sqlite.py", tmp_path)
    assert "agent: I can see 1 earlier message(s)." in first
    second = run_example("agent_sqlite.py", tmp_path)
    assert "agent: I can see 3 earlier message(s)." in second
    assert "4 turns stored in agent.sqlite3" in second


def test_longterm_facts_with_tools(tmp_path: Path) -> None:
    """What one run remembered about the user, the next run is told."""
    out = run_example("longterm_facts_tools.py", tmp_path)
    assert "What I know: - city = Adelaide" in out
    assert "city = Adelaide" in out.splitlines()[-1]


def test_shared_memory_team(tmp_path: Path) -> None:
    """The manager reads its workers' results."""
    out = run_example("shared_team.py", tmp_path)
    assert out.splitlines() == ["worker_1: sales: +120 rows", "worker_2: users: +7 rows"]


@pytest.mark.postgres
def test_fleet_of_two_hosts_on_postgresql(tmp_path: Path, postgres_server: Any) -> None:
    """Two processes add turns to one conversation; both hosts' turns are there, in order."""
    schema = f"examples_{os.getpid()}"
    try:
        out = run_example(
            "fleet_postgres.py",
            tmp_path,
            MEMLANE_POSTGRES_URL=postgres_server.url,
            MEMLANE_POSTGRES_SCHEMA=schema,
        )
    finally:
        asyncio.run(drop_server_place("postgres", postgres_server.url, schema))
    assert ": 6 turns from two hosts" in out
    assert sum("host-a: question" in line for line in out.splitlines()) == 3
    assert sum("host-b: question" in line for line in out.splitlines()) == 3
