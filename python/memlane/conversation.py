"""Conversation memory: per-conversation history kept inside a token budget.

Turns are evicted FIFO, whole: the history is the longest run of most recent turns whose token
estimates fit ``max_tokens`` (after the rolling summary, when there is one), so a tool call
always travels with its return. Running totals and a moving window (the budget ledger, Rust
when the extension is active) make ``add_turn`` and ``get_message_history`` O(1) amortised in
the length of the conversation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)

from memlane import _backend
from memlane.errors import ConversationNotFoundError, CorruptStoreError
from memlane.store import InMemoryStore, MemoryStore, dumps_json
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope, as_utc, new_turn, utc_now

logger = logging.getLogger("memlane")

Summarizer = Callable[[list[ConversationTurn]], "str | Awaitable[str]"]
"""Folds turns into a summary. It receives the previous summary (if any) as a leading turn
with an empty ``user_prompt`` and ``metadata={"summary": True}``, then the evicted turns."""

SUMMARY_KEY = "summary"
INDEX_NAMESPACE = "conversations"
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


def _ledger(max_tokens: int) -> Any:
    return _backend.active.BudgetLedger(max_tokens)


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def _check_cid(conversation_id: object) -> str:
    if not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be str, not {type(conversation_id).__name__}")
    if not conversation_id or "\x00" in conversation_id:
        raise ValueError(f"conversation_id must be a non-empty string without NUL, got {conversation_id!r}")
    return conversation_id


def _check_str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type(value).__name__}")
    return value


def _check_messages(raw_messages: object) -> list[ModelMessage]:
    if not isinstance(raw_messages, list | tuple):
        raise TypeError(f"raw_messages must be a list of ModelMessage, not {type(raw_messages).__name__}")
    for i, message in enumerate(raw_messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise TypeError(
                f"raw_messages[{i}] must be ModelRequest or ModelResponse, not {type(message).__name__}"
            )
    return list(raw_messages)


def _content_texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, Sequence):
        for item in content:
            if isinstance(item, str):
                yield item
            elif (url := getattr(item, "url", None)) is not None:
                yield str(url)


def message_texts(messages: Iterable[ModelMessage]) -> list[str]:
    """Every piece of text a model is sent for these messages.

    Prompts, system prompts, text, thinking, tool-call names and arguments, tool returns and
    retry feedback all count: a turn's estimate must cover what the request will carry.
    """
    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                texts.append(part.tool_name)
                texts.append(part.args_as_json_str())
            elif isinstance(part, BaseToolReturnPart):
                texts.append(part.tool_name)
                texts.append(part.model_response_str())
            elif isinstance(part, RetryFeedbackPart | RetryPromptPart) and not isinstance(part.content, str):
                texts.append(part.model_response())  # retry feedback with validation errors
            else:
                texts.extend(_content_texts(getattr(part, "content", None)))
    return texts


def summary_message(summary: str, created_at: datetime) -> ModelRequest:
    """The message that carries a rolling summary at the head of the history.

    Its timestamp is the summary's own, so the same history compares equal however often
    (and in whichever process) it is rebuilt.
    """
    return ModelRequest(parts=[SystemPromptPart(content=SUMMARY_PREFIX + summary, timestamp=created_at)])


_Record = tuple[int, str, str, int, datetime, "dict[str, Any] | None", Any]
"""A retained turn, compactly: turn_id, user_prompt, assistant_response, token_estimate,
timestamp, metadata (``None`` when empty) and its messages: ``None`` when they are the two
built from the strings, else their JSON (or, if they cannot be serialised, the list itself).

