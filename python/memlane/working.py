"""Working memory: a scoped key-value scratchpad of facts with importance and TTL."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from memlane.store import InMemoryStore, MemoryStore, check_key
from memlane.types import MemoryEntry, MemoryScope, utc_now

_MISSING = object()


def _check_ttl(ttl: float | timedelta | None) -> timedelta | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, int | float) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise TypeError(f"ttl must be seconds (int or float) or timedelta, not {type(ttl).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"ttl must be a positive finite duration, got {ttl!r}")
    return timedelta(seconds=seconds)


def _check_importance(importance: object) -> float:
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise TypeError(f"importance must be a number, not {type(importance).__name__}")
    if not 0.0 <= importance <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"importance must be between 0.0 and 1.0, got {importance!r}")
    return float(importance)


class WorkingMemory:
    """A scratchpad of facts for one agent scope (namespace ``working:{scope_id}``).

    Several scopes can share one store without seeing each other's facts.

    Args:
        store: Where facts live; a private :class:`~memlane.store.InMemoryStore` by default.
        scope_id: Name of this scope.
    """

    def __init__(self, *, store: MemoryStore | None = None, scope_id: str = "default") -> None:
        if not isinstance(scope_id, str):
            raise TypeError(f"scope_id must be str, not {type(scope_id).__name__}")
        if not scope_id:
            raise ValueError("scope_id must be a non-empty string")
        self.store: MemoryStore = store if store is not None else InMemoryStore()
        self.scope_id = scope_id
        self.namespace = f"working:{scope_id}"

    def _entry(self, key: str, value: Any, importance: float, ttl: float | timedelta | None) -> MemoryEntry:
        check_key(key)
        importance = _check_importance(importance)
        lifetime = _check_ttl(ttl)
        now = utc_now()
        return MemoryEntry(
            scope=MemoryScope.WORKING,
            key=key,
            content=value,
            created_at=now,
            expires_at=None if lifetime is None else now + lifetime,
            importance=importance,
        )

    def set(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.5,
        ttl: float | timedelta | None = None,
    ) -> None:
        """Stores ``value`` under ``key``, replacing any previous value atomically.

        Args:
            key: The fact's name.
            value: The fact; must be JSON-serialisable on persistent stores.
            importance: 0.0–1.0.
            ttl: Lifetime in seconds (or a ``timedelta``); ``None`` keeps it until deleted.

        Raises:
            TypeError: ``key`` is not a ``str``, or ``value`` cannot be stored.
            ValueError: ``importance`` outside 0.0–1.0 or a non-positive ``ttl``.
        """
        self.store.save(self.namespace, self._entry(key, value, importance, ttl))

    async def async_set(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.5,
        ttl: float | timedelta | None = None,
    ) -> None:
        """Async :meth:`set`."""
        await self.store.async_save(self.namespace, self._entry(key, value, importance, ttl))

    def get_entry(self, key: str) -> MemoryEntry | None:
        """The stored entry for ``key`` (with importance and expiry), or ``None``."""
        return self.store.load_by_key(self.namespace, check_key(key))

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        entry = self.get_entry(key)
        return default if entry is None else entry.content

    async def async_get(self, key: str, default: Any = None) -> Any:
        """Async :meth:`get`."""
        entry = await self.store.async_load_by_key(self.namespace, check_key(key))
        return default if entry is None else entry.content

    def has(self, key: str) -> bool:
        """Whether an unexpired value is stored under ``key``."""
        return self.get_entry(key) is not None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key)

    def delete(self, key: str) -> bool:
        """Removes ``key``; whether it was there."""
        entry = self.get_entry(key)
        return entry is not None and self.store.delete(self.namespace, entry.entry_id)

    async def async_delete(self, key: str) -> bool:
        """Async :meth:`delete`."""
        entry = await self.store.async_load_by_key(self.namespace, check_key(key))
        return entry is not None and await self.store.async_delete(self.namespace, entry.entry_id)

    def entries(self) -> list[MemoryEntry]:
        """Every unexpired keyed entry, in insertion order."""
        return [e for e in self.store.load(self.namespace) if e.key is not None]

    def keys(self) -> list[str]:
        """Keys in insertion order."""
        return [e.key for e in self.entries() if e.key is not None]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, value)`` pairs in insertion order."""
        return [(e.key, e.content) for e in self.entries() if e.key is not None]

    def to_dict(self) -> dict[str, Any]:
        """All facts as a ``dict``."""
        return dict(self.items())

    def __len__(self) -> int:
        return len(self.entries())

    def to_context_string(self) -> str:
        """The facts as prompt text: ``"Working Memory:\\n- key: value"`` lines, ``""`` if none."""
        items = self.items()
        if not items:
            return ""
        return "Working Memory:\n" + "\n".join(f"- {k}: {v}" for k, v in items)

    def clear(self) -> int:
        """Removes every fact of this scope; how many."""
        return self.store.clear(self.namespace)

    async def async_clear(self) -> int:
        """Async :meth:`clear`."""
        return await self.store.async_clear(self.namespace)
