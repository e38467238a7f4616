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

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self, TypeVar, runtime_checkable

from pydantic_core import PydanticSerializationError, to_json

from memlane._pure.store import Row
from memlane._validate import check_identifier, check_str, type_name
from memlane.errors import CorruptStoreError, UnstorableValueError
from memlane.types import CheckedJson, MemoryEntry, MemoryScope

T = TypeVar("T")

__all__ = [
    "MAX_VERSION",
    "SEARCH_TEXT",
    "AsyncMemoryStore",
    "ConditionalStore",
    "MemoryStore",
    "SearchHit",
    "SearchableStore",
    "SyncMemoryStore",
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
    "find_unstorable",
    "next_version",
    "rank_entries",
    "row_to_entry",
    "search_terms",
    "search_text",
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


SEARCH_TEXT = "search_text"
"""The metadata field a :class:`SearchableStore` indexes: an entry is searchable when
``entry.metadata["search_text"]`` is a ``str``, and only by that text."""


class SearchHit(NamedTuple):
    """One result of :meth:`SearchableStore.search`: the entry and its relevance (> 0)."""

    entry: MemoryEntry
    score: float


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


# Letters and digits of any script; everything else (underscore, hyphen, punctuation, quotes,
# operators, whitespace) only separates terms.
_TERM = re.compile(r"[^\W_]+")


def search_terms(text: str) -> list[str]:
    """The terms ``text`` is indexed and searched by: casefolded runs of letters and digits.

    ``"user_timezone: Australia/Adelaide"`` gives ``user, timezone, australia, adelaide``;
    ``'"a" OR b*'`` gives ``a, or, b`` (operators are words or separators, never syntax).
    """
    return _TERM.findall(text.casefold())


def search_text(entry: MemoryEntry) -> str | None:
    """The text an entry is searched by, or ``None`` when it is not searchable."""
    text = entry.metadata.get(SEARCH_TEXT)
    return text if isinstance(text, str) else None


BM25_K1 = 1.2
BM25_B = 0.75


def bm25(tf: int, df: int, docs: int, length: int, avg_length: float) -> float:
    """One term's BM25 weight in one document (Robertson–Spärck Jones idf, always > 0).

    Args:
        tf: The term's occurrences in the document.
        df: How many documents of the corpus hold the term.
        docs: How many documents the corpus has.
        length: The document's length in terms.
        avg_length: The corpus's mean document length in terms.
    """
    idf = math.log(1.0 + (docs - df + 0.5) / (df + 0.5))
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg_length) if avg_length else BM25_K1
    return idf * tf * (BM25_K1 + 1.0) / (tf + norm)


def rank_entries(
    entries: Iterable[MemoryEntry], terms: Sequence[str], limit: int, min_importance: float
) -> list[SearchHit]:
    """:meth:`SearchableStore.search` by reading every entry: the fallback of stores without
    an index (a file store, a MongoDB server without text indexes), and the reference the
    indexed ones are tested against.

    The corpus is the searchable entries given (already limited to the searched namespaces
    and unexpired); ``terms`` are the query's distinct terms (:func:`check_search`).
    """
    docs: list[tuple[MemoryEntry, dict[str, int], int]] = []
    for entry in entries:
        text = search_text(entry)
        if text is None:
            continue
        counts: dict[str, int] = {}
        words = search_terms(text)
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        docs.append((entry, counts, len(words)))
    if not docs or not terms:
        return []
    avg = sum(length for _, _, length in docs) / len(docs)
    df = {t: sum(1 for _, counts, _ in docs if t in counts) for t in terms}
    hits: list[tuple[float, int, SearchHit]] = []
    for order, (entry, counts, length) in enumerate(docs):
        if entry.importance < min_importance:
            continue
        score = 0.0
        for t in terms:
            if t in counts:
                score += bm25(counts[t], df[t], len(docs), length, avg)
        if score > 0.0:
            hits.append((score, order, SearchHit(entry, score)))
    hits.sort(key=lambda h: (-h[0], -h[2].entry.importance, h[1]))
    return [hit for _, _, hit in hits[:limit]]


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
    return names, terms, limit, float(min_importance)


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


def find_unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` stops being the plain JSON every store holds (``None`` if it is).

    The answer names the place, e.g. ``content['a'][2] (type set)``; exact built-in types
    are checked first, so plain values cost one walk.
    """
    if type(value) is CheckedJson or _is_plain_json(value):
        return None
    return _find_unstorable(value, path)


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
        found = find_unstorable(value, field)
        if found is not None:
            raise _unstorable(entry.key, found)
    return entry


def dumps_json(value: Any, *, key: str | None, field: str) -> str:
    """JSON text of ``value``, or an error naming the key and the offending type.

    Raises:
        UnstorableValueError: ``value`` is not plain JSON (see :func:`check_storable`).
    """
    if type(value) is CheckedJson:
        try:
            return to_json(value).decode()
        except PydanticSerializationError:  # a lone surrogate: json.dumps says as before
            pass
    found = find_unstorable(value, field)
    if found is not None:
        raise _unstorable(key, found)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def timestamp(value: datetime | None) -> float | None:
    """Unix seconds of an expiry, as the tables store it."""
    return None if value is None else value.timestamp()


def now() -> float:
    """The current time in Unix seconds, for the tables' expiry checks."""
    return datetime.now(UTC).timestamp()


def entry_to_row(entry: MemoryEntry, version: int = 0) -> Row:
    """The persisted form of an entry (validates that it is storable).

    Args:
        entry: The entry; its own ``version`` is ignored, as every store ignores it.
        version: The version to store: 0 for a plain save, the new version for ``save_if``.
    """
    return (
        entry.entry_id,
        entry.scope.value,
        entry.key,
        dumps_json(entry.content, key=entry.key, field="content"),
        dumps_json(entry.metadata, key=entry.key, field="metadata"),
        entry.created_at.isoformat(),
        timestamp(entry.expires_at),
        entry.importance,
        version,
    )


def row_to_entry(row: Row | tuple[Any, ...], where: str) -> MemoryEntry:
    """An entry from its persisted form.

    Accepts the 8-element row of stores written before versions existed, as version 0.

    Raises:
        CorruptStoreError: The row cannot be decoded; the message names ``where``.
    """
    if len(row) == 8:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance = row
        version: Any = 0
    else:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = row
    try:
        if type(version) is not int:
            version = int(version)
        if version < 0:
            raise ValueError(f"negative version {version}")
        return MemoryEntry.model_construct(
            entry_id=entry_id,
            scope=MemoryScope(scope),
            key=key,
            content=json.loads(content),
            metadata=json.loads(metadata),
            created_at=datetime.fromisoformat(created_at),
            expires_at=None if expires_at is None else datetime.fromtimestamp(expires_at, UTC),
            importance=float(importance),
            version=version,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"corrupt entry {entry_id!r} in {where}: {exc}") from exc
