"""Conversations as an operator sees them: a row per conversation, and one in full.

Budgets are each conversation's own (``ConversationMemory.conversation_budget``: what it
was created with), not the budget of whichever manager happens to read the store.
"""

from __future__ import annotations

from typing import Any

from memlane._validate import check_identifier
from memlane.conversation import ConversationMemory
from memlane.errors import ConversationNotFoundError
from memlane.types import ConversationTurn

__all__ = ["conversation_row", "conversation_view", "turn_count"]


def conversation_row(memory: ConversationMemory, cid: str) -> dict[str, Any]:
    """Turns, tokens, the conversation's own budget and its use, last activity."""
    turns = memory.get_turns(cid)
    history = memory.get_history_tokens(cid)
    budget = memory.conversation_budget(cid)
    return {
        "id": cid,
        "turns": len(turns),
        "history_tokens": history,
        "total_tokens": memory.get_total_tokens(cid),
        "budget": budget.max_tokens,
        "summarize_threshold": budget.summarize_threshold,
        "budget_used": history / budget.max_tokens,
        "has_summary": memory.get_summary(cid) is not None,
        "last_activity": turns[-1].timestamp.isoformat() if turns else None,
    }


def conversation_view(memory: ConversationMemory, conversation_id: str) -> dict[str, Any]:
    """The row, the summary, the kept turns (``messages``) and every turn (``transcript``).

    Raises:
        ConversationNotFoundError: The id is unknown.
    """
    cid = check_identifier(conversation_id, "conversation id")
    if cid not in memory.conversation_ids:
        raise ConversationNotFoundError(f"no conversation {cid!r}")
    from pydantic_ai.messages import ModelRequest, UserPromptPart  # what a history holds

    row = conversation_row(memory, cid)
    history = memory.get_message_history(cid)
    # The newest turns that fit the budget are sent whole; older kept ones wait for the
    # summary. Each sent turn opens with the request holding its user prompt.
    row["sent_turns"] = sum(
        any(isinstance(part, UserPromptPart) for part in message.parts)
        for message in history
        if isinstance(message, ModelRequest)
    )
    row["summary"] = memory.get_summary(cid)
    row["summary_tokens"] = memory.estimator.estimate(row["summary"] or "")
    turns = memory.get_turns(cid)
    first_sent = len(turns) - row["sent_turns"]
    sent = {t.turn_id for t in turns[first_sent:]}
    kept = {t.turn_id for t in turns}
    row["messages"] = [_turn(t, t.turn_id in sent, summarised=False) for t in turns]
    # The transcript holds the summarised turns (kept by retain_transcript); the kept ones
    # complete it, so a store that retains none still lists what it has.
    transcript = {t.turn_id: t for t in memory.get_transcript(cid)}
    for t in turns:
        transcript.setdefault(t.turn_id, t)
    row["transcript"] = [
        _turn(t, t.turn_id in sent, summarised=t.turn_id not in kept)
        for _, t in sorted(transcript.items())
    ]
    return row


def turn_count(memory: ConversationMemory, cid: str) -> int:
    """Every turn of a conversation: kept and summarised ones, each once."""
    kept = {t.turn_id for t in memory.get_turns(cid)}
    kept.update(t.turn_id for t in memory.get_transcript(cid))
    return len(kept)


def _turn(turn: ConversationTurn, sent: bool, *, summarised: bool) -> dict[str, Any]:
    return {
        "turn_id": turn.turn_id,
        "user": turn.user_prompt,
        "assistant": turn.assistant_response,
        "tokens": turn.token_estimate,
        "timestamp": turn.timestamp.isoformat(),
        "sent": sent and not summarised,
        "summarised": summarised,
    }
