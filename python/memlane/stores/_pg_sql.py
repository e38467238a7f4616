"""What PostgreSQLStore sends the server: its statements, and values as PostgreSQL can hold them.

Kept apart from the store so the SQL reads in one place: every statement with the (validated,
quoted) schema name substituted once, and the checks and encodings a value passes before it
becomes a ``text`` or ``JSONB`` parameter.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import urllib.parse
from decimal import Decimal
from typing import Any

from memlane._validate import check_str
from memlane.errors import InvalidValueError
from memlane.stores import _pg_search
from memlane.stores._connect import utf8_problem
from memlane.stores._pg_vectors import PgVectors
from memlane.stores.protocol import dumps_json, find_in_json, row_to_entry
from memlane.types import MemoryEntry, as_utc

__all__ = [
    "PgSql",
    "cannot_hold",
    "check_schema_name",
    "entry_params",
    "has_exponent_number",
    "jsonb_text",
    "keep_session",
    "record_entry",
    "split_connect_timeout",
    "text_problem",
]


def text_problem(text: str) -> str | None:
    """Why PostgreSQL ``text`` cannot hold ``text`` (NUL or a lone surrogate), or ``None``."""
    if "\x00" in text:
        return f"a NUL character at position {text.index(chr(0))}"
    return utf8_problem(text)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# A number written with an exponent, as a JSON token after ":", "," or "[" (dumps_json
# writes no spaces; a lone number is checked apart). Inside a string the same letters are no
# number: a hex id like "4e8a..." would send the whole value down the slow path, a walk in
# Python. A string holding ":1e5" still matches, harmlessly. The class leads, not an
# alternation with "^", so the scan skips to candidates at C speed.
_EXPONENT_NUMBER = re.compile(r"[:,\[]-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]")
# Every exponent has a digit before its "e" and a sign or digit after it. Led by the letter
# itself, a pattern is scanned for at memchr speed (~2.5 us over a 3 KB turn, where the class-led
# pattern above takes ~16 us), so the exact pattern runs only on a text that has the hint.
_EXPONENT_HINTS = (re.compile(r"e(?<=[0-9]e)[-+0-9]"), re.compile(r"E(?<=[0-9]E)[-+0-9]"))


def check_schema_name(schema_name: object) -> str:
    """A PostgreSQL schema name must be a plain identifier: it is part of every statement.

    Raises:
        TypeError: Not a ``str``.
        InvalidValueError: Anything but ASCII letters, digits and underscores, not starting
            with a digit, at most 63 characters (a ``ValueError``).
    """
    check_str(schema_name, "schema_name")
    assert isinstance(schema_name, str)
    if not _IDENTIFIER.fullmatch(schema_name):
        raise InvalidValueError(
            f"schema_name must be a plain SQL identifier (ASCII letters, digits, underscores, "
            f"not starting with a digit, at most 63 characters), got {schema_name!r}"
        )
    return schema_name


def split_connect_timeout(url: str) -> tuple[str, float | None]:
    """``url`` without libpq's ``connect_timeout`` option, and that option's seconds.

    asyncpg does not know the option and would send it to the server as a setting, which
    the server refuses; the store applies it as its connect timeout instead.

    Raises:
        InvalidValueError: ``connect_timeout`` is not a positive number of seconds.
    """
    parts = urllib.parse.urlsplit(url)
    if "connect_timeout" not in parts.query:
        return url, None
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    found = [value for name, value in query if name == "connect_timeout"]
    if not found:
        return url, None
    try:
        seconds = float(found[-1])
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise InvalidValueError(
            f"connect_timeout in the URL must be a positive number of seconds, got {found[-1]!r}"
        )
    rest = urllib.parse.urlencode([(n, v) for n, v in query if n != "connect_timeout"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), seconds


async def keep_session(connection: Any) -> None:
    """What a connection needs before it goes back to the pool: nothing the pool has not done.

    asyncpg's default reset sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET
    ALL`` after every statement, a second round trip each time. The pool rolls back an open
    transaction itself before calling this, and memlane leaves nothing else in a session:
    its advisory locks are transaction-scoped, its cursors live in transactions, it never
    listens, and its only setting is ``SET LOCAL`` (the read-only flag is a connection
    parameter, which ``RESET ALL`` would keep anyway).
    """


def _float_text(value: float) -> str:
    """JSON text of a float that JSONB keeps a float.

    JSONB stores numbers as ``numeric`` and prints them positionally, so ``1e+16`` would come
    back as the integer ``10000000000000000``. Written positionally with a fractional part,
    the number keeps its scale and reads back as the same float.
    """
    text = repr(value)
    if "e" not in text:
        return text
    text = format(Decimal(text), "f")
    return text if "." in text else f"{text}.0"


def _jsonb_encode(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, dict):
        items = (
            f"{json.dumps(k, ensure_ascii=False)}:{_jsonb_encode(v)}" for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    return "[" + ",".join(_jsonb_encode(v) for v in value) + "]"


def _text_scalar(value: Any, path: str) -> tuple[str, str] | None:
    problem = text_problem(value) if isinstance(value, str) else None
    return None if problem is None else (path, problem)


def _text_key(k: str, path: str) -> tuple[str, str] | None:
    problem = text_problem(k)
    return None if problem is None else (f"{path} (dict key {k!r})", problem)


def _find_text_problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first string (or dict key) PostgreSQL cannot hold: ``(where, why)``."""
    return find_in_json(value, path, _text_scalar, _text_key)


