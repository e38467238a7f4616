"""A fleet of hosts on one shared store (issue 11): every host sees every turn in commit order,
summaries never lose or double a turn, a host killed mid-summary loses nothing, summaries run
off the request path, and a long-lived host's memory stays bounded.

Hosts are long-lived ``MemoryManager``s, each with its own store client, in this process or in
child processes (tests/fleet_host.py) driven over the line protocol of
tests/test_multiprocess.py. Children run the implementation of the test's ``impl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import fleet_host
from conftest import drop_server_place
from db_servers import Server
from fleet_host import KINDS, PROMPT, concat_summarizer, make_store, prompt, view
from memlane import ConversationMemory, MemoryManager, SQLiteStore, _backend
from memlane.messages import SUMMARY_PREFIX, message_texts
from memlane.stores.protocol import ConditionalStore
from memlane.tokens import TokenEstimator
from test_multiprocess import STEP_TIMEOUT, Worker

HOST_PROGRAM = Path(fleet_host.__file__)

SUMMARIZING = {"summarize": True, "summarize_threshold": 40, "max_tokens": 1000}
"""Hosts that summarise every few turns (a turn of the tests costs ~10 tokens)."""

GATE_TIMEOUT = 5.0
"""How long a held summarizer waits before giving up (only an inline summary waits it out)."""


@pytest.fixture(params=KINDS)
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Where the hosts meet: an SQLite file, a FileStore directory, a fresh PostgreSQL schema
    or MongoDB collection (the ``target`` of tests/test_multiprocess.py, plus FileStore)."""
    kind = request.param
    name = f"fleet_{uuid.uuid4().hex[:12]}"
    if kind in ("sqlite", "file"):
        path = tmp_path / ("shared.sqlite3" if kind == "sqlite" else "shared")
        # Created here, so the hosts race on turns, not on the first open.
        make_store({"kind": kind, "path": str(path)}).close()
        yield {"kind": kind, "path": str(path), "name": name}
        return
    server: Server = request.getfixturevalue(
        "postgres_server" if kind == "postgres" else "mongodb_server"
    )
    yield {"kind": kind, "url": server.url, "name": name}
    await drop_server_place(kind, server.url, name)


@contextlib.contextmanager
def hosts(place: dict[str, Any], count: int, **options: Any) -> Iterator[list[MemoryManager]]:
    """``count`` long-lived managers in this process, each with its own client of ``place``."""
    stores = [make_store(place) for _ in range(count)]
    try:
        yield [MemoryManager(store=store, **options) for store in stores]
    finally:
        for store in stores:
            store.close()


@contextlib.contextmanager
def fresh_memory(place: dict[str, Any], **options: Any) -> Iterator[ConversationMemory]:
    """A new instance on ``place``, as a host that starts (or restarts) now."""
    store = make_store(place)
    try:
        yield ConversationMemory(store=store, **options)
    finally:
        store.close()


