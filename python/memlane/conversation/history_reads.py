"""Reading a conversation: the history to send, its tokens, the turns, the summary.

Each read is ``read(state)`` of one conversation under its lock (``state`` is ``None`` for an
unknown id), run as a plan by :meth:`HistoryReads.plan`, or at once by
:meth:`HistoryReads.now` where the cached state is the conversation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from memlane._ops import LoadRange
from memlane._runner import Plan, describe, run_async, run_now
from memlane.conversation.conversation_cache import ConversationCache, check_cid
from memlane.conversation.conversation_log import LOG_STOP, log_key, namespace
from memlane.conversation.conversation_state import ConversationState
from memlane.conversation.turn_plans import TurnCounter
from memlane.types import ConversationTurn

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from memlane.strategies import ShortTermStrategy

T = TypeVar("T")

Read = Callable[["HistoryReads", "ConversationState | None"], T]


class HistoryReads:
    """How a memory reads its conversations: through its short-term strategies, if any,
    counting messages with its counter.

    Args:
        conversations: The memory's conversations.
        short_term: Its short-term strategies (``[]``: the ``max_tokens`` window).
        counter: Counts messages as a turn's are counted.
    """

    __slots__ = ("conversations", "counter", "short_term")

    def __init__(
        self,
        conversations: ConversationCache,
        short_term: list[ShortTermStrategy],
        counter: TurnCounter,
    ) -> None:
        self.conversations = conversations
        self.short_term = short_term
        self.counter = counter

    def plan(self, conversation_id: str, read: Read[T]) -> Plan[T]:
        """``read(state)`` under the conversation's lock, the state caught up with the store."""
        return self.conversations.read_plan(conversation_id, lambda state: read(self, state))

    def now(self, store: Any, conversation_id: str, read: Read[T]) -> T:
        """:meth:`plan` run at once, with blocking calls of ``store``.

        Reads are the hot path of an agent host. Where the cached state is the conversation
        (:attr:`ConversationCache.is_the_store`), the plan's only step is ``read(state)``
        under the lock: it runs here. Elsewhere the plan's steps, all store calls, run here
        too (:func:`read_now`), without the runner.
        """
        conversations = self.conversations
        cid = conversation_id
        if type(cid) is not str or not cid or "\x00" in cid:  # the check, inline when it passes
            check_cid(cid)
        if not conversations.is_the_store:
            return read_now(conversations, store, cid, lambda state: read(self, state))
        with conversations.locks[cid]:
            return read(self, conversations.states.get(cid))

    async def async_now(self, store: Any, conversation_id: str, read: Read[T]) -> T:
        """:meth:`now` with the store's calls awaited (:func:`async_read_now`)."""
        conversations = self.conversations
        cid = conversation_id
        if type(cid) is not str or not cid or "\x00" in cid:  # the check, inline when it passes
            check_cid(cid)
        if not conversations.is_the_store:
            return await async_read_now(conversations, store, cid, lambda state: read(self, state))
        async with conversations.locks[cid]:
            return read(self, conversations.states.get(cid))

    def short_term_view(self, state: ConversationState) -> tuple[list[ModelMessage], int]:
        """The history the short-term strategies send, and its tokens."""
        from memlane.conversation.applied_strategies import short_term_view

        return short_term_view(self.short_term, state, self.counter.count_messages)


def read_now(
    conversations: ConversationCache,
    store: Any,
    cid: str,
    read: Callable[[ConversationState | None], T],
) -> T:
    """:meth:`ConversationCache.read_plan` run at once with blocking calls of ``store``
    (``cid`` checked).

    Reading a history is the other half of every agent turn: this is the plan's lock, its
    catch-up read and ``read(state)`` without the runner's generators. A cached state that
    cannot expire asks the store for the log past its head directly (the plan's one read when
    nothing changed); anything else runs :meth:`ConversationCache.coherent_plan`, whose steps
    are store operations only.
    """
    locks = conversations.locks
    lock = locks[cid]
    lock.acquire()
    try:
        while (
            locks.get(cid) is not lock
        ):  # dropped while this caller queued (ConversationCache.locked)
            lock.release()
            lock = locks[cid]
            lock.acquire()
        state = conversations.states.get(cid)
        if state is not None and state.expires_at is None and conversations.persistent:
            conversations.states.move_to_end(cid)
            events = LoadRange(namespace(cid), log_key(state.head), LOG_STOP).run(store)
            if events:
                caught_up = conversations.apply_plan(cid, state, events, create=False)
                state = run_now(caught_up, store).value
        else:
            state = run_now(conversations.coherent_plan(cid, create=False), store).value
        return read(state)
    finally:
        lock.release()


