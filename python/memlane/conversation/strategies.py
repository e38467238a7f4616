"""Old path of :mod:`memlane.conversation.applied_strategies`."""

from memlane.conversation.applied_strategies import (
    DensitySummarizer,
    check_long_term,
    check_short_term,
    fold_count,
    short_term_view,
)

__all__ = [
    "DensitySummarizer",
    "check_long_term",
    "check_short_term",
    "fold_count",
    "short_term_view",
]
