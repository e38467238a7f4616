-- memlane schema 6: the DDL PostgreSQLStore ran before schema 7 (search columns generated,
-- a trigram index over every row), rendered for schema __SCHEMA__ with pg_trgm and btree_gin in
-- schema __EXT__; kept so that tests can make a database as that release made it.

CREATE SCHEMA IF NOT EXISTS "__SCHEMA__";
CREATE TABLE IF NOT EXISTS "__SCHEMA__".memory_entries (
    seq BIGSERIAL NOT NULL,
    entry_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT COLLATE "C",
    content JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    expires_at TIMESTAMPTZ,
    importance FLOAT NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    version BIGINT NOT NULL DEFAULT 0
);
-- Tables made before versions existed: their rows become version 0.
ALTER TABLE "__SCHEMA__".memory_entries ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0;
-- Keys compare by code point (as Python compares str), so that load_range is served by the
-- (namespace, key) index; a table made with the database's collation is converted once
-- (its key indexes are rebuilt, the rows are not rewritten).
DO $collate$ BEGIN
    IF (SELECT attcollation FROM pg_attribute
         WHERE attrelid = '"__SCHEMA__".memory_entries'::regclass AND attname = 'key')
       IS DISTINCT FROM 'pg_catalog."C"'::regcollation THEN
        ALTER TABLE "__SCHEMA__".memory_entries ALTER COLUMN key TYPE TEXT COLLATE "C";
    END IF;
