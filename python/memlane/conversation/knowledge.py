"""A summarizer strategy's knowledge base: its summaries kept, split, and searched by prompt.

With ``knowledge_base`` set on a :class:`~memlane.strategies.SummarizerStrategy`, every summary
a conversation commits is split by the strategy's ``text_splitter`` and stored in long-term
memory, in the collection's namespace of the conversation's store, each chunk searchable (see
:class:`~memlane.stores.SearchableStore`). With ``search_mode="always"``,
:meth:`~memlane.ConversationMemory.knowledge_for` returns the ``top_k`` chunks most relevant
to a new prompt, as text for the run's instructions: what earlier summaries said, from any
conversation of the collection, found by ranked search rather than carried in the prompt.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memlane._runner import Plan
from memlane.longterm.model import namespace
from memlane.longterm.ranked_search import search_call
from memlane.stores import MemoryStore
from memlane.stores.protocol import SEARCH_TEXT, search_terms
from memlane.strategies import SummarizerStrategy, split_text
from memlane.types import MemoryEntry, MemoryScope

__all__ = [
    "KNOWLEDGE_HEADER",
    "knowledge_entries",
    "knowledge_namespace",
    "knowledge_plan",
    "knowledge_search",
]

KNOWLEDGE_HEADER = "Relevant earlier summaries:"
"""How the text :meth:`~memlane.ConversationMemory.knowledge_for` returns begins."""


def knowledge_namespace(collection_id: str) -> str:
    """The namespace of a knowledge-base collection (injective in the id)."""
    return namespace("longterm", "knowledge", collection_id)


def knowledge_entries(
    strategy: SummarizerStrategy,
    cid: str,
    summarized: int,
    summary: str,
    at: datetime,
    count: Any,
) -> list[MemoryEntry]:
    """The chunks of one committed summary, keyed so writing them twice is harmless."""
    chunks = split_text(summary, strategy.text_splitter, count)
    return [
        MemoryEntry.model_construct(
            entry_id=f"{cid}\x1f{summarized}\x1f{i}",
            scope=MemoryScope.LONG_TERM,
            key=f"{cid}\x1f{summarized:012d}\x1f{i:04d}",
            content={
                "text": chunk,
                "conversation_id": cid,
                "summarized_turns": summarized,
                "created_at": at.isoformat(),
            },
            metadata={SEARCH_TEXT: chunk, "conversation_id": cid},
            created_at=at,
            expires_at=None,
            importance=0.5,
            version=0,
        )
        for i, chunk in enumerate(chunks)
    ]


def knowledge_search(store: MemoryStore, strategy: SummarizerStrategy, prompt: str) -> Any:
    """The store call finding the chunks most relevant to ``prompt`` (``None``: nothing to
    search: no knowledge base, ``search_mode="never"``, or a prompt without words)."""
    base = strategy.knowledge_base
    if base is None or base.search_mode != "always" or not search_terms(prompt):
        return None
    return search_call(store, [knowledge_namespace(base.collection_id)], prompt, base.top_k, 0.0)


def knowledge_text(hits: list[Any]) -> str | None:
    """The found chunks as one block of text for instructions, best first."""
    texts = list(dict.fromkeys(hit.entry.content["text"] for hit in hits))  # once each
    if not texts:
        return None
    return "\n".join([KNOWLEDGE_HEADER, *(f"- {text}" for text in texts)])


def knowledge_plan(
    store: MemoryStore, strategy: SummarizerStrategy | None, prompt: str
) -> Plan[str | None]:
    """What ``strategy``'s knowledge base in ``store`` holds relevant to ``prompt``, as one
    block of text (``None``: no summarizer strategy, nothing to search, or nothing found)."""
    call = None if strategy is None else knowledge_search(store, strategy, prompt)
    if call is None:
        return None
    hits: list[Any] = yield call
    return knowledge_text(hits)
