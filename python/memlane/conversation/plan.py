"""The conversation logic, written once and free of I/O.

Every operation of :class:`~memlane.conversation.ConversationMemory` is a plan here: a
generator that yields the store calls it needs (see :mod:`memlane._runner`) and returns the
operation's result. The public sync methods run a plan with blocking store calls, the async
methods await the same plan's calls, and both hold the conversation's one
:class:`~memlane._locks.HybridLock` for the whole plan, so threads and tasks that mix on a
conversation are serialised by a single discipline.

On a persistent store other processes (hosts behind a load balancer) write the same
conversations. Every plan first brings its cached state up to date with what they committed
(:meth:`~memlane.conversation.lifecycle.ConversationLifecycle._coherent_plan`: one indexed
range read when nothing changed), and
every write is a conditional one: a turn or a summary takes the next log slot only if nobody
took it first (see :mod:`memlane.conversation.state`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, NamedTuple

from memlane._runner import Plan, Spawn, StoreCall
from memlane.conversation.snapshot import ParsedSnapshot
from memlane.conversation.state import (
    TRANSCRIPT_PREFIX,
    TRANSCRIPT_STOP,
    ConversationState,
    namespace,
    summary_entry,
    transcript_namespace,
    turn_entry,
)
from memlane.conversation.summaries import SummaryLogic
from memlane.messages import message_texts
from memlane.types import ConversationTurn, MemoryEntry, new_turn, utc_now

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

DEFAULT_SUMMARIZE_THRESHOLD = 3072
"""The summarise-above threshold where the budget allows it (see :func:`default_threshold`)."""

MIN_SUMMARY_ROOM = 16
"""Fewest tokens a summary may be given: its prefix and a few words."""


def default_threshold(max_tokens: int) -> int:
    """``min(3072, max_tokens * 3 // 4)``: the rest of the budget is the summary's."""
    return max(1, min(DEFAULT_SUMMARIZE_THRESHOLD, max_tokens * 3 // 4))


def check_summary_room(max_tokens: int, threshold: int) -> None:
    """With a summarizer, the threshold must leave the summary room in the budget.

    Turns are kept up to the threshold and the summary gets the rest, so both are always
    sent: a threshold at (or near) the budget would leave turns neither sent nor summarised.

    Raises:
        ValueError: Fewer than :data:`MIN_SUMMARY_ROOM` tokens left; the message names both
            values and the default that would fit.
    """
    if max_tokens - threshold < MIN_SUMMARY_ROOM:
        raise ValueError(
            f"summarize_threshold={threshold} leaves the summary {max_tokens - threshold} of "
            f"max_tokens={max_tokens} tokens; with a summarizer it must be at most "
            f"max_tokens - {MIN_SUMMARY_ROOM} (the default, "
            f"min({DEFAULT_SUMMARIZE_THRESHOLD}, max_tokens * 3 // 4), would be "
            f"{default_threshold(max_tokens)})"
        )


class NewTurn(NamedTuple):
    """add_turn's validated arguments and the turn's token estimate."""

    cid: str
    user_prompt: str
    assistant_response: str
    messages: list[ModelMessage] | None
    metadata: dict[str, Any] | None
    tokens: int


class ConversationLogic(SummaryLogic):
    """Per-conversation states and the plans that read and change them.

    Loading, expiry and clearing are :class:`~memlane.conversation.lifecycle.ConversationLifecycle`'s;
    summaries and fact extraction :class:`~memlane.conversation.summaries.SummaryLogic`'s.
    """

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
        yield from self._locked(cid)
        state = yield from self._coherent_plan(cid, create=True)
        assert state is not None
        if self._persistent:
            ns = namespace(cid)
            entry_id = uuid.uuid4().hex
            while True:
                turn = self._next_turn(state, new)
                won = yield StoreCall("save_if", (ns, turn_entry(turn, entry_id, state.head), None))
                if won:
                    break
                # Another host took this slot: read what it wrote, then take the next one.
                caught_up = yield from self._catch_up_plan(cid, state, create=True)
                assert caught_up is not None
                state = caught_up
            state.head += 1
        else:
            turn = self._next_turn(state, new)
            entry_id = ""
        state.append(turn, entry_id, default_messages=new.messages is None)
        yield from self._touch_plan(cid, state)
        if self.fact_extractor is not None:
            yield from self._extract_plan(cid, state, state.first_in_history)
        if self._eviction_count(state):
            if self.summarize_in_background:
                if cid not in self._pending:  # at most one in flight per conversation
                    self._pending[cid] = yield Spawn(lambda: self._background_plan(cid))
            else:
                yield from self._summarize_plan(cid, background=False)
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
        if messages is None:  # the two messages of its strings, built when first read
            return new_turn(
                turn_id=state.next_turn_id,
                user_prompt=new.user_prompt,
                assistant_response=new.assistant_response,
                timestamp=at,
                token_estimate=new.tokens,
                metadata=dict(new.metadata) if new.metadata else {},
            )
        return new_turn(
            turn_id=state.next_turn_id,
            user_prompt=new.user_prompt,
            assistant_response=new.assistant_response,
            raw_messages=messages,
            timestamp=at,
            token_estimate=new.tokens,
            metadata=dict(new.metadata) if new.metadata else {},
        )

    def _transcript_plan(self, cid: str) -> Plan[list[ConversationTurn]]:
        """Every turn of a conversation ever added, oldest first (``[]``: unknown id)."""
        state = yield from self._coherent_plan(cid, create=False)
        if state is None:
            return []
        entries: list[MemoryEntry] = yield StoreCall(
            "load_range", (transcript_namespace(cid), TRANSCRIPT_PREFIX, TRANSCRIPT_STOP)
        )
        # Only the turns the conversation no longer keeps: the others come from the state.
        gone = [
            ConversationTurn.model_validate(e.content)
            for e in entries
            if int(e.key[len(TRANSCRIPT_PREFIX) :]) < state.summarized_turns  # type: ignore[index]
        ]
        return [*gone, *state.turns()]

    # ------------------------------------------------------------------ import

    def _import_plan(self, cid: str, snapshot: ParsedSnapshot) -> Plan[str]:
        """Creates conversation ``cid`` from a parsed snapshot; nothing is overwritten."""
        exists = ValueError(
            f"conversation_id {cid!r} already exists; pass conversation_id= to import under a new id"
        )
        if (yield from self._coherent_plan(cid, create=False)) is not None:
            raise exists
        state = yield from self._coherent_plan(cid, create=True, budget=snapshot.budget)
        assert state is not None
        state.summarized_turns = snapshot.summarized_turns
        head = state.head  # after a clear the log goes on from it
        events: list[MemoryEntry] = []
        if snapshot.summary is not None:
            at = snapshot.summary_created_at or state.summary_at
            text, tokens = self._fit_summary(snapshot.summary)
            state.set_summary(text, tokens, at)
            events.append(summary_entry(text, tokens, snapshot.summarized_turns, at, head))
            state.summary_entry_id = events[0].entry_id
        ids = [uuid.uuid4().hex for _ in snapshot.turns]
        first = len(events)
        events.extend(
            turn_entry(turn, entry_id, head + first + i)
            for i, ((turn, _), entry_id) in enumerate(zip(snapshot.turns, ids, strict=True))
        )
        if self._persistent and events:
            # The first event claims the conversation: if another host created it meanwhile,
            # nothing is written. The rest follow in one batch.
            if not (yield StoreCall("save_if", (namespace(cid), events[0], None))):
                self._states.pop(cid, None)
                raise exists
            if len(events) > 1:
                yield StoreCall("save_many", (namespace(cid), events[1:]))
            state.head = head + len(events)
        for (turn, given), entry_id in zip(snapshot.turns, ids, strict=True):
            state.append(turn, entry_id, default_messages=not given)
        yield from self._touch_plan(cid, state)
        return cid
