"""PostgreSQLStore's search: the SQL of its word index, its trigram index and its ranking.

Every row keeps two generated columns, so whoever writes a row (a save, ``save_if``'s server
function, an older release still running) indexes it in the same statement:

- ``search_words``: the entry's ``metadata["search_text"]`` split the way
  :func:`~memlane.stores.protocol.search_terms` splits it (case folded, every run of
  characters that are not letters or digits replaced by one space), or NULL when the entry
  is not searchable. The server's ICU collation classifies characters when the server has
  one (Unicode letters of every script); otherwise the database's own locale does.
- ``search_vector``: ``to_tsvector('simple', search_words)``, whose lexemes are then exactly
  those words (no stemming, no stop words), with their positions (so their counts).

A GIN index on ``search_vector`` finds the rows holding a word; a GIN trigram index on
``search_words`` (``pg_trgm``, where the extension can be had) finds rows holding a word
close to a query term that no row holds (a typo, a prefix). Both are built without GIN's
pending list (``fastupdate = off``): with it, rows written since the last vacuum sit in an
unindexed list that every search reads whole, so a search after a burst of writes costs
what a scan of that burst does (38 ms instead of 13 ms over 20,000 fresh facts).

Ranking is BM25 computed in the query. ``ts_rank`` has no inverse document frequency, so
each query word's document frequency is counted from the GIN index within the searched
namespaces; the corpus size is the table's live row count as the server's statistics keep it
(never a count of the table), and document lengths are normalised by the mean length of the
matching rows (the only rows a search reads).
"""

from __future__ import annotations

import hashlib

from memlane.stores.protocol import BM25_B, BM25_K1

__all__ = [
    "MAX_SEARCH_CHARS",
    "TRIGRAM_INDEX",
    "TRIGRAM_LOCK_ID",
    "TRIGRAM_SCHEMA",
    "create_trigram",
    "search_ddl",
    "search_statement",
    "state_query",
    "trigram_index_ddl",
]

MAX_SEARCH_CHARS = 100_000
"""How much of a search text is indexed: PostgreSQL refuses a ``tsvector`` over 1 MB, and a
save must never fail because its search text is long."""

TRIGRAM_INDEX = "memory_entries_search_trgm"

# pg_trgm is one per database, whatever the schema: stores of different schemas migrating at
# once would otherwise both try to create it, and the second fails on the catalog's unique
# index instead of finding it there.
TRIGRAM_LOCK_ID = int.from_bytes(
    hashlib.blake2b(b"memlane:pg_trgm", digest_size=8).digest(), "big", signed=True
)

create_trigram = "CREATE EXTENSION IF NOT EXISTS pg_trgm"

# ICU classifies Unicode letters whatever the database's locale (a "C" database's regex
# knows ASCII letters only), but serves only UTF-8 databases.
_HAS_ICU = (
    "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu' "
    "AND collprovider = 'i') AND pg_encoding_to_char(d.encoding) = 'UTF8' "
    "FROM pg_database d WHERE d.datname = current_database()"
)


TRIGRAM_SCHEMA = (
    "SELECT quote_ident(n.nspname) FROM pg_extension e "
    "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
)
"""pg_trgm's schema, quoted (NULL without the extension): its operators are named through it,
so the store works whatever the connection's ``search_path``."""


def state_query(s: str, t: str) -> str:
    """The table's schema mark, pg_trgm's schema, whether the trigram index exists and
    whether the server has ICU: what a store reads before deciding whether to migrate."""
    return f"""
SELECT obj_description(to_regclass('{t}'), 'pg_class') AS version,
       ({TRIGRAM_SCHEMA}) AS trigram,
       to_regclass('{s}.{TRIGRAM_INDEX}') IS NOT NULL AS trigram_index,
       ({_HAS_ICU}) AS icu
"""


def search_ddl(s: str, t: str, icu: bool) -> str:
    """The search columns, their function and the word index, for a table of any age.

    Adding the generated columns to an existing table rewrites it once, which back-fills
    every row; later writes keep them current by themselves.
    """
    collate = ' COLLATE "und-x-icu"' if icu else ""
    searchable = (
        "CASE WHEN jsonb_typeof(metadata -> 'search_text') = 'string' "
        "THEN metadata ->> 'search_text' END"
    )
    return f"""
-- upper() then lower() is case folding (ß and SS, σ and ς meet), done before the split so
-- that a letter whose folding adds a mark (İ) splits as Python's casefold() does.
CREATE OR REPLACE FUNCTION {s}.search_words(p_text TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $body$
    SELECT btrim(regexp_replace(lower(upper(left(p_text, {MAX_SEARCH_CHARS}){collate})),
                                '[^[:alnum:]]+', ' ', 'g'))
$body$;
ALTER TABLE {t}
    ADD COLUMN IF NOT EXISTS search_words TEXT
        GENERATED ALWAYS AS ({s}.search_words({searchable})) STORED,
    ADD COLUMN IF NOT EXISTS search_vector TSVECTOR
        GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, {s}.search_words({searchable})))
        STORED;
CREATE INDEX IF NOT EXISTS memory_entries_search ON {t} USING gin (search_vector)
    WITH (fastupdate = off);
ALTER INDEX {s}.memory_entries_search SET (fastupdate = off);
ALTER INDEX IF EXISTS {s}.{TRIGRAM_INDEX} SET (fastupdate = off);
"""


