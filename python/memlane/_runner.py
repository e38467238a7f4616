"""Runs I/O-free plans against a store, synchronously or asynchronously.

memlane writes each operation once, as a generator (a *plan*) that yields the store calls it
needs and receives their results: ``entries = yield StoreCall("load", (namespace,))``. The
plan holds all the logic and does no I/O. :func:`run_sync` performs each call with the
store's sync method and :func:`run_async` awaits its ``async_`` twin, so the sync and async
APIs are two thin wrappers around the same plan and cannot drift. (The sans-I/O style of h11;
structlog builds its sync and async method families from one definition the same way.)

A call that raises is thrown back into the plan at its ``yield``, so a plan handles failures
with an ordinary ``try``. A plan that yields a :class:`~memlane._locks.HybridLock` holds it until
it ends or yields :class:`Release`; each runner takes it in its own way (blocking, or awaiting) and
always releases what is still held.

:func:`sync_method` and :func:`async_method` turn one plan method into the public method
pair (``name`` and ``async_name``), with the plan's signature and docstring.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from memlane._locks import HybridLock
from memlane.types import ConversationTurn

T = TypeVar("T")
P = ParamSpec("P")


class StoreCall(Generic[T]):
    """Call store method ``method`` (``async_<method>`` on the async path) with ``args``.

    Yielded by a plan, the call's result is sent back into the plan. Returned by a plan
    method as the whole plan (an operation that is one store call, as most of working
    memory's are), the runner returns ``then(result)``, or the result itself, without the
    generator machinery.
    """

    __slots__ = ("args", "method", "then")

    def __init__(
        self, method: str, args: tuple[Any, ...], then: Callable[[Any], T] | None = None
    ) -> None:
        self.method = method
        self.args = args
        self.then = then


@dataclass(frozen=True, slots=True)
class Summarize:
    """Fold ``turns`` into a summary with the runner's summarizer; the result is the text."""

    turns: list[ConversationTurn]


@dataclass(frozen=True, slots=True)
class Release:
    """Release ``lock``, which the plan acquired, before the plan ends."""

    lock: HybridLock


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start ``plan()`` in the background; the result sent back is its handle.

    The sync runner submits it to a worker thread (a ``concurrent.futures.Future``), the
    async runner makes it a task on the running loop (an ``asyncio.Task``): either way the
    caller returns without waiting for it.
    """

    plan: Callable[[], Plan[Any]]


@dataclass(frozen=True, slots=True)
class Call:
    """Run user code: ``blocking()`` on the sync runner, ``await awaiting()`` on the async one."""

    blocking: Callable[[], Any]
    awaiting: Callable[[], Awaitable[Any]]


Op = StoreCall[Any] | Summarize | HybridLock | Release | Spawn | Call
Plan = Generator[Op, Any, T]
"""A plan: yields operations, receives their results, returns its own result."""


class Done(Generic[T]):
    """A plan's result, when producing it needed no store call and no waiting."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


Step = Plan[T] | Done[T] | StoreCall[T]
"""What a plan method returns: a plan for a runner, or its result already."""

Summarizer = Callable[[list[ConversationTurn]], "str | Awaitable[str]"]


def run_sync(plan: Step[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion with blocking store calls."""
    # Every conversation call passes through here: the loop is kept to the bare protocol.
    if plan.__class__ is StoreCall:
        result = _call_sync(plan, store)  # type: ignore[arg-type]
        return result if plan.then is None else plan.then(result)  # type: ignore[union-attr]
    if plan.__class__ is Done:
        return plan.value  # type: ignore[union-attr]
    assert not isinstance(plan, Done | StoreCall)
    held: list[HybridLock] = []
    try:
        op = plan.send(None)
        while True:
            if op.__class__ is HybridLock:
                op.acquire()  # type: ignore[union-attr]
                held.append(op)  # type: ignore[arg-type]
                op = plan.send(None)
            elif op.__class__ is Release:
                _release(held, op)  # type: ignore[arg-type]
                op = plan.send(None)
            elif op.__class__ is Spawn:
                op = plan.send(
                    _background().submit(run_sync, op.plan(), store, summarizer)  # type: ignore[union-attr]
                )
            else:
                try:
                    result = _perform_sync(op, store, summarizer)  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        for lock in reversed(held):
            lock.release()


async def run_async(plan: Step[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion, awaiting the store's ``async_`` methods."""
    if isinstance(plan, Done):
        return plan.value
    if isinstance(plan, StoreCall):
        result = await _perform_async(plan, store, summarizer)
        return result if plan.then is None else plan.then(result)
    held: list[HybridLock] = []
    try:
        op = plan.send(None)
        while True:
            if op.__class__ is HybridLock:
                await op.async_acquire()  # type: ignore[union-attr]
                held.append(op)  # type: ignore[arg-type]
                op = plan.send(None)
            elif op.__class__ is Release:
                _release(held, op)  # type: ignore[arg-type]
                op = plan.send(None)
            elif op.__class__ is Spawn:
                op = plan.send(
                    asyncio.get_running_loop().create_task(
                        run_async(op.plan(), store, summarizer)  # type: ignore[union-attr]
                    )
                )
            else:
                try:
                    result = await _perform_async(op, store, summarizer)  # type: ignore[arg-type]
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        for lock in reversed(held):
            lock.release()


def _release(held: list[HybridLock], op: Release) -> None:
    held.remove(op.lock)
    op.lock.release()


_background_pool: concurrent.futures.ThreadPoolExecutor | None = None
_background_guard = threading.Lock()


def _background() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads that run background plans for sync callers (created on first use)."""
    global _background_pool  # one pool per process, made only if needed
    with _background_guard:
        if _background_pool is None:
            _background_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="memlane-background"
            )
        return _background_pool


# ---------------------------------------------------------------------------- method pairs


class Runs(Protocol):
    """What a class needs to turn its plans into methods: a store and, maybe, a summarizer."""

    @property
    def store(self) -> Any: ...


S = TypeVar("S", bound=Runs)


def sync_method(plan: Callable[Concatenate[S, P], Step[T]]) -> Callable[Concatenate[S, P], T]:
    """The blocking public method of plan method ``_name``: ``name``."""

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(plan(self, *args, **kwargs), self.store, getattr(self, "summarizer", None))

    return describe(method, plan, sync=True)


def async_method(
    plan: Callable[Concatenate[S, P], Step[T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The awaitable public method of plan method ``_name``: ``async_name``."""

    async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(
            plan(self, *args, **kwargs), self.store, getattr(self, "summarizer", None)
        )

    return describe(method, plan, sync=False)


F = TypeVar("F", bound=Callable[..., Any])


def describe(method: F, plan: Callable[..., Any], *, sync: bool) -> F:
    """Gives a generated method its public name, the plan's signature and a docstring."""
    name = plan.__name__.lstrip("_")
    signature = inspect.signature(plan)
    returns = signature.return_annotation
    for wrapper in ("Plan[", "Step["):
        if isinstance(returns, str) and returns.startswith(wrapper) and returns.endswith("]"):
            returns = returns[len(wrapper) : -1]
    method.__name__ = name if sync else f"async_{name}"
    method.__qualname__ = plan.__qualname__.rsplit(".", 1)[0] + "." + method.__name__
    method.__module__ = plan.__module__
    method.__doc__ = (
        plan.__doc__ if sync else f"Async :meth:`{name}`: the same plan, its store calls awaited."
    )
    method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return method


def _call_sync(op: StoreCall[Any], store: Any) -> Any:
    method = getattr(store, op.method, None)
    return method(*op.args) if method is not None else _fallback(store, op)


def _perform_sync(
    op: StoreCall[Any] | Summarize | Call, store: Any, summarizer: Summarizer | None
) -> Any:
    if isinstance(op, StoreCall):
        return _call_sync(op, store)
    if isinstance(op, Call):
        return op.blocking()
    assert summarizer is not None
    summary = summarizer(op.turns)
    if inspect.isawaitable(summary):
        summary = _run_awaitable(summary)
    return summary


async def _perform_async(
    op: StoreCall[Any] | Summarize | Call, store: Any, summarizer: Summarizer | None
) -> Any:
    if isinstance(op, StoreCall):
        method = getattr(store, "async_" + op.method, None)
        if method is None:
            return await _async_fallback(store, op)
        return await method(*op.args)
    if isinstance(op, Call):
        return await op.awaiting()
    assert summarizer is not None
    async_summarize = getattr(summarizer, "async_summarize", None)
    if async_summarize is not None:
        summary = await async_summarize(op.turns)
    elif inspect.iscoroutinefunction(summarizer) or inspect.iscoroutinefunction(
        getattr(summarizer, "__call__", None)  # noqa: B004  # an instance with async __call__
    ):
        summary = summarizer(op.turns)
    else:
        # A blocking summarizer (an LLM call, say) runs in a worker thread: it must never
        # stall the event loop, which serves every other conversation meanwhile.
        summary = await asyncio.to_thread(summarizer, op.turns)
    if inspect.isawaitable(summary):
        summary = await summary
    return summary


# A store written against the protocol before it had save_many, save_if and load_range still
# works through these, for one process: the conversation's lock serialises its writers there,
# but nothing guards against another process, so a shared store needs the real methods.


def _fallback(store: Any, op: StoreCall[Any]) -> Any:
    if op.method == "save_many":
        namespace, entries = op.args
        for entry in entries:
            store.save(namespace, entry)
        return None
    if op.method == "save_if":
        namespace, entry, expected = op.args
        if not _won(store.load_by_key(namespace, entry.key), expected):
            return False
        store.save(namespace, entry)
        return True
    if op.method == "load_range":
        namespace, start, stop = op.args
        return _in_range(store.load(namespace), start, stop)
    raise AttributeError(f"{type(store).__name__} has no {op.method}()")


async def _async_fallback(store: Any, op: StoreCall[Any]) -> Any:
    if op.method == "save_many":
        namespace, entries = op.args
        for entry in entries:
            await store.async_save(namespace, entry)
        return None
    if op.method == "save_if":
        namespace, entry, expected = op.args
        if not _won(await store.async_load_by_key(namespace, entry.key), expected):
            return False
        await store.async_save(namespace, entry)
        return True
    if op.method == "load_range":
        namespace, start, stop = op.args
        return _in_range(await store.async_load(namespace), start, stop)
    raise AttributeError(f"{type(store).__name__} has no async_{op.method}()")


def _won(holder: Any, expected: int | None) -> bool:
    if expected is None:
        return holder is None
    return holder is not None and getattr(holder, "version", 0) == expected


def _in_range(entries: list[Any], start: str, stop: str) -> list[Any]:
    found = [e for e in entries if e.key is not None and start <= e.key < stop]
    found.sort(key=lambda e: e.key)
    return found


def _run_awaitable(awaitable: Awaitable[Any]) -> Any:
    """Runs an async summarizer's result from sync code.

    Outside an event loop it runs on a fresh loop. Inside one, blocking would deadlock it:
    callers there should use the ``async_*`` methods, and this says so.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:

        async def wrap() -> Any:
            return await awaitable

        return asyncio.run(wrap())
    if inspect.iscoroutine(awaitable):
        awaitable.close()
    raise RuntimeError(
        "an async summarizer cannot run from sync add_turn inside a running event loop; "
        "use await async_add_turn(...)"
    )
