"""Pure-Python twins of the Rust store tables.

These work on primitives (ids, keys, expiry as Unix seconds, JSON text) so that the Rust and
Python versions can be compared call for call; :mod:`memlane.stores` turns rows into
:class:`~memlane.types.MemoryEntry` objects once, for both, and maps the ``sqlite3``
exceptions both raise to memlane errors once (:mod:`memlane.stores.sqlite`).

Shared semantics (the Rust tables follow them exactly):

* ``save`` with an ``entry_id`` already in the namespace replaces it in place (its position
  is kept); an ``entry_id`` held by another namespace moves to the end of this one.
* A key is unique within a namespace: saving an entry whose key another entry holds removes
  that other entry in the same step, so two entries never share a key.
* ``load`` returns unexpired entries in insertion order; expired entries are never returned
  but still hold their key until ``cleanup_expired`` or an overwrite removes them.

The SQLite table also keeps each row's version (the last element of a :data:`Row`):
``save_if`` writes a row only if the unexpired holder of its key is at the expected version
(or there is none), in the same transaction that reads it, and ``load_range`` reads keys in
code-point order from the (namespace, key) index. Its ``search`` ranks rows by their
``metadata.search_text`` from an FTS5 index that triggers keep in step with every write.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memlane._pure import sqlite_checkpoint, sqlite_vectors

# The in-memory table and the row-to-entry builder have modules of their own; the names are
# imported here too, where the twins and their tests look them up.
from memlane._pure.entry_builder import EntryKit, Row, build_entries, build_entry
from memlane._pure.memory_table import MemoryTable, _live
from memlane._pure.sqlite_open import (
    NOT_A_STORE,
    OUTDATED,
    begin,
    check_memlane,
    has_contentless_search,
    has_one_key_index,
    has_search,
    has_vectors,
    has_version,
    migrate,
    with_lock_retry,
)
from memlane._pure.sqlite_vectors import READ_ONLY_VECTORS, VECTOR_SCHEMA

__all__ = [
    "NOT_A_STORE",
    "OUTDATED",
    "EntryKit",
    "MemoryTable",
    "Row",
    "SqliteTable",
    "_live",
    "build_entries",
    "build_entry",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_entries (
    seq INTEGER PRIMARY KEY,
    entry_id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    expires_at REAL,
    importance REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    version INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS memory_entries_namespace_key
    ON memory_entries (namespace, key);
CREATE INDEX IF NOT EXISTS memory_entries_expires_at
    ON memory_entries (expires_at) WHERE expires_at IS NOT NULL;
"""
"""The on-disk schema, shared byte for byte with the Rust table so either can open a file.

``seq`` has no ``AUTOINCREMENT``: the keyword costs every insert a write of the
``sqlite_sequence`` page and only guarantees that a deleted highest ``seq`` is never reused.
Reuse is safe: the search index and the vector of a row leave with it (delete triggers), and
the vector change log records the ``seq``, so a mirror re-reads it. Files made with the keyword
keep it (``CREATE TABLE IF NOT EXISTS``); both kinds behave alike.

One index serves a namespace's keys and its order: ``(namespace, key)``, unique (SQLite counts
NULLs as distinct, so unkeyed entries never collide) and holding every row, so its entries are
``(namespace, key, seq)`` and a namespace's ``seq`` values are read from it alone (see
:meth:`SqliteTable.load`). A second index on ``(namespace, seq)`` cost every write one more page
(and its splits), ~1.7 of the ~7.6 WAL frames a turn's commit wrote."""

ONE_KEY_INDEX = """
DROP INDEX IF EXISTS memory_entries_namespace;
DROP INDEX IF EXISTS memory_entries_namespace_key;
CREATE UNIQUE INDEX memory_entries_namespace_key ON memory_entries (namespace, key);
"""
"""Brings a file made with two namespace indexes (``(namespace, seq)``, and ``(namespace, key)``
for keyed rows only) to :data:`SCHEMA`'s one. Read-only, such a file is read as it is: every
statement works with either set of indexes."""

ADD_VERSION = "ALTER TABLE memory_entries ADD COLUMN version INTEGER NOT NULL DEFAULT 0"
"""Brings a file made before versions existed to :data:`SCHEMA`: its rows become version 0."""

