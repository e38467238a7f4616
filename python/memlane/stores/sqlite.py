"""SQLiteStore: one SQLite file, on the Rust table or its pure-Python twin.

Both tables raise the stdlib ``sqlite3`` exceptions; this module is the one place they become
memlane errors that name the file, whichever implementation is active.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memlane import _backend
from memlane._pure.entry_builder import Row
from memlane._pure.store import NOT_A_STORE
from memlane.errors import CorruptStoreError, NotAStoreError, StoreError, StorePathError
from memlane.stores._base import LocalStore, awaitable, ensure_directory
from memlane.stores._group_commit import GroupCommit
from memlane.stores.protocol import (
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
    entry_to_row,
    next_version,
    now,
    row_to_entry,
)
from memlane.stores.vectors import (
    EntryVector,
    check_entry_vectors,
    check_missing_vectors,
    check_model,
    check_vector_search,
    encode_vector,
    text_digest,
)
from memlane.types import MemoryEntry, MemoryScope

__all__ = ["SQLiteStore"]

_SaveIf = tuple[str, Row, int | None, float]
"""One save_if of the table: namespace, row, expected version, now."""

# SQLite's LIMIT is a signed 64-bit integer; any larger limit means the same: no limit.
_MAX_LIMIT = 2**63 - 1

# SQLITE_CORRUPT and SQLITE_NOTADB: the file's bytes are not a readable database.
_UNREADABLE_CODES = {11, 26}
_UNREADABLE_TEXTS = ("database disk image is malformed", "file is not a database")


ENTRY_KIT = (
    MemoryEntry,
    {scope.value: scope for scope in MemoryScope},
    datetime.fromisoformat,
    datetime.fromtimestamp,
    UTC,
)
"""What the tables need to build entries from rows without validation (``build_entry``)."""


def _unreadable(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        # Extended result codes keep the primary code in their low byte.
        return code & 0xFF in _UNREADABLE_CODES
    # An error without a code (as a table may raise it): SQLite's own text for those codes.
    return any(text in str(exc) for text in _UNREADABLE_TEXTS)


def sqlite_error(exc: sqlite3.Error, path: str) -> StoreError:
    """The memlane error for a failure of SQLite on the file at ``path``."""
    if str(exc).startswith(NOT_A_STORE):
        return NotAStoreError(f"SQLite store {path}: {exc}; nothing was written to it")
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    message = f"SQLite store {path}: {exc} ({name})"
    return CorruptStoreError(message) if _unreadable(exc) else StoreError(message)


def _check_read_only_path(path: str) -> None:
    """Refuses, before SQLite sees it, a path a read-only store cannot be at.

    Raises:
        NotAStoreError: ``:memory:`` (empty by definition), or no such file.
    """
    if path == ":memory:":
        raise NotAStoreError(
            f"SQLite store {path}: {NOT_A_STORE}: an in-memory database opened read-only is empty"
        )
    if not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "no such file"
        raise NotAStoreError(
            f"SQLite store {path}: {NOT_A_STORE}: {what} (a read-only store is never created)"
        )


def _read_only_open_error(exc: sqlite3.Error, path: str) -> StoreError:
    """The error of a read-only open that SQLite refused: a file that is no SQLite database
    at all is not a store either."""
    if _unreadable(exc):
        return NotAStoreError(f"SQLite store {path}: {NOT_A_STORE}: not an SQLite database ({exc})")
    return sqlite_error(exc, path)


class _SqliteErrors:
    """A ``with`` block that re-raises ``sqlite3.Error`` as :func:`sqlite_error`."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, sqlite3.Error):
            raise sqlite_error(exc, self.path) from exc


def _make_parent(path: str) -> None:
    """Creates the file's directory, or says in a memlane error why ``path`` cannot be one."""
    if path == ":memory:":
        return
    target = Path(path)
    if target.is_dir():
        raise StorePathError(f"SQLite store {path}: is a directory, not a database file")
    ensure_directory(target.parent, f"SQLite store {path}")


