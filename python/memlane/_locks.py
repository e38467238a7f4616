"""One lock for threads and event-loop tasks alike.

A web host calls memlane from sync routes (threads) and async routes (tasks on one or more
event loops) at once. A ``threading.Lock`` would block an event loop while it waits, and an
``asyncio.Lock`` excludes only tasks of its own loop, so each alone lets the other kind of
caller interleave. :class:`HybridLock` is a FIFO lock that a thread waits for by blocking
and a task waits for by awaiting a future, so both kinds of caller are serialised together.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class _Waiter:
    """A caller queued for the lock: a blocked thread (``event``) or a task (``future``)."""

    __slots__ = ("event", "future", "loop")

    def __init__(
        self,
        event: threading.Event | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self.event = event
        self.loop = loop
        self.future = future


class HybridLock:
    """A non-reentrant FIFO lock: ``with lock:`` in threads, ``async with lock:`` in tasks.

    Release hands the lock straight to the first waiter, so a stream of new callers cannot
    starve one that is queued.
    """

    __slots__ = ("_mutex", "_owner_loop", "_token", "_waiters")

    def __init__(self) -> None:
        # Held by the owner. It is freed only when nobody waits (otherwise release hands it
        # over still held), so an uncontended acquire is one non-blocking try, and a caller
        # can never take it ahead of a queued waiter.
        self._token = threading.Lock()
        self._mutex = threading.Lock()  # guards the queue, never held while waiting
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._waiters: deque[_Waiter] = deque()

    def acquire(self) -> None:
        """Blocks the calling thread until it holds the lock.

        Raises:
            RuntimeError: Called on an event loop's thread while a task of that loop holds
                the lock: waiting would stop the loop that must release it.
        """
        if self._token.acquire(blocking=False):
            self._owner_loop = None
            return
        with self._mutex:
            if self._token.acquire(blocking=False):  # released while we took the mutex
                self._owner_loop = None
                return
            loop = running_loop()
            if loop is not None and (
                loop is self._owner_loop or any(w.loop is loop for w in self._waiters)
            ):
                raise RuntimeError(
                    "a sync memlane call inside a running event loop would wait for a task of "
                    "that loop; use the async_* method instead"
                )
            waiter = _Waiter(event=threading.Event())
            self._waiters.append(waiter)
        assert waiter.event is not None
        waiter.event.wait()

    async def async_acquire(self) -> None:
        """Waits, without blocking the event loop, until the calling task holds the lock."""
        loop = asyncio.get_running_loop()
        if self._token.acquire(blocking=False):
            self._owner_loop = loop
            return
        with self._mutex:
            if self._token.acquire(blocking=False):
                self._owner_loop = loop
                return
            waiter = _Waiter(loop=loop, future=loop.create_future())
            self._waiters.append(waiter)
        assert waiter.future is not None
        try:
            await waiter.future
        except asyncio.CancelledError:
            with self._mutex:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    raise
            # The lock was handed to us as we were cancelled. If the hand-over already
            # completed we own it and pass it on; otherwise _wake sees the cancelled future
            # and passes it on itself.
            if waiter.future.done() and not waiter.future.cancelled():
                self.release()
            raise

    def release(self, *_exc_info: object) -> None:
        """Releases the lock, handing it to the first waiter if there is one."""
        mutex = self._mutex
        mutex.acquire()  # not `with`: this runs on every conversation call
        if not self._waiters:
            self._token.release()
            mutex.release()
            return
        waiter = self._waiters.popleft()
        self._owner_loop = waiter.loop
        mutex.release()
        if waiter.event is not None:
            waiter.event.set()
            return
        assert waiter.loop is not None
        try:
            waiter.loop.call_soon_threadsafe(self._wake, waiter)
        except RuntimeError:  # the waiter's loop has closed: nobody will take the lock there
            self.release()

    def _wake(self, waiter: _Waiter) -> None:
        assert waiter.future is not None
        if waiter.future.done():  # its task was cancelled while the lock was on its way
            self.release()
        else:
            waiter.future.set_result(None)

    # Aliases rather than wrappers: every conversation call passes through them.
    __enter__ = acquire
    __exit__ = release

    async def __aenter__(self) -> None:
        await self.async_acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class LockTable:
    """One :class:`HybridLock` per key, created on first use and kept.

    A lock is a few dozen bytes beside the conversation state it guards; keeping it avoids a
    race in which a dropped lock is recreated while a waiter still queues on the old one.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, HybridLock] = {}

    def __getitem__(self, key: str) -> HybridLock:
        lock = self._locks.get(key)
        if lock is None:
            with self._guard:
                lock = self._locks.setdefault(key, HybridLock())
        return lock
