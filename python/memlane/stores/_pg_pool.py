"""PostgreSQLStore's connections: an asyncpg pool whose statements skip its checkout.

asyncpg's ``Pool.fetch`` acquires a connection and releases it for every statement: a
proxy, a future, a shielded release task, ~50 us a statement on a 2-core machine, as much as
a small statement's whole round trip. A store sends one statement at a time per task and
keeps nothing in a session between them (see :func:`~memlane.stores._pg_sql.keep_session`),
so a connection it finished with can serve its next statement directly. :class:`HeldPool`
keeps those connections checked out of the pool, on a stack of idle ones (the most recently
used first, whose buffers are warm), and goes to the pool only when none is idle. The pool
still bounds how many connections exist and still opens them.

Rules that keep it safe:

- A connection goes back on the stack only after its statement succeeded. After any
  failure, cancellation included, it is released to the pool, which waits out a pending
  cancellation, rolls back and closes a broken connection, as for any other caller.
- A task waiting for the pool (every connection busy) is never left waiting while another
  task holds an idle one: a connection finished while someone waits goes back to the pool,
  which hands it over.
- :meth:`recover` (after a dropped connection) releases the idle connections to the pool
  with its generation bumped, so none from before the failure is used again; a busy one is
  released when it finishes.
- A connection the server dropped while it sat idle is skipped: asyncpg has already given
  it back to the pool.
- :meth:`close` releases every idle connection before closing the pool, which then waits for
  the busy ones as it always has.

Every statement is bounded by the store's ``timeout``, but not by asyncpg's own timer: asyncpg
arms one (``loop.call_later``) for each statement and cancels it when the answer comes, ~6 us
of CPU a statement, two a conversation turn. One watchdog timer per pool bounds them all
instead. A statement notes its deadline and its task, which costs a dict entry; the timer is
armed only when none is, for the earliest deadline, and when it fires it cancels each
statement past its deadline (the task's cancellation is what asyncpg turns into a cancel
request to the server, as its own timer does) and re-arms itself for the next deadline, if a
statement is still running. A statement so cancelled raises ``TimeoutError``, as asyncpg's
timer raises it, and its connection goes back to the pool, which waits (within ``timeout``)
for the server to confirm the cancellation, or discards the connection. Connections handed
out by :meth:`HeldPool.acquire` (migrations, transactions) keep asyncpg's timer: see
:func:`bounded_connection_class`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable
from typing import Any

__all__ = ["HeldPool", "bounded_connection_class"]

_METHODS = ("execute", "executemany", "fetch", "fetchrow", "fetchval")


@functools.cache
def bounded_connection_class(connection: type[Any], timeout: float) -> type[Any]:
    """A subclass of asyncpg's ``Connection`` for a pool made with ``command_timeout=None``:
    its statements are bounded by ``timeout`` unless :meth:`watched` runs them.

    Every statement asyncpg or a caller runs (a transaction's ``BEGIN`` and ``COMMIT``, a
    migration's DDL, the pool's rollback) gets asyncpg's timer for ``timeout`` as the pool's
    ``command_timeout`` would give it. Only :class:`HeldPool`'s own statements, which its
    watchdog bounds, go without.

    Args:
        connection: ``asyncpg.Connection`` (the driver is imported by the store).
        timeout: Seconds allowed for each statement.
    """

    # Methods are looked up on each call, not when the class is made: whatever wraps
    # asyncpg's (a test counting statements) sees every statement.
    def bounded(name: str) -> Any:
        def method(self: Any, *args: Any, timeout: float | None = None, **kw: Any) -> Any:
            bound = self.statement_timeout if timeout is None else timeout
            return getattr(connection, name)(self, *args, timeout=bound, **kw)

        method.__name__ = name
        return method

    def watched(self: Any, method: str, query: str, args: tuple[Any, ...]) -> Awaitable[Any]:
        """``method`` of asyncpg's ``Connection`` itself, with no timer: the caller bounds it."""
        call: Any = getattr(connection, method)
        result: Awaitable[Any] = call(self, query, *args)
        return result

    namespace: dict[str, Any] = {name: bounded(name) for name in _METHODS}
    namespace.update(statement_timeout=timeout, watched=watched)
    return type("BoundedConnection", (connection,), namespace)


class _Running:
    """A watched statement: when it must be done by, the task awaiting it, and whether the
    watchdog cancelled it."""

    __slots__ = ("deadline", "overran", "task")

    def __init__(self, deadline: float, task: asyncio.Task[Any] | None) -> None:
        self.deadline = deadline
        self.task = task
        self.overran = False


