"""Runs I/O-free plans against a store, synchronously or asynchronously.

memlane writes each operation once, as a generator (a *plan*) that yields the store calls it
needs and receives their results: ``entries = yield StoreCall("load", (namespace,))``. The
plan holds all the logic and does no I/O. :func:`run_sync` performs each call with the
store's sync method and :func:`run_async` awaits its ``async_`` twin, so the sync and async
APIs are two thin wrappers around the same plan and cannot drift. (The sans-I/O style of h11;
structlog builds its sync and async method families from one definition the same way.)

A call that raises is thrown back into the plan at its ``yield``, so a plan handles failures
with an ordinary ``try``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from memlane.types import ConversationTurn

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreCall:
    """Call store method ``method`` (``async_<method>`` on the async path) with ``args``."""

    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Summarize:
    """Fold ``turns`` into a summary with the runner's summarizer; the result is the text."""

    turns: list[ConversationTurn]


Op = StoreCall | Summarize
Plan = Generator[Op, Any, T]
"""A plan: yields operations, receives their results, returns its own result."""

Summarizer = Callable[[list[ConversationTurn]], "str | Awaitable[str]"]


def run_sync(plan: Plan[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion with blocking store calls."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        result, error = None, None
        try:
            result = _perform_sync(op, store, summarizer)
        except Exception as exc:  # handed to the plan, which decides
            error = exc


async def run_async(plan: Plan[T], store: Any, summarizer: Summarizer | None = None) -> T:
    """Runs ``plan`` to completion, awaiting the store's ``async_`` methods."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = plan.send(result) if error is None else plan.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        result, error = None, None
        try:
            result = await _perform_async(op, store, summarizer)
        except Exception as exc:  # handed to the plan, which decides
            error = exc


def _perform_sync(op: Op, store: Any, summarizer: Summarizer | None) -> Any:
    if isinstance(op, StoreCall):
        method = getattr(store, op.method, None)
        if method is None:
            return _fallback(store, op)
        return method(*op.args)
    assert summarizer is not None
    summary = summarizer(op.turns)
    if inspect.isawaitable(summary):
        summary = _run_awaitable(summary)
    return summary


async def _perform_async(op: Op, store: Any, summarizer: Summarizer | None) -> Any:
    if isinstance(op, StoreCall):
        method = getattr(store, "async_" + op.method, None)
        if method is None:
            return await _async_fallback(store, op)
        return await method(*op.args)
    assert summarizer is not None
    asummarize = getattr(summarizer, "asummarize", None)
    summary = await asummarize(op.turns) if asummarize is not None else summarizer(op.turns)
    if inspect.isawaitable(summary):
        summary = await summary
    return summary


def _fallback(store: Any, op: StoreCall) -> Any:
    # save_many is an optional batch method: a store written against the bare protocol
    # gets one save per entry.
    if op.method != "save_many":
        raise AttributeError(f"{type(store).__name__} has no {op.method}()")
    namespace, entries = op.args
    for entry in entries:
        store.save(namespace, entry)
    return None


async def _async_fallback(store: Any, op: StoreCall) -> Any:
    if op.method != "save_many":
        raise AttributeError(f"{type(store).__name__} has no async_{op.method}()")
    namespace, entries = op.args
    for entry in entries:
        await store.async_save(namespace, entry)
    return None


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
