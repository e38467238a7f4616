"""InMemoryStore: entries in process memory, on the Rust table or its pure-Python twin."""

from __future__ import annotations

import threading

from memlane import _backend
from memlane.stores._base import LocalStore
from memlane.stores.protocol import (
    check_entry,
    check_entry_id,
    check_expected_version,
    check_key,
    check_key_range,
    check_keyed_entry,
    check_namespace,
    check_storable,
    next_version,
    now,
    timestamp,
)
from memlane.types import MemoryEntry

__all__ = ["InMemoryStore"]


class InMemoryStore(LocalStore):
    """Entries in process memory, with a key index (``load_by_key`` is O(1)).

    The default store of every memory. Entries are kept as the objects you saved (not copied,
    not serialised), but they must hold what every other store can hold: plain JSON content
    and metadata. The one exception is the version, which the store assigns: an entry saved
    with a ``version`` other than the one stored is kept as a copy carrying the stored one.
    The ``async_`` methods run inline (nothing to wait for);
    :meth:`~memlane.stores.protocol.SyncMemoryStore.close` drops every entry.
    """

    persistent = False
    offload = False

    def __init__(self) -> None:
        self._table = _backend.active.MemoryTable()
        # Makes save_if's read and write one step against other save_if calls; plain saves
        # do not take it (they are not conditional, and stay one table call).
        self._cas_lock = threading.Lock()

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
        entry = _at_version(check_storable(check_entry(entry)), 0)
        self._check_open()
        self._table.save(namespace, entry.entry_id, entry.key, timestamp(entry.expires_at), entry)

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace: all of them, or none if one is unstorable."""
        namespace = check_namespace(namespace)
        checked = [_at_version(check_storable(check_entry(e)), 0) for e in entries]
        self._check_open()
        for entry in checked:
            self._table.save(
                namespace, entry.entry_id, entry.key, timestamp(entry.expires_at), entry
            )

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        """Saves ``entry`` if its key's unexpired holder is at ``expected_version`` (``None``:
        there is none); whether it did (see
        :meth:`~memlane.stores.protocol.ConditionalStore.save_if`).

        Raises:
            TypeError: ``entry.key`` is ``None`` or ``expected_version`` is not an ``int``;
                :class:`~memlane.errors.UnstorableValueError` for content or metadata that is
                not plain JSON.
            ValueError: ``expected_version`` is negative or too large.
            StoreClosedError: The store was closed.
        """
        namespace = check_namespace(namespace)
        entry = check_storable(check_keyed_entry(entry))
        expected_version = check_expected_version(expected_version)
        stored = _at_version(entry, next_version(expected_version))
        key = entry.key
        assert key is not None  # check_keyed_entry refused None
        self._check_open()
        with self._cas_lock:
            holder: MemoryEntry | None = self._table.load_by_key(namespace, key, now())
            if (None if holder is None else holder.version) != expected_version:
                return False
            self._table.save(
                namespace, stored.entry_id, stored.key, timestamp(stored.expires_at), stored
            )
            return True

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Unexpired keyed entries with ``start <= key < stop``, in key order.

        A filter over the namespace: in process memory that costs less than keeping a second,
        ordered index up to date on every save.
        """
        namespace = check_namespace(namespace)
        start, stop = check_key_range(start, stop)
        self._check_open()
        found = [
            e
            for e in self._table.load(namespace, now())
            if e.key is not None and start <= e.key < stop
        ]
        found.sort(key=_key)
        return found

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


def _at_version(entry: MemoryEntry, version: int) -> MemoryEntry:
    """``entry`` itself if it carries ``version``, else a shallow copy that does."""
    return entry if entry.version == version else entry.model_copy(update={"version": version})


def _key(entry: MemoryEntry) -> str:
    assert entry.key is not None  # load_range keeps keyed entries only
    return entry.key
