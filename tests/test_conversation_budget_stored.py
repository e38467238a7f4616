"""Each conversation keeps the budget it was created with, in the store: a memory opened
later with other values (another host, an operator's tool) reads and applies the stored one;
conversations stored before budgets were kept fall back to the memory's; snapshots carry it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import ConversationMemory, InMemoryStore
from memlane.conversation import ConversationBudget
from memlane.conversation.budget import BUDGET_KEY
from memlane.errors import ConversationNotFoundError, CorruptStoreError
from memlane.types import MemoryEntry
from store_kinds import SHARED_STORES, Made, open_store

WORDS = " ".join(f"word{i}" for i in range(40))


@pytest.fixture(params=SHARED_STORES)
async def made(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Made]:
    async for found in open_store(request.param, request, tmp_path):
        yield found


class TestStoredWithTheConversation:
    """The budget is written at creation and read back by any memory on the store."""

    async def test_reopened_with_other_values(self, made: Made) -> None:
        creator = ConversationMemory(store=made.store, max_tokens=300, summarize_threshold=200)
        cid = await creator.async_new_conversation()
        for _ in range(6):
            await creator.async_add_turn(cid, WORDS, WORDS)
        assert await creator.async_conversation_budget(cid) == ConversationBudget(300, 200)
        tool = ConversationMemory(store=made.store, max_tokens=128_000)
        budget = await tool.async_conversation_budget(cid)
        assert budget == ConversationBudget(max_tokens=300, summarize_threshold=200)
        assert budget.max_tokens == 300
        # The stored budget is the one applied: the history still fits 300 tokens.
        assert 0 < await tool.async_get_history_tokens(cid) <= 300
        assert await tool.async_get_history_tokens(cid) == await creator.async_get_history_tokens(
            cid
        )
        # A conversation the tool starts keeps the tool's own budget.
        other = await tool.async_new_conversation()
        assert await creator.async_conversation_budget(other) == ConversationBudget(128_000, 3072)

    async def test_a_clear_starts_a_new_life_with_the_clearing_memorys_budget(
        self, made: Made
    ) -> None:
        first = ConversationMemory(store=made.store, max_tokens=300)
        cid = await first.async_new_conversation()
        await first.async_add_turn(cid, "a", "b")
        second = ConversationMemory(store=made.store, max_tokens=900)
        await second.async_clear(cid)
        await second.async_add_turn(cid, "c", "d")
        assert (await first.async_conversation_budget(cid)).max_tokens == 900
        entries = await made.store.async_load(ConversationMemory.namespace(cid))
        assert [e.key for e in entries].count(BUDGET_KEY) == 1

    async def test_stored_before_budgets_falls_back(self, made: Made) -> None:
        creator = ConversationMemory(store=made.store, max_tokens=300)
        cid = await creator.async_new_conversation()
        await creator.async_add_turn(cid, "hi", "hello")
        ns = ConversationMemory.namespace(cid)
        kept = await made.store.async_load_by_key(ns, BUDGET_KEY)
        assert kept is not None
        await made.store.async_delete(ns, kept.entry_id)
        reader = ConversationMemory(store=made.store, max_tokens=1000, summarize_threshold=500)
        assert await reader.async_conversation_budget(cid) == ConversationBudget(1000, 500)
        assert [t.user_prompt for t in await reader.async_get_turns(cid)] == ["hi"]

    async def test_a_damaged_budget_is_named(self, made: Made) -> None:
        creator = ConversationMemory(store=made.store)
        cid = await creator.async_new_conversation()
        ns = ConversationMemory.namespace(cid)
        kept = await made.store.async_load_by_key(ns, BUDGET_KEY)
        assert kept is not None
        broken = kept.model_copy(update={"content": {"max_tokens": "lots"}})
        await made.store.async_save(ns, broken)
        reader = ConversationMemory(store=made.store)
        with pytest.raises(CorruptStoreError, match=kept.entry_id):
            await reader.async_conversation_budget(cid)


class TestSyncAndInMemory:
    """conversation_budget and its async twin, on a private in-memory store."""

    def test_sync(self) -> None:
        memory = ConversationMemory(max_tokens=500, summarize_threshold=100)
        cid = memory.new_conversation()
        assert memory.conversation_budget(cid) == ConversationBudget(500, 100)
        with pytest.raises(ConversationNotFoundError, match="nope"):
            memory.conversation_budget("nope")

    async def test_async_unknown(self) -> None:
        memory = ConversationMemory()
        with pytest.raises(ConversationNotFoundError):
            await memory.async_conversation_budget("nope")


class TestSnapshotsCarryIt:
    """An export carries the budget; an import keeps it, whatever the importing memory's."""

    @pytest.mark.parametrize("persistent", [False, True])
    def test_round_trip(self, tmp_path: Path, persistent: bool) -> None:
        source = ConversationMemory(max_tokens=400, summarize_threshold=300)
        cid = source.new_conversation()
        source.add_turn(cid, "hi", "hello")
        snapshot = source.export_conversation(cid)
        assert (snapshot["max_tokens"], snapshot["summarize_threshold"]) == (400, 300)
        store: Any = InMemoryStore()
        if persistent:
            from memlane import SQLiteStore

            store = SQLiteStore(tmp_path / "memory.sqlite3")
        target = ConversationMemory(store=store, max_tokens=8000)
        new = target.import_conversation(snapshot)
        assert target.conversation_budget(new) == ConversationBudget(400, 300)
        assert target.export_conversation(new)["max_tokens"] == 400
        store.close()

    def test_an_old_snapshot_takes_the_importers(self) -> None:
        snapshot = {"turns": [{"user_prompt": "a", "assistant_response": "b"}]}
        target = ConversationMemory(max_tokens=700, summarize_threshold=600)
        cid = target.import_conversation(snapshot)
        assert target.conversation_budget(cid) == ConversationBudget(700, 600)

    @pytest.mark.parametrize(
        ("fields", "named"),
        [
            ({"max_tokens": 0}, "data['max_tokens']"),
            ({"max_tokens": "9"}, "data['max_tokens']"),
            ({"max_tokens": 10, "summarize_threshold": -1}, "data['summarize_threshold']"),
            ({"max_tokens": True}, "data['max_tokens']"),
        ],
    )
    def test_a_bad_budget_is_refused(self, fields: dict[str, Any], named: str) -> None:
        target = ConversationMemory()
        with pytest.raises(ValueError, match=named.replace("[", r"\[")):
            target.import_conversation({"turns": [], **fields})
        assert target.conversation_ids == []


def test_budget_entries_are_not_turns(tmp_path: Path) -> None:
    """The budget entry sits beside the log: turns, transcript and ids are as before."""
    from memlane import SQLiteStore

    store = SQLiteStore(tmp_path / "m.sqlite3")
    memory = ConversationMemory(store=store, max_tokens=300)
    cid = memory.new_conversation()
    memory.add_turn(cid, "one", "two")
    entries: list[MemoryEntry] = store.load(ConversationMemory.namespace(cid))
    assert sorted(str(e.metadata.get("kind")) for e in entries) == ["budget", "turn"]
    fresh = ConversationMemory(store=store, max_tokens=300)
    assert [t.turn_id for t in fresh.get_turns(cid)] == [0]
    assert fresh.get_transcript(cid)[0].user_prompt == "one"
    assert fresh.conversation_ids == [cid]
    store.close()
