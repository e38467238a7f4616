"""delete_many on every store: the ids that existed go and are returned in the order given;
on SQLite and PostgreSQL one transaction, so a failure part-way removes nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from conftest import require_rust_core
from memlane import MemoryEntry, SQLiteStore
from memlane._pure import store as pure
from memlane.errors import StoreError
from memlane.stores import ConditionalStore
from store_kinds import STORES, Made, open_store
from test_database_stores import StoreFactory, initialized, server_for


@pytest.fixture(params=STORES)
async def made(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Made]:
    async for found in open_store(request.param, request, tmp_path):
        yield found


def entries(n: int) -> list[MemoryEntry]:
    return [MemoryEntry(key=f"k{i}", content=i) for i in range(n)]


class TestDeleteMany:
    """The ids that existed are removed and returned in the order given; others are left."""

    async def test_removes_what_exists(self, made: Made) -> None:
        store: Any = made.store
        assert isinstance(store, ConditionalStore)
        saved = entries(4)
        await store.async_save_many("ns", saved)
        await store.async_save("other", MemoryEntry(entry_id="elsewhere", content=0))
        ids = [saved[2].entry_id, "missing", saved[0].entry_id, saved[2].entry_id, "elsewhere"]
        gone = await store.async_delete_many("ns", ids)
        assert gone == [saved[2].entry_id, saved[0].entry_id]
        assert [e.entry_id for e in await store.async_load("ns")] == [
            saved[1].entry_id,
            saved[3].entry_id,
        ]
        # An id of another namespace is not this namespace's to delete.
        assert [e.entry_id for e in await store.async_load("other")] == ["elsewhere"]

    async def test_sync_and_empty(self, made: Made) -> None:
        store: Any = made.store
        saved = entries(2)
        await store.async_save_many("ns", saved)
        assert await asyncio.to_thread(store.delete_many, "ns", []) == []
        gone = await asyncio.to_thread(store.delete_many, "ns", [e.entry_id for e in saved])
        assert gone == [e.entry_id for e in saved]
        assert await store.async_load("ns") == []
        assert await store.async_delete_many("nothing-here", ["a"]) == []

    @pytest.mark.parametrize("bad", ["one-id", [1], None, ["ok", b"bytes"]])
    async def test_bad_ids_are_type_errors(self, made: Made, bad: Any) -> None:
        store: Any = made.store
        await store.async_save("ns", MemoryEntry(entry_id="ok", content=1))
        with pytest.raises(TypeError, match="entry_id"):
            await store.async_delete_many("ns", bad)
        assert len(await store.async_load("ns")) == 1


def refuse_deleting(path: Path, entry_id: str) -> None:
    """Makes SQLite itself fail the deletion of ``entry_id`` (another writer's trigger)."""
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON memory_entries "
        f"WHEN old.entry_id = '{entry_id}' BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
    )
    con.commit()
    con.close()


class TestAllOrNothing:
    """A delete_many that fails part-way removes nothing on SQLite (both tables) and on
    PostgreSQL: the deletions before the failure are rolled back."""

    def test_sqlite(self, tmp_path: Path) -> None:
        path = tmp_path / "memory.sqlite3"
        store = SQLiteStore(path)
        saved = entries(5)
        store.save_many("ns", saved)
        refuse_deleting(path, saved[3].entry_id)
        with pytest.raises(StoreError, match="refused by trigger"):
            store.delete_many("ns", [e.entry_id for e in saved])
        assert store.load("ns") == saved
        # The connection is usable afterwards: no transaction was left open.
        assert store.delete_many("ns", [saved[0].entry_id]) == [saved[0].entry_id]
        store.close()

    async def test_postgres(self, request: pytest.FixtureRequest) -> None:
        made = StoreFactory("postgres", server_for(request, "postgres"))
        try:
            store: Any = await initialized(made.make())
            saved = entries(5)
            await store.async_save_many("ns", saved)
            con = await asyncpg.connect(made.server.url)
            try:
                await con.execute(
                    f'CREATE FUNCTION "{made.name}".refuse() RETURNS trigger LANGUAGE plpgsql AS '
                    "$$ BEGIN IF old.entry_id = '" + saved[3].entry_id + "' THEN "
                    "RAISE EXCEPTION 'refused by trigger'; END IF; RETURN old; END $$"
                )
                await con.execute(
                    f'CREATE TRIGGER refuse BEFORE DELETE ON "{made.name}".memory_entries '
                    f'FOR EACH ROW EXECUTE FUNCTION "{made.name}".refuse()'
                )
            finally:
                await con.close()
            with pytest.raises(StoreError, match="refused by trigger"):
                await store.async_delete_many("ns", [e.entry_id for e in saved])
            assert [e.entry_id for e in await store.async_load("ns")] == [e.entry_id for e in saved]
            with pytest.raises(StoreError, match="refused by trigger"):
                await asyncio.to_thread(store.delete_many, "ns", [saved[3].entry_id])
        finally:
            await made.cleanup()


