"""Old path of :mod:`memlane.shared.feed_cache`, kept so existing imports keep working."""

from memlane.shared.feed_cache import (
    MAX_KEPT,
    Window,
    Windows,
)

__all__ = [
    "MAX_KEPT",
    "Window",
    "Windows",
]
