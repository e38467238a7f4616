"""Working memory: a scoped key-value scratchpad of facts with importance and TTL.

Each operation is written once as a plan (see :mod:`memlane._runner`); the sync methods run
it with blocking store calls and the ``async_`` methods await the same calls.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from memlane._runner import Plan, StoreCall, run_async, run_sync
from memlane._validate import check_fraction, check_identifier, check_str, check_ttl
from memlane.store import InMemoryStore, MemoryStore
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

    # ------------------------------------------------------------------ plans

    def _set_plan(
        self, key: str, value: Any, importance: float, ttl: float | timedelta | None
    ) -> Plan[None]:
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
        yield StoreCall("save", (self.namespace, entry))

    def _entry_plan(self, key: str) -> Plan[MemoryEntry | None]:
        entry: MemoryEntry | None = yield StoreCall(
            "load_by_key", (self.namespace, check_str(key, "key"))
        )
        return entry

    def _get_plan(self, key: str, default: Any) -> Plan[Any]:
        entry = yield from self._entry_plan(key)
        return default if entry is None else entry.content

    def _has_plan(self, key: str) -> Plan[bool]:
        return (yield from self._entry_plan(key)) is not None

    def _delete_plan(self, key: str) -> Plan[bool]:
        entry = yield from self._entry_plan(key)
        if entry is None:
            return False
        deleted: bool = yield StoreCall("delete", (self.namespace, entry.entry_id))
        return deleted

    def _entries_plan(self, view: Callable[[list[MemoryEntry]], T]) -> Plan[T]:
        entries: list[MemoryEntry] = yield StoreCall("load", (self.namespace,))
        return view([e for e in entries if e.key is not None])

    def _clear_plan(self) -> Plan[int]:
        count: int = yield StoreCall("clear", (self.namespace,))
        return count

    # ------------------------------------------------------------------ writing

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
            value: The fact; must be plain JSON (every store holds the same values).
            importance: 0.0–1.0.
            ttl: Lifetime in seconds (or a ``timedelta``); ``None`` keeps it until deleted.

        Raises:
            TypeError: ``key`` is not a ``str``, or ``value`` cannot be stored.
            ValueError: ``importance`` outside 0.0–1.0 or a non-positive ``ttl``.
        """
        run_sync(self._set_plan(key, value, importance, ttl), self.store)

    async def async_set(
        self,
        key: str,
        value: Any,
        *,
        importance: float = 0.5,
        ttl: float | timedelta | None = None,
    ) -> None:
        """Async :meth:`set`."""
        await run_async(self._set_plan(key, value, importance, ttl), self.store)

    def delete(self, key: str) -> bool:
        """Removes ``key``; whether it was there."""
        return run_sync(self._delete_plan(key), self.store)

    async def async_delete(self, key: str) -> bool:
        """Async :meth:`delete`."""
        return await run_async(self._delete_plan(key), self.store)

    def clear(self) -> int:
        """Removes every fact of this scope; how many."""
        return run_sync(self._clear_plan(), self.store)

    async def async_clear(self) -> int:
        """Async :meth:`clear`."""
        return await run_async(self._clear_plan(), self.store)

    # ------------------------------------------------------------------ reading

    def get_entry(self, key: str) -> MemoryEntry | None:
        """The stored entry for ``key`` (with importance and expiry), or ``None``."""
        return run_sync(self._entry_plan(key), self.store)

    async def async_get_entry(self, key: str) -> MemoryEntry | None:
        """Async :meth:`get_entry`."""
        return await run_async(self._entry_plan(key), self.store)

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        return run_sync(self._get_plan(key, default), self.store)

    async def async_get(self, key: str, default: Any = None) -> Any:
        """Async :meth:`get`."""
        return await run_async(self._get_plan(key, default), self.store)

    def has(self, key: str) -> bool:
        """Whether an unexpired value is stored under ``key``."""
        return run_sync(self._has_plan(key), self.store)

    async def async_has(self, key: str) -> bool:
        """Async :meth:`has`."""
        return await run_async(self._has_plan(key), self.store)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key)

    def entries(self) -> list[MemoryEntry]:
        """Every unexpired keyed entry, in insertion order."""
        return run_sync(self._entries_plan(list), self.store)

    async def async_entries(self) -> list[MemoryEntry]:
        """Async :meth:`entries`."""
        return await run_async(self._entries_plan(list), self.store)

    def keys(self) -> list[str]:
        """Keys in insertion order."""
        return [key for key, _ in self.items()]

    async def async_keys(self) -> list[str]:
        """Async :meth:`keys`."""
        return [key for key, _ in await self.async_items()]

    def items(self) -> list[tuple[str, Any]]:
        """``(key, value)`` pairs in insertion order."""
        return run_sync(self._entries_plan(_keyed), self.store)

    async def async_items(self) -> list[tuple[str, Any]]:
        """Async :meth:`items`."""
        return await run_async(self._entries_plan(_keyed), self.store)

    def to_dict(self) -> dict[str, Any]:
        """All facts as a ``dict``."""
        return dict(self.items())

    async def async_to_dict(self) -> dict[str, Any]:
        """Async :meth:`to_dict`."""
        return dict(await self.async_items())

    def __len__(self) -> int:
        return len(self.entries())

    def to_context_string(self) -> str:
        """The facts as prompt text: ``"Working Memory:\\n- key: value"`` lines, ``""`` if none."""
        return run_sync(self._entries_plan(_context), self.store)

    async def async_to_context_string(self) -> str:
        """Async :meth:`to_context_string`."""
        return await run_async(self._entries_plan(_context), self.store)
