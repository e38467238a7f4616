"""What the database-server stores share: per-loop connections, retry-once, and sync twins.

The ``async_*`` methods are the native path and run on the caller's event loop. Database
drivers bind connections to the loop that opened them, so each loop gets its own pool (or
client), opened on first use. The sync methods run the async ones on a private event-loop
thread, opening lazily: they work outside an event loop and inside one (where they block
the caller like any sync I/O, but cannot deadlock it).

A connection-class failure (server restarted, connection dropped) is retried once on fresh
connections; every operation is idempotent (saves are upserts by ``entry_id``), so a retry
never duplicates an entry. ``save_if`` is the exception, as its first attempt may have won
before the connection dropped: its retry counts the key already holding exactly this entry at
the new version as the win. A second failure raises
:class:`~memlane.errors.StoreConnectionError` naming host and port.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Generic, Never, TypeVar

from memlane._locks import running_loop
from memlane._validate import check_seconds
from memlane.errors import InvalidValueError, MemlaneError, StoreConnectionError, StoreError
from memlane.stores._base import ContextManaged, blocking, read_only_error
from memlane.stores._connect import LoopThread, check_url, hosts
from memlane.stores.protocol import (
    SearchHit,
    check_entry,
    check_entry_id,
    check_entry_ids,
    check_expected_version,
    check_key,
    check_key_range,
    check_keyed_entry,
    check_namespace,
    check_search,
)
from memlane.types import MemoryEntry, utc_now

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["NetworkStore"]


class NetworkStore(ContextManaged, Generic[R]):
    """Per-loop driver resources, retry-once, and the sync twins of the async methods.

    Subclasses provide ``_open`` (a pool or client for the running loop, connected),
    ``_migrate``, ``_close_resource``, ``_is_connection_error`` and the ``_do_*``
    operations that use a resource, and may refine the other hooks.
    """

    persistent = True
    _kind = "database"
    _default_port = 0

    read_only = False
    """Whether the store was opened read-only: it creates and migrates nothing, and every
    write raises :class:`~memlane.errors.ReadOnlyStoreError` before any I/O."""

    def __init__(self, url: str, timeout: float, read_only: bool = False) -> None:
        self.read_only = bool(read_only)
        self._url = check_url(url)
        self.timeout = check_seconds(timeout, "timeout")
        self.address = hosts(self._url, self._default_port)
        self._resources: dict[asyncio.AbstractEventLoop, R] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._lock = threading.Lock()
        self._migrated = False
        self._runner = LoopThread(f"memlane-{self._kind.lower()}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"

    # ---- subclass hooks

    async def _open(self, loop: asyncio.AbstractEventLoop) -> R:
        raise NotImplementedError

    async def _migrate(self, resource: R) -> None:
        raise NotImplementedError

    async def _close_resource(self, resource: R) -> None:
        raise NotImplementedError

    def _is_connection_error(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _abandon(self, resource: R) -> None:
        """Releases a resource whose loop can no longer run coroutines."""

    def _close_soon(self, resource: R, loop: asyncio.AbstractEventLoop) -> None:
        """Closes a resource of the loop running this sync call, which cannot wait for it."""
        task = loop.create_task(self._close_resource(resource))
        # The loop keeps only a weak reference to tasks: hold it until it is done.
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _recover(self, resource: R) -> None:
        """Drops connections a failure may have left stale, before the retry."""

    def _name_problem(self, text: str) -> str | None:
        """Why this backend cannot hold ``text`` as a namespace, key or id, or ``None``."""
        return None

    def _is_driver_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the driver's own (mapped to :class:`StoreError` by ``_call``)."""
        return False

    def _check_names(self, **values: str) -> None:
        """Refuses, before any I/O, a namespace, key or id this backend cannot hold.

        Raises:
            InvalidValueError: The first such value, named with what is wrong in it.
        """
        for field, value in values.items():
            problem = self._name_problem(value)
            if problem is not None:
                raise InvalidValueError(
                    f"{field} {value!r} contains {problem}, which {self._kind} cannot hold"
                )

    def _check_write(self) -> None:
        if self.read_only:
            raise read_only_error(self)

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
        except Exception as exc:  # noqa: BLE001 (every exception is re-raised, mapped or not)
            # memlane's own errors are OSErrors too, but never a dropped connection.
            if isinstance(exc, MemlaneError) or not self._is_connection_error(exc):
                self._raise_mapped(exc)
        # Every operation is idempotent (upserts by entry_id; save_if recognises its own
        # earlier win), so one retry on fresh connections cannot duplicate anything; it is
        # what survives a server restart.
        await self._recover(resource)
        try:
            return await op(resource)
        except Exception as exc:
            if not isinstance(exc, MemlaneError) and self._is_connection_error(exc):
                raise self._unreachable(exc, doing) from exc
            self._raise_mapped(exc)

    def _raise_mapped(self, exc: Exception) -> Never:
        """Re-raises ``exc``, a driver's exception as a :class:`StoreError` naming the server:
        no raw driver exception leaves the store."""
        if isinstance(exc, MemlaneError) or not self._is_driver_error(exc):
            raise exc
        raise StoreError(
            f"{self._kind} at {self.address} refused the operation: {type(exc).__name__}: {exc}"
        ) from exc

    async def _call(self, op: Callable[[R], Awaitable[T]]) -> T:
        return await self._retrying(op, await self._resource())

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def _take_resources(
        self, only: asyncio.AbstractEventLoop | None = None
    ) -> list[tuple[asyncio.AbstractEventLoop, R]]:
        with self._lock:
            items = [(lp, r) for lp, r in self._resources.items() if only in (None, lp)]
            for loop, _ in items:
                del self._resources[loop]
                self._opening.pop(loop, None)
        return items

    # ---- lifecycle

    async def async_initialize(self) -> None:
        """Connects (a pool for the running event loop) and migrates the schema.

        Idempotent, and safe to call concurrently from several processes. Optional: every
        method initialises on first use.

        Raises:
            StoreConnectionError: The server cannot be reached within ``timeout``.
        """
        await self._resource()

    def close(self) -> None:
        """Closes every pool or client this store opened, on whichever loop owns it.

        Called inside a running event loop, that loop's connections are closed without
        waiting for it (use :meth:`async_close` there to wait). The store stays usable: a
        later call opens new connections.
        """
        current = running_loop()
        for loop, resource in self._take_resources():
            if loop is current:
                self._close_soon(resource, loop)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(self._close_resource(resource), loop).result()
            elif current is None and not loop.is_closed():
                loop.run_until_complete(self._close_resource(resource))
            else:
                self._abandon(resource)
        self._runner.stop()

    async def async_close(self) -> None:
        """Async :meth:`close`: waits for the running loop's connections to close."""
        for _, resource in self._take_resources(only=asyncio.get_running_loop()):
            await self._close_resource(resource)
        # Other loops' connections (the private loop's among them) are closed on their loops.
        await asyncio.to_thread(self.close)

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

    async def _do_save_if(
        self, resource: R, namespace: str, prepared: Any, expected: int | None, retry: bool
    ) -> bool:
        """Writes what :meth:`_prepare` made of one keyed entry if its key is at ``expected``.

        ``retry`` is set on the attempt after a connection failure: the key already holding
        exactly this entry at the new version is then the first attempt's win.
        """
        raise NotImplementedError

    async def _do_load_range(
        self, resource: R, namespace: str, start: str, stop: str, now: datetime
    ) -> list[MemoryEntry]:
        raise NotImplementedError

    async def _do_delete(self, resource: R, namespace: str, entry_id: str) -> bool:
        raise NotImplementedError

    async def _do_clear(self, resource: R, namespace: str) -> int:
        raise NotImplementedError

    async def _do_cleanup(self, resource: R, now: datetime) -> int:
        raise NotImplementedError

    async def _do_namespaces(self, resource: R) -> list[str]:
        raise NotImplementedError

    async def _do_search(
        self,
        resource: R,
        namespaces: list[str],
        terms: list[str],
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        """Searches checked, non-empty ``namespaces`` for distinct, non-empty ``terms``."""
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
        self._check_write()
        await self._call(lambda r: self._do_save_many(r, namespace, prepared))

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace in one round trip (see the class docs)."""
        prepared = self._prepare(check_namespace(namespace), [check_entry(e) for e in entries])
        self._check_write()
        if entries:
            await self._call(lambda r: self._do_save_many(r, namespace, prepared))

    async def async_save_if(
        self, namespace: str, entry: MemoryEntry, expected_version: int | None
    ) -> bool:
        """Saves ``entry`` only if its key is still at ``expected_version``, atomically.

        Args:
            namespace: The namespace.
            entry: The entry to write; its ``key`` must be a ``str``, its ``version`` is
                ignored.
            expected_version: The version the caller read, or ``None`` for "no unexpired
                holder" (an expired holder counts as absent and is replaced).

        Returns:
            Whether this call won: the entry is then stored by the rules of :meth:`save` at
            version ``expected_version + 1`` (1 for ``None``); a loss changes nothing.

        Raises:
            TypeError: ``entry.key`` is ``None``, ``expected_version`` is neither ``None`` nor
                an ``int``, or content or metadata is not plain JSON.
            ValueError: ``expected_version`` is negative or too large, or the entry holds a
                value this backend cannot hold.
            StoreConnectionError: The server is unreachable (after one retry).
        """
        check_namespace(namespace)
        check_keyed_entry(entry)
        expected = check_expected_version(expected_version)
        prepared = self._prepare(namespace, [entry])[0]
        self._check_write()
        attempts = 0

        def attempt(resource: R) -> Awaitable[bool]:
            nonlocal attempts
            attempts += 1
            return self._do_save_if(resource, namespace, prepared, expected, attempts > 1)

        return await self._call(attempt)

    async def async_load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Unexpired keyed entries with ``start <= key < stop``, in code-point order of keys.

        One indexed query on (namespace, key).

        Raises:
            TypeError: ``start`` or ``stop`` is not a ``str``.
            InvalidValueError: A bound this backend cannot hold (a ``ValueError``); no key it
                stores could be compared with it as Python would.
        """
        check_namespace(namespace)
        check_key_range(start, stop)
        self._check_names(namespace=namespace)
        for name, bound in (("start", start), ("stop", stop)):
            problem = self._name_problem(bound)
            if problem is not None:
                raise InvalidValueError(
                    f"load_range {name} {bound!r} contains {problem}, which {self._kind} "
                    "cannot compare"
                )
        if start >= stop:
            return []
        now = utc_now()
        return await self._call(lambda r: self._do_load_range(r, namespace, start, stop, now))

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order.

        Raises:
            InvalidValueError: ``namespace`` holds what this backend cannot (a ``ValueError``
                naming it), before any I/O; so do the other methods for their names.
        """
        self._check_names(namespace=check_namespace(namespace))
        now = utc_now()
        return await self._call(lambda r: self._do_load(r, namespace, now))

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        self._check_names(namespace=check_namespace(namespace), key=check_key(key))
        now = utc_now()
        return await self._call(lambda r: self._do_load_by_key(r, namespace, key, now))

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed (after a retried failure, possibly ``False``)."""
        self._check_names(namespace=check_namespace(namespace), entry_id=check_entry_id(entry_id))
        self._check_write()
        return await self._call(lambda r: self._do_delete(r, namespace, entry_id))

    async def async_delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries of ``namespace`` with these ids; the ids that existed, in the
        order given (see the store's class docs for how atomically).

        Raises:
            TypeError: ``entry_ids`` is not a list of ``str``.
            InvalidValueError: An id or the namespace holds what this backend cannot.
            ReadOnlyStoreError: The store was opened read-only.
        """
        self._check_names(namespace=check_namespace(namespace))
        ids = check_entry_ids(entry_ids)
        for entry_id in ids:
            self._check_names(entry_id=entry_id)
        self._check_write()
        if not ids:
            return []
        return await self._call(lambda r: self._do_delete_many(r, namespace, ids))

    async def _do_delete_many(self, resource: R, namespace: str, ids: list[str]) -> list[str]:
        """One by one, unless the backend can do better."""
        return [i for i in ids if await self._do_delete(resource, namespace, i)]

    async def async_clear(self, namespace: str) -> int:
        """Removes every entry of ``namespace``; how many."""
        self._check_names(namespace=check_namespace(namespace))
        self._check_write()
        return await self._call(lambda r: self._do_clear(r, namespace))

    async def async_cleanup_expired(self) -> int:
        """Deletes expired entries of every namespace; how many."""
        self._check_write()
        now = utc_now()
        return await self._call(lambda r: self._do_cleanup(r, now))

    async def async_namespaces(self) -> list[str]:
        """Namespaces holding at least one entry, in order of their oldest entry."""
        return await self._call(self._do_namespaces)

    async def async_search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` most relevant to ``query``, best first, from the
        server's index (see :meth:`memlane.stores.SearchableStore.search` and the class docs).

        Raises:
            TypeError, ValueError: A bad argument, named (before any I/O).
            StoreConnectionError: The server is unreachable (after one retry).
        """
        names, terms, limit, minimum = check_search(namespaces, query, limit, min_importance)
        # A namespace this backend cannot hold was never stored: searching it finds nothing
        # (it is left out before the driver sees it), as searching a missing namespace does.
        names = [n for n in names if self._name_problem(n) is None]
        if not names or not terms:
            return []
        now = utc_now()
        return await self._call(lambda r: self._do_search(r, names, terms, limit, minimum, now))

    # ---- sync twins, on the private loop

    save = blocking(async_save)
    save_many = blocking(async_save_many)
    save_if = blocking(async_save_if)
    load_range = blocking(async_load_range)
    load = blocking(async_load)
    load_by_key = blocking(async_load_by_key)
    delete = blocking(async_delete)
    delete_many = blocking(async_delete_many)
    clear = blocking(async_clear)
    cleanup_expired = blocking(async_cleanup_expired)
    namespaces = blocking(async_namespaces)
    search = blocking(async_search)
    initialize = blocking(async_initialize)
