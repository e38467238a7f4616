"""HeldPool: PostgreSQLStore's statements skip asyncpg's checkout, without giving up what the
checkout guaranteed (a bounded number of connections, no waiter left waiting, nothing of a
failed or cancelled statement reused, fresh connections after a failure)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from db_servers import Server
from memlane.stores import PostgreSQLStore
from memlane.stores._pg_pool import HeldPool
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
