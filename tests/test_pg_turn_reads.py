"""A PostgreSQL turn reads back only what the conversation lacks: the history read of a host
that wrote the last turn itself returns no row, and after another host's turns exactly those."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asyncpg.connection import Connection

from memlane import ConversationMemory
from memlane.stores import PostgreSQLStore
from test_database_stores import StoreFactory, initialized, server_for


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[PostgreSQLStore]:
    factory = StoreFactory("postgres", server_for(request, "postgres"))
    store = await initialized(factory.make())
    assert isinstance(store, PostgreSQLStore)
    yield store
    await factory.cleanup()


@pytest.fixture
def rows_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each ``fetch`` of this process's asyncpg connections returned."""
    seen: list[int] = []
    real = Connection.fetch

    @functools.wraps(real)
    async def counted(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        records = await real(self, query, *args, **kwargs)
        seen.append(len(records))
        return records

    monkeypatch.setattr(Connection, "fetch", counted)
    return seen


class TestTheHistoryReadFetchesOnlyWhatIsMissing:
    """The read asks from the cached head: nothing comes back unless another host wrote."""

    async def test_after_its_own_turns_a_host_reads_no_row(
        self, pg: PostgreSQLStore, rows_read: list[int]
    ) -> None:
        memory = ConversationMemory(store=pg)
        cid = await memory.async_new_conversation()
        for n in range(5):
            await memory.async_add_turn(cid, f"q{n}", f"a{n}")
            rows_read.clear()
            history = await memory.async_get_message_history(cid)
            assert rows_read == [0]
            assert len(history) == 2 * (n + 1)

    async def test_another_hosts_turns_are_exactly_what_is_read(
        self, pg: PostgreSQLStore, rows_read: list[int]
    ) -> None:
        a, b = ConversationMemory(store=pg), ConversationMemory(store=pg)
        cid = await a.async_new_conversation()
        await a.async_add_turn(cid, "a0", "ok")
        await a.async_get_message_history(cid)
        await b.async_add_turn(cid, "b1", "ok")
        await b.async_add_turn(cid, "b2", "ok")
        rows_read.clear()
        turns = await a.async_get_turns(cid)
        assert rows_read == [2]
        assert [t.user_prompt for t in turns] == ["a0", "b1", "b2"]
        rows_read.clear()
        await a.async_get_message_history(cid)
        assert rows_read == [0]
