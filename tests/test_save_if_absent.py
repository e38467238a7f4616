"""save_if_absent, how a conversation log appends: the write of the next key and, after a lost
race, what beat it, on every store (one statement on PostgreSQL for a win, two for a loss),
and the round trips of a PostgreSQL turn.

Every store answers as ``save_if(ns, entry, None)`` followed, after a loss only, by
``load_range(ns, entry.key, stop)``; racing writers, in one process and in several, each find
the winner's entry in their answer.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from asyncpg.connection import Connection

from db_servers import Server
from memlane import ConversationMemory, _backend
from memlane._ops import SaveIfAbsent
from memlane._runner import run_async, run_sync
from memlane.errors import ReadOnlyStoreError
from memlane.stores import PostgreSQLStore, fallbacks
from memlane.types import MemoryEntry, utc_now
from store_kinds import SHARED_STORES, STORES, Made, open_store
from test_database_stores import StoreFactory, initialized, server_for
from worker_processes import backends, either_backend_env, release_together, started

STOP = "log;"
STEP_TIMEOUT = 180.0


def log_entry(seq: int, content: Any = None, **kwargs: Any) -> MemoryEntry:
    return MemoryEntry(key=f"log:{seq:012d}", content=content, **kwargs)


@pytest.fixture(params=STORES)
async def made(
    request: pytest.FixtureRequest, tmp_path: Path, impl: _backend.Implementation
) -> AsyncIterator[Made]:
    async for made in open_store(request.param, request, tmp_path):
        yield made


class TestSaveIfAbsentOnEveryStore:
    """A free key is written; a held one is answered with the entries from it to ``stop``."""

    def test_a_free_key_is_written_at_version_one(self, made: Made) -> None:
        store = made.store
        entry = log_entry(0, "first")
        assert fallbacks.save_if_absent(store, "ns", entry, STOP) == (True, [])
        held = store.load_by_key("ns", entry.key or "")
        assert held is not None
        assert (held.entry_id, held.content, held.version) == (entry.entry_id, "first", 1)

    def test_a_held_key_returns_the_winner_and_what_follows(self, made: Made) -> None:
        store = made.store
        winner, follower = log_entry(3, "winner"), log_entry(4, "follower")
        for entry in (winner, follower):
            assert fallbacks.save_if(store, "ns", entry, None)
        store.save("ns", MemoryEntry(key="log:000000000002", content="before"))
        store.save("ns", MemoryEntry(key="log;after", content="past the stop"))
        store.save("other", log_entry(5, "another namespace"))
        loser = log_entry(3, "loser")
        won, found = fallbacks.save_if_absent(store, "ns", loser, STOP)
        assert won is False
        assert [(e.entry_id, e.content, e.version) for e in found] == [
            (winner.entry_id, "winner", 1),
            (follower.entry_id, "follower", 1),
        ]
        held = store.load_by_key("ns", loser.key or "")
        assert held is not None
        assert held.entry_id == winner.entry_id

    def test_an_expired_holder_counts_as_absent(self, made: Made) -> None:
        store = made.store
        gone = log_entry(0, "expired", expires_at=utc_now() - timedelta(seconds=5))
        store.save("ns", gone)
        fresh = log_entry(0, "fresh")
        assert fallbacks.save_if_absent(store, "ns", fresh, STOP) == (True, [])
        assert [e.entry_id for e in fallbacks.load_range(store, "ns", "log:", STOP)] == [
            fresh.entry_id
        ]

    def test_an_entry_moving_to_a_free_key_wins(self, made: Made) -> None:
        store = made.store
        moving = MemoryEntry(key="elsewhere", content="v0")
        store.save("ns", moving)
        moved = moving.model_copy(update={"key": "log:000000000000", "content": "v1"})
        assert fallbacks.save_if_absent(store, "ns", moved, STOP) == (True, [])
        assert [(e.key, e.content) for e in store.load("ns")] == [("log:000000000000", "v1")]

    async def test_the_operation_is_the_store_method_on_both_runners(self, made: Made) -> None:
        store = made.store
        first = SaveIfAbsent("ns", log_entry(0, "sync"), STOP)
        assert run_sync(first, store) == (True, [])
        second = SaveIfAbsent("ns", log_entry(0, "async"), STOP)
        won, found = await run_async(second, store)
        assert (won, [e.content for e in found]) == (False, ["sync"])
        assert await run_async(SaveIfAbsent("ns", log_entry(1, "next"), STOP), store) == (True, [])

    def test_a_key_and_a_str_stop_are_required(self, made: Made) -> None:
        with pytest.raises(TypeError, match="key"):
            fallbacks.save_if_absent(made.store, "ns", MemoryEntry(content="no key"), STOP)
        with pytest.raises(TypeError, match="stop"):
            fallbacks.save_if_absent(made.store, "ns", log_entry(0), None)  # type: ignore[arg-type]  # the check under test
        assert made.store.load("ns") == []

    def test_two_threads_at_the_same_head_one_wins_the_other_sees_it(self, made: Made) -> None:
        store = made.store
        rounds = 12
        barrier = threading.Barrier(2)
        results: dict[int, list[tuple[MemoryEntry, bool, list[MemoryEntry]]]] = {
            n: [] for n in range(rounds)
        }

        def writer(label: str) -> None:
            for n in range(rounds):
                entry = log_entry(n, f"{label}{n}")
                barrier.wait(timeout=STEP_TIMEOUT)
                won, found = fallbacks.save_if_absent(store, "ns", entry, STOP)
                results[n].append((entry, won, found))

        threads = [threading.Thread(target=writer, args=(label,)) for label in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=STEP_TIMEOUT)
        for n in range(rounds):
            assert_one_winner_seen_by_the_loser(results[n])

    async def test_two_tasks_at_the_same_head_one_wins_the_other_sees_it(self, made: Made) -> None:
        store = made.store
        for n in range(12):
            entries = [log_entry(n, f"{label}{n}") for label in "ab"]
            answers = await asyncio.gather(
                *(fallbacks.async_save_if_absent(store, "ns", e, STOP) for e in entries)
            )
            assert_one_winner_seen_by_the_loser(
                [(e, won, found) for e, (won, found) in zip(entries, answers, strict=True)]
            )


def assert_one_winner_seen_by_the_loser(
    attempts: list[tuple[MemoryEntry, bool, list[MemoryEntry]]],
) -> None:
    winners = [entry for entry, won, _ in attempts if won]
    assert len(winners) == 1, attempts
    for entry, won, found in attempts:
        if won:
            assert found == []
        else:
            assert found, f"{entry.content!r} lost and saw nothing"
            assert (found[0].key, found[0].entry_id) == (winners[0].key, winners[0].entry_id)


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
async def pg(request: pytest.FixtureRequest) -> AsyncIterator[PostgreSQLStore]:
    factory = StoreFactory("postgres", server_for(request, "postgres"))
    store = await initialized(factory.make())
    assert isinstance(store, PostgreSQLStore)
    yield store
    await factory.cleanup()


class Statements:
    """Counts the statements every asyncpg connection of this process sends (each is one
    round trip: memlane never pipelines)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __len__(self) -> int:
        return len(self.sent)

    def clear(self) -> None:
        self.sent.clear()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    seen = Statements()
    for name in ("execute", "executemany", "fetch", "fetchval", "fetchrow"):
        real = getattr(Connection, name)

        def spy(real: Any) -> Any:
            @functools.wraps(real)
            async def counted(self: Connection, query: str, *args: Any, **kwargs: Any) -> Any:
                seen.sent.append(query)
                return await real(self, query, *args, **kwargs)

            return counted

        monkeypatch.setattr(Connection, name, spy(real))
    return seen