SEARCH_SCHEMA = """
CREATE VIRTUAL TABLE memory_search USING fts5(
    text, content = '', tokenize = "unicode61 remove_diacritics 0 categories 'L* N*'"
);
CREATE TRIGGER memory_search_insert AFTER INSERT ON memory_entries
WHEN json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
    = 'text'
BEGIN
    INSERT INTO memory_search (rowid, text)
    VALUES (new.seq, json_extract(new.metadata, '$.search_text'));
END;
CREATE TRIGGER memory_search_delete AFTER DELETE ON memory_entries
WHEN json_type(CASE WHEN json_valid(old.metadata) THEN old.metadata END, '$.search_text')
    = 'text'
BEGIN
    INSERT INTO memory_search (memory_search, rowid, text)
    VALUES ('delete', old.seq, json_extract(old.metadata, '$.search_text'));
END;
CREATE TRIGGER memory_search_update AFTER UPDATE OF metadata ON memory_entries
WHEN old.metadata IS NOT new.metadata
BEGIN
    INSERT INTO memory_search (memory_search, rowid, text)
    SELECT 'delete', old.seq, json_extract(old.metadata, '$.search_text')
    WHERE json_type(CASE WHEN json_valid(old.metadata) THEN old.metadata END, '$.search_text')
        = 'text';
    INSERT INTO memory_search (rowid, text)
    SELECT new.seq, json_extract(new.metadata, '$.search_text')
    WHERE json_type(CASE WHEN json_valid(new.metadata) THEN new.metadata END, '$.search_text')
        = 'text';
END;
INSERT INTO memory_search (rowid, text)
SELECT seq, json_extract(metadata, '$.search_text') FROM memory_entries
WHERE json_type(CASE WHEN json_valid(metadata) THEN metadata END, '$.search_text') = 'text';
"""
"""The search index, its triggers and its back-fill, run once per file in the transaction
that finds the index missing (a file made before it existed gets it, filled, on open).

``memory_search`` holds, under each entry's ``seq`` as rowid, the entry's
``metadata.search_text`` when that is a JSON string. Triggers keep it in step inside every
writing statement's own transaction, so every writer (both tables, and memlane versions from
before the index) keeps it right. Its tokens are runs of Unicode letters and numbers,
case-folded, diacritics kept, as :func:`memlane.stores.protocol.search_terms` splits text;
where the two can still differ: ``str.casefold`` folds fully ("ß" is "ss", "ς" is "σ") while
unicode61 only lowercases, and each follows its own Unicode version. A query term the index
splits into several tokens is searched as their phrase; one it splits into none matches
nothing. ``json_valid`` guards every JSON call, so a row whose metadata is not JSON is simply
not searchable rather than making writes to it, or opening the file, fail.

The index is contentless (``content = ''``): the texts live in the entries' metadata only, so a
searchable write dirties no page of a copy, and the triggers remove a text by giving FTS5 the
very text they indexed (the ``'delete'`` command), which the metadata still holds when they
fire. A file whose index kept copies is rebuilt once, on open (:data:`DROP_SEARCH`)."""

DROP_SEARCH = """
DROP TRIGGER memory_search_insert;
DROP TRIGGER memory_search_delete;
DROP TRIGGER memory_search_update;
DROP TABLE memory_search;
"""
"""Drops a search index that keeps its own copy of every text (files from before the index was
contentless); :data:`SEARCH_SCHEMA` then builds it again from the entries."""

SEARCH = """
SELECT e.entry_id, e.scope, e.key, e.content, e.metadata, e.created_at, e.expires_at,
    e.importance, e.version, -bm25(memory_search) AS score
FROM memory_search CROSS JOIN memory_entries AS e ON e.seq = memory_search.rowid
WHERE memory_search MATCH ? AND e.namespace IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?) AND e.importance >= ?
ORDER BY score DESC, e.importance DESC, e.seq
LIMIT ?
"""
"""Ranked search: FTS5 query, namespaces as a JSON array, now, minimum importance, limit.

``CROSS JOIN`` makes the FTS index the outer loop (each hit looks its entry up by rowid), so
the planner cannot walk every entry of the namespaces instead. ``bm25()`` is negative, lower
is better; its corpus is the whole index (every namespace, expired entries until removed), so
scores order one call's hits and mean nothing across calls."""

PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=30000")
"""WAL with synchronous=NORMAL: durable across process crashes, one fsync per checkpoint."""

_COLUMNS = "entry_id, scope, key, content, metadata, created_at, expires_at, importance, version"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_HOLDER = (
    "SELECT version, "
    "CASE WHEN expires_at IS NULL OR expires_at > ? THEN 1 ELSE 0 END, entry_id = ? "
    "FROM memory_entries WHERE namespace = ? AND key = ?"
)
"""The holder of a key, live or expired: its version, whether it is live at now, whether it is
the entry being written (the Rust table's ``HOLDER``)."""
# What a conditional write read of its key's holder before writing (the Rust table's `Holder`).
_UNKNOWN, _ABSENT, _THIS, _OTHER = "unknown", "absent", "this", "other"


