"""One lock for threads and event-loop tasks alike.

A web host calls memlane from sync routes (threads) and async routes (tasks on one or more
event loops) at once. A ``threading.Lock`` would block an event loop while it waits, and an
``asyncio.Lock`` excludes only tasks of its own loop, so each alone lets the other kind of
caller interleave. :class:`HybridLock` is a lock that a thread waits for by blocking and a
task waits for by awaiting a future, so both kinds of caller are serialised together.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

_RETRY_SECONDS = 0.05


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
    """A non-reentrant lock: ``with lock:`` in threads, ``async with lock:`` in tasks.

    Ownership is a plain ``threading.Lock`` (the *token*) taken without blocking, so the
    uncontended path is one try to acquire and one release: every conversation call passes
    through it. A caller that finds the token taken queues a waiter, then tries again; release
    frees the token and wakes the first waiter, which tries again in turn. Because a waiter
    enqueues *before* its last try and release frees the token *before* it looks at the
    queue, either the releaser sees the waiter or the waiter sees the free token: no wake-up
    is lost.
    """

    __slots__ = ("_mutex", "_owner_loop", "_token", "_waiters")

    def __init__(self) -> None:
        self._token = threading.Lock()
        self._mutex = threading.Lock()  # guards the queue, never held while waiting
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._waiters: deque[_Waiter] = deque()

    def try_acquire(self) -> bool:
        """Takes the lock if it is free, without waiting; whether it did."""
        if self._token.acquire(blocking=False):
            self._owner_loop = None
            return True
        return False

    def acquire(self) -> None:
        """Blocks the calling thread until it holds the lock.

        Raises:
            RuntimeError: Called on an event loop's thread while a task of that loop holds
                the lock: waiting would stop the loop that must release it.
        """
        if self._token.acquire(blocking=False):
            self._owner_loop = None
            return
        loop = running_loop()
        if loop is not None and loop is self._owner_loop:
            raise RuntimeError(
                "a sync memlane call inside a running event loop would wait for a task of "
                "that loop; use the async_* method instead"
            )
        waiter = _Waiter(event=threading.Event())
        event = waiter.event
        assert event is not None
        with self._mutex:
            self._waiters.append(waiter)
        try:
            # The timeout is a safety net, not the mechanism: a wake-up can go to a task whose
            # loop this very thread is blocking, and then only a retry finds the free token.
            while not self._token.acquire(blocking=False):
                event.wait(_RETRY_SECONDS)
                event.clear()
        finally:
            self._leave(waiter)
        self._owner_loop = None

    async def async_acquire(self) -> None:
        """Waits, without blocking the event loop, until the calling task holds the lock."""
        loop = asyncio.get_running_loop()
        if self._token.acquire(blocking=False):
            self._owner_loop = loop
            return
        waiter = _Waiter(loop=loop, future=loop.create_future())
        with self._mutex:
            self._waiters.append(waiter)
        try:
            while not self._token.acquire(blocking=False):
                assert waiter.future is not None
                await waiter.future
                waiter.future = loop.create_future()
        finally:
            self._leave(waiter)
        self._owner_loop = loop

    def _leave(self, waiter: _Waiter) -> None:
        """Dequeues ``waiter``; if it leaves without the lock, the wake-up it got passes on."""
        with self._mutex:
            self._waiters.remove(waiter)
        if not self._token.locked():  # cancelled, or failed, after a release woke it
            self._wake_first()

    def release(self, *_exc_info: object) -> None:
        """Releases the lock and wakes the first waiter, if any."""
        self._owner_loop = None
        self._token.release()
        if self._waiters:
            self._wake_first()

    def _wake_first(self) -> None:
        with self._mutex:
            if not self._waiters:
                return
            waiter = self._waiters[0]
        if waiter.event is not None:
            waiter.event.set()
            return
        assert waiter.loop is not None
        try:
            waiter.loop.call_soon_threadsafe(_wake, waiter)
        except RuntimeError:  # its loop has closed; the waiter can never take the lock
            with self._mutex:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            self._wake_first()

    def idle(self) -> bool:
        """Whether nobody holds the lock or waits for it (a table may then drop it)."""
        return not self._token.locked() and not self._waiters

    # Aliases rather than wrappers: every conversation call passes through them.
    __enter__ = acquire
    __exit__ = release

    async def __aenter__(self) -> None:
        await self.async_acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


def _wake(waiter: _Waiter) -> None:
    # Runs on the waiter's loop, so it cannot race the task replacing its future.
    if waiter.future is not None and not waiter.future.done():
        waiter.future.set_result(None)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or ``None``."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class LockTable(dict[str, HybridLock]):
    """One :class:`HybridLock` per key, created on first use.

    A ``dict`` subclass, so finding an existing lock is a plain dictionary lookup. A table
    that drops idle locks (a host's bounded cache does) lets a caller holding a dropped lock
    race one holding its replacement: such callers take the lock, then check that the table
    still holds that very lock (``ConversationCache.locked``).
    """

    def __missing__(self, key: str) -> HybridLock:
        # setdefault is atomic: two threads creating the same key's lock get one lock.
        return self.setdefault(key, HybridLock())
