"""Group commit: the conditional writes waiting at one moment share one transaction.

A SQLite file takes one writer at a time, and most of a small write's cost is the
transaction around it (taking the lock, the commit's WAL frames). When several threads of one
process write at once, the one that finds the table free becomes the leader: it commits its
own write together with every write queued while the previous transaction ran, then hands the
lead to the first write queued during its own. Each caller returns only after the transaction
holding its write has committed, with that write's own result. A lone writer finds the table
free and commits at once: nothing waits.

Within a transaction the writes run in the order they were queued, each judged on the state
the ones before it left, so the outcome is the one some serial order of the calls gives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, cast

A = TypeVar("A")
R = TypeVar("R")

__all__ = ["GroupCommit"]


class _Waiter(Generic[A, R]):
    """One caller's write, its outcome, and how it learns of it."""

    __slots__ = ("args", "done", "error", "leads", "result")

    def __init__(self, args: A) -> None:
        self.args = args
        # Made only for a write that waits: a lone writer never needs one.
        self.done: threading.Event | None = None
        self.result: R | None = None
        self.error: BaseException | None = None
        self.leads = False


class GroupCommit(Generic[A, R]):
    """Runs ``one(args)`` for a lone write and ``many([args, ...])`` for several at once.

    Args:
        one: Commits one write in its own transaction; returns its result.
        many: Commits several writes, in order, in one transaction; returns their results in
            order. If it raises, nothing of the batch was written: each write then runs alone
            through ``one``, so an error reaches the caller whose write caused it.
    """

    __slots__ = ("_busy", "_lock", "_many", "_one", "_queue", "batches", "writes")

    def __init__(self, one: Callable[[A], R], many: Callable[[Sequence[A]], Sequence[R]]) -> None:
        self._one, self._many = one, many
        self._lock = threading.Lock()
        self._queue: list[_Waiter[A, R]] = []
        self._busy = False
        self.batches = 0
        """Transactions committed (a lone write is one); with :attr:`writes`, what grouping saved."""
        self.writes = 0
        """Writes committed."""

    def submit(self, args: A) -> R:
        """Commits ``args``' write, alone or with the others waiting; returns its result once
        the transaction holding it has committed.

        Raises:
            BaseException: What committing this write raised (not another caller's error).
        """
        me: _Waiter[A, R] = _Waiter(args)
        with self._lock:
            if self._busy:
                me.done = threading.Event()
                self._queue.append(me)
            else:
                self._busy = me.leads = True
        if me.done is not None:
            me.done.wait()
        if me.leads:
            self._lead(me)
        if me.error is not None:
            raise me.error
        return cast(R, me.result)  # set by the commit that held the write

    def _lead(self, me: _Waiter[A, R]) -> None:
        with self._lock:
            batch = [me, *self._queue]
            self._queue.clear()
        try:
            self._commit(batch)
        finally:
            with self._lock:
                if self._queue:
                    # The first write queued during this transaction leads the next one.
                    follower = self._queue.pop(0)
                    follower.leads = True
                    assert follower.done is not None  # every queued write has one
                    follower.done.set()
                else:
                    self._busy = False
            for waiter in batch[1:]:
                assert waiter.done is not None
                waiter.done.set()

    def _commit(self, batch: list[_Waiter[A, R]]) -> None:
        if len(batch) > 1 and self._commit_together(batch):
            return
        for waiter in batch:
            try:
                waiter.result = self._one(waiter.args)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller it belongs to
                waiter.error = exc
            else:
                self.batches += 1
                self.writes += 1

    def _commit_together(self, batch: list[_Waiter[A, R]]) -> bool:
        """One transaction for the batch; ``False`` if it failed and wrote nothing."""
        try:
            results = self._many([w.args for w in batch])
        except Exception:  # noqa: BLE001 - nothing was written: each write runs alone instead
            return False
        for waiter, result in zip(batch, results, strict=True):
            waiter.result = result
        self.batches += 1
        self.writes += len(batch)
        return True