Only the turns inside the budget window keep live message objects. Everything older is a
tuple of strings and numbers, which Python's cyclic garbage collector stops tracking, so a
100,000-turn conversation does not make every collection walk millions of objects.
"""


def _default_messages(user_prompt: str, assistant_response: str, at: datetime) -> list[ModelMessage]:
    # Timestamps are the turn's, so rebuilding them later yields equal messages.
    return [
        ModelRequest(parts=[UserPromptPart(content=user_prompt, timestamp=at)]),
        ModelResponse(parts=[TextPart(content=assistant_response)], timestamp=at),
    ]


def _pack(messages: list[ModelMessage]) -> Any:
    try:
        return ModelMessagesTypeAdapter.dump_json(messages)
    except ValueError:  # content pydantic cannot serialise: keep the objects themselves
        return list(messages)


def _unpack(record: _Record) -> list[ModelMessage]:
    payload = record[6]
    if payload is None:
        return _default_messages(record[1], record[2], record[4])
    if isinstance(payload, bytes | str):
        return ModelMessagesTypeAdapter.validate_json(payload)
    return list(payload)


class _State:
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

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.records: deque[_Record] = deque()
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
        if self.window_from < start:
            self.window_from = start
        offset = self.ledger.offset
        while self.window_from > start:  # the window grew back (a smaller summary)
            self.window_from -= 1
            window.appendleft(_unpack(self.records[self.window_from - offset]))

    def append_record(self, record: _Record, entry_id: str, messages: list[ModelMessage] | None) -> None:
        """Adds the newest turn; ``messages`` are its live objects if the caller has them."""
        self.records.append(record)
        self.entry_ids.append(entry_id)
        self.ledger.push(record[3])
        self.window.append(messages if messages is not None else _unpack(record))
        self._sync_window()

    def append(self, turn: ConversationTurn, entry_id: str, *, default_messages: bool) -> None:
        """Adds the newest turn."""
        record: _Record = (
            turn.turn_id,
            turn.user_prompt,
            turn.assistant_response,
            turn.token_estimate,
            turn.timestamp,
            turn.metadata or None,
            None if default_messages else _pack(turn.raw_messages),
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

    def set_summary_tokens(self, tokens: int) -> None:
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
        return [self.turn(i) for i in range(len(self.records))]

    def history(self) -> list[ModelMessage]:
        history: list[ModelMessage] = []
        if self.summary is not None and self.ledger.reserved:
            history.append(summary_message(self.summary, self.summary_at))
        for messages in self.window:
            history.extend(messages)
        return history


class ConversationMemory:
    """Chat histories kept inside a token budget, with optional rolling summaries.

    Args:
        max_tokens: Budget of the history returned by :meth:`get_message_history`.
        summarize_threshold: When the retained turns of a conversation total more tokens than
            this and a ``summarizer`` is set, the oldest turns are folded into the summary
            until the total is back under it (the newest turn always stays).
        estimator: Counts tokens; exact ``o200k_base`` by default.
        summarizer: ``summarizer(turns) -> str`` (or an awaitable of it); ``None``: never
            summarise.
        store: Where turns and summaries persist; a private in-memory store by default. On a
            persistent store a new instance after a restart returns the identical history.

    Raises:
        TypeError: A budget that is not an ``int``.
        ValueError: A budget that is not positive.
    """

    def __init__(
        self,
        *,
        max_tokens: int = 4096,
        summarize_threshold: int = 3072,
        estimator: TokenEstimator | None = None,
        summarizer: Summarizer | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        self.max_tokens = _check_positive_int(max_tokens, "max_tokens")
        self.summarize_threshold = _check_positive_int(summarize_threshold, "summarize_threshold")
        if summarizer is not None and not callable(summarizer):
            raise TypeError(f"summarizer must be callable, not {type(summarizer).__name__}")
        self.estimator = estimator if estimator is not None else TokenEstimator()
        self.summarizer = summarizer
        bind_estimator = getattr(summarizer, "bind_estimator", None)
        if callable(bind_estimator):
            bind_estimator(self.estimator)
        self.store: MemoryStore = store if store is not None else InMemoryStore()
        # Turns are mirrored into the store only where they outlive the process; an in-memory
        # store would just hold a second copy of what the cached state already has.
        self._persistent = bool(getattr(self.store, "persistent", True))
        self._states: dict[str, _State] = {}
        self._lock = threading.RLock()
        self._async_locks: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ persistence

    @staticmethod
    def namespace(conversation_id: str) -> str:
        """The store namespace of a conversation."""
        return f"conversation:{conversation_id}"

    def _turn_entry(self, turn: ConversationTurn, entry_id: str) -> MemoryEntry:
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

    def _summary_entry(self, state: _State, evicted_ids: list[str]) -> MemoryEntry:
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

    def _index_entry(self, conversation_id: str) -> MemoryEntry:
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

    def _restore(self, entries: list[MemoryEntry]) -> tuple[_State, list[str]]:
        """Rebuilds a conversation from its stored entries (store order is turn order).

        Returns the state and the ids of turn entries an interrupted eviction left behind:
        they are already in the summary and are deleted by the caller.
        """
        state = _State(_ledger(self.max_tokens))
        stale: set[str] = set()
        turn_entries: list[MemoryEntry] = []
        for entry in entries:
            if entry.key == SUMMARY_KEY:
                data = entry.content
                state.summary = data["text"]
                state.summary_tokens = int(data["tokens"])
                state.summarized_turns = int(data["summarized_turns"])
                state.summary_entry_id = entry.entry_id
                state.summary_at = datetime.fromisoformat(data["created_at"])
                stale = set(data.get("evicted_entry_ids", ()))
            elif entry.metadata.get("kind") == "turn":
                turn_entries.append(entry)
        leftovers = [e.entry_id for e in turn_entries if e.entry_id in stale]
        live = [e for e in turn_entries if e.entry_id not in stale]
        if state.summary is not None:
            state.set_summary_tokens(state.summary_tokens)
        for entry in live:
            data = entry.content
            try:
                record: _Record = (
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

    def _state(self, conversation_id: str, *, create: bool) -> _State | None:
        """The cached state, loading it from the store on first access."""
        state = self._states.get(conversation_id)
        if state is not None:
            return state
        if not self._persistent:
            if not create:
                return None
            state = self._states[conversation_id] = _State(_ledger(self.max_tokens))
            return state
        entries = self.store.load(self.namespace(conversation_id))
        known = bool(entries) or self.store.load_by_key(INDEX_NAMESPACE, conversation_id) is not None
        if not known and not create:
            return None
        state, leftovers = self._restore(entries)
        for entry_id in leftovers:
            self.store.delete(self.namespace(conversation_id), entry_id)
        if not known:
            self.store.save(INDEX_NAMESPACE, self._index_entry(conversation_id))
        self._states[conversation_id] = state
        return state

    async def _astate(self, conversation_id: str, *, create: bool) -> _State | None:
        state = self._states.get(conversation_id)
        if state is not None or not self._persistent:
            return self._state(conversation_id, create=create)
        entries = await self.store.async_load(self.namespace(conversation_id))
        known = bool(entries) or (
            await self.store.async_load_by_key(INDEX_NAMESPACE, conversation_id) is not None
        )
        if not known and not create:
            return None
        with self._lock:
            state = self._states.get(conversation_id)
            if state is not None:
                return state
            state, leftovers = self._restore(entries)
            self._states[conversation_id] = state
        for entry_id in leftovers:
            await self.store.async_delete(self.namespace(conversation_id), entry_id)
        if not known:
            await self.store.async_save(INDEX_NAMESPACE, self._index_entry(conversation_id))
        return state

    def _async_lock(self, conversation_id: str) -> asyncio.Lock:
        lock = self._async_locks.get(conversation_id)
        if lock is None:
            lock = self._async_locks.setdefault(conversation_id, asyncio.Lock())
        return lock

    # ------------------------------------------------------------------ building turns

    def _build_turn(
        self,
        state: _State,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None,
        metadata: dict[str, Any] | None,
    ) -> ConversationTurn:
        at = utc_now()
        if raw_messages is None:
            raw_messages = _default_messages(user_prompt, assistant_response, at)
            tokens = sum(self.estimator.estimate_many([user_prompt, assistant_response]))
        else:
            tokens = sum(self.estimator.estimate_many(message_texts(raw_messages)))
        return new_turn(
            turn_id=state.next_turn_id,
            user_prompt=user_prompt,
            assistant_response=assistant_response,
            raw_messages=raw_messages,
            timestamp=at,
            token_estimate=tokens,
            metadata=dict(metadata) if metadata else {},
        )

    def _check_turn(
        self,
        conversation_id: object,
        user_prompt: object,
        assistant_response: object,
        raw_messages: object,
        metadata: object,
    ) -> tuple[str, list[ModelMessage] | None]:
        """Validates add_turn's arguments before anything is stored."""
        cid = _check_cid(conversation_id)
        _check_str(user_prompt, "user_prompt")
        _check_str(assistant_response, "assistant_response")
        messages = None if raw_messages is None else _check_messages(raw_messages)
        self._check_metadata(metadata)
        return cid, messages

    def _check_metadata(self, metadata: object) -> None:
        if metadata is None:
            return
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata must be dict, not {type(metadata).__name__}")
        if self._persistent:
            dumps_json(metadata, key=None, field="metadata")

    def _plan_eviction(self, state: _State) -> int:
        """How many of the oldest turns to fold into the summary (0: none)."""
        if self.summarizer is None or state.ledger.total <= self.summarize_threshold:
            return 0
        excess = state.ledger.total - self.summarize_threshold
        count = 0
        freed = 0
        # The newest turn always stays, even when it alone is over the threshold.
        records = state.records
        while freed < excess and count < len(records) - 1:
            freed += records[count][3]
            count += 1
        return count

    def _summary_input(self, state: _State, count: int) -> list[ConversationTurn]:
        turns: list[ConversationTurn] = []
        if state.summary is not None:
            turns.append(
                ConversationTurn(
                    turn_id=0,
                    user_prompt="",
                    assistant_response=state.summary,
                    raw_messages=[],
                    token_estimate=state.summary_tokens,
                    metadata={"summary": True},
                )
            )
        turns.extend(state.turn(i) for i in range(count))
        return turns

    def _apply_summary(self, state: _State, count: int, summary: object) -> list[str]:
        if not isinstance(summary, str):
            raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
        evicted = state.evict(count)
        state.summary = summary
        state.summary_tokens = self.estimator.estimate(SUMMARY_PREFIX + summary)
        state.summarized_turns += count
        state.summary_at = utc_now()
        state.set_summary_tokens(state.summary_tokens)
        return evicted

    # ------------------------------------------------------------------ public API

    def new_conversation(self) -> str:
        """Starts a conversation and returns its id."""
        conversation_id = uuid.uuid4().hex
        with self._lock:
            self._state(conversation_id, create=True)
        return conversation_id

    async def async_new_conversation(self) -> str:
        """Async :meth:`new_conversation`."""
        conversation_id = uuid.uuid4().hex
        await self._astate(conversation_id, create=True)
        return conversation_id

    def add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """Appends a turn (creating the conversation if needed) and keeps the budget.

        Args:
            conversation_id: The conversation; an unknown id starts a new one.
            user_prompt: What the user said.
            assistant_response: What the assistant answered.
            raw_messages: The turn's pydantic-ai messages (tool calls included); built from
                the two strings when omitted.
            metadata: Free-form annotations stored with the turn.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            TypeError: An argument of the wrong type (nothing is stored).
            UnstorableValueError: ``metadata`` cannot be persisted (nothing is stored).
        """
        cid, messages = self._check_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata
        )
        with self._lock:
            state = self._state(cid, create=True)
            assert state is not None
            turn = self._build_turn(state, user_prompt, assistant_response, messages, metadata)
            entry_id = ""
            if self._persistent:
                entry_id = uuid.uuid4().hex
                self.store.save(self.namespace(cid), self._turn_entry(turn, entry_id))
            state.append(turn, entry_id, default_messages=messages is None)
            count = self._plan_eviction(state)
            if count:
                self._summarize_sync(cid, state, count)
        return turn

    def _summarize_sync(self, cid: str, state: _State, count: int) -> None:
        assert self.summarizer is not None
        try:
            summary = self.summarizer(self._summary_input(state, count))
            if inspect.isawaitable(summary):
                summary = _run_awaitable(summary)
        except Exception:
            logger.warning("memlane: summarizer failed; turns kept unsummarised", exc_info=True)
            return
        self._commit_summary(cid, state, count, summary)

    def _commit_summary(self, cid: str, state: _State, count: int, summary: object) -> None:
        evicted = self._apply_summary(state, count, summary)
        if not self._persistent:
            return
        namespace = self.namespace(cid)
        # The summary (naming what it replaced) lands first: a crash before the deletes
        # leaves turns that a restart recognises as summarised, never a gap.
        self.store.save(namespace, self._summary_entry(state, evicted))
        for entry_id in evicted:
            self.store.delete(namespace, entry_id)

    async def async_add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """Async :meth:`add_turn`; store I/O and an async summarizer are awaited."""
        cid, messages = self._check_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata
        )
        async with self._async_lock(cid):
            state = await self._astate(cid, create=True)
            assert state is not None
            turn = self._build_turn(state, user_prompt, assistant_response, messages, metadata)
            entry_id = ""
            if self._persistent:
                entry_id = uuid.uuid4().hex
                await self.store.async_save(self.namespace(cid), self._turn_entry(turn, entry_id))
            with self._lock:
                state.append(turn, entry_id, default_messages=messages is None)
                count = self._plan_eviction(state)
            if count:
                await self._summarize_async(cid, state, count)
        return turn

    async def _summarize_async(self, cid: str, state: _State, count: int) -> None:
        assert self.summarizer is not None
        turns = self._summary_input(state, count)
        try:
            asummarize = getattr(self.summarizer, "asummarize", None)
            summary = await asummarize(turns) if asummarize else self.summarizer(turns)
            if inspect.isawaitable(summary):
                summary = await summary
        except Exception:
            logger.warning("memlane: summarizer failed; turns kept unsummarised", exc_info=True)
            return
        with self._lock:
            evicted = self._apply_summary(state, count, summary)
        if not self._persistent:
            return
        namespace = self.namespace(cid)
        await self.store.async_save(namespace, self._summary_entry(state, evicted))
        for entry_id in evicted:
            await self.store.async_delete(namespace, entry_id)

    def _history(self, state: _State | None) -> list[ModelMessage]:
        return [] if state is None else state.history()

    def get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """The messages to send with the next request: summary first, then whole recent turns.

        The estimates of what is returned sum to at most ``max_tokens``. An unknown
        conversation has an empty history.
        """
        cid = _check_cid(conversation_id)
        with self._lock:
            return self._history(self._state(cid, create=False))

    async def async_get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """Async :meth:`get_message_history`."""
        state = await self._astate(_check_cid(conversation_id), create=False)
        with self._lock:
            return self._history(state)

    def get_history_tokens(self, conversation_id: str) -> int:
        """Estimated tokens of :meth:`get_message_history` (summary included)."""
        with self._lock:
            state = self._state(_check_cid(conversation_id), create=False)
            return 0 if state is None else state.ledger.window_tokens + state.ledger.reserved

    def get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Retained turns (not yet summarised), oldest first."""
        with self._lock:
            state = self._state(_check_cid(conversation_id), create=False)
            return [] if state is None else state.turns()

    async def async_get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Async :meth:`get_turns`."""
        state = await self._astate(_check_cid(conversation_id), create=False)
        return [] if state is None else state.turns()

    def get_total_tokens(self, conversation_id: str) -> int:
        """Sum of the token estimates of the retained turns (the summary excluded)."""
        with self._lock:
            state = self._state(_check_cid(conversation_id), create=False)
            return 0 if state is None else int(state.ledger.total)

    def get_summary(self, conversation_id: str) -> str | None:
        """The rolling summary of evicted turns, or ``None``."""
        with self._lock:
            state = self._state(_check_cid(conversation_id), create=False)
            return None if state is None else state.summary

    def clear(self, conversation_id: str) -> None:
        """Forgets a conversation, in memory and in the store."""
        cid = _check_cid(conversation_id)
        with self._lock:
            self._states.pop(cid, None)
            if not self._persistent:
                return
            self.store.clear(self.namespace(cid))
            index = self.store.load_by_key(INDEX_NAMESPACE, cid)
            if index is not None:
                self.store.delete(INDEX_NAMESPACE, index.entry_id)

    async def async_clear(self, conversation_id: str) -> None:
        """Async :meth:`clear`."""
        cid = _check_cid(conversation_id)
        with self._lock:
            self._states.pop(cid, None)
        if not self._persistent:
            return
        await self.store.async_clear(self.namespace(cid))
        index = await self.store.async_load_by_key(INDEX_NAMESPACE, cid)
        if index is not None:
            await self.store.async_delete(INDEX_NAMESPACE, index.entry_id)

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of every known conversation (in this process and in the store)."""
        with self._lock:
            if not self._persistent:
                return list(self._states)
            stored = [e.key for e in self.store.load(INDEX_NAMESPACE) if e.key is not None]
            return list(dict.fromkeys([*stored, *self._states]))

    def clear_all(self) -> None:
        """Forgets every conversation."""
        for cid in self.conversation_ids:
            self.clear(cid)

    async def async_clear_all(self) -> None:
        """Async :meth:`clear_all`."""
        stored = []
        if self._persistent:
            stored = [e.key for e in await self.store.async_load(INDEX_NAMESPACE) if e.key]
        for cid in dict.fromkeys([*stored, *self._states]):
            await self.async_clear(cid)

    # ------------------------------------------------------------------ export / import

    def export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """A JSON-ready snapshot of a conversation.

        Returns:
            ``conversation_id``, ``turns`` (``turn_id``, ``user_prompt``,
            ``assistant_response``, ``token_estimate``, ``metadata``, ``timestamp`` and
            ``raw_messages`` serialised with pydantic-ai's ``ModelMessagesTypeAdapter``),
            ``summary``, ``summarized_turns`` and ``total_tokens``.

        Raises:
            ConversationNotFoundError: (a ``KeyError``) the id is unknown.
        """
        cid = _check_cid(conversation_id)
        with self._lock:
            state = self._state(cid, create=False)
            if state is None:
                raise ConversationNotFoundError(f"unknown conversation_id {cid!r}")
            return {
                "conversation_id": cid,
                "turns": [
                    {
                        "turn_id": t.turn_id,
                        "user_prompt": t.user_prompt,
                        "assistant_response": t.assistant_response,
                        "token_estimate": t.token_estimate,
                        "metadata": t.metadata,
                        "timestamp": t.timestamp.isoformat(),
                        "raw_messages": ModelMessagesTypeAdapter.dump_python(t.raw_messages, mode="json"),
                    }
                    for t in state.turns()
                ],
                "summary": state.summary,
                "summary_created_at": state.summary_at.isoformat() if state.summary is not None else None,
                "summarized_turns": state.summarized_turns,
                "total_tokens": int(state.ledger.total),
            }

    async def async_export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Async :meth:`export_conversation`."""
        await self._astate(_check_cid(conversation_id), create=False)
        return self.export_conversation(conversation_id)

    def _parse_import(
        self, data: object
    ) -> tuple[str | None, str | None, int, list[tuple[ConversationTurn, str, bool]]]:
        if not isinstance(data, dict):
            raise TypeError(f"data must be dict, not {type(data).__name__}")
        turns_data = data.get("turns", [])
        if not isinstance(turns_data, list):
            raise ValueError(f"data['turns'] must be a list, got {type(turns_data).__name__}")
        summary = data.get("summary")
        if summary is not None and not isinstance(summary, str):
            raise ValueError(f"data['summary'] must be str or None, got {type(summary).__name__}")
        summarized = data.get("summarized_turns", 0)
        if isinstance(summarized, bool) or not isinstance(summarized, int) or summarized < 0:
            raise ValueError(f"data['summarized_turns'] must be an int >= 0, got {summarized!r}")
        source_id = data.get("conversation_id")
        parsed: list[tuple[ConversationTurn, str, bool]] = []
        for i, item in enumerate(turns_data):
            where = f"data['turns'][{i}]"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be a dict, got {type(item).__name__}")
            for name in ("user_prompt", "assistant_response"):
                if not isinstance(item.get(name), str):
                    raise ValueError(f"{where}['{name}'] must be str, got {item.get(name)!r}")
            try:
                raw = item.get("raw_messages")
                stamp = item.get("timestamp")
                at = as_utc(datetime.fromisoformat(stamp)) if isinstance(stamp, str) else utc_now()
                messages = (
                    _default_messages(item["user_prompt"], item["assistant_response"], at)
                    if not raw
                    else ModelMessagesTypeAdapter.validate_python(raw)
                )
                estimate = item.get("token_estimate")
                if estimate is None:
                    estimate = sum(self.estimator.estimate_many(message_texts(messages)))
                turn = ConversationTurn(
                    turn_id=summarized + i,
                    user_prompt=item["user_prompt"],
                    assistant_response=item["assistant_response"],
                    raw_messages=messages,
                    token_estimate=estimate,
                    metadata=item.get("metadata") or {},
                    timestamp=at,
                )
            except ValueError as exc:
                raise ValueError(f"{where} is invalid: {exc}") from exc
            parsed.append((turn, uuid.uuid4().hex, bool(raw)))
        return (source_id if isinstance(source_id, str) else None), summary, summarized, parsed

    def import_conversation(self, data: dict[str, Any], *, conversation_id: str | None = None) -> str:
        """Loads an :meth:`export_conversation` snapshot; returns the conversation id.

        Missing token estimates are re-computed; turns without ``raw_messages`` are rebuilt
        from their prompt and response.

        Args:
            data: The snapshot.
            conversation_id: Import under this id instead of the snapshot's (or a new one).

        Raises:
            ValueError: The snapshot is malformed, or the id already holds a conversation
                (nothing is overwritten).
        """
        source_id, summary, summarized, parsed = self._parse_import(data)
        cid = _check_cid(conversation_id or source_id or uuid.uuid4().hex)
        with self._lock:
            if self._state(cid, create=False) is not None:
                raise ValueError(f"conversation_id {cid!r} already exists; pass conversation_id= to import under a new id")
            state = self._state(cid, create=True)
            assert state is not None
            state.summarized_turns = summarized
            entries = []
            if summary is not None:
                state.summary = summary
                if isinstance(data.get("summary_created_at"), str):
                    state.summary_at = datetime.fromisoformat(data["summary_created_at"])
                state.summary_tokens = self.estimator.estimate(SUMMARY_PREFIX + summary)
                state.set_summary_tokens(state.summary_tokens)
                entries.append(self._summary_entry(state, []))
            for turn, entry_id, _ in parsed:
                entries.append(self._turn_entry(turn, entry_id))
            if self._persistent:
                _save_many(self.store, self.namespace(cid), entries)
            for turn, entry_id, given in parsed:
                state.append(turn, entry_id, default_messages=not given)
        return cid

    async def async_import_conversation(
        self, data: dict[str, Any], *, conversation_id: str | None = None
    ) -> str:
        """Async :meth:`import_conversation` (store I/O in a worker thread)."""
        return await asyncio.to_thread(self.import_conversation, data, conversation_id=conversation_id)


def _save_many(store: MemoryStore, namespace: str, entries: list[MemoryEntry]) -> None:
    save_many = getattr(store, "save_many", None)
    if save_many is not None:
        save_many(namespace, entries)
    else:
        for entry in entries:
            store.save(namespace, entry)


def _run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Runs an async summarizer's result from sync code.

    Outside an event loop it runs on a fresh loop. Inside one, blocking would deadlock it:
    callers there should use the ``async_*`` methods, and this says so.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        async def wrap() -> Any:
            return await awaitable

        return asyncio.run(wrap())
    if inspect.iscoroutine(awaitable):
        awaitable.close()
    raise RuntimeError(
        "an async summarizer cannot run from sync add_turn inside a running event loop; "
        "use await async_add_turn(...)"
    )
