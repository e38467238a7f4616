"""A conversation in a store: the entries that persist it, and rebuilding it from them.

On a persistent store a conversation is a *log*: each turn and each summary is one event,
keyed ``log:<seq>`` with a dense, zero-padded sequence number, and written with an
insert-if-absent conditional write (``save_if(..., expected_version=None)``). Whoever writes
``log:N`` first owns it, so every host that shares the store agrees on one order of events
and on the turn ids it implies; a host that loses the race reads what it missed and tries
``log:N+1``. A host with the conversation cached checks for news with one indexed range read
from its next sequence number. A summary event names how many turns it covers; the turn
events it covers (and the summary it replaces) are deleted only after it is written.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from memlane.conversation.conversation_budget import BUDGET_KEY, ConversationBudget, budget_fields
from memlane.conversation.conversation_state import (
    ConversationState,
    Record,
    is_pinned,
    new_ledger,
)
from memlane.errors import CorruptStoreError
from memlane.types import (
    CheckedJson,
    ConversationTurn,
    MemoryEntry,
    MemoryScope,
    new_entry,
    turn_json,
    utc_now,
)

SUMMARY_KEY = "summary"
"""Store key of a conversation's summary entry."""

INDEX_NAMESPACE = "conversations"
"""Store namespace that lists every conversation id."""

LOG_PREFIX = "log:"
LOG_STOP = "log;"  # the first key after every "log:..." key (";" follows ":")
_SEQ_DIGITS = 12


def log_key(seq: int) -> str:
    """The store key of log event ``seq``: zero-padded, so key order is event order."""
    return f"{LOG_PREFIX}{seq:0{_SEQ_DIGITS}d}"


def log_seq(key: str) -> int:
    """The sequence number of a log key.

    Raises:
        CorruptStoreError: ``key`` is not a log key memlane wrote.
    """
    digits = key[len(LOG_PREFIX) :]
    if len(digits) != _SEQ_DIGITS or not digits.isdigit() or not digits.isascii():
        raise CorruptStoreError(f"corrupt conversation log key {key!r}")
    return int(digits)


def namespace(conversation_id: str) -> str:
    """The store namespace of a conversation."""
    return f"conversation:{conversation_id}"


def transcript_namespace(conversation_id: str) -> str:
    """The store namespace of the turns a conversation no longer keeps (its transcript)."""
    return f"transcript:{conversation_id}"


TRANSCRIPT_PREFIX = "turn:"
TRANSCRIPT_STOP = "turn;"  # the first key after every "turn:..." key


def transcript_entry(turn: ConversationTurn) -> MemoryEntry:
    """A turn as the transcript keeps it, keyed by its id: writing it twice is harmless."""
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.CONVERSATION,
        key=f"{TRANSCRIPT_PREFIX}{turn.turn_id:0{_SEQ_DIGITS}d}",
        content=turn_json(turn),
        metadata={"kind": "transcript"},
        created_at=turn.timestamp,
        expires_at=None,
        importance=0.5,
        version=0,
    )


def turn_entry(turn: ConversationTurn, entry_id: str, seq: int) -> MemoryEntry:
    """The log event of a turn, at sequence number ``seq``.

    Built without pydantic's per-field defaults (every field is given) and with metadata the
    stores encode without walking it: every turn on a persistent store makes one.
    """
    return new_entry(
        entry_id=entry_id,
        scope=MemoryScope.CONVERSATION,
        key=f"{LOG_PREFIX}{seq:0{_SEQ_DIGITS}d}",
        content=turn_json(turn),
        metadata=CheckedJson(kind="turn"),
        created_at=turn.__dict__["timestamp"],
        expires_at=None,
        importance=0.5,
        version=0,
    )


def summary_entry(
    text: str | None, tokens: int, summarized_turns: int, at: datetime, seq: int
) -> MemoryEntry:
    """The log event of a summary covering the first ``summarized_turns`` turns (``text``
    ``None``: they were erased)."""
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.CONVERSATION,
        key=log_key(seq),
        content={
            "text": text,
            "tokens": tokens,
            "summarized_turns": summarized_turns,
            "created_at": at.isoformat(),
        },
        metadata={"kind": "summary"},
        created_at=utc_now(),
        expires_at=None,
        importance=1.0,
        version=0,
    )


def budget_entry(budget: ConversationBudget, head: int) -> MemoryEntry:
    """The entry keeping a conversation's budget in its namespace, for the life of the
    conversation that begins at log position ``head`` (see :mod:`memlane.conversation.conversation_budget`)."""
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.CONVERSATION,
        key=BUDGET_KEY,
        content={**budget_fields(budget), "head": head},
        metadata={"kind": "budget"},
        created_at=utc_now(),
        expires_at=None,
        importance=0.5,
        version=0,
    )


