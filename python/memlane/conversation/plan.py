"""The conversation logic, written once and free of I/O.

Every operation of :class:`~memlane.conversation.ConversationMemory` is a plan here: a
generator that yields the store calls it needs (see :mod:`memlane._runner`) and returns the
operation's result. The public sync methods run a plan with blocking store calls, the async
methods await the same plan's calls, and both hold the conversation's one
:class:`~memlane._locks.HybridLock` for the whole plan, so threads and tasks that mix on a
conversation are serialised by a single discipline.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from pydantic_ai.messages import ModelMessage

from memlane._locks import LockTable
from memlane._runner import Plan, StoreCall, Summarize, Summarizer
from memlane._validate import check_identifier
from memlane.conversation.snapshot import ParsedSnapshot
from memlane.conversation.state import (
    INDEX_NAMESPACE,
    ConversationState,
    index_entry,
    namespace,
    new_ledger,
    restore,
    summary_entry,
    turn_entry,
)
from memlane.errors import ConversationNotFoundError
from memlane.messages import SUMMARY_PREFIX, default_messages, message_texts
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, MemoryEntry, new_turn, utc_now

logger = logging.getLogger("memlane")

T = TypeVar("T")


def check_cid(conversation_id: object) -> str:
    """A conversation id: a non-empty ``str`` without NUL."""
    return check_identifier(conversation_id, "conversation_id")


class NewTurn(NamedTuple):
    """add_turn's validated arguments and the turn's token estimate."""

    cid: str
    user_prompt: str
    assistant_response: str
    messages: list[ModelMessage] | None
    metadata: dict[str, Any] | None
    tokens: int


class ConversationLogic:
    """Per-conversation states and the plans that read and change them.

    Subclasses supply ``max_tokens``, ``summarize_threshold``, ``estimator``,
    ``summarizer`` and whether the store outlives the process.
    """

    max_tokens: int
    summarize_threshold: int
    estimator: TokenEstimator
    summarizer: Summarizer | None
    _persistent: bool
    _states: dict[str, ConversationState]
    _locks: LockTable
    _count_texts: Callable[[list[str]], list[int]]

    # ------------------------------------------------------------------ loading

    def _state_plan(self, cid: str, *, create: bool) -> Plan[ConversationState | None]:
        """The cached state, loaded from the store on first access (created if asked)."""
        state = self._states.get(cid)
        if state is not None:
            return state
        if not self._persistent:
            if create:
                state = self._states[cid] = ConversationState(new_ledger(self.max_tokens))
            return state
        ns = namespace(cid)
        entries: list[MemoryEntry] = yield StoreCall("load", (ns,))
        known = (
            bool(entries) or (yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))) is not None
        )
        if not known and not create:
            return None
        state, leftovers = restore(entries, self.max_tokens)
        for entry_id in leftovers:
            yield StoreCall("delete", (ns, entry_id))
        if not known:
            yield StoreCall("save", (INDEX_NAMESPACE, index_entry(cid)))
        self._states[cid] = state
        return state

    def _read_plan(
        self, conversation_id: str, read: Callable[[ConversationState | None], T]
    ) -> Plan[T]:
        """``read(state)`` under the conversation's lock (``state`` is ``None`` if unknown)."""
        cid = check_cid(conversation_id)
        yield self._locks[cid]
        state = self._states.get(cid)
        if state is None:  # reads are the hot path: no nested plan when the state is in hand
            state = yield from self._state_plan(cid, create=False)
        return read(state)

    def _existing_plan(self, cid: str) -> Plan[ConversationState]:
        """The state of a conversation that must exist."""
        state = yield from self._state_plan(cid, create=False)
        if state is None:
            raise ConversationNotFoundError(f"unknown conversation_id {cid!r}")
        return state

    # ------------------------------------------------------------------ adding turns

    def _count(
        self, user_prompt: str, assistant_response: str, messages: list[ModelMessage] | None
    ) -> int:
        """A turn's token estimate; pure, so it is counted before the lock is taken."""
        texts = [user_prompt, assistant_response] if messages is None else message_texts(messages)
        try:
            return sum(self._count_texts(texts))
        except UnicodeEncodeError:  # a lone surrogate: the estimator's own path repairs it
            return sum(self.estimator.estimate_many(texts))

    def _add_turn_plan(self, new: NewTurn) -> Plan[ConversationTurn]:
        cid = new.cid
        yield self._locks[cid]
        state = self._states.get(cid)
        if state is None:  # first use here: load or create it (a generator costs on every turn)
            state = yield from self._state_plan(cid, create=True)
            assert state is not None
        turn = self._next_turn(state, new)
        entry_id = ""
        if self._persistent:
            entry_id = uuid.uuid4().hex
            yield StoreCall("save", (namespace(cid), turn_entry(turn, entry_id)))
        state.append(turn, entry_id, default_messages=new.messages is None)
        count = self._eviction_count(state)
        if count:
            yield from self._summarize_plan(cid, state, count)
        return turn

    def _add_turn_now(self, new: NewTurn) -> ConversationTurn | None:
        """:meth:`_add_turn_plan` done at once, or ``None`` if that needs its runner.

        On a store that is not persisted, with no summarizer and the state in hand, adding a
        turn is pure bookkeeping: it needs no store call and, unless another caller holds the
        conversation, no waiting. Doing it here spares the plan machinery on the hot path
        of an in-memory host; the caller has checked the first two conditions.
        """
        lock = self._locks[new.cid]
        if not lock.try_acquire():
            return None
        try:
            state = self._states.get(new.cid)  # read under the lock: clear() may have dropped it
            if state is None:
                return None
            turn = self._next_turn(state, new)
            state.append(turn, "", default_messages=new.messages is None)
        finally:
            lock.release()
        return turn

    @staticmethod
    def _next_turn(state: ConversationState, new: NewTurn) -> ConversationTurn:
        """The turn that follows ``state``'s last one (not yet kept)."""
        at = utc_now()
        messages = new.messages
        return new_turn(
            turn_id=state.next_turn_id,
            user_prompt=new.user_prompt,
            assistant_response=new.assistant_response,
            raw_messages=messages
            if messages is not None
            else default_messages(new.user_prompt, new.assistant_response, at),
            timestamp=at,
            token_estimate=new.tokens,
            metadata=dict(new.metadata) if new.metadata else {},
        )

    # ------------------------------------------------------------------ summaries

    def _eviction_count(self, state: ConversationState) -> int:
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

    def _summary_input(self, state: ConversationState, count: int) -> list[ConversationTurn]:
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

    def _summarize_plan(self, cid: str, state: ConversationState, count: int) -> Plan[None]:
        try:
            summary = yield Summarize(self._summary_input(state, count))
        except Exception:  # noqa: BLE001  # a failing summarizer must never lose the turn
            logger.warning("memlane: summarizer failed; turns kept unsummarised", exc_info=True)
            return
        if not isinstance(summary, str):
            raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
        evicted = state.evict(count)
        state.summarized_turns += count
        state.set_summary(summary, self.estimator.estimate(SUMMARY_PREFIX + summary), utc_now())
        if not self._persistent:
            return
        ns = namespace(cid)
        # The summary (naming what it replaced) lands first: a crash before the deletes
        # leaves turns that a restart recognises as summarised, never a gap.
        yield StoreCall("save", (ns, summary_entry(state, evicted)))
        for entry_id in evicted:
            yield StoreCall("delete", (ns, entry_id))

    # ------------------------------------------------------------------ forgetting

    def _clear_plan(self, cid: str) -> Plan[None]:
        self._states.pop(cid, None)
        if not self._persistent:
            return
        yield StoreCall("clear", (namespace(cid),))
        index: MemoryEntry | None = yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))
        if index is not None:
            yield StoreCall("delete", (INDEX_NAMESPACE, index.entry_id))

    def _ids_plan(self) -> Plan[list[str]]:
        if not self._persistent:
            return list(self._states)
        entries: list[MemoryEntry] = yield StoreCall("load", (INDEX_NAMESPACE,))
        stored = [e.key for e in entries if e.key is not None]
        return list(dict.fromkeys([*stored, *self._states]))

    # ------------------------------------------------------------------ import

    def _import_plan(self, cid: str, snapshot: ParsedSnapshot) -> Plan[str]:
        """Creates conversation ``cid`` from a parsed snapshot; nothing is overwritten."""
        if (yield from self._state_plan(cid, create=False)) is not None:
            raise ValueError(
                f"conversation_id {cid!r} already exists; pass conversation_id= to import under a new id"
            )
        state = yield from self._state_plan(cid, create=True)
        assert state is not None
        state.summarized_turns = snapshot.summarized_turns
        entries = []
        if snapshot.summary is not None:
            state.set_summary(
                snapshot.summary,
                self.estimator.estimate(SUMMARY_PREFIX + snapshot.summary),
                snapshot.summary_created_at or state.summary_at,
            )
            entries.append(summary_entry(state, []))
        ids = [uuid.uuid4().hex for _ in snapshot.turns]
        entries.extend(
            turn_entry(turn, entry_id)
            for (turn, _), entry_id in zip(snapshot.turns, ids, strict=True)
        )
        if self._persistent:
            yield StoreCall("save_many", (namespace(cid), entries))
        for (turn, given), entry_id in zip(snapshot.turns, ids, strict=True):
            state.append(turn, entry_id, default_messages=not given)
        return cid
