"""InMemoryStore: entries in process memory, on the Rust table or its pure-Python twin."""

from __future__ import annotations

from memlane import _backend
from memlane.stores._base import LocalStore
from memlane.stores.protocol import (
    check_entry,
    check_entry_id,
    check_key,
    check_namespace,
    check_storable,
    now,
    timestamp,
)
from memlane.types import MemoryEntry

__all__ = ["InMemoryStore"]


class InMemoryStore(LocalStore):
    """Entries in process memory, with a key index (``load_by_key`` is O(1)).

    The default store of every memory. Entries are kept as the objects you saved (not copied,
    not serialised), but they must hold what every other store can hold: plain JSON content
    and metadata. The ``async_`` methods run inline (nothing to wait for);
    :meth:`~memlane.stores.protocol.SyncMemoryStore.close` drops every entry.
    """

    persistent = False
    offload = False

    def __init__(self) -> None:
        self._table = _backend.active.MemoryTable()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def _release(self) -> None:
        # An empty table of the same implementation, so the entries can be freed at once.
        self._table = type(self._table)()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry`` (by ``entry_id``, and by key within the namespace).

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            StoreClosedError: The store was closed.
        """
        namespace = check_namespace(namespace)
        entry = check_storable(check_entry(entry))
        self._check_open()
        self._table.save(namespace, entry.entry_id, entry.key, timestamp(entry.expires_at), entry)

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace: all of them, or none if one is unstorable."""
        namespace = check_namespace(namespace)
        checked = [check_storable(check_entry(e)) for e in entries]
        self._check_open()
        for entry in checked:
            self._table.save(
                namespace, entry.entry_id, entry.key, timestamp(entry.expires_at), entry
            )

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        namespace = check_namespace(namespace)
        self._check_open()
        return list(self._table.load(namespace, now()))

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        namespace, key = check_namespace(namespace), check_key(key)
        self._check_open()
        found: MemoryEntry | None = self._table.load_by_key(namespace, key, now())
        return found

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        namespace, entry_id = check_namespace(namespace), check_entry_id(entry_id)
        self._check_open()
        return self._table.delete(namespace, entry_id)

    def clear(self, namespace: str) -> int:
        """Removes every entry of the namespace; how many."""
        namespace = check_namespace(namespace)
        self._check_open()
        return self._table.clear(namespace)

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one entry, in creation order."""
        self._check_open()
        return self._table.namespaces()

    def cleanup_expired(self) -> int:
        """Removes expired entries; how many."""
        self._check_open()
        return self._table.cleanup_expired(now())