async def async_read_now(
    conversations: ConversationCache,
    store: Any,
    cid: str,
    read: Callable[[ConversationState | None], T],
) -> T:
    """:func:`read_now` with the store's calls awaited: the async history read's twin."""
    locks = conversations.locks
    lock = locks[cid]
    await lock.async_acquire()
    try:
        while (
            locks.get(cid) is not lock
        ):  # dropped while this caller queued (ConversationCache.locked)
            lock.release()
            lock = locks[cid]
            await lock.async_acquire()
        state = conversations.states.get(cid)
        if state is not None and state.expires_at is None and conversations.persistent:
            conversations.states.move_to_end(cid)
            ns, start = namespace(cid), log_key(state.head)
            events = await LoadRange(ns, start, LOG_STOP).run_async(store)
            if events:
                caught_up = conversations.apply_plan(cid, state, events, create=False)
                state = await run_async(caught_up, store)
        else:
            state = await run_async(conversations.coherent_plan(cid, create=False), store)
        return read(state)
    finally:
        lock.release()


def get_message_history(reads: HistoryReads, state: ConversationState | None) -> list[ModelMessage]:
    """The messages to send with the next request: summary first, then whole recent turns.

    The estimates of what is returned sum to at most ``max_tokens``. With ``short_term``
    strategies, the interactions (turns) they choose, as they send them. An unknown
    conversation has an empty history.
    """
    if state is None:
        return []
    if reads.short_term:
        return reads.short_term_view(state)[0]
    return state.history()


def get_history_tokens(reads: HistoryReads, state: ConversationState | None) -> int:
    """Estimated tokens of :meth:`get_message_history` (summary included)."""
    if state is None:
        return 0
    if reads.short_term:
        return reads.short_term_view(state)[1]
    return state.history_tokens


def get_turns(reads: HistoryReads, state: ConversationState | None) -> list[ConversationTurn]:
    """Retained turns (not yet summarised or erased) and pinned ones, oldest first."""
    if state is None:
        return []
    return state.kept_turns() if state.folded_pins else state.turns()


def get_total_tokens(reads: HistoryReads, state: ConversationState | None) -> int:
    """Sum of the token estimates of the turns :meth:`get_turns` returns (the summary
    excluded)."""
    return 0 if state is None else state.total_tokens


def get_summary(reads: HistoryReads, state: ConversationState | None) -> str | None:
    """The rolling summary of evicted turns, or ``None``."""
    return None if state is None else state.summary


def reader_methods(
    read: Read[T], owner: str = "ConversationMemory"
) -> tuple[Callable[[Any, str], T], Callable[[Any, str], Coroutine[Any, Any, T]]]:
    """The public methods ``name`` and ``async_name`` of class ``owner``, named after ``read``:
    ``read(state)`` of a conversation, documented by ``read``; the owner holds its reads as
    ``_reads``."""
    name = read.__name__

    def plan(self: Any, conversation_id: str) -> Plan[T]:
        reads: HistoryReads = self._reads
        return reads.plan(conversation_id, read)

    def method(self: Any, conversation_id: str) -> T:
        reads: HistoryReads = self._reads
        return reads.now(self.store, conversation_id, read)

    async def async_method_(self: Any, conversation_id: str) -> T:
        reads: HistoryReads = self._reads
        return await reads.async_now(self.store, conversation_id, read)

    plan.__name__ = f"_{name}"
    plan.__qualname__ = f"{owner}._{name}"
    plan.__doc__ = read.__doc__
    plan.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # a function's signature is settable; mypy does not know the attribute
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(
                "conversation_id", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str"
            ),
        ],
        return_annotation=f"Plan[{inspect.signature(read).return_annotation}]",
    )
    return describe(method, plan, sync=True), describe(async_method_, plan, sync=False)
