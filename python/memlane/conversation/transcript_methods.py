"""The transcript search a memory offers: ``search_transcripts`` for a class holding a
:class:`~memlane.conversation.transcript_search.TranscriptSearch`, and what clearing a
conversation does to its searchable copies.

(Apart from ``transcript_search.py`` so that module stays one class and its plans.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memlane._runner import Plan
from memlane.conversation.transcript_search import (
    TranscriptMatch,
    TranscriptSearch,
    forget_copies_plan,
)

__all__ = ["forget_copies", "transcript_methods"]


def forget_copies(transcripts: TranscriptSearch | None, conversation_id: str) -> Plan[int]:
    """Removes a cleared or expired conversation's searchable copies; how many turns' copies.

    Also when the memory has no embedder (``transcripts`` is ``None``): another memory on the
    store may have written them, and they must not outlive the conversation.
    """
    if transcripts is not None:
        return (yield from transcripts._forget_conversation(conversation_id))
    return (yield from forget_copies_plan(conversation_id))


def transcript_methods(
    owner: str,
) -> tuple[Callable[..., list[TranscriptMatch]], Callable[..., Awaitable[list[TranscriptMatch]]]]:
    """``search_transcripts`` and ``async_search_transcripts`` for a class holding its
    :class:`TranscriptSearch` (or ``None``, without an embedder) as ``_transcripts``.

    Args:
        owner: The class's name, for the error without an embedder.
    """

    def index(self: Any) -> TranscriptSearch:
        found: TranscriptSearch | None = self._transcripts
        if found is None:
            raise ValueError(
                f"search_transcripts needs an embedder: build the {owner} (or the "
                "MemoryManager holding it) with embedder=... (e.g. embedder='local'); turns "
                "are made searchable only then"
            )
        return found

    def alive(self: Any) -> Plan[list[str]] | None:
        # With a ttl, the conversations not expired (the store's index knows every host's).
        if getattr(self, "conversation_ttl", None) is None:
            return None
        ids: Plan[list[str]] = self._conversations.ids_plan()
        return ids

    def search_transcripts(
        self: Any,
        query: str,
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        limit: int = 10,
    ) -> list[TranscriptMatch]:
        return index(self).search_transcripts(
            query, conversation_id=conversation_id, user_id=user_id, limit=limit, alive=alive(self)
        )

    async def async_search_transcripts(
        self: Any,
        query: str,
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        limit: int = 10,
    ) -> list[TranscriptMatch]:
        return await index(self).async_search_transcripts(
            query, conversation_id=conversation_id, user_id=user_id, limit=limit, alive=alive(self)
        )

    doc = TranscriptSearch._search_transcripts.__doc__ or ""
    extra = f"""

        Raises (also):
            ValueError: The {owner} was built without an ``embedder`` (names it).
        """
    search_transcripts.__doc__ = doc + extra
    async_search_transcripts.__doc__ = "Async :meth:`search_transcripts`." + extra
    search_transcripts.__qualname__ = f"{owner}.search_transcripts"
    async_search_transcripts.__qualname__ = f"{owner}.async_search_transcripts"
    return search_transcripts, async_search_transcripts