class HeldPool:
    """An asyncpg pool and the connections its store holds checked out between statements.

    Args:
        pool: The asyncpg pool, open.
        interface_error: ``asyncpg.InterfaceError`` (the driver is imported by the store).
        timeout: Seconds allowed for each statement, which the pool's watchdog enforces; the
            pool's connections must then be :func:`bounded_connection_class`'s, made with
            ``command_timeout=None``. ``None``: the statements are asyncpg's own, bounded by
            whatever the pool was given.
    """

    def __init__(
        self, pool: Any, interface_error: type[Exception], timeout: float | None = None
    ) -> None:
        self.pool = pool
        self._interface_error = interface_error
        self._timeout = timeout
        # The watched statements running, by connection (one statement each at a time).
        self._running: dict[Any, _Running] = {}
        self._watchdog: asyncio.TimerHandle | None = None
        self._idle: list[tuple[Any, int]] = []
        # Bumped by recover(): connections taken before it are not reused.
        self._generation = 0
        self._waiting = 0
        self._closing = False

    def _alive(self, con: Any) -> bool:
        try:
            return not con.is_closed()
        except self._interface_error:
            # A connection lost while it sat here was handed back to the pool by asyncpg,
            # which detached this proxy from it.
            return False

    async def _take(self) -> tuple[Any, int]:
        while self._idle:
            held = self._idle.pop()
            if self._alive(held[0]):
                return held
        self._waiting += 1
        try:
            return await self.pool.acquire(), self._generation
        finally:
            self._waiting -= 1

    async def _give_back(self, held: tuple[Any, int], ok: bool) -> None:
        con, generation = held
        if ok and not self._waiting and not self._closing and generation == self._generation:
            self._idle.append(held)
        else:
            # Bounded: the wait for a cancelled statement's confirmation and the rollback
            # would otherwise have no timer (the pool has no command_timeout); past it the
            # pool discards the connection.
            await self.pool.release(con, timeout=self._timeout)

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Any]:
        """A connection for a transaction or several statements, as ``Pool.acquire``."""
        held = await self._take()
        ok = False
        try:
            yield held[0]
            ok = not held[0].is_in_transaction()
        finally:
            await self._give_back(held, ok)

    async def _run(self, method: str, query: str, args: tuple[Any, ...]) -> Any:
        held = await self._take()
        ok = False
        try:
            if self._timeout is None:
                result = await getattr(held[0], method)(query, *args)
            else:
                result = await self._watched(held[0], method, query, args)
            ok = True
            return result
        finally:
            await self._give_back(held, ok)

    async def _watched(self, con: Any, method: str, query: str, args: tuple[Any, ...]) -> Any:
        assert self._timeout is not None
        loop = asyncio.get_running_loop()
        running = _Running(loop.time() + self._timeout, asyncio.current_task())
        self._running[con] = running
        if self._watchdog is None:
            self._watchdog = loop.call_at(running.deadline, self._expire, loop)
        try:
            return await con.watched(method, query, args)
        except asyncio.CancelledError:
            if not running.overran or running.task is None:
                raise
            # The watchdog's cancellation, not the caller's: asyncpg's own timer raises this.
            running.task.uncancel()
            raise TimeoutError from None
        finally:
            del self._running[con]

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancels every statement past its deadline; re-arms for the earliest one left."""
        self._watchdog = None
        now = loop.time()
        earliest: float | None = None
        for running in self._running.values():
            if running.overran or running.task is None:
                continue
            if running.deadline <= now:
                running.overran = True
                running.task.cancel()
            elif earliest is None or running.deadline < earliest:
                earliest = running.deadline
        if earliest is not None:
            self._watchdog = loop.call_at(earliest, self._expire, loop)

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        """``Connection.fetch`` on a held connection."""
        result: list[Any] = await self._run("fetch", query, args)
        return result

    async def fetchrow(self, query: str, *args: Any) -> Any:
        """``Connection.fetchrow`` on a held connection."""
        return await self._run("fetchrow", query, args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        """``Connection.fetchval`` on a held connection."""
        return await self._run("fetchval", query, args)

    async def execute(self, query: str, *args: Any) -> str:
        """``Connection.execute`` on a held connection."""
        status: str = await self._run("execute", query, args)
        return status

    async def _release_idle(self) -> None:
        idle, self._idle = self._idle, []
        for con, _ in idle:
            if self._alive(con):
                await self.pool.release(con)

    async def recover(self) -> None:
        """Forgets every connection opened before a failure: the idle ones now, the busy ones
        when they finish, and the pool's own (``expire_connections``)."""
        self._generation += 1
        await self._release_idle()
        await self.pool.expire_connections()

    async def close(self) -> None:
        """Closes the pool gracefully, once the busy connections are done."""
        self._closing = True
        await self._release_idle()
        await self.pool.close()
        self._stop_watchdog()

    def terminate(self) -> None:
        """Closes every connection now, busy or idle."""
        self._closing = True
        self._idle.clear()
        self.pool.terminate()
        self._stop_watchdog()