def cannot_hold(entry_id: str, where: str, why: str) -> InvalidValueError:
    return InvalidValueError(
        f"cannot store entry {entry_id!r} in PostgreSQL: {where} contains {why}, "
        "which PostgreSQL text and JSONB cannot hold"
    )


def jsonb_text(value: Any, text: str, *, entry_id: str, field: str) -> str:
    """JSON text for a JSONB parameter: checked for what JSONB rejects, floats kept floats.

    ``text`` is the already-validated :func:`~memlane.store.dumps_json` output; the value is
    only walked when the text hints at a problem, so the common case is three string scans.
    """
    if "\\u0000" in text or utf8_problem(text) is not None:
        found = _find_text_problem(value, field)
        if found is not None:
            raise cannot_hold(entry_id, *found)
    if has_exponent_number(text):
        return _jsonb_encode(value)
    return text


def has_exponent_number(text: str) -> bool:
    """Whether JSON text ``text`` may hold a number written with an exponent (``1e+16``),
    which JSONB would print back positionally, as an integer when it has no fraction."""
    if text[0] in "-0123456789":  # a lone number
        return "e" in text.lower()
    hint_lower, hint_upper = _EXPONENT_HINTS
    if hint_lower.search(text) is None and hint_upper.search(text) is None:
        return False
    return _EXPONENT_NUMBER.search(text) is not None


def entry_params(namespace: str, entry: MemoryEntry) -> tuple[Any, ...]:
    """The parameters ``$2``..``$9`` of a save (``$1`` is the namespace): what PostgreSQL
    can hold of ``entry``, checked before any I/O.

    Raises:
        UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
        InvalidValueError: The namespace, id, key, content or metadata holds what PostgreSQL
            text and JSONB cannot (a ``ValueError``).
    """
    entry_id, key = entry.entry_id, entry.key
    content = dumps_json(entry.content, key=key, field="content")
    metadata = dumps_json(entry.metadata, key=key, field="metadata")
    for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
        problem = None if value is None else text_problem(value)
        if problem is not None:
            raise cannot_hold(entry_id, f"{field} {value!r}", problem)
    return (
        entry_id,
        entry.scope.value,
        key,
        jsonb_text(entry.content, content, entry_id=entry_id, field="content"),
        jsonb_text(entry.metadata, metadata, entry_id=entry_id, field="metadata"),
        as_utc(entry.created_at),
        None if entry.expires_at is None else as_utc(entry.expires_at),
        entry.importance,
    )


def record_entry(record: Any, where: str) -> MemoryEntry:
    """The entry of a row of the nine columns every read selects (``entry_id`` to ``version``).

    Raises:
        CorruptStoreError: The row cannot be decoded; the message names ``where``.
    """
    entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = record
    row = (
        entry_id,
        scope,
        key,
        content,
        metadata,
        created_at.isoformat(),
        None if expires_at is None else expires_at.timestamp(),
        importance,
        version,
    )
    return row_to_entry(row, where)


