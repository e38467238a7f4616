"""PostgreSQLStore's vectors: their tables, the statements that keep them in step, and search.

Two tables beside ``memory_entries``:

- ``vector_models``: one row per (model, dimensions) a vector was saved with; its ``id`` is
  the integer the vectors carry, so the model's name (a value) never becomes SQL: index
  names and partial-index predicates hold only that integer.
- ``entry_vectors``: at most one vector per entry (its ``entry_id`` is the primary key and a
  foreign key to the entry, ``ON DELETE CASCADE``), with its model id and the digest of the
  text it was made from. The ``embedding`` column is pgvector's ``vector`` (no fixed
  dimensions: models differ) where the server has the extension, else ``bytea`` (float32
  little-endian, as :func:`~memlane.stores.vectors.encode_vector` writes it).

The vector goes with its entry: a delete, a clear or a clean-up cascades to it, and a trigger
drops it when a save changes the entry's ``search_text`` or moves it to another namespace;
a search joins the live entries, so an expired one is never returned before it is cleaned
up. A save of vectors locks the entries it attaches to (``FOR SHARE``) and attaches only
where the text is still the one the caller read and digested, so a writer that embedded an
older text never outlives the newer one.

With pgvector, the similarity is computed by the server. A small table is searched exactly
(every candidate scored, equal scores ordered by importance and insertion). Once the table
holds :data:`EXACT_BELOW` vectors, each (model, dimensions) gets an HNSW index (cosine), an
expression index ``(embedding::vector(n))`` limited to that model's rows, and searches read
it. HNSW is approximate and filters after it finds neighbours: where it returns fewer rows
than asked (few vectors in the searched namespaces, or more asked than it explores), an
exact scan of the searched namespaces answers instead. Without pgvector the store reads the candidates'
vectors and :func:`~memlane.stores._network_vectors.best_vectors` ranks them.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from memlane.stores._network_vectors import best_vectors
from memlane.stores.vectors import EntryVector, encode_vector, text_digest

__all__ = [
    "EF_SEARCH_MAX",
    "EXACT_BELOW",
    "HNSW_MAX_DIMS",
    "VECTOR",
    "PgVectors",
    "vector_literal",
]

VECTOR = "vector"
"""pgvector's extension name."""

HNSW_MAX_DIMS = 2000
"""The most dimensions pgvector's HNSW indexes a ``vector`` with; larger ones are scanned."""

EF_SEARCH_MAX = 1000
"""The largest ``hnsw.ef_search``: a search asking for more rows is answered exactly."""

EXACT_BELOW = 2000
"""Below this many stored vectors (the server's statistics' count), a search scores every
candidate: a few milliseconds at most, and exact."""

_EF_SEARCH_MIN = 64

ROWS_TTL = 5.0
"""Seconds a store trusts its last reading of the table's size."""

_SEARCH_TEXT = (
    "CASE WHEN jsonb_typeof(m.metadata -> 'search_text') = 'string' "
    "THEN m.metadata ->> 'search_text' END"
)
_LIVE = "(m.expires_at IS NULL OR m.expires_at > $2)"


def vector_literal(vector: list[float]) -> str:
    """pgvector's text form of ``vector``: ``[x,y,...]`` (``repr`` keeps every digit)."""
    return "[" + ",".join(map(repr, vector)) + "]"


