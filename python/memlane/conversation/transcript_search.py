"""Search by meaning over what was said in every past conversation.

A conversation's turns live in its log, shaped for the history window: keyed by position,
moved to the retained transcript when summarised, without a search text. Searching them by
meaning needs text with vectors beside it, so a memory built with an ``embedder`` keeps a
second, search-shaped copy of each committed turn:

* ``longterm:transcripts:conversation:<id>``: one entry per turn (keyed by its position, with
  an entry id derived from the namespace and the key, so writing a turn twice, from any host,
  is harmless), whose search text is the prompt and the answer, and whose content says who
  said it and when;
* ``longterm:transcripts:all`` and ``longterm:transcripts:user:<user_id>``: one entry per
  conversation (keyed by its id), the directories a search across conversations reads.

Nothing of this is on the turn's path: :meth:`TranscriptSearch.submit` queues the committed
turn (a lock and an append); a worker thread writes the entries and hands them to a
:class:`~memlane.embeddings.VectorWriter`, which embeds them in batches. :meth:`flush` waits
for both. Until then a turn is not found: the copy, not the conversation, is what lags.

A turn's user is its ``metadata["user_id"]`` (a ``str``), as an agent serving a user stores
it; turns without one are found by searches that do not ask for a user.

:func:`hybrid_plan` is the search itself, shared with the knowledge base: the store's BM25
hits and its cosine hits for the query, merged by :func:`~memlane.longterm.fusion.fuse`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from memlane._ops import Clear, Delete, Load, StoreOp, VectorSearch
from memlane._runner import Call, Done, Plan, Step, async_method, sync_method
from memlane._validate import check_identifier, check_positive_int, check_str, type_name
from memlane.embeddings import VectorWriter, async_embed_query, embed_query
from memlane.longterm.fusion import fuse
from memlane.longterm.namespaces import namespace
from memlane.longterm.ranked_search import search_plan
from memlane.stores.protocol import SEARCH_TEXT, SearchHit, search_terms
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

    from memlane.stores import MemoryStore

__all__ = [
    "ALL_CONVERSATIONS",
    "TranscriptMatch",
    "TranscriptSearch",
    "conversation_namespace",
    "expired_copies_plan",
    "forget_copies_plan",
    "hybrid_plan",
    "user_namespace",
]

ALL_CONVERSATIONS = namespace("longterm", "transcripts", "all")
"""The directory of every conversation with a searchable turn (one entry per conversation)."""


def conversation_namespace(conversation_id: str) -> str:
    """Where the searchable copies of one conversation's turns live."""
    return namespace("longterm", "transcripts", "conversation", conversation_id)


def user_namespace(user_id: str) -> str:
    """The directory of the conversations in which ``user_id`` had a turn."""
    return namespace("longterm", "transcripts", "user", user_id)


class TranscriptMatch(BaseModel):
    """A turn :meth:`TranscriptSearch.search_transcripts` found.

    Attributes:
        conversation_id: The conversation it belongs to.
        turn_id: Its position in that conversation.
        user_prompt: What the user said.
        assistant_response: What the assistant answered.
        timestamp: When the turn was added.
        user_id: The turn's ``metadata["user_id"]``, if it had one.
        score: The fused relevance (> 0, higher is better).
    """

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    turn_id: int
    user_prompt: str
    assistant_response: str
    timestamp: datetime
    user_id: str | None = None
    score: float


def hybrid_plan(
    store: Any,
    embedder: Embedder,
    model: str,
    namespaces: list[str],
    query: str,
    fetch: int,
) -> Plan[list[SearchHit]]:
    """The entries of ``namespaces`` most relevant to ``query``: the store's keyword and
    vector searches (``fetch`` hits each), fused; at most ``fetch``."""
    if not namespaces:
        return []
    vector: list[float] = yield Call(
        lambda: embed_query(embedder, query), lambda: async_embed_query(embedder, query)
    )
    semantic: list[SearchHit] = yield VectorSearch(namespaces, vector, model, limit=fetch)
    keyword: list[SearchHit] = []
    if search_terms(query):
        keyword = yield from search_plan(store, namespaces, query, fetch, 0.0)
    return fuse(keyword, semantic, query, limit=fetch)