class PgSql:
    """Every statement, with the (validated, quoted) schema name substituted once."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        t = f"{s}.memory_entries"
        columns = (
            "entry_id, scope, key, content::text, metadata::text, created_at, expires_at, "
            "importance, version"
        )
        self.lock_id = int.from_bytes(
            hashlib.blake2b(f"memlane:{schema}".encode(), digest_size=8).digest(),
            "big",
            signed=True,
        )
        self.migrate = f"""
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {t} (
    seq BIGSERIAL NOT NULL,
    entry_id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    scope TEXT NOT NULL,
    key TEXT COLLATE "C",
    content JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{{}}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    expires_at TIMESTAMPTZ,
    importance FLOAT NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    version BIGINT NOT NULL DEFAULT 0
);
-- Tables made before versions existed: their rows become version 0.
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL DEFAULT 0;
-- Keys compare by code point (as Python compares str), so that load_range is served by the
-- (namespace, key) index; a table made with the database's collation is converted once
-- (its key indexes are rebuilt, the rows are not rewritten).
DO $collate$ BEGIN
    IF (SELECT attcollation FROM pg_attribute
         WHERE attrelid = '{t}'::regclass AND attname = 'key')
       IS DISTINCT FROM 'pg_catalog."C"'::regcollation THEN
        ALTER TABLE {t} ALTER COLUMN key TYPE TEXT COLLATE "C";
    END IF;
END $collate$;
-- (namespace, seq) serves every per-namespace query and returns rows already in order.
CREATE INDEX IF NOT EXISTS memory_entries_namespace ON {t} (namespace, seq);
CREATE UNIQUE INDEX IF NOT EXISTS memory_entries_namespace_key
    ON {t} (namespace, key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_entries_expires_at
    ON {t} (expires_at) WHERE expires_at IS NOT NULL;
-- A turn's JSON (~3.5 KB) is compressed on every insert: lz4, where the server has it,
-- compresses it in a fraction of pglz's time (~30 us a turn). Rows already written keep
-- pglz, which the server still reads.
DO $lz4$ BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings
                     WHERE name = 'default_toast_compression') THEN
        ALTER TABLE {t} ALTER COLUMN content SET COMPRESSION lz4;
    END IF;
END $lz4$;

-- One save: drop whoever holds the key, then upsert by entry_id. The row keeps its seq
-- (its position) when it stays in its namespace and takes a new one when it moves.
-- A concurrent writer may take the key between the DELETE and the INSERT: the unique
-- index stops it, and the loop takes the key back.
CREATE OR REPLACE FUNCTION {s}.save_entry(
    p_namespace TEXT, p_entry_id TEXT, p_scope TEXT, p_key TEXT, p_content JSONB,
    p_metadata JSONB, p_created_at TIMESTAMPTZ, p_expires_at TIMESTAMPTZ, p_importance FLOAT
) RETURNS VOID LANGUAGE plpgsql AS $body$
DECLARE
    attempt INT := 0;
BEGIN
    LOOP
        IF p_key IS NOT NULL THEN
            DELETE FROM {t}
             WHERE namespace = p_namespace AND key = p_key AND entry_id <> p_entry_id;
        END IF;
        BEGIN
            INSERT INTO {t} AS m (entry_id, namespace, scope, key, content, metadata,
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
CREATE OR REPLACE FUNCTION {s}.save_entry_if(
    p_namespace TEXT, p_entry_id TEXT, p_scope TEXT, p_key TEXT, p_content JSONB,
    p_metadata JSONB, p_created_at TIMESTAMPTZ, p_expires_at TIMESTAMPTZ, p_importance FLOAT,
    p_expected BIGINT, p_now TIMESTAMPTZ, p_retry BOOLEAN
) RETURNS BOOLEAN LANGUAGE plpgsql AS $body$
DECLARE
    attempt INT := 0;
    held {t}%ROWTYPE;
    new_version BIGINT := coalesce(p_expected + 1, 1);
BEGIN
    LOOP
        SELECT * INTO held FROM {t}
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
                DELETE FROM {t} WHERE entry_id = held.entry_id;
            END IF;
            INSERT INTO {t} AS m (entry_id, namespace, scope, key, content, metadata,
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

CREATE OR REPLACE FUNCTION {s}.save_entries(
    p_namespace TEXT, p_entry_ids TEXT[], p_scopes TEXT[], p_keys TEXT[], p_contents JSONB[],
    p_metadata JSONB[], p_created_at TIMESTAMPTZ[], p_expires_at TIMESTAMPTZ[],
    p_importance FLOAT[]
) RETURNS VOID LANGUAGE plpgsql AS $body$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_entry_ids, 1), 0) LOOP
        PERFORM {s}.save_entry(p_namespace, p_entry_ids[i], p_scopes[i], p_keys[i],
                               p_contents[i], p_metadata[i], p_created_at[i],
                               p_expires_at[i], p_importance[i]);
    END LOOP;
