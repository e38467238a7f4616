"""Network stores shared by a fleet of agent hosts: :class:`PostgreSQLStore` and :class:`MongoDBStore`.

Both follow the rules of every memlane store (see :mod:`memlane.store`): saving an
``entry_id`` again replaces that entry in place; an ``entry_id`` held by another namespace
moves to the end of this one; a key is unique within a namespace (saving a keyed entry
replaces whatever held the key); ``load`` keeps insertion order; expired entries are never
returned. They hold across processes: every rule is enforced by the server (a unique index
and a single statement or single-document update), never by a read-then-write in Python.

The ``async_*`` methods are the native path and run on the caller's event loop. Database
drivers bind connections to the loop that opened them, so each loop gets its own pool (or
client), opened on first use. The sync methods run the async ones on a private event-loop
thread, opening lazily: they work outside an event loop and inside one (where they block
the caller like any sync I/O, but cannot deadlock it).

A connection-class failure (server restarted, connection dropped) is retried once on fresh
connections; every operation is idempotent (saves are upserts by ``entry_id``), so a retry
never duplicates an entry. A second failure raises
:class:`~memlane.errors.StoreConnectionError` naming host and port.

The drivers are optional extras: ``pip install 'memlane[postgres]'`` (asyncpg) and
``pip install 'memlane[mongodb]'`` (PyMongo). This module imports them only when a store is
created, so ``import memlane`` works without them.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import threading
import time
import urllib.parse
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from decimal import Decimal
from types import ModuleType, TracebackType
from typing import Any, Generic, Self, TypeVar

from memlane.errors import InvalidValueError, StoreConnectionError
from memlane.store import (
    check_entry,
    check_key,
    check_key_like,
    check_namespace,
    entry_to_row,
    row_to_entry,
)
from memlane.types import MemoryEntry, as_utc, utc_now

__all__ = [
    "IndexFallbackWarning",
    "MongoDBStore",
    "PostgreSQLStore",
    "check_mongo_name",
    "check_schema_name",
]

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S", bound="_NetworkStore[Any]")


class IndexFallbackWarning(UserWarning):
    """A MongoDB-compatible server rejected an index option; the plain index is used instead."""


# ---------------------------------------------------------------------------- helpers


def _require(module: str, extra: str) -> ModuleType:
    """Imports an optional driver, or says which extra installs it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; install it with: pip install 'memlane[{extra}]'"
        ) from exc


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return value


def _check_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(value).__name__}")
    if not 0 < value < float("inf"):
        raise ValueError(f"timeout must be a positive finite number of seconds, got {value!r}")
    return float(value)


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise TypeError(f"url must be str, not {type(url).__name__}")
    if not url:
        raise ValueError("url must be a non-empty connection URL")
    return url


def _hosts(url: str, default_port: int) -> str:
    """``host:port`` (comma-separated for a host list) of a connection URL, for messages."""
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    hosts = []
    for item in netloc.split(",") if netloc else ["localhost"]:
        try:
            parts = urllib.parse.urlsplit(f"//{item}")
            host, port = parts.hostname or "localhost", parts.port or default_port
        except ValueError:
            hosts.append(item)
            continue
        hosts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(hosts)


def _utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot travel as UTF-8 (a lone surrogate), or ``None``."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate {text[exc.start]!r} at position {exc.start}"
    return None


def _text_problem(text: str) -> str | None:
    """Why PostgreSQL ``text`` cannot hold ``text`` (NUL or a lone surrogate), or ``None``."""
    if "\x00" in text:
        return f"a NUL character at position {text.index(chr(0))}"
    return _utf8_problem(text)


class _SeqClock:
    """Strictly increasing ``time_ns``-based sequence numbers for MongoDB insertion order.

    Counters cannot be used: some MongoDB-compatible servers lose concurrent ``$inc``
    updates. Wall-clock nanoseconds agree across processes of a host (and across hosts as
    far as their clocks do); ties between processes are broken by ``_id`` when sorting.
    """

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last


_seq_clock = _SeqClock()


class _LoopThread:
    """A private event loop in a daemon thread: where the sync methods run the async ones."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()
                    try:
                        # A call still in flight gets CancelledError instead of waiting forever.
                        pending = asyncio.all_tasks(loop)
                        for task in pending:
                            task.cancel()
                        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                        loop.run_until_complete(loop.shutdown_asyncgens())
                        loop.run_until_complete(loop.shutdown_default_executor())
                    finally:
                        loop.close()

                thread = threading.Thread(target=main, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the private loop and waits for it, from any other thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a sync memlane store method was called on the store's own event-loop thread; "
                "await the async_* method instead"
            )
        loop = self._start()
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self) -> None:
        """Stops the loop and joins its thread; a later :meth:`run` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join()