def forget_copies_plan(conversation_id: str) -> Plan[int]:
    """Removes the searchable copies of a conversation's turns and its directory entries;
    how many turns' copies were removed.

    Also what a memory without an embedder runs when it clears a conversation: copies
    written by another memory (or an earlier run) with one must not outlive it.
    """
    where = conversation_namespace(conversation_id)
    copies: list[MemoryEntry] = yield Load(where)
    if not copies:
        return 0
    users = {e.content.get("user_id") for e in copies}
    removed: int = yield Clear(where)
    for user in (None, *users):
        directory = ALL_CONVERSATIONS if user is None else user_namespace(user)
        yield Delete(directory, _entry_id(directory, conversation_id))
    return removed


def expired_copies_plan(alive: Plan[list[str]], forget: Callable[[str], Plan[int]]) -> Plan[int]:
    """Forgets (with ``forget``) the copies of every listed conversation that ``alive`` no
    longer lists: those of conversations expired as a whole; how many turns' copies went."""
    listed: list[MemoryEntry] = yield Load(ALL_CONVERSATIONS)
    if not listed:
        return 0
    # Listed first, then the living: a conversation started afresh in between is living.
    living = set((yield from alive))
    removed = 0
    for entry in listed:
        if entry.key is not None and entry.key not in living:
            removed += yield from forget(entry.key)
    return removed


def _entry_id(where: str, key: str) -> str:
    # Entry ids are unique across the whole store: derived from the namespace and the key, so
    # a copy written twice (by any host) replaces itself and never another record.
    return uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:{where}\x1f{key}").hex


def _turn_entry(conversation_id: str, turn: ConversationTurn) -> MemoryEntry:
    user = turn.metadata.get("user_id")
    key = f"{turn.turn_id:012d}"
    return MemoryEntry.model_construct(
        entry_id=_entry_id(conversation_namespace(conversation_id), key),
        scope=MemoryScope.LONG_TERM,
        key=key,
        content={
            "conversation_id": conversation_id,
            "turn_id": turn.turn_id,
            "user_prompt": turn.user_prompt,
            "assistant_response": turn.assistant_response,
            "timestamp": turn.timestamp.isoformat(),
            "user_id": user if isinstance(user, str) else None,
        },
        metadata={
            SEARCH_TEXT: f"{turn.user_prompt}\n{turn.assistant_response}",
            "conversation_id": conversation_id,
        },
        created_at=turn.timestamp,
        expires_at=None,
        importance=0.5,
        version=0,
    )


def _directory_entry(directory: str, conversation_id: str) -> MemoryEntry:
    return MemoryEntry(
        entry_id=_entry_id(directory, conversation_id),
        scope=MemoryScope.LONG_TERM,
        key=conversation_id,
        content={"conversation_id": conversation_id},
    )


def _match(hit: SearchHit) -> TranscriptMatch:
    content = hit.entry.content
    return TranscriptMatch(
        conversation_id=content["conversation_id"],
        turn_id=content["turn_id"],
        user_prompt=content["user_prompt"],
        assistant_response=content["assistant_response"],
        timestamp=datetime.fromisoformat(content["timestamp"]),
        user_id=content.get("user_id"),
        score=hit.score,
    )


