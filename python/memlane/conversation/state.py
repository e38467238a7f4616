"""One conversation in memory: compact retained turns, the budget ledger, the live window of
messages and the rolling summary; and the store entries that persist it."""

from __future__ import annotations

import json
import uuid
from collections import deque
from datetime import datetime
from typing import Any

from pydantic_ai.messages import ModelMessage

from memlane import _backend
from memlane._pure.budget import BudgetLedger
from memlane.errors import CorruptStoreError
from memlane.messages import default_messages, pack_messages, summary_message, unpack_messages
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope, new_turn, utc_now

SUMMARY_KEY = "summary"
"""Store key of a conversation's summary entry."""

INDEX_NAMESPACE = "conversations"
"""Store namespace that lists every conversation id."""

Record = tuple[int, str, str, int, datetime, "dict[str, Any] | None", Any]
"""A retained turn, compactly: turn_id, user_prompt, assistant_response, token_estimate,
timestamp, metadata (``None`` when empty) and its messages: ``None`` when they are the two
built from the strings, else their JSON (or, if they cannot be serialised, the list itself).

Only the turns inside the budget window keep live message objects. Everything older is a
tuple of strings and numbers, which Python's cyclic garbage collector stops tracking, so a
100,000-turn conversation does not make every collection walk millions of objects.
"""


def namespace(conversation_id: str) -> str:
    """The store namespace of a conversation."""
    return f"conversation:{conversation_id}"


def new_ledger(max_tokens: int) -> BudgetLedger:
    """A budget ledger of the active implementation."""
    return _backend.active.BudgetLedger(max_tokens)


def _unpack(record: Record) -> list[ModelMessage]:
    payload = record[6]
    if payload is None:
        return default_messages(record[1], record[2], record[4])
    return unpack_messages(payload)


class ConversationState:
    """One conversation: compact retained turns, the ledger, the live window and the summary.

    ``window`` holds the message lists of the turns ``[window_from, ledger.end)``, which is
    always the ledger's window: the history is read from it without touching older turns.
    """

    __slots__ = (
        "entry_ids",
        "ledger",
        "records",
        "summarized_turns",
        "summary",
        "summary_at",
        "summary_entry_id",
        "summary_tokens",
        "window",
        "window_from",
    )

    def __init__(self, ledger: BudgetLedger) -> None:
        self.ledger = ledger
        self.records: deque[Record] = deque()
        self.entry_ids: deque[str] = deque()
        self.window: deque[list[ModelMessage]] = deque()
        self.window_from = 0
        self.summary: str | None = None
        self.summary_tokens = 0
        self.summarized_turns = 0  # how many turns the summary covers
        self.summary_at: datetime = utc_now()
        self.summary_entry_id = uuid.uuid4().hex

    @property
    def next_turn_id(self) -> int:
        return self.summarized_turns + len(self.records)

    def _sync_window(self) -> None:
        start = self.ledger.window_start
        window = self.window
        while self.window_from < start and window:
            window.popleft()
            self.window_from += 1
        self.window_from = max(self.window_from, start)
        offset = self.ledger.offset
        while self.window_from > start:  # the window grew back (a smaller summary)
            self.window_from -= 1
            window.appendleft(_unpack(self.records[self.window_from - offset]))

    def append_record(
        self, record: Record, entry_id: str, messages: list[ModelMessage] | None
    ) -> None:
        """Adds the newest turn; ``messages`` are its live objects if the caller has them."""
        self.records.append(record)
        self.entry_ids.append(entry_id)
        self.ledger.push(record[3])
        self.window.append(messages if messages is not None else _unpack(record))
        self._sync_window()

    def append(self, turn: ConversationTurn, entry_id: str, *, default_messages: bool) -> None:
        """Adds the newest turn."""
        record: Record = (
            turn.turn_id,
            turn.user_prompt,
            turn.assistant_response,
            turn.token_estimate,
            turn.timestamp,
            turn.metadata or None,
            None if default_messages else pack_messages(turn.raw_messages),
        )
        self.append_record(record, entry_id, turn.raw_messages)

    def evict(self, count: int) -> list[str]:
        """Drops the ``count`` oldest turns; returns their store entry ids."""
        evicted = [self.entry_ids.popleft() for _ in range(count)]
        for _ in range(count):
            self.records.popleft()
        self.ledger.pop_front(count)
        self._sync_window()
        return evicted

    def set_summary(self, text: str, tokens: int, at: datetime) -> None:
        """Replaces the rolling summary (``tokens`` counted with its prefix)."""
        self.summary = text
        self.summary_tokens = tokens
        self.summary_at = at
        self.ledger.set_summary_tokens(tokens)
        self._sync_window()

    def messages(self, index: int) -> list[ModelMessage]:
        """Messages of the retained turn at ``index`` (0 = oldest retained)."""
        absolute = self.ledger.offset + index
        if absolute >= self.window_from:
            return self.window[absolute - self.window_from]
        return _unpack(self.records[index])

    def turn(self, index: int) -> ConversationTurn:
        """The retained turn at ``index`` as a :class:`ConversationTurn`."""
        turn_id, prompt, response, tokens, at, metadata, _ = self.records[index]
        return new_turn(
            turn_id=turn_id,
            user_prompt=prompt,
            assistant_response=response,
            raw_messages=self.messages(index),
            timestamp=at,
            token_estimate=tokens,
            metadata=dict(metadata) if metadata else {},
        )

    def turns(self) -> list[ConversationTurn]:
        """Every retained turn, oldest first."""
        return [self.turn(i) for i in range(len(self.records))]

    def history(self) -> list[ModelMessage]:
        """Summary message first (while it fits), then the window's messages."""
        history: list[ModelMessage] = []
        if self.summary is not None and self.ledger.reserved:
            history.append(summary_message(self.summary, self.summary_at))
        for messages in self.window:
            history.extend(messages)
        return history

    @property
    def history_tokens(self) -> int:
        """Estimated tokens of :meth:`history`."""
        return int(self.ledger.window_tokens) + int(self.ledger.reserved)


