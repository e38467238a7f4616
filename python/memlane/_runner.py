"""Runs I/O-free plans against a store, synchronously or asynchronously.

memlane writes each operation once, as a generator (a *plan*) that yields the store operations
it needs and receives their results: ``entries = yield Load(namespace)``. The plan holds all
the logic and does no I/O. The operations are typed values, one class per store method
(:mod:`memlane._ops`, re-exported here): :func:`run_sync` performs each with ``op.run(store)``
and :func:`run_async` with ``await op.run_async(store)``, so the sync and async APIs are two
thin wrappers around the same plan and cannot drift. (The sans-I/O style of h11; structlog
builds its sync and async method families from one definition the same way.)

A call that raises is thrown back into the plan at its ``yield``, so a plan handles failures
with an ordinary ``try``. A plan that yields a :class:`~memlane._locks.HybridLock` holds it until
it ends or yields :class:`Release`; each runner takes it in its own way (blocking, or awaiting) and
always releases what is still held. Besides store operations a plan may yield
:class:`Summarize` (the runner's summarizer, an explicit argument of the runner), :class:`Spawn`
(a background plan), :class:`Gather` (several plans, concurrently on the async path) and
:class:`Call` (user code with a blocking and an awaitable form).

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
from memlane._ops import (
    CleanupExpired,
    Clear,
    Delete,
    DeleteMany,
    Load,
    LoadByKey,
    LoadRange,
    MissingVectors,
    Namespaces,
    Save,
    SaveIf,
    SaveIfAbsent,
    SaveMany,
    SaveVectors,
    Search,
    StoreOp,
    Then,
    VectorSearch,
)
from memlane.types import ConversationTurn

T = TypeVar("T")
P = ParamSpec("P")

__all__ = [
    "Call",
    "CleanupExpired",
    "Clear",
    "Delete",
    "DeleteMany",
    "Done",
    "Gather",
    "Load",
    "LoadByKey",
    "LoadRange",
    "MissingVectors",
    "Namespaces",
    "Plan",
    "Release",
    "Save",
    "SaveIf",
    "SaveIfAbsent",
    "SaveMany",
    "SaveVectors",
    "Search",
    "Spawn",
    "Step",
    "StoreOp",
    "Summarize",
    "Summarizer",
    "Then",
    "VectorSearch",
    "async_method",
    "run_async",
    "run_now",
    "run_sync",
    "sync_method",
]


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


@dataclass(frozen=True, slots=True)
class Gather:
    """Run ``plans`` on this runner's store; the result sent back is their results, in order.

    The sync runner runs them one after the other; the async runner runs them concurrently
    (``asyncio.gather``), so reads of several feeds overlap their round trips. The first
    failure is thrown back into the plan.
    """

    plans: list[Step[Any]]


Op = StoreOp[Any] | Summarize | HybridLock | Release | Spawn | Call | Gather
Plan = Generator[Op, Any, T]
"""A plan: yields operations, receives their results, returns its own result."""


class Done(Generic[T]):
    """A plan's result, when producing it needed no store call and no waiting."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


Step = Plan[T] | Done[T] | StoreOp[T]
"""What a plan method returns: a plan for a runner, one store operation, or its result already."""

Summarizer = Callable[[list[ConversationTurn]], "str | Awaitable[str]"]


def run_now(plan: Plan[T], store: Any) -> Done[T]:
    """Runs ``plan``, which yields store operations only, to its end with ``op.run(store)``:
    :func:`run_sync`'s protocol for them (a failure is thrown back into the plan), without its
    locks, summaries and background work, which such a plan never asks for.

    Raises:
        TypeError: The plan yielded something else (a bug: it needs the runner).
    """
    try:
        op = plan.send(None)
        while True:
            if not isinstance(op, StoreOp):
                plan.close()
                raise TypeError(f"run_now runs store operations only, got {op!r}")
            try:
                result = op.run(store)
            except Exception as exc:  # noqa: BLE001  # handed to the plan, as the runner does
                op = plan.throw(exc)
            else:
                op = plan.send(result)
    except StopIteration as done:
        return Done(done.value)


