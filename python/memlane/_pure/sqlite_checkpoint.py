"""Checkpoints a store's write-ahead log on a thread of its own (twin of
``rust/src/store/sqlite_checkpoint.rs``).

SQLite's automatic checkpoint runs inside the commit that pushes the WAL past its threshold, so
one caller in every ~170 turns copies ~1,000 pages into the database and waits for its
``fdatasync``: about a third of a committed turn's cost, averaged. Here a second connection
runs a ``PASSIVE`` checkpoint on a thread after every :data:`COMMITS_PER_CHECKPOINT` committed
writes (about as often as SQLite would) while the writer goes on (WAL lets a checkpoint and a
writer run at once). The copy is the same work: where a core is idle it leaves the writer's time;
where every core is busy it costs what it did.

Durability is SQLite's, unchanged: the thread only decides who pays for the copy. The writer
keeps an automatic checkpoint as a backstop (:data:`BACKSTOP_PAGES`), so the WAL stays bounded
if the thread falls behind or a checkpoint fails (it is tried again at the next signal).
:meth:`Checkpointer.stop` closes the thread's connection before the writer's closes, so the
writer's close is still the last one and folds the WAL back into the file as before.
"""

from __future__ import annotations

import sqlite3
import threading

COMMITS_PER_CHECKPOINT = 160
"""Committed write transactions between two signals: a turn's commit writes ~6 pages, so ~1,000
pages of WAL, SQLite's own threshold. Checkpointing more often copies the pages every commit
rewrites (the tree's inner pages, page 1) more often: more work in all, which a machine with no
idle core pays back in the writer's time."""

PASSES = 3
"""Passes of one checkpoint: the frames the writer appended while a pass copied are copied by the
next. Only a log copied to its end lets the writer's next transaction start the log over;
otherwise it grows to the backstop, whose checkpoint then runs in the writer."""

BACKSTOP_PAGES = 4000
"""The writer's own ``wal_autocheckpoint`` while a thread checkpoints."""


class Checkpointer:
    """The checkpointing thread of one writable connection (see :func:`start`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._commits = 0
        self._signal = threading.Condition()
        self._pending = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="memlane-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                with self._signal:
                    while not self._pending and not self._stopping:
                        self._signal.wait()
                    if not self._pending:
                        return
                    self._pending = False
                for _ in range(PASSES):
                    try:
                        _, log, copied = self._conn.execute(
                            "PRAGMA wal_checkpoint(PASSIVE)"
                        ).fetchone()
                    except sqlite3.Error:
                        # Retried at the next signal; the writer's backstop bounds the WAL
                        # meanwhile.
                        break
                    if copied >= log:
                        break
        finally:
            self._conn.close()

    def committed(self) -> None:
        """Counts one committed write transaction, signalling the thread every
        :data:`COMMITS_PER_CHECKPOINT`. Never blocks on a checkpoint in progress."""
        self._commits += 1
        if self._commits % COMMITS_PER_CHECKPOINT == 0:
            with self._signal:
                self._pending = True
                self._signal.notify()

    def stop(self) -> None:
        """Ends the thread (after the checkpoint signalled last) and closes its connection;
        stopping again does nothing."""
        with self._signal:
            self._stopping = True
            self._signal.notify()
        # The collector can finalize a table on its own checkpoint thread, which then ends by
        # itself when its loop sees the flag.
        if threading.current_thread() is not self._thread:
            self._thread.join()


def start(path: str, writer: sqlite3.Connection) -> Checkpointer | None:
    """The checkpointing thread for ``writer``'s file at ``path``, with ``writer``'s automatic
    checkpoint set to the backstop; ``None`` (the writer checkpointing as before) for
    ``:memory:`` or when the second connection cannot be opened."""
    if path == ":memory:":
        return None
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA synchronous=NORMAL")
        writer.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
    except sqlite3.Error:
        conn.close()
        return None
    try:
        return Checkpointer(conn)
    except RuntimeError:
        # No thread to be had: the writer checkpoints inline again, at SQLite's default.
        conn.close()
        writer.execute("PRAGMA wal_autocheckpoint=1000")
        return None
