"""Old path of :mod:`memlane.conversation.conversation_memory`."""

from memlane.conversation.conversation_memory import ConversationMemory

__all__ = ["ConversationMemory"]
