"""Old path of :mod:`memlane.shared.state_store`, kept so existing imports keep working."""

from memlane.shared.state_store import (
    SharedStateStore,
)

__all__ = [
    "SharedStateStore",
]
