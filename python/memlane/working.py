"""Working memory: a scoped key-value scratchpad of facts with importance and TTL.

Each operation is written once as a plan (see :mod:`memlane._runner`); the sync methods run
it with blocking store calls and the ``async_`` methods await the same calls.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from memlane._runner import (
    Clear,
    Delete,
    Load,
    LoadByKey,
    Plan,
    Save,
    Step,
    StoreOp,
    Then,
    async_method,
    sync_method,
)
from memlane._validate import check_fraction, check_identifier, check_str, check_ttl
from memlane.stores import InMemoryStore, MemoryStore
from memlane.types import MemoryEntry, MemoryScope, utc_now

T = TypeVar("T")


def _keyed(entries: list[MemoryEntry]) -> list[tuple[str, Any]]:
    return [(e.key, e.content) for e in entries if e.key is not None]


def _context(entries: list[MemoryEntry]) -> str:
    items = _keyed(entries)
    if not items:
        return ""
    return "Working Memory:\n" + "\n".join(f"- {k}: {v}" for k, v in items)


class WorkingMemory:
    """A scratchpad of facts for one agent scope (namespace ``working:{scope_id}``).

    Several scopes can share one store without seeing each other's facts. Every method has
    an ``async_`` twin.

    Args:
        store: Where facts live; a private :class:`~memlane.store.InMemoryStore` by default.
        scope_id: Name of this scope.

    Raises:
        TypeError: ``scope_id`` is not a ``str``.
        ValueError: ``scope_id`` is empty or contains NUL.
    """

    def __init__(self, *, store: MemoryStore | None = None, scope_id: str = "default") -> None:
        self.scope_id = check_identifier(scope_id, "scope_id")
        self.store: MemoryStore = store if store is not None else InMemoryStore()
        self.namespace = f"working:{scope_id}"

    # ------------------------------------------------------------------ writing

    def _set(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.5,
        ttl: float | timedelta | None = None,
    ) -> Step[None]:
        """Stores ``value`` under ``key``, replacing any previous value atomically.

        Args:
            key: The fact's name.
            value: The fact; must be plain JSON (every store holds the same values).
            importance: 0.0–1.0.
            ttl: Lifetime in seconds (or a ``timedelta``); ``None`` keeps it until deleted.

        Raises:
            TypeError: ``key`` is not a ``str``, or ``value`` cannot be stored.
            ValueError: ``importance`` outside 0.0–1.0 or a non-positive ``ttl``.
        """
        check_str(key, "key")
        importance = check_fraction(importance, "importance")
        lifetime = check_ttl(ttl)
        now = utc_now()
        entry = MemoryEntry(
            scope=MemoryScope.WORKING,
            key=key,
            content=value,
            created_at=now,
            expires_at=None if lifetime is None else now + lifetime,
            importance=importance,
        )
        return Save(self.namespace, entry)

    set = sync_method(_set)
    async_set = async_method(_set)

    def _delete(self, key: str) -> Plan[bool]:
        """Removes ``key``; whether it was there."""
        entry = yield self._get_entry(key)
        if entry is None:
            return False
        deleted: bool = yield Delete(self.namespace, entry.entry_id)
        return deleted

    delete = sync_method(_delete)
    async_delete = async_method(_delete)

    def _clear(self) -> Step[int]:
        """Removes every fact of this scope; how many."""
        return Clear(self.namespace)

    clear = sync_method(_clear)
    async_clear = async_method(_clear)

    # ------------------------------------------------------------------ reading one fact

    def _lookup(self, key: str, then: Callable[[MemoryEntry | None], T]) -> StoreOp[T]:
        if type(key) is not str:
            check_str(key, "key")
        return Then(LoadByKey(self.namespace, key), then)

    def _get_entry(self, key: str) -> StoreOp[MemoryEntry | None]:
        """The stored entry for ``key`` (with importance and expiry), or ``None``."""
        return self._lookup(key, _same)

    get_entry = sync_method(_get_entry)
    async_get_entry = async_method(_get_entry)

    def _get(self, key: str, default: Any = None) -> Step[Any]:
        """The value stored under ``key``, or ``default``."""
        return self._lookup(key, lambda entry: default if entry is None else entry.content)

    get = sync_method(_get)
    async_get = async_method(_get)

    def _has(self, key: str) -> Step[bool]:
        """Whether an unexpired value is stored under ``key``."""
        return self._lookup(key, _found)

    has = sync_method(_has)
    async_has = async_method(_has)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key)

    # ------------------------------------------------------------------ reading every fact

    def _view(self, view: Callable[[list[MemoryEntry]], T]) -> StoreOp[T]:
        return Then(Load(self.namespace), lambda entries: view(_keyed_entries(entries)))

    def _entries(self) -> Step[list[MemoryEntry]]:
        """Every unexpired keyed entry, in insertion order."""
        return self._view(list)

    def _keys(self) -> Step[list[str]]:
        """Keys in insertion order."""
        return self._view(_keys)

    def _items(self) -> Step[list[tuple[str, Any]]]:
        """``(key, value)`` pairs in insertion order."""
        return self._view(_keyed)

    def _to_dict(self) -> Step[dict[str, Any]]:
        """All facts as a ``dict``."""
        return self._view(_as_dict)

    def _to_context_string(self) -> Step[str]:
        """The facts as prompt text: ``"Working Memory:\\n- key: value"`` lines, ``""`` if none."""
        return self._view(_context)

    entries, async_entries = sync_method(_entries), async_method(_entries)
    keys, async_keys = sync_method(_keys), async_method(_keys)
    items, async_items = sync_method(_items), async_method(_items)
    to_dict, async_to_dict = sync_method(_to_dict), async_method(_to_dict)
    to_context_string = sync_method(_to_context_string)
    async_to_context_string = async_method(_to_context_string)

    def __len__(self) -> int:
        return len(self.entries())


def _same(entry: MemoryEntry | None) -> MemoryEntry | None:
    return entry


def _found(entry: MemoryEntry | None) -> bool:
    return entry is not None


def _keyed_entries(entries: list[MemoryEntry]) -> list[MemoryEntry]:
    return [e for e in entries if e.key is not None]


def _keys(entries: list[MemoryEntry]) -> list[str]:
    return [e.key for e in entries if e.key is not None]


def _as_dict(entries: list[MemoryEntry]) -> dict[str, Any]:
    return dict(_keyed(entries))
