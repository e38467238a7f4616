"""The plans that add turns to a conversation, read its transcript and import a snapshot.

Each is a generator that yields the store operations it needs (see :mod:`memlane._runner`)
and returns the operation's result; the sync and async methods of
:class:`~memlane.ConversationMemory` run the same plan, holding the conversation's one
:class:`~memlane._locks.HybridLock` throughout, so threads and tasks that mix on a
conversation are serialised by a single discipline.

On a persistent store other processes (hosts behind a load balancer) write the same
conversations. Every plan first brings its cached state up to date with what they committed
(:meth:`~memlane.conversation.conversation_cache.ConversationCache.coherent_plan`: one
indexed range read when nothing changed), and every write is a conditional one: a turn or a
summary takes the next log slot only if nobody took it first (see
:mod:`memlane.conversation.conversation_log`). Adding a turn skips the read: its write
(:class:`~memlane._ops.SaveIfAbsent`) is the check, and answers a lost race with what the
other hosts wrote, so a turn is one round trip on PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic_core import to_json

from memlane._ops import LoadRange, SaveIf, SaveIfAbsent, SaveMany
from memlane._runner import Plan, run_now
from memlane._validate import check_str
from memlane.conversation.conversation_cache import ConversationCache, check_cid
from memlane.conversation.conversation_log import (
    LOG_STOP,
    TRANSCRIPT_PREFIX,
    TRANSCRIPT_STOP,
    namespace,
    summary_entry,
    transcript_namespace,
    turn_entry,
)
from memlane.conversation.conversation_state import ConversationState, pinned_record
from memlane.conversation.rolling_summary import RollingSummaries
from memlane.conversation.snapshot import ParsedSnapshot
from memlane.conversation.summary_controls import check_pin_room
from memlane.messages import message_classes, message_texts
from memlane.stores._base import read_only_error
from memlane.stores.protocol import dumps_json
from memlane.tokens import TokenEstimator
from memlane.types import (
    ConversationTurn,
    MemoryEntry,
    TurnJson,
    new_entry_id,
    new_turn,
    utc_now,
)

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage


class TurnCounter:
    """Counts a turn's tokens (and any messages, as a turn's are counted) with an estimator."""

    __slots__ = ("_count_texts", "_estimator")

    def __init__(self, estimator: TokenEstimator) -> None:
        self._estimator = estimator
        # Turn texts are validated str already: memlane's own estimator is asked through its
        # counting engine directly (no second type check, no Python frame per turn).
        self._count_texts: Callable[[list[str]], list[int]] = (
            estimator._count_many
            if isinstance(estimator, TokenEstimator)
            else estimator.estimate_many
        )

    def count_turn(
        self, user_prompt: str, assistant_response: str, messages: list[ModelMessage] | None
    ) -> int:
        """A turn's token estimate; pure, so it is counted before the lock is taken."""
        texts = [user_prompt, assistant_response] if messages is None else message_texts(messages)
        try:
            return sum(self._count_texts(texts))
        except UnicodeEncodeError:  # a lone surrogate: the estimator's own path repairs it
            return sum(self._estimator.estimate_many(texts))

    def count_messages(self, messages: Any) -> int:
        """Tokens of some messages, counted as a turn's are."""
        return sum(self._count_texts(message_texts(list(messages))))


class NewTurn(NamedTuple):
    """add_turn's validated arguments and the turn's token estimate."""

    cid: str
    user_prompt: str
    assistant_response: str
    messages: list[ModelMessage] | None
    metadata: dict[str, Any] | None
    tokens: int


