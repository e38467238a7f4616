"""One definition per operation: each store writes one half of its methods, the other is derived.

Local stores (memory, SQLite, files) write the sync methods; :class:`LocalStore` derives the
``async_`` twins, run inline for the in-memory store (nothing to wait for) and in a worker
thread for the others. Network stores write the async methods; ``memlane.stores._network``
derives the sync twins with :func:`blocking`. The twins look their method up on the instance
when called, so a subclass that overrides the written half changes both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from memlane.errors import ReadOnlyStoreError, StoreClosedError, StorePathError
from memlane.stores.protocol import ConditionalStore, SyncMemoryStore, VectorStore

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")


def ensure_directory(directory: Path, owner: str) -> None:
    """Creates ``directory`` and its parents, or says in a memlane error why it cannot.

    Raises:
        StorePathError: A component exists and is not a directory, or the OS refused.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise StorePathError(f"{owner}: {exc.filename} exists and is not a directory") from exc
    except NotADirectoryError as exc:
        raise StorePathError(f"{owner}: a parent of {exc.filename} is not a directory") from exc
    except OSError as exc:
        raise StorePathError(f"{owner}: cannot create {directory}: {exc.strerror}") from exc


def read_only_error(store: object) -> ReadOnlyStoreError:
    """The error of a write to ``store``, which was opened read-only."""
    return ReadOnlyStoreError(f"{store!r} was opened read-only: it takes no writes")


def _named(twin: Callable[..., Any], name: str, doc: str) -> None:
    twin.__name__ = twin.__qualname__ = name
    twin.__doc__ = doc


def awaitable(
    method: Callable[Concatenate[S, P], T],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The ``async_`` twin of a local store's sync ``method`` (its signature and result).

    A store whose class sets ``offload = True`` runs the method in a worker thread, so file
    and database I/O never stalls the event loop; otherwise it runs inline.
    """
    name = method.__name__

    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        bound: Callable[P, T] = getattr(self, name)
        if getattr(self, "offload", False):
            return await asyncio.to_thread(bound, *args, **kwargs)
        return bound(*args, **kwargs)

    _named(twin, f"async_{name}", f"Async :meth:`{name}`, off the event loop where it does I/O.")
    return twin


class _Runs(Protocol):
    def _sync(self, coro: Coroutine[Any, Any, T]) -> T: ...


R = TypeVar("R", bound=_Runs)


def blocking(
    method: Callable[Concatenate[R, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[R, P], T]:
    """The sync twin of a network store's ``async_`` ``method``, run by the store's ``_sync``."""
    name = method.__name__

    def twin(self: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
        bound: Callable[P, Coroutine[Any, Any, T]] = getattr(self, name)
        return self._sync(bound(*args, **kwargs))

    _named(twin, name.removeprefix("async_"), f"Sync :meth:`{name}`.")
    return twin


class _Lifecycle(Protocol):
    def initialize(self) -> None: ...
    def close(self) -> None: ...
    async def async_initialize(self) -> None: ...
    async def async_close(self) -> None: ...


L = TypeVar("L", bound=_Lifecycle)


class ContextManaged:
    """``with store:`` and ``async with store:``: initialise on entry, close on exit."""

    def __enter__(self: L) -> L:
        self.initialize()
        return self

    def __exit__(
        self: _Lifecycle,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self: L) -> L:
        await self.async_initialize()
        return self

    async def __aexit__(
        self: _Lifecycle,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.async_close()


class LocalStore(ContextManaged):
    """What the stores in this process share: derived async twins and a final ``close``.

    Subclasses write the sync methods and ``_release`` (what closing frees), and call
    :meth:`_check_open` where a closed store must refuse work.
    """

    offload = True
    """Whether the ``async_`` twins run in a worker thread (they do I/O) or inline."""

    _closed = False

    read_only = False
    """Whether the store was opened read-only: every write raises
    :class:`~memlane.errors.ReadOnlyStoreError`."""

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")

    def _check_write(self) -> None:
        """:meth:`_check_open`, and refuses a write to a store opened read-only."""
        self._check_open()
        if self.read_only:
            raise read_only_error(self)

    def _release(self) -> None:
        """Frees what the store holds; called once, by the first :meth:`close`."""

    def initialize(self) -> None:
        """Nothing to connect: a local store is ready when constructed.

        Raises:
            StoreClosedError: The store was closed.
        """
        self._check_open()

    def close(self) -> None:
        """Closes the store; closing again does nothing, any other call then raises
        :class:`~memlane.errors.StoreClosedError` (a ``ValueError``)."""
        if not self._closed:
            self._closed = True
            self._release()

    async_save = awaitable(SyncMemoryStore.save)
    async_save_many = awaitable(SyncMemoryStore.save_many)
    async_load = awaitable(SyncMemoryStore.load)
    async_load_by_key = awaitable(SyncMemoryStore.load_by_key)
    async_delete = awaitable(SyncMemoryStore.delete)
    async_clear = awaitable(SyncMemoryStore.clear)
    async_namespaces = awaitable(SyncMemoryStore.namespaces)
    async_cleanup_expired = awaitable(SyncMemoryStore.cleanup_expired)
    async_save_if = awaitable(ConditionalStore.save_if)
    async_load_range = awaitable(ConditionalStore.load_range)
    async_delete_many = awaitable(ConditionalStore.delete_many)
    async_save_vectors = awaitable(VectorStore.save_vectors)
    async_vector_search = awaitable(VectorStore.vector_search)
    async_missing_vectors = awaitable(VectorStore.missing_vectors)
    async_initialize = awaitable(SyncMemoryStore.initialize)
    async_close = awaitable(SyncMemoryStore.close)