def last_clear(entries: list[MemoryEntry]) -> int:
    """The log position of the newest clear among ``entries`` (-1: none)."""
    found = -1
    for entry in entries:
        key = entry.key
        if key is not None and key.startswith(LOG_PREFIX) and entry.metadata.get("kind") == "clear":
            found = max(found, log_seq(key))
    return found


def index_entry(
    conversation_id: str, expires_at: datetime | None = None, generation: str | None = None
) -> MemoryEntry:
    """The entry that lists a conversation in :data:`INDEX_NAMESPACE`.

    Its id is derived from the conversation id, so an expired one (which no load returns)
    can still be deleted. With a ``conversation_ttl`` it expires when the conversation has
    been idle that long: every turn saves it again, later.
    """
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:{conversation_id}").hex,
        scope=MemoryScope.CONVERSATION,
        key=conversation_id,
        content={"conversation_id": conversation_id, "generation": generation},
        metadata={},
        created_at=utc_now(),
        expires_at=expires_at,
        importance=0.5,
        version=0,
    )


def _summary_fields(entry: MemoryEntry) -> tuple[str | None, int, int, datetime]:
    """A summary entry's text, tokens (prefix included), turns covered and time."""
    data = entry.content
    try:
        text = data["text"]
        if text is not None and not isinstance(text, str):  # None: erased, not summarised
            raise TypeError(f"text is {type(text).__name__}")
        return (
            text,
            int(data["tokens"]),
            int(data["summarized_turns"]),
            datetime.fromisoformat(data["created_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"corrupt summary entry {entry.entry_id!r}: {exc}") from exc


def _record(turn_id: int, entry: MemoryEntry) -> Record:
    data = entry.content
    try:
        return (
            turn_id,
            data["user_prompt"],
            data["assistant_response"],
            int(data["token_estimate"]),
            datetime.fromisoformat(data["timestamp"]),
            data.get("metadata") or None,
            json.dumps(data["raw_messages"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"corrupt turn entry {entry.entry_id!r}: {exc}") from exc


def _event_turn_id(entry: MemoryEntry) -> int:
    try:
        return int(entry.content["turn_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStoreError(f"corrupt turn entry {entry.entry_id!r}: {exc}") from exc


def pin_entry(turn_id: int, seq: int) -> MemoryEntry:
    """The log event that pins turn ``turn_id`` at sequence number ``seq`` (a turn added
    pinned carries the flag in its own event's metadata instead)."""
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.CONVERSATION,
        key=log_key(seq),
        content={"turn_id": turn_id},
        metadata={"kind": "pin"},
        created_at=utc_now(),
        expires_at=None,
        importance=0.5,
        version=0,
    )


def _pinned_record(record: Record) -> Record:
    return (*record[:5], {**(record[5] or {}), "pinned": True}, record[6])


def clear_entry(seq: int) -> MemoryEntry:
    """The log event that clears a conversation at sequence number ``seq``.

    Clearing writes an event rather than emptying the namespace: a host with the
    conversation cached reads only the log after its own head, so it learns of a clear only
    from an event there. Every event before it is void, and the turns after it number from 0.
    """
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.CONVERSATION,
        key=log_key(seq),
        content={},
        metadata={"kind": "clear"},
        created_at=utc_now(),
        expires_at=None,
        importance=0.5,
        version=0,
    )


def cleared_at(entries: list[MemoryEntry]) -> datetime | None:
    """When the conversation in ``entries`` was cleared, if a clear is its newest log event.

    ``None`` when the conversation holds anything after its last clear (or was never
    cleared): then it exists.
    """
    newest: MemoryEntry | None = None
    newest_seq = -1
    for entry in entries:
        key = entry.key
        if key is not None and key.startswith(LOG_PREFIX):
            seq = log_seq(key)
            if seq > newest_seq:
                newest, newest_seq = entry, seq
    if newest is None or newest.metadata.get("kind") != "clear":
        return None
    return newest.created_at


def apply_event(state: ConversationState, entry: MemoryEntry) -> bool:
    """Applies the log event that follows ``state``; ``False`` if it does not follow it.

    ``False`` means this host missed events that a summary has since compacted away, or
    another host cleared the conversation (or the store holds something memlane did not
    write): the caller reloads the conversation. The state may then be half-changed and must
    be dropped.

    Raises:
        CorruptStoreError: The event cannot be read back.
    """
    assert entry.key is not None
    seq = log_seq(entry.key)
    if seq != state.head:
        return False
    kind = entry.metadata.get("kind")
    if kind == "turn":
        if _event_turn_id(entry) != state.next_turn_id:
            return False
        state.append_record(_record(state.next_turn_id, entry), entry.entry_id, None)
    elif kind == "summary":
        text, tokens, summarized, at = _summary_fields(entry)
        count = summarized - state.summarized_turns
        if count < 0 or count > len(state.records):
            return False
        state.evict(count)
        state.summarized_turns = summarized
        state.summary_entry_id = entry.entry_id
        state.set_summary(text, tokens, at)
    elif kind == "pin":
        index = _event_turn_id(entry) - state.summarized_turns
        if not 0 <= index < len(state.records):
            return False
        state.pin(index)
    else:
        return False
    state.head = seq + 1
    return True


def restore(entries: list[MemoryEntry], max_tokens: int) -> tuple[ConversationState, list[str]]:
    """Rebuilds a conversation from every stored entry of its namespace.

    The newest summary is the base; the turns it does not cover follow in log order. Entries
    of the layout before the log (an unkeyed turn per entry, one summary under
    :data:`SUMMARY_KEY`) come first, numbered by store order as they always were. A clear
    event voids everything before it: the conversation starts again after it.

    Returns the state and the ids of entries that a newer summary or a clear covers: an
    interrupted summary commit or clear (or a host that did not finish deleting) left them
    behind, and the caller deletes them.

    Raises:
        CorruptStoreError: A turn or summary entry that cannot be read back.
    """
    state = ConversationState(new_ledger(max_tokens))
    legacy_summary: MemoryEntry | None = None
    legacy_turns: list[MemoryEntry] = []
    events: list[tuple[int, MemoryEntry]] = []
    for entry in entries:
        key = entry.key
        if key is not None and key.startswith(LOG_PREFIX):
            events.append((log_seq(key), entry))
        elif key == SUMMARY_KEY:
            legacy_summary = entry
        elif entry.metadata.get("kind") == "turn":
            legacy_turns.append(entry)
    events.sort(key=lambda event: event[0])
    head = events[-1][0] + 1 if events else 0
    leftovers: list[str] = []
    clears = [i for i, (_, entry) in enumerate(events) if entry.metadata.get("kind") == "clear"]
    if clears:
        # The conversation starts again after its last clear: everything before it is void,
        # the clear itself excepted (a cached host must still find it after its own head).
        last = clears[-1]
        leftovers.extend(entry.entry_id for _, entry in events[:last])
        leftovers.extend(entry.entry_id for entry in legacy_turns)
        if legacy_summary is not None:
            leftovers.append(legacy_summary.entry_id)
        events = events[last + 1 :]
        legacy_turns, legacy_summary = [], None
    summaries = [entry for _, entry in events if entry.metadata.get("kind") == "summary"]
    leftovers.extend(entry.entry_id for entry in summaries[:-1])
    pinned = {_event_turn_id(entry) for _, entry in events if entry.metadata.get("kind") == "pin"}

    # Turns the layout before the log kept, numbered after its summary, minus those it
    # named as replaced.
    first = 0
    stale: set[str] = set()
    if legacy_summary is not None:
        first = _summary_fields(legacy_summary)[2]
        stale = set(legacy_summary.content.get("evicted_entry_ids", ()))
    candidates: list[tuple[int, MemoryEntry]] = []
    for entry in legacy_turns:
        if entry.entry_id in stale:
            leftovers.append(entry.entry_id)
        else:
            candidates.append((first + len(candidates), entry))
    candidates.extend(
        (_event_turn_id(entry), entry)
        for _, entry in events
        if entry.metadata.get("kind") == "turn"
    )

    base = summaries[-1] if summaries else legacy_summary
    if base is not None:
        if summaries and legacy_summary is not None:
            leftovers.append(legacy_summary.entry_id)
        text, tokens, state.summarized_turns, at = _summary_fields(base)
        state.summary_entry_id = base.entry_id
        state.set_summary(text, tokens, at)
    for turn_id, entry in candidates:
        if turn_id < state.summarized_turns:
            record = _record(turn_id, entry)
            if turn_id in pinned or is_pinned(record):  # a summary passes a pin over
                state.add_folded_pin(_pinned_record(record))
            else:
                leftovers.append(entry.entry_id)
        else:
            # Log order is the truth when several processes append: number by it.
            record = _record(state.next_turn_id, entry)
            if turn_id in pinned:
                record = _pinned_record(record)
            state.append_record(record, entry.entry_id, None)
    state.head = head
    return state, leftovers
