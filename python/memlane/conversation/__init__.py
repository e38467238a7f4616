"""Conversation memory: per-conversation history kept inside a token budget.

- :mod:`~memlane.conversation.memory`: the public :class:`ConversationMemory`.
- :mod:`~memlane.conversation.plan`: its logic, as I/O-free plans run by a sync and an
  async runner: adding turns and importing here, a conversation's life on the store
  (loading, catching up with other hosts, expiry, clearing) in
  :mod:`~memlane.conversation.lifecycle`, summaries and fact extraction in
  :mod:`~memlane.conversation.summaries`.
- :mod:`~memlane.conversation.state`: one conversation in memory and its store entries.
- :mod:`~memlane.conversation.snapshot`: export and import.
- :mod:`~memlane.conversation.budget`: each conversation's own budget, kept with it.
"""

from memlane._runner import Summarizer
from memlane.conversation.budget import ConversationBudget
from memlane.conversation.memory import ConversationMemory
from memlane.conversation.state import INDEX_NAMESPACE, SUMMARY_KEY
from memlane.messages import SUMMARY_PREFIX, message_texts, summary_message

__all__ = [
    "INDEX_NAMESPACE",
    "SUMMARY_KEY",
    "SUMMARY_PREFIX",
    "ConversationBudget",
    "ConversationMemory",
    "Summarizer",
    "message_texts",
    "summary_message",
]
