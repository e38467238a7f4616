"""Old path of :mod:`memlane.conversation.turn_plans` and of the summary's budget rules, now
in :mod:`memlane.conversation.rolling_summary`."""

from memlane.conversation.rolling_summary import (
    DEFAULT_SUMMARIZE_THRESHOLD,
    MIN_SUMMARY_ROOM,
    check_summary_room,
    default_threshold,
)
from memlane.conversation.turn_plans import NewTurn

__all__ = [
    "DEFAULT_SUMMARIZE_THRESHOLD",
    "MIN_SUMMARY_ROOM",
    "NewTurn",
    "check_summary_room",
    "default_threshold",
]
