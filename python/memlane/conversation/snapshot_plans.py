"""Export and import as plan methods of :class:`~memlane.ConversationMemory` (``memory`` is
its ``self``), made the public ``name`` / ``async_name`` pairs there; the snapshot format is
:mod:`memlane.conversation.snapshot`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlane._runner import Plan
from memlane.conversation.conversation_cache import check_cid
from memlane.conversation.snapshot import export_snapshot, parse_snapshot
from memlane.conversation.turn_plans import import_plan

if TYPE_CHECKING:
    from memlane.conversation.conversation_memory import ConversationMemory

__all__ = ["export_conversation", "import_conversation"]


def export_conversation(memory: ConversationMemory, conversation_id: str) -> Plan[dict[str, Any]]:
    """A JSON-ready snapshot of a conversation.

    Returns:
        ``conversation_id``, ``turns`` (``turn_id``, ``user_prompt``,
        ``assistant_response``, ``token_estimate``, ``metadata``, ``timestamp`` and
        ``raw_messages`` serialised with pydantic-ai's ``ModelMessagesTypeAdapter``),
        ``pinned_turns`` (pinned turns older than the summary, in the same form),
        ``summary``, ``summary_created_at``, ``summarized_turns``, ``total_tokens``, and
        the conversation's budget: ``max_tokens`` and ``summarize_threshold`` (an import
        keeps them).

    Raises:
        ConversationNotFoundError: (a ``KeyError``) the id is unknown.
    """
    cid = check_cid(conversation_id)
    conversations = memory._conversations
    yield from conversations.locked(cid)
    state = yield from conversations.existing_plan(cid)
    return export_snapshot(cid, state, conversations.budget_of(state))


def import_conversation(
    memory: ConversationMemory, data: dict[str, Any], *, conversation_id: str | None = None
) -> Plan[str]:
    """Loads an :meth:`export_conversation` snapshot; returns the conversation id.

    Missing or zero token estimates are re-computed; turns without ``raw_messages`` are rebuilt
    from their prompt and response. The whole snapshot is validated before anything is
    stored.

    Args:
        data: The snapshot.
        conversation_id: Import under this id instead of the snapshot's (or a new one).

    Raises:
        ValueError: The snapshot is malformed, or the id already holds a conversation
            (nothing is overwritten).
    """
    snapshot = parse_snapshot(data, memory.estimator)
    cid = check_cid(snapshot.target_id(conversation_id))
    yield from memory._conversations.locked(cid)
    return (yield from import_plan(memory._conversations, memory._summaries, cid, snapshot))


for _plan in (export_conversation, import_conversation):
    # The public pair is named after the plan method it would be on the class.
    _plan.__qualname__ = f"ConversationMemory._{_plan.__name__}"
    _plan.__name__ = f"_{_plan.__name__}"
del _plan
