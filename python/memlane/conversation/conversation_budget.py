"""Each conversation's own budget: ``max_tokens`` and ``summarize_threshold`` as they were
when it was created, kept in the store with it.

A fleet of hosts (or an operator's tool opened with its defaults) may configure its memories
differently from the host that started a conversation; the conversation keeps the budget it
was started with. It is written once, at creation, as one entry of the conversation's
namespace keyed :data:`BUDGET_KEY` (read by the same ``load`` that reads the conversation,
so it costs no extra round trip), with an insert-if-absent write: of hosts creating one
conversation at once, the first one's budget holds for all. A conversation stored before
budgets were kept has none, and is read with the memory's own values.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from memlane.errors import CorruptStoreError
from memlane.types import MemoryEntry

BUDGET_KEY = "budget"
"""Store key of a conversation's budget entry (outside the ``log:`` keys of its events)."""


class ConversationBudget(NamedTuple):
    """A conversation's budget, as it was when the conversation was created.

    Attributes:
        max_tokens: Budget of the history sent with each request.
        summarize_threshold: Token total above which turns are folded into the summary
            (``None``: a snapshot from before budgets were kept did not say).
    """

    max_tokens: int
    summarize_threshold: int | None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_budget(data: object, where: str) -> ConversationBudget:
    """The budget ``data`` holds (``{"max_tokens": int, "summarize_threshold": int | None}``).

    Raises:
        ValueError: A field is missing or not a positive ``int``; the message names
            ``where`` and the value.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a dict, got {type(data).__name__}")
    max_tokens = data.get("max_tokens")
    if not _positive_int(max_tokens):
        raise ValueError(f"{where}['max_tokens'] must be an int > 0, got {max_tokens!r}")
    threshold = data.get("summarize_threshold")
    if threshold is not None and not _positive_int(threshold):
        raise ValueError(
            f"{where}['summarize_threshold'] must be an int > 0 or None, got {threshold!r}"
        )
    assert isinstance(max_tokens, int)
    return ConversationBudget(max_tokens, threshold if isinstance(threshold, int) else None)


def entry_budget(entry: MemoryEntry) -> tuple[ConversationBudget, int]:
    """The budget a budget entry holds, and the log position the conversation's life it
    belongs to began at (a clear at that position or later voids it).

    Raises:
        CorruptStoreError: It cannot be read back; names the entry.
    """
    try:
        budget = parse_budget(entry.content, "content")
        head = entry.content.get("head", 0)
        if isinstance(head, bool) or not isinstance(head, int) or head < 0:
            raise ValueError(f"content['head'] must be an int >= 0, got {head!r}")
    except ValueError as exc:
        raise CorruptStoreError(f"corrupt budget entry {entry.entry_id!r}: {exc}") from exc
    return budget, head


def budget_fields(budget: ConversationBudget) -> dict[str, Any]:
    """What a snapshot carries of a budget."""
    return {"max_tokens": budget.max_tokens, "summarize_threshold": budget.summarize_threshold}
