"""Export and import: a conversation as a JSON-ready snapshot, and back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memlane.conversation.conversation_budget import (
    ConversationBudget,
    budget_fields,
    parse_budget,
)
from memlane.conversation.conversation_state import ConversationState
from memlane.messages import default_messages, message_texts, messages_adapter
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, as_utc, utc_now


def export_snapshot(
    conversation_id: str, state: ConversationState, budget: ConversationBudget
) -> dict[str, Any]:
    """The snapshot :meth:`ConversationMemory.export_conversation` returns; ``budget`` is
    the conversation's."""
    adapter = messages_adapter()

    def turn_data(t: ConversationTurn) -> dict[str, Any]:
        return {
            "turn_id": t.turn_id,
            "user_prompt": t.user_prompt,
            "assistant_response": t.assistant_response,
            "token_estimate": t.token_estimate,
            "metadata": t.metadata,
            "timestamp": t.timestamp.isoformat(),
            "raw_messages": adapter.dump_python(t.raw_messages, mode="json"),
        }

    return {
        "conversation_id": conversation_id,
        **budget_fields(budget),
        "turns": [turn_data(t) for t in state.turns()],
        "pinned_turns": [turn_data(t) for t in state.folded_pin_turns()],
        "summary": state.summary,
        "summary_created_at": state.summary_at.isoformat() if state.summary is not None else None,
        "summarized_turns": state.summarized_turns,
        "total_tokens": state.total_tokens,
    }


@dataclass(frozen=True, slots=True)
class ParsedSnapshot:
    """A validated snapshot: its turns, each with whether it carried its own messages."""

    conversation_id: str | None
    summary: str | None
    summary_created_at: datetime | None
    summarized_turns: int
    turns: list[tuple[ConversationTurn, bool]]
    budget: ConversationBudget | None = None
    """The budget the snapshot carries (``None``: exported before budgets were kept)."""
    pinned_turns: tuple[ConversationTurn, ...] = ()
    """Pinned turns older than the summary (their ``turn_id`` below ``summarized_turns``)."""

    def target_id(self, conversation_id: str | None) -> str:
        """The id to import under: the caller's, else the snapshot's, else a new one.

        A caller's id is used whatever it is (``""`` included), so the id check refuses a bad
        one instead of the snapshot's own id being used in its place.
        """
        if conversation_id is not None:
            return conversation_id
        return self.conversation_id or uuid.uuid4().hex


def parse_snapshot(data: object, estimator: TokenEstimator) -> ParsedSnapshot:
    """Validates a snapshot completely before anything is stored.

    Missing or zero token estimates are re-computed with ``estimator``; turns without
    ``raw_messages`` are rebuilt from their prompt and response.

    Raises:
        TypeError: ``data`` is not a ``dict``.
        ValueError: A field is malformed; the message names it (``data['turns'][3]``).
    """
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
    created = data.get("summary_created_at")
    try:
        summary_at = as_utc(datetime.fromisoformat(created)) if isinstance(created, str) else None
    except ValueError as exc:
        raise ValueError(f"data['summary_created_at'] is invalid: {exc}") from exc
    source_id = data.get("conversation_id")
    budget = None
    if data.get("max_tokens") is not None:
        budget = parse_budget(data, "data")
    turns = [
        _parse_turn(item, summarized + i, f"data['turns'][{i}]", estimator)
        for i, item in enumerate(turns_data)
    ]
    pinned = _parse_pinned(data.get("pinned_turns", []), summarized, estimator)
    return ParsedSnapshot(
        conversation_id=source_id if isinstance(source_id, str) else None,
        summary=summary,
        summary_created_at=summary_at,
        summarized_turns=summarized,
        turns=turns,
        budget=budget,
        pinned_turns=pinned,
    )


def _parse_pinned(
    items: object, summarized: int, estimator: TokenEstimator
) -> tuple[ConversationTurn, ...]:
    """The snapshot's pinned turns older than its summary, each with its own id."""
    if not isinstance(items, list):
        raise ValueError(f"data['pinned_turns'] must be a list, got {type(items).__name__}")
    found: dict[int, ConversationTurn] = {}
    for i, item in enumerate(items):
        where = f"data['pinned_turns'][{i}]"
        turn_id = item.get("turn_id") if isinstance(item, dict) else None
        if (
            isinstance(turn_id, bool)
            or not isinstance(turn_id, int)
            or not 0 <= turn_id < summarized
        ):
            raise ValueError(
                f"{where}['turn_id'] must be an int below summarized_turns={summarized}, "
                f"got {turn_id!r}"
            )
        turn, _ = _parse_turn(item, turn_id, where, estimator)
        turn.metadata["pinned"] = True
        found[turn_id] = turn
    return tuple(found[turn_id] for turn_id in sorted(found))


def _parse_turn(
    item: object, turn_id: int, where: str, estimator: TokenEstimator
) -> tuple[ConversationTurn, bool]:
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
            default_messages(item["user_prompt"], item["assistant_response"], at)
            if not raw
            else messages_adapter().validate_python(raw)
        )
        estimate = item.get("token_estimate")
        if estimate is None or estimate == 0:  # 0: written by a design that did not count
            estimate = sum(estimator.estimate_many(message_texts(messages)))
        turn = ConversationTurn(
            turn_id=turn_id,
            user_prompt=item["user_prompt"],
            assistant_response=item["assistant_response"],
            raw_messages=messages,
            token_estimate=estimate,
            metadata=item.get("metadata") or {},
            timestamp=at,
        )
    except ValueError as exc:
        raise ValueError(f"{where} is invalid: {exc}") from exc
    return turn, bool(raw)