# ---------------------------------------------------------------------------- store entries


def turn_entry(turn: ConversationTurn, entry_id: str) -> MemoryEntry:
    """The store entry of a turn."""
    return MemoryEntry.model_construct(
        entry_id=entry_id,
        scope=MemoryScope.CONVERSATION,
        key=None,
        content=turn.model_dump(mode="json"),
        metadata={"kind": "turn"},
        created_at=turn.timestamp,
        expires_at=None,
        importance=0.5,
    )


def summary_entry(state: ConversationState, evicted_ids: list[str]) -> MemoryEntry:
    """The store entry of a summary, naming the turn entries it replaced."""
    return MemoryEntry.model_construct(
        entry_id=state.summary_entry_id,
        scope=MemoryScope.CONVERSATION,
        key=SUMMARY_KEY,
        content={
            "text": state.summary,
            "tokens": state.summary_tokens,
            "summarized_turns": state.summarized_turns,
            "evicted_entry_ids": evicted_ids,
            "created_at": state.summary_at.isoformat(),
        },
        metadata={"kind": "summary"},
        created_at=utc_now(),
        expires_at=None,
        importance=1.0,
    )


def index_entry(conversation_id: str) -> MemoryEntry:
    """The entry that lists a conversation in :data:`INDEX_NAMESPACE`."""
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:{conversation_id}").hex,
        scope=MemoryScope.CONVERSATION,
        key=conversation_id,
        content={"conversation_id": conversation_id},
        metadata={},
        created_at=utc_now(),
        expires_at=None,
        importance=0.5,
    )


def restore(entries: list[MemoryEntry], max_tokens: int) -> tuple[ConversationState, list[str]]:
    """Rebuilds a conversation from its stored entries (store order is turn order).

    Returns the state and the ids of turn entries an interrupted eviction left behind: they
    are already in the summary, and the caller deletes them.

    Raises:
        CorruptStoreError: A turn or summary entry that cannot be read back.
    """
    state = ConversationState(new_ledger(max_tokens))
    stale: set[str] = set()
    turn_entries: list[MemoryEntry] = []
    for entry in entries:
        if entry.key == SUMMARY_KEY:
            data = entry.content
            try:
                text = data["text"]
                tokens = int(data["tokens"])
                state.summarized_turns = int(data["summarized_turns"])
                at = datetime.fromisoformat(data["created_at"])
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptStoreError(f"corrupt summary entry {entry.entry_id!r}: {exc}") from exc
            state.summary_entry_id = entry.entry_id
            state.set_summary(text, tokens, at)
            stale = set(data.get("evicted_entry_ids", ()))
        elif entry.metadata.get("kind") == "turn":
            turn_entries.append(entry)
    leftovers = [e.entry_id for e in turn_entries if e.entry_id in stale]
    for entry in turn_entries:
        if entry.entry_id in stale:
            continue
        data = entry.content
        try:
            record: Record = (
                # Store order is the truth when several processes append: number by it.
                state.next_turn_id,
                data["user_prompt"],
                data["assistant_response"],
                int(data["token_estimate"]),
                datetime.fromisoformat(data["timestamp"]),
                data.get("metadata") or None,
                json.dumps(data["raw_messages"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStoreError(f"corrupt turn entry {entry.entry_id!r}: {exc}") from exc
        state.append_record(record, entry.entry_id, None)
    return state, leftovers
