"""HeldPool: PostgreSQLStore's statements skip asyncpg's checkout, without giving up what the
checkout guaranteed (a bounded number of connections, no waiter left waiting, nothing of a
failed or cancelled statement reused, fresh connections after a failure)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from db_servers import Server
from memlane.errors import StoreConnectionError
from memlane.stores import PostgreSQLStore
from memlane.stores._pg_pool import HeldPool, bounded_connection_class
from memlane.stores._pg_sql import keep_session
from test_database_stores import StoreFactory, entry, initialized, server_for


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Server:
    return server_for(request, "postgres")


@pytest.fixture
async def held(server: Server) -> AsyncIterator[HeldPool]:
    pool = await asyncpg.create_pool(server.url, min_size=0, max_size=2, reset=keep_session)
    made = HeldPool(pool, asyncpg.InterfaceError)
    yield made
    await made.close()


class TestHeldConnections:
    """A finished statement's connection serves the next one; the pool still bounds them."""

    async def test_the_next_statement_reuses_the_connection(self, held: HeldPool) -> None:
        pids = {await held.fetchval("SELECT pg_backend_pid()") for _ in range(5)}
        assert len(pids) == 1
        assert held.pool.get_size() == 1

    async def test_more_tasks_than_connections_all_finish(self, held: HeldPool) -> None:
        async def one(n: int) -> int:
            return int(await held.fetchval("SELECT $1::int FROM pg_sleep(0.01)", n))

        assert await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(40))), 60) == list(
            range(40)
        )
        assert held.pool.get_size() <= 2

    async def test_a_waiter_gets_the_connection_a_transaction_finishes_with(
        self, server: Server
    ) -> None:
        pool = await asyncpg.create_pool(server.url, min_size=0, max_size=1, reset=keep_session)
        one = HeldPool(pool, asyncpg.InterfaceError)
        try:
            started = asyncio.Event()

            async def transaction() -> None:
                async with one.acquire() as con, con.transaction():
                    started.set()
                    await con.execute("SELECT pg_sleep(0.2)")

            async def statement() -> int:
                await started.wait()
                return int(await one.fetchval("SELECT 7"))

            _, seven = await asyncio.wait_for(asyncio.gather(transaction(), statement()), 30)
            assert seven == 7
        finally:
            await one.close()


