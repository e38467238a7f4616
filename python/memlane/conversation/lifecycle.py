"""Old path of :mod:`memlane.conversation.conversation_cache` (a conversation's life on the
store)."""

from memlane.conversation.conversation_cache import ConversationCache, check_cid

__all__ = ["ConversationCache", "check_cid"]