class TestPostgreSQLSaveIfAbsent:
    """One statement decides a win; a loss, rare, reads what beat it with a second."""

    async def test_a_win_is_one_statement_and_a_loss_two(
        self, pg: PostgreSQLStore, statements: Statements
    ) -> None:
        statements.clear()
        assert await pg.async_save_if_absent("ns", log_entry(0, "a"), STOP) == (True, [])
        assert len(statements) == 1
        statements.clear()
        won, found = await pg.async_save_if_absent("ns", log_entry(0, "b"), STOP)
        assert (won, [e.content for e in found]) == (False, ["a"])
        # The insert carries no read of the keys: that read's setup cost every append, and
        # only a loss needs it.
        assert len(statements) == 2

    async def test_a_winner_that_commits_while_the_insert_waits_is_returned(
        self, pg: PostgreSQLStore, request: pytest.FixtureRequest
    ) -> None:
        server: Server = server_for(request, "postgres")
        winner = log_entry(0, "winner")
        params = pg._prepare("ns", [winner])[0]
        con = await asyncpg.connect(server.url)
        try:
            transaction = con.transaction()
            await transaction.start()
            await con.execute(
                f'INSERT INTO "{pg.schema_name}".memory_entries (entry_id, namespace, scope, '
                "key, content, metadata, created_at, expires_at, importance, version) "
                "VALUES ($2, $1, $3, $4, $5, $6, $7, $8, $9, 1)",
                "ns",
                *params,
            )
            # The loser's insert waits on the winner's uncommitted row; the read of the keys
            # that follows it must find the winner.
            loser = asyncio.create_task(pg.async_save_if_absent("ns", log_entry(0, "loser"), STOP))
            await wait_for_a_lock_wait(con)
            await transaction.commit()
            won, found = await asyncio.wait_for(loser, STEP_TIMEOUT)
        finally:
            await con.close()
        assert won is False
        assert [(e.entry_id, e.content) for e in found] == [(winner.entry_id, "winner")]

    async def test_a_retried_attempt_recognises_its_own_win(self, pg: PostgreSQLStore) -> None:
        won = log_entry(0, "mine")
        assert await pg.async_save_if_absent("ns", won, STOP) == (True, [])

        async def retried(attempted: MemoryEntry) -> tuple[bool, list[MemoryEntry]]:
            params = pg._prepare("ns", [attempted])[0]
            return await pg._call(
                lambda r: pg._do_save_if_absent(r, "ns", params, STOP, retry=True)
            )

        # The first attempt's connection dropped after its insert landed: the retry reports
        # the win, but not someone else's.
        assert await retried(won) == (True, [])
        other = won.model_copy(update={"entry_id": "somebody else"})
        assert (await retried(other))[0] is False

    async def test_arguments_are_checked_before_any_io(
        self, pg: PostgreSQLStore, statements: Statements
    ) -> None:
        statements.clear()
        with pytest.raises(TypeError, match="stop"):
            await pg.async_save_if_absent("ns", log_entry(0), 5)  # type: ignore[arg-type]  # the check under test
        with pytest.raises(ValueError, match="NUL"):
            await pg.async_save_if_absent("ns", log_entry(0), "log\x00")
        with pytest.raises(TypeError, match="key"):
            await pg.async_save_if_absent("ns", MemoryEntry(content="no key"), STOP)
        assert len(statements) == 0

    async def test_a_read_only_store_refuses_before_any_io(
        self, pg: PostgreSQLStore, statements: Statements, request: pytest.FixtureRequest
    ) -> None:
        server = server_for(request, "postgres")
        reader = PostgreSQLStore(server.url, schema_name=pg.schema_name, read_only=True)
        try:
            statements.clear()
            with pytest.raises(ReadOnlyStoreError):
                await reader.async_save_if_absent("ns", log_entry(0), STOP)
            assert len(statements) == 0
        finally:
            await reader.async_close()

    @pytest.mark.parametrize("content", [1e16, -2.5e300, {"id": "4e8ab", "n": [1e16]}, "1e16"])
    async def test_numbers_and_number_like_strings_keep_their_type(
        self, pg: PostgreSQLStore, content: Any
    ) -> None:
        assert await pg.async_save_if_absent("ns", log_entry(0, content), STOP) == (True, [])
        won, found = await pg.async_save_if_absent("ns", log_entry(0, "late"), STOP)
        assert won is False
        assert found[0].content == content
        assert type(found[0].content) is type(content)

    def test_the_sync_twin(self, pg: PostgreSQLStore) -> None:
        assert pg.save_if_absent("ns", log_entry(0, "a"), STOP) == (True, [])
        won, found = pg.save_if_absent("ns", log_entry(0, "b"), STOP)
        assert (won, [e.content for e in found]) == (False, ["a"])


