"""PostgreSQLStore's search: the SQL of its word index, its trigram index and its ranking.

Every row keeps two search columns, which a trigger on the table fills, so whoever writes a
row (a save, ``save_if``'s server function, an older release still running) indexes it in the
same statement:

- ``search_words``: the entry's ``metadata["search_text"]`` split the way
  :func:`~memlane.stores.protocol.search_terms` splits it (case folded, every run of
  characters that are not letters or digits replaced by one space), or NULL when the entry
  is not searchable. The server's ICU collation classifies characters when the server has
  one (Unicode letters of every script); otherwise the database's own locale does.
- ``search_vector``: ``to_tsvector('simple', search_words)``, whose lexemes are then exactly
  those words (no stemming, no stop words), with their positions (so their counts).

The trigger runs only for a row that has a search text or had one (its ``WHEN`` clause), so
a write with nothing to index (a conversation's turn, a working-memory value) pays nothing
for search. Schema 6 computed the columns as ``GENERATED ... STORED`` expressions instead,
which the server prepares again for every insert, search text or not: ~50 us of a turn's
~250 us insert. Its tables keep their values when the expressions are dropped.

A GIN index on ``search_vector`` finds the rows holding a word; a GIN trigram index on
``search_words`` (``pg_trgm``, where the extension can be had) finds rows holding a word
close to a query term that no row holds (a typo, a prefix). Both hold searchable rows only
(the statements that read them say ``IS NOT NULL``): a row without a search text adds
nothing to either. Where ``btree_gin`` can be had,
the word index leads with ``namespace``: a search is then one index scan that steps through
the namespace's entries only where a query word is, so it reads rows bounded by the
matches. Without it the planner ANDs the word index with the ``(namespace, seq)`` index,
which reads every entry of the namespace (100,000 of them for 3 matches: a search over
100,000 freshly written facts took 24 ms that way, 0.8 ms this one). The trigram pass then reads the rows close to its words from the trigram index
whatever their namespace, and keeps the searched ones: such words are held by no searched
entry, so their neighbours are few, and a namespace-led trigram index costs more to keep
and drives the planner to a scan of small tables. Both indexes are built without GIN's
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
    "BTREE_GIN",
    "EXTENSION_LOCK_ID",
    "MAX_SEARCH_CHARS",
    "TRIGRAM",
    "extension_schema",
    "search_ddl",
    "search_statement",
    "state_query",
    "trigram_index_ddl",
    "word_index_ddl",
]

MAX_SEARCH_CHARS = 100_000
"""How much of a search text is indexed: PostgreSQL refuses a ``tsvector`` over 1 MB, and a
save must never fail because its search text is long."""

TRIGRAM = "pg_trgm"
BTREE_GIN = "btree_gin"

WORD_INDEX = "memory_entries_search"
NAMESPACE_WORD_INDEX = "memory_entries_namespace_search"
TRIGRAM_INDEX = "memory_entries_search_trgm"

# An extension is one per database, whatever the schema: stores of different schemas
# migrating at once would otherwise both try to create it, and the second fails on the
# catalog's unique index instead of finding it there. (The key is the one releases that
# created pg_trgm alone took, so that they and this one still wait for each other.)
EXTENSION_LOCK_ID = int.from_bytes(
    hashlib.blake2b(b"memlane:pg_trgm", digest_size=8).digest(), "big", signed=True
)

# ICU classifies Unicode letters whatever the database's locale (a "C" database's regex
# knows ASCII letters only), but serves only UTF-8 databases.
_HAS_ICU = (
    "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu' "
    "AND collprovider = 'i') AND pg_encoding_to_char(d.encoding) = 'UTF8' "
    "FROM pg_database d WHERE d.datname = current_database()"
)


def extension_schema(name: str) -> str:
    """The query for an extension's schema, quoted (NULL without the extension): its
    operators and operator classes are named through it, so the store works whatever the
    connection's ``search_path``."""
    return (
        "SELECT quote_ident(n.nspname) FROM pg_extension e "
        f"JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = '{name}'"
    )


def state_query(s: str, t: str) -> str:
    """The table's schema mark, pg_trgm's schema, whether the namespace-led word index and
    the trigram index exist and whether the server has ICU: what a store reads before
    deciding whether to migrate."""
    return f"""
SELECT obj_description(to_regclass('{t}'), 'pg_class') AS version,
       ({extension_schema(TRIGRAM)}) AS trigram,
       to_regclass('{s}.{NAMESPACE_WORD_INDEX}') IS NOT NULL AS words_led,
       to_regclass('{s}.{TRIGRAM_INDEX}') IS NOT NULL AS trigram_index,
       ({_HAS_ICU}) AS icu
"""


