"""A blocking turn and history read on a persistent store run their store calls at once: one
conditional write per turn, one range read per history read, and with other hosts writing
the same conversation each host still sees every turn, in one order with the same ids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memlane import ConversationMemory
from memlane._backend import Implementation
from memlane.stores import SQLiteStore
from memlane.stores.protocol import MemoryStore

pytestmark = pytest.mark.usefixtures("impl")


class CountingStore:
    """A real store, with the names of the methods called on it recorded."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def called(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return found(*args, **kwargs)

        return called


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "turns.sqlite3"


@pytest.fixture
def stores(path: Path, impl: Implementation) -> Iterator[list[SQLiteStore]]:
    opened = [SQLiteStore(str(path)), SQLiteStore(str(path))]
    yield opened
    for store in opened:
        store.close()


def _texts(memory: ConversationMemory, cid: str) -> list[str]:
    return [t.user_prompt for t in memory.get_turns(cid)]


class TestOneStoreCallEach:
    def test_a_cached_conversation_turn_writes_once_and_its_read_reads_once(
        self, stores: list[SQLiteStore]
    ) -> None:
        counting = CountingStore(stores[0])
        memory = ConversationMemory(store=counting)  # a real store, its calls counted
        cid = memory.new_conversation()
        for n in range(4):
            counting.calls.clear()
            turn = memory.add_turn(cid, f"q{n}", f"a{n}")
            assert counting.calls == ["save_if"]  # SQLite has no save_if_absent: the fallback
            assert turn.turn_id == n
            counting.calls.clear()
            history = memory.get_message_history(cid)
            assert counting.calls == ["load_range"]
            assert len(history) == 2 * (n + 1)

    async def test_an_async_history_read_reads_once(self, stores: list[SQLiteStore]) -> None:
        counting = CountingStore(stores[0])
        memory = ConversationMemory(store=counting)  # a real store, its calls counted
        other = ConversationMemory(store=stores[1])
        cid = await memory.async_new_conversation()
        for n in range(3):
            await memory.async_add_turn(cid, f"q{n}", f"a{n}")
            counting.calls.clear()
            assert len(await memory.async_get_message_history(cid)) == 2 * (n + 1)
            assert counting.calls == ["async_load_range"]
        other.add_turn(cid, "elsewhere", "r")  # found by the next read's one range read
        counting.calls.clear()
        assert len(await memory.async_get_message_history(cid)) == 8
        assert counting.calls == ["async_load_range"]
        assert await memory.async_get_history_tokens(cid) == other.get_history_tokens(cid)

    def test_with_a_ttl_the_turn_also_pushes_the_expiry(self, stores: list[SQLiteStore]) -> None:
        counting = CountingStore(stores[0])
        memory = ConversationMemory(
            store=counting, conversation_ttl=3600
        )  # a real store, its calls counted
        cid = memory.new_conversation()
        counting.calls.clear()
        memory.add_turn(cid, "q", "a")
        assert counting.calls[0] == "save_if"
        assert "save" in counting.calls[1:]  # the index entry's new expiry
        assert _texts(memory, cid) == ["q"]


class TestHostsSharingAConversation:
    def test_each_host_sees_every_turn_in_one_order(self, stores: list[SQLiteStore]) -> None:
        a, b = (ConversationMemory(store=s) for s in stores)
        cid = a.new_conversation()
        a.add_turn(cid, "a0", "r")
        assert b.get_message_history(cid)  # b caches the conversation at one turn
        for n in range(1, 4):
            # a writes first, so b's write at its cached head loses and catches up
            assert a.add_turn(cid, f"a{n}", "r").turn_id == 2 * n - 1
            assert b.add_turn(cid, f"b{n}", "r").turn_id == 2 * n
        expected = ["a0", "a1", "b1", "a2", "b2", "a3", "b3"]
        a.get_message_history(cid)
        assert _texts(a, cid) == _texts(b, cid) == expected
        assert [t.turn_id for t in b.get_turns(cid)] == list(range(7))

    def test_a_read_finds_another_hosts_turn(self, stores: list[SQLiteStore]) -> None:
        a, b = (ConversationMemory(store=s) for s in stores)
        cid = a.new_conversation()
        a.add_turn(cid, "q0", "r0")
        assert len(b.get_message_history(cid)) == 2
        a.add_turn(cid, "q1", "r1")
        assert len(b.get_message_history(cid)) == 4
        assert b.get_history_tokens(cid) == a.get_history_tokens(cid)

    def test_a_clear_by_another_host_reads_as_empty(self, stores: list[SQLiteStore]) -> None:
        a, b = (ConversationMemory(store=s) for s in stores)
        cid = a.new_conversation()
        a.add_turn(cid, "q0", "r0")
        assert len(b.get_message_history(cid)) == 2
        a.clear(cid)
        assert b.get_message_history(cid) == []
        assert b.add_turn(cid, "again", "r").turn_id == a.add_turn(cid, "x", "r").turn_id - 1

    async def test_async_and_blocking_hosts_agree(self, stores: list[SQLiteStore]) -> None:
        a, b = (ConversationMemory(store=s) for s in stores)
        cid = a.new_conversation()
        for n in range(3):
            a.add_turn(cid, f"sync{n}", "r")
            await b.async_add_turn(cid, f"async{n}", "r")
        a.get_message_history(cid)
        await b.async_get_message_history(cid)
        assert _texts(a, cid) == _texts(b, cid)
        assert [t.turn_id for t in a.get_turns(cid)] == list(range(6))


class TestArgumentsStillChecked:
    def test_a_bad_pinned_flag_names_itself_and_stores_nothing(
        self, stores: list[SQLiteStore]
    ) -> None:
        memory = ConversationMemory(store=stores[0])
        cid = memory.new_conversation()
        with pytest.raises(TypeError, match="pinned must be bool, not str"):
            memory.add_turn(cid, "q", "a", pinned="yes")  # type: ignore[arg-type]  # the wrong type on purpose
        assert memory.get_turns(cid) == []