async def wait_for_a_lock_wait(con: asyncpg.Connection) -> None:
    """Returns once another session of the server waits for a lock."""
    for _ in range(int(STEP_TIMEOUT * 50)):
        waiting = await con.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"
        )
        if waiting:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the loser's insert never waited for the winner's row")


class TestRoundTripsOfAPostgreSQLTurn:
    """add_turn is one statement, the history read another, whoever else writes the log."""

    async def test_async_turn_and_history_read(
        self, pg: PostgreSQLStore, statements: Statements
    ) -> None:
        memory = ConversationMemory(store=pg)
        cid = await memory.async_new_conversation()
        await memory.async_add_turn(cid, "warm", "up")
        for n in range(3):
            statements.clear()
            await memory.async_add_turn(cid, f"q{n}", f"a{n}")
            assert len(statements) == 1, statements.sent
            statements.clear()
            history = await memory.async_get_message_history(cid)
            assert len(statements) == 1, statements.sent
        assert len(history) == 8

    def test_sync_turn_and_history_read(self, pg: PostgreSQLStore, statements: Statements) -> None:
        memory = ConversationMemory(store=pg)
        cid = memory.new_conversation()
        memory.add_turn(cid, "warm", "up")
        statements.clear()
        memory.add_turn(cid, "q", "a")
        assert len(statements) == 1, statements.sent
        statements.clear()
        assert len(memory.get_message_history(cid)) == 4
        assert len(statements) == 1, statements.sent

    async def test_a_lost_race_catches_up_from_the_write_and_loses_no_turn(
        self, pg: PostgreSQLStore, statements: Statements
    ) -> None:
        a, b = ConversationMemory(store=pg), ConversationMemory(store=pg)
        cid = await a.async_new_conversation()
        await a.async_add_turn(cid, "a0", "ok")
        await b.async_add_turn(cid, "b1", "ok")  # a's cached head is now taken
        statements.clear()
        turn = await a.async_add_turn(cid, "a2", "ok")
        # The write at the taken slot loses, a read finds b's turn, the next slot wins.
        assert len(statements) == 3, statements.sent
        assert turn.turn_id == 2
        for memory in (a, b):
            assert [t.user_prompt for t in await memory.async_get_turns(cid)] == ["a0", "b1", "a2"]