# ---------------------------------------------------------------------------- shared base


class _NetworkStore(Generic[R]):
    """Per-loop driver resources, retry-once, and sync twins of the async methods.

    Subclasses provide ``_open`` (a pool or client for the running loop, connected),
    ``_migrate``, ``_close_resource``, ``_abandon`` and ``_is_connection_error``, and the
    ``_do_*`` operations that use a resource.
    """

    persistent = True
    _kind = "database"
    _default_port = 0

    def __init__(self, url: str, timeout: float) -> None:
        self._url = _check_url(url)
        self.timeout = _check_timeout(timeout)
        self.address = _hosts(self._url, self._default_port)
        self._resources: dict[asyncio.AbstractEventLoop, R] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._lock = threading.Lock()
        self._migrated = False
        self._runner = _LoopThread(f"memlane-{self._kind.lower()}")

    # ---- subclass hooks

    async def _open(self, loop: asyncio.AbstractEventLoop) -> R:
        raise NotImplementedError

    async def _migrate(self, resource: R) -> None:
        raise NotImplementedError

    async def _close_resource(self, resource: R) -> None:
        raise NotImplementedError

    def _abandon(self, resource: R) -> None:
        """Releases a resource whose loop can no longer run coroutines."""

    def _is_connection_error(self, exc: BaseException) -> bool:
        raise NotImplementedError

    async def _recover(self, resource: R) -> None:
        """Drops connections a failure may have left stale, before the retry."""

    # ---- resources

    def _unreachable(self, exc: BaseException, doing: str) -> StoreConnectionError:
        return StoreConnectionError(
            f"cannot {doing} {self._kind} at {self.address} (timeout {self.timeout:g}s): "
            f"{type(exc).__name__}: {exc}"
        )

    async def _resource(self) -> R:
        loop = asyncio.get_running_loop()
        resource = self._resources.get(loop)
        if resource is not None:
            return resource
        with self._lock:
            opening = self._opening.setdefault(loop, asyncio.Lock())
        async with opening:
            resource = self._resources.get(loop)
            if resource is None:
                self._prune_closed_loops()
                resource = await self._open(loop)
                try:
                    if not self._migrated:
                        await self._retrying(self._migrate, resource, "migrate the schema of")
                        self._migrated = True
                except BaseException:
                    await self._close_resource(resource)
                    raise
                with self._lock:
                    self._resources[loop] = resource
        return resource

    def _prune_closed_loops(self) -> None:
        with self._lock:
            dead = [loop for loop in self._resources if loop.is_closed()]
            resources = [self._resources.pop(loop) for loop in dead]
            for loop in dead:
                self._opening.pop(loop, None)
        for resource in resources:
            self._abandon(resource)

    async def _retrying(
        self, op: Callable[[R], Awaitable[T]], resource: R, doing: str = "reach"
    ) -> T:
        try:
            return await op(resource)
        except Exception as exc:
            if not self._is_connection_error(exc):
                raise
        # Every operation is idempotent (upserts by entry_id), so one retry on fresh
        # connections cannot duplicate anything; it is what survives a server restart.
        await self._recover(resource)
        try:
            return await op(resource)
        except Exception as exc:
            if self._is_connection_error(exc):
                raise self._unreachable(exc, doing) from exc
            raise

    async def _call(self, op: Callable[[R], Awaitable[T]]) -> T:
        return await self._retrying(op, await self._resource())

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    # ---- lifecycle

    async def initialize(self) -> None:
        """Connects (a pool for the running event loop) and migrates the schema.

        Idempotent, and safe to call concurrently from several processes. Optional: every
        method initialises on first use.

        Raises:
            StoreConnectionError: The server cannot be reached within ``timeout``.
        """
        await self._resource()

    def initialize_sync(self) -> None:
        """Sync :meth:`initialize`, for the private loop the sync methods use."""
        self._sync(self.initialize())

    async def close(self) -> None:
        """Closes every pool or client this store opened, on whichever loop owns it.

        The store stays usable: a later call opens new connections.
        """
        current = asyncio.get_running_loop()
        for loop, resource in self._take_resources():
            if loop is current:
                await self._close_resource(resource)
            elif loop.is_running():
                future = asyncio.run_coroutine_threadsafe(self._close_resource(resource), loop)
                await asyncio.wrap_future(future)
            else:
                self._abandon(resource)
        await asyncio.to_thread(self._runner.stop)

    def close_sync(self) -> None:
        """Sync :meth:`close`. Inside a running loop, that loop's connections are aborted."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, resource in self._take_resources():
            if loop.is_running() and loop is not current:
                asyncio.run_coroutine_threadsafe(self._close_resource(resource), loop).result()
            elif current is None and not loop.is_closed():
                loop.run_until_complete(self._close_resource(resource))
            else:
                self._abandon(resource)
        self._runner.stop()

    def _take_resources(self) -> list[tuple[asyncio.AbstractEventLoop, R]]:
        with self._lock:
            items = list(self._resources.items())
            self._resources.clear()
            self._opening.clear()
        return items

    async def __aenter__(self) -> Self:
        await self.initialize()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __enter__(self) -> Self:
        self.initialize_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_sync()

    # ---- the store protocol (async: native)

    async def _do_save_many(self, resource: R, namespace: str, prepared: Any) -> None:
        """Saves what :meth:`_prepare` made of the entries."""
        raise NotImplementedError

    async def _do_load(self, resource: R, namespace: str, now: datetime) -> list[MemoryEntry]:
        raise NotImplementedError

    async def _do_load_by_key(
        self, resource: R, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        raise NotImplementedError

    async def _do_delete(self, resource: R, namespace: str, entry_id: str) -> bool:
        raise NotImplementedError

    async def _do_clear(self, resource: R, namespace: str) -> int:
        raise NotImplementedError

    async def _do_cleanup(self, resource: R, now: datetime) -> int:
        raise NotImplementedError

    async def _do_namespaces(self, resource: R) -> list[str]:
        raise NotImplementedError

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        """Validates entries before any I/O; what ``_do_save_many`` receives."""
        return entries

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts ``entry`` or replaces the entry with the same ``entry_id`` or key, atomically.

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            InvalidValueError: A value this backend cannot hold at all (a ``ValueError``).
            StoreConnectionError: The server is unreachable (after one retry).
        """
        prepared = self._prepare(check_namespace(namespace), [check_entry(entry)])
        await self._call(lambda r: self._do_save_many(r, namespace, prepared))

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace in one round trip (see the class docs)."""
        prepared = self._prepare(check_namespace(namespace), [check_entry(e) for e in entries])
        if entries:
            await self._call(lambda r: self._do_save_many(r, namespace, prepared))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order."""
        check_namespace(namespace)
        now = utc_now()
        return await self._call(lambda r: self._do_load(r, namespace, now))

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        check_namespace(namespace)
        check_key(key)
        now = utc_now()
        return await self._call(lambda r: self._do_load_by_key(r, namespace, key, now))

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed (after a retried failure, possibly ``False``)."""
        check_namespace(namespace)
        check_key_like(entry_id)
        return await self._call(lambda r: self._do_delete(r, namespace, entry_id))

    async def async_clear(self, namespace: str) -> int:
        """Removes every entry of ``namespace``; how many."""
        check_namespace(namespace)
        return await self._call(lambda r: self._do_clear(r, namespace))

    async def cleanup_expired(self) -> int:
        """Deletes expired entries of every namespace; how many."""
        now = utc_now()
        return await self._call(lambda r: self._do_cleanup(r, now))

    async def async_namespaces(self) -> list[str]:
        """Namespaces holding at least one entry, in order of their oldest entry."""
        return await self._call(self._do_namespaces)

    # ---- sync twins, on the private loop

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Sync :meth:`async_save`."""
        self._sync(self.async_save(namespace, entry))

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Sync :meth:`async_save_many`."""
        self._sync(self.async_save_many(namespace, entries))

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Sync :meth:`async_load`."""
        return self._sync(self.async_load(namespace))

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Sync :meth:`async_load_by_key`."""
        return self._sync(self.async_load_by_key(namespace, key))

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Sync :meth:`async_delete`."""
        return self._sync(self.async_delete(namespace, entry_id))

    def clear(self, namespace: str) -> int:
        """Sync :meth:`async_clear`."""
        return self._sync(self.async_clear(namespace))

    def cleanup_expired_sync(self) -> int:
        """Sync :meth:`cleanup_expired`."""
        return self._sync(self.cleanup_expired())

    def namespaces(self) -> list[str]:
        """Sync :meth:`async_namespaces`."""
        return self._sync(self.async_namespaces())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"