class PgVectors:
    """The vectors' SQL for one schema (``s``: quoted schema, ``t``: the entries table)."""

    def __init__(self, s: str, t: str) -> None:
        self.s = s
        self.t = t
        self.table = f"{s}.entry_vectors"
        self.models = f"{s}.vector_models"
        self.columns = (
            "m.entry_id, m.scope, m.key, m.content::text, m.metadata::text, m.created_at, "
            "m.expires_at, m.importance, m.version"
        )
        self.state = f"""
SELECT (SELECT quote_ident(n.nspname)
          FROM pg_attribute a
          JOIN pg_type ty ON ty.oid = a.atttypid
          JOIN pg_namespace n ON n.oid = ty.typnamespace
         WHERE a.attrelid = to_regclass('{self.table}') AND a.attname = 'embedding'
           AND ty.typname = '{VECTOR}') AS vector_schema,
       to_regclass('{self.table}') IS NOT NULL AS has_table,
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = '{VECTOR}') AS available
"""
        self.rows_estimate = (
            f"SELECT greatest(pg_stat_get_live_tuples('{self.table}'::regclass), "
            f"(SELECT reltuples FROM pg_class WHERE oid = '{self.table}'::regclass))"
        )
        self.model_id = f"SELECT id FROM {self.models} WHERE model = $1 AND dims = $2"
        self.add_model = (
            f"INSERT INTO {self.models} (model, dims) VALUES ($1, $2) "
            "ON CONFLICT (model, dims) DO NOTHING"
        )
        self.texts = f"""
SELECT m.entry_id, {_SEARCH_TEXT} AS text, md5({_SEARCH_TEXT}) AS text_md5
  FROM {t} m
 WHERE m.namespace = $1 AND {_LIVE} AND m.entry_id = ANY($3::text[])
"""
        self.missing = f"""
SELECT {self.columns}
  FROM {t} m
 WHERE m.namespace = ANY($1::text[]) AND {_LIVE}
   AND jsonb_typeof(m.metadata -> 'search_text') = 'string'
   AND NOT EXISTS (SELECT 1 FROM {self.table} v JOIN {self.models} vm ON vm.id = v.model_id
                    WHERE v.entry_id = m.entry_id AND vm.model = $3)
 ORDER BY m.seq
 LIMIT $4
"""
        # A read-only store made before vectors: every searchable entry lacks one.
        self.missing_all = f"""
SELECT {self.columns}
  FROM {t} m
 WHERE m.namespace = ANY($1::text[]) AND {_LIVE}
   AND jsonb_typeof(m.metadata -> 'search_text') = 'string' AND $3::text IS NOT NULL
 ORDER BY m.seq
 LIMIT $4
"""
        # Without pgvector: the candidates' vectors first (small rows, unsorted: sorting
        # megabytes of vectors by seq spilled to disk), then only the best entries whole,
        # checked against the vector they were ranked by.
        self.candidates = f"""
SELECT v.entry_id, v.digest, v.embedding, m.importance, m.seq
  FROM {self.table} v JOIN {t} m ON m.entry_id = v.entry_id
 WHERE v.model_id = $3 AND m.namespace = ANY($1::text[]) AND {_LIVE} AND m.importance >= $4
"""
        self.chosen = f"""
SELECT {self.columns}
  FROM unnest($1::text[], $3::text[]) AS u(entry_id, digest)
  JOIN {t} m ON m.entry_id = u.entry_id
  JOIN {self.table} v ON v.entry_id = u.entry_id AND v.digest = u.digest
 WHERE v.model_id = $4 AND {_LIVE} AND m.importance >= $5
"""

    def ddl(self, vector_schema: str | None) -> str:
        """The tables, index and trigger; the embedding a ``vector`` when ``vector_schema``
        (pgvector's schema) is given. A ``bytea`` table of a server that has since gained
        pgvector is converted, its vectors dropped: ``missing_vectors`` then lists their
        entries, and the writer embeds them again."""
        s, t = self.s, self.t
        kind = "BYTEA" if vector_schema is None else f"{vector_schema}.{VECTOR}"
        convert = (
            ""
            if vector_schema is None
            else f"""
DO $convert$ BEGIN
    IF (SELECT atttypid FROM pg_attribute
         WHERE attrelid = '{self.table}'::regclass AND attname = 'embedding')
       = 'bytea'::regtype THEN
        DELETE FROM {self.table};
        ALTER TABLE {self.table} ALTER COLUMN embedding TYPE {kind} USING NULL;
    END IF;
END $convert$;
"""
        )
        return f"""
CREATE TABLE IF NOT EXISTS {self.models} (
    id SERIAL PRIMARY KEY,
    model TEXT NOT NULL,
    dims INT NOT NULL,
    UNIQUE (model, dims)
);
CREATE TABLE IF NOT EXISTS {self.table} (
    entry_id TEXT PRIMARY KEY REFERENCES {t} (entry_id) ON DELETE CASCADE,
    model_id INT NOT NULL REFERENCES {self.models} (id),
    digest TEXT NOT NULL,
    embedding {kind} NOT NULL
);
CREATE INDEX IF NOT EXISTS entry_vectors_model ON {self.table} (model_id);
{convert}
-- A save that changes the text (or the namespace) makes the vector describe another entry.
CREATE OR REPLACE FUNCTION {s}.drop_stale_vector() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    DELETE FROM {self.table} WHERE entry_id = OLD.entry_id;
    RETURN NULL;
END
$body$;
DROP TRIGGER IF EXISTS memory_entries_stale_vector ON {t};
CREATE TRIGGER memory_entries_stale_vector AFTER UPDATE ON {t} FOR EACH ROW
    WHEN (OLD.metadata -> 'search_text' IS DISTINCT FROM NEW.metadata -> 'search_text'
          OR OLD.namespace IS DISTINCT FROM NEW.namespace)
    EXECUTE FUNCTION {s}.drop_stale_vector();
"""

    def save(self, vector_schema: str | None) -> str:
        """Attaches vectors: ``$1`` namespace, ``$2`` now, ``$3`` entry ids, ``$4`` the md5 of
        each entry's text as read, ``$5`` model id, ``$6`` digests, ``$7`` the vectors (text
        for pgvector, else bytes). Returns the ids attached.

        The entries are locked in id order (``FOR SHARE``: a concurrent save of one of them
        waits for this commit, whose vector its trigger then drops), and one whose text has
        changed since it was read is left out.
        """
        if vector_schema is None:
            embeddings, cast = "$7::bytea[]", ""
        else:
            embeddings, cast = "$7::text[]", f"::{vector_schema}.{VECTOR}"
        return f"""
WITH locked AS (
    SELECT m.entry_id
      FROM {self.t} m
      JOIN unnest($3::text[], $4::text[]) AS u(entry_id, text_md5) ON u.entry_id = m.entry_id
     WHERE m.namespace = $1 AND {_LIVE} AND md5({_SEARCH_TEXT}) = u.text_md5
     ORDER BY m.entry_id
       FOR SHARE OF m
)
INSERT INTO {self.table} AS v (entry_id, model_id, digest, embedding)
SELECT u.entry_id, $5, u.digest, u.embedding{cast}
  FROM unnest($3::text[], $6::text[], {embeddings}) AS u(entry_id, digest, embedding)
  JOIN locked ON locked.entry_id = u.entry_id
ON CONFLICT (entry_id) DO UPDATE
   SET model_id = EXCLUDED.model_id, digest = EXCLUDED.digest, embedding = EXCLUDED.embedding
RETURNING v.entry_id
"""

    def hnsw_index(self, vector_schema: str, model_id: int, dims: int) -> str:
        """The HNSW (cosine) index of one model's vectors; ``model_id`` and ``dims`` are
        integers the store read from ``vector_models``, never a caller's text."""
        return (
            f"CREATE INDEX IF NOT EXISTS entry_vectors_hnsw_{int(model_id)} ON {self.table} "
            f"USING hnsw ((embedding::{vector_schema}.{VECTOR}({int(dims)})) "
            f"{vector_schema}.vector_cosine_ops) WHERE model_id = {int(model_id)}"
        )

    def hnsw_index_exists(self, model_id: int) -> str:
        """Whether the HNSW index of a model id exists."""
        return f"SELECT to_regclass('{self.s}.entry_vectors_hnsw_{int(model_id)}') IS NOT NULL"

    def search(self, vector_schema: str, model_id: int, dims: int, *, exact: bool) -> str:
        """Search by pgvector: ``$1`` namespaces, ``$2`` now, ``$3`` the query (``real[]``),
        ``$4`` the least importance, ``$5`` the limit. Rows carry a last ``score`` column.

        ``exact`` orders by the similarity, which no index serves, so the rows of the
        searched namespaces are all scored; otherwise the order is the HNSW index's distance
        (then importance and insertion among equal distances).
        """
        n, k = int(dims), int(model_id)
        # The index's expression, cast to the model's dimensions; an exact scan needs no
        # cast (every row of the model has them) and skips one per row.
        typed = f"{vector_schema}.{VECTOR}" + ("" if exact else f"({n})")
        embedding = "v.embedding" if exact else f"v.embedding::{typed}"
        distance = f"({embedding} OPERATOR({vector_schema}.<=>) $3::real[]::{typed})"
        # An index serves one ORDER BY key, the distance alone: the caller orders equal
        # distances among the rows found.
        order = "score DESC, m.importance DESC, m.seq" if exact else distance
        return f"""
SELECT {self.columns}, m.seq, 1.0 - {distance} AS score
  FROM {self.table} v JOIN {self.t} m ON m.entry_id = v.entry_id
 WHERE v.model_id = {k} AND m.namespace = ANY($1::text[]) AND {_LIVE} AND m.importance >= $4
 ORDER BY {order}
 LIMIT $5
"""

    @staticmethod
    def ef_search(limit: int) -> str:
        """How many neighbours HNSW explores for ``limit`` rows (``SET LOCAL`` value)."""
        return str(min(EF_SEARCH_MAX, max(_EF_SEARCH_MIN, 2 * limit)))