END $collate$;
-- (namespace, seq) serves every per-namespace query and returns rows already in order.
CREATE INDEX IF NOT EXISTS memory_entries_namespace ON "__SCHEMA__".memory_entries (namespace, seq);
CREATE UNIQUE INDEX IF NOT EXISTS memory_entries_namespace_key
    ON "__SCHEMA__".memory_entries (namespace, key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_entries_expires_at
    ON "__SCHEMA__".memory_entries (expires_at) WHERE expires_at IS NOT NULL;

-- One save: drop whoever holds the key, then upsert by entry_id. The row keeps its seq
-- (its position) when it stays in its namespace and takes a new one when it moves.
-- A concurrent writer may take the key between the DELETE and the INSERT: the unique
-- index stops it, and the loop takes the key back.
CREATE OR REPLACE FUNCTION "__SCHEMA__".save_entry(
    p_namespace TEXT, p_entry_id TEXT, p_scope TEXT, p_key TEXT, p_content JSONB,
    p_metadata JSONB, p_created_at TIMESTAMPTZ, p_expires_at TIMESTAMPTZ, p_importance FLOAT
) RETURNS VOID LANGUAGE plpgsql AS $body$
DECLARE
    attempt INT := 0;
BEGIN
    LOOP
        IF p_key IS NOT NULL THEN
            DELETE FROM "__SCHEMA__".memory_entries
             WHERE namespace = p_namespace AND key = p_key AND entry_id <> p_entry_id;
        END IF;
        BEGIN
            INSERT INTO "__SCHEMA__".memory_entries AS m (entry_id, namespace, scope, key, content, metadata,
                                  created_at, expires_at, importance)
            VALUES (p_entry_id, p_namespace, p_scope, p_key, p_content, p_metadata,
                    p_created_at, p_expires_at, p_importance)
            ON CONFLICT (entry_id) DO UPDATE SET
                namespace = EXCLUDED.namespace, scope = EXCLUDED.scope, key = EXCLUDED.key,
                content = EXCLUDED.content, metadata = EXCLUDED.metadata,
                created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
                importance = EXCLUDED.importance, version = 0,
                seq = CASE WHEN m.namespace = EXCLUDED.namespace THEN m.seq ELSE EXCLUDED.seq END;
            RETURN;
        EXCEPTION WHEN unique_violation THEN
            attempt := attempt + 1;
            IF attempt >= 100 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$body$;

-- save_if: the key's holder is locked (FOR UPDATE) while its version and expiry are judged,
-- so of the writers that expected one version exactly one gets past the check; when nobody
-- holds the key there is no row to lock, and the unique index decides instead (the loser's
-- unique_violation sends it round the loop, where it finds the winner's row). A win then
-- writes the entry as save_entry does; a loss returns before writing anything.
-- Racers that share an entry_id meet on the primary key, not the key's index: the loser's
-- insert would become an update of the winner's row. So the update is judged again on the
-- row it locks: a row that holds this key must still be what the caller expected, or the
-- attempt goes round the loop (undoing its DELETE) and loses there to the row it found. A
-- row under another key or namespace is this entry moving, which save's rules allow.
-- p_retry: the first attempt's connection failed, so it may have won: the key already
-- holding exactly this entry at the new version is that win.
CREATE OR REPLACE FUNCTION "__SCHEMA__".save_entry_if(
    p_namespace TEXT, p_entry_id TEXT, p_scope TEXT, p_key TEXT, p_content JSONB,
    p_metadata JSONB, p_created_at TIMESTAMPTZ, p_expires_at TIMESTAMPTZ, p_importance FLOAT,
    p_expected BIGINT, p_now TIMESTAMPTZ, p_retry BOOLEAN
) RETURNS BOOLEAN LANGUAGE plpgsql AS $body$
DECLARE
    attempt INT := 0;
    held "__SCHEMA__".memory_entries%ROWTYPE;
    new_version BIGINT := coalesce(p_expected + 1, 1);
BEGIN
    LOOP
        SELECT * INTO held FROM "__SCHEMA__".memory_entries
         WHERE namespace = p_namespace AND key = p_key FOR UPDATE;
        IF FOUND AND (held.expires_at IS NULL OR held.expires_at > p_now) THEN
            IF p_retry AND held.entry_id = p_entry_id AND held.version = new_version
               AND held.content = p_content AND held.metadata = p_metadata THEN
                RETURN TRUE;
            END IF;
            IF p_expected IS NULL OR held.version <> p_expected THEN
                RETURN FALSE;
            END IF;
        ELSIF p_expected IS NOT NULL THEN
            RETURN FALSE;
        END IF;
        BEGIN
            -- Only the row judged above goes: a fresh look for the key (a new snapshot)
            -- could find a row another writer committed meanwhile, and remove its win.
            IF held.entry_id IS NOT NULL AND held.entry_id <> p_entry_id THEN
                DELETE FROM "__SCHEMA__".memory_entries WHERE entry_id = held.entry_id;
            END IF;
            INSERT INTO "__SCHEMA__".memory_entries AS m (entry_id, namespace, scope, key, content, metadata,
                                  created_at, expires_at, importance, version)
            VALUES (p_entry_id, p_namespace, p_scope, p_key, p_content, p_metadata,
                    p_created_at, p_expires_at, p_importance, new_version)
            ON CONFLICT (entry_id) DO UPDATE SET
                namespace = EXCLUDED.namespace, scope = EXCLUDED.scope, key = EXCLUDED.key,
                content = EXCLUDED.content, metadata = EXCLUDED.metadata,
                created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,
                importance = EXCLUDED.importance, version = EXCLUDED.version,
                seq = CASE WHEN m.namespace = EXCLUDED.namespace THEN m.seq ELSE EXCLUDED.seq END
            WHERE m.namespace <> p_namespace OR m.key IS DISTINCT FROM p_key
               OR CASE WHEN m.expires_at IS NOT NULL AND m.expires_at <= p_now
                       THEN p_expected IS NULL
                       ELSE p_expected IS NOT NULL AND m.version = p_expected END;
            IF NOT FOUND THEN
                RAISE unique_violation;
            END IF;
            RETURN TRUE;
        EXCEPTION WHEN unique_violation THEN
            attempt := attempt + 1;
            IF attempt >= 100 THEN
                RAISE;
            END IF;
        END;
    END LOOP;
END
$body$;

CREATE OR REPLACE FUNCTION "__SCHEMA__".save_entries(
    p_namespace TEXT, p_entry_ids TEXT[], p_scopes TEXT[], p_keys TEXT[], p_contents JSONB[],
    p_metadata JSONB[], p_created_at TIMESTAMPTZ[], p_expires_at TIMESTAMPTZ[],
    p_importance FLOAT[]
) RETURNS VOID LANGUAGE plpgsql AS $body$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_entry_ids, 1), 0) LOOP
        PERFORM "__SCHEMA__".save_entry(p_namespace, p_entry_ids[i], p_scopes[i], p_keys[i],
                               p_contents[i], p_metadata[i], p_created_at[i],
                               p_expires_at[i], p_importance[i]);
    END LOOP;