def search_ddl(s: str, t: str, icu: bool) -> str:
    """The search columns, their function and the trigger that fills them, for a table of any
    age.

    A table made before search gains the columns, filled once here; one of schema 6 keeps
    its generated columns' values as plain ones (``DROP EXPRESSION`` rewrites nothing).
    """
    collate = ' COLLATE "und-x-icu"' if icu else ""
    searchable = (
        "CASE WHEN jsonb_typeof({row}metadata -> 'search_text') = 'string' "
        "THEN {row}metadata ->> 'search_text' END"
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
    ADD COLUMN IF NOT EXISTS search_words TEXT,
    ADD COLUMN IF NOT EXISTS search_vector TSVECTOR;
DO $plain$ BEGIN
    IF (SELECT attgenerated FROM pg_attribute
         WHERE attrelid = '{t}'::regclass AND attname = 'search_words') = 's' THEN
        ALTER TABLE {t} ALTER COLUMN search_words DROP EXPRESSION,
                        ALTER COLUMN search_vector DROP EXPRESSION;
    END IF;
END $plain$;
CREATE OR REPLACE FUNCTION {s}.index_search_text() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    NEW.search_words := {s}.search_words({searchable.format(row="NEW.")});
    NEW.search_vector := to_tsvector('simple'::regconfig, NEW.search_words);
    RETURN NEW;
END
$body$;
-- A row whose metadata has no search_text key and whose columns are empty (an insert, or an
-- update of a row that had none) would get NULLs from the function: it is not called.
DROP TRIGGER IF EXISTS memory_entries_search_text ON {t};
CREATE TRIGGER memory_entries_search_text BEFORE INSERT OR UPDATE ON {t} FOR EACH ROW
    WHEN (NEW.metadata ? 'search_text' OR NEW.search_words IS NOT NULL
          OR NEW.search_vector IS NOT NULL)
    EXECUTE FUNCTION {s}.index_search_text();
-- Rows of a table made before search: the trigger fills them, as on any update.
UPDATE {t} SET metadata = metadata
 WHERE search_words IS NULL AND jsonb_typeof(metadata -> 'search_text') = 'string';
ALTER INDEX IF EXISTS {s}.{WORD_INDEX} SET (fastupdate = off);
ALTER INDEX IF EXISTS {s}.{TRIGRAM_INDEX} SET (fastupdate = off);
"""


LED_NAMESPACE = 'namespace COLLATE "C"'
"""The namespace as the namespace-led word index holds it and a search compares it. Under
"C", the collation no other index of the table has, so the planner can only serve a
search's namespace condition from that index: given the ``(namespace, seq)`` index too, it
ANDs that index's entries for the whole namespace with the few the words match (it cannot
see how few). Equality under "C" is byte equality, as under the column's own collation."""


def word_index_ddl(s: str, t: str, btree_gin: str | None) -> str:
    """The word index on ``search_vector``, led by the namespace (replacing the one without)
    when ``btree_gin`` (the extension's schema) is given.

    The namespace-led index holds only searchable rows (``search_vector IS NOT NULL``, which
    the word passes state): otherwise it could also serve the trigram pass's namespace
    condition alone, and the planner (which cannot see that pass's words) would read the
    whole namespace from it and match trigrams row by row.
    """
    if btree_gin is None:
        return (
            f"CREATE INDEX IF NOT EXISTS {WORD_INDEX} ON {t} USING gin (search_vector) "
            "WITH (fastupdate = off)"
        )
    return f"""
CREATE INDEX IF NOT EXISTS {NAMESPACE_WORD_INDEX} ON {t}
    USING gin ({LED_NAMESPACE} {btree_gin}.text_ops, search_vector) WITH (fastupdate = off)
    WHERE search_vector IS NOT NULL;
DROP INDEX IF EXISTS {s}.{WORD_INDEX};
"""


def trigram_index_ddl(s: str, t: str, trigram: str) -> str:
    """The trigram index on ``search_words``, with pg_trgm's operator class from its schema,
    over searchable rows only. Schema 6's index over every row (an entry for each NULL
    too) is replaced."""
    return f"""
DO $partial$ BEGIN
    IF (SELECT indpred IS NULL FROM pg_index
         WHERE indexrelid = to_regclass('{s}.{TRIGRAM_INDEX}')) THEN
        DROP INDEX {s}.{TRIGRAM_INDEX};
    END IF;
END $partial$;
CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON {t}
    USING gin (search_words {trigram}.gin_trgm_ops) WITH (fastupdate = off)
    WHERE search_words IS NOT NULL;
"""


def search_statement(s: str, t: str, columns: str, trigram: str | None, *, led: bool) -> str:
    """The one statement of a search: ``$1`` namespaces, ``$2`` now, ``$3`` the query's
    terms, ``$4`` the least importance, ``$5`` the limit. ``trigram`` is pg_trgm's schema
    (``None``: no trigram index), ``led`` whether the word index leads with the namespace.

    Rows come out best first with two extra columns: ``tier`` (0 for a match by words, 1
    for a trigram match) and ``score`` (BM25 for tier 0, word similarity for tier 1).

    Every term is a bound value that only ever reaches ``search_words()`` and
    ``plainto_tsquery()`` (which read text, not query syntax) or pg_trgm's similarity.
    """
    live = "(m.expires_at IS NULL OR m.expires_at > $2)"
    namespace = f"m.{LED_NAMESPACE}" if led else "m.namespace"
    scope = f"{namespace} = ANY($1::text[]) AND {live}"
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
               AND m.search_vector IS NOT NULL AND {scope}) AS df
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
       AND m.search_vector IS NOT NULL AND {scope} AND m.importance >= $4
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
       AND m.search_words IS NOT NULL AND {scope} AND m.importance >= $4
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