class SQLiteStore(LocalStore):
    """An SQLite file (WAL, every operation one transaction, indexed by namespace and key).

    Several processes can share the file: :meth:`save_if` reads and writes in one
    ``BEGIN IMMEDIATE`` transaction, so it is a compare-and-swap across processes too. The
    ``save_if`` calls of several threads that wait for the file at one moment share one
    transaction (group commit), each judged as if alone and each returning once that
    transaction has committed; a lone writer commits at once. A writable store copies its
    write-ahead log back into the file (SQLite's checkpoint) on a thread and connection of its
    own after every 160 committed writes, so no caller's write waits for that copy; closing the
    store stops the thread first.
    :meth:`search` ranks entries by their ``metadata["search_text"]`` from an FTS5 index that
    triggers in the file keep in step with every write; :meth:`vector_search` scores the
    vectors a ``memory_vectors`` table keeps beside the rows (triggers drop an entry's vector
    when it is deleted or its search text changes). A file written before versions, the index
    or vectors existed is migrated when opened (its entries at version 0, its search texts
    indexed, the vectors table added), an index that kept its own copy of the texts is
    rebuilt without it, and the two namespace indexes of older files become the one
    ``(namespace, key)`` index that serves both keys and order, once, whichever process gets
    there first; opened read-only, such a file is read as it is and simply has no vectors. The index needs SQLite's FTS5 and
    JSON functions: the Rust table bundles an SQLite with both, and the pure-Python one uses
    the interpreter's ``sqlite3``, whose usual builds have them. The ``async_`` methods run
    in a worker thread.

    A file holding other tables and none of memlane's (another application's database) is
    refused, never given memlane's tables. Opened with ``read_only=True``, the file must
    already be a memlane store: it is opened with SQLite's read-only flag, and nothing is
    created, migrated or switched (the file stays byte for byte as it was); every write
    raises :class:`~memlane.errors.ReadOnlyStoreError`.

    Args:
        path: The database file; it and its parent directories are created if missing.
            ``":memory:"`` keeps the database in memory.
        read_only: Open an existing store for reading only.

    Raises:
        StorePathError: ``path`` is a directory, or its directory cannot be created (an
            ``OSError``).
        NotAStoreError: The file holds other tables and none of memlane's; read-only, also
            a missing or empty file, or one that is not an SQLite database. Names the file.
        StoreError: SQLite cannot open the file (an ``OSError``); a
            :class:`~memlane.errors.CorruptStoreError` if it is not a database.
    """

    persistent = True

    def __init__(
        self, path: str | os.PathLike[str] = ".memlane/memory.sqlite3", *, read_only: bool = False
    ) -> None:
        self.path = os.fspath(path)
        self.read_only = bool(read_only)
        self._errors = _SqliteErrors(self.path)
        if self.read_only:
            _check_read_only_path(self.path)
            try:
                self._table = _backend.active.SqliteTable(self.path, read_only=True)
            except sqlite3.Error as exc:
                raise _read_only_open_error(exc, self.path) from exc
            return
        _make_parent(self.path)
        with self._errors:
            self._table = _backend.active.SqliteTable(self.path)
        table = self._table
        # Conditional writes of this store's threads that wait at one moment share one
        # transaction (and its commit): see _group_commit.
        self._group: GroupCommit[_SaveIf, bool] = GroupCommit(
            lambda op: table.save_if(*op), table.save_if_many
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"

    def _release(self) -> None:
        with self._errors:
            self._table.close()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry`` atomically.

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        namespace, row = check_namespace(namespace), entry_to_row(check_entry(entry))
        self._check_write()
        with self._errors:
            self._table.save(namespace, row)

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries in one transaction: all or none."""
        namespace = check_namespace(namespace)
        rows = [entry_to_row(check_entry(e)) for e in entries]
        self._check_write()
        with self._errors:
            self._table.save_many(namespace, rows)

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        """Saves ``entry`` if its key's unexpired holder is at ``expected_version`` (``None``:
        there is none), in one transaction; whether it did (see
        :meth:`~memlane.stores.protocol.ConditionalStore.save_if`).

        Raises:
            TypeError: ``entry.key`` is ``None`` or ``expected_version`` is not an ``int``;
                :class:`~memlane.errors.UnstorableValueError` for content or metadata that is
                not plain JSON.
            ValueError: ``expected_version`` is negative or too large.
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        namespace = check_namespace(namespace)
        entry = check_keyed_entry(entry)
        expected_version = check_expected_version(expected_version)
        row = entry_to_row(entry, next_version(expected_version))
        self._check_write()
        with self._errors:
            return self._group.submit((namespace, row, expected_version, now()))

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Unexpired keyed entries with ``start <= key < stop``, in key order, from the index.

        Raises:
            CorruptStoreError: A row cannot be decoded; names the file.
        """
        namespace = check_namespace(namespace)
        start, stop = check_key_range(start, stop)
        self._check_open()
        with self._errors:
            items, odd = self._table.load_range_entries(namespace, start, stop, now(), ENTRY_KIT)
        return self._decoded(items, odd)

    def _decoded(self, items: list[Any], odd: list[int]) -> list[MemoryEntry]:
        """The tables' entries with the rows they left at ``odd`` decoded (or refused, with a
        :class:`~memlane.errors.CorruptStoreError`) by ``row_to_entry``."""
        for i in odd:
            items[i] = row_to_entry(items[i], self.path)
        return items

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order.

        Raises:
            CorruptStoreError: A row cannot be decoded; names the file.
        """
        namespace = check_namespace(namespace)
        self._check_open()
        with self._errors:
            items, odd = self._table.load_entries(namespace, now(), ENTRY_KIT)
        return self._decoded(items, odd)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        namespace, key = check_namespace(namespace), check_key(key)
        self._check_open()
        with self._errors:
            found = self._table.load_by_key_entry(namespace, key, now(), ENTRY_KIT)
        if type(found) is tuple:
            return row_to_entry(found, self.path)
        entry: MemoryEntry | None = found  # the table built it with ENTRY_KIT, or found none
        return entry

    def load_content_by_key(self, namespace: str, key: str) -> tuple[str, int, str] | None:
        """``(entry_id, version, content)`` of the unexpired entry holding ``key``, or ``None``.

        ``content`` is the JSON text exactly as stored, not decoded, and no entry is built: for
        a reader that decodes the text itself (or caches by it, since another process may
        rewrite the row at any time).

        Raises:
            TypeError, ValueError: A bad ``namespace`` or ``key``, named.
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        # The checks inline where they pass: this is every SQLite get_fact's read.
        if type(namespace) is not str or not namespace or "\x00" in namespace:
            namespace = check_namespace(namespace)
        if type(key) is not str:
            key = check_key(key)
        if self._closed:
            self._check_open()
        try:
            return self._table.load_content_by_key(namespace, key, time.time())
        except sqlite3.Error as exc:
            raise sqlite_error(exc, self.path) from exc

    async_load_content_by_key = awaitable(load_content_by_key)

    def search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` most relevant to ``query``, best first, from the index
        (see :meth:`~memlane.stores.protocol.SearchableStore.search`).

        Scores are SQLite's BM25 (``bm25()``, sign flipped so that higher is better) over
        every indexed entry of the file, whichever namespace holds it; ties go to importance,
        then to the older entry.

        Args:
            namespaces: The namespaces to search.
            query: Text whose terms (:func:`~memlane.stores.protocol.search_terms`) are
                looked for; it is only ever data, never FTS5 or SQL syntax.
            limit: The most hits returned (at least 1).
            min_importance: Entries below this importance are left out.

        Returns:
            The hits, best first.

        Raises:
            TypeError, ValueError: A bad argument, named (see
                :func:`~memlane.stores.protocol.check_search`).
            CorruptStoreError: A found row cannot be decoded; names the file.
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        names, terms, limit, min_importance = check_search(namespaces, query, limit, min_importance)
        self._check_open()
        if not names or not terms:
            return []
        with self._errors:
            found = self._table.search(names, terms, min(limit, _MAX_LIMIT), min_importance, now())
        return [SearchHit(row_to_entry(row, self.path), score) for row, score in found]

    async_search = awaitable(search)

    def save_vectors(self, namespace: str, model: str, vectors: Sequence[EntryVector]) -> int:
        """Attaches each vector to its unexpired entry whose search text has the vector's
        digest, replacing the entry's vector (see
        :meth:`~memlane.stores.protocol.VectorStore.save_vectors`); how many were attached.

        The texts are read, their digests compared here, and the vectors written in one
        transaction that names the text each was checked against: a text another process
        changed in between takes no vector made from the old one.

        Raises:
            TypeError, ValueError: A bad argument, named; vectors of different dimensions.
            ReadOnlyStoreError: The store was opened read-only.
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        namespace, model = check_namespace(namespace), check_model(model)
        checked = check_entry_vectors(vectors)
        self._check_write()
        if not checked:
            return 0
        at = now()
        with self._errors:
            texts = dict(self._table.search_texts(namespace, [v.entry_id for v in checked], at))
            items = [
                (v.entry_id, texts[v.entry_id], v.digest, encode_vector(v.vector))
                for v in checked
                if v.entry_id in texts and text_digest(texts[v.entry_id]) == v.digest
            ]
            if not items:
                return 0
            return self._table.save_vectors(namespace, model, len(checked[0].vector), items, at)

    def vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries nearest ``vector`` by cosine similarity, best first (see
        :meth:`~memlane.stores.protocol.VectorStore.vector_search`): the vectors of ``model``
        in ``namespaces`` are read from the file and scored in Rust (or by the twin); ties go
        to importance, then to the older entry.

        Raises:
            TypeError, ValueError: A bad argument, named.
            CorruptStoreError: A found row cannot be decoded; names the file.
            StoreError: SQLite failed (an ``OSError``).
            StoreClosedError: The store was closed.
        """
        names, query, model, limit, min_importance = check_vector_search(
            namespaces, vector, model, limit, min_importance
        )
        self._check_open()
        if not names:
            return []
        with self._errors:
            found = self._table.vector_search(
                names, model, query, min(limit, _MAX_LIMIT), min_importance, now()
            )
        return [SearchHit(row_to_entry(row, self.path), score) for row, score in found]

    def missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Unexpired entries with a search text and no vector of ``model``, in insertion
        order, at most ``limit`` (see
        :meth:`~memlane.stores.protocol.VectorStore.missing_vectors`)."""
        names, model, limit = check_missing_vectors(namespaces, model, limit)
        self._check_open()
        if not names:
            return []
        with self._errors:
            rows = self._table.missing_vectors(names, model, min(limit, _MAX_LIMIT), now())
        return [row_to_entry(row, self.path) for row in rows]

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        namespace, entry_id = check_namespace(namespace), check_entry_id(entry_id)
        self._check_write()
        with self._errors:
            return self._table.delete(namespace, entry_id)

    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries with these ids in one transaction: all of them or, if the call
        fails, none; the ids that existed, in the order given.

        Raises:
            TypeError: ``entry_ids`` is not a list of ``str``.
            ReadOnlyStoreError: The store was opened read-only.
            StoreError: SQLite failed (an ``OSError``); nothing was removed.
            StoreClosedError: The store was closed.
        """
        namespace, ids = check_namespace(namespace), check_entry_ids(entry_ids)
        self._check_write()
        if not ids:
            return []
        with self._errors:
            return self._table.delete_many(namespace, ids)

    def clear(self, namespace: str) -> int:
        """Removes every entry of the namespace; how many."""
        namespace = check_namespace(namespace)
        self._check_write()
        with self._errors:
            return self._table.clear(namespace)

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one entry, in order of their oldest entry."""
        self._check_open()
        with self._errors:
            return self._table.namespaces()

    def cleanup_expired(self) -> int:
        """Removes expired entries; how many."""
        self._check_write()
        with self._errors:
            return self._table.cleanup_expired(now())
