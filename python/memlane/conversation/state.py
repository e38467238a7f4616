"""One conversation in memory: compact retained turns, the budget ledger, the live window of
messages and the rolling summary; and the store entries that persist it.

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
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memlane import _backend
from memlane._pure.budget import BudgetLedger
from memlane.conversation.budget import BUDGET_KEY, ConversationBudget, budget_fields
from memlane.errors import CorruptStoreError
from memlane.messages import default_messages, freeze_messages, summary_message, unpack_messages
from memlane.types import (
    ConversationTurn,
    MemoryEntry,
    MemoryScope,
    new_turn,
    turn_json,
    utc_now,
)

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

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


Record = tuple[int, str, str, int, datetime, "dict[str, Any] | None", Any]
"""A retained turn, compactly: turn_id, user_prompt, assistant_response, token_estimate,
timestamp, metadata (``None`` when empty) and its messages: ``None`` when they are the two
built from the strings; the live list the turn was given while it is in the history; once it
has left, that list frozen (:func:`~memlane.messages.freeze_messages`; the list itself if it
cannot be); the JSON of a turn read back from the store.

Only the turns inside the budget window keep live message objects. Everything older is a
tuple of strings and numbers, which Python's cyclic garbage collector stops tracking, so a
100,000-turn conversation does not make every collection walk millions of objects. A turn is
frozen when it leaves the window, not when it is added: nothing reads the frozen form before,
and a turn still in the history costs no serialisation at all. (A persistent store's entry is
the turn's JSON, made once, by :func:`turn_entry`.) Keeping every turn live would spare the
freeze (~20 us a turn with usage and model names) and even some memory (pickle holds the texts
a second time), and the collector's amortised cost measured only ~5 us a turn more at 100,000
turns; but each retained turn would add ~9 tracked objects, and a host holding millions of
turns would pause for seconds in every full collection.
"""


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
    An entry is ``None`` until it is first read, then decoded from its record: the messages
    of a turn given as strings are not built (nor pydantic-ai imported) before anyone asks.
    """

    __slots__ = (
        "budget",
        "entry_ids",
        "expires_at",
        "extracted_upto",
        "flat",
        "flat_from",
        "flat_sizes",
        "generation",
        "head",
        "ledger",
        "records",
        "strategy_cache",
        "summarized_turns",
        "summary",
        "summary_at",
        "summary_entry_id",
        "summary_tokens",
        "window",
        "window_from",
    )

    def __init__(self, ledger: BudgetLedger, budget: ConversationBudget | None = None) -> None:
        self.ledger = ledger
        # The budget the conversation keeps in the store (None: stored before budgets were
        # kept; the memory's own values apply).
        self.budget = budget
        self.records: deque[Record] = deque()
        self.entry_ids: deque[str] = deque()
        self.window: deque[list[ModelMessage] | None] = deque()
        self.window_from = 0
        # The window's messages in one list, for turns [flat_from, flat_from + len(flat_sizes))
        # of it, each contributing flat_sizes[i] messages: a history read copies it once and
        # adds only the turns that joined, instead of walking every turn of the window.
        self.flat: list[ModelMessage] = []
        self.flat_sizes: deque[int] = deque()
        self.flat_from = 0
        self.summary: str | None = None
        self.summary_tokens = 0
        self.summarized_turns = 0  # how many turns the summary covers
        self.summary_at: datetime = utc_now()
        self.summary_entry_id: str | None = None  # the stored summary, once there is one
        self.head = 0  # the next log sequence number (persistent stores)
        self.extracted_upto = 0  # turns below this id went to the fact extractor
        # Unix seconds after which the conversation is idle past its ttl, as far as this
        # process knows (another host may have kept it alive since): None without a ttl.
        self.expires_at: float | None = None
        # Which life of the conversation this is: one idle past its ttl is gone, and a turn
        # under the same id starts a new one, which a host's cache of the old must not serve.
        self.generation: str | None = None
        # What short-term strategies remember between reads of this conversation.
        self.strategy_cache: dict[Any, object] = {}

    @property
    def first_in_history(self) -> int:
        """The id of the oldest turn the history still sends (every older one has left it)."""
        return self.summarized_turns + int(self.ledger.window_start) - int(self.ledger.offset)

    @property
    def next_turn_id(self) -> int:
        return self.summarized_turns + len(self.records)

    def _sync_window(self) -> None:
        start = self.ledger.window_start
        window = self.window
        while self.window_from < start and window:
            messages = window.popleft()
            if messages is not None:
                self._freeze(self.window_from - self.ledger.offset, messages)
            self.window_from += 1
        self.window_from = max(self.window_from, start)
        while self.window_from > start:  # the window grew back (a smaller summary)
            self.window_from -= 1
            window.appendleft(None)

    def _freeze(self, index: int, messages: list[ModelMessage]) -> None:
        """Freezes the messages of the retained turn at ``index`` as they leave the window, if
        its record holds them live (a turn given as strings or read from the store does not)."""
        records = self.records
        if 0 <= index < len(records) and records[index][6] is messages:
            record = records[index]
            records[index] = (*record[:6], freeze_messages(messages))

    def append_record(
        self, record: Record, entry_id: str, messages: list[ModelMessage] | None
    ) -> None:
        """Adds the newest turn; ``messages`` are its live objects if the caller has them."""
        self.records.append(record)
        self.entry_ids.append(entry_id)
        self.ledger.push(record[3])
        self.window.append(messages)
        self._sync_window()

    def append(self, turn: ConversationTurn, entry_id: str, *, default_messages: bool) -> None:
        """Adds the newest turn.

        Its messages are kept as the live objects it was given (the list the turn holds, which
        is already memlane's own copy): nothing is serialised while the turn is in the history,
        and it is frozen when it leaves (see :data:`Record`).
        """
        # Those of a turn given as strings only if something has built them already.
        messages = turn.__dict__.get("raw_messages")
        record: Record = (
            turn.turn_id,
            turn.user_prompt,
            turn.assistant_response,
            turn.token_estimate,
            turn.timestamp,
            turn.metadata or None,
            None if default_messages else messages,
        )
        self.append_record(record, entry_id, messages)

    def evict(self, count: int) -> list[str]:
        """Drops the ``count`` oldest turns; returns their store entry ids."""
        evicted = [self.entry_ids.popleft() for _ in range(count)]
        for _ in range(count):
            self.records.popleft()
        self.ledger.pop_front(count)
        self._sync_window()
        return evicted

    def set_summary(self, text: str | None, tokens: int, at: datetime) -> None:
        """Replaces the rolling summary (``tokens`` counted with its prefix); ``None``: the
        turns it covers were erased, and there is no summary."""
        self.summary = text
        self.summary_tokens = tokens
        self.summary_at = at
        self.ledger.set_summary_tokens(tokens)
        self._sync_window()

    def _windowed(self, index: int) -> list[ModelMessage] | None:
        """The live messages of the retained turn at ``index``, if it has them yet."""
        at = self.ledger.offset + index - self.window_from
        return self.window[at] if at >= 0 else None

    def messages(self, index: int) -> list[ModelMessage]:
        """Messages of the retained turn at ``index`` (0 = oldest retained)."""
        at = self.ledger.offset + index - self.window_from
        if at < 0:
            return _unpack(self.records[index])
        messages = self.window[at]
        if messages is None:
            messages = self.window[at] = _unpack(self.records[index])
        return messages

    def turn(self, index: int) -> ConversationTurn:
        """The retained turn at ``index`` as a :class:`ConversationTurn`."""
        turn_id, prompt, response, tokens, at, metadata, payload = self.records[index]
        if payload is None and self._windowed(index) is None:
            return new_turn(  # its messages are the two of its strings, built when read
                turn_id=turn_id,
                user_prompt=prompt,
                assistant_response=response,
                timestamp=at,
                token_estimate=tokens,
                metadata=dict(metadata) if metadata else {},
            )
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
        flat = self._window_messages()
        if self.summary is not None and self.ledger.reserved:
            return [summary_message(self.summary, self.summary_at), *flat]
        return flat.copy()

    def _window_messages(self) -> list[ModelMessage]:
        """:attr:`flat` brought up to the window: turns that left it dropped, new ones added.

        The window only gains turns at its end and loses them at its start, except when it
        grows back at the start (a smaller summary): then the list is rebuilt.
        """
        flat, sizes = self.flat, self.flat_sizes
        gone = self.window_from - self.flat_from
        if gone < 0 or gone > len(sizes):
            flat.clear()
            sizes.clear()
        elif gone:
            dropped = 0
            for _ in range(gone):
                dropped += sizes.popleft()
            del flat[:dropped]
        self.flat_from = self.window_from
        window = self.window
        for at in range(len(sizes), len(window)):
            messages = window[at]
            if messages is None:
                messages = self._decode(at)
            flat.extend(messages)
            sizes.append(len(messages))
        return flat

    def _decode(self, at: int) -> list[ModelMessage]:
        """The messages of window entry ``at``, decoded from its record and kept."""
        messages = _unpack(self.records[self.window_from + at - self.ledger.offset])
        self.window[at] = messages
        return messages

    @property
    def history_tokens(self) -> int:
        """Estimated tokens of :meth:`history`."""
        return int(self.ledger.window_tokens) + int(self.ledger.reserved)


# ---------------------------------------------------------------------------- store entries


def turn_entry(turn: ConversationTurn, entry_id: str, seq: int) -> MemoryEntry:
    """The log event of a turn, at sequence number ``seq``."""
    return MemoryEntry.model_construct(
        entry_id=entry_id,
        scope=MemoryScope.CONVERSATION,
        key=log_key(seq),
        content=turn_json(turn),
        metadata={"kind": "turn"},
        created_at=turn.timestamp,
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
    conversation that begins at log position ``head`` (see :mod:`memlane.conversation.budget`)."""
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
            leftovers.append(entry.entry_id)
        else:
            # Log order is the truth when several processes append: number by it.
            state.append_record(_record(state.next_turn_id, entry), entry.entry_id, None)
    state.head = head
    return state, leftovers
