"""Conversation memory: per-conversation history kept inside a token budget.

- :mod:`~memlane.conversation.conversation_memory`: the public :class:`ConversationMemory`,
  which holds the parts below and runs their I/O-free plans with a sync or an async runner.
- :mod:`~memlane.conversation.conversation_cache`: the conversations' cached states and
  locks, and their life on the store (loading, catching up with other hosts, expiry,
  clearing).
- :mod:`~memlane.conversation.turn_plans`: adding turns, the transcript, importing.
- :mod:`~memlane.conversation.history_reads`: reading the history, its tokens, the turns.
- :mod:`~memlane.conversation.rolling_summary`: summaries, inline or in the background;
  :mod:`~memlane.conversation.summary_backoff`: backing off a failing summarizer, and the
  :class:`SummaryStatus`; :mod:`~memlane.conversation.summary_controls`: pinned turns,
  ``summarize_now`` and ``summary_status``;
  :mod:`~memlane.conversation.extraction_jobs`: fact extraction;
  :mod:`~memlane.conversation.background_jobs`: waiting for both.
- :mod:`~memlane.conversation.conversation_state`: one conversation in memory;
  :mod:`~memlane.conversation.conversation_log`: its store entries.
- :mod:`~memlane.conversation.applied_strategies`: short- and long-term strategies applied
  to a conversation; :mod:`~memlane.conversation.agent_hooks`: an agent's own.
- :mod:`~memlane.conversation.snapshot`: the snapshot format;
  :mod:`~memlane.conversation.snapshot_plans`: export and import.
- :mod:`~memlane.conversation.conversation_budget`: each conversation's own budget.
- :mod:`~memlane.conversation.knowledge`: a summarizer strategy's knowledge base.

The modules ``memory``, ``lifecycle``, ``plan``, ``summaries``, ``state``, ``strategies`` and
``budget`` are the old paths of these, kept as re-exports.
"""

from memlane._runner import Summarizer
from memlane.conversation.conversation_budget import ConversationBudget
from memlane.conversation.conversation_log import INDEX_NAMESPACE, SUMMARY_KEY
from memlane.conversation.conversation_memory import ConversationMemory
from memlane.conversation.summary_backoff import SummaryStatus
from memlane.messages import SUMMARY_PREFIX, message_texts, summary_message

__all__ = [
    "INDEX_NAMESPACE",
    "SUMMARY_KEY",
    "SUMMARY_PREFIX",
    "ConversationBudget",
    "ConversationMemory",
    "Summarizer",
    "SummaryStatus",
    "message_texts",
    "summary_message",
]
