"""The :class:`MemoryStore` protocol, the argument checks every store applies, and the value rule.

Every store follows the same rules: saving an ``entry_id`` again replaces that entry; a key is
unique within a namespace (saving a keyed entry replaces whatever held the key, atomically);
``load`` keeps insertion order; expired entries are never returned. Every store accepts the
same values: content and metadata that are plain JSON (see :func:`check_storable`), so code
tested on :class:`~memlane.stores.InMemoryStore` behaves the same on a database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from memlane._pure.store import Row
from memlane._validate import check_identifier, check_str, type_name
from memlane.errors import CorruptStoreError, UnstorableValueError
from memlane.types import MemoryEntry, MemoryScope

T = TypeVar("T")

__all__ = [
    "AsyncMemoryStore",
    "MemoryStore",
    "SyncMemoryStore",
    "check_entry",
    "check_entry_id",
    "check_key",
    "check_namespace",
    "check_storable",
    "dumps_json",
    "entry_to_row",
    "row_to_entry",
]


@runtime_checkable
class SyncMemoryStore(Protocol):
    """The blocking half of :class:`MemoryStore`."""

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts ``entry`` or replaces the entry with the same ``entry_id`` or key."""

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace (each store's docs say how atomically)."""

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order."""

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""

    def clear(self, namespace: str) -> int:
        """Removes every entry of ``namespace``; how many."""

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one entry."""

    def cleanup_expired(self) -> int:
        """Removes expired entries of every namespace; how many."""

    def initialize(self) -> None:
        """Gets ready for use (a database store connects and migrates); optional."""

    def close(self) -> None:
        """Releases what the store holds (files, connections)."""


@runtime_checkable
class AsyncMemoryStore(Protocol):
    """The awaitable half of :class:`MemoryStore`: the same operations, never blocking the loop."""

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async :meth:`~SyncMemoryStore.save`."""

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Async :meth:`~SyncMemoryStore.save_many`."""

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async :meth:`~SyncMemoryStore.load`."""

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async :meth:`~SyncMemoryStore.load_by_key`."""

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Async :meth:`~SyncMemoryStore.delete`."""

    async def async_clear(self, namespace: str) -> int:
        """Async :meth:`~SyncMemoryStore.clear`."""

    async def async_namespaces(self) -> list[str]:
        """Async :meth:`~SyncMemoryStore.namespaces`."""

    async def async_cleanup_expired(self) -> int:
        """Async :meth:`~SyncMemoryStore.cleanup_expired`."""

    async def async_initialize(self) -> None:
        """Async :meth:`~SyncMemoryStore.initialize`."""

    async def async_close(self) -> None:
        """Async :meth:`~SyncMemoryStore.close`."""


@runtime_checkable
class MemoryStore(SyncMemoryStore, AsyncMemoryStore, Protocol):
    """Where memory lives: every operation as a sync method and an ``async_`` twin.

    ``with store:`` and ``async with store:`` initialise on entry and close on exit.
    """

    def __enter__(self) -> Self:
        """:meth:`initialize`, then the store."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """:meth:`close`."""

    async def __aenter__(self) -> Self:
        """:meth:`async_initialize`, then the store."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """:meth:`async_close`."""


# ---------------------------------------------------------------------------- arguments


def check_namespace(namespace: object) -> str:
    """A namespace must be a non-empty ``str`` without NUL characters.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Empty or containing ``\\x00``.
    """
    return check_identifier(namespace, "namespace")


def check_key(key: object) -> str:
    """A lookup key must be a ``str``.

    Raises:
        TypeError: Not a ``str``.
    """
    return check_str(key, "key")


def check_entry_id(entry_id: object) -> str:
    """An ``entry_id`` argument must be a ``str``.

    Raises:
        TypeError: Not a ``str``.
    """
    return check_str(entry_id, "entry_id")


def check_entry(entry: object) -> MemoryEntry:
    """The entry argument of ``save`` must be a :class:`MemoryEntry`.

    Raises:
        TypeError: Anything else.
    """
    if not isinstance(entry, MemoryEntry):
        raise TypeError(f"entry must be MemoryEntry, not {type_name(entry)}")
    return entry


# ---------------------------------------------------------------------------- the value rule


def _is_plain_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON built from the exact built-in types (the fast check).

    Exact type tests keep every save cheap (a conversation turn is ~60 values); ``False``
    only sends the value on to :func:`_find_unstorable`, which accepts subclasses too.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or item is None or kind is bool:
            continue
        if kind is dict:
            if any(type(k) is not str for k in item):
                return False
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is not float or not math.isfinite(item):
            return False
    return True


def find_in_json(
    value: Any,
    path: str,
    scalar: Callable[[Any, str], T | None],
    key: Callable[[Any, str], T | None],
) -> T | None:
    """The first problem in a JSON-like value, depth first, or ``None``.

    ``key(k, path)`` judges each dict key and ``scalar(item, path)`` each value that is not a
    dict, list or tuple; ``path`` names where it is, e.g. ``content['a'][2]``.
    """
    if isinstance(value, dict):
        for k, item in value.items():
            found = key(k, path)
            if found is None:
                found = find_in_json(item, f"{path}[{k!r}]", scalar, key)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_in_json(item, f"{path}[{i}]", scalar, key)
            if found is not None:
                return found
        return None
    return scalar(value, path)


def _json_scalar(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} (non-finite float {value!r})"
    return f"{path} (type {type_name(value)})"


def _json_key(k: Any, path: str) -> str | None:
    return None if isinstance(k, str) else f"{path} (dict key {k!r} of type {type_name(k)})"


def _find_unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` stops being plain JSON (``None`` if it is), e.g. ``content['a'][2]``."""
    return find_in_json(value, path, _json_scalar, _json_key)


def _unstorable(key: str | None, found: str) -> UnstorableValueError:
    return UnstorableValueError(
        f"cannot store entry with key {key!r}: {found} is not JSON-serialisable"
    )


def check_storable(entry: MemoryEntry) -> MemoryEntry:
    """``entry`` if its content and metadata are plain JSON, which every store can hold.

    Only what JSON holds exactly is accepted (no NaN, no non-``str`` dict keys), so what is
    read back equals what was saved, whichever store holds it.

    Raises:
        UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``); the
            message names the key and where the offending value is.
    """
    for value, field in ((entry.content, "content"), (entry.metadata, "metadata")):
        found = None if _is_plain_json(value) else _find_unstorable(value, field)
        if found is not None:
            raise _unstorable(entry.key, found)
    return entry


def dumps_json(value: Any, *, key: str | None, field: str) -> str:
    """JSON text of ``value``, or an error naming the key and the offending type.

    Raises:
        UnstorableValueError: ``value`` is not plain JSON (see :func:`check_storable`).
    """
    found = None if _is_plain_json(value) else _find_unstorable(value, field)
    if found is not None:
        raise _unstorable(key, found)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def timestamp(value: datetime | None) -> float | None:
    """Unix seconds of an expiry, as the tables store it."""
    return None if value is None else value.timestamp()


def now() -> float:
    """The current time in Unix seconds, for the tables' expiry checks."""
    return datetime.now(UTC).timestamp()


def entry_to_row(entry: MemoryEntry) -> Row:
    """The persisted form of an entry (validates that it is storable)."""
    return (
        entry.entry_id,
        entry.scope.value,
        entry.key,
        dumps_json(entry.content, key=entry.key, field="content"),
        dumps_json(entry.metadata, key=entry.key, field="metadata"),
        entry.created_at.isoformat(),
        timestamp(entry.expires_at),
        entry.importance,
    )


def row_to_entry(row: Row | tuple[Any, ...], where: str) -> MemoryEntry:
    """An entry from its persisted form.

    Raises:
        CorruptStoreError: The row cannot be decoded; the message names ``where``.
    """
    entry_id, scope, key, content, metadata, created_at, expires_at, importance = row
    try:
        return MemoryEntry.model_construct(
            entry_id=entry_id,
            scope=MemoryScope(scope),
            key=key,
            content=json.loads(content),
            metadata=json.loads(metadata),
            created_at=datetime.fromisoformat(created_at),
            expires_at=None if expires_at is None else datetime.fromtimestamp(expires_at, UTC),
            importance=float(importance),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"corrupt entry {entry_id!r} in {where}: {exc}") from exc