def match_query(terms: list[str]) -> str:
    """The FTS5 query matching any of ``terms``: each one a string (``"..."``, quotes
    doubled), so no term can be an FTS5 operator, column filter or prefix, joined by ``OR``.

    A NUL would end the query text for FTS5's parser mid-string; it separates words anyway,
    so it becomes a space.
    """
    return " OR ".join('"' + term.replace('"', '""').replace("\0", " ") + '"' for term in terms)


class SqliteTable:
    """The SQLite store on stdlib ``sqlite3``: every call is one transaction."""

    def __init__(self, path: str, read_only: bool = False) -> None:
        """Opens the database at ``path``.

        Writable, the file and its parent directories are created if missing, and the
        schema created or migrated. Read-only, the existing file is opened with SQLite's
        ``mode=ro`` and nothing is created, switched or migrated: SQLite itself refuses
        every write.
        """
        if read_only:
            target = f"{Path(path).absolute().as_uri()}?mode=ro"
        else:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            target = path
        conn = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, timeout=30, uri=read_only
        )
        try:
            # Another process may be switching a new file to WAL, whose lock the busy
            # handler does not wait for: retried as the PRAGMAs are.
            with_lock_retry(lambda: check_memlane(conn, read_only))
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()
        self._checkpointer: sqlite_checkpoint.Checkpointer | None = None
        if read_only:
            if not has_vectors(conn):
                conn.execute(READ_ONLY_VECTORS)
            return
        for pragma in PRAGMAS:
            with_lock_retry(lambda: conn.execute(pragma))  # noqa: B023 (called at once)
        with self._lock:
            conn.executescript(SCHEMA)
            migrate(conn, has_version, ADD_VERSION)
            migrate(conn, has_search, SEARCH_SCHEMA)
            migrate(conn, has_contentless_search, DROP_SEARCH + SEARCH_SCHEMA)
            migrate(conn, has_vectors, VECTOR_SCHEMA)
            migrate(conn, has_one_key_index, ONE_KEY_INDEX)
        self._checkpointer = sqlite_checkpoint.start(path, conn)
        if self._checkpointer is not None:
            # A table dropped unclosed stops its thread too (the thread holds no reference to
            # the table, so the table can be collected).
            weakref.finalize(self, self._checkpointer.stop)

    def _commit(self, conn: sqlite3.Connection) -> None:
        """Commits the open write transaction, and counts it towards the next checkpoint."""
        conn.execute("COMMIT")
        self._committed()

    def _committed(self) -> None:
        """Counts a write committed by its own statement (autocommit)."""
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def _open(self) -> sqlite3.Connection:
        """The connection; a ``ValueError`` once closed, as the Rust table raises."""
        if self._conn is None:
            raise ValueError("SqliteTable is closed")
        return self._conn

    def _upsert(
        self, conn: sqlite3.Connection, namespace: str, row: Row, holder: str = _UNKNOWN
    ) -> None:
        """Upserts ``row``, given what the caller read of its key's holder (``_holder``): the
        deletes that could find nothing are skipped (each is an index probe)."""
        entry_id, key = row[0], row[2]
        if key is not None and holder in (_UNKNOWN, _OTHER):
            conn.execute(
                "DELETE FROM memory_entries WHERE namespace = ? AND key = ? AND entry_id != ?",
                (namespace, key, entry_id),
            )
        # Entry ids are unique over every namespace: the row holding this key is this entry,
        # so it is in this namespace and in no other.
        if holder != _THIS:
            conn.execute(
                "DELETE FROM memory_entries WHERE entry_id = ? AND namespace != ?",
                (entry_id, namespace),
            )
        conn.execute(
            f"INSERT INTO memory_entries (namespace, {_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (entry_id) DO UPDATE SET scope = excluded.scope, key = excluded.key, "
            "content = excluded.content, metadata = excluded.metadata, "
            "created_at = excluded.created_at, expires_at = excluded.expires_at, "
            "importance = excluded.importance, version = excluded.version",
            (namespace, *row),
        )

    def save_many(self, namespace: str, rows: list[Row]) -> None:
        """Upserts rows in one transaction: all of them are written or none."""
        with self._lock:
            conn = self._open()
            begin(conn)
            try:
                for row in rows:
                    self._upsert(conn, namespace, row)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)

    def save(self, namespace: str, row: Row) -> None:
        """Upserts one row atomically."""
        self.save_many(namespace, [row])

    def save_if(self, namespace: str, row: Row, expected_version: int | None, now: float) -> bool:
        """Upserts ``row`` if the holder of its key unexpired at ``now`` is at
        ``expected_version`` (``None``: there is none); whether it did.

        The read and the write are one ``BEGIN IMMEDIATE`` transaction, which holds the
        database's write lock from the start: no other process can write between them.
        """
        return self.save_if_many([(namespace, row, expected_version, now)])[0]

    def save_if_many(self, ops: Sequence[tuple[str, Row, int | None, float]]) -> list[bool]:
        """Several :meth:`save_if`, in order, in one transaction: each compares the holder its
        key has after the ones before it, as if run one by one; whether each wrote. An error
        rolls all of them back (group commit: writers waiting at one moment share a commit).
        """
        with self._lock:
            conn = self._open()
            begin(conn)
            try:
                won = [self._check_and_upsert(conn, *op) for op in ops]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            return won

    def _check_and_upsert(
        self,
        conn: sqlite3.Connection,
        namespace: str,
        row: Row,
        expected_version: int | None,
        now: float,
    ) -> bool:
        found = conn.execute(_HOLDER, (now, row[0], namespace, row[2])).fetchone()
        if found is None:
            current, holder = None, _ABSENT
        else:
            current = found[0] if found[1] else None
            holder = _THIS if found[2] else _OTHER
        won = current == expected_version
        if won:
            self._upsert(conn, namespace, row, holder)
        return won

    def load(self, namespace: str, now: float) -> list[Row]:
        """Unexpired rows of a namespace, in insertion order.

        The namespace's ``seq`` values are read from the ``(namespace, key)`` index alone and
        sorted as integers, then each row is found by ``seq`` in that order, so no row goes
        through a sort (``ORDER BY seq`` over the index's key order would sort whole rows).
        """
        with self._lock:
            cur = self._open().execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE seq IN "
                "(SELECT seq FROM memory_entries WHERE namespace = ?) "
                f"AND {_LIVE} ORDER BY seq",
                (namespace, now),
            )
            return list(cur.fetchall())

    def load_by_key(self, namespace: str, key: str, now: float) -> Row | None:
        """The unexpired row holding ``key``, or ``None``."""
        with self._lock:
            cur = self._open().execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE namespace = ? AND key = ? AND {_LIVE}",
                (namespace, key, now),
            )
            row: Row | None = cur.fetchone()
            return row

    def load_content_by_key(
        self, namespace: str, key: str, now: float
    ) -> tuple[str, int, str] | None:
        """``(entry_id, version, content)`` of :meth:`load_by_key`'s row, the content as the
        JSON text stored, or ``None``: for a reader that decodes (or caches by) the text itself
        and needs none of the row's other fields."""
        with self._lock:
            cur = self._open().execute(
                "SELECT entry_id, version, content FROM memory_entries "
                f"WHERE namespace = ? AND key = ? AND {_LIVE}",
                (namespace, key, now),
            )
            found: tuple[str, int, str] | None = cur.fetchone()
            return found

    def load_range(self, namespace: str, start: str, stop: str, now: float) -> list[Row]:
        """Unexpired rows whose key is in ``[start, stop)``, in key order.

        ``key`` has the default BINARY collation, which orders UTF-8 bytes and so code
        points, as Python orders ``str``; SQLite walks the (namespace, key) index (on a file
        not yet migrated, the partial one: the bounds imply ``key IS NOT NULL``).
        """
        with self._lock:
            cur = self._open().execute(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE namespace = ? "
                f"AND key >= ? AND key < ? AND {_LIVE} ORDER BY key",
                (namespace, start, stop, now),
            )
            return list(cur.fetchall())

    def load_entries(
        self, namespace: str, now: float, kit: EntryKit
    ) -> tuple[list[Any], list[int]]:
        """:meth:`load` as :func:`build_entries`: entries, and the indices still holding rows."""
        return build_entries(self.load(namespace, now), kit)

    def load_range_entries(
        self, namespace: str, start: str, stop: str, now: float, kit: EntryKit
    ) -> tuple[list[Any], list[int]]:
        """:meth:`load_range` as :func:`build_entries`."""
        return build_entries(self.load_range(namespace, start, stop, now), kit)

    def load_by_key_entry(self, namespace: str, key: str, now: float, kit: EntryKit) -> Any:
        """:meth:`load_by_key` as an entry, or the row (a tuple) for ``row_to_entry``, or
        ``None``."""
        row = self.load_by_key(namespace, key, now)
        if row is None:
            return None
        entry = build_entry(row, kit)
        return row if entry is None else entry

    def search(
        self,
        namespaces: list[str],
        terms: list[str],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Row, float]]:
        """The unexpired rows of ``namespaces`` with ``importance >= min_importance`` whose
        search text holds any of ``terms``, each with its score (> 0, higher is better).

        Best first, then by importance, then in insertion order; at most ``limit``. Served by
        the FTS index; ``terms`` are only ever data (see :func:`match_query`).
        """
        with self._lock:
            conn = self._open()
            # An empty MATCH is an FTS5 syntax error, and nothing could be found anyway.
            if not namespaces or not terms:
                return []
            cur = conn.execute(
                SEARCH,
                (
                    match_query(terms),
                    json.dumps(namespaces, ensure_ascii=False),
                    now,
                    min_importance,
                    limit,
                ),
            )
            return [(row[:9], row[9]) for row in cur.fetchall()]

    def search_texts(
        self, namespace: str, entry_ids: list[str], now: float
    ) -> list[tuple[str, str]]:
        """(entry id, search text) of the unexpired entries among ``entry_ids`` with one."""
        with self._lock:
            return sqlite_vectors.search_texts(self._open(), namespace, entry_ids, now)

    def save_vectors(
        self,
        namespace: str,
        model: str,
        dims: int,
        items: list[tuple[str, str, str, bytes]],
        now: float,
    ) -> int:
        """Attaches each (entry id, text, digest, float32 blob) whose unexpired entry still
        has that search text, replacing its vector; one transaction; how many."""
        with self._lock:
            conn = self._open()
            begin(conn)
            try:
                attached = sqlite_vectors.save_vectors(conn, namespace, model, dims, items, now)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            return attached

    def vector_search(
        self,
        namespaces: list[str],
        model: str,
        query: list[float],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Row, float]]:
        """The rows nearest ``query`` by dot product with their vector of ``model`` (see
        :func:`memlane._pure.sqlite_vectors.vector_search`)."""
        with self._lock:
            conn = self._open()
            return sqlite_vectors.vector_search(
                conn, namespaces, model, query, limit, min_importance, now
            )

    def missing_vectors(
        self, namespaces: list[str], model: str, limit: int, now: float
    ) -> list[Row]:
        """Unexpired rows with a search text and no vector of ``model``, oldest first."""
        with self._lock:
            return sqlite_vectors.missing_vectors(self._open(), namespaces, model, limit, now)

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes an entry of this namespace; whether there was one."""
        with self._lock:
            cur = self._open().execute(
                "DELETE FROM memory_entries WHERE namespace = ? AND entry_id = ?",
                (namespace, entry_id),
            )
            self._committed()
            return cur.rowcount > 0

    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries of this namespace with these ids in one transaction (all or
        none); the ids that existed, in the order given."""
        with self._lock:
            conn = self._open()
            begin(conn)
            try:
                gone = [
                    entry_id
                    for entry_id in entry_ids
                    if conn.execute(
                        "DELETE FROM memory_entries WHERE namespace = ? AND entry_id = ?",
                        (namespace, entry_id),
                    ).rowcount
                    > 0
                ]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._commit(conn)
            return gone

    def clear(self, namespace: str) -> int:
        """Removes every entry of a namespace; how many there were."""
        with self._lock:
            conn = self._open()
            gone = conn.execute(
                "DELETE FROM memory_entries WHERE namespace = ?", (namespace,)
            ).rowcount
            self._committed()
            return gone

    def cleanup_expired(self, now: float) -> int:
        """Removes expired entries everywhere; how many."""
        with self._lock:
            conn = self._open()
            gone = conn.execute(
                "DELETE FROM memory_entries WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (now,),
            ).rowcount
            self._committed()
            return gone

    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one entry, in order of their oldest entry."""
        with self._lock:
            cur = self._open().execute(
                "SELECT namespace FROM memory_entries GROUP BY namespace ORDER BY MIN(seq)"
            )
            return [r[0] for r in cur.fetchall()]

    def close(self) -> None:
        """Closes the connection; closing again does nothing, any other call raises
        ``ValueError("SqliteTable is closed")``."""
        with self._lock:
            if self._checkpointer is not None:
                self._checkpointer.stop()
                self._checkpointer = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None