# ---------------------------------------------------------------------------- PostgreSQL

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_EXPONENT_NUMBER = re.compile(r"[0-9][eE][+-]?[0-9]")


def check_schema_name(schema_name: object) -> str:
    """A PostgreSQL schema name must be a plain identifier: it is part of every statement.

    Raises:
        TypeError: Not a ``str``.
        InvalidValueError: Anything but ASCII letters, digits and underscores, not starting
            with a digit, at most 63 characters (a ``ValueError``).
    """
    if not isinstance(schema_name, str):
        raise TypeError(f"schema_name must be str, not {type(schema_name).__name__}")
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


def _find_text_problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first string (or dict key) PostgreSQL cannot hold: ``(where, why)``."""
    if isinstance(value, str):
        problem = _text_problem(value)
        return None if problem is None else (path, problem)
    if isinstance(value, dict):
        for k, item in value.items():
            problem = _text_problem(k)
            if problem is not None:
                return f"{path} (dict key {k!r})", problem
            found = _find_text_problem(item, f"{path}[{k!r}]")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _find_text_problem(item, f"{path}[{i}]")
            if found:
                return found
    return None


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
    if "\\u0000" in text or _utf8_problem(text) is not None:
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
        columns = "entry_id, scope, key, content::text, metadata::text, created_at, expires_at, importance"
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
    key TEXT,
    content JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{{}}',
    created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    expires_at TIMESTAMPTZ,
    importance FLOAT NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1)
);
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
                importance = EXCLUDED.importance,
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
        # Bump when the DDL above changes: a table marked with this version needs nothing.
        self.version = "memlane schema 1"
        self.migrate += f"COMMENT ON TABLE {t} IS '{self.version}';\n"
        self.current_version = f"SELECT obj_description(to_regclass('{t}'), 'pg_class')"
        self.save_one = f"SELECT {s}.save_entry($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        self.save_many = (
            f"SELECT {s}.save_entries($1, $2::text[], $3::text[], $4::text[], $5::jsonb[], "
            "$6::jsonb[], $7::timestamptz[], $8::timestamptz[], $9::float8[])"
        )
        live = "(expires_at IS NULL OR expires_at > $2)"
        self.load = f"SELECT {columns} FROM {t} WHERE namespace = $1 AND {live} ORDER BY seq"
        self.load_by_key = f"SELECT {columns} FROM {t} WHERE namespace = $1 AND {live} AND key = $3"
        self.delete = f"DELETE FROM {t} WHERE namespace = $1 AND entry_id = $2"
        self.clear = f"DELETE FROM {t} WHERE namespace = $1"
        self.cleanup = f"DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= $1"
        self.namespaces = f"SELECT namespace FROM {t} GROUP BY namespace ORDER BY min(seq)"


def _affected(status: str) -> int:
    """Row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


