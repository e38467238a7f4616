"""A summarizer strategy's knowledge base: its summaries kept, split, and searched by prompt.

With ``knowledge_base`` set on a :class:`~memlane.strategies.SummarizerStrategy`, every summary
a conversation commits is split by the strategy's ``text_splitter`` and stored in long-term
memory, in the collection's namespace of the conversation's store, each chunk searchable (see
:class:`~memlane.stores.SearchableStore`). With ``search_mode="always"``,
:meth:`~memlane.ConversationMemory.knowledge_for` returns the ``top_k`` chunks most relevant
to a new prompt, as text for the run's instructions: what earlier summaries said, from any
conversation of the collection, found by ranked search rather than carried in the prompt.

With an ``embedder`` (``ConversationMemory(embedder=...)``) the chunks are found by meaning:
the search is hybrid (:func:`~memlane.conversation.transcript_search.hybrid_plan`), and the
chunks are embedded when a search first meets them without a vector of the embedder's model
(:func:`catch_up_plan`). Embedding on read rather than on write keeps the summary's path as it
was and covers chunks written by any process, with or without an embedder, or under another
model: a knowledge base is small, and its chunks arrive once per summary.
"""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from memlane._ops import MissingVectors, SaveVectors
from memlane._runner import Call, Plan
from memlane.longterm.model import namespace
from memlane.longterm.ranked_search import search_call
from memlane.stores import MemoryStore
from memlane.stores.protocol import SEARCH_TEXT, search_terms
from memlane.stores.vectors import EntryVector, text_digest
from memlane.strategies import SummarizerStrategy, split_text
from memlane.types import MemoryEntry, MemoryScope

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

__all__ = [
    "KNOWLEDGE_HEADER",
    "catch_up_plan",
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


def catch_up_plan(store: Any, embedder: Embedder, model: str, where: str) -> Plan[int]:
    """Embeds the chunks of ``where`` that have no vector of ``model``; how many got one.

    Asks the store in rounds of at most 1000 until none is missing; a chunk the model gives
    no direction (no vector) or whose text changed meanwhile (the store refuses the vector)
    is left out, and counted as done for this search so a round never repeats forever. Those
    stay missing, listed first, so each round asks past them.
    """
    from memlane.embeddings import async_embed_documents, embed_documents

    attached = 0
    tried: set[str] = set()
    while True:
        missing: list[MemoryEntry] = yield MissingVectors(
            [where], model, limit=1000 + len(tried) - attached
        )
        todo = [e for e in missing if e.entry_id not in tried]
        if not todo:
            return attached
        tried.update(e.entry_id for e in todo)
        texts = [e.metadata[SEARCH_TEXT] for e in todo]
        vectors: list[list[float] | None] = yield Call(
            partial(embed_documents, embedder, texts),
            partial(async_embed_documents, embedder, texts),
        )
        made = [
            EntryVector(e.entry_id, text_digest(t), v)
            for e, t, v in zip(todo, texts, vectors, strict=True)
            if v is not None
        ]
        if made:
            attached += yield SaveVectors(where, model, made)


def knowledge_plan(
    store: MemoryStore,
    strategy: SummarizerStrategy | None,
    prompt: str,
    embedder: Embedder | None = None,
) -> Plan[str | None]:
    """What ``strategy``'s knowledge base in ``store`` holds relevant to ``prompt``, as one
    block of text (``None``: no summarizer strategy, nothing to search, or nothing found).

    With an ``embedder`` the chunks are found by meaning as well as by words (hybrid search),
    after the chunks without a vector of its model are embedded (:func:`catch_up_plan`),
    unless the store was opened read-only: a search never writes.
    """
    if strategy is None:
        return None
    call = knowledge_search(store, strategy, prompt)
    base = strategy.knowledge_base
    if call is None or base is None:
        return None
    if embedder is None:
        hits: list[Any] = yield call
        return knowledge_text(hits)
    from memlane.conversation.transcript_search import hybrid_plan
    from memlane.embeddings import embedder_id

    where = knowledge_namespace(base.collection_id)
    model = embedder_id(embedder)
    if getattr(store, "read_only", False) is not True:
        # A search only reads: on a store opened read-only the chunks without a vector are
        # found by their words alone, as they would be before any catch-up.
        yield from catch_up_plan(store, embedder, model, where)
    found = yield from hybrid_plan(store, embedder, model, [where], prompt, max(base.top_k, 50))
    return knowledge_text(found[: base.top_k])
