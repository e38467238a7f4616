"""PostgreSQLStore: a table shared by every process that points at it (asyncpg).

It follows the rules of every memlane store (see :mod:`memlane.stores.protocol`), across
processes: every rule is enforced by the server (a unique index and a single statement),
never by a read-then-write in Python. The driver is an optional extra
(``pip install 'memlane[postgres]'``), imported only when a store is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

from memlane._validate import check_positive_int, type_name
from memlane.errors import NotAStoreError, StoreError
from memlane.stores import _pg_search
from memlane.stores._base import blocking
from memlane.stores._connect import IndexFallbackWarning, require
from memlane.stores._network_vectors import NetworkVectorStore
from memlane.stores._pg_pool import HeldPool, bounded_connection_class
from memlane.stores._pg_sql import (
    PgSql,
    check_schema_name,
    entry_params,
    keep_session,
    record_entry,
    split_connect_timeout,
    text_problem,
)
from memlane.stores._pg_vectors import VECTOR, PgVectorOps
from memlane.stores.protocol import (
    SearchHit,
    check_key_range,
    check_keyed_entry,
    check_namespace,
)
from memlane.stores.vectors import EntryVector
from memlane.types import MemoryEntry, utc_now

__all__ = ["PostgreSQLStore", "check_schema_name"]


def _affected(status: str) -> int:
    """Row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


