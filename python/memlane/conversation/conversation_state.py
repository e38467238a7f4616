"""One conversation in memory: compact retained turns, the budget ledger, the live window of
messages and the rolling summary.

How it is kept in a store, as a log of events, is :mod:`memlane.conversation.conversation_log`.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memlane import _backend
from memlane._pure.budget import BudgetLedger
from memlane.conversation.conversation_budget import ConversationBudget
from memlane.conversation.retained_turns import RetainedTurns
from memlane.messages import default_messages, freeze_messages, summary_message, unpack_messages
from memlane.types import ConversationTurn, new_turn, utc_now

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

Record = tuple[int, str, str, int, datetime, "dict[str, Any] | None", Any]
"""A retained turn, compactly: turn_id, user_prompt, assistant_response, token_estimate,
timestamp, metadata (``None`` when empty) and its messages: ``None`` when they are the two
built from the strings; the live list the turn was given while it is in the history; once it
has left, that list frozen (:func:`~memlane.messages.freeze_messages`; the list itself if it
cannot be); the JSON of a turn read back from the store, or of one a persistent store's entry
was made from (the JSON exists then: keeping it costs no freeze).

Only the turns inside the budget window keep live message objects. Everything older is a
tuple of strings and numbers, which Python's cyclic garbage collector stops tracking, so a
100,000-turn conversation does not make every collection walk millions of objects. A turn is
frozen when it leaves the window, not when it is added: nothing reads the frozen form before,
and a turn still in the history costs no serialisation at all. (A persistent store's entry is
the turn's JSON, made once, by :func:`turn_entry`.) Keeping every turn live would spare the
freeze (~7 us a turn with usage and model names; a pickle cost twice that) and the
collector's amortised cost measured only ~5 us a turn more at 100,000 turns; but each
retained turn would add ~9 tracked objects, and a host holding millions of turns would pause
for seconds in every full collection.

Records further out are packed by :class:`~memlane.conversation.retained_turns.RetainedTurns`,
a block of them pickled and compressed together: their text is most of what a host keeps.
"""


def new_ledger(max_tokens: int) -> BudgetLedger:
    """A budget ledger of the active implementation."""
    return _backend.active.BudgetLedger(max_tokens)


def is_pinned(record: Record) -> bool:
    """Whether a retained turn is pinned: kept as ``metadata["pinned"] = True``, so the
    store's log, the transcript and a snapshot keep the flag with the turn."""
    metadata = record[5]
    return metadata is not None and metadata.get("pinned") is True


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

    Pinned turns are never trimmed from the history nor summarised away. The ledger counts
    each as 0 tokens and reserves their tokens beside the summary's, so the window of the
    other turns fits what they leave; a pinned turn older than the window is sent between
    the summary and the window. One that a summary passed over (it folds a run of the oldest
    turns) is kept in :attr:`folded_pins`, and stays in the store.
    """

    __slots__ = (
        "budget",
        "entry_ids",
        "expires_at",
        "extracted_upto",
        "flat",
        "flat_from",
        "flat_sizes",
        "folded_pins",
        "generation",
        "head",
        "ledger",
        "pinned_ids",
        "pinned_tokens",
        "records",
        "strategy_cache",
        "summarized_turns",
        "summary",
        "summary_at",
        "summary_entry_id",
        "summary_sent",
        "summary_tokens",
        "window",
        "window_from",
    )

    def __init__(self, ledger: BudgetLedger, budget: ConversationBudget | None = None) -> None:
        self.ledger = ledger
        # The budget the conversation keeps in the store (None: stored before budgets were
        # kept; the memory's own values apply).
        self.budget = budget
        self.records = RetainedTurns()
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
        self.summary_sent = False  # whether the summary fits the budget beside the pins
        self.pinned_ids: list[int] = []  # ids of the pinned turns, ascending
        self.pinned_tokens = 0  # their tokens, reserved in the ledger
        self.folded_pins: list[Record] = []  # pinned turns older than the summary
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
        records = self.records  # its length, inline: every turn asks
        return self.summarized_turns + records.base + len(records.hot)

    @property
    def total_tokens(self) -> int:
        """Tokens of every turn kept: retained and pinned (the ledger counts pins as 0)."""
        return int(self.ledger.total) + self.pinned_tokens

    def _reserve(self) -> None:
        """Reserves the summary's and the pins' room in the ledger: the pins' always (they
        never leave the prompt), the summary's while both fit."""
        pins = self.pinned_tokens
        ledger = self.ledger
        self.summary_sent = self.summary is not None and bool(
            ledger.set_summary_tokens(self.summary_tokens + pins)
        )
        if not self.summary_sent:
            ledger.set_summary_tokens(pins)
        self._sync_window()

    def _sync_window(self) -> None:
        start = self.ledger.window_start
        if start == self.window_from:  # a turn that pushed none out
            return
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
        records = self.records
        cold = self.window_from - self.ledger.offset
        if cold - records.base >= records.block:  # a block's worth has left the window
            records.settle(cold)

    def _freeze(self, index: int, messages: list[ModelMessage]) -> None:
        """Freezes the messages of the retained turn at ``index`` as they leave the window, if
        its record holds them live (a turn given as strings or read from the store does not)."""
        # A record with live messages is among the newest, never packed yet (see settle).
        hot = self.records.hot
        at = index - self.records.base
        if 0 <= at < len(hot) and hot[at][6] is messages:
            record = hot[at]
            hot[at] = (*record[:6], freeze_messages(messages))

    def append_record(
        self, record: Record, entry_id: str, messages: list[ModelMessage] | None
    ) -> None:
        """Adds the newest turn; ``messages`` are its live objects if the caller has them."""
        self.records.append(record)
        self.entry_ids.append(entry_id)
        self.window.append(messages)
        metadata = record[5]  # is_pinned, inline: this is every turn's path
        if metadata is not None and metadata.get("pinned") is True:
            self.ledger.push(0)
            self._add_pin(record)
            self._reserve()
        else:
            self.ledger.push(record[3])
        self._sync_window()

    def _add_pin(self, record: Record) -> None:
        insort(self.pinned_ids, record[0])
        self.pinned_tokens += record[3]

    def add_folded_pin(self, record: Record) -> None:
        """Keeps a pinned turn older than the summary (a restored or imported one)."""
        self.folded_pins.append(record)
        self.folded_pins.sort(key=lambda kept: kept[0])
        self._add_pin(record)
        self._reserve()

    def pin(self, index: int) -> None:
        """Pins the retained turn at ``index``: its tokens move from the ledger's window to
        the room reserved beside the summary, so the ledger is made again (pins are rare)."""
        record = self.records[index]
        if is_pinned(record):
            return
        record = (*record[:5], {**(record[5] or {}), "pinned": True}, record[6])
        self.records[index] = record
        self._add_pin(record)
        ledger = new_ledger(int(self.ledger.max_tokens))
        for kept in self.records:
            ledger.push(0 if is_pinned(kept) else kept[3])
        self.ledger = ledger
        start, end = int(ledger.window_start), int(ledger.end)
        # The records of the turns in the window hold their live messages, if any.
        self.window = deque(
            payload if isinstance(payload, list) else None
            for payload in (self.records[i][6] for i in range(start, end))
        )
        self.window_from = start
        self.flat, self.flat_sizes, self.flat_from = [], deque(), start
        self._reserve()

    def append(
        self,
        turn: ConversationTurn,
        entry_id: str,
        *,
        default_messages: bool,
        stored: bytes | None = None,
    ) -> None:
        """Adds the newest turn.

        Its messages are kept as the live objects it was given (the list the turn holds, which
        is already memlane's own copy): nothing is serialised while the turn is in the history,
        and it is frozen when it leaves (see :data:`Record`). ``stored`` is their JSON when a
        persistent store's entry made it: the record keeps that instead, and nothing is frozen.
        """
        # Those of a turn given as strings only if something has built them already.
        values = turn.__dict__
        messages = values.get("raw_messages")
        record: Record = (
            values["turn_id"],
            values["user_prompt"],
            values["assistant_response"],
            values["token_estimate"],
            values["timestamp"],
            values["metadata"] or None,
            None if default_messages else messages if stored is None else stored,
        )
        self.append_record(record, entry_id, messages)

    def evict(self, count: int) -> list[str]:
        """Drops the ``count`` oldest turns; returns their store entry ids. Pinned ones among
        them move to :attr:`folded_pins`, and their entries stay."""
        evicted: list[str] = []
        for _ in range(count):
            entry_id = self.entry_ids.popleft()
            record = self.records.popleft()
            if is_pinned(record):
                self.folded_pins.append(record)
            else:
                evicted.append(entry_id)
        self.ledger.pop_front(count)
        self._sync_window()
        return evicted

    def set_summary(self, text: str | None, tokens: int, at: datetime) -> None:
        """Replaces the rolling summary (``tokens`` counted with its prefix); ``None``: the
        turns it covers were erased, and there is no summary."""
        self.summary = text
        self.summary_tokens = tokens
        self.summary_at = at
        self._reserve()

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

    def folded_pin_turns(self) -> list[ConversationTurn]:
        """The pinned turns older than the summary, oldest first."""
        return [record_turn(record) for record in self.folded_pins]

    def kept_turns(self) -> list[ConversationTurn]:
        """Every turn the conversation keeps: pinned ones the summary passed over, then the
        retained ones."""
        return [*self.folded_pin_turns(), *self.turns()]

    @staticmethod
    def folded_pin_messages(record: Record) -> list[ModelMessage]:
        """The messages of a pinned turn the summary passed over."""
        return _unpack(record)

    def pinned_outside_window(self) -> list[list[ModelMessage]]:
        """The messages of the pinned turns older than the window, oldest first."""
        found = [_unpack(record) for record in self.folded_pins]
        first_in_window = self.first_in_history
        first = self.summarized_turns
        found.extend(
            self.messages(turn_id - first)
            for turn_id in self.pinned_ids
            if first <= turn_id < first_in_window
        )
        return found

    def history(self) -> list[ModelMessage]:
        """Summary message first (while it fits), then the pinned turns older than the
        window, then the window's messages."""
        flat = self._window_messages()
        head: list[ModelMessage] = []
        if self.summary_sent and self.summary is not None:
            head.append(summary_message(self.summary, self.summary_at))
        if self.pinned_ids:
            for messages in self.pinned_outside_window():
                head.extend(messages)
        return [*head, *flat] if head else flat.copy()

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
            if messages is None:  # decoded from its record, and kept
                record = self.records[self.window_from + at - self.ledger.offset]
                payload = record[6]
                messages = window[at] = (
                    default_messages(record[1], record[2], record[4])
                    if payload is None
                    else unpack_messages(payload)
                )
            flat.extend(messages)
            sizes.append(len(messages))
        return flat

    @property
    def history_tokens(self) -> int:
        """Estimated tokens of :meth:`history`."""
        return int(self.ledger.window_tokens) + int(self.ledger.reserved)


def record_turn(record: Record) -> ConversationTurn:
    """A record as a :class:`ConversationTurn` (its messages decoded)."""
    turn_id, prompt, response, tokens, at, metadata, _ = record
    return new_turn(
        turn_id=turn_id,
        user_prompt=prompt,
        assistant_response=response,
        raw_messages=_unpack(record),
        timestamp=at,
        token_estimate=tokens,
        metadata=dict(metadata) if metadata else {},
    )


def pinned_record(turn: ConversationTurn) -> Record:
    """A pinned turn older than the summary as its state keeps it (messages frozen)."""
    return (
        turn.turn_id,
        turn.user_prompt,
        turn.assistant_response,
        turn.token_estimate,
        turn.timestamp,
        {**turn.metadata, "pinned": True},
        freeze_messages(turn.raw_messages),
    )