class TranscriptSearch:
    """The searchable copy of every committed turn, and the search over it.

    Thread-safe; ``submit`` never blocks on I/O, so the turn path does not wait for it.

    Args:
        store: The conversations' store; it must keep vectors (a
            :class:`~memlane.stores.protocol.VectorStore`).
        embedder: What turns text into vectors (see
            :func:`~memlane.embeddings.resolve_embedder`).

    Raises:
        TypeError: ``store`` keeps no vectors.
    """

    def __init__(self, store: MemoryStore, embedder: Embedder) -> None:
        if not callable(getattr(store, "vector_search", None)):
            raise TypeError(
                f"store must keep vectors (a VectorStore with vector_search), not "
                f"{type_name(store)}"
            )
        self._store = store
        self._vectors = VectorWriter(store, embedder)  # type: ignore[arg-type]  # checked above
        self._reset()

    def _reset(self) -> None:
        self._guard = threading.Condition()
        self._pending: deque[tuple[str, ConversationTurn]] = deque()
        self._submitted = 0
        self._finished = 0
        self._working = False
        self._errors: list[Exception] = []
        self._listed: set[tuple[str, str | None]] = set()  # directory entries written
        self._pid = os.getpid()

    @property
    def store(self) -> MemoryStore:
        """Where the copies live."""
        return self._store

    @property
    def embedder(self) -> Embedder:
        """The embedder."""
        return self._vectors.embedder

    def _forked(self) -> None:
        # A child inherits the counters but not the worker thread (see VectorWriter).
        if self._pid != os.getpid():
            self._reset()

    # ------------------------------------------------------------------ writing

    def submit(self, conversation_id: str, turn: ConversationTurn) -> None:
        """Queues a committed turn for its searchable copy; returns at once."""
        self._forked()
        with self._guard:
            self._pending.append((conversation_id, turn))
            self._submitted += 1
            if not self._working:
                self._working = True
                threading.Thread(target=self._work, name="memlane-transcripts", daemon=True).start()

    def recorded(
        self, conversation_id: str, step: Step[ConversationTurn]
    ) -> Step[ConversationTurn]:
        """``step`` (an ``add_turn`` plan, or its finished result) submitting the turn once it
        is committed: the one call the turn path makes."""
        if isinstance(step, Done):
            self.submit(conversation_id, step.value)
            return step
        return self._after(conversation_id, step)

    def _after(
        self, conversation_id: str, step: Plan[ConversationTurn] | StoreOp[ConversationTurn]
    ) -> Plan[ConversationTurn]:
        if isinstance(step, StoreOp):
            turn: ConversationTurn = yield step
        else:
            turn = yield from step
        self.submit(conversation_id, turn)
        return turn

    def _work(self) -> None:
        while True:
            with self._guard:
                if not self._pending:
                    self._working = False
                    self._guard.notify_all()
                    return
                batch = list(self._pending)
                self._pending.clear()
            try:
                self._write(batch)
            except Exception as exc:  # noqa: BLE001  # kept for flush() to raise in the caller
                with self._guard:
                    self._errors.append(exc)
            finally:
                with self._guard:
                    self._finished += len(batch)
                    self._guard.notify_all()

    def _write(self, batch: list[tuple[str, ConversationTurn]]) -> None:
        by_conversation: dict[str, list[MemoryEntry]] = {}
        for cid, turn in batch:
            by_conversation.setdefault(cid, []).append(_turn_entry(cid, turn))
        listings: dict[str, list[MemoryEntry]] = {}
        listed: set[tuple[str, str | None]] = set()
        for cid, entries in by_conversation.items():
            where = conversation_namespace(cid)
            self._store.save_many(where, entries)
            self._vectors.submit(where, entries)
            listed.update((cid, e.content["user_id"]) for e in entries)
            listed.add((cid, None))
        # A conversation's first turn is listed again whatever this host remembers: another
        # host may have cleared or expired the conversation, and its directory entries.
        fresh = {cid for cid, turn in batch if turn.turn_id == 0}
        with self._guard:
            listed -= {known for known in self._listed if known[0] not in fresh}
        for cid, user in listed:
            directory = ALL_CONVERSATIONS if user is None else user_namespace(user)
            listings.setdefault(directory, []).append(_directory_entry(directory, cid))
        # Directories after the turns: a search that lists a conversation finds its copies.
        for directory, entries in listings.items():
            self._store.save_many(directory, entries)
        with self._guard:
            self._listed |= listed

    def _written(self) -> None:
        """Waits until every turn submitted so far has its copy written (not embedded); a
        failure stays for :meth:`flush` to raise."""
        self._forked()
        with self._guard:
            target = self._submitted
            self._guard.wait_for(lambda: self._finished >= target)

    def flush(self) -> None:
        """Waits until every turn submitted before the call is stored and embedded.

        Raises:
            Exception: The first failure since the last flush (the store's or the
                embedder's), as it was raised.
        """
        self._written()
        with self._guard:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
        self._vectors.flush()

    async def async_flush(self) -> None:
        """Async :meth:`flush`: waits in a worker thread, never blocking the event loop."""
        await asyncio.to_thread(self.flush)

    def close(self) -> None:
        """Waits for what was submitted and stops the embedding writer.

        Raises:
            Exception: As :meth:`flush`.
        """
        self.flush()
        self._vectors.close()

    def _forget_conversation(self, conversation_id: str) -> Plan[int]:
        """Removes the searchable copies of one conversation's turns and its directory
        entries, so a search no longer finds it; how many turns' copies were removed.

        What the memory calls when the conversation itself is cleared or expires. A turn
        submitted before the call is written first (the call waits for it), so it cannot
        come back afterwards.

        Raises:
            TypeError, ValueError: A bad ``conversation_id``, named in the message.
        """
        cid = check_identifier(conversation_id, "conversation_id")
        yield Call(self._written, partial(asyncio.to_thread, self._written))
        removed = yield from forget_copies_plan(cid)
        with self._guard:
            self._listed = {listed for listed in self._listed if listed[0] != cid}
        return removed

    forget_conversation = sync_method(_forget_conversation)
    async_forget_conversation = async_method(_forget_conversation)

    # ------------------------------------------------------------------ searching

    def _search_transcripts(
        self,
        query: str,
        *,
        conversation_id: str | None = None,
        user_id: str | None = None,
        limit: int = 10,
        alive: Plan[list[str]] | None = None,
    ) -> Plan[list[TranscriptMatch]]:
        """The turns of past conversations most relevant to ``query``, best first.

        Ranked as long-term memory's hybrid search ranks records: by meaning (the cosine of
        the query's and the turn's embeddings), with the query's selective words and exact
        identifiers counting too (:func:`~memlane.longterm.fusion.fuse`).

        Args:
            query: What to look for, in any words.
            conversation_id: Only this conversation's turns.
            user_id: Only turns whose ``metadata["user_id"]`` is this user.
            limit: At most this many turns.
            alive: What a memory with a ``conversation_ttl`` passes: a plan listing the
                conversations not expired, the only ones searched.

        Returns:
            :class:`TranscriptMatch` values, best first; ``[]`` when nothing is stored.

        Raises:
            TypeError, ValueError: A bad argument, named in the message. Nothing is read.
        """
        check_str(query, "query")
        if not query.strip():
            raise ValueError(f"query must hold some text, got {query!r}")
        if conversation_id is not None:
            check_identifier(conversation_id, "conversation_id")
        if user_id is not None:
            check_identifier(user_id, "user_id")
        limit = check_positive_int(limit, "limit")

        living = None if alive is None else set((yield from alive))
        if conversation_id is not None:
            ids = [conversation_id]
        else:
            directory = ALL_CONVERSATIONS if user_id is None else user_namespace(user_id)
            listed: list[MemoryEntry] = yield Load(directory)
            ids = [e.key for e in listed if e.key is not None]
        # An expired conversation is gone as a whole: its copies are not searched even
        # before cleanup_expired_conversations removes them.
        names = [conversation_namespace(c) for c in ids if living is None or c in living]
        # Fusion looks past ``limit`` so a record strong on one list alone can still rank.
        fetch = max(limit * 4, 50)
        hits = yield from hybrid_plan(
            self._store, self.embedder, self._vectors.model, names, query, fetch
        )
        found = [_match(hit) for hit in hits]
        if user_id is not None:  # a conversation may hold several users' turns
            found = [match for match in found if match.user_id == user_id]
        return found[:limit]

    search_transcripts = sync_method(_search_transcripts)
    async_search_transcripts = async_method(_search_transcripts)