class PgVectorOps:
    """The vector operations of one PostgreSQLStore, and what it learned of the server.

    Attributes:
        vector_schema: pgvector's (quoted) schema when the embedding column is a ``vector``;
            ``None`` when it is ``bytea`` and memlane scores the vectors.
        has_table: Whether the vectors' tables exist (a read-only store opened on a schema
            made before vectors has none: it finds no vector, and misses every one).
        problem: Why the server does not score vectors, for the store's one warning.
    """

    def __init__(self, sql: PgVectors, asyncpg: Any, lock_id: int) -> None:
        self.sql = sql
        self.vector_schema: str | None = None
        self.has_table = True
        self.problem = f"has no pgvector (the {VECTOR!r} extension)"
        self._asyncpg = asyncpg
        self._lock_id = lock_id
        self._model_ids: dict[tuple[str, int], int] = {}
        self._indexed: set[int] = set()
        self._rows_seen = 0.0
        self._rows_read_at = -ROWS_TTL

    async def _model_id(self, pool: Any, model: str, dims: int, *, create: bool) -> int | None:
        """The id of (model, dims), added when ``create`` (ids are never reused: cached)."""
        found = self._model_ids.get((model, dims))
        if found is None:
            found = await pool.fetchval(self.sql.model_id, model, dims)
            if found is None and create:
                # DO NOTHING waits for a concurrent insert of the same pair to commit, so
                # the second read finds one row either way.
                await pool.execute(self.sql.add_model, model, dims)
                found = await pool.fetchval(self.sql.model_id, model, dims)
            if found is None:
                return None
            self._model_ids[(model, dims)] = found
        return int(found)

    async def _ensure_index(self, pool: Any, model_id: int, dims: int) -> None:
        """Creates the model's HNSW index once the table is large enough to search by it.

        Not before: below :data:`EXACT_BELOW` rows a search scans exactly anyway, and an HNSW
        insert costs several times a plain one. Built over the rows already there (faster
        than inserting them one by one), one migration at a time.
        """
        if self.vector_schema is None or dims > HNSW_MAX_DIMS or model_id in self._indexed:
            return
        if await self._rows(pool, fresh=True) < EXACT_BELOW:
            return
        async with pool.acquire() as con, con.transaction():
            await con.execute("SELECT pg_advisory_xact_lock($1)", self._lock_id)
            await con.execute(self.sql.hnsw_index(self.vector_schema, model_id, dims))
        self._indexed.add(model_id)

    async def _worth_index(self, pool: Any, model_id: int, dims: int) -> bool:
        """Whether the model's HNSW index exists and the table is large enough that an
        approximate search beats an exact one (which also orders equal scores exactly)."""
        if dims > HNSW_MAX_DIMS:
            return False
        if model_id not in self._indexed:
            if not await pool.fetchval(self.sql.hnsw_index_exists(model_id)):
                return False
            self._indexed.add(model_id)
        return await self._rows(pool) >= EXACT_BELOW

    async def _rows(self, pool: Any, *, fresh: bool = False) -> float:
        """The server's estimate of the vectors stored, read again after
        :data:`ROWS_TTL` seconds (or when ``fresh``): it only decides exact or HNSW, and a
        search need not pay a round trip for it."""
        now = time.monotonic()
        if fresh or now - self._rows_read_at > ROWS_TTL:
            self._rows_seen = float(await pool.fetchval(self.sql.rows_estimate))
            self._rows_read_at = now
        return self._rows_seen

    async def save(
        self, pool: Any, namespace: str, model: str, vectors: list[EntryVector], now: datetime
    ) -> int:
        """Attaches ``vectors`` (checked, unit, one dimension count); how many attached."""
        latest = {v.entry_id: v for v in vectors}  # one row per entry: the last vector wins
        texts = await pool.fetch(self.sql.texts, namespace, now, list(latest))
        kept = [
            (latest[r["entry_id"]], r["text_md5"])
            for r in texts
            if r["text"] is not None and text_digest(r["text"]) == latest[r["entry_id"]].digest
        ]
        if not kept:
            return 0
        dims = len(kept[0][0].vector)
        model_id = await self._model_id(pool, model, dims, create=True)
        assert model_id is not None  # created above
        encode = encode_vector if self.vector_schema is None else vector_literal
        args = (
            namespace,
            now,
            [v.entry_id for v, _ in kept],
            [md5 for _, md5 in kept],
            model_id,
            [v.digest for v, _ in kept],
            [encode(list(v.vector)) for v, _ in kept],
        )
        statement = self.sql.save(self.vector_schema)
        for attempt in range(3):
            try:
                attached = len(await pool.fetch(statement, *args))
                break
            except self._asyncpg.exceptions.DeadlockDetectedError:
                # A batch save locking the same entries in another order: one of the two
                # is cancelled, and an upsert is safe to run again.
                if attempt == 2:
                    raise
        await self._ensure_index(pool, model_id, dims)
        return attached

    async def search(
        self,
        pool: Any,
        namespaces: list[str],
        query: list[float],
        model: str,
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[tuple[Any, float]]:
        """The best rows (entry columns) and their scores, best first."""
        dims = len(query)
        if not self.has_table:
            return []
        model_id = await self._model_id(pool, model, dims, create=False)
        if model_id is None:
            return []
        if self.vector_schema is None:
            return await self._scored_here(pool, namespaces, query, model_id, limit, minimum, now)
        args = (namespaces, now, query, minimum, limit)
        if limit <= EF_SEARCH_MAX and await self._worth_index(pool, model_id, dims):
            statement = self.sql.search(self.vector_schema, model_id, dims, exact=False)
            async with pool.acquire() as con, con.transaction():
                await con.execute(
                    "SELECT set_config('hnsw.ef_search', $1, true)", self.sql.ef_search(limit)
                )
                rows = await con.fetch(statement, *args)
            if len(rows) >= limit:
                # The index orders by distance alone; equal scores go by importance, then
                # insertion, as everywhere.
                rows = sorted(rows, key=lambda r: (-r["score"], -r["importance"], r["seq"]))
                return [(tuple(r)[:9], r["score"]) for r in rows]
        statement = self.sql.search(self.vector_schema, model_id, dims, exact=True)
        return [(tuple(r)[:9], r["score"]) for r in await pool.fetch(statement, *args)]

    async def _scored_here(
        self,
        pool: Any,
        namespaces: list[str],
        query: list[float],
        model_id: int,
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[tuple[Any, float]]:
        candidates = await pool.fetch(self.sql.candidates, namespaces, now, model_id, minimum)
        best = best_vectors(
            query, [(c["embedding"], c["importance"], c["seq"]) for c in candidates], limit
        )
        ids = [candidates[i]["entry_id"] for i, _ in best]
        digests = [candidates[i]["digest"] for i, _ in best]
        rows = await pool.fetch(self.sql.chosen, ids, now, digests, model_id, minimum)
        # An entry changed or deleted since its vector was read is left out.
        found = {r["entry_id"]: tuple(r) for r in rows}
        return [(found[ids[n]], score) for n, (_, score) in enumerate(best) if ids[n] in found]

    async def missing(
        self, pool: Any, namespaces: list[str], model: str, limit: int, now: datetime
    ) -> list[Any]:
        """Rows of the entries with a search text and no vector of ``model``, oldest first."""
        statement = self.sql.missing if self.has_table else self.sql.missing_all
        return [tuple(r) for r in await pool.fetch(statement, namespaces, now, model, limit)]
