"""Group commit: writers waiting at one moment share one transaction, each acknowledged only
after it, each judged exactly as alone; a lone writer never waits."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from memlane import ConversationMemory, SQLiteStore
from memlane._backend import Implementation
from memlane.stores._group_commit import GroupCommit
from memlane.stores.protocol import entry_to_row, next_version
from memlane.types import MemoryEntry, MemoryScope
from worker_processes import STEP_TIMEOUT, release, started

WRITERS = 8


def _wait_until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class TestGroupCommit:
    """The queue: who leads, what shares a transaction, whose error is whose."""

    def test_a_lone_write_commits_at_once_by_itself(self) -> None:
        calls: list[object] = []

        def one(a: int) -> int:
            calls.append(("one", a))
            return a * 2

        def many(batch: Sequence[int]) -> list[int]:
            calls.append(("many", list(batch)))
            return [a * 2 for a in batch]

        group: GroupCommit[int, int] = GroupCommit(one, many)
        assert [group.submit(i) for i in range(3)] == [0, 2, 4]
        assert calls == [("one", 0), ("one", 1), ("one", 2)]
        assert (group.batches, group.writes) == (3, 3)

    def test_writes_queued_during_a_commit_share_the_next_one(self) -> None:
        release = threading.Event()
        calls: list[tuple[str, list[int]]] = []

        def one(a: int) -> int:
            calls.append(("one", [a]))
            if a == 0:
                release.wait(30)
            return a * 10

        def many(batch: Sequence[int]) -> list[int]:
            calls.append(("many", list(batch)))
            return [a * 10 for a in batch]

        group: GroupCommit[int, int] = GroupCommit(one, many)
        results: dict[int, int] = {}
        first = threading.Thread(target=lambda: results.__setitem__(0, group.submit(0)))
        first.start()
        _wait_until(lambda: calls)  # the first write is committing
        others = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, group.submit(i)))
            for i in range(1, WRITERS)
        ]
        for t in others:
            t.start()
        _wait_until(lambda: len(group._queue) == WRITERS - 1)
        assert len(results) == 0  # nobody is acknowledged before their commit
        release.set()
        for t in [first, *others]:
            t.join(30)
        assert results == {i: i * 10 for i in range(WRITERS)}
        assert calls[0] == ("one", [0])
        assert calls[1][0] == "many"
        assert sorted(calls[1][1]) == list(range(1, WRITERS))
        assert (group.batches, group.writes) == (2, WRITERS)

    def test_an_error_goes_to_the_write_that_caused_it(self) -> None:
        release = threading.Event()

        def one(a: int) -> int:
            if a == 0:
                release.wait(30)
            if a == 3:
                raise ValueError("write 3 is refused")
            return a

        def many(batch: Sequence[int]) -> list[int]:
            if 3 in batch:
                raise ValueError("write 3 is refused")
            return list(batch)

        group: GroupCommit[int, int] = GroupCommit(one, many)
        outcomes: dict[int, object] = {}

        def submit(i: int) -> None:
            try:
                outcomes[i] = group.submit(i)
            except ValueError as exc:
                outcomes[i] = str(exc)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(5)]
        threads[0].start()
        _wait_until(lambda: group._busy)
        for t in threads[1:]:
            t.start()
        _wait_until(lambda: len(group._queue) == 4)
        release.set()
        for t in threads:
            t.join(30)
        assert outcomes == {0: 0, 1: 1, 2: 2, 3: "write 3 is refused", 4: 4}
        assert not group._busy


def _turn_entry(key: str, text: str) -> MemoryEntry:
    return MemoryEntry(scope=MemoryScope.CONVERSATION, key=key, content={"text": text})


class TestSaveIfMany:
    """The table's batch: the results and the rows of the same save_ifs run one by one."""

    def test_batch_agrees_with_one_by_one(self, impl: Implementation, tmp_path: Path) -> None:
        rng = random.Random(28)
        batch_table = impl.SqliteTable(str(tmp_path / "batch.sqlite3"))
        serial_table = impl.SqliteTable(str(tmp_path / "serial.sqlite3"))
        try:
            for round_ in range(20):
                ops = []
                for i in range(rng.randrange(1, 12)):
                    key = f"k{rng.randrange(4)}"
                    expected = rng.choice([None, 1, 2, 3])
                    entry = _turn_entry(key, f"{round_}-{i}")
                    row = entry_to_row(entry, next_version(expected))
                    ops.append((f"ns{rng.randrange(2)}", row, expected, time.time()))
                won = batch_table.save_if_many(ops)
                assert won == [serial_table.save_if(*op) for op in ops]
                for ns in ("ns0", "ns1"):
                    assert batch_table.load(ns, time.time()) == serial_table.load(ns, time.time())
        finally:
            batch_table.close()
            serial_table.close()

    def test_a_failing_write_leaves_the_whole_batch_unwritten(
        self, impl: Implementation, tmp_path: Path
    ) -> None:
        table = impl.SqliteTable(str(tmp_path / "t.sqlite3"))
        try:
            good = entry_to_row(_turn_entry("a", "kept?"), next_version(None))
            # importance outside [0, 1] breaks the table's CHECK constraint.
            bad = (*entry_to_row(_turn_entry("b", "refused"), next_version(None))[:7], 2.0, 1)
            with pytest.raises(Exception, match="CHECK"):
                table.save_if_many(
                    [("ns", good, None, time.time()), ("ns", bad, None, time.time())]
                )
            assert table.load("ns", time.time()) == []
        finally:
            table.close()


