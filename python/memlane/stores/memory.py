"""Old path of :mod:`memlane.stores.in_memory`, kept so existing imports keep working."""

from memlane.stores.in_memory import InMemoryStore

__all__ = ["InMemoryStore"]
