"""Pure-Python twin of the Rust in-memory table (``rust/src/store/memory.rs``).

The rules it shares with the Rust table are stated in :mod:`memlane._pure.store`, which
re-exports it; this module holds only the table, so the SQLite twin's module stays readable.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


def _live(expires_at: float | None, now: float) -> bool:
    return expires_at is None or expires_at > now


@dataclass
class _Slot:
    entry_id: str
    key: str | None
    expires_at: float | None
    payload: Any


@dataclass
class _Namespace:
    slots: dict[str, _Slot] = field(default_factory=dict)  # entry_id -> slot, insertion order
    keys: dict[str, str] = field(default_factory=dict)  # key -> entry_id


class MemoryTable:
    """Entries per namespace with a key index: ``load_by_key`` is a dict lookup, not a scan."""

    def __init__(self) -> None:
        self._namespaces: dict[str, _Namespace] = {}
        self._owner: dict[str, str] = {}  # entry_id -> namespace
        self._lock = threading.Lock()

    def _drop(self, ns: _Namespace, namespace: str, entry_id: str) -> None:
        slot = ns.slots.pop(entry_id)
        if slot.key is not None and ns.keys.get(slot.key) == entry_id:
            del ns.keys[slot.key]
        del self._owner[entry_id]
        if not ns.slots:
            del self._namespaces[namespace]

    def save(
        self,
        namespace: str,
        entry_id: str,
        key: str | None,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Inserts or replaces one entry (see the module docstring for the rules)."""
        with self._lock:
            owner = self._owner.get(entry_id)
            if owner is not None and owner != namespace:
                self._drop(self._namespaces[owner], owner, entry_id)
            ns = self._namespaces.setdefault(namespace, _Namespace())
            if key is not None:
                holder = ns.keys.get(key)
                if holder is not None and holder != entry_id:
                    self._drop(ns, namespace, holder)
                    ns = self._namespaces.setdefault(namespace, _Namespace())
            slot = ns.slots.get(entry_id)
            if slot is None:
                ns.slots[entry_id] = _Slot(entry_id, key, expires_at, payload)
                self._owner[entry_id] = namespace
            else:
                if slot.key is not None and slot.key != key:
                    del ns.keys[slot.key]
                slot.key, slot.expires_at, slot.payload = key, expires_at, payload
            if key is not None:
                ns.keys[key] = entry_id

    def load(self, namespace: str, now: float) -> list[Any]:
        """Unexpired payloads of a namespace, in insertion order."""
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                return []
            return [s.payload for s in ns.slots.values() if _live(s.expires_at, now)]

    def load_by_key(self, namespace: str, key: str, now: float) -> Any:
        """The unexpired payload holding ``key``, or ``None``."""
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                return None
            entry_id = ns.keys.get(key)
            if entry_id is None:
                return None
            slot = ns.slots[entry_id]
            return slot.payload if _live(slot.expires_at, now) else None

    def load_by_id(self, namespace: str, entry_id: str, now: float) -> Any:
        """The unexpired payload of ``entry_id`` in this namespace, or ``None``."""
        with self._lock:
            ns = self._namespaces.get(namespace)
            slot = None if ns is None else ns.slots.get(entry_id)
            return slot.payload if slot is not None and _live(slot.expires_at, now) else None

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes an entry of this namespace; whether there was one."""
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None or entry_id not in ns.slots:
                return False
            self._drop(ns, namespace, entry_id)
            return True

    def clear(self, namespace: str) -> int:
        """Removes every entry of a namespace (expired ones too); how many there were."""
        with self._lock:
            ns = self._namespaces.pop(namespace, None)
            if ns is None:
                return 0
            for entry_id in ns.slots:
                del self._owner[entry_id]
            return len(ns.slots)

    def cleanup_expired(self, now: float) -> int:
        """Removes expired entries everywhere; how many."""
        with self._lock:
            doomed = [
                (name, s.entry_id)
                for name, ns in self._namespaces.items()
                for s in ns.slots.values()
                if not _live(s.expires_at, now)
            ]
            for name, entry_id in doomed:
                self._drop(self._namespaces[name], name, entry_id)
            return len(doomed)

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one entry, in creation order."""
        with self._lock:
            return list(self._namespaces)

    def __len__(self) -> int:
        with self._lock:
            return len(self._owner)