# ---------------------------------------------------------------------------- processes


WORKER = r"""
import json, sys
from memlane import FileStore, MemoryEntry, SQLiteStore, _backend
from memlane.stores import MongoDBStore, PostgreSQLStore, fallbacks

cfg = json.loads(sys.argv[1])
kind = cfg["kind"]
with _backend.use(cfg["backend"]):
    if kind == "sqlite":
        store = SQLiteStore(cfg["path"])
    elif kind == "file":
        store = FileStore(cfg["path"])
    elif kind == "postgres":
        store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_size=2, pool_min_size=1)
    else:
        store = MongoDBStore(cfg["url"], collection=cfg["name"])
store.load("warm-up")
print("ready", flush=True)
assert sys.stdin.readline() == "go\n"
head, mine, losses = 0, [], 0
while len(mine) < cfg["count"]:
    entry = MemoryEntry(key=f"log:{head:012d}", content=f"{cfg['label']}-{len(mine)}")
    won, found = fallbacks.save_if_absent(store, "log", entry, "log;")
    if won:
        mine.append(head)
        head += 1
    else:
        losses += 1
        assert found and found[0].key == entry.key, (entry.key, [e.key for e in found])
        head = int(found[-1].key[4:]) + 1
store.close()
print(json.dumps({"slots": mine, "losses": losses}), flush=True)
"""


@pytest.fixture(params=SHARED_STORES)
async def shared(
    request: pytest.FixtureRequest, tmp_path: Path, impl: _backend.Implementation
) -> AsyncIterator[Made]:
    async for made in open_store(request.param, request, tmp_path):
        yield made


class TestProcessesAppendingToOneLog:
    """Processes appending to one log through save_if_absent leave it dense: every entry once."""

    def test_every_append_lands_once(self, shared: Made) -> None:
        count, names = 25, backends()
        cfgs = [
            {
                **shared.cfg,
                "kind": shared.kind,
                "count": count,
                "label": f"w{w}",
                "backend": names[w % len(names)],
            }
            for w in range(3)
        ]
        with started(WORKER, cfgs, env=either_backend_env()) as procs:
            results = release_together(procs)
        log = fallbacks.load_range(shared.store, "log", "log:", STOP)
        assert [e.key for e in log] == [f"log:{n:012d}" for n in range(3 * count)]
        assert sorted(e.content for e in log) == sorted(
            f"w{w}-{i}" for w in range(3) for i in range(count)
        )
        for w, result in enumerate(results):
            contents = {e.key: e.content for e in log}
            assert [contents[f"log:{s:012d}"] for s in result["slots"]] == [
                f"w{w}-{i}" for i in range(count)
            ]
