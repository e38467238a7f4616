"""Several processes share one store: concurrent appends to one conversation, concurrent writers of
one key, and concurrent first initialisation — with SQLiteStore, PostgreSQLStore and MongoDBStore.

Each worker is a fresh Python process driven over stdin/stdout, so the steps that must overlap
(connect, then everyone writes at once, then everyone reads) are released together.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import drop_server_place
from db_servers import Server
from memlane import SQLiteStore

KINDS = ["sqlite", "postgres", "mongodb"]
TURNS = 25
STEP_TIMEOUT = 120.0

WORKER = r"""
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")  # e.g. the partial-index fallback notice of FerretDB
cfg = json.loads(sys.argv[1])
from memlane import ConversationMemory, MemoryManager, SQLiteStore
from memlane.stores import MongoDBStore, PostgreSQLStore

def make_store():
    if cfg["kind"] == "sqlite":
        return SQLiteStore(cfg["path"])
    if cfg["kind"] == "postgres":
        return PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
    return MongoDBStore(cfg["url"], collection=cfg["name"], pool_size=2)

def step(expected):
    line = sys.stdin.readline().strip()
    assert line == expected, line

def say(**message):
    print(json.dumps(message), flush=True)

mode = cfg["mode"]
if mode == "init":
    say(state="ready")
    step("go")
    store = make_store()  # SQLite creates its schema here
    store.initialize()
    say(state="done", ok=store.load("probe") == [])
else:
    store = make_store()
    manager = MemoryManager(store=store)
    store.load("warm-up")  # connect (and migrate) before the race starts
    say(state="ready")
    step("go")
    label = cfg["label"]
    if mode == "append":
        if cfg["use_async"]:
            async def append():
                for i in range(cfg["turns"]):
                    await manager.async_add_turn(cfg["cid"], f"{label}-{i}", f"answer {label}-{i}")
            asyncio.run(append())
        else:
            for i in range(cfg["turns"]):
                manager.add_turn(cfg["cid"], f"{label}-{i}", f"answer {label}-{i}")
    else:
        for i in range(cfg["turns"]):
            manager.working.set("shared", f"{label}-{i}")
    say(state="written")
    step("read")
    fresh = ConversationMemory(store=store)
    turns = fresh.get_turns(cfg["cid"]) if mode == "append" else []
    say(
        state="done",
        prompts=[t.user_prompt for t in turns],
        turn_ids=[t.turn_id for t in turns],
        shared=[e.content for e in store.load("working:default")],
    )
store.close()
"""


class Worker:
    """One worker process and its line protocol."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def expect(self, state: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=STEP_TIMEOUT)
            assert self.proc.stderr is not None
            pytest.fail(
                f"worker exited with {self.proc.returncode} before {state!r}:\n{self.proc.stderr.read()}"
            )
        message: dict[str, Any] = json.loads(line)
        assert message["state"] == state, message
        return message

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        try:
            self.proc.wait(timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("worker did not exit")
        assert self.proc.stderr is not None
        assert self.proc.returncode == 0, self.proc.stderr.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def run_workers(cfgs: list[dict[str, Any]], *, read_step: bool) -> list[dict[str, Any]]:
    """Starts workers, releases them together, and returns their final messages."""
    workers = [Worker(cfg) for cfg in cfgs]
    try:
        for w in workers:
            w.expect("ready")
        for w in workers:
            w.send("go")
        if read_step:
            for w in workers:
                w.expect("written")
            for w in workers:
                w.send("read")
        results = [w.expect("done") for w in workers]
        for w in workers:
            w.finish()
        return results
    finally:
        for w in workers:
            w.close()


@pytest.fixture(params=KINDS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Where the workers meet: an SQLite file, a fresh PostgreSQL schema or MongoDB collection."""
    kind = request.param
    name = f"mp_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        # Created here, so the workers race on appends, not on the first open (which
        # TestConcurrentFirstInitialize covers).
        SQLiteStore(tmp_path / "shared.sqlite3").close()
        yield {"kind": kind, "path": str(tmp_path / "shared.sqlite3"), "name": name}
        return
    server: Server = request.getfixturevalue(
        "postgres_server" if kind == "postgres" else "mongodb_server"
    )
    yield {"kind": kind, "url": server.url, "name": name}
    await drop_server_place(kind, server.url, name)


class TestConcurrentConversationAppends:
    """Two processes appending to one conversation both succeed, keep every turn once, and read back one order."""

    def test_two_processes(self, target: dict[str, Any]) -> None:
        cid = uuid.uuid4().hex
        cfgs = [
            {
                **target,
                "mode": "append",
                "cid": cid,
                "label": label,
                "turns": TURNS,
                "use_async": use_async,
            }
            for label, use_async in (("a", False), ("b", True))
        ]
        first, second = run_workers(cfgs, read_step=True)
        assert first["prompts"] == second["prompts"]
        prompts = first["prompts"]
        expected = {f"{label}-{i}" for label in "ab" for i in range(TURNS)}
        assert len(prompts) == len(expected) == 2 * TURNS
        assert set(prompts) == expected
        for label in "ab":
            assert [p for p in prompts if p.startswith(f"{label}-")] == [
                f"{label}-{i}" for i in range(TURNS)
            ]
        assert first["turn_ids"] == second["turn_ids"] == list(range(2 * TURNS))


class TestConcurrentKeyWriters:
    """Three processes overwriting one working-memory key leave exactly one entry for it."""

    def test_three_processes(self, target: dict[str, Any]) -> None:
        cfgs = [
            {**target, "mode": "set", "cid": "unused", "label": label, "turns": TURNS}
            for label in "abc"
        ]
        results = run_workers(cfgs, read_step=True)
        shared = [r["shared"] for r in results]
        assert shared[0] == shared[1] == shared[2]
        assert len(shared[0]) == 1
        assert shared[0][0] in {f"{label}-{TURNS - 1}" for label in "abc"}


class TestConcurrentFirstInitialize:
    """Processes initialising a fresh schema or collection at the same moment all succeed."""

    def test_three_processes(self, target: dict[str, Any]) -> None:
        if target["kind"] == "sqlite":
            target = {**target, "path": str(Path(target["path"]).with_name("fresh.sqlite3"))}
        results = run_workers([{**target, "mode": "init"} for _ in range(3)], read_step=False)
        assert [r["ok"] for r in results] == [True] * 3
