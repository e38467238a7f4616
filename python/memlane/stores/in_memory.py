"""InMemoryStore: entries in process memory with a search index, on the Rust structures or their
pure-Python twins."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from time import time

from memlane import _backend
from memlane.stores._base import LocalStore, awaitable
from memlane.stores.protocol import (
    MAX_VERSION,
    SEARCH_TEXT,
    SearchableStore,
    SearchHit,
    check_entry,
    check_entry_id,
    check_entry_ids,
    check_expected_version,
    check_key,
    check_key_range,
    check_keyed_entry,
    check_namespace,
    check_search,
    check_storable,
    now,
    search_terms,
    search_text,
    timestamp,
)
from memlane.stores.vectors import (
    EntryVector,
    check_entry_vectors,
    check_missing_vectors,
    check_model,
    check_vector_search,
    text_digest,
)
from memlane.types import CheckedJson, MemoryEntry, TurnJson

__all__ = ["InMemoryStore"]

_EVER = -math.inf
"""A ``now`` at which every entry is live: the table's ``load_by_key`` then finds a key's
holder even when it has expired (a save displaces an expired holder too)."""


_CHECKED_JSON = (CheckedJson, TurnJson)
"""The content and metadata types memlane builds from checked JSON (``check_storable``
passes them without a walk)."""


class InMemoryStore(LocalStore):
    """Entries in process memory, with a key index (``load_by_key`` is O(1)).

    The default store of every memory. Entries are kept as the objects you saved (not copied,
    not serialised), but they must hold what every other store can hold: plain JSON content
    and metadata. The one exception is the version, which the store assigns: an entry saved
    with a ``version`` other than the one stored is kept as a copy carrying the stored one.
    The ``async_`` methods run inline (nothing to wait for);
    :meth:`~memlane.stores.protocol.SyncMemoryStore.close` drops every entry.

    :meth:`search` reads an inverted index kept beside the table, which every write updates
    in the same step: an entry is indexed by the ``metadata["search_text"]`` it had when it
    was saved (changing a saved entry's metadata in place changes nothing until it is saved
    again). Entries without a search text cost nothing extra while no entry has one.

    :meth:`vector_search` reads a third structure, an exact vector index (float32 rows per
    model, made on the first :meth:`save_vectors`), kept in step by the same writes: an entry
    deleted, cleared, expired, or saved with another search text loses its vector; saved
    again with the same text it keeps it. Vectors are only ever attached to indexed entries,
    so a store without search texts never touches it.
    """

    persistent = False
    offload = False

    def __init__(self, *, read_only: bool = False) -> None:
        """Makes an empty store.

        Args:
            read_only: Refuse every write with
                :class:`~memlane.errors.ReadOnlyStoreError` (the store stays empty).
        """
        self.read_only = bool(read_only)
        self._table = _backend.active.MemoryTable()
        self._index = _backend.active.SearchIndex()
        # Made on the first save_vectors: the twin imports numpy, which a store holding only
        # a conversation never needs.
        self._vectors: _backend.VectorIndexType | None = None
        # Every write takes it, so that the table and the search index change together: two
        # threads saving one entry id could otherwise leave the index with the text of the
        # save the table did not keep. It also makes save_if's read and write one step.
        # Reads and searches do not take it (the table and the index each lock themselves),
        # so a search running beside a write may see it half done, as a load running beside
        # save_many sees part of the batch.
        self._write_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def _release(self) -> None:
        # An empty table and index of the same implementation, so the entries can be freed at
        # once.
        with self._write_lock:
            self._table = type(self._table)()
            self._index = type(self._index)()
            self._vectors = None

    def _write(
        self, namespace: str, entry: MemoryEntry, holder: MemoryEntry | None | bool = True
    ) -> None:
        """Saves ``entry`` in the table and mirrors the change in the search index.

        The caller holds the write lock. The index must lose every entry the save removes
        from the table (the entry's previous version, and the holder of its key) and gain the
        entry if it has a search text. ``holder`` is the entry holding ``entry.key`` (expired
        or not) when the caller has just read it, ``True`` when it has not.
        """
        # search_text's rule, inlined: this line runs for every conversation turn saved.
        text = entry.metadata.get(SEARCH_TEXT)
        if not isinstance(text, str):
            text = None
        expiry = entry.expires_at  # timestamp's rule, inlined: most entries never expire
        expires_at = None if expiry is None else expiry.timestamp()
        if text is None and not self._index:
            # Nothing is searchable, so the save cannot change the index: conversation turns
            # take this path, one table call as before the index existed.
            self._table.save(namespace, entry.entry_id, entry.key, expires_at, entry)
            return
        vectors = self._vectors
        if entry.key is not None:
            if holder is True:
                holder = self._table.load_by_key(namespace, entry.key, _EVER)
            if isinstance(holder, MemoryEntry) and holder.entry_id != entry.entry_id:
                self._index.remove(holder.entry_id)
                if vectors is not None:
                    vectors.remove(holder.entry_id)
        self._table.save(namespace, entry.entry_id, entry.key, expires_at, entry)
        if text is None:
            self._index.remove(entry.entry_id)
            if vectors is not None:
                vectors.remove(entry.entry_id)
        else:
            # An ASCII text (most are) is split by the index itself: no list of terms is built
            # here and handed over string by string.
            if not self._index.upsert_text(
                entry.entry_id, namespace, text, entry.importance, expires_at, entry
            ):
                self._index.upsert(
                    entry.entry_id,
                    namespace,
                    search_terms(text),
                    entry.importance,
                    expires_at,
                    entry,
                )
            if vectors is not None:
                # Same namespace and text: the vector still means this entry; else it goes.
                vectors.refresh(
                    entry.entry_id,
                    namespace,
                    text_digest(text),
                    entry.importance,
                    expires_at,
                    entry,
                )

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry`` (by ``entry_id``, and by key within the namespace).

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            StoreClosedError: The store was closed.
        """
        namespace = check_namespace(namespace)
        entry = _at_version(check_storable(check_entry(entry)), 0)
        self._check_write()
        # acquire/release rather than `with`: measured 0.3 us less per call on CPython 3.11,
        # a tenth of a plain save, and saves run in agents' hot loops.
        self._write_lock.acquire()
        try:
            self._write(namespace, entry)
        finally:
            self._write_lock.release()

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace: all of them, or none if one is unstorable."""
        namespace = check_namespace(namespace)
        checked = [_at_version(check_storable(check_entry(e)), 0) for e in entries]
        self._check_write()
        with self._write_lock:
            for entry in checked:
                self._write(namespace, entry)

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
        if type(namespace) is not str or not namespace or "\x00" in namespace:
            namespace = check_namespace(namespace)
        key = entry.key if type(entry) is MemoryEntry else None
        if (
            key is None
            or type(entry.content) not in _CHECKED_JSON
            or type(entry.metadata) not in _CHECKED_JSON
        ):
            # The full checks; the entries memlane builds (a fact's, a turn's) are checked
            # JSON already, and every remember writes one here.
            entry = check_storable(check_keyed_entry(entry))
            key = entry.key
            assert key is not None  # check_keyed_entry refused None
        if expected_version is not None and (
            type(expected_version) is not int or not 0 <= expected_version < MAX_VERSION
        ):
            expected_version = check_expected_version(expected_version)
        version = 1 if expected_version is None else expected_version + 1  # next_version's
        stored = entry if entry.version == version else _at_version(entry, version)
        if self._closed or self.read_only:
            self._check_write()
        # acquire/release rather than `with`, as in save: conversation turns are saved here.
        self._write_lock.acquire()
        try:
            # The key's holder, expired or not, in one lookup: the condition reads the
            # unexpired one, and the write displaces either (so _write need not look again).
            held: MemoryEntry | None = self._table.load_by_key(namespace, key, _EVER)
            holder = held
            if held is not None and held.expires_at is not None:
                # One that can expire is asked for again, under the table's own rule.
                holder = self._table.load_by_key(namespace, key, time())
            if (None if holder is None else holder.version) != expected_version:
                return False
            self._write(namespace, stored, held)
            return True
        finally:
            self._write_lock.release()

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
        # Each check inline where it passes: every get_fact and remember reads here, and the
        # calls cost as much as the table's lookup. The full checks name what failed.
        if type(namespace) is not str or not namespace or "\x00" in namespace:
            namespace = check_namespace(namespace)
        if type(key) is not str:
            key = check_key(key)
        if self._closed:
            self._check_open()
        found: MemoryEntry | None = self._table.load_by_key(namespace, key, time())
        return found

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        namespace, entry_id = check_namespace(namespace), check_entry_id(entry_id)
        self._check_write()
        with self._write_lock:
            removed = self._table.delete(namespace, entry_id)
            if removed:
                self._index.remove(entry_id)
                if self._vectors is not None:
                    self._vectors.remove(entry_id)
            return removed

    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries with these ids, under one lock (no other write runs between);
        the ids that existed, in the order given.

        Raises:
            TypeError: ``entry_ids`` is not a list of ``str``.
            ReadOnlyStoreError: The store was opened read-only.
            StoreClosedError: The store was closed.
        """
        namespace, ids = check_namespace(namespace), check_entry_ids(entry_ids)
        self._check_write()
        gone = []
        with self._write_lock:
            for entry_id in ids:
                if self._table.delete(namespace, entry_id):
                    self._index.remove(entry_id)
                    if self._vectors is not None:
                        self._vectors.remove(entry_id)
                    gone.append(entry_id)
        return gone

    def clear(self, namespace: str) -> int:
        """Removes every entry of the namespace; how many."""
        namespace = check_namespace(namespace)
        self._check_write()
        with self._write_lock:
            removed = self._table.clear(namespace)
            if removed:
                self._index.clear(namespace)
                if self._vectors is not None:
                    self._vectors.clear(namespace)
            return removed

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one entry, in creation order."""
        self._check_open()
        return self._table.namespaces()

    def cleanup_expired(self) -> int:
        """Removes expired entries; how many."""
        self._check_write()
        with self._write_lock:
            at = now()
            removed = self._table.cleanup_expired(at)
            # The index holds a subset of the table's entries with the same expiry times.
            if removed:
                self._index.cleanup_expired(at)
                if self._vectors is not None:
                    self._vectors.cleanup_expired(at)
            return removed

    def search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` most relevant to ``query``, best first, by BM25.

        Reads only the index postings of the query's terms, never every entry (see
        :meth:`~memlane.stores.protocol.SearchableStore.search` for what is found and how it
        ranks). Corpus statistics cover every indexed entry of the store, so a score does not
        depend on which namespaces are searched; equal scores and importances go to the entry
        that became searchable first.

        Args:
            namespaces: The namespaces to search.
            query: Words to look for; any text, never syntax.
            limit: The most hits to return (>= 1).
            min_importance: The least importance a hit may have, 0.0–1.0.

        Returns:
            The hits, each an entry and its score (> 0).

        Raises:
            TypeError, ValueError: A bad argument, named (see
                :func:`~memlane.stores.protocol.check_search`).
            StoreClosedError: The store was closed.
        """
        names, terms, limit, min_importance = check_search(namespaces, query, limit, min_importance)
        self._check_open()
        if not names or not terms:
            return []
        found = self._index.search(names, terms, limit, min_importance, now())
        return [SearchHit(entry, score) for entry, score in found]

    async_search = awaitable(SearchableStore.search)

    def save_vectors(self, namespace: str, model: str, vectors: Sequence[EntryVector]) -> int:
        """Attaches each vector to its unexpired entry of ``namespace`` if the entry's search
        text still has the vector's digest (see
        :meth:`~memlane.stores.protocol.VectorStore.save_vectors`); how many were attached.

        Raises:
            TypeError, ValueError: A bad argument, named; vectors of different dimensions.
            ReadOnlyStoreError: The store was opened read-only.
            StoreClosedError: The store was closed.
        """
        namespace, model = check_namespace(namespace), check_model(model)
        checked = check_entry_vectors(vectors)
        self._check_write()
        attached = 0
        with self._write_lock:
            if self._vectors is None:
                self._vectors = _backend.active.VectorIndex()
            at = now()
            for item in checked:
                entry: MemoryEntry | None = self._table.load_by_id(namespace, item.entry_id, at)
                text = None if entry is None else search_text(entry)
                if entry is None or text is None or text_digest(text) != item.digest:
                    continue
                self._vectors.upsert(
                    entry.entry_id,
                    namespace,
                    model,
                    item.digest,
                    item.vector,
                    entry.importance,
                    timestamp(entry.expires_at),
                    entry,
                )
                attached += 1
        return attached

    def vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` whose vectors of ``model`` are nearest ``vector``,
        best first, by cosine similarity (see
        :meth:`~memlane.stores.protocol.VectorStore.vector_search`); equal scores and
        importances go to the entry whose vector came first.

        Raises:
            TypeError, ValueError: A bad argument, named.
            StoreClosedError: The store was closed.
        """
        names, query, model, limit, min_importance = check_vector_search(
            namespaces, vector, model, limit, min_importance
        )
        self._check_open()
        vectors = self._vectors
        if vectors is None or not names:
            return []
        found = vectors.search(names, model, query, limit, min_importance, now())
        return [SearchHit(entry, score) for entry, score in found]

    def missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Unexpired entries of ``namespaces`` with a search text and no vector of ``model``,
        oldest first (by ``created_at``, then namespace order), at most ``limit``.

        Raises:
            TypeError, ValueError: A bad argument, named.
            StoreClosedError: The store was closed.
        """
        names, model, limit = check_missing_vectors(namespaces, model, limit)
        self._check_open()
        vectors, at = self._vectors, now()
        found: list[MemoryEntry] = []
        for name in names:
            taken = 0
            for entry in self._table.load(name, at):
                if search_text(entry) is None:
                    continue
                if vectors is not None and vectors.model_of(entry.entry_id) == model:
                    continue
                found.append(entry)
                taken += 1
                if taken == limit:  # the oldest `limit` of each namespace cover the answer
                    break
        found.sort(key=_created)
        return found[:limit]


def _at_version(entry: MemoryEntry, version: int) -> MemoryEntry:
    """``entry`` itself if it carries ``version``, else a shallow copy that does."""
    return entry if entry.version == version else entry.model_copy(update={"version": version})


def _created(entry: MemoryEntry) -> float:
    return entry.created_at.timestamp()


def _key(entry: MemoryEntry) -> str:
    assert entry.key is not None  # load_range keeps keyed entries only
    return entry.key
