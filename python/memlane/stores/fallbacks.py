"""The optional store methods, for a store written before they existed.

:class:`~memlane.stores.protocol.MemoryStore` once lacked ``save_many``, and
:class:`~memlane.stores.protocol.ConditionalStore` adds ``save_if`` and ``load_range``. Every
store memlane ships has them; a custom store without them still serves one process through
these functions, which call the store's own method when it has one and otherwise compose it
from ``save``, ``load`` and ``load_by_key``. Only for one process: the conversation's lock
serialises its writers there, but nothing guards against another process, so a shared store
needs the real methods.

``save_if_absent`` is optional for every store: the write of a log's next key and, when
another writer took that key first, the read of what it wrote, in one round trip where the
store can (PostgreSQL); elsewhere :func:`save_if_absent` composes it from ``save_if`` and,
only after a lost race, ``load_range``.

The typed store operations (:mod:`memlane._ops`) call these, so a plan never asks what a store
can do. This module imports no store at run time, so the operations' layer can use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeGuard

from memlane._validate import check_str

if TYPE_CHECKING:
    from memlane.stores.protocol import ConditionalStore, MemoryStore
    from memlane.types import MemoryEntry

__all__ = [
    "AbsentSaver",
    "VectorFallbackWarning",
    "async_load_range",
    "async_save_if",
    "async_save_if_absent",
    "async_save_many",
    "load_range",
    "save_if",
    "save_if_absent",
    "save_many",
]


class AbsentSaver(Protocol):
    """A store with its own ``save_if_absent`` (see :func:`save_if_absent` for the contract)."""

    def save_if_absent(
        self, namespace: str, entry: MemoryEntry, stop: str
    ) -> tuple[bool, list[MemoryEntry]]:
        """Saves ``entry`` if its key is free; else the entries from its key up to ``stop``."""
        ...

    async def async_save_if_absent(
        self, namespace: str, entry: MemoryEntry, stop: str
    ) -> tuple[bool, list[MemoryEntry]]:
        """Async :meth:`save_if_absent`."""
        ...


class VectorFallbackWarning(UserWarning):
    """A database server cannot rank vectors itself; memlane scores them instead.

    PostgreSQL without the ``vector`` extension (pgvector), a MongoDB-compatible server without
    ``$vectorSearch``: the store still keeps every rule of
    :class:`~memlane.stores.protocol.VectorStore`, reading the candidate vectors and computing
    the cosine similarity in memlane, which is slower on large namespaces. Warned once per
    store, naming what is missing.
    """


def _conditional(store: MemoryStore, method: str) -> TypeGuard[ConditionalStore]:
    # Asked per method, as before the operations were typed: a store may have some of the
    # optional methods and not others, and one it has is always the one called.
    return hasattr(store, method)


def save_many(store: MemoryStore, namespace: str, entries: list[MemoryEntry]) -> None:
    """``store.save_many``, or one ``save`` per entry for a store without it."""
    if hasattr(store, "save_many"):
        store.save_many(namespace, entries)
        return
    for entry in entries:
        store.save(namespace, entry)


async def async_save_many(store: MemoryStore, namespace: str, entries: list[MemoryEntry]) -> None:
    """Async :func:`save_many`."""
    if hasattr(store, "async_save_many"):
        await store.async_save_many(namespace, entries)
        return
    for entry in entries:
        await store.async_save(namespace, entry)


def save_if(
    store: MemoryStore, namespace: str, entry: MemoryEntry, expected_version: int | None
) -> bool:
    """``store.save_if``, or for a store without it a read of the key's holder, then a save."""
    if _conditional(store, "save_if"):
        return store.save_if(namespace, entry, expected_version)
    if not _won(store.load_by_key(namespace, _key(entry)), expected_version):
        return False
    store.save(namespace, entry)
    return True


async def async_save_if(
    store: MemoryStore, namespace: str, entry: MemoryEntry, expected_version: int | None
) -> bool:
    """Async :func:`save_if`."""
    if _conditional(store, "async_save_if"):
        return await store.async_save_if(namespace, entry, expected_version)
    if not _won(await store.async_load_by_key(namespace, _key(entry)), expected_version):
        return False
    await store.async_save(namespace, entry)
    return True


def load_range(store: MemoryStore, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
    """``store.load_range``, or the namespace read whole and filtered by key."""
    if _conditional(store, "load_range"):
        return store.load_range(namespace, start, stop)
    return _in_range(store.load(namespace), start, stop)


async def async_load_range(
    store: MemoryStore, namespace: str, start: str, stop: str
) -> list[MemoryEntry]:
    """Async :func:`load_range`."""
    if _conditional(store, "async_load_range"):
        return await store.async_load_range(namespace, start, stop)
    return _in_range(await store.async_load(namespace), start, stop)


def save_if_absent(
    store: MemoryStore, namespace: str, entry: MemoryEntry, stop: str
) -> tuple[bool, list[MemoryEntry]]:
    """``save_if(namespace, entry, None)``, and after a loss what holds the keys it contended for.

    Returns ``(True, [])`` when the write won; ``(False, entries)`` when an unexpired entry
    held ``entry.key``, ``entries`` being :func:`load_range` of ``[entry.key, stop)`` read after
    the loss: the entry that won and whatever followed it (empty only if they went since).
    A store's own ``save_if_absent`` does both in one round trip; for every other store this
    is ``save_if``, then ``load_range`` only after a loss.
    """
    if _absent_saver(store):
        return store.save_if_absent(namespace, entry, stop)
    check_str(stop, "stop")
    if save_if(store, namespace, entry, None):
        return True, []
    return False, load_range(store, namespace, _key(entry), stop)


async def async_save_if_absent(
    store: MemoryStore, namespace: str, entry: MemoryEntry, stop: str
) -> tuple[bool, list[MemoryEntry]]:
    """Async :func:`save_if_absent`."""
    if _absent_saver(store):
        return await store.async_save_if_absent(namespace, entry, stop)
    check_str(stop, "stop")
    if await async_save_if(store, namespace, entry, None):
        return True, []
    return False, await async_load_range(store, namespace, _key(entry), stop)


def _absent_saver(store: object) -> TypeGuard[AbsentSaver]:
    return hasattr(store, "save_if_absent")


def _key(entry: MemoryEntry) -> str:
    if entry.key is None:
        raise TypeError("save_if needs an entry with a key, not key=None")
    return entry.key


def _won(holder: MemoryEntry | None, expected: int | None) -> bool:
    if expected is None:
        return holder is None
    return holder is not None and holder.version == expected


def _in_range(entries: list[MemoryEntry], start: str, stop: str) -> list[MemoryEntry]:
    found = [e for e in entries if e.key is not None and start <= e.key < stop]
    found.sort(key=lambda e: e.key or "")
    return found
