"""Old path of :mod:`memlane.conversation.conversation_budget`."""

from memlane.conversation.conversation_budget import (
    BUDGET_KEY,
    ConversationBudget,
    budget_fields,
    entry_budget,
    parse_budget,
)

__all__ = ["BUDGET_KEY", "ConversationBudget", "budget_fields", "entry_budget", "parse_budget"]
