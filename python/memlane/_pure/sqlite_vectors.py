"""Vectors in the SQLite file, for the twin's table: the schema, its SQL, and the scoring.

``memory_vectors`` holds at most one vector per entry, under the entry's ``seq``, with its
model, dimensions, the digest of the search text it was made from, and its floats (float32
little-endian). Triggers in the file drop a vector when its entry is deleted (a delete, a
clear, an expiry cleanup, a key taken over, a move to another namespace) or when the entry's
search text changes, inside the writing statement's own transaction: every writer, of either
implementation or of a memlane from before vectors, keeps the table right.

A vector is written only while its entry still has the text the caller checked the digest
of: the insert names that text, so a text changed by another process since is never given a
vector made from the old one. The Rust table (``rust/src/store/sqlite.rs``) runs the same SQL
and a test holds :data:`VECTOR_SCHEMA` equal to its own.

A search does not read the table's blobs: it reads the process's mirror of them
(:mod:`memlane._pure.sqlite_mirror`), brought up to date inside the search's read transaction
from ``memory_vector_changes``, a log the file's own triggers append each changed entry's
``seq`` to. A file whose vectors predate the log is scanned as before.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from array import array
from typing import Any

from memlane._pure.entry_builder import Row
from memlane._pure.sqlite_mirror import mirror_for
from memlane._pure.vector_index import dot, numpy_module

__all__ = [
    "READ_ONLY_VECTORS",
    "VECTOR_SCHEMA",
    "missing_vectors",
    "save_vectors",
    "search_texts",
    "vector_search",
]

VECTOR_SCHEMA = """
CREATE TABLE memory_vectors (
    seq INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    dims INTEGER NOT NULL,
    digest TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX memory_vectors_model ON memory_vectors (model, dims);
CREATE TRIGGER memory_vectors_delete AFTER DELETE ON memory_entries
BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
END;
CREATE TRIGGER memory_vectors_update AFTER UPDATE OF metadata ON memory_entries
WHEN (CASE WHEN json_valid(old.metadata) THEN json_extract(old.metadata, '$.search_text') END)
    IS NOT (CASE WHEN json_valid(new.metadata) THEN json_extract(new.metadata, '$.search_text') END)
BEGIN
    DELETE FROM memory_vectors WHERE seq = old.seq;
END;
CREATE TABLE memory_vector_changes (
    gen INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL
);
CREATE TRIGGER memory_vector_changes_insert AFTER INSERT ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (new.seq);
END;
CREATE TRIGGER memory_vector_changes_update AFTER UPDATE ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) SELECT old.seq UNION SELECT new.seq;
END;
CREATE TRIGGER memory_vector_changes_delete AFTER DELETE ON memory_vectors
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (old.seq);
END;
CREATE TRIGGER memory_vector_changes_entry AFTER UPDATE OF namespace, importance, expires_at
ON memory_entries
WHEN (old.namespace IS NOT new.namespace OR old.importance IS NOT new.importance
        OR old.expires_at IS NOT new.expires_at)
    AND EXISTS (SELECT 1 FROM memory_vectors WHERE seq = new.seq)
BEGIN
    INSERT INTO memory_vector_changes (seq) VALUES (new.seq);
END;
CREATE TRIGGER memory_vector_changes_pruned AFTER INSERT ON memory_vector_changes
WHEN new.gen % 1024 = 0
BEGIN
    DELETE FROM memory_vector_changes WHERE gen <= new.gen - 65536;
END;
"""
"""The vectors table, the triggers that keep it in step, and the change log that in-process
mirrors follow, created once per file."""

READ_ONLY_VECTORS = """CREATE TEMP TABLE memory_vectors (
    seq INTEGER PRIMARY KEY, model TEXT, dims INTEGER, digest TEXT, vector BLOB
)"""
"""What a read-only open of a file from before vectors reads instead: an empty table in the
connection's own temporary schema, so the file stays untouched and has no vectors."""

SEARCH_TEXTS = """
SELECT e.entry_id, json_extract(e.metadata, '$.search_text') FROM memory_entries AS e
WHERE e.namespace = ? AND e.entry_id IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
"""
"""The search texts of unexpired entries: namespace, entry ids (JSON array), now."""

