"""Typed store operations: what a plan asks of a store, one class per store method.

A plan yields an operation and receives its result: ``entries = yield Load(namespace)``. Each
operation carries the method's arguments and knows how to run itself, blocking
(:meth:`StoreOp.run`) or awaited (:meth:`StoreOp.run_async`), so the runner calls
``op.run(store)`` or ``await op.run_async(store)`` without naming any method, and mypy and a
reader follow every call to the store from the class the plan yielded. The type parameter is
the result the plan receives back (``Load`` gives ``list[MemoryEntry]``).

:class:`Then` maps an operation's result (``Then(LoadByKey(ns, key), is_present)``), for a
plan method whose whole plan is one store call and a small step after it.

Stores without the optional methods (``save_many``, ``save_if``, ``load_range``,
``save_if_absent``) are served by
:mod:`memlane.stores.fallbacks`; the operations never look a method up by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memlane.stores import fallbacks

if TYPE_CHECKING:
    from memlane.stores.protocol import (
        ConditionalStore,
        MemoryStore,
        SearchableStore,
        SearchHit,
        VectorStore,
    )
    from memlane.stores.vectors import EntryVector
    from memlane.types import MemoryEntry

T = TypeVar("T")
U = TypeVar("U")

__all__ = [
    "CleanupExpired",
    "Clear",
    "Delete",
    "DeleteMany",
    "Load",
    "LoadByKey",
    "LoadRange",
    "MissingVectors",
    "Namespaces",
    "Save",
    "SaveIf",
    "SaveIfAbsent",
    "SaveMany",
    "SaveVectors",
    "Search",
    "StoreOp",
    "Then",
    "VectorSearch",
]


class StoreOp(Generic[T]):
    """One call of a store method, with its arguments; its result is a ``T``.

    Subclasses define both halves; the runner picks one. ``store`` is typed ``Any`` here
    because each operation needs a different protocol (a search needs a
    :class:`~memlane.stores.protocol.SearchableStore`); each subclass names its own.
    """

    __slots__ = ()

    def run(self, store: Any) -> T:
        """Performs the call with the store's blocking method; its result."""
        raise NotImplementedError(f"{type(self).__name__} defines no run()")

    async def run_async(self, store: Any) -> T:
        """Performs the call with the store's ``async_`` method; its result."""
        raise NotImplementedError(f"{type(self).__name__} defines no run_async()")


@dataclass(frozen=True, slots=True)
class Then(StoreOp[U], Generic[T, U]):
    """``op``, then ``fn`` of its result: the plan receives ``fn(result)``.

    ``fn`` runs only when ``op`` succeeded; it is a plain function (no I/O), so both runners
    call it the same way.
    """

    op: StoreOp[T]
    fn: Callable[[T], U]

    def run(self, store: Any) -> U:
        """``fn(op.run(store))``."""
        return self.fn(self.op.run(store))

    async def run_async(self, store: Any) -> U:
        """``fn(await op.run_async(store))``."""
        return self.fn(await self.op.run_async(store))