class TestNothingOfAFailureIsReused:
    """A connection whose statement failed, was cancelled or left a transaction open goes back
    to the pool, which cleans it up; after a dropped connection, none from before is used."""

    async def test_a_failed_statement(self, held: HeldPool) -> None:
        pid = await held.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(asyncpg.PostgresSyntaxError):
            await held.fetch("SELEC 1")
        assert held._idle == []
        assert held.pool.get_idle_size() == 1
        assert await held.fetchval("SELECT pg_backend_pid()") == pid  # the pool's, cleaned

    async def test_a_cancelled_statement(self, held: HeldPool) -> None:
        task = asyncio.ensure_future(held.fetch("SELECT pg_sleep(30)"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert held._idle == []
        assert await asyncio.wait_for(held.fetchval("SELECT 1"), 10) == 1

    async def test_an_open_transaction(self, held: HeldPool) -> None:
        async with held.acquire() as con:
            await con.execute("BEGIN")
        assert held._idle == []
        async with held.acquire() as con:
            assert not con.is_in_transaction()
            assert await con.fetchval("SELECT now() = statement_timestamp()") is not None

    async def test_recover_drops_the_held_connections(self, held: HeldPool) -> None:
        before = await held.fetchval("SELECT pg_backend_pid()")
        await held.recover()
        assert held._idle == []
        assert await held.fetchval("SELECT pg_backend_pid()") != before

    async def test_a_store_survives_a_killed_connection(
        self, request: pytest.FixtureRequest
    ) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store = await initialized(made.make())
            assert isinstance(store, PostgreSQLStore)
            await store.async_save("ns", entry(entry_id="a", content=1))
            pool = next(iter(store._resources.values()))
            assert isinstance(pool, HeldPool)
            pid = await pool.fetchval("SELECT pg_backend_pid()")
            con = await asyncpg.connect(made.server.url)
            try:
                assert await con.fetchval("SELECT pg_terminate_backend($1)", pid)
            finally:
                await con.close()
            # The held connection is dead: the retry runs on a fresh one.
            assert [e.entry_id for e in await store.async_load("ns")] == ["a"]
            assert await pool.fetchval("SELECT pg_backend_pid()") != pid
        finally:
            await made.cleanup()


class TestClose:
    """Closing releases the held connections first, so the pool's graceful close finishes."""

    async def test_close_finishes_with_connections_held(self, server: Server) -> None:
        pool = await asyncpg.create_pool(server.url, min_size=0, max_size=2, reset=keep_session)
        made = HeldPool(pool, asyncpg.InterfaceError)
        await asyncio.gather(*(made.fetchval("SELECT pg_sleep(0.05)") for _ in range(2)))
        assert len(made._idle) == 2
        await asyncio.wait_for(made.close(), 10)
        assert pool.get_size() == 0


TIMEOUT = 1.0


@pytest.fixture
async def watched(server: Server) -> AsyncIterator[HeldPool]:
    pool = await asyncpg.create_pool(
        server.url,
        min_size=0,
        max_size=2,
        reset=keep_session,
        command_timeout=None,
        connection_class=bounded_connection_class(asyncpg.Connection, TIMEOUT),
    )
    made = HeldPool(pool, asyncpg.InterfaceError, TIMEOUT)
    yield made
    await made.close()


async def running_sleeps(server: Server) -> int:
    con = await asyncpg.connect(server.url)
    try:
        count: int = await con.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%' "
            "AND state = 'active' AND pid <> pg_backend_pid()"
        )
        return count
    finally:
        await con.close()


class TestOneWatchdogBoundsEveryStatement:
    """The pool's watchdog, not a timer of asyncpg's per statement, bounds each statement by
    the timeout: an overrun raises TimeoutError, the server stops it, the pool goes on."""

    async def test_statements_arm_no_timer_of_their_own(
        self, watched: HeldPool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        loop = asyncio.get_running_loop()
        armed: list[str] = []
        real = loop.call_at

        def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            armed.append(getattr(callback, "__name__", repr(callback)))
            return real(when, callback, *args, **kwargs)

        # Connects and prepares the statement: the connection's and the cache's own timers.
        await watched.fetchval("SELECT $1::int", 0)
        # call_later goes through call_at too.
        monkeypatch.setattr(loop, "call_at", counting)
        for n in range(50):
            assert await watched.fetchval("SELECT $1::int", n) == n
        # asyncpg's per-statement timer (its protocol's _on_timeout), never; at most the
        # watchdog's re-arming, should the loop outlast the first statement's deadline.
        assert "_on_timeout" not in armed
        assert set(armed) <= {"_expire"}, armed
        # The counting sees asyncpg's timer where it is still armed: a transaction's
        # statements.
        async with watched.acquire() as con:
            await con.fetchval("SELECT 1")
        assert "_on_timeout" in armed

    async def test_an_overrun_raises_timeout_and_the_server_stops_it(
        self, watched: HeldPool, server: Server
    ) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(watched.fetchval("SELECT pg_sleep(30)"), 20)
        assert watched._idle == []
        assert await asyncio.wait_for(watched.fetchval("SELECT 1"), 10) == 1
        assert await running_sleeps(server) == 0
        assert watched._running == {}

    async def test_only_the_overrun_is_stopped(self, watched: HeldPool) -> None:
        async def quick() -> int:
            return int(await watched.fetchval("SELECT 7"))

        slow = asyncio.ensure_future(watched.fetchval("SELECT pg_sleep(30)"))
        sevens = [await quick() for _ in range(20)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow, 20)
        assert sevens == [7] * 20

    async def test_a_statement_started_after_the_watchdog_is_armed_gets_its_full_time(
        self, watched: HeldPool
    ) -> None:
        # The watchdog is armed for the first statement's deadline; it fires while the second
        # runs, which it must leave alone until the second's own deadline.
        await watched.fetchval("SELECT 1")
        await asyncio.sleep(TIMEOUT * 0.6)
        assert await watched.fetchval(f"SELECT 8 FROM pg_sleep({TIMEOUT * 0.7})") == 8
        assert watched._running == {}

    async def test_the_callers_cancellation_stays_a_cancellation(self, watched: HeldPool) -> None:
        task = asyncio.ensure_future(watched.fetch("SELECT pg_sleep(30)"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(watched.fetchval("SELECT 1"), 10) == 1

    async def test_a_transactions_statements_keep_their_timer(self, watched: HeldPool) -> None:
        with pytest.raises(TimeoutError):
            async with watched.acquire() as con, con.transaction():
                await asyncio.wait_for(con.execute("SELECT pg_sleep(30)"), 20)
        assert await asyncio.wait_for(watched.fetchval("SELECT 1"), 10) == 1

    async def test_closing_stops_the_watchdog(self, watched: HeldPool) -> None:
        await watched.fetchval("SELECT 1")
        assert watched._watchdog is not None
        await watched.close()
        assert watched._watchdog is None

    async def test_a_store_statement_past_its_timeout_is_a_connection_error(
        self, request: pytest.FixtureRequest
    ) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store = await initialized(made.make(timeout=TIMEOUT))
            assert isinstance(store, PostgreSQLStore)
            await store.async_save("ns", entry(entry_id="a", content=1))
            con = await asyncpg.connect(made.server.url)
            try:
                # Every read of the table waits for the lock: both attempts overrun.
                locked = con.transaction()
                await locked.start()
                await con.execute(
                    f'LOCK TABLE "{store.schema_name}".memory_entries IN ACCESS EXCLUSIVE MODE'
                )
                with pytest.raises(StoreConnectionError, match="timeout 1s"):
                    await asyncio.wait_for(store.async_load("ns"), 60)
                await locked.rollback()
            finally:
                await con.close()
            assert [e.entry_id for e in await store.async_load("ns")] == ["a"]
        finally:
            await made.cleanup()