ATTACH = """
INSERT OR REPLACE INTO memory_vectors (seq, model, dims, digest, vector)
SELECT e.seq, ?, ?, ?, ? FROM memory_entries AS e
WHERE e.namespace = ? AND e.entry_id = ? AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
    AND json_extract(e.metadata, '$.search_text') = ?
"""
"""Attaches a vector: model, dims, digest, blob, namespace, entry id, now, the text checked."""

CANDIDATES = """
SELECT e.seq, e.importance, v.vector FROM memory_vectors AS v
JOIN memory_entries AS e ON e.seq = v.seq
WHERE v.model = ? AND v.dims = ? AND e.namespace IN (SELECT value FROM json_each(?))
    AND (e.expires_at IS NULL OR e.expires_at > ?) AND e.importance >= ?
"""
"""The vectors a search scores: model, dims, namespaces (JSON array), now, min importance."""

BY_SEQ = """
SELECT entry_id, scope, key, content, metadata, created_at, expires_at, importance, version
FROM memory_entries WHERE seq = ?
"""

HAS_CHANGES = """
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'memory_vector_changes'
"""
"""1 when the file has the change log a mirror follows (a file given vectors before the log
existed has not: it is scanned)."""

MIRROR_ID = """
CREATE TEMP TABLE IF NOT EXISTS memory_vector_mirror AS SELECT lower(hex(randomblob(16))) AS id
"""
"""Names the connection's mirror: a random id in the connection's own temporary schema (never
the file), so a new connection, even to a file made again at the same path or to another
in-memory database, never takes an old connection's mirror."""

MIRROR_ID_READ = """
SELECT id FROM temp.memory_vector_mirror
"""

CHANGES_STATE = """
SELECT (SELECT min(gen) FROM memory_vector_changes), (SELECT max(gen) FROM memory_vector_changes)
"""
"""The first and last positions of the file's change log."""

MIRROR_LOAD = """
SELECT v.seq, v.vector, e.namespace, e.importance, e.expires_at FROM memory_vectors AS v
JOIN memory_entries AS e ON e.seq = v.seq
WHERE v.model = ? AND v.dims = ?
"""
"""Every vector of a model and dimensions, with its entry's filters: model, dims."""

MIRROR_CHANGES = """
SELECT c.seq, v.vector, e.namespace, e.importance, e.expires_at
FROM (SELECT DISTINCT seq FROM memory_vector_changes WHERE gen > ?) AS c
LEFT JOIN memory_vectors AS v ON v.seq = c.seq AND v.model = ? AND v.dims = ?
LEFT JOIN memory_entries AS e ON e.seq = v.seq
"""
"""Each entry changed after a log position, with its vector of a model and dimensions if it
has one now: position, model, dims."""

MISSING = """
SELECT e.entry_id, e.scope, e.key, e.content, e.metadata, e.created_at, e.expires_at,
    e.importance, e.version
FROM memory_entries AS e
WHERE e.namespace IN (SELECT value FROM json_each(?)) AND (e.expires_at IS NULL OR e.expires_at > ?)
    AND json_type(CASE WHEN json_valid(e.metadata) THEN e.metadata END, '$.search_text') = 'text'
    AND NOT EXISTS (SELECT 1 FROM memory_vectors AS v WHERE v.seq = e.seq AND v.model = ?)
ORDER BY e.seq LIMIT ?
"""
"""Entries to embed, oldest first: namespaces (JSON array), now, model, limit."""


def search_texts(
    conn: sqlite3.Connection, namespace: str, entry_ids: list[str], now: float
) -> list[tuple[str, str]]:
    """(entry id, search text) of the unexpired entries among ``entry_ids`` that have one."""
    ids = json.dumps(entry_ids, ensure_ascii=False)
    return list(conn.execute(SEARCH_TEXTS, (namespace, ids, now)).fetchall())