class TestSQLiteStoreGroupCommit:
    """Threads writing turns through one SQLiteStore: all kept, in order, each visible to
    another connection as soon as its add_turn returned."""

    def test_threads_share_commits_and_lose_nothing(
        self, impl: Implementation, tmp_path: Path
    ) -> None:
        path = str(tmp_path / "writers.sqlite3")
        store = SQLiteStore(path)
        observer = SQLiteStore(path)
        memory = ConversationMemory(max_tokens=4000, store=store)
        cids = [memory.new_conversation() for _ in range(WRITERS)]
        turns = 25
        unseen: list[str] = []
        start = threading.Barrier(WRITERS)

        def write(w: int) -> None:
            start.wait()
            for t in range(turns):
                turn = memory.add_turn(cids[w], f"prompt {w}.{t}", f"answer {w}.{t}")
                # Acknowledged only after its commit: another connection sees it now.
                key = memory.namespace(cids[w])
                if not any(
                    e.content.get("user_prompt") == f"prompt {w}.{t}"
                    for e in observer.load(key)
                    if isinstance(e.content, dict)
                ):
                    unseen.append(f"{w}.{t} (turn {turn.turn_id})")

        threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        try:
            assert unseen == []
            fresh = ConversationMemory(max_tokens=4000, store=observer)
            for w, cid in enumerate(cids):
                kept = fresh.get_turns(cid)
                assert [t.user_prompt for t in kept] == [f"prompt {w}.{t}" for t in range(turns)]
            group = store._group
            assert group.writes >= WRITERS * turns
            assert group.batches <= group.writes
        finally:
            memory.close()
            observer.close()


WORKER = r"""
import json, sys, threading
cfg = json.loads(sys.argv[1])
from memlane import ConversationMemory, SQLiteStore
store = SQLiteStore(cfg["path"])
memory = ConversationMemory(max_tokens=4000, store=store)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
def write(cid, tag):
    for t in range(cfg["turns"]):
        memory.add_turn(cid, f"{tag} {t}", "ok")
threads = [threading.Thread(target=write, args=(cid, f"{cfg['name']}/{i}"))
           for i, cid in enumerate(cfg["cids"])]
for t in threads:
    t.start()
for t in threads:
    t.join()
memory.close()
print("done", flush=True)
"""


class TestGroupCommitAcrossProcesses:
    """Two processes, four writer threads each, every conversation written by one thread of
    each: every turn of every writer is kept exactly once, each writer's in its order."""

    def test_two_processes_of_writers_share_one_file(self, tmp_path: Path) -> None:
        path = str(tmp_path / "shared.sqlite3")
        SQLiteStore(path).close()
        cids = ["c-1", "c-2", "c-3", "c-4"]
        turns = 15
        cfgs = [{"path": path, "cids": cids, "turns": turns, "name": name} for name in ("p1", "p2")]
        with started(WORKER, cfgs) as procs:
            release(procs)
            for proc in procs:
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "done"
                assert proc.wait(STEP_TIMEOUT) == 0
        store = SQLiteStore(path)
        try:
            memory = ConversationMemory(max_tokens=10**9, store=store)
            for i, cid in enumerate(cids):
                prompts = [t.user_prompt for t in memory.get_turns(cid)]
                assert [t.turn_id for t in memory.get_turns(cid)] == list(range(len(prompts)))
                for name in ("p1", "p2"):
                    mine = [p for p in prompts if p.startswith(f"{name}/{i} ")]
                    assert mine == [f"{name}/{i} {t}" for t in range(turns)]
                assert len(prompts) == 2 * turns
        finally:
            store.close()