def run_sync(plan: Step[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion with blocking store calls.

    Args:
        plan: A plan, a single :class:`~memlane._ops.StoreOp`, or a :class:`Done` result.
        store: The store every operation runs against.
        summarizer: What a yielded :class:`Summarize` calls; ``None`` when the plan's owner
            has none (such a plan never yields one).
    """
    # Every conversation call passes through here: the loop is kept to the bare protocol,
    # store operations (the common case) tested first.
    if isinstance(plan, Done):  # an in-memory fast path's answer: the commonest, tested first
        return plan.value
    if isinstance(plan, StoreOp):
        return plan.run(store)
    held: list[HybridLock] = []
    try:
        op = plan.send(None)
        while True:
            if isinstance(op, StoreOp):
                try:
                    result = op.run(store)
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
            elif isinstance(op, HybridLock):
                op.acquire()
                held.append(op)
                op = plan.send(None)
            elif isinstance(op, Release):
                _release(held, op)
                op = plan.send(None)
            elif isinstance(op, Spawn):
                op = plan.send(_background().submit(run_sync, op.plan(), store, summarizer))
            else:
                try:
                    result = _perform_sync(op, store, summarizer)
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
    except StopIteration as done:
        finished: T = done.value
        return finished
    finally:
        for lock in reversed(held):
            lock.release()


async def run_async(plan: Step[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion, awaiting the store's ``async_`` methods.

    Args:
        plan: A plan, a single :class:`~memlane._ops.StoreOp`, or a :class:`Done` result.
        store: The store every operation runs against.
        summarizer: What a yielded :class:`Summarize` calls, or ``None``.
    """
    if isinstance(plan, Done):
        return plan.value
    if isinstance(plan, StoreOp):
        return await plan.run_async(store)
    held: list[HybridLock] = []
    try:
        op = plan.send(None)
        while True:
            if isinstance(op, StoreOp):
                try:
                    result = await op.run_async(store)
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
            elif isinstance(op, HybridLock):
                await op.async_acquire()
                held.append(op)
                op = plan.send(None)
            elif isinstance(op, Release):
                _release(held, op)
                op = plan.send(None)
            elif isinstance(op, Spawn):
                op = plan.send(
                    asyncio.get_running_loop().create_task(run_async(op.plan(), store, summarizer))
                )
            else:
                try:
                    result = await _perform_async(op, store, summarizer)
                except Exception as exc:  # noqa: BLE001  # handed to the plan, which decides
                    op = plan.throw(exc)
                else:
                    op = plan.send(result)
    except StopIteration as done:
        finished: T = done.value
        return finished
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
    """What a class needs to turn its plans into methods: the store its plans run against."""

    @property
    def store(self) -> Any: ...


S = TypeVar("S", bound=Runs)

SummarizerOf = Callable[[S], "Summarizer | None"]
"""How a method pair finds its owner's summarizer, e.g. ``lambda memory: memory.summarizer``."""


def sync_method(
    plan: Callable[Concatenate[S, P], Step[T]],
    *,
    summarizer: SummarizerOf[S] | None = None,
) -> Callable[Concatenate[S, P], T]:
    """The blocking public method of plan method ``_name``: ``name``.

    Args:
        plan: The plan method; the public method runs what it returns with :func:`run_sync`
            against ``self.store``.
        summarizer: For plans that yield :class:`Summarize`: the owner's summarizer, given the
            owner. Without it the runner has none.
    """
    if summarizer is None:

        def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return run_sync(plan(self, *args, **kwargs), self.store)

    else:
        summarizer_of = summarizer

        def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return run_sync(plan(self, *args, **kwargs), self.store, summarizer_of(self))

    return describe(method, plan, sync=True)


def async_method(
    plan: Callable[Concatenate[S, P], Step[T]],
    *,
    summarizer: SummarizerOf[S] | None = None,
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """The awaitable public method of plan method ``_name``: ``async_name``.

    Args:
        plan: The plan method; the public method runs what it returns with :func:`run_async`
            against ``self.store``.
        summarizer: For plans that yield :class:`Summarize`: the owner's summarizer, given the
            owner. Without it the runner has none.
    """
    if summarizer is None:

        async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await run_async(plan(self, *args, **kwargs), self.store)

    else:
        summarizer_of = summarizer

        async def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await run_async(plan(self, *args, **kwargs), self.store, summarizer_of(self))

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
    method.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]  # inspect reads it off any callable; typeshed declares it on none
    return method


def _perform_sync(op: Summarize | Call | Gather, store: Any, summarizer: Summarizer | None) -> Any:
    if isinstance(op, Call):
        return op.blocking()
    if isinstance(op, Gather):
        return [run_sync(plan, store, summarizer) for plan in op.plans]
    if summarizer is None:
        raise RuntimeError("this plan asked to summarize, but its runner has no summarizer")
    summary = summarizer(op.turns)
    if inspect.isawaitable(summary):
        summary = _run_awaitable(summary)
    return summary


async def _perform_async(
    op: Summarize | Call | Gather, store: Any, summarizer: Summarizer | None
) -> Any:
    if isinstance(op, Call):
        return await op.awaiting()
    if isinstance(op, Gather):
        return list(await asyncio.gather(*(run_async(p, store, summarizer) for p in op.plans)))
    if summarizer is None:
        raise RuntimeError("this plan asked to summarize, but its runner has no summarizer")
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