@dataclass(frozen=True, slots=True)
class Save(StoreOp[None]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.save` ``entry`` into ``namespace``."""

    namespace: str
    entry: MemoryEntry

    def run(self, store: MemoryStore) -> None:
        """``store.save``."""
        store.save(self.namespace, self.entry)

    async def run_async(self, store: MemoryStore) -> None:
        """``store.async_save``."""
        await store.async_save(self.namespace, self.entry)


@dataclass(frozen=True, slots=True)
class SaveMany(StoreOp[None]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.save_many` ``entries`` into ``namespace``."""

    namespace: str
    entries: list[MemoryEntry]

    def run(self, store: MemoryStore) -> None:
        """``store.save_many`` (one save per entry for a store without it)."""
        fallbacks.save_many(store, self.namespace, self.entries)

    async def run_async(self, store: MemoryStore) -> None:
        """``store.async_save_many`` (one save per entry for a store without it)."""
        await fallbacks.async_save_many(store, self.namespace, self.entries)


@dataclass(frozen=True, slots=True)
class Load(StoreOp["list[MemoryEntry]"]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.load`: ``namespace``'s entries."""

    namespace: str

    def run(self, store: MemoryStore) -> list[MemoryEntry]:
        """``store.load``."""
        return store.load(self.namespace)

    async def run_async(self, store: MemoryStore) -> list[MemoryEntry]:
        """``store.async_load``."""
        return await store.async_load(self.namespace)


@dataclass(frozen=True, slots=True)
class LoadByKey(StoreOp["MemoryEntry | None"]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.load_by_key`: the entry holding ``key``."""

    namespace: str
    key: str

    def run(self, store: MemoryStore) -> MemoryEntry | None:
        """``store.load_by_key``."""
        return store.load_by_key(self.namespace, self.key)

    async def run_async(self, store: MemoryStore) -> MemoryEntry | None:
        """``store.async_load_by_key``."""
        return await store.async_load_by_key(self.namespace, self.key)


@dataclass(frozen=True, slots=True)
class Delete(StoreOp[bool]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.delete`: whether the entry existed."""

    namespace: str
    entry_id: str

    def run(self, store: MemoryStore) -> bool:
        """``store.delete``."""
        return store.delete(self.namespace, self.entry_id)

    async def run_async(self, store: MemoryStore) -> bool:
        """``store.async_delete``."""
        return await store.async_delete(self.namespace, self.entry_id)


@dataclass(frozen=True, slots=True)
class DeleteMany(StoreOp["list[str]"]):
    """:meth:`~memlane.stores.protocol.ConditionalStore.delete_many`: the ids that existed."""

    namespace: str
    entry_ids: list[str]

    def run(self, store: ConditionalStore) -> list[str]:
        """``store.delete_many``."""
        return store.delete_many(self.namespace, self.entry_ids)

    async def run_async(self, store: ConditionalStore) -> list[str]:
        """``store.async_delete_many``."""
        return await store.async_delete_many(self.namespace, self.entry_ids)


@dataclass(frozen=True, slots=True)
class Clear(StoreOp[int]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.clear`: how many entries went."""

    namespace: str

    def run(self, store: MemoryStore) -> int:
        """``store.clear``."""
        return store.clear(self.namespace)

    async def run_async(self, store: MemoryStore) -> int:
        """``store.async_clear``."""
        return await store.async_clear(self.namespace)


@dataclass(frozen=True, slots=True)
class Namespaces(StoreOp["list[str]"]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.namespaces` holding an entry."""

    def run(self, store: MemoryStore) -> list[str]:
        """``store.namespaces``."""
        return store.namespaces()

    async def run_async(self, store: MemoryStore) -> list[str]:
        """``store.async_namespaces``."""
        return await store.async_namespaces()


@dataclass(frozen=True, slots=True)
class CleanupExpired(StoreOp[int]):
    """:meth:`~memlane.stores.protocol.SyncMemoryStore.cleanup_expired`: how many went."""

    def run(self, store: MemoryStore) -> int:
        """``store.cleanup_expired``."""
        return store.cleanup_expired()

    async def run_async(self, store: MemoryStore) -> int:
        """``store.async_cleanup_expired``."""
        return await store.async_cleanup_expired()


@dataclass(frozen=True, slots=True)
class SaveIf(StoreOp[bool]):
    """:meth:`~memlane.stores.protocol.ConditionalStore.save_if`: whether the write won."""

    namespace: str
    entry: MemoryEntry
    expected_version: int | None

    def run(self, store: MemoryStore) -> bool:
        """``store.save_if`` (a read then a save, one process only, for a store without it)."""
        # Every remember's write: the store's own method called directly when it has one.
        save_if = getattr(store, "save_if", None)
        if save_if is not None:
            won: bool = save_if(self.namespace, self.entry, self.expected_version)
            return won
        return fallbacks.save_if(store, self.namespace, self.entry, self.expected_version)

    async def run_async(self, store: MemoryStore) -> bool:
        """``store.async_save_if`` (composed, one process only, for a store without it)."""
        return await fallbacks.async_save_if(
            store, self.namespace, self.entry, self.expected_version
        )


@dataclass(frozen=True, slots=True)
class SaveIfAbsent(StoreOp["tuple[bool, list[MemoryEntry]]"]):
    """Writes ``entry`` if its key is free; after a loss, what holds ``[entry.key, stop)``.

    The result is ``(won, entries)``: ``(True, [])``, or ``(False, entries)`` with the
    unexpired keyed entries from ``entry.key`` up to ``stop`` (see
    :func:`memlane.stores.fallbacks.save_if_absent`). How a log appends: the write of the
    next key and, when another writer took it first, the read of what it wrote, in one
    round trip on a store that can.
    """

    namespace: str
    entry: MemoryEntry
    stop: str

    def run(self, store: MemoryStore) -> tuple[bool, list[MemoryEntry]]:
        """``store.save_if_absent`` (``save_if``, then ``load_range`` after a loss, without it)."""
        return fallbacks.save_if_absent(store, self.namespace, self.entry, self.stop)

    async def run_async(self, store: MemoryStore) -> tuple[bool, list[MemoryEntry]]:
        """``store.async_save_if_absent`` (composed, for a store without it)."""
        return await fallbacks.async_save_if_absent(store, self.namespace, self.entry, self.stop)


@dataclass(frozen=True, slots=True)
class LoadRange(StoreOp["list[MemoryEntry]"]):
    """:meth:`~memlane.stores.protocol.ConditionalStore.load_range`: keys in [start, stop)."""

    namespace: str
    start: str
    stop: str

    def run(self, store: MemoryStore) -> list[MemoryEntry]:
        """``store.load_range`` (a whole read, filtered, for a store without it)."""
        return fallbacks.load_range(store, self.namespace, self.start, self.stop)

    async def run_async(self, store: MemoryStore) -> list[MemoryEntry]:
        """``store.async_load_range`` (a whole read, filtered, for a store without it)."""
        return await fallbacks.async_load_range(store, self.namespace, self.start, self.stop)


@dataclass(frozen=True, slots=True)
class Search(StoreOp["list[SearchHit]"]):
    """:meth:`~memlane.stores.protocol.SearchableStore.search`: hits, best first."""

    namespaces: Sequence[str]
    query: str
    limit: int = 10
    min_importance: float = 0.0

    def run(self, store: SearchableStore) -> list[SearchHit]:
        """``store.search``."""
        return store.search(
            self.namespaces, self.query, limit=self.limit, min_importance=self.min_importance
        )

    async def run_async(self, store: SearchableStore) -> list[SearchHit]:
        """``store.async_search``."""
        return await store.async_search(
            self.namespaces, self.query, limit=self.limit, min_importance=self.min_importance
        )


@dataclass(frozen=True, slots=True)
class SaveVectors(StoreOp[int]):
    """:meth:`~memlane.stores.protocol.VectorStore.save_vectors`: how many were attached."""

    namespace: str
    model: str
    vectors: Sequence[EntryVector]

    def run(self, store: VectorStore) -> int:
        """``store.save_vectors``."""
        return store.save_vectors(self.namespace, self.model, self.vectors)

    async def run_async(self, store: VectorStore) -> int:
        """``store.async_save_vectors``."""
        return await store.async_save_vectors(self.namespace, self.model, self.vectors)


@dataclass(frozen=True, slots=True)
class VectorSearch(StoreOp["list[SearchHit]"]):
    """:meth:`~memlane.stores.protocol.VectorStore.vector_search`: hits, best first."""

    namespaces: Sequence[str]
    vector: Sequence[float]
    model: str
    limit: int = 10
    min_importance: float = 0.0

    def run(self, store: VectorStore) -> list[SearchHit]:
        """``store.vector_search``."""
        return store.vector_search(
            self.namespaces,
            self.vector,
            model=self.model,
            limit=self.limit,
            min_importance=self.min_importance,
        )

    async def run_async(self, store: VectorStore) -> list[SearchHit]:
        """``store.async_vector_search``."""
        return await store.async_vector_search(
            self.namespaces,
            self.vector,
            model=self.model,
            limit=self.limit,
            min_importance=self.min_importance,
        )


@dataclass(frozen=True, slots=True)
class MissingVectors(StoreOp["list[MemoryEntry]"]):
    """:meth:`~memlane.stores.protocol.VectorStore.missing_vectors`: entries to embed, oldest
    first."""

    namespaces: Sequence[str]
    model: str
    limit: int = 1000

    def run(self, store: VectorStore) -> list[MemoryEntry]:
        """``store.missing_vectors``."""
        return store.missing_vectors(self.namespaces, self.model, limit=self.limit)

    async def run_async(self, store: VectorStore) -> list[MemoryEntry]:
        """``store.async_missing_vectors``."""
        return await store.async_missing_vectors(self.namespaces, self.model, limit=self.limit)