END
$body$;
"""
        # Bump when the DDL changes (here or in _pg_search): a table marked with this version
        # needs nothing. 4: the search columns and indexes. 5: the indexes without a pending
        # list. 6: the word index led by the namespace (btree_gin). 7: the search columns
        # filled by a trigger for searchable rows only (no longer generated), the trigram
        # index partial, lz4 for content. The vectors' tables are found by their own state
        # (_pg_vectors), so a store without them still opens read-only.
        self.version = "memlane schema 7"
        self.vectors = PgVectors(s, t)
        self.mark = f"COMMENT ON TABLE {t} IS '{self.version}'"
        self.state = _pg_search.state_query(s, t)
        self.search_ddl = functools.partial(_pg_search.search_ddl, s, t)
        self.word_index = functools.partial(_pg_search.word_index_ddl, s, t)
        self.trigram_index = functools.partial(_pg_search.trigram_index_ddl, s, t)
        self.search = functools.partial(_pg_search.search_statement, s, t, columns)
        self.save_one = f"SELECT {s}.save_entry($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        self.save_many = (
            f"SELECT {s}.save_entries($1, $2::text[], $3::text[], $4::text[], $5::jsonb[], "
            "$6::jsonb[], $7::timestamptz[], $8::timestamptz[], $9::float8[])"
        )
        self.save_if = (
            f"SELECT {s}.save_entry_if($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        )
        # A log's append: the insert lands only on a free key (and a new entry_id), and says
        # so with a row. Nothing else runs in the statement: a read of the keys after a lost
        # race, even one that never runs, costs its setup on every append (~23 us), and a loss
        # is rare; the store reads them with load_range instead, in a snapshot that holds a
        # winner which committed while this insert waited for it.
        self.save_if_absent = f"""
INSERT INTO {t} (entry_id, namespace, scope, key, content, metadata, created_at, expires_at,
                 importance, version)
VALUES ($2, $1, $3, $4, $5, $6, $7, $8, $9, 1)
ON CONFLICT DO NOTHING
RETURNING TRUE"""
        live = "(expires_at IS NULL OR expires_at > $2)"
        self.load = f"SELECT {columns} FROM {t} WHERE namespace = $1 AND {live} ORDER BY seq"
        self.load_by_key = f"SELECT {columns} FROM {t} WHERE namespace = $1 AND {live} AND key = $3"
        # The key column's collation is "C", so these bounds and the order are code-point
        # order and the (namespace, key) index serves both.
        self.load_range = (
            f"SELECT {columns} FROM {t} WHERE namespace = $1 AND key >= $3 AND key < $4 "
            f"AND {live} ORDER BY key"
        )
        self.delete = f"DELETE FROM {t} WHERE namespace = $1 AND entry_id = $2"
        # One statement, so one transaction: every id goes or none does.
        self.delete_many = (
            f"DELETE FROM {t} WHERE namespace = $1 AND entry_id = ANY($2::text[]) "
            "RETURNING entry_id"
        )
        self.exists = f"SELECT to_regclass('{t}') IS NOT NULL"
        self.clear = f"DELETE FROM {t} WHERE namespace = $1"
        self.cleanup = f"DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= $1"
        self.namespaces = f"SELECT namespace FROM {t} GROUP BY namespace ORDER BY min(seq)"