class Host(Worker):
    """A host in a child process (tests/fleet_host.py) running the test's implementation."""

    def __init__(self, cfg: dict[str, Any], impl: _backend.Implementation) -> None:
        env = dict(os.environ)
        if impl.name == "python":
            env["MEMLANE_PURE_PYTHON"] = "1"
        else:
            env.pop("MEMLANE_PURE_PYTHON", None)
        self.impl = impl
        self.proc = subprocess.Popen(
            [sys.executable, str(HOST_PROGRAM), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ready(self) -> None:
        assert self.expect("ready")["backend"] == self.impl.name

    def request(self, op: str, **args: Any) -> None:
        self.send(json.dumps({"op": op, **args}))

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        self.request(op, **args)
        return self.expect("ok")

    def exit(self) -> None:
        self.request("exit")
        self.finish()


@contextlib.contextmanager
def child_hosts(
    place: dict[str, Any], impl: _backend.Implementation, *cfgs: dict[str, Any]
) -> Iterator[list[Host]]:
    """Child hosts on ``place``, connected and ready; killed if the test fails."""
    children = [Host({**place, "mode": "host", **cfg}, impl) for cfg in cfgs]
    try:
        for child in children:
            child.ready()
        yield children
    finally:
        for child in children:
            child.close()


def each_once(added: list[str], shown: dict[str, Any]) -> list[str]:
    """Asserts that ``shown`` (a :func:`fleet_host.view`) holds each of ``added`` once.

    The summary holds the oldest turns and the kept turns the rest, in commit order,
    numbered from where the summary ends. Returns the prompts the summary holds.
    """
    summarised = PROMPT.findall(shown["summary"] or "")
    seen = summarised + shown["prompts"]
    missing = sorted(set(added) - set(seen))
    doubled = sorted({p for p in seen if seen.count(p) > 1})
    assert not missing, f"turns lost: {missing}"
    assert not doubled, f"turns doubled: {doubled}"
    assert seen == added
    assert shown["turn_ids"] == list(range(len(summarised), len(added)))
    return summarised


# ============================================================================ coherent hosts


class TestHostsAlternatingTurns:
    """Two long-lived hosts alternating turns on one conversation see the same turns, ids and history."""

    def test_issue_scenario(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        expected = ["host A turn 1", "host B turn 2", "host A turn 3"]
        with hosts(place, 2) as (a, b):
            a.add_turn(cid, expected[0], "answer 1")
            b.add_turn(cid, expected[1], "answer 2")
            turn = a.add_turn(cid, expected[2], "answer 3")
            assert turn.turn_id == 2
            for host in (a, b):
                turns = host.conversation.get_turns(cid)
                assert [t.user_prompt for t in turns] == expected
                assert [t.turn_id for t in turns] == [0, 1, 2]
            with fresh_memory(place) as reader:
                assert view(reader, cid) == view(a.conversation, cid) == view(b.conversation, cid)

    def test_after_every_turn(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        max_tokens = 60  # a few turns: the history window moves while the hosts alternate
        added: list[str] = []
        with hosts(place, 2, max_conversation_tokens=max_tokens) as pair:
            for i in range(14):
                writer = pair[i % 2]
                text = f"host {'AB'[i % 2]} turn {i}"
                turn = writer.add_turn(cid, text, f"answer {i}")
                added.append(text)
                assert turn.turn_id == i
                a, b = (view(host.conversation, cid) for host in pair)
                assert a == b, f"after turn {i}"
                assert a["prompts"] == added
                assert a["turn_ids"] == list(range(len(added)))
                assert a["history"][-2:] == [text, f"answer {i}"]
                assert a["history_tokens"] <= max_tokens
            assert len(a["history"]) < 2 * len(added)  # the budget did drop old turns
            with fresh_memory(place, max_tokens=max_tokens) as reader:
                assert view(reader, cid) == a


class TestHostsSummarisingOneConversation:
    """Two hosts summarising one conversation keep every turn once: in the summary or kept."""

    TURNS = 40

    def test_two_instances(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        added: list[str] = []
        options = {
            "summarizer": concat_summarizer,
            "summarize_threshold": SUMMARIZING["summarize_threshold"],
            "max_conversation_tokens": SUMMARIZING["max_tokens"],
        }
        with hosts(place, 2, **options) as pair:
            for i in range(self.TURNS):
                added.append(prompt("ab"[i % 2], i))
                pair[i % 2].add_turn(cid, added[-1], f"answer to {added[-1]}")
            shown = [view(host.conversation, cid) for host in pair]
        with fresh_memory(place, max_tokens=SUMMARIZING["max_tokens"]) as reader:
            final = view(reader, cid)
        summarised = each_once(added, final)
        assert len(summarised) >= self.TURNS // 2  # both hosts did summarise, often
        assert shown == [final, final]

    def test_two_processes(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        added: list[str] = []
        ids: list[int] = []
        with child_hosts(place, impl, SUMMARIZING, SUMMARIZING) as pair:
            for i in range(self.TURNS):
                added.append(prompt("ab"[i % 2], i))
                ids.append(pair[i % 2].call("add", cid=cid, prompt=added[-1])["turn_id"])
            shown = [child.call("view", cid=cid) for child in pair]
            with fresh_memory(place, max_tokens=SUMMARIZING["max_tokens"]) as reader:
                final = view(reader, cid)
            summarised = each_once(added, final)
            assert len(summarised) >= self.TURNS // 2
            assert ids == list(range(self.TURNS))
            assert [{k: v for k, v in s.items() if k != "state"} for s in shown] == [final, final]
            for child in pair:
                child.exit()


class TestProcessesInterleavingTurns:
    """Two processes racing 30 turns each on one conversation: every turn once, one numbering for all."""

    TURNS = 30

    def test_two_processes(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        cfg = {"max_tokens": 100_000}
        with child_hosts(place, impl, cfg, cfg) as pair:
            for child, label, use_async in zip(pair, "ab", (False, True), strict=True):
                child.request(
                    "add_many", cid=cid, label=label, turns=self.TURNS, use_async=use_async
                )
            returned = [child.expect("ok")["turn_ids"] for child in pair]
            # Both are done (the barrier): each long-lived host now sees every turn.
            shown = [child.call("view", cid=cid) for child in pair]
            with fresh_memory(place) as reader:
                turns = reader.get_turns(cid)
            prompts = [t.user_prompt for t in turns]
            expected = {f"{label}-{i}" for label in "ab" for i in range(self.TURNS)}
            assert len(prompts) == 2 * self.TURNS, f"lost or doubled: {len(prompts)} turns"
            assert set(prompts) == expected
            assert [t.turn_id for t in turns] == list(range(2 * self.TURNS))
            for label, ids in zip("ab", returned, strict=True):
                mine = [p for p in prompts if p.startswith(f"{label}-")]
                assert mine == [f"{label}-{i}" for i in range(self.TURNS)]  # each one's order
                # The id add_turn returned is the turn's place in the one commit order.
                assert ids == [prompts.index(p) for p in mine]
            for seen in shown:
                assert seen["prompts"] == prompts
                assert seen["turn_ids"] == list(range(2 * self.TURNS))
            for child in pair:
                child.exit()


def sleep_until(deadline: float) -> None:
    """Sleeps until ``time.monotonic()`` reaches ``deadline`` (at once if it has)."""
    time.sleep(max(0.0, deadline - time.monotonic()))


class TestIdleConversationsExpireAcrossProcesses:
    """A conversation another process keeps alive stays; idle everywhere, it is gone for all,
    and a life started again elsewhere replaces what a host still had cached."""

    @pytest.fixture
    def sqlite_place(self, tmp_path: Path) -> dict[str, Any]:
        path = tmp_path / "ttl.sqlite3"
        make_store({"kind": "sqlite", "path": str(path)}).close()
        return {"kind": "sqlite", "path": str(path), "name": "ttl"}

    def test_kept_alive_elsewhere(
        self, sqlite_place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        cid, ttl = uuid.uuid4().hex, 4.0
        cfg = {"max_tokens": 100_000, "conversation_ttl": ttl}
        with child_hosts(sqlite_place, impl, cfg, cfg) as (a, b):
            for child in (a, b):  # first calls import and warm up: off the timed steps
                child.call("add", cid=uuid.uuid4().hex, prompt="warm-up")
            # Each step waits from when the previous call returned, so a slow call on a
            # loaded machine shifts the schedule instead of breaking it: every expiry below
            # has at least 0.4 * ttl of margin for one call's latency.
            a.call("add", cid=cid, prompt="from a")
            a_added = time.monotonic()  # a's expiry: at most this + ttl
            sleep_until(a_added + 0.4 * ttl)
            b_started = time.monotonic()
            b.call("add", cid=cid, prompt="from b")  # pushes the expiry past a's own
            b_added = time.monotonic()
            assert b_added < a_added + ttl - 0.5, "b's turn came too late to keep it alive"
            sleep_until(a_added + ttl + 0.1)  # past a's turn + ttl, before b's
            assert a.call("view", cid=cid)["prompts"] == ["from a", "from b"]
            assert time.monotonic() < b_started + ttl, "the view came after b's expiry"
            sleep_until(b_added + ttl + 0.1)  # idle past the ttl for everyone
            assert a.call("view", cid=cid)["prompts"] == []
            assert b.call("view", cid=cid)["prompts"] == []
            for child in (a, b):
                child.exit()

    def test_started_again_elsewhere(
        self, sqlite_place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        cid = uuid.uuid4().hex
        cfg = {"max_tokens": 100_000, "conversation_ttl": 1.0}
        with child_hosts(sqlite_place, impl, cfg, cfg) as (a, b):
            a.call("add", cid=cid, prompt="old life")
            time.sleep(1.3)
            b.call("add", cid=cid, prompt="new life")  # b finds it expired: a new life
            shown = a.call("view", cid=cid)  # a's cache is of the old life
            assert shown["prompts"] == ["new life"]
            assert shown["turn_ids"] == [0]
            for child in (a, b):
                child.exit()


# ============================================================================ clear


class TestClearSeenByEveryHost:
    """A conversation one host clears is gone for every host that cached it, and what any
    host adds afterwards is a new conversation numbered from 0, seen whole by all."""

    def test_two_instances(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        with hosts(place, 2) as (a, b):
            for i in range(4):
                a.add_turn(cid, f"old {i}", f"answer {i}")
            assert len(b.conversation.get_turns(cid)) == 4  # b has it cached
            a.conversation.clear(cid)
            for host in (a, b):
                assert view(host.conversation, cid)["prompts"] == []
                assert host.conversation.get_message_history(cid) == []
                assert cid not in host.conversation.conversation_ids
            # Fewer new turns than b cached: b must not mistake them for turns it has.
            assert b.add_turn(cid, "new 0", "answer").turn_id == 0
            assert a.add_turn(cid, "new 1", "answer").turn_id == 1
            with fresh_memory(place) as reader:
                expected = view(reader, cid)
            assert expected["prompts"] == ["new 0", "new 1"]
            assert expected["turn_ids"] == [0, 1]
            assert view(a.conversation, cid) == view(b.conversation, cid) == expected
            for host in (a, b):
                assert cid in host.conversation.conversation_ids

    def test_two_processes(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        cfg = {"max_tokens": 100_000}
        with child_hosts(place, impl, cfg, cfg) as (a, b):
            for i in range(5):
                a.call("add", cid=cid, prompt=f"old {i}")
            assert len(b.call("view", cid=cid)["prompts"]) == 5
            assert cid not in a.call("clear", cid=cid, use_async=True)["conversation_ids"]
            assert b.call("view", cid=cid)["prompts"] == []
            assert b.call("add", cid=cid, prompt="new 0")["turn_id"] == 0
            for i in range(1, 7):  # past the position b had cached
                assert a.call("add", cid=cid, prompt=f"new {i}")["turn_id"] == i
            shown = [child.call("view", cid=cid) for child in (a, b)]
            for seen in shown:
                del seen["state"]
            with fresh_memory(place) as reader:
                assert shown == [view(reader, cid)] * 2
            assert shown[0]["prompts"] == [f"new {i}" for i in range(7)]
            for child in (a, b):
                child.exit()

    def test_clear_leaves_only_its_event(
        self, place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        cid = uuid.uuid4().hex
        options = {"summarizer": concat_summarizer, "summarize_threshold": 40}
        with hosts(place, 1, **options) as (a,):
            for i in range(12):  # long enough to be summarised on the way
                a.add_turn(cid, f"old {i}", f"answer {i}")
            assert a.conversation.get_summary(cid) is not None
            a.conversation.clear(cid)
            stored = a.store.load(ConversationMemory.namespace(cid))
            assert [e.metadata.get("kind") for e in stored] == ["clear"]
            a.add_turn(cid, "new", "answer")
            stored = a.store.load(ConversationMemory.namespace(cid))
            assert sorted(str(e.metadata.get("kind")) for e in stored) == [
                "budget",
                "clear",
                "turn",
            ]

    def test_interrupted_clear_is_finished_by_the_next_reader(
        self, place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        """A host that died after writing the clear event, before deleting: readers see no
        conversation, and the next load deletes what the clear voided."""
        from memlane.conversation.state import clear_entry

        cid = uuid.uuid4().hex
        ns = ConversationMemory.namespace(cid)
        with hosts(place, 1) as (a,):
            for i in range(3):
                a.add_turn(cid, f"old {i}", f"answer {i}")
            store = a.store
            assert isinstance(store, ConditionalStore)
            assert store.save_if(ns, clear_entry(3), None)
            with fresh_memory(place) as reader:
                assert view(reader, cid)["prompts"] == []
                assert [e.metadata.get("kind") for e in a.store.load(ns)] == ["clear"]
                assert reader.add_turn(cid, "new", "answer").turn_id == 0
            assert view(a.conversation, cid)["prompts"] == ["new"]

    def test_import_under_a_cleared_id(
        self, place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        cid = uuid.uuid4().hex
        with hosts(place, 2) as (a, b):
            for i in range(3):
                a.add_turn(cid, f"old {i}", f"answer {i}")
            exported = a.conversation.export_conversation(cid)
            a.add_turn(cid, "later", "answer")
            assert len(b.conversation.get_turns(cid)) == 4
            a.conversation.clear(cid)
            assert a.conversation.import_conversation(exported) == cid
            for host in (a, b):
                assert view(host.conversation, cid)["prompts"] == ["old 0", "old 1", "old 2"]
            with pytest.raises(ValueError, match="already exists"):
                b.conversation.import_conversation(exported)


class TestClearWithTtl:
    """Expiry never removes the event of a clear younger than the ttl (a host's cache of the
    cleared conversation may still be alive), and does not count it as an expired conversation."""

    def test_cleanup_keeps_a_recent_clear(self, tmp_path: Path) -> None:
        path = tmp_path / "ttl.sqlite3"
        cid = uuid.uuid4().hex
        ns = ConversationMemory.namespace(cid)
        with SQLiteStore(path) as store_a, SQLiteStore(path) as store_b:
            a = ConversationMemory(store=store_a, conversation_ttl=60.0)
            b = ConversationMemory(store=store_b, conversation_ttl=60.0)
            for i in range(3):
                a.add_turn(cid, f"old {i}", "answer")
            assert len(b.get_turns(cid)) == 3
            a.clear(cid)
            assert a.cleanup_expired_conversations() == 0
            assert [e.metadata.get("kind") for e in store_a.load(ns)] == ["clear"]
            assert b.get_turns(cid) == []
            b.add_turn(cid, "new", "answer")
            assert [t.user_prompt for t in a.get_turns(cid)] == ["new"]

    def test_cleanup_removes_an_old_clear(self, tmp_path: Path) -> None:
        path = tmp_path / "ttl.sqlite3"
        cid = uuid.uuid4().hex
        with SQLiteStore(path) as store:
            memory = ConversationMemory(store=store, conversation_ttl=0.5)
            memory.add_turn(cid, "old", "answer")
            memory.clear(cid)
            time.sleep(0.7)
            assert memory.cleanup_expired_conversations() == 0
            assert store.load(ConversationMemory.namespace(cid)) == []
            assert memory.get_turns(cid) == []


# ============================================================================ crash in a summary


class TestHostKilledDuringSummaryCommit:
    """A host killed after writing a summary, before deleting what it replaced, loses nothing."""

    @staticmethod
    def run_until_killed(
        place: dict[str, Any],
        impl: _backend.Implementation,
        tmp_path: Path,
        cid: str,
        other: MemoryManager | None = None,
    ) -> tuple[list[str], str]:
        """Alternates turns of a doomed child host (and ``other``, if given) until the child
        dies in its first summary commit.

        Returns the acknowledged prompts and the one whose ``add_turn`` was cut short.
        """
        marker = tmp_path / "killed-in"
        cfg = {**SUMMARIZING, "kill_marker": str(marker)}
        added: list[str] = []
        with child_hosts(place, impl, cfg) as (child,):
            for i in range(30):
                if other is not None and i % 2:
                    added.append(prompt("b", i))
                    other.add_turn(cid, added[-1], f"answer to {added[-1]}")
                    continue
                child.request("add", cid=cid, prompt=prompt("a", i))
                assert child.proc.stdout is not None
                if not child.proc.stdout.readline():
                    break
                added.append(prompt("a", i))
            else:
                pytest.fail("the host never committed a summary")
            assert child.proc.wait(timeout=STEP_TIMEOUT) == -signal.SIGKILL
        assert marker.exists(), "the host died, but not after a summary write"
        return added, prompt("a", i)

    @staticmethod
    def continue_after(memory: ConversationMemory, cid: str, seen: list[str]) -> list[str]:
        """Adds more turns: their ids follow on from what ``seen`` holds."""
        for j in range(8):
            turn = memory.add_turn(cid, prompt("r", j), f"answer to {prompt('r', j)}")
            assert turn.turn_id == len(seen)
            seen = [*seen, prompt("r", j)]
        return seen

    def test_restart_loses_nothing(
        self, place: dict[str, Any], impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        cid = uuid.uuid4().hex
        added, cut_short = self.run_until_killed(place, impl, tmp_path, cid)
        options = {
            "summarizer": concat_summarizer,
            "summarize_threshold": SUMMARIZING["summarize_threshold"],
            "max_tokens": SUMMARIZING["max_tokens"],
        }
        with fresh_memory(place, **options) as restarted:
            shown = view(restarted, cid)
            assert shown["summary"] is not None
            # The turn in flight was never acknowledged: it may or may not have been kept.
            seen = [*added, cut_short] if cut_short in shown["prompts"] else added
            each_once(seen, shown)
            seen = self.continue_after(restarted, cid, seen)
            each_once(seen, view(restarted, cid))
        with fresh_memory(place, max_tokens=SUMMARIZING["max_tokens"]) as reader:
            each_once(seen, view(reader, cid))

    def test_surviving_host_agrees(
        self, place: dict[str, Any], impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        cid = uuid.uuid4().hex
        with hosts(place, 1, max_conversation_tokens=SUMMARIZING["max_tokens"]) as (survivor,):
            added, cut_short = self.run_until_killed(place, impl, tmp_path, cid, survivor)
            with fresh_memory(place, max_tokens=SUMMARIZING["max_tokens"]) as reader:
                shown = view(reader, cid)
            assert view(survivor.conversation, cid) == shown
            seen = [*added, cut_short] if cut_short in shown["prompts"] else added
            each_once(seen, shown)
            seen = self.continue_after(survivor.conversation, cid, seen)
            each_once(seen, view(survivor.conversation, cid))


# ============================================================================ background summaries


class HeldSummarizer:
    """A summarizer that waits until released, recording how and where it was run.

    It counts the summaries in flight (the tests use one conversation, so this is the
    per-conversation count) and the threads and loops they ran on.
    """

    def __init__(self) -> None:
        self.release = threading.Event()
        self.running = threading.Event()
        self._lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.threads: set[int] = set()
        self.loops: set[int] = set()

    def _enter(self) -> None:
        with self._lock:
            self.started += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.threads.add(threading.get_ident())
        self.running.set()

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self.finished += 1

    def __call__(self, turns: list[Any]) -> str:
        self._enter()
        try:
            self.release.wait(GATE_TIMEOUT)
            return concat_summarizer(turns)
        finally:
            self._leave()

    async def run_async(self, turns: list[Any]) -> str:
        """The same summarizer, as a coroutine function."""
        self._enter()
        self.loops.add(id(asyncio.get_running_loop()))
        try:
            for _ in range(int(GATE_TIMEOUT / 0.01)):
                if self.release.is_set():
                    break
                await asyncio.sleep(0.01)
            return concat_summarizer(turns)
        finally:
            self._leave()

    def release_soon(self) -> None:
        """Releases the summary shortly, from another thread, so a wait must really wait."""
        threading.Timer(0.2, self.release.set).start()

    def assert_all_done(self) -> None:
        """Every summary that started has finished, and none overlapped another."""
        assert self.started >= 1
        assert self.finished == self.started
        assert self.most_in_flight == 1


BUDGET = 80
THRESHOLD = 30
MORE_TURNS = 8
"""Turns added while the first summary is held."""


def background_memory(path: Path, summarizer: Any) -> ConversationMemory:
    return ConversationMemory(
        max_tokens=BUDGET,
        summarize_threshold=THRESHOLD,
        summarizer=summarizer,
        store=SQLiteStore(path),
        summarize_in_background=True,
    )


def add_while_held(
    memory: ConversationMemory | MemoryManager, held: HeldSummarizer, cid: str
) -> list[str]:
    """Adds turns until one asks for a summary, then more while it is held; returns them.

    Every ``add_turn`` must return while the summary is still being made, the history must
    fit the budget meanwhile, and no second summary of the conversation may start.
    """
    conversation = memory if isinstance(memory, ConversationMemory) else memory.conversation
    added: list[str] = []

    def add() -> None:
        added.append(prompt("t", len(added)))
        memory.add_turn(cid, added[-1], f"answer to {added[-1]}")
        assert held.finished == 0, "add_turn waited for the summary"
        assert conversation.get_history_tokens(cid) <= BUDGET
        assert message_texts(conversation.get_message_history(cid))[-2] == added[-1]

    while conversation.get_total_tokens(cid) <= THRESHOLD:
        add()
    assert held.running.wait(GATE_TIMEOUT), "no summary started"
    for _ in range(MORE_TURNS):
        add()
    assert held.started == 1, "a second summary started while the first was in flight"
    return added


async def async_add_while_held(
    memory: ConversationMemory, held: HeldSummarizer, cid: str
) -> list[str]:
    """:func:`add_while_held` through ``async_add_turn``."""
    added: list[str] = []

    async def add() -> None:
        added.append(prompt("t", len(added)))
        await memory.async_add_turn(cid, added[-1], f"answer to {added[-1]}")
        assert held.finished == 0, "async_add_turn waited for the summary"
        assert await memory.async_get_history_tokens(cid) <= BUDGET
        assert message_texts(await memory.async_get_message_history(cid))[-2] == added[-1]

    while await memory.async_get_total_tokens(cid) <= THRESHOLD:
        await add()
    for _ in range(int(GATE_TIMEOUT / 0.01)):  # the loop must run for a task to start
        if held.running.is_set():
            break
        await asyncio.sleep(0.01)
    assert held.running.is_set(), "no summary started"
    for _ in range(MORE_TURNS):
        await add()
    assert held.started == 1, "a second summary started while the first was in flight"
    return added


def assert_settled(memory: ConversationMemory, cid: str, added: list[str]) -> None:
    """After a flush or close: a summary, and no turn lost or doubled."""
    shown = view(memory, cid)
    assert shown["summary"] is not None
    each_once(added, shown)


class TestSummariesInBackground:
    """With summarize_in_background, add_turn returns once the turn is stored; summaries run after."""

    def test_add_turn_does_not_wait(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        held = HeldSummarizer()
        memory = background_memory(tmp_path / "m.sqlite3", held)
        cid = uuid.uuid4().hex
        added = add_while_held(memory, held, cid)
        held.release_soon()
        memory.flush()
        held.assert_all_done()
        assert threading.get_ident() not in held.threads
        assert_settled(memory, cid, added)
        memory.close()
        memory.store.close()

    async def test_sync_summarizer_runs_in_a_worker_thread(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        held = HeldSummarizer()
        memory = background_memory(tmp_path / "m.sqlite3", held)
        cid = uuid.uuid4().hex
        added = await async_add_while_held(memory, held, cid)
        held.release_soon()
        await memory.async_flush()
        held.assert_all_done()
        assert threading.get_ident() not in held.threads  # never on the loop's thread
        assert_settled(memory, cid, added)
        await memory.async_close()
        memory.store.close()

    async def test_async_summarizer_runs_on_the_loop(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        held = HeldSummarizer()
        memory = background_memory(tmp_path / "m.sqlite3", held.run_async)
        cid = uuid.uuid4().hex
        added = await async_add_while_held(memory, held, cid)
        held.release_soon()
        await memory.async_flush()
        held.assert_all_done()
        assert held.loops == {id(asyncio.get_running_loop())}
        assert held.threads == {threading.get_ident()}
        assert_settled(memory, cid, added)
        await memory.async_close()
        memory.store.close()

    def test_flush_leaves_the_conversation_under_its_threshold(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        # Turns added while a summary is in flight are folded in by the same job afterwards.
        held = HeldSummarizer()
        memory = background_memory(tmp_path / "m.sqlite3", held)
        cid = uuid.uuid4().hex
        added = add_while_held(memory, held, cid)
        held.release.set()
        memory.flush()
        held.assert_all_done()
        kept = memory.get_turns(cid)
        total = memory.get_total_tokens(cid)
        assert total <= THRESHOLD or len(kept) == 1, f"{total} tokens in {len(kept)} turns kept"
        assert_settled(memory, cid, added)
        memory.close()
        memory.store.close()

    def test_close_waits_for_pending_summaries(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        held = HeldSummarizer()
        path = tmp_path / "m.sqlite3"
        manager = MemoryManager(
            store=SQLiteStore(path),
            max_conversation_tokens=BUDGET,
            summarize_threshold=THRESHOLD,
            summarizer=held,
            summarize_in_background=True,
        )
        cid = uuid.uuid4().hex
        added = add_while_held(manager, held, cid)
        held.release_soon()
        manager.close()
        held.assert_all_done()
        manager.store.close()
        # What the summaries committed is in the store for the next host.
        restarted = ConversationMemory(max_tokens=BUDGET, store=SQLiteStore(path))
        assert_settled(restarted, cid, added)
        restarted.store.close()

    async def test_async_close_waits_for_pending_summaries(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        held = HeldSummarizer()
        memory = background_memory(tmp_path / "m.sqlite3", held.run_async)
        cid = uuid.uuid4().hex
        added = await async_add_while_held(memory, held, cid)
        held.release_soon()
        await memory.async_close()
        held.assert_all_done()
        memory.store.close()
        restarted = ConversationMemory(max_tokens=BUDGET, store=SQLiteStore(tmp_path / "m.sqlite3"))
        assert_settled(restarted, cid, added)
        restarted.store.close()


# ============================================================================ bounded cache


class TestBoundedCache:
    """A host touching 20,000 conversations with max_cached_conversations=1000 stops growing."""

    CONVERSATIONS = 20_000
    BOUND = 10 * 2**20
    """Growth allowed from 5,000 to 20,000 conversations: a fifth of what keeping them costs."""

    @pytest.mark.slow
    def test_resident_memory_stops_growing(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        runs = {
            cached: Host(
                {
                    "mode": "cache",
                    "kind": "sqlite",
                    "path": str(tmp_path / f"cache-{cached}.sqlite3"),
                    "max_cached": cached,
                    "conversations": self.CONVERSATIONS,
                    "checkpoints": [5_000, self.CONVERSATIONS],
                },
                impl,
            )
            for cached in (1_000, 100_000)  # the second keeps all: it shows the test can fail
        }
        try:
            results = {cached: host.expect("done") for cached, host in runs.items()}
            for host in runs.values():
                host.finish()
        finally:
            for host in runs.values():
                host.close()
        growth = {
            cached: r["rss"][str(self.CONVERSATIONS)] - r["rss"]["5000"]
            for cached, r in results.items()
        }
        assert growth[1_000] < self.BOUND, f"grew {growth[1_000] / 2**20:.1f} MB"
        assert growth[100_000] > 3 * self.BOUND, f"grew {growth[100_000] / 2**20:.1f} MB"
        for r in results.values():
            # c0 was evicted long ago: it comes back whole, and continues where it was.
            assert r["first_prompts"] == ["question 0"]
            assert r["first_ids"] == [0]
            assert r["again_id"] == 1


# ============================================================================ small fixes


class TestOversizedSummary:
    """A summary larger than the budget is cut to fit, with a warning, not dropped."""

    def test_cut_to_fit(
        self, impl: _backend.Implementation, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        huge = "lorem ipsum dolor " * 5_600  # ~100 KB
        memory = ConversationMemory(
            max_tokens=300,
            summarize_threshold=30,
            summarizer=lambda turns: huge,
            store=SQLiteStore(tmp_path / "m.sqlite3"),
        )
        cid = uuid.uuid4().hex
        with caplog.at_level(logging.WARNING, logger="memlane"):
            for i in range(8):
                memory.add_turn(cid, prompt("t", i), f"answer to {prompt('t', i)}")
        assert memory.get_summary(cid) is not None
        restarted = ConversationMemory(max_tokens=300, store=SQLiteStore(tmp_path / "m.sqlite3"))
        for reader in (memory, restarted):
            history = reader.get_message_history(cid)
            texts = message_texts(history)
            assert texts[0].startswith(SUMMARY_PREFIX + "lorem ipsum"), "summary dropped"
            assert len(texts[0]) < len(SUMMARY_PREFIX + huge)
            assert texts[-2:] == [prompt("t", 7), f"answer to {prompt('t', 7)}"]
            assert reader.get_history_tokens(cid) <= 300
            # Counted independently: what is sent really fits.
            assert sum(TokenEstimator().estimate_many(texts)) <= 300
            reader.store.close()
        assert any(r.name == "memlane" and r.levelno == logging.WARNING for r in caplog.records)


class TestEmptyRawMessages:
    """raw_messages=[] is treated as None: the turn's messages are built from its strings."""

    def test_like_none(self, impl: _backend.Implementation) -> None:
        memory = ConversationMemory()
        with_empty = memory.add_turn("a", "hello there", "general kenobi", raw_messages=[])
        with_none = memory.add_turn("b", "hello there", "general kenobi")
        assert with_empty.token_estimate == with_none.token_estimate > 0
        assert message_texts(with_empty.raw_messages) == ["hello there", "general kenobi"]
        assert message_texts(memory.get_message_history("a")) == ["hello there", "general kenobi"]
        assert memory.get_history_tokens("a") == with_none.token_estimate
        assert memory.get_turns("a")[0].token_estimate == with_none.token_estimate


class TestImportReestimates:
    """An imported turn whose token_estimate is 0 or missing is counted again."""

    def test_zero_and_missing(self, impl: _backend.Implementation) -> None:
        memory = ConversationMemory()
        memory.add_turn("src", "first question", "first answer")
        memory.add_turn("src", "second question", "second answer")
        memory.add_turn("src", "third question", "third answer")
        counted = [t.token_estimate for t in memory.get_turns("src")]
        snapshot = memory.export_conversation("src")
        snapshot["turns"][0]["token_estimate"] = 0
        del snapshot["turns"][1]["token_estimate"]
        memory.import_conversation(snapshot, conversation_id="copy")
        assert [t.token_estimate for t in memory.get_turns("copy")] == counted
        assert all(n > 0 for n in counted)
        assert memory.get_total_tokens("copy") == memory.get_total_tokens("src") == sum(counted)