class PostgreSQLStore(_NetworkStore[Any]):
    """A PostgreSQL table shared by every process that points at it (asyncpg).

    Schema ``{schema_name}.memory_entries`` with the columns of
    :class:`~memlane.types.MemoryEntry` plus ``namespace`` and a ``seq BIGSERIAL`` insertion
    order; ``(namespace, key) WHERE key IS NOT NULL`` is a unique index, so two rows never
    share a key, whatever the number of concurrent writers. A save is one call of a
    server-side function (one round trip, one transaction); :meth:`save_many` saves a list
    the same way in one round trip, all or nothing.

    Content and metadata are JSONB: objects read back with JSONB's key order (sorted), and
    ``-0.0`` reads back as ``0.0``; every other plain-JSON value reads back equal and of
    the same type (large and tiny floats are sent positionally so that they stay floats).

    Args:
        url: ``postgresql://user:password@host:port/database``.
        pool_size: Most connections per event loop.
        pool_min_size: Connections opened up front per event loop.
        timeout: Seconds allowed to connect and for each statement.
        schema_name: Schema of the table; a plain SQL identifier.

    Raises:
        ValueError: ``schema_name`` is not a plain identifier, or a size is out of range.
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
        self._asyncpg = _require("asyncpg", "postgres")
        super().__init__(url, timeout)
        self.pool_size = _check_positive_int(pool_size, "pool_size")
        if isinstance(pool_min_size, bool) or not isinstance(pool_min_size, int):
            raise TypeError(f"pool_min_size must be int, not {type(pool_min_size).__name__}")
        if not 0 <= pool_min_size <= pool_size:
            raise ValueError(
                f"pool_min_size must be between 0 and pool_size ({pool_size}), got {pool_min_size!r}"
            )
        self.pool_min_size = pool_min_size
        self.schema_name = check_schema_name(schema_name)
        self._sql = _PgSql(schema_name)

    async def _open(self, loop: asyncio.AbstractEventLoop) -> Any:
        asyncpg = self._asyncpg
        try:
            return await asyncpg.create_pool(
                self._url,
                min_size=self.pool_min_size,
                max_size=self.pool_size,
                timeout=self.timeout,
                command_timeout=self.timeout,
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if isinstance(exc, asyncpg.ClientConfigurationError):
                raise
            raise self._unreachable(exc, "connect to") from exc

    async def _migrate(self, pool: Any) -> None:
        # Up to date already (the usual case): skip the DDL, whose index statements would
        # briefly lock out writers of the table.
        if await pool.fetchval(self._sql.current_version) == self._sql.version:
            return
        async with pool.acquire() as con, con.transaction():
            # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalogs, and
            # concurrent CREATE OR REPLACE FUNCTION fails outright: serialise migrations.
            await con.execute("SELECT pg_advisory_xact_lock($1)", self._sql.lock_id)
            await con.execute(self._sql.migrate)

    async def _close_resource(self, pool: Any) -> None:
        try:
            await asyncio.wait_for(pool.close(), self.timeout)
        except (TimeoutError, OSError):
            pool.terminate()

    def _abandon(self, pool: Any) -> None:
        try:
            pool.terminate()
        except RuntimeError:  # its loop is closed: nothing left that could run the close
            pass

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
        entry_id, scope, key, content, metadata, _created, _expires, importance = entry_to_row(
            entry
        )
        for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
            problem = None if value is None else _text_problem(value)
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
        entry_id, scope, key, content, metadata, created_at, expires_at, importance = record
        row = (
            entry_id,
            scope,
            key,
            content,
            metadata,
            created_at.isoformat(),
            None if expires_at is None else expires_at.timestamp(),
            importance,
        )
        return row_to_entry(row, f"PostgreSQL table {self.schema_name}.memory_entries")

    # ---- operations

    async def _do_save_many(self, pool: Any, namespace: str, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:
            await pool.execute(self._sql.save_one, namespace, *rows[0])
        else:
            await pool.execute(self._sql.save_many, namespace, *(list(col) for col in zip(*rows)))

    async def _do_load(self, pool: Any, namespace: str, now: datetime) -> list[MemoryEntry]:
        return [self._entry(r) for r in await pool.fetch(self._sql.load, namespace, now)]

    async def _do_load_by_key(
        self, pool: Any, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        if _text_problem(key) is not None:
            return None  # such a key cannot have been stored
        record = await pool.fetchrow(self._sql.load_by_key, namespace, now, key)
        return None if record is None else self._entry(record)

    async def _do_delete(self, pool: Any, namespace: str, entry_id: str) -> bool:
        if _text_problem(entry_id) is not None:
            return False
        return _affected(await pool.execute(self._sql.delete, namespace, entry_id)) > 0

    async def _do_clear(self, pool: Any, namespace: str) -> int:
        return _affected(await pool.execute(self._sql.clear, namespace))

    async def _do_cleanup(self, pool: Any, now: datetime) -> int:
        return _affected(await pool.execute(self._sql.cleanup, now))

    async def _do_namespaces(self, pool: Any) -> list[str]:
        return [r[0] for r in await pool.fetch(self._sql.namespaces)]

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order."""
        if _text_problem(check_namespace(namespace)) is not None:
            return []
        return await super().async_load(namespace)


