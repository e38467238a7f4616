"""PostgreSQLStore: a table shared by every process that points at it (asyncpg).

It follows the rules of every memlane store (see :mod:`memlane.stores.protocol`), across
processes: every rule is enforced by the server (a unique index and a single statement),
never by a read-then-write in Python. The driver is an optional extra
(``pip install 'memlane[postgres]'``), imported only when a store is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import re
import urllib.parse
import warnings
from datetime import datetime
from decimal import Decimal
from typing import Any

from memlane._validate import check_positive_int, check_str, type_name
from memlane.errors import InvalidValueError
from memlane.stores import _pg_search
from memlane.stores._network import IndexFallbackWarning, NetworkStore, require, utf8_problem
from memlane.stores.protocol import SearchHit, entry_to_row, find_in_json, row_to_entry
from memlane.types import MemoryEntry, as_utc, utc_now

__all__ = ["PostgreSQLStore", "check_schema_name"]


def text_problem(text: str) -> str | None:
    """Why PostgreSQL ``text`` cannot hold ``text`` (NUL or a lone surrogate), or ``None``."""
    if "\x00" in text:
        return f"a NUL character at position {text.index(chr(0))}"
    return utf8_problem(text)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_EXPONENT_NUMBER = re.compile(r"[0-9][eE][+-]?[0-9]")


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


def _cannot_hold(entry_id: str, where: str, why: str) -> InvalidValueError:
    return InvalidValueError(
        f"cannot store entry {entry_id!r} in PostgreSQL: {where} contains {why}, "
        "which PostgreSQL text and JSONB cannot hold"
    )


def _jsonb_text(value: Any, text: str, *, entry_id: str, field: str) -> str:
    """JSON text for a JSONB parameter: checked for what JSONB rejects, floats kept floats.

    ``text`` is the already-validated :func:`~memlane.store.dumps_json` output; the value is
    only walked when the text hints at a problem, so the common case is three string scans.
    """
    if "\\u0000" in text or utf8_problem(text) is not None:
        found = _find_text_problem(value, field)
        if found is not None:
            raise _cannot_hold(entry_id, *found)
    if _EXPONENT_NUMBER.search(text):
        return _jsonb_encode(value)
    return text


class _PgSql:
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
        # needs nothing. 4: the search columns and indexes.
        self.version = "memlane schema 4"
        self.mark = f"COMMENT ON TABLE {t} IS '{self.version}'"
        self.state = _pg_search.state_query(s, t)
        self.search_ddl = functools.partial(_pg_search.search_ddl, s, t)
        self.trigram_index = functools.partial(_pg_search.trigram_index_ddl, t)
        self.search = functools.partial(_pg_search.search_statement, s, t, columns)
        self.save_one = f"SELECT {s}.save_entry($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        self.save_many = (
            f"SELECT {s}.save_entries($1, $2::text[], $3::text[], $4::text[], $5::jsonb[], "
            "$6::jsonb[], $7::timestamptz[], $8::timestamptz[], $9::float8[])"
        )
        self.save_if = (
            f"SELECT {s}.save_entry_if($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        )
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
        self.clear = f"DELETE FROM {t} WHERE namespace = $1"
        self.cleanup = f"DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= $1"
        self.namespaces = f"SELECT namespace FROM {t} GROUP BY namespace ORDER BY min(seq)"


def _split_connect_timeout(url: str) -> tuple[str, float | None]:
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


def _affected(status: str) -> int:
    """Row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


