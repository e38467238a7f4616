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
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["HeldPool"]


class HeldPool:
    """An asyncpg pool and the connections its store holds checked out between statements.

    Args:
        pool: The asyncpg pool, open.
        interface_error: ``asyncpg.InterfaceError`` (the driver is imported by the store).
    """

    def __init__(self, pool: Any, interface_error: type[Exception]) -> None:
        self.pool = pool
        self._interface_error = interface_error
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
            await self.pool.release(con)

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
            result = await getattr(held[0], method)(query, *args)
            ok = True
            return result
        finally:
            await self._give_back(held, ok)

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

    def terminate(self) -> None:
        """Closes every connection now, busy or idle."""
        self._closing = True
        self._idle.clear()
        self.pool.terminate()
