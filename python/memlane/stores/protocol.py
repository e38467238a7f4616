"""The :class:`MemoryStore` protocol, the argument checks every store applies, and the value rule.

Every store follows the same rules: saving an ``entry_id`` again replaces that entry; a key is
unique within a namespace (saving a keyed entry replaces whatever held the key, atomically);
``load`` keeps insertion order; expired entries are never returned. Every store accepts the
same values: content and metadata that are plain JSON (see :func:`check_storable`), so code
tested on :class:`~memlane.stores.InMemoryStore` behaves the same on a database.

A keyed entry also carries a version (:attr:`~memlane.types.MemoryEntry.version`), which only
the store assigns: a plain ``save`` stores 0, and :meth:`ConditionalStore.save_if` (a
compare-and-swap on the key) stores one more than the version it expected. Every store memlane
ships is a :class:`ConditionalStore`; a custom store written against :class:`MemoryStore`
alone still passes every ``MemoryStore`` check and works where no conditional write is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, TypeVar, runtime_checkable

from memlane._validate import check_identifier, check_str, type_name

# Re-exported: every name below lived here before the split, and stores import it from here.
from memlane.stores.ranking import (
    BM25_B,
    BM25_K1,
    SEARCH_TEXT,
    SearchHit,
    bm25,
    rank_entries,
    search_terms,
    search_text,
)
from memlane.stores.stored_values import (
    check_storable,
    dumps_json,
    entry_to_row,
    find_in_json,
    find_unstorable,
    now,
    row_to_entry,
    timestamp,
)
from memlane.types import MemoryEntry

if TYPE_CHECKING:
    from memlane.stores.vectors import EntryVector

T = TypeVar("T")

__all__ = [
    "BM25_B",
    "BM25_K1",
    "MAX_VERSION",
    "SEARCH_TEXT",
    "AsyncMemoryStore",
    "ConditionalStore",
    "MemoryStore",
    "SearchHit",
    "SearchableStore",
    "SyncMemoryStore",
    "VectorStore",
    "bm25",
    "check_entry",
    "check_entry_id",
    "check_entry_ids",
    "check_expected_version",
    "check_key",
    "check_key_range",
    "check_keyed_entry",
    "check_namespace",
    "check_search",
    "check_storable",
    "dumps_json",
    "entry_to_row",
    "find_in_json",
    "find_unstorable",
    "next_version",
    "now",
    "rank_entries",
    "row_to_entry",
    "search_terms",
    "search_text",
    "timestamp",
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


@runtime_checkable
class ConditionalStore(MemoryStore, Protocol):
    """A :class:`MemoryStore` with a compare-and-swap on keys and reads of a key range.

    What a fleet of processes sharing one store needs: an atomic conditional write (of N
    writers that expected the same version exactly one wins) and one indexed read of the
    keys after a known one. Kept out of :class:`MemoryStore` on purpose, so a custom store
    written before these methods existed still passes ``isinstance(store, MemoryStore)``;
    ``isinstance(store, ConditionalStore)`` tells whether a store has them.

    Versions are per key and assigned only by the store. A plain ``save`` of a key stores
    version 0 and is not conditional: mixing plain saves with ``save_if`` on one key gives up
    conflict detection for the plain writes (a ``save_if`` that expected 0 wins over one).
    """

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        """Saves ``entry`` only if its key's holder is still at ``expected_version``, atomically.

        ``expected_version=None`` wins only if no unexpired entry holds ``entry.key`` in
        ``namespace`` (an expired holder counts as absent and is replaced); an ``int`` wins only
        if an unexpired entry holds the key at exactly that version. A win writes ``entry`` by
        the rules of ``save`` (it replaces the key's holder and any entry with its
        ``entry_id``) at version ``expected_version + 1`` (1 for ``None``); a loss changes
        nothing. ``entry.version`` is ignored.

        Args:
            namespace: The namespace.
            entry: The entry to write; its ``key`` must be a ``str``.
            expected_version: The version the caller read, or ``None`` for "no holder".

        Returns:
            Whether the write happened.

        Raises:
            TypeError: ``entry.key`` is ``None``, or ``expected_version`` is neither ``None``
                nor an ``int``; content or metadata is not plain JSON
                (:class:`~memlane.errors.UnstorableValueError`).
            ValueError: ``expected_version`` is negative or out of the 64-bit range.
        """

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """The unexpired keyed entries whose key ``k`` has ``start <= k < stop``, in key order.

        Keys compare by code point, as Python compares ``str``; a database store serves this
        from its (namespace, key) index, so asking "is there a key after X" is one indexed
        round trip.
        """

    async def async_save_if(
        self, namespace: str, entry: MemoryEntry, expected_version: int | None
    ) -> bool:
        """Async :meth:`save_if`."""

    async def async_load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Async :meth:`load_range`."""

    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries of ``namespace`` with these ids; the ids that existed.

        SQLite and PostgreSQL remove them in one transaction (all or none, if the call
        fails); the other stores remove them one by one. An id given twice counts once.

        Args:
            namespace: The namespace.
            entry_ids: The ids to remove.

        Returns:
            The ids that existed and are gone, in the order given.

        Raises:
            TypeError: ``entry_ids`` is a ``str`` or holds something other than ``str``.
            ReadOnlyStoreError: The store was opened read-only.
        """

    async def async_delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Async :meth:`delete_many`."""