class TestTwinsAgree:
    """The Rust table and its pure-Python twin delete the same rows and answer the same ids,
    and refuse the same files with the same message."""

    def test_delete_many(self, tmp_path: Path) -> None:
        tables = [
            require_rust_core().SqliteTable(str(tmp_path / "rust.sqlite3")),
            pure.SqliteTable(str(tmp_path / "python.sqlite3")),
        ]
        answers = []
        for table in tables:
            for i in range(6):
                row = (
                    f"id{i}",
                    "working",
                    f"k{i}",
                    str(i),
                    "{}",
                    "2024-01-01T00:00:00",
                    None,
                    0.5,
                    0,
                )
                table.save("a" if i % 2 else "b", row)
            answers.append(
                [
                    table.delete_many("a", ["id1", "id0", "id3", "nope", "id3"]),
                    table.delete_many("b", []),
                    table.delete_many("b", ["id4", "id5"]),
                    [r[0] for r in table.load("a", 0.0)],
                    [r[0] for r in table.load("b", 0.0)],
                ]
            )
            table.close()
        assert answers[0] == answers[1]
        # The store drops duplicate ids before the table sees them; the tables count a
        # second delete of one id as nothing found.
        assert answers[0][:3] == [["id1", "id3"], [], ["id4"]]

    @pytest.mark.parametrize("read_only", [True, False])
    def test_foreign_files(self, tmp_path: Path, read_only: bool) -> None:
        path = tmp_path / "shop.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE orders (id INTEGER)")
        con.commit()
        con.close()
        empty = tmp_path / "empty.db"
        empty.touch()
        for target in (path, empty):
            if target is empty and not read_only:
                continue  # a writable open makes an empty file a store
            errors = []
            for table in (require_rust_core().SqliteTable, pure.SqliteTable):
                with pytest.raises(sqlite3.DatabaseError) as info:
                    table(str(target), read_only)
                errors.append((type(info.value), str(info.value)))
            assert errors[0] == errors[1]
            assert errors[0][1].startswith(pure.NOT_A_STORE)


KILLED_MIDWAY = """
import sys
from memlane import SQLiteStore
store = SQLiteStore(sys.argv[1])
ids = [e.entry_id for e in store.load("ns")]
print("deleting", flush=True)
store.delete_many("ns", ids)
print("done", flush=True)
"""


def test_a_process_killed_midway_deletes_nothing(tmp_path: Path) -> None:
    """SIGKILL during a batch leaves every entry (the transaction never committed): the
    issue's 1,086 of 3,000 cannot happen."""
    path = tmp_path / "memory.sqlite3"
    with SQLiteStore(path) as store:
        store.save_many("ns", [MemoryEntry(content=i) for i in range(300)])
    con = sqlite3.connect(path)
    # Each deletion does some work, so the batch is still running when the kill comes.
    con.execute(
        "CREATE TRIGGER slow BEFORE DELETE ON memory_entries BEGIN "
        "SELECT count(*) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
        "WHERE i < 200000) SELECT i FROM n); END"
    )
    con.commit()
    con.close()
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_MIDWAY, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "deleting"
    child.kill()
    child.wait()
    rest = child.stdout.read()
    child.stdout.close()
    with SQLiteStore(path) as store:
        left = len(store.load("ns"))
    # All or nothing: 300 left if the kill came before the commit, 0 if after.
    assert left == (0 if "done" in rest else 300)