def check_messages(raw_messages: object) -> list[ModelMessage]:
    """``raw_messages`` as a list of pydantic-ai messages.

    Raises:
        TypeError: Not a list or tuple of ``ModelRequest`` / ``ModelResponse``; names the
            offending item.
    """
    if not isinstance(raw_messages, list | tuple):
        raise TypeError(
            f"raw_messages must be a list of ModelMessage, not {type(raw_messages).__name__}"
        )
    from pydantic_ai.messages import ModelRequest, ModelResponse

    for i, message in enumerate(raw_messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise TypeError(
                f"raw_messages[{i}] must be ModelRequest or ModelResponse, not {type(message).__name__}"
            )
    return list(raw_messages)


def check_metadata(metadata: object, *, persistent: bool) -> dict[str, Any] | None:
    """A turn's metadata: a ``dict``, which a persistent store must be able to keep.

    Raises:
        TypeError: Not a ``dict``.
        UnstorableValueError: A persistent store could not keep it.
    """
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be dict, not {type(metadata).__name__}")
    if persistent:
        dumps_json(metadata, key=None, field="metadata")
    return metadata


def checked_turn(
    memory: Any,
    conversation_id: object,
    user_prompt: object,
    assistant_response: object,
    raw_messages: object,
    metadata: object,
    pinned: object,
) -> NewTurn:
    """``add_turn``'s arguments checked, and the turn counted, for ``memory`` (a
    :class:`~memlane.ConversationMemory`).

    Raises:
        TypeError: An argument of the wrong type.
        UnstorableValueError: ``metadata`` a persistent store could not keep.
        ReadOnlyStoreError: The memory's store was opened read-only.
    """
    # Validated and counted here, before the plan takes the lock: counting is the costly
    # part of a turn, and a bad argument fails before anything is stored. Each check is
    # inline where it passes (every turn's path); the full one names what failed.
    conversations: ConversationCache = memory._conversations
    cid = conversation_id
    if type(cid) is not str or not cid or "\x00" in cid:
        cid = check_cid(cid)
    prompt = user_prompt if type(user_prompt) is str else check_str(user_prompt, "user_prompt")
    response = (
        assistant_response
        if type(assistant_response) is str
        else check_str(assistant_response, "assistant_response")
    )
    messages: list[ModelMessage] | None = None
    if type(raw_messages) is list and message_classes().issuperset(map(type, raw_messages)):
        # memlane's own list (the caller may reuse theirs); an empty one is what code
        # written for the older design passes for "none"
        messages = list(raw_messages) if raw_messages else None
    elif raw_messages is not None and not (
        isinstance(raw_messages, list | tuple) and not raw_messages
    ):
        messages = check_messages(raw_messages)
    if metadata is None and pinned is False:
        meta = None
    else:
        meta = check_metadata(metadata, persistent=conversations.persistent)
        if pinned is not False:  # checked only when given
            if not isinstance(pinned, bool):
                raise TypeError(f"pinned must be bool, not {type(pinned).__name__}")
            if pinned:
                meta = {**(meta or {}), "pinned": True}
    counter: TurnCounter = memory._reads.counter
    tokens = counter.count_turn(prompt, response, messages)
    if conversations.read_only:
        raise read_only_error(memory.store)
    return NewTurn(cid, prompt, response, messages, meta, tokens)


def add_turn_plan(
    conversations: ConversationCache, summaries: RollingSummaries, new: NewTurn
) -> Plan[ConversationTurn]:
    """Appends a turn to its conversation (created if unknown), then what follows a turn:
    extraction and summaries (see :meth:`RollingSummaries.after_turn_plan`)."""
    cid = new.cid
    yield from conversations.locked(cid)
    # No separate catch-up with other hosts: the write at the cached head lands only if
    # nobody wrote there (the log is dense, so then nothing follows the head either), and
    # when another host did, the write's answer is what it missed.
    state = yield from conversations.coherent_plan(cid, create=True, catch_up=False)
    assert state is not None
    if new.metadata is not None and new.metadata.get("pinned") is True:
        check_pin_room(summaries, state, cid, "the new turn", new.tokens)
    if conversations.persistent:
        state, turn = yield from _append_plan(conversations, summaries, state, new)
    else:
        turn = next_turn(state, new)
        state.append(turn, "", default_messages=new.messages is None)
    yield from conversations.touch_plan(cid, state)
    yield from summaries.after_turn_plan(cid, state)
    return turn


def _append_plan(
    conversations: ConversationCache,
    summaries: RollingSummaries,
    state: ConversationState,
    new: NewTurn,
) -> Plan[tuple[ConversationState, ConversationTurn]]:
    """Writes the turn at the head of a persistent store's log and appends it to ``state``
    (or to the state it becomes after catching up with what other hosts wrote first): the
    turn's store operations, nothing else, so :func:`add_turn_now` runs them at once too.
    A pinned turn's room is checked by the caller first, and here again after a catch-up."""
    cid = new.cid
    pinned = new.metadata is not None and new.metadata.get("pinned") is True
    ns = namespace(cid)
    entry_id = new_entry_id()
    while True:
        turn = next_turn(state, new)
        entry = turn_entry(turn, entry_id, state.head)
        won, missed = yield SaveIfAbsent(ns, entry, LOG_STOP)
        if won:
            break
        # Another host took this slot: apply what it wrote, then take the next one.
        caught_up = yield from conversations.apply_plan(cid, state, missed, create=True)
        assert caught_up is not None
        state = caught_up
        if pinned:  # another host's pins count too
            check_pin_room(summaries, state, cid, "the new turn", new.tokens)
    state.head += 1
    stored: bytes | None = None
    if new.messages is not None:  # kept once it leaves the window, instead of frozen
        content = entry.content
        stored = content.messages if type(content) is TurnJson else None
        if stored is None:
            stored = to_json(content["raw_messages"])
    state.append(turn, entry_id, default_messages=new.messages is None, stored=stored)
    return state, turn


def add_turn_now(
    conversations: ConversationCache,
    summaries: RollingSummaries,
    new: NewTurn,
    store: Any = None,
) -> ConversationTurn | None:
    """What :func:`add_turn_plan` does, done at once where nothing follows the turn;
    ``None`` when the plan must run.

    The caller checks that nothing follows a turn (no summaries, no extraction) and that the
    turn is not pinned. Where the cached states are the conversations
    (:attr:`ConversationCache.is_the_store`) the plan's store calls are none: the append is
    the plan's own step (:func:`next_turn`, ``state.append``). On a persistent store without
    a ttl, given ``store`` to call blocking (a sync caller's), the plan's one step is the
    append's write (:func:`_append_plan`), run here. Either way it needs the conversation
    cached and its lock free; the runner's machinery is what a host's hot path gains.
    """
    lock = conversations.locks[new.cid]
    if not lock.try_acquire():
        return None
    try:
        # Read under the lock: clear() may have dropped it.
        state = conversations.states.get(new.cid)
        if state is None:
            return None
        if conversations.is_the_store:
            turn = next_turn(state, new)
            state.append(turn, "", default_messages=new.messages is None)
            return turn
        if store is None or not conversations.persistent or conversations.expires:
            return None
        if state.expires_at is not None:  # another host's ttl: the plan handles expiry
            return None
        conversations.states.move_to_end(new.cid)
        return run_now(_append_plan(conversations, summaries, state, new), store).value[1]
    finally:
        lock.release()


def next_turn(state: ConversationState, new: NewTurn) -> ConversationTurn:
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


def transcript_plan(conversations: ConversationCache, cid: str) -> Plan[list[ConversationTurn]]:
    """Every turn of a conversation ever added, oldest first (``[]``: unknown id)."""
    state = yield from conversations.coherent_plan(cid, create=False)
    if state is None:
        return []
    entries: list[MemoryEntry] = yield LoadRange(
        transcript_namespace(cid), TRANSCRIPT_PREFIX, TRANSCRIPT_STOP
    )
    # Only the turns the conversation no longer keeps: the others come from the state.
    gone = {
        turn.turn_id: turn
        for turn in (
            ConversationTurn.model_validate(e.content)
            for e in entries
            if int(e.key[len(TRANSCRIPT_PREFIX) :]) < state.summarized_turns  # type: ignore[index]  # a transcript key is never None
        )
    }
    if state.folded_pins:  # kept by the state even without retain_transcript
        gone.update((turn.turn_id, turn) for turn in state.folded_pin_turns())
    return [*(gone[turn_id] for turn_id in sorted(gone)), *state.turns()]


def import_plan(
    conversations: ConversationCache,
    summaries: RollingSummaries,
    cid: str,
    snapshot: ParsedSnapshot,
) -> Plan[str]:
    """Creates conversation ``cid`` from a parsed snapshot; nothing is overwritten."""
    exists = ValueError(
        f"conversation_id {cid!r} already exists; pass conversation_id= to import under a new id"
    )
    if (yield from conversations.coherent_plan(cid, create=False)) is not None:
        raise exists
    state = yield from conversations.coherent_plan(cid, create=True, budget=snapshot.budget)
    assert state is not None
    state.summarized_turns = snapshot.summarized_turns
    head = state.head  # after a clear the log goes on from it
    events: list[MemoryEntry] = []
    if snapshot.summary is not None:
        at = snapshot.summary_created_at or state.summary_at
        text, tokens = summaries.fit_summary(snapshot.summary)
        state.set_summary(text, tokens, at)
        events.append(summary_entry(text, tokens, snapshot.summarized_turns, at, head))
        state.summary_entry_id = events[0].entry_id
    # Pinned turns older than the summary: events the log's restore keeps as such.
    for pinned in snapshot.pinned_turns:
        events.append(turn_entry(pinned, uuid.uuid4().hex, head + len(events)))
    ids = [uuid.uuid4().hex for _ in snapshot.turns]
    first = len(events)
    events.extend(
        turn_entry(turn, entry_id, head + first + i)
        for i, ((turn, _), entry_id) in enumerate(zip(snapshot.turns, ids, strict=True))
    )
    if conversations.persistent and events:
        # The first event claims the conversation: if another host created it meanwhile,
        # nothing is written. The rest follow in one batch.
        if not (yield SaveIf(namespace(cid), events[0], None)):
            conversations.states.pop(cid, None)
            raise exists
        if len(events) > 1:
            yield SaveMany(namespace(cid), events[1:])
        state.head = head + len(events)
    for pinned in snapshot.pinned_turns:
        state.add_folded_pin(pinned_record(pinned))
    for (turn, given), entry_id in zip(snapshot.turns, ids, strict=True):
        state.append(turn, entry_id, default_messages=not given)
    yield from conversations.touch_plan(cid, state)
    return cid