END
$body$;


-- upper() then lower() is case folding (ß and SS, σ and ς meet), done before the split so
-- that a letter whose folding adds a mark (İ) splits as Python's casefold() does.
CREATE OR REPLACE FUNCTION "__SCHEMA__".search_words(p_text TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $body$
    SELECT btrim(regexp_replace(lower(upper(left(p_text, 100000) COLLATE "und-x-icu")),
                                '[^[:alnum:]]+', ' ', 'g'))
$body$;
ALTER TABLE "__SCHEMA__".memory_entries
    ADD COLUMN IF NOT EXISTS search_words TEXT
        GENERATED ALWAYS AS ("__SCHEMA__".search_words(CASE WHEN jsonb_typeof(metadata -> 'search_text') = 'string' THEN metadata ->> 'search_text' END)) STORED,
    ADD COLUMN IF NOT EXISTS search_vector TSVECTOR
        GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, "__SCHEMA__".search_words(CASE WHEN jsonb_typeof(metadata -> 'search_text') = 'string' THEN metadata ->> 'search_text' END)))
        STORED;
ALTER INDEX IF EXISTS "__SCHEMA__".memory_entries_search SET (fastupdate = off);
ALTER INDEX IF EXISTS "__SCHEMA__".memory_entries_search_trgm SET (fastupdate = off);


CREATE TABLE IF NOT EXISTS "__SCHEMA__".vector_models (
    id SERIAL PRIMARY KEY,
    model TEXT NOT NULL,
    dims INT NOT NULL,
    UNIQUE (model, dims)
);
CREATE TABLE IF NOT EXISTS "__SCHEMA__".entry_vectors (
    entry_id TEXT PRIMARY KEY REFERENCES "__SCHEMA__".memory_entries (entry_id) ON DELETE CASCADE,
    model_id INT NOT NULL REFERENCES "__SCHEMA__".vector_models (id),
    digest TEXT NOT NULL,
    embedding BYTEA NOT NULL
);
CREATE INDEX IF NOT EXISTS entry_vectors_model ON "__SCHEMA__".entry_vectors (model_id);

-- A save that changes the text (or the namespace) makes the vector describe another entry.
CREATE OR REPLACE FUNCTION "__SCHEMA__".drop_stale_vector() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    DELETE FROM "__SCHEMA__".entry_vectors WHERE entry_id = OLD.entry_id;
    RETURN NULL;
END
$body$;
DROP TRIGGER IF EXISTS memory_entries_stale_vector ON "__SCHEMA__".memory_entries;
CREATE TRIGGER memory_entries_stale_vector AFTER UPDATE ON "__SCHEMA__".memory_entries FOR EACH ROW
    WHEN (OLD.metadata -> 'search_text' IS DISTINCT FROM NEW.metadata -> 'search_text'
          OR OLD.namespace IS DISTINCT FROM NEW.namespace)
    EXECUTE FUNCTION "__SCHEMA__".drop_stale_vector();


CREATE INDEX IF NOT EXISTS memory_entries_namespace_search ON "__SCHEMA__".memory_entries
    USING gin (namespace COLLATE "C" __EXT__.text_ops, search_vector) WITH (fastupdate = off)
    WHERE search_vector IS NOT NULL;
DROP INDEX IF EXISTS "__SCHEMA__".memory_entries_search;
;
CREATE INDEX IF NOT EXISTS memory_entries_search_trgm ON "__SCHEMA__".memory_entries USING gin (search_words __EXT__.gin_trgm_ops) WITH (fastupdate = off);
COMMENT ON TABLE "__SCHEMA__".memory_entries IS 'memlane schema 6';