def save_vectors(
    conn: sqlite3.Connection,
    namespace: str,
    model: str,
    dims: int,
    items: list[tuple[str, str, str, bytes]],
    now: float,
) -> int:
    """Attaches each (entry id, checked text, digest, blob) whose entry still has that text,
    in one transaction the caller has begun; how many were attached."""
    attached = 0
    for entry_id, text, digest, blob in items:
        cur = conn.execute(ATTACH, (model, dims, digest, blob, namespace, entry_id, now, text))
        attached += cur.rowcount
    return attached


def _scores(blobs: list[bytes], query: list[float]) -> list[float]:
    """The dot products of ``query`` with each float32 blob, as the vector index scores."""
    np = numpy_module()
    if np is None:
        q = array("f", query)
        return [dot(array("f", blob), q) for blob in blobs]
    if not blobs:
        return []
    rows = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), len(query))
    return [float(s) for s in rows @ np.asarray(query, dtype=np.float32)]


def _scan(
    conn: sqlite3.Connection,
    names: str,
    model: str,
    query: list[float],
    limit: int,
    min_importance: float,
    now: float,
) -> list[tuple[int, float]]:
    """(seq, score) of the best ``limit`` by reading every candidate blob: the search of a
    file without the change log."""
    # A blob of another length was not written by memlane: it is not a vector.
    found: list[Any] = [
        hit
        for hit in conn.execute(CANDIDATES, (model, len(query), names, now, min_importance))
        if len(hit[2]) == 4 * len(query)
    ]
    scores = _scores([blob for _, _, blob in found], query)
    best = heapq.nsmallest(
        limit,
        zip(scores, found, strict=True),
        key=lambda hit: (-hit[0], -hit[1][1], hit[1][0]),
    )
    return [(seq, score) for score, (seq, _, _) in best]


def _mirrored(
    conn: sqlite3.Connection,
    namespaces: list[str],
    model: str,
    query: list[float],
    limit: int,
    min_importance: float,
    now: float,
) -> list[tuple[int, float]]:
    """(seq, score) of the best ``limit`` from the process's mirror, first brought to the
    snapshot of the caller's read transaction (see :mod:`memlane._pure.sqlite_mirror`)."""
    first, last = conn.execute(CHANGES_STATE).fetchone()
    last = last or 0
    mirror = mirror_for(conn.execute(MIRROR_ID_READ).fetchone()[0], model, len(query))
    with mirror.lock:
        gen = mirror.gen
        if gen is None or last < gen or (first is not None and first > gen + 1):
            mirror.load(conn.execute(MIRROR_LOAD, (model, len(query))).fetchall(), last)
        elif last > gen:
            mirror.apply(conn.execute(MIRROR_CHANGES, (gen, model, len(query))).fetchall(), last)
        return mirror.search(namespaces, query, limit, min_importance, now)


def vector_search(
    conn: sqlite3.Connection,
    namespaces: list[str],
    model: str,
    query: list[float],
    limit: int,
    min_importance: float,
    now: float,
) -> list[tuple[Row, float]]:
    """The rows nearest ``query`` among those of ``namespaces`` unexpired at ``now`` with
    ``importance >= min_importance`` and a vector of ``model`` and ``len(query)`` dims: best
    first, then importance, then the oldest; at most ``limit``. One read transaction: the
    mirror is brought to its snapshot, and the best rows are read from the same one."""
    conn.execute(MIRROR_ID)
    conn.execute("BEGIN")
    try:
        if conn.execute(HAS_CHANGES).fetchone()[0] == 1:
            best = _mirrored(conn, namespaces, model, query, limit, min_importance, now)
        else:
            names = json.dumps(namespaces, ensure_ascii=False)
            best = _scan(conn, names, model, query, limit, min_importance, now)
        hits = []
        for seq, score in best:
            row: Row | None = conn.execute(BY_SEQ, (seq,)).fetchone()
            if row is not None:
                hits.append((row, score))
    finally:
        conn.execute("COMMIT")
    return hits


def missing_vectors(
    conn: sqlite3.Connection, namespaces: list[str], model: str, limit: int, now: float
) -> list[Row]:
    """Unexpired rows of ``namespaces`` with a search text and no vector of ``model``, in
    insertion order, at most ``limit``."""
    names = json.dumps(namespaces, ensure_ascii=False)
    return list(conn.execute(MISSING, (names, now, model, limit)).fetchall())