# ---------------------------------------------------------------------------- MongoDB


class _Mongo:
    """One event loop's view of MongoDB: a client, its collection, and whether we own it."""

    def __init__(self, client: Any, collection: Any, owned: bool) -> None:
        self.client = client
        self.collection = collection
        self.owned = owned


_PROJECTION = {
    "_id": 0,
    "entry_id": 1,
    "scope": 1,
    "key": 1,
    "content": 1,
    "metadata": 1,
    "created_at": 1,
    "expires_at": 1,
    "importance": 1,
}
_HOLDER = {"_id": 1, "entry_id": 1, "namespace": 1, "seq": 1}
_ORDER = [("seq", 1), ("_id", 1)]


def _live(now: float) -> dict[str, Any]:
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


def _doc_id(namespace: str, key: str | None, entry_id: str) -> str:
    """The ``_id`` of an entry's document: ``["namespace","key"]`` if keyed, else ``[null,"id"]``.

    A keyed entry's ``_id`` is its (namespace, key), so the primary key itself makes a key
    unique within a namespace (no partial index needed, which not every MongoDB-compatible
    server has), and key lookups and overwrites address one document by ``_id``, which every
    server indexes (FerretDB's SQLite backend pushes down no other filter). The JSON forms of
    the two kinds can never be equal.
    """
    return json.dumps(
        [namespace, key] if key is not None else [None, entry_id], separators=(",", ":")
    )


