"""Old path of :mod:`memlane.conversation.rolling_summary`."""

from memlane.conversation.rolling_summary import RollingSummaries

__all__ = ["RollingSummaries"]
