"""``ConversationMemory(embedder=...)``: every committed turn becomes searchable by meaning.

The turn path makes one call (the turn, once committed, goes to the transcript writer); these
tests drive it through the memory as a user would, on the local stores and both
implementations: a paraphrase finds the turn, a cleared conversation is no longer found, and a
memory without an embedder says what it needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import ConversationMemory, _backend
from memlane.embeddings import resolve_embedder
from store_kinds import Made, open_store


@pytest.fixture(scope="module")
def embedder() -> Any:
    """The offline model, loaded once for the module."""
    return resolve_embedder("local")


@pytest.fixture(params=["memory", "sqlite"])
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    async for opened in open_store(request.param, request, tmp_path):
        yield opened


def test_a_turn_is_found_by_other_words(made: Made, embedder: Any) -> None:
    memory = ConversationMemory(store=made.store, embedder=embedder)
    cid = memory.new_conversation()
    memory.add_turn(cid, "Ada drinks her coffee black, no sugar.", "Noted.")
    memory.add_turn(cid, "The quarterly report is due on Friday.", "I will remind you.")
    memory.add_turn(cid, "Please book the train to Lyon.", "Booked for 9:10.")
    memory.flush()

    found = memory.search_transcripts("how does she take her hot drink", limit=1)

    assert [(m.conversation_id, m.turn_id) for m in found] == [(cid, 0)]
    assert found[0].user_prompt == "Ada drinks her coffee black, no sugar."
    memory.close()


async def test_async_turns_are_found_too(made: Made, embedder: Any) -> None:
    memory = ConversationMemory(store=made.store, embedder=embedder)
    first = await memory.async_new_conversation()
    second = await memory.async_new_conversation()
    await memory.async_add_turn(first, "My flight lands at 6 in the morning.", "Got it.")
    await memory.async_add_turn(second, "The invoice INV-48213 was paid.", "Marked as paid.")
    await memory.async_flush()

    found = await memory.async_search_transcripts("INV-48213", limit=5)
    only_first = await memory.async_search_transcripts("INV-48213", conversation_id=first, limit=5)

    assert found[0].conversation_id == second
    assert all(m.conversation_id == first for m in only_first)
    await memory.async_close()


def test_a_cleared_conversation_is_no_longer_found(made: Made, embedder: Any) -> None:
    memory = ConversationMemory(store=made.store, embedder=embedder)
    kept = memory.new_conversation()
    gone = memory.new_conversation()
    memory.add_turn(kept, "We agreed on the blue logo.", "Blue it is.")
    memory.add_turn(gone, "Ada drinks her coffee black, no sugar.", "Noted.")
    memory.flush()
    assert any(m.conversation_id == gone for m in memory.search_transcripts("coffee"))

    memory.clear(gone)

    assert all(m.conversation_id != gone for m in memory.search_transcripts("coffee"))
    assert [m.conversation_id for m in memory.search_transcripts("logo")] == [kept]
    memory.close()


def test_without_an_embedder_search_transcripts_names_it() -> None:
    memory = ConversationMemory()
    with pytest.raises(ValueError, match="embedder"):
        memory.search_transcripts("coffee")


def test_a_bad_embedder_is_refused_by_name() -> None:
    with pytest.raises((TypeError, ValueError), match="embedder"):
        ConversationMemory(embedder=42)


def test_the_manager_offers_pins_summaries_on_demand_and_their_status() -> None:
    from memlane import MemoryManager

    def summarize(turns: Any) -> str:
        return " / ".join(t.assistant_response for t in turns)

    manager = MemoryManager(max_conversation_tokens=400, summarizer=summarize)
    cid = manager.new_conversation()
    manager.add_turn(cid, "My account is 4471-002.", "Noted.", pinned=True)
    manager.add_turn(cid, "second", "two")
    manager.add_turn(cid, "third", "three")
    manager.pin_turn(cid, 1)

    manager.summarize_now(cid, focus="keep the account")

    assert [t.turn_id for t in manager.get_turns(cid)] == [0, 1]
    assert manager.summary_status(cid).state == "ok"
    summary = manager.get_summary(cid)
    assert summary is not None
    assert "three" in summary
