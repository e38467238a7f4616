"""A conversation's transcript outlives its prompt; an idle conversation expires as a whole.

Summarising takes turns out of the prompt, not out of the store: ``get_transcript`` returns
every turn ever added unless ``retain_transcript=False``. With ``conversation_ttl`` a
conversation without a new turn for that long is gone (turns, summary, transcript, listing) on
every store and for every host sharing it, and a host that kept it alive keeps it for all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import (
    ConversationMemory,
    MemoryManager,
    SQLiteStore,
    _backend,
)
from memlane.conversation.state import index_entry, transcript_entry, transcript_namespace
from store_kinds import SHARED_STORES, STORES, open_store


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Any]:
    """Each store kind, built by ``impl``."""
    async for made in open_store(request.param, request, tmp_path):
        yield made.store


@pytest.fixture(params=SHARED_STORES)
async def shared_store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Any]:
    """Each store kind another memory instance (another host) can read, built by ``impl``."""
    async for made in open_store(request.param, request, tmp_path):
        yield made.store


def gist(turns: list[Any]) -> str:
    return f"gist of {len(turns)} turns"


def chat(memory: Any, cid: str, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        memory.add_turn(cid, f"question {i} about the topic", f"answer {i} in a few words")


class TestTranscript:
    """get_transcript returns every turn ever added, summarised ones included, in order."""

    async def test_every_turn_once_in_order(self, store: Any) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=gist, store=store)
        chat(memory, "c", 14)
        kept = memory.get_turns("c")
        assert kept[0].turn_id > 0  # some were summarised
        transcript = memory.get_transcript("c")
        assert [t.turn_id for t in transcript] == list(range(14))
        assert [t.user_prompt for t in transcript][:2] == [
            "question 0 about the topic",
            "question 1 about the topic",
        ]
        assert transcript[-len(kept) :] == kept
        assert [t.turn_id for t in await memory.async_get_transcript("c")] == list(range(14))

    async def test_another_instance_reads_it(self, shared_store: Any) -> None:
        chat(ConversationMemory(max_tokens=100, summarizer=gist, store=shared_store), "c", 10)
        other = ConversationMemory(max_tokens=100, summarizer=gist, store=shared_store)
        assert [t.turn_id for t in other.get_transcript("c")] == list(range(10))

    async def test_not_retained(self, store: Any) -> None:
        memory = ConversationMemory(
            max_tokens=100, summarizer=gist, store=store, retain_transcript=False
        )
        chat(memory, "c", 14)
        assert memory.get_transcript("c") == memory.get_turns("c")
        assert store.load(transcript_namespace("c")) == []

    async def test_clear_removes_it_and_unknown_ids_have_none(self, store: Any) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=gist, store=store)
        chat(memory, "c", 14)
        memory.clear("c")
        assert memory.get_transcript("c") == []
        assert store.load(transcript_namespace("c")) == []
        assert memory.get_transcript("never") == []

    async def test_a_turn_written_to_both_places_counts_once(self, store: Any) -> None:
        # What a crash between keeping the transcript and committing the summary leaves.
        memory = ConversationMemory(max_tokens=10_000, summarizer=gist, store=store)
        chat(memory, "c", 3)
        store.save_many(transcript_namespace("c"), [transcript_entry(memory.get_turns("c")[0])])
        assert [t.turn_id for t in memory.get_transcript("c")] == [0, 1, 2]

    def test_bad_argument(self, impl: _backend.Implementation) -> None:
        with pytest.raises(TypeError, match="retain_transcript"):
            ConversationMemory(retain_transcript="yes")  # type: ignore[arg-type]  # the point


class TestIdleConversationsExpire:
    """An idle conversation is gone as a whole once its ttl passes; activity keeps it."""

    async def test_gone_as_a_whole(self, store: Any) -> None:
        memory = ConversationMemory(
            max_tokens=100, summarizer=gist, store=store, conversation_ttl=1.0
        )
        chat(memory, "c", 12)
        chat(memory, "d", 1)
        assert sorted(memory.conversation_ids) == ["c", "d"]
        await asyncio.sleep(1.3)
        assert memory.get_turns("c") == []
        assert memory.get_message_history("c") == []
        assert memory.get_transcript("c") == []
        assert memory.get_summary("c") is None
        assert memory.conversation_ids == []
        chat(memory, "c", 1)  # starts afresh under the same id
        assert [t.turn_id for t in memory.get_turns("c")] == [0]
        assert memory.get_summary("c") is None

    async def test_cleanup_reclaims_what_nobody_read(self, store: Any) -> None:
        memory = ConversationMemory(
            max_tokens=100, summarizer=gist, store=store, conversation_ttl=1.0
        )
        chat(memory, "c", 12)
        await asyncio.sleep(1.3)
        fresh = ConversationMemory(max_tokens=100, store=store, conversation_ttl=1.0)
        assert fresh.cleanup_expired_conversations() == (
            1 if getattr(store, "persistent", True) else 0
        )
        assert memory.cleanup_expired_conversations() in (0, 1)
        assert memory.get_turns("c") == []
        leftover = [n for n in store.namespaces() if n.endswith(":c")]
        assert all(store.load(n) == [] for n in leftover)

    async def test_activity_keeps_it(self, store: Any) -> None:
        memory = ConversationMemory(max_tokens=10_000, store=store, conversation_ttl=2.0)
        for i in range(4):
            chat(memory, "c", 1, first=i)
            await asyncio.sleep(0.6)
        assert [t.turn_id for t in memory.get_turns("c")] == [0, 1, 2, 3]

    async def test_a_timedelta_and_bad_values(self, impl: _backend.Implementation) -> None:
        memory = ConversationMemory(conversation_ttl=timedelta(minutes=1))
        assert memory.conversation_ttl == 60.0
        with pytest.raises(ValueError, match="conversation_ttl"):
            ConversationMemory(conversation_ttl=0)
        with pytest.raises(TypeError, match="conversation_ttl"):
            ConversationMemory(conversation_ttl="60")  # type: ignore[arg-type]  # the point

    def test_manager_passes_it_on(self, impl: _backend.Implementation) -> None:
        manager = MemoryManager(conversation_ttl=5, retain_transcript=False)
        assert manager.conversation.conversation_ttl == 5.0
        assert manager.conversation.retain_transcript is False
        assert manager.cleanup_expired_conversations() == 0


class TestHostsSharingAStore:
    """A host that kept a conversation alive keeps it alive for every host."""

    def test_kept_alive_elsewhere(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "fleet.sqlite3"
        a = ConversationMemory(max_tokens=10_000, store=SQLiteStore(path), conversation_ttl=3.0)
        b = ConversationMemory(max_tokens=10_000, store=SQLiteStore(path), conversation_ttl=3.0)
        chat(a, "c", 1)
        time.sleep(2.0)
        chat(b, "c", 1, first=1)  # b's turn pushes the expiry past a's cached one
        time.sleep(1.5)
        assert [t.turn_id for t in a.get_turns("c")] == [0, 1]
        assert a.cleanup_expired_conversations() == 0
        time.sleep(3.3)
        assert b.get_turns("c") == []
        assert a.get_turns("c") == []
        assert a.conversation_ids == b.conversation_ids == []

    def test_the_index_entry_expires_with_the_conversation(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        store = SQLiteStore(tmp_path / "i.sqlite3")
        memory = ConversationMemory(store=store, conversation_ttl=60)
        chat(memory, "c", 1)
        held = store.load_by_key("conversations", "c")
        assert held is not None
        assert held.entry_id == index_entry("c").entry_id
        assert held.expires_at is not None