class PostgreSQLStore(NetworkStore[Any]):
    """A PostgreSQL table shared by every process that points at it (asyncpg).

    Schema ``{schema_name}.memory_entries`` with the columns of
    :class:`~memlane.types.MemoryEntry` plus ``namespace`` and a ``seq BIGSERIAL`` insertion
    order; ``(namespace, key) WHERE key IS NOT NULL`` is a unique index, so two rows never
    share a key, whatever the number of concurrent writers. A save is one call of a
    server-side function (one round trip, one transaction); :meth:`save_many` saves a list
    the same way in one round trip, all or nothing. :meth:`save_if` is one call of another
    function, which locks the key's row while it judges the version (or, for a free key, lets
    the unique index pick the one insert that lands). ``key`` is collated ``"C"`` (code-point
    order), so :meth:`load_range` reads the (namespace, key) index in order. Tables made
    before versions existed gain the ``version`` column (their rows at 0) and the collation
    on first use.

    :meth:`search` (see :class:`~memlane.stores.SearchableStore`) reads two generated columns
    that every write keeps current: ``search_words`` (the metadata's ``search_text`` split as
    :func:`~memlane.stores.protocol.search_terms` splits it, under a ``pg_trgm`` GIN index)
    and ``search_vector`` (its ``tsvector``, under a GIN index). Rows match when they hold a
    query term; they rank by BM25, each term weighted by its document frequency in the
    searched namespaces (counted from the index), then by importance. When fewer rows match
    than ``limit``, rows whose words are close to a query term that no entry holds (a typo,
    a prefix) follow, by ``pg_trgm`` word similarity. Tables made before search gain the
    columns on first use (one rewrite of the table); a server where ``pg_trgm`` cannot be
    created gives an :class:`~memlane.stores.IndexFallbackWarning` and matches whole words
    only.

    Content and metadata are JSONB: objects read back with JSONB's key order (sorted), and
    ``-0.0`` reads back as ``0.0``; every other plain-JSON value reads back equal and of
    the same type (large and tiny floats are sent positionally so that they stay floats).

    Args:
        url: ``postgresql://user:password@host:port/database``; a ``connect_timeout`` option
            in it (seconds, as libpq spells it) wins over ``timeout`` for connecting.
        pool_size: Most connections per event loop.
        pool_min_size: Connections opened up front per event loop.
        timeout: Seconds allowed to connect and for each statement.
        schema_name: Schema of the table; a plain SQL identifier.

    Raises:
        ValueError: ``schema_name`` is not a plain identifier, a size is out of range, or
            the URL's ``connect_timeout`` is not a positive number.
        ImportError: asyncpg is not installed (``pip install 'memlane[postgres]'``).
    """

    _kind = "PostgreSQL"
    _default_port = 5432

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        pool_min_size: int = 2,
        timeout: float = 30.0,
        schema_name: str = "memlane",
    ) -> None:
        self._asyncpg = require("asyncpg", "postgres")
        super().__init__(url, timeout)
        self.pool_size = check_positive_int(pool_size, "pool_size")
        if isinstance(pool_min_size, bool) or not isinstance(pool_min_size, int):
            raise TypeError(f"pool_min_size must be int, not {type_name(pool_min_size)}")
        if not 0 <= pool_min_size <= pool_size:
            raise ValueError(
                f"pool_min_size must be between 0 and pool_size ({pool_size}), got {pool_min_size!r}"
            )
        self.pool_min_size = pool_min_size
        self.schema_name = check_schema_name(schema_name)
        self._sql = _PgSql(schema_name)
        self._dsn, connect_timeout = _split_connect_timeout(self._url)
        self.connect_timeout = self.timeout if connect_timeout is None else connect_timeout
        # Until migration finds pg_trgm: the statement that searches by words alone.
        self._search: str = self._sql.search(None)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> Any:
        asyncpg = self._asyncpg
        try:
            return await asyncpg.create_pool(
                self._dsn,
                min_size=self.pool_min_size,
                max_size=self.pool_size,
                timeout=self.connect_timeout,
                command_timeout=self.timeout,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if isinstance(exc, asyncpg.ClientConfigurationError):
                raise
            raise self._unreachable(exc, "connect to") from exc

    async def _migrate(self, pool: Any) -> None:
        state = await pool.fetchrow(self._sql.state)
        trigram, problem = state["trigram"], ""
        # Up to date already (the usual case): skip the DDL, whose index statements would
        # briefly lock out writers of the table.
        if state["version"] != self._sql.version or not state["trigram_index"]:
            async with pool.acquire() as con, con.transaction():
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalogs, and
                # concurrent CREATE OR REPLACE FUNCTION fails outright: serialise migrations.
                await con.execute("SELECT pg_advisory_xact_lock($1)", self._sql.lock_id)
                if state["version"] != self._sql.version:
                    await con.execute(self._sql.migrate)
                    await con.execute(self._sql.search_ddl(state["icu"]))
                    await con.execute(self._sql.mark)
                trigram, problem = await self._ensure_trigram(con)
        if trigram is None:
            warnings.warn(
                f"PostgreSQL server at {self.address} gives no trigram index ({problem}); "
                "search finds whole words only, not misspelt or partial ones. Once pg_trgm "
                "can be created (CREATE EXTENSION pg_trgm, by a user allowed to), the next "
                "store to start creates the index.",
                IndexFallbackWarning,
                stacklevel=2,
            )
        self._search = self._sql.search(trigram)

    async def _ensure_trigram(self, con: Any) -> tuple[str | None, str]:
        """pg_trgm's schema once the extension and the table's trigram index exist, else
        ``None`` and why not. Runs inside the migration's transaction."""
        asyncpg = self._asyncpg
        trigram = await con.fetchval(_pg_search.TRIGRAM_SCHEMA)
        try:
            # Savepoints: a refusal leaves the migration's transaction usable.
            if trigram is None:
                await con.execute("SELECT pg_advisory_xact_lock($1)", _pg_search.TRIGRAM_LOCK_ID)
                async with con.transaction():
                    await con.execute(_pg_search.create_trigram)
                trigram = await con.fetchval(_pg_search.TRIGRAM_SCHEMA)
            if trigram is not None:
                async with con.transaction():
                    await con.execute(self._sql.trigram_index(trigram))
        except asyncpg.PostgresError as exc:
            if self._is_connection_error(exc):
                raise
            return None, f"{type(exc).__name__}: {exc}"
        return trigram, ""

    async def _close_resource(self, pool: Any) -> None:
        try:
            await asyncio.wait_for(pool.close(), self.timeout)
        except (TimeoutError, OSError):
            pool.terminate()

    def _close_soon(self, pool: Any, loop: asyncio.AbstractEventLoop) -> None:
        # terminate() is immediate, so a sync close() inside the loop leaves nothing open.
        pool.terminate()

    def _name_problem(self, text: str) -> str | None:
        return text_problem(text)

    def _abandon(self, pool: Any) -> None:
        # A closed loop leaves nothing that could run the close: forget the pool.
        with contextlib.suppress(RuntimeError):
            pool.terminate()

    def _is_connection_error(self, exc: BaseException) -> bool:
        asyncpg = self._asyncpg
        # InternalClientError: a connection the server dropped while it sat idle in the pool
        # (asyncpg notices only when the next statement finds the protocol mid-error).
        if isinstance(exc, OSError | asyncpg.PostgresConnectionError | asyncpg.InternalClientError):
            return True
        if isinstance(exc, asyncpg.exceptions.OperatorInterventionError):
            return not isinstance(exc, asyncpg.exceptions.QueryCanceledError)
        return isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc)

    async def _recover(self, pool: Any) -> None:
        await pool.expire_connections()

    # ---- conversions

    def _params(self, namespace: str, entry: MemoryEntry) -> tuple[Any, ...]:
        entry_id, scope, key, content, metadata, _created, _expires, importance, _version = (
            entry_to_row(entry)
        )
        for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
            problem = None if value is None else text_problem(value)
            if problem is not None:
                raise _cannot_hold(entry_id, field, problem)
        return (
            entry_id,
            scope,
            key,
            _jsonb_text(entry.content, content, entry_id=entry_id, field="content"),
            _jsonb_text(entry.metadata, metadata, entry_id=entry_id, field="metadata"),
            as_utc(entry.created_at),
            None if entry.expires_at is None else as_utc(entry.expires_at),
            importance,
        )

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        return [self._params(namespace, e) for e in entries]

    def _entry(self, record: Any) -> MemoryEntry:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = (
            record
        )
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
        return row_to_entry(row, f"PostgreSQL table {self.schema_name}.memory_entries")

    # ---- operations

    async def _do_save_many(self, pool: Any, namespace: str, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:
            await pool.execute(self._sql.save_one, namespace, *rows[0])
        else:
            await pool.execute(
                self._sql.save_many, namespace, *(list(col) for col in zip(*rows, strict=True))
            )

    async def _do_save_if(
        self,
        pool: Any,
        namespace: str,
        params: tuple[Any, ...],
        expected: int | None,
        retry: bool,
    ) -> bool:
        now = utc_now()
        return bool(
            await pool.fetchval(self._sql.save_if, namespace, *params, expected, now, retry)
        )

    async def _do_load_range(
        self, pool: Any, namespace: str, start: str, stop: str, now: datetime
    ) -> list[MemoryEntry]:
        records = await pool.fetch(self._sql.load_range, namespace, now, start, stop)
        return [self._entry(r) for r in records]

    async def _do_load(self, pool: Any, namespace: str, now: datetime) -> list[MemoryEntry]:
        return [self._entry(r) for r in await pool.fetch(self._sql.load, namespace, now)]

    async def _do_load_by_key(
        self, pool: Any, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        record = await pool.fetchrow(self._sql.load_by_key, namespace, now, key)
        return None if record is None else self._entry(record)

    async def _do_delete(self, pool: Any, namespace: str, entry_id: str) -> bool:
        return _affected(await pool.execute(self._sql.delete, namespace, entry_id)) > 0

    async def _do_clear(self, pool: Any, namespace: str) -> int:
        return _affected(await pool.execute(self._sql.clear, namespace))

    async def _do_cleanup(self, pool: Any, now: datetime) -> int:
        return _affected(await pool.execute(self._sql.cleanup, now))

    async def _do_namespaces(self, pool: Any) -> list[str]:
        return [r[0] for r in await pool.fetch(self._sql.namespaces)]

    async def _do_search(
        self,
        pool: Any,
        namespaces: list[str],
        terms: list[str],
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        records = await pool.fetch(self._search, namespaces, now, terms, minimum, limit)
        hits = []
        # A trigram match ranks after every word match, so its score (similarity, at most 1)
        # is scaled below the last word match's.
        floor = 1.0
        for record in records:
            values = tuple(record)
            entry, tier, score = self._entry(values[:9]), values[9], values[10]
            if tier == 0:
                floor = score
            else:
                score = floor * score / 2.0
            hits.append(SearchHit(entry, score))
        return hits
