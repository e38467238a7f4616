"""Opening the twin's SQLite file: refusing what is not a store, migrating what is old.

The Rust table (``rust/src/store/sqlite.rs``) opens files by the same steps; the constants
and the schema both compare live in :mod:`memlane._pure.store` and
:mod:`memlane._pure.sqlite_vectors`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator

__all__ = [
    "NOT_A_STORE",
    "OUTDATED",
    "begin",
    "check_memlane",
    "has_contentless_search",
    "has_one_key_index",
    "has_search",
    "has_vectors",
    "has_version",
    "migrate",
    "with_lock_retry",
]


def with_lock_retry(op: Callable[[], object]) -> None:
    """Runs ``op``, retrying for up to 30 s while the database is locked.

    Switching a fresh file to WAL takes a lock that SQLite's busy handler does not wait for,
    so processes opening the same new file at once would otherwise fail with "database is
    locked" (the Rust table retries the same way). ``op`` must be safe to repeat: a statement
    that failed to take its lock did nothing.
    """
    deadline = time.monotonic() + 30
    while True:
        try:
            op()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def begin(conn: sqlite3.Connection) -> None:
    """Starts a write transaction, waiting (busy handler, then retries) for other writers."""
    with_lock_retry(lambda: conn.execute("BEGIN IMMEDIATE"))


NOT_A_STORE = "not a memlane store"
"""How both tables begin the message of a database that holds no memlane table (the store
maps it to :class:`~memlane.errors.NotAStoreError`)."""

OUTDATED = "made by an older memlane: open it once writable to upgrade it"
"""Why a read-only open refuses a memlane file that lacks the version column or the index."""


def check_memlane(conn: sqlite3.Connection, read_only: bool) -> None:
    """Refuses a database that is not a memlane store, before anything is written to it.

    A writable open accepts an empty database (it becomes a store) and refuses one holding
    other tables and not memlane's; a read-only open refuses both, and also a memlane file
    it would have to migrate.
    """
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "memory_entries" not in tables:
        if tables:
            raise sqlite3.DatabaseError(
                f"{NOT_A_STORE}: it holds another application's tables ({len(tables)}), no memory_entries"
            )
        if read_only:
            raise sqlite3.DatabaseError(f"{NOT_A_STORE}: the database is empty")
        return
    if read_only and not (has_version(conn) and has_search(conn)):
        raise sqlite3.OperationalError(OUTDATED)


def has_version(conn: sqlite3.Connection) -> bool:
    """Whether the file's entries have the version column."""
    return any(col[1] == "version" for col in conn.execute("PRAGMA table_info(memory_entries)"))


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", (name,))
    count: int = found.fetchone()[0]
    return count > 0


def has_search(conn: sqlite3.Connection) -> bool:
    """Whether the file has the search index (made by a memlane that had search)."""
    return _has_table(conn, "memory_search")


def has_contentless_search(conn: sqlite3.Connection) -> bool:
    """Whether the search index keeps no copy of the texts: an FTS5 table with content keeps
    them in its ``_content`` shadow table, one more page written by every searchable write."""
    return not _has_table(conn, "memory_search_content")


def has_one_key_index(conn: sqlite3.Connection) -> bool:
    """Whether the file has the schema's one namespace index: no ``(namespace, seq)`` index,
    and a ``(namespace, key)`` index over every row rather than keyed rows only."""
    if _has_table(conn, "memory_entries_namespace"):
        return False
    found = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'memory_entries_namespace_key'"
    ).fetchone()
    return found is not None and "WHERE" not in found[0]


def has_vectors(conn: sqlite3.Connection) -> bool:
    """Whether the file has the vectors table (made by a memlane that had vectors)."""
    return _has_table(conn, "memory_vectors")


def _statements(script: str) -> Iterator[str]:
    """The statements of ``script``, one by one.

    ``executescript`` would commit the transaction a migration runs in; ``complete_statement``
    knows that the semicolons inside a trigger's body do not end it.
    """
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
    if statement.strip():  # the last statement needs no semicolon
        yield statement


def migrate(
    conn: sqlite3.Connection, done: Callable[[sqlite3.Connection], bool], upgrade: str
) -> None:
    """Runs ``upgrade`` unless ``done`` says the file already has it.

    Checked again inside a write transaction: processes opening one old file at once all see
    the upgrade missing, and only the first may apply it; the others wait for its commit and
    then find it done.
    """
    if done(conn):
        return
    begin(conn)
    try:
        if not done(conn):
            for statement in _statements(upgrade):
                conn.execute(statement)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
