"""Old path of :mod:`memlane.strategies.max_tokens_window`, kept so existing imports keep working."""

from memlane.strategies.max_tokens_window import (
    MaxTokensWindow,
)

__all__ = [
    "MaxTokensWindow",
]