def trigram_index_ddl(t: str, trigram: str) -> str:
    """The trigram index on ``search_words``, with pg_trgm's operator class from its schema."""
    return (
        f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON {t} "
        f"USING gin (search_words {trigram}.gin_trgm_ops) WITH (fastupdate = off)"
    )


def search_statement(s: str, t: str, columns: str, trigram: str | None) -> str:
    """The one statement of a search: ``$1`` namespaces, ``$2`` now, ``$3`` the query's
    terms, ``$4`` the least importance, ``$5`` the limit.

    Rows come out best first with two extra columns: ``tier`` (0 for a match by words, 1
    for a trigram match) and ``score`` (BM25 for tier 0, word similarity for tier 1).

    Every term is a bound value that only ever reaches ``search_words()`` and
    ``plainto_tsquery()`` (which read text, not query syntax) or pg_trgm's similarity.
    """
    live = "(m.expires_at IS NULL OR m.expires_at > $2)"
    scope = f"m.namespace = ANY($1::text[]) AND {live}"
    k1, b = BM25_K1, BM25_B
    words = f"""
WITH words AS (
    -- The query's terms as the table's words (the same function split them).
    SELECT DISTINCT w.lexeme
      FROM unnest($3::text[]) AS q(term),
           unnest(to_tsvector('simple'::regconfig, {s}.search_words(q.term))) AS w
), counted AS (
    -- Document frequency: rows of the searched namespaces holding the word, from the index.
    SELECT words.lexeme, plainto_tsquery('simple'::regconfig, words.lexeme) AS query,
           (SELECT count(*) FROM {t} m
             WHERE m.search_vector @@ plainto_tsquery('simple'::regconfig, words.lexeme)
               AND {scope}) AS df
      FROM words
), weights AS (
    SELECT c.lexeme, c.query,
           ln(1.0 + (n.docs - c.df + 0.5) / (c.df + 0.5)) AS idf
      FROM counted c,
           (SELECT greatest(pg_stat_get_live_tuples('{t}'::regclass),
                            (SELECT reltuples FROM pg_class WHERE oid = '{t}'::regclass),
                            (SELECT max(df) FROM counted), 1)::float8 AS docs) n
     WHERE c.df > 0
), matched AS (
    SELECT m.seq, {columns}, d.len, d.idfs, d.tfs
      FROM {t} m
      CROSS JOIN LATERAL (
          SELECT sum(cardinality(u.positions))::float8 AS len,
                 array_agg(w.idf) FILTER (WHERE w.idf IS NOT NULL) AS idfs,
                 array_agg(cardinality(u.positions)::float8)
                     FILTER (WHERE w.idf IS NOT NULL) AS tfs
            FROM unnest(m.search_vector) AS u
            LEFT JOIN weights w ON w.lexeme = u.lexeme
      ) d
     WHERE m.search_vector @@ ANY (ARRAY(SELECT query FROM weights))
       AND {scope} AND m.importance >= $4
), ranked AS (
    SELECT 0 AS tier, z.*,
           (SELECT sum(x.idf * x.tf * {k1 + 1.0}
                       / (x.tf + {k1} * (1.0 - {b} + {b} * z.len / z.avg_len)))
              FROM unnest(z.idfs, z.tfs) AS x(idf, tf)) AS score
      FROM (SELECT matched.*, avg(len) OVER () AS avg_len FROM matched) z
     ORDER BY score DESC, importance DESC, seq
     LIMIT $5
)"""
    out = "entry_id, scope, key, content, metadata, created_at, expires_at, importance, version"
    if trigram is None:
        return f"{words}\nSELECT {out}, tier, score FROM ranked ORDER BY score DESC, importance DESC, seq"
    # Only query terms that are no word of the searched entries (misspelt, or the start of a
    # word) are matched by trigrams: a term the entries do hold means that word, so every
    # entry found still shares a word with the query or stands in for a term nobody has.
    return f"""{words}, unknown AS (
    SELECT array_agg(lexeme) AS words FROM counted WHERE df = 0
), trigram_hits AS (
    SELECT 1 AS tier, m.seq, {columns},
           (SELECT max({trigram}.word_similarity(u.word, m.search_words))
              FROM unnest((SELECT words FROM unknown)) AS u(word)) AS score
      FROM {t} m
     WHERE (SELECT count(*) FROM ranked) < $5
       AND (SELECT words FROM unknown) IS NOT NULL
       AND m.search_words OPERATOR({trigram}.%>) ANY ((SELECT words FROM unknown)::text[])
       AND {scope} AND m.importance >= $4
       AND m.entry_id NOT IN (SELECT entry_id FROM ranked)
     ORDER BY score DESC, importance DESC, seq
     LIMIT $5
)
SELECT {out}, tier, score FROM (
    SELECT tier, seq, {out}, score FROM ranked
    UNION ALL
    SELECT tier, seq, {out}, score FROM trigram_hits
) found
ORDER BY tier, score DESC, importance DESC, seq
LIMIT $5"""