async def _to_list(cursor: Any) -> list[Any]:
    if inspect.isawaitable(cursor):  # PyMongo's async aggregate() is a coroutine; Motor's is not
        cursor = await cursor
    return list(await cursor.to_list(None))


def check_mongo_name(name: object, what: str) -> str:
    """A MongoDB database or collection name: non-empty, without NUL or ``$``.

    Raises:
        TypeError: Not a ``str``.
        InvalidValueError: Empty, or containing NUL or ``$`` (a ``ValueError``).
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be str, not {type(name).__name__}")
    if not name or "\x00" in name or "$" in name:
        raise InvalidValueError(f"{what} must be a non-empty name without NUL or '$', got {name!r}")
    return name


class MongoDBStore(_NetworkStore[_Mongo]):
    """A MongoDB collection shared by every process that points at it.

    Driver: PyMongo's own async API (``AsyncMongoClient``). A client you pass as ``client=``
    (an ``AsyncMongoClient`` or a Motor ``AsyncIOMotorClient``) is used on the event loop it
    is first used on (drivers bind a client to one loop) and is never closed by the store;
    other loops, and the private loop of the sync methods, get clients made from ``url``.

    One document per entry: ``entry_id``, ``namespace``, ``scope``, ``key``, ``content`` and
    ``metadata`` as JSON text (so any dict key, ``$`` and dots included, and integers beyond
    64 bits round-trip exactly), ``created_at`` as ISO text (microseconds kept),
    ``expires_at`` as Unix seconds, ``importance`` and ``seq`` (insertion order); a keyed
    entry's ``_id`` is its (namespace, key), so two entries can never hold one key. Without
    multi-document transactions, a save is one insert for a new entry and otherwise a few
    single-document operations, each atomic; overwriting a key is one document update, so
    readers never see it missing (only re-keying an existing entry onto a held key, or
    moving a keyed entry between namespaces, briefly removes it).
    :meth:`save_many` writes a batch in one round trip but, unlike PostgreSQL, is not all
    or nothing.

    Args:
        url: ``mongodb://host:port/``.
        database: Database name.
        collection: Collection name.
        pool_size: Most connections per client.
        client: An async client to use instead of making one.
        timeout: Seconds allowed to select a server, connect and wait on a socket.

    Raises:
        ImportError: PyMongo is not installed (``pip install 'memlane[mongodb]'``).
    """

    _kind = "MongoDB"
    _default_port = 27017

    def __init__(
        self,
        url: str,
        *,
        database: str = "memlane",
        collection: str = "entries",
        pool_size: int = 10,
        client: Any = None,
        timeout: float = 30.0,
    ) -> None:
        self._errors = _require("pymongo.errors", "mongodb")
        super().__init__(url, timeout)
        self.database = check_mongo_name(database, "database")
        self.collection = check_mongo_name(collection, "collection")
        self.pool_size = _check_positive_int(pool_size, "pool_size")
        self._client = client
        self._client_loop: asyncio.AbstractEventLoop | None = None

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Mongo:
        if self._client is not None and loop is not self._runner.loop:
            with self._lock:
                if self._client_loop is None or self._client_loop.is_closed():
                    self._client_loop = loop
            if self._client_loop is loop:
                mongo = _Mongo(self._client, self._client[self.database][self.collection], False)
                await self._ping(mongo)
                return mongo
        pymongo = _require("pymongo", "mongodb")
        ms = int(self.timeout * 1000)
        client = pymongo.AsyncMongoClient(
            self._url,
            maxPoolSize=self.pool_size,
            serverSelectionTimeoutMS=ms,
            connectTimeoutMS=ms,
            socketTimeoutMS=ms,
        )
        mongo = _Mongo(client, client[self.database][self.collection], True)
        try:
            await self._ping(mongo)
        except BaseException:
            await client.close()
            raise
        return mongo

    async def _ping(self, mongo: _Mongo) -> None:
        try:
            await mongo.client.admin.command("ping")
        except self._errors.ConnectionFailure as exc:
            raise self._unreachable(exc, "connect to") from exc

    async def _migrate(self, mongo: _Mongo) -> None:
        pymongo = _require("pymongo", "mongodb")
        asc = pymongo.ASCENDING
        coll = mongo.collection
        await self._ensure_index(coll, [("entry_id", asc)], "entry_id_unique", unique=True)
        await self._ensure_index(coll, [("namespace", asc), ("seq", asc)], "namespace_seq")
        fallbacks = []
        for keys, name, partial in (
            ([("namespace", asc), ("key", asc)], "namespace_key", {"key": {"$type": "string"}}),
            ([("expires_at", asc)], "expires_at", {"expires_at": {"$type": "number"}}),
        ):
            try:
                await self._ensure_index(coll, keys, name, partialFilterExpression=partial)
            except self._errors.OperationFailure as exc:
                if self._is_connection_error(exc):
                    raise
                await self._ensure_index(coll, keys, name)
                fallbacks.append(
                    f"{name} ({exc.details.get('errmsg', exc) if exc.details else exc})"
                )
        if fallbacks:
            warnings.warn(
                f"MongoDB server at {self.address} rejected partial indexes; using plain "
                f"indexes instead: {'; '.join(fallbacks)}",
                IndexFallbackWarning,
                stacklevel=2,
            )

    async def _ensure_index(
        self, coll: Any, keys: list[tuple[str, int]], name: str, **options: Any
    ) -> None:
        try:
            await coll.create_index(keys, name=name, **options)
        except self._errors.OperationFailure:
            # Another process may have created it (possibly in its fallback form) meanwhile.
            if name not in await coll.index_information():
                raise

    async def _close_resource(self, mongo: _Mongo) -> None:
        if mongo.owned:
            await mongo.client.close()

    def _is_connection_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._errors.ConnectionFailure)

    @staticmethod
    def _is_duplicate_code(code: object, message: str) -> bool:
        # FerretDB reports a unique-index violation by an update as InternalError (code 1).
        return code in (11000, 11001) or "UNIQUE constraint failed" in message

    def _is_duplicate(self, exc: BaseException) -> bool:
        """A unique-index violation."""
        if isinstance(exc, self._errors.DuplicateKeyError):
            return True
        return isinstance(exc, self._errors.OperationFailure) and self._is_duplicate_code(
            exc.code, str(exc)
        )

    # ---- conversions

    def _document(self, namespace: str, entry: MemoryEntry) -> dict[str, Any]:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance = entry_to_row(
            entry
        )
        for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
            problem = None if value is None else _utf8_problem(value)
            if problem is not None:
                raise InvalidValueError(
                    f"cannot store entry {entry_id!r} in MongoDB: {field} contains {problem}, "
                    "and MongoDB strings must be valid UTF-8"
                )
        # JSON text with escaped surrogates is the same JSON, and valid UTF-8.
        if _utf8_problem(content) is not None:
            content = json.dumps(entry.content, separators=(",", ":"))
        if _utf8_problem(metadata) is not None:
            metadata = json.dumps(entry.metadata, separators=(",", ":"))
        doc = {
            "entry_id": entry_id,
            "namespace": namespace,
            "scope": scope,
            "key": key,
            "content": content,
            "metadata": metadata,
            "created_at": created_at,
            "expires_at": expires_at,
            "importance": importance,
        }
        doc["_id"] = _doc_id(namespace, key, entry_id)
        return doc

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        return [self._document(namespace, e) for e in entries]

    def _entry(self, doc: dict[str, Any]) -> MemoryEntry:
        row = tuple(
            doc.get(f)
            for f in (
                "entry_id",
                "scope",
                "key",
                "content",
                "metadata",
                "created_at",
                "expires_at",
                "importance",
            )
        )
        return row_to_entry(row, f"MongoDB collection {self.database}.{self.collection}")

    # ---- operations

    async def _save_one(self, coll: Any, doc: dict[str, Any]) -> None:
        failure = self._errors.OperationFailure
        doc_id, entry_id, namespace = doc["_id"], doc["entry_id"], doc["namespace"]
        for _ in range(100):
            try:
                # A new entry whose key is free (every conversation turn, most facts): one
                # insert, which the unique _id and entry_id indexes refuse in every other case.
                await coll.insert_one({**doc, "seq": _seq_clock.next()})
                return
            except failure as exc:
                if not self._is_duplicate(exc):
                    raise
            holder = await coll.find_one({"_id": doc_id}, _HOLDER)
            try:
                if holder is None:
                    # The entry exists under another _id (re-keyed, or keyed and moving
                    # namespace): re-insert it, keeping its place if it stays in this namespace.
                    old = await coll.find_one({"entry_id": entry_id}, _HOLDER)
                    if old is None:
                        continue
                    same = old["namespace"] == namespace
                    seq = old["seq"] if same else _seq_clock.next()
                    await coll.delete_one({"_id": old["_id"], "entry_id": entry_id})
                    await coll.insert_one({**doc, "seq": seq})
                    return
                if holder["entry_id"] == entry_id:
                    # The entry itself: replaced in place, or moved to the end of this namespace.
                    same = holder["namespace"] == namespace
                    seq = holder["seq"] if same else _seq_clock.next()
                else:
                    seq = _seq_clock.next()  # another entry holds the key: this one replaces it
                claim = {"_id": doc_id, "entry_id": holder["entry_id"]}
                # One atomic document update: the key never reads as missing.
                replaced = await coll.update_one(claim, {"$set": {**doc, "seq": seq}})
                if replaced.matched_count:
                    return
            except failure as exc:
                if not self._is_duplicate(exc):
                    raise
                if holder is not None:
                    # This entry_id lives on under another key of this namespace: the holder
                    # of the key goes, and the next round re-keys the entry in its place.
                    await coll.delete_one({"_id": doc_id, "entry_id": holder["entry_id"]})
        raise RuntimeError(f"could not save entry {entry_id!r}: the key kept changing hands")

    async def _do_save_many(
        self, mongo: _Mongo, namespace: str, docs: list[dict[str, Any]]
    ) -> None:
        coll = mongo.collection
        if len(docs) == 1:
            await self._save_one(coll, docs[0])
            return
        # New entries (the common batch: a conversation's turns) go in with one insert_many.
        # The first that collides (an entry_id saved before, a key already held) and all
        # after it go through the full save, which resolves the collision.
        fresh = [{**d, "seq": _seq_clock.next()} for d in docs]
        try:
            await coll.insert_many(fresh, ordered=True)
        except self._errors.BulkWriteError as exc:
            write_errors = exc.details.get("writeErrors") or [{"index": 0}]
            if not all(
                self._is_duplicate_code(e.get("code"), e.get("errmsg", "")) for e in write_errors
            ):
                raise
            for doc in docs[min(e["index"] for e in write_errors) :]:
                await self._save_one(coll, doc)

    async def _do_load(self, mongo: _Mongo, namespace: str, now: datetime) -> list[MemoryEntry]:
        cursor = mongo.collection.find(
            {"namespace": namespace, **_live(now.timestamp())}, _PROJECTION
        )
        return [self._entry(d) for d in await _to_list(cursor.sort(_ORDER))]

    async def _do_load_by_key(
        self, mongo: _Mongo, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        if _utf8_problem(key) is not None:
            return None
        # Filtered by _id alone, expiry checked here: some servers (FerretDB) use the _id
        # index only for a filter that is exactly {_id: ...} and scan the collection otherwise.
        doc = await mongo.collection.find_one({"_id": _doc_id(namespace, key, "")}, _PROJECTION)
        if doc is None or (doc["expires_at"] is not None and doc["expires_at"] <= now.timestamp()):
            return None
        return self._entry(doc)

    async def _do_delete(self, mongo: _Mongo, namespace: str, entry_id: str) -> bool:
        if _utf8_problem(entry_id) is not None:
            return False
        result = await mongo.collection.delete_one({"namespace": namespace, "entry_id": entry_id})
        return bool(result.deleted_count)

    async def _do_clear(self, mongo: _Mongo, namespace: str) -> int:
        return int((await mongo.collection.delete_many({"namespace": namespace})).deleted_count)

    async def _do_cleanup(self, mongo: _Mongo, now: datetime) -> int:
        result = await mongo.collection.delete_many({"expires_at": {"$lte": now.timestamp()}})
        return int(result.deleted_count)

    async def _do_namespaces(self, mongo: _Mongo) -> list[str]:
        pipeline = [
            {"$group": {"_id": "$namespace", "first": {"$min": "$seq"}}},
            {"$sort": {"first": 1, "_id": 1}},
        ]
        try:
            return [d["_id"] for d in await _to_list(mongo.collection.aggregate(pipeline))]
        except self._errors.OperationFailure as exc:
            if self._is_connection_error(exc):
                raise
        # A server without the $min accumulator: scan the namespace column in order.
        cursor = mongo.collection.find({}, {"_id": 0, "namespace": 1}).sort(_ORDER)
        return list(dict.fromkeys(d["namespace"] for d in await _to_list(cursor)))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order."""
        if _utf8_problem(check_namespace(namespace)) is not None:
            return []
        return await super().async_load(namespace)