@runtime_checkable
class SearchableStore(MemoryStore, Protocol):
    """A :class:`MemoryStore` that ranks entries by the words of a query, from an index.

    What an entry is searched by is its ``metadata["search_text"]`` (:data:`SEARCH_TEXT`),
    split into terms by :func:`search_terms`. A query is split the same way and is data only:
    quotes, ``%``, FTS operators, ``$`` operators and regex metacharacters never act as syntax.

    Each store serves it with its own full-text machinery (an inverted index in memory, SQLite
    FTS5, PostgreSQL ``tsvector`` with ``pg_trgm``, MongoDB's text index where the server has
    one), so a selective query does not read every entry. Scores are relevance as the store
    computes it (BM25-like: more of the query's terms, and rarer ones, score higher); they
    order one call's results and are not comparable across stores.
    """

    def search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` most relevant to ``query``, best first.

        An entry is a candidate when it is unexpired, lies in one of ``namespaces``, has
        ``importance >= min_importance`` and its search text shares at least one term with
        the query (every term need not be present). Candidates are ordered by score, highest
        first, then by importance, highest first; at most ``limit`` are returned. A query
        without terms gives ``[]``.

        Raises:
            TypeError, ValueError: A bad argument (see :func:`check_search`), named.
        """

    async def async_search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """Async :meth:`search`."""


@runtime_checkable
class VectorStore(MemoryStore, Protocol):
    """A :class:`MemoryStore` that keeps a vector beside an entry and ranks by cosine similarity.

    A vector belongs to one entry and to the search text it was made from (its ``digest``),
    and is kept in step with the entry: deleting, clearing, expiring the entry or saving it
    with a different search text drops the vector, so a deleted, expired or changed entry never
    comes back from :meth:`vector_search`. Each vector is kept with its ``model`` (the
    embedder's id) and dimensions; vectors of another model or dimension are never compared.
    Argument checks: :mod:`memlane.stores.vectors`.
    """

    def save_vectors(self, namespace: str, model: str, vectors: Sequence[EntryVector]) -> int:
        """Attaches each vector to the unexpired entry of ``namespace`` with its ``entry_id``,
        only while ``text_digest(entry.metadata["search_text"]) == vector.digest``; others are
        skipped silently (the writer embeds the new text). It replaces the entry's vector of
        any model. All vectors of a call have one dimension count. Returns how many attached.

        Raises:
            TypeError, ValueError: A bad argument, named; vectors of different dimensions.
            ReadOnlyStoreError: The store was opened read-only.
        """

    def vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """Unexpired entries of ``namespaces`` with ``importance >= min_importance`` and a
        vector of exactly ``model`` and ``len(vector)`` dimensions, by cosine similarity to
        ``vector`` (the score, in [-1, 1]), best first; ties by importance, then insertion.
        At most ``limit``. Bad arguments raise ``TypeError``/``ValueError`` naming them.
        """

    def missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Unexpired entries of ``namespaces`` with a search text but no vector of ``model``
        (none, another model's, or one dropped), oldest first, at most ``limit``: what a
        writer catching up, or a re-embedding, embeds.
        """

    async def async_save_vectors(
        self, namespace: str, model: str, vectors: Sequence[EntryVector]
    ) -> int:
        """Async :meth:`save_vectors`."""

    async def async_vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """Async :meth:`vector_search`."""

    async def async_missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Async :meth:`missing_vectors`."""


def check_search(
    namespaces: object, query: object, limit: object, min_importance: object
) -> tuple[list[str], list[str], int, float]:
    """The checked arguments of :meth:`SearchableStore.search`: namespaces (each checked,
    duplicates dropped, order kept), the query's distinct terms (in order), limit, minimum.

    Raises:
        TypeError: ``namespaces`` is a ``str`` or not a sequence of ``str``; ``query`` not a
            ``str``; ``limit`` not an ``int``; ``min_importance`` not a number.
        ValueError: An invalid namespace, ``limit < 1``, ``min_importance`` outside 0.0–1.0.
    """
    if isinstance(namespaces, str) or not isinstance(namespaces, Sequence):
        raise TypeError(f"namespaces must be a list of str, not {type_name(namespaces)}")
    names = list(dict.fromkeys(check_namespace(n) for n in namespaces))
    terms = list(dict.fromkeys(search_terms(check_str(query, "query"))))
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be int, not {type_name(limit)}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if isinstance(min_importance, bool) or not isinstance(min_importance, int | float):
        raise TypeError(f"min_importance must be a number, not {type_name(min_importance)}")
    if not 0.0 <= min_importance <= 1.0:
        raise ValueError(f"min_importance must be between 0.0 and 1.0, got {min_importance!r}")
    # A limit past any store's size means every hit: capped at what PostgreSQL's LIMIT and
    # the Rust index take (64-bit), where 2**64 was an error there and all hits elsewhere.
    return names, terms, min(limit, 2**63 - 1), float(min_importance)


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


def check_key_range(start: object, stop: object) -> tuple[str, str]:
    """The bounds of ``load_range``: two ``str`` (``start > stop`` is an empty range).

    Raises:
        TypeError: Either is not a ``str``; the message names it.
    """
    return check_str(start, "start"), check_str(stop, "stop")


def check_entry_id(entry_id: object) -> str:
    """An ``entry_id`` argument must be a ``str``.

    Raises:
        TypeError: Not a ``str``.
    """
    return check_str(entry_id, "entry_id")


def check_entry_ids(entry_ids: object) -> list[str]:
    """The ``entry_ids`` argument of ``delete_many``: a list of ``str``, duplicates dropped
    (order kept).

    Raises:
        TypeError: A ``str`` (one id is not a list of them), not a sequence, or an item that
            is not a ``str``.
    """
    if isinstance(entry_ids, str) or not isinstance(entry_ids, Sequence):
        raise TypeError(f"entry_ids must be a list of str, not {type_name(entry_ids)}")
    return list(dict.fromkeys(check_str(i, "entry_id") for i in entry_ids))


def check_entry(entry: object) -> MemoryEntry:
    """The entry argument of ``save`` must be a :class:`MemoryEntry`.

    Raises:
        TypeError: Anything else.
    """
    if not isinstance(entry, MemoryEntry):
        raise TypeError(f"entry must be MemoryEntry, not {type_name(entry)}")
    return entry


MAX_VERSION = 2**63 - 1
"""The highest version a store holds: the databases keep versions as signed 64-bit integers."""


def check_keyed_entry(entry: object) -> MemoryEntry:
    """The entry argument of ``save_if``: a :class:`MemoryEntry` whose ``key`` is a ``str``.

    Raises:
        TypeError: Not a :class:`MemoryEntry`, or its ``key`` is ``None``.
    """
    entry = check_entry(entry)
    if entry.key is None:
        raise TypeError("save_if needs a keyed entry: entry.key must be str, not None")
    return entry


def check_expected_version(expected_version: object) -> int | None:
    """The ``expected_version`` argument of ``save_if``: ``None`` or an ``int`` from 0.

    Raises:
        TypeError: Neither ``None`` nor an ``int`` (``bool`` is not a version).
        ValueError: Negative, or so large that the next version would not fit in 64 bits.
    """
    if expected_version is None:
        return None
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version must be int or None, not {type_name(expected_version)}")
    if not 0 <= expected_version < MAX_VERSION:
        raise ValueError(
            f"expected_version must be between 0 and {MAX_VERSION - 1}, got {expected_version!r}"
        )
    return expected_version


def next_version(expected_version: int | None) -> int:
    """The version a winning ``save_if`` stores."""
    return 1 if expected_version is None else expected_version + 1