class PostgreSQLStore(NetworkVectorStore[Any]):
    """A PostgreSQL table shared by every process that points at it (asyncpg).

    Schema ``{schema_name}.memory_entries`` with the columns of
    :class:`~memlane.types.MemoryEntry` plus ``namespace`` and a ``seq BIGSERIAL`` insertion
    order; ``(namespace, key) WHERE key IS NOT NULL`` is a unique index, so two rows never
    share a key, whatever the number of concurrent writers. A save is one call of a
    server-side function (one round trip, one transaction); :meth:`save_many` saves a list
    the same way in one round trip, all or nothing. :meth:`save_if` is one call of another
    function, which locks the key's row while it judges the version (or, for a free key, lets
    the unique index pick the one insert that lands). ``key`` is collated ``"C"`` (code-point
    order), so :meth:`load_range` reads the (namespace, key) index in order.
    :meth:`save_if_absent` appends to a log with one statement, an insert that lands only on
    a free key; after a lost race a second reads the keys from it on. Tables made
    before versions existed gain the ``version`` column (their rows at 0) and the collation
    on first use.

    :meth:`search` (see :class:`~memlane.stores.SearchableStore`) reads two columns that a
    trigger keeps current on every write of a searchable row: ``search_words`` (the metadata's ``search_text`` split as
    :func:`~memlane.stores.protocol.search_terms` splits it, under a ``pg_trgm`` GIN index)
    and ``search_vector`` (its ``tsvector``, under a GIN index). Rows match when they hold a
    query term; they rank by BM25, each term weighted by its document frequency in the
    searched namespaces (counted from the index), then by importance. When fewer rows match
    than ``limit``, rows whose words are close to a query term that no entry holds (a typo,
    a prefix) follow, by ``pg_trgm`` word similarity. Where ``btree_gin`` can be had, the
    word index leads with ``namespace``, so a search reads the rows it matches, not every
    row of the namespaces it searches. Tables made before search gain the columns on first
    use (their searchable rows filled once); a server where ``pg_trgm`` cannot be created gives an
    :class:`~memlane.stores.IndexFallbackWarning` and matches whole words only, and one
    without ``btree_gin`` gives the warning and finds the same entries, more slowly as
    namespaces grow.

    The store is a :class:`~memlane.stores.protocol.VectorStore`: vectors live in
    ``{schema_name}.entry_vectors`` beside the entries, one per entry, with their model's
    name and dimensions, and go with their entry (a foreign key cascades deletes, clears
    and clean-ups; a trigger drops a vector when a save changes the entry's search text).
    Where the server has pgvector (the ``vector`` extension, created on first use where
    allowed), the column is a ``vector`` and the server computes the cosine similarity,
    through an HNSW index per model once the table is large; elsewhere the vectors are
    float32 bytes that memlane scores, with one
    :class:`~memlane.stores.VectorFallbackWarning` per store naming the missing extension.
    A store made without pgvector on a server that later has it converts its table and
    drops its vectors, which :meth:`missing_vectors` then lists for re-embedding.

    Content and metadata are JSONB: objects read back with JSONB's key order (sorted), and
    ``-0.0`` reads back as ``0.0``; every other plain-JSON value reads back equal and of
    the same type (large and tiny floats are sent positionally so that they stay floats).

    Args:
        url: ``postgresql://user:password@host:port/database``; a ``connect_timeout`` option
            in it (seconds, as libpq spells it) wins over ``timeout`` for connecting.
        pool_size: Most connections per event loop. A connection that finished a
            statement stays with the store for the next one instead of going back to the
            pool (see ``stores/_pg_pool.py``).
        pool_min_size: Connections opened up front per event loop.
        timeout: Seconds allowed to connect and for each statement.
        schema_name: Schema of the table; a plain SQL identifier.
        read_only: Open an existing store for reading only: sessions are read-only
            (``default_transaction_read_only``), no schema, table, index or extension is
            created or migrated, and every write raises
            :class:`~memlane.errors.ReadOnlyStoreError` before reaching the server. A
            missing table raises :class:`~memlane.errors.NotAStoreError` on first use.

    :meth:`delete_many` is one statement: all of the ids go, or none.

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
        read_only: bool = False,
    ) -> None:
        self._asyncpg = require("asyncpg", "postgres")
        super().__init__(url, timeout, read_only)
        self.pool_size = check_positive_int(pool_size, "pool_size")
        if isinstance(pool_min_size, bool) or not isinstance(pool_min_size, int):
            raise TypeError(f"pool_min_size must be int, not {type_name(pool_min_size)}")
        if not 0 <= pool_min_size <= pool_size:
            raise ValueError(
                f"pool_min_size must be between 0 and pool_size ({pool_size}), got {pool_min_size!r}"
            )
        self.pool_min_size = pool_min_size
        self.schema_name = check_schema_name(schema_name)
        self._sql = PgSql(schema_name)
        self._dsn, connect_timeout = split_connect_timeout(self._url)
        self.connect_timeout = self.timeout if connect_timeout is None else connect_timeout
        # Until migration finds the indexes: the statement that searches by words alone.
        self._search: str = self._sql.search(None, led=False)
        self._vectors = PgVectorOps(self._sql.vectors, self._asyncpg, self._sql.lock_id)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> Any:
        asyncpg = self._asyncpg
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self.pool_min_size,
                max_size=self.pool_size,
                timeout=self.connect_timeout,
                # The held pool's watchdog bounds its statements; the connections' class
                # bounds every other (see _pg_pool).
                command_timeout=None,
                connection_class=bounded_connection_class(asyncpg.Connection, self.timeout),
                reset=keep_session,
                # The server refuses every write of a read-only store's sessions, whatever
                # a bug in memlane might send.
                server_settings={"default_transaction_read_only": "on"} if self.read_only else None,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if isinstance(exc, asyncpg.ClientConfigurationError):
                raise
            raise self._unreachable(exc, "connect to") from exc
        return HeldPool(pool, asyncpg.InterfaceError, self.timeout)

    async def _check_store(self, pool: Any) -> None:
        """What a read-only store does instead of migrating: finds the table, and the search
        statement its indexes allow, writing nothing.

        Raises:
            NotAStoreError: The schema holds no memlane table.
            StoreError: The table was made by an older memlane and needs migrating.
        """
        where = f"PostgreSQL at {self.address}: {self.schema_name}.memory_entries"
        if not await pool.fetchval(self._sql.exists):
            raise NotAStoreError(f"{where}: not a memlane store: no such table")
        state = await pool.fetchrow(self._sql.state)
        if state["version"] != self._sql.version:
            raise StoreError(f"{where}: made by an older memlane: open it once writable")
        self._search = self._sql.search(
            state["trigram"] if state["trigram_index"] else None, led=state["words_led"]
        )
        vectors = await pool.fetchrow(self._sql.vectors.state)
        self._vectors.vector_schema = vectors["vector_schema"]
        self._vectors.has_table = vectors["has_table"]

    async def _migrate(self, pool: Any) -> None:
        if self.read_only:
            await self._check_store(pool)
            return
        state = await pool.fetchrow(self._sql.state)
        vectors = await pool.fetchrow(self._sql.vectors.state)
        vector_schema = vectors["vector_schema"]
        # No vectors' tables yet, or byte vectors on a server that now offers pgvector.
        vectors_behind = not vectors["has_table"] or (
            vectors["available"] and vector_schema is None
        )
        trigram, led = state["trigram"], state["words_led"]
        missing: dict[str, str] = {}
        # Up to date already (the usual case): skip the DDL, whose index statements would
        # briefly lock out writers of the table.
        current = state["version"] == self._sql.version
        if not (current and state["words_led"] and state["trigram_index"] and not vectors_behind):
            async with pool.acquire() as con, con.transaction():
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalogs, and
                # concurrent CREATE OR REPLACE FUNCTION fails outright: serialise migrations.
                await con.execute("SELECT pg_advisory_xact_lock($1)", self._sql.lock_id)
                if state["version"] != self._sql.version:
                    await con.execute(self._sql.migrate)
                    await con.execute(self._sql.search_ddl(state["icu"]))
                    await con.execute(self._sql.mark)
                if vectors_behind:
                    vector_schema, problem = await self._ensure_extension(con, VECTOR)
                    if vector_schema is None:
                        self._vectors.problem = (
                            f"has no pgvector: the {VECTOR!r} extension cannot be created "
                            f"({problem.splitlines()[0]})"
                        )
                    await con.execute(self._sql.vectors.ddl(vector_schema))
                btree_gin, problem = await self._ensure_extension(con, _pg_search.BTREE_GIN)
                led = btree_gin is not None
                if btree_gin is None:
                    missing[_pg_search.BTREE_GIN] = (
                        f"no btree_gin ({problem}), so search reads every entry of the searched "
                        "namespaces from their index and slows as they grow"
                    )
                await con.execute(self._sql.word_index(btree_gin))
                trigram, problem = await self._ensure_trigram_index(con)
                if trigram is None:
                    missing[_pg_search.TRIGRAM] = (
                        f"no trigram index ({problem}), so search finds whole words only, "
                        "not misspelt or partial ones"
                    )
        if missing:
            warnings.warn(
                f"PostgreSQL server at {self.address} gives {'; and '.join(missing.values())}. "
                f"Once {' and '.join(missing)} can be created (CREATE EXTENSION, by a user "
                "allowed to), the next store to start creates the indexes.",
                IndexFallbackWarning,
                stacklevel=2,
            )
        self._search = self._sql.search(trigram, led=led)
        self._vectors.vector_schema = vector_schema

    async def _ensure_extension(self, con: Any, name: str) -> tuple[str | None, str]:
        """The extension's schema once it exists, else ``None`` and why not. Runs inside the
        migration's transaction."""
        asyncpg = self._asyncpg
        schema = await con.fetchval(_pg_search.extension_schema(name))
        if schema is not None:
            return schema, ""
        try:
            await con.execute("SELECT pg_advisory_xact_lock($1)", _pg_search.EXTENSION_LOCK_ID)
            # A savepoint: a refusal leaves the migration's transaction usable.
            async with con.transaction():
                await con.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
        except asyncpg.PostgresError as exc:
            if self._is_connection_error(exc):
                raise
            return None, f"{type(exc).__name__}: {exc}"
        return await con.fetchval(_pg_search.extension_schema(name)), ""

    async def _ensure_trigram_index(self, con: Any) -> tuple[str | None, str]:
        """pg_trgm's schema once the extension and the table's trigram index exist, else
        ``None`` and why not. Runs inside the migration's transaction."""
        trigram, problem = await self._ensure_extension(con, _pg_search.TRIGRAM)
        if trigram is None:
            return None, problem
        try:
            async with con.transaction():
                await con.execute(self._sql.trigram_index(trigram))
        except self._asyncpg.PostgresError as exc:
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

    def _is_driver_error(self, exc: BaseException) -> bool:
        asyncpg = self._asyncpg
        return isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError)

    async def _recover(self, pool: Any) -> None:
        await pool.recover()

    # ---- conversions

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        return [entry_params(namespace, e) for e in entries]

    def _entry(self, record: Any) -> MemoryEntry:
        return record_entry(record, f"PostgreSQL table {self.schema_name}.memory_entries")

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

    async def async_save_if_absent(
        self, namespace: str, entry: MemoryEntry, stop: str
    ) -> tuple[bool, list[MemoryEntry]]:
        """``save_if(namespace, entry, None)`` and, after a loss, ``load_range(namespace,
        entry.key, stop)``: one statement, one round trip, for a win; a loss reads the keys
        with a second.

        Returns:
            ``(True, [])`` when the entry was written (at version 1); ``(False, entries)``
            when an unexpired entry held its key: the unexpired keyed entries from
            ``entry.key`` up to ``stop``, in key order, the winner first.

        Raises:
            TypeError: ``entry.key`` is ``None``, ``stop`` is not a ``str``, or content or
                metadata is not plain JSON.
            InvalidValueError: A value PostgreSQL cannot hold (a ``ValueError``).
            ReadOnlyStoreError: The store was opened read-only.
            StoreConnectionError: The server is unreachable (after one retry).
        """
        check_namespace(namespace)
        check_keyed_entry(entry)
        check_key_range(entry.key, stop)
        params = self._prepare(namespace, [entry])[0]
        self._check_names(stop=stop)
        self._check_write()
        attempts = 0

        def attempt(pool: Any) -> Awaitable[tuple[bool, list[MemoryEntry]]]:
            nonlocal attempts
            attempts += 1
            return self._do_save_if_absent(pool, namespace, params, stop, attempts > 1)

        return await self._call(attempt)

    save_if_absent = blocking(async_save_if_absent)

    async def _do_save_if_absent(
        self, pool: Any, namespace: str, params: tuple[Any, ...], stop: str, retry: bool
    ) -> tuple[bool, list[MemoryEntry]]:
        if await pool.fetchval(self._sql.save_if_absent, namespace, *params):
            return True, []
        key = params[2]
        entries = await self._do_load_range(pool, namespace, key, stop, utc_now())
        if not entries or entries[0].key != key:
            # The holder expired, or went since the insert met it, or another key holds
            # this entry_id: save_if decides.
            if await self._do_save_if(pool, namespace, params, None, retry):
                return True, []
            return False, await self._do_load_range(pool, namespace, key, stop, utc_now())
        # A retry after a dropped connection: the first attempt's insert may have landed.
        if retry and entries[0].entry_id == params[0] and entries[0].version == 1:
            return True, []
        return False, entries

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

    async def _do_delete_many(self, pool: Any, namespace: str, ids: list[str]) -> list[str]:
        gone = {r[0] for r in await pool.fetch(self._sql.delete_many, namespace, ids)}
        return [i for i in ids if i in gone]

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

    async def _do_save_vectors(
        self, pool: Any, namespace: str, model: str, vectors: list[EntryVector], now: datetime
    ) -> int:
        self._vector_fallback()
        return await self._vectors.save(pool, namespace, model, vectors, now)

    async def _do_vector_search(
        self,
        pool: Any,
        namespaces: list[str],
        query: list[float],
        model: str,
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        self._vector_fallback()
        found = await self._vectors.search(pool, namespaces, query, model, limit, minimum, now)
        # float32 arithmetic can put a unit vector's similarity to itself a hair above 1.
        return [SearchHit(self._entry(row), max(-1.0, min(1.0, score))) for row, score in found]

    async def _do_missing_vectors(
        self, pool: Any, namespaces: list[str], model: str, limit: int, now: datetime
    ) -> list[MemoryEntry]:
        rows = await self._vectors.missing(pool, namespaces, model, limit, now)
        return [self._entry(row) for row in rows]

    def _vector_fallback(self) -> None:
        # A read-only store of a schema made before vectors has none to score.
        if self._vectors.has_table and self._vectors.vector_schema is None:
            self._warn_vector_fallback(self._vectors.problem)
