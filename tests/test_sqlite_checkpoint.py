"""A SQLite store's write-ahead log is checkpointed by a thread of its own, not inside a commit.

SQLite's automatic checkpoint copies ~1,000 pages into the file (and waits for their sync)
inside whichever commit crosses its threshold; the store's own thread does it instead, after
every 160 committed writes, on a second connection. What must hold: the writes are the same and
as durable (every acknowledged write survives ``kill -9``), processes sharing a file all keep
it whole, closing stops the thread and still folds the log into the file, and a table that
cannot write (read-only, ``:memory:``) starts none.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memlane import _backend
from memlane._pure.sqlite_checkpoint import COMMITS_PER_CHECKPOINT
from memlane._pure.store import Row
from memlane.stores import SQLiteStore
from worker_processes import backends, either_backend_env, release_together, started

# A turn's row is ~3 KB: about one page of the log per commit, besides its indexes.
TEXT = json.dumps({"text": "word " * 600})


def row(i: int) -> Row:
    return (
        f"e{i:05d}",
        "working",
        f"k{i:05d}",
        TEXT,
        "{}",
        "2026-01-01T00:00:00+00:00",
        None,
        0.5,
        1,
    )


def checkpoint_threads() -> int:
    """The threads alive in this process that are not idle Python threads of other tests: the
    OS threads Python did not start (the Rust table's), and the twin's by their name."""
    tasks = len(os.listdir("/proc/self/task"))
    python = threading.enumerate()
    named = sum(t.name == "memlane-checkpoint" for t in python)
    return tasks - len(python) + named


class TestTheThreadCheckpoints:
    """Every 160th committed write has the store's thread copy the log into the file."""

    @pytest.mark.parametrize("commits", [COMMITS_PER_CHECKPOINT - 1, COMMITS_PER_CHECKPOINT])
    def test_only_a_full_count_copies(
        self, impl: _backend.Implementation, tmp_path: Path, commits: int
    ) -> None:
        """159 commits leave the file as it was; the 160th has the thread copy them into it. A
        read-only table keeps the file open, so the writer's close does not checkpoint, and
        ~800 pages of log are below any automatic threshold: only the thread copies."""
        path = tmp_path / "s.sqlite3"
        table = impl.SqliteTable(str(path))
        holder = impl.SqliteTable(str(path), read_only=True)
        before = path.stat().st_size
        for i in range(commits):
            assert table.save_if("ns", row(i), None, 0.0)
        table.close()  # waits for the checkpoint signalled last
        grown = path.stat().st_size - before
        if commits < COMMITS_PER_CHECKPOINT:
            assert grown == 0
        else:
            assert grown >= commits * 4096
        assert [r[0] for r in holder.load("ns", 0.0)] == [f"e{i:05d}" for i in range(commits)]
        holder.close()

    def test_every_kind_of_write_counts(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        """save, save_many, save_if_many, deletes and clears are committed writes too."""
        path = tmp_path / "s.sqlite3"
        table = impl.SqliteTable(str(path))
        holder = impl.SqliteTable(str(path), read_only=True)
        before = path.stat().st_size
        writes: list[Callable[[int], object]] = [
            lambda i: table.save("ns", row(i)),
            lambda i: table.save_many("ns", [row(i)]),
            lambda i: table.save_if_many([("ns", row(i), None, 0.0)]),
            lambda i: table.delete("ns", f"e{i - 3:05d}"),
            lambda i: table.delete_many("ns", [f"e{i - 3:05d}"]),
            lambda i: table.clear("other"),
            lambda i: table.cleanup_expired(0.0),
        ]
        for i in range(COMMITS_PER_CHECKPOINT):
            writes[i % len(writes)](i)
        table.close()
        assert path.stat().st_size > before
        holder.close()


class TestTheThreadsLife:
    """A writable file table owns one thread from open to close; others own none."""

    def test_close_stops_it_and_folds_the_log_in(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        start = checkpoint_threads()
        path = tmp_path / "s.sqlite3"
        table = impl.SqliteTable(str(path))
        assert checkpoint_threads() == start + 1
        for i in range(COMMITS_PER_CHECKPOINT * 2 + 5):
            table.save("ns", row(i))
        table.close()
        table.close()
        assert checkpoint_threads() == start
        # The writer's close was the last: the log is folded into the file and removed.
        assert not Path(f"{path}-wal").exists()
        again = impl.SqliteTable(str(path), read_only=True)
        assert len(again.load("ns", 0.0)) == COMMITS_PER_CHECKPOINT * 2 + 5
        again.close()

    def test_an_unclosed_table_stops_it_when_dropped(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        start = checkpoint_threads()
        table = impl.SqliteTable(str(tmp_path / "s.sqlite3"))
        table.save("ns", row(0))
        assert checkpoint_threads() == start + 1
        del table
        gc.collect()
        assert checkpoint_threads() == start

    def test_read_only_and_in_memory_tables_have_none(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "s.sqlite3"
        impl.SqliteTable(str(path)).close()
        start = checkpoint_threads()
        tables = [impl.SqliteTable(str(path), read_only=True), impl.SqliteTable(":memory:")]
        for i in range(COMMITS_PER_CHECKPOINT):
            tables[1].save("ns", row(i))
        assert checkpoint_threads() == start
        for table in tables:
            table.close()

    def test_without_a_thread_the_writer_checkpoints_itself(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A process that can start no more threads still opens the store: the twin's writer
        keeps SQLite's own automatic checkpoint (the Rust table falls back alike)."""

        def refuse(_thread: threading.Thread) -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", refuse)
        table = _backend.PYTHON.SqliteTable(str(tmp_path / "s.sqlite3"))
        monkeypatch.undo()
        assert table._checkpointer is None
        assert table._open().execute("PRAGMA wal_autocheckpoint").fetchone() == (1000,)
        table.save("ns", row(0))
        assert [r[0] for r in table.load("ns", 0.0)] == ["e00000"]
        table.close()


_WRITER = """
import json, os, sys
cfg = json.loads(sys.argv[1])
if cfg["backend"] == "python":
    os.environ["MEMLANE_PURE_PYTHON"] = "1"
from memlane.stores import SQLiteStore
from memlane.types import MemoryEntry, MemoryScope
text = "word " * 600
print("ready", flush=True)
sys.stdin.readline()
store = SQLiteStore(cfg["path"])
for i in range(cfg["count"]):
    entry = MemoryEntry(
        entry_id=f"{cfg['name']}-{i}", scope=MemoryScope.WORKING, key=f"k{i:05d}",
        content={"text": text},
    )
    assert store.save_if(cfg["name"], entry, None)
    if cfg["acks"]:
        print(json.dumps(i), flush=True)
store.close()
print(json.dumps("done"))
"""


class TestProcessesShareTheFile:
    """Processes writing one file, each store with its own checkpoint thread, keep it whole."""

    @pytest.mark.twins
    def test_three_writers_lose_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "shared.sqlite3"
        SQLiteStore(path).close()
        kinds = backends()
        cfgs = [
            {
                "path": str(path),
                "name": f"w{i}",
                "count": 300,
                "acks": False,
                "backend": kinds[i % len(kinds)],
            }
            for i in range(3)
        ]
        with started(_WRITER, cfgs, env=either_backend_env()) as procs:
            assert release_together(procs) == ["done"] * 3
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
        with SQLiteStore(path, read_only=True) as reader:
            for cfg in cfgs:
                ids = [e.entry_id for e in reader.load(str(cfg["name"]))]
                assert ids == [f"{cfg['name']}-{i}" for i in range(300)]

    @pytest.mark.twins
    @pytest.mark.parametrize("backend_name", backends())
    def test_every_acknowledged_write_survives_kill_9(
        self, tmp_path: Path, backend_name: str
    ) -> None:
        """A writer killed mid-stream (its checkpoint thread perhaps mid-copy) loses no write it
        acknowledged, and leaves a file that opens whole."""
        path = tmp_path / "killed.sqlite3"
        cfg = {"path": str(path), "name": "w", "count": 100_000, "acks": True}
        cfg["backend"] = backend_name
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=either_backend_env(),
        )
        try:
            assert proc.stdin is not None
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            acknowledged = -1
            # Past several checkpoints (one per 160 writes), then killed between two writes.
            while acknowledged < COMMITS_PER_CHECKPOINT * 5 + 17:
                acknowledged = json.loads(proc.stdout.readline())
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        with SQLiteStore(path) as store:
            ids = [e.entry_id for e in store.load("w")]
        assert ids[: acknowledged + 1] == [f"w-{i}" for i in range(acknowledged + 1)]
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
