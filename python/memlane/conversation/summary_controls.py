"""What a user steers of a conversation's summary: pinned turns, a summary on demand, and
how the summary stands.

Each is a plan method of :class:`~memlane.ConversationMemory` (``memory`` is its ``self``),
made the public ``name`` / ``async_name`` pair there.

A pinned turn is never summarised away nor trimmed from the prompt: the summary passes it
over (see :class:`~memlane.conversation.conversation_state.ConversationState`), and the
history sends it after the summary however old it is. It counts against the budget, so the
pins of a conversation may take at most what the turns kept beside the summary may
(:meth:`~memlane.conversation.rolling_summary.RollingSummaries.pin_room`): more is refused
when the pin is asked for, not discovered later. The flag is the turn's
``metadata["pinned"] = True``, which the store's log, the transcript and a snapshot keep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane._ops import SaveIf
from memlane._runner import Plan
from memlane.conversation.conversation_cache import check_cid
from memlane.conversation.conversation_log import namespace, pin_entry
from memlane.conversation.conversation_state import ConversationState, is_pinned
from memlane.conversation.rolling_summary import RollingSummaries
from memlane.conversation.summary_backoff import SummaryStatus
from memlane.errors import ConversationNotFoundError
from memlane.stores._base import read_only_error
from memlane.types import ConversationTurn

if TYPE_CHECKING:
    from memlane.conversation.conversation_memory import ConversationMemory

__all__ = ["check_pin_room", "pin_turn", "summarize_now", "summary_status"]


def check_pin_room(
    summaries: RollingSummaries, state: ConversationState, cid: str, what: str, tokens: int
) -> None:
    """Refuses a pin that would make the pins alone exceed their room.

    Raises:
        ValueError: Names the turn, its tokens, the pins' total and the room.
    """
    room = summaries.pin_room(state)
    total = state.pinned_tokens + tokens
    if total > room:
        budget = summaries.budget_text(state)
        raise ValueError(
            f"pinning {what} ({tokens} tokens) would make the pinned turns of conversation "
            f"{cid!r} total {total} tokens, over the {room} they may take ({budget}); "
            f"{state.pinned_tokens} tokens are pinned already"
        )


def _check_turn_id(turn_id: object) -> int:
    if isinstance(turn_id, bool) or not isinstance(turn_id, int):
        raise TypeError(f"turn_id must be int, not {type(turn_id).__name__}")
    if turn_id < 0:
        raise ValueError(f"turn_id must be >= 0, got {turn_id!r}")
    return turn_id


def pin_turn(
    memory: ConversationMemory, conversation_id: str, turn_id: int
) -> Plan[ConversationTurn]:
    """Pins a turn: it is never summarised away nor trimmed from the history.

    A turn can also be added pinned (``add_turn(..., pinned=True)``). Pinning one twice is
    harmless. On a shared store every host sees the pin.

    Args:
        conversation_id: The conversation.
        turn_id: The turn, still retained (not yet folded into the summary).

    Returns:
        The pinned turn (its ``metadata["pinned"]`` is ``True``).

    Raises:
        TypeError: ``turn_id`` is not an ``int``.
        ValueError: The turn was already folded into the summary, does not exist yet, or
            would make the pins alone exceed the budget (the message names the numbers).
        ConversationNotFoundError: (a ``KeyError``) the conversation is unknown.
    """
    cid = check_cid(conversation_id)
    tid = _check_turn_id(turn_id)
    conversations, summaries = memory._conversations, memory._summaries
    if conversations.read_only:
        raise read_only_error(memory.store)
    yield from conversations.locked(cid)
    state = yield from conversations.existing_plan(cid)
    while True:
        for record in state.folded_pins:
            if record[0] == tid:
                return state.folded_pin_turns()[state.folded_pins.index(record)]
        index = tid - state.summarized_turns
        if index < 0:
            raise ValueError(
                f"turn_id={tid} of conversation {cid!r} is already folded into the summary "
                f"(turns below {state.summarized_turns} are); pin a turn while it is "
                "retained, or add it with add_turn(..., pinned=True)"
            )
        if index >= len(state.records):
            raise ValueError(
                f"turn_id={tid} does not exist in conversation {cid!r} "
                f"(its newest turn is {state.next_turn_id - 1})"
            )
        record = state.records[index]
        if is_pinned(record):
            return state.turn(index)
        check_pin_room(summaries, state, cid, f"turn {tid}", record[3])
        if not conversations.persistent:
            break
        if (yield SaveIf(namespace(cid), pin_entry(tid, state.head), None)):
            state.head += 1
            break
        # Another host wrote first: see what it did (a summary may have taken the turn).
        caught_up = yield from conversations.catch_up_plan(cid, state, create=False)
        if caught_up is None:
            raise ConversationNotFoundError(f"unknown conversation_id {cid!r}")
        state = caught_up
    state.pin(index)
    return state.turn(index)


def summarize_now(
    memory: ConversationMemory, conversation_id: str, *, focus: str | None = None
) -> Plan[str | None]:
    """Folds every turn but the kept ones into the summary now, whatever the threshold.

    Kept are the pinned turns and, under a :class:`~memlane.strategies.SummarizerStrategy`,
    its ``interaction_keep`` newest interactions. It runs at once (also with
    ``summarize_in_background``), even while failures back the conversation off.

    Args:
        conversation_id: The conversation.
        focus: One line the summary should keep above all ("keep the decisions about
            invoices"): given to the summarizer as a turn marked ``{"focus": True}`` (whose
            ``user_prompt`` it is) after the previous summary; the chain of density of a
            summarizer strategy adds it to its instructions.

    Returns:
        The summary now (``None``: there is none, as when there was nothing to fold).

    Raises:
        TypeError: ``focus`` is not a ``str``.
        ValueError: The memory has no summarizer.
        ConversationNotFoundError: (a ``KeyError``) the conversation is unknown.
        Exception: What the summarizer raised (or a ``ValueError`` for an empty summary):
            no turn is lost, and the conversation is backed off as after any failure.
    """
    cid = check_cid(conversation_id)
    if focus is not None and not isinstance(focus, str):
        raise TypeError(f"focus must be str or None, not {type(focus).__name__}")
    conversations, summaries = memory._conversations, memory._summaries
    if summaries.summarizer is None:
        raise ValueError(
            "summarize_now needs a summarizer: pass summarizer= or a SummarizerStrategy with a model"
        )
    if conversations.read_only:
        raise read_only_error(memory.store)
    yield from conversations.locked(cid)
    yield from conversations.existing_plan(cid)
    yield from summaries.summarize_plan(cid, background=False, now=True, focus=focus or None)
    state = yield from conversations.existing_plan(cid)
    return state.summary


def summary_status(memory: ConversationMemory, conversation_id: str) -> Plan[SummaryStatus]:
    """How the conversation's summary stands on this host: ``ok``, ``pending`` (turns wait
    to be folded in, or a background summary runs) or ``failing`` (since when, the last
    error, the next attempt). Reads only.

    Raises:
        ConversationNotFoundError: (a ``KeyError``) the conversation is unknown.
    """
    cid = check_cid(conversation_id)
    yield from memory._conversations.locked(cid)
    return (yield from memory._summaries.status_plan(cid))


for _plan in (pin_turn, summarize_now, summary_status):
    # The public pair is named after the plan method it would be on the class.
    _plan.__qualname__ = f"ConversationMemory._{_plan.__name__}"
    _plan.__name__ = f"_{_plan.__name__}"
del _plan
