"""What the parts of one :class:`~memlane.longterm.LongTermMemory` share: a store, an embedder.

The facts, episodes, procedures and users of one memory, and the parts that read across them
(recall, search, forgetting a person), each hold the same :class:`Storage`: their records live
in its store, and with an embedder it also holds the
:class:`~memlane.embeddings.VectorWriter` that embeds what they write.

A part publishes a method that writes records with :func:`writing_method` /
:func:`async_writing_method` instead of the runner's ``sync_method`` / ``async_method``: the
plan runs as before, and every entry with a search text it saved (``Save``, ``SaveMany``, a
``SaveIf`` that won) is handed to the writer, in one submission, once the plan has run. One place sees every
write, so no plan needs to know about vectors; a write that lost its compare-and-swap is not
embedded, and a vector made from a text that has changed since is refused by the store.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeAlias, TypeVar

from memlane._runner import (
    Call,
    Done,
    Plan,
    Save,
    SaveIf,
    SaveMany,
    Step,
    StoreOp,
    Then,
    describe,
    run_async,
    run_sync,
)

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder, EmbeddingModel

    from memlane.embeddings import VectorWriter
    from memlane.stores import MemoryStore
    from memlane.types import MemoryEntry

__all__ = [
    "EmbedderLike",
    "Storage",
    "StoragePart",
    "async_writing_method",
    "collector_paused",
    "make_storage",
    "run_written",
    "writing_method",
]

EmbedderLike: TypeAlias = "Embedder | EmbeddingModel | str"
"""What ``embedder=`` takes: a pydantic-ai embedder, an embedding model, a model name, or
``"local"``."""

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Storage:
    """The store, and the embedder with its writer, every part of one long-term memory holds.

    Frozen: the parts hold one object, so they can never disagree about either.

    Attributes:
        store: Where the records live.
        embedder: The embedder for semantic search, or ``None``.
        writer: Embeds what the parts write (``None`` without an embedder).
    """

    store: MemoryStore
    embedder: Embedder | None = None
    writer: VectorWriter | None = None

    @property
    def model(self) -> str | None:
        """The embedder's id, kept beside each vector; ``None`` without an embedder."""
        return None if self.writer is None else self.writer.model


def make_storage(store: MemoryStore, embedder: object) -> Storage:
    """The storage of a memory over ``store`` with ``embedder`` (checked and resolved).

    Raises:
        TypeError: ``embedder`` is not one (names it), or there is one and ``store`` keeps
            no vectors (names the store's type).
        ValueError: An empty or unknown embedder name (names ``embedder``).
        ImportError: ``"local"`` without WordLlama (names ``memlane[embed]``).
    """
    if embedder is None:
        return Storage(store)
    from memlane.embeddings import VectorWriter, resolve_embedder

    resolved = resolve_embedder(embedder)
    assert resolved is not None  # None returned above
    if not callable(getattr(store, "save_vectors", None)):
        raise TypeError(
            f"embedder needs a store that keeps vectors (a VectorStore); "
            f"{type(store).__name__} has no save_vectors"
        )
    return Storage(store, resolved, VectorWriter(store, resolved))  # type: ignore[arg-type]  # checked just above: it is a VectorStore


class StoragePart:
    """What every part of a long-term memory has: the storage they share, and its store, which
    the runner runs the part's plans against.

    Args:
        storage: The store (and embedder) the memory's parts share.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    @property
    def store(self) -> MemoryStore:
        """Where the part's records live."""
        return self._storage.store


Part = TypeVar("Part", bound=StoragePart)


def writing_method(
    plan: Callable[Concatenate[Part, P], Step[T]], *, bulk: bool = False
) -> Callable[Concatenate[Part, P], T]:
    """The blocking public method of a plan method that writes records: each record it
    stored goes to the memory's :class:`~memlane.embeddings.VectorWriter` (if any).

    Args:
        plan: The plan method.
        bulk: A method that writes many records at once (``remember_many``): with a model
            that runs in-process (the local one), its records are embedded before it returns,
            in one batch on the caller's thread, rather than handed to the writer's thread;
            the cyclic garbage collector is paused while it runs (:func:`collector_paused`).
    """

    def method(self: Part, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_written(plan(self, *args, **kwargs), self._storage, bulk=bulk)

    return describe(method, plan, sync=True)


def run_written(step: Step[T], storage: Storage, *, bulk: bool = False) -> T:
    """Runs what a writing plan method returned, as :func:`writing_method`'s method does:
    its saved records go to the memory's writer (if any).

    A :class:`~memlane._runner.Done` (an in-memory write already made, with no writer) is
    answered first: nothing is left to run or embed.
    """
    if type(step) is Done:
        return step.value
    step = _embedding(step, storage, bulk=bulk)
    if not bulk:
        return run_sync(step, storage.store)
    with collector_paused():
        return run_sync(step, storage.store)


def async_writing_method(
    plan: Callable[Concatenate[Part, P], Step[T]], *, bulk: bool = False
) -> Callable[Concatenate[Part, P], Coroutine[Any, Any, T]]:
    """The awaitable twin of :func:`writing_method`."""

    async def method(self: Part, /, *args: P.args, **kwargs: P.kwargs) -> T:
        step = _embedding(plan(self, *args, **kwargs), self._storage, bulk=bulk)
        if not bulk:
            return await run_async(step, self.store)
        with collector_paused():
            return await run_async(step, self.store)

    return describe(method, plan, sync=False)


_pauses = 0
_resume = False
_pauses_guard = threading.Lock()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector for the block (reference counting frees as
    ever; cycles made meanwhile are found once it resumes), in any number of threads at once:
    the last block to end resumes it, if it was running when the first began.

    A bulk write keeps every record it makes alive until it returns, and each full
    collection walks all of them again: writing 50,000 facts spent a quarter of its time in
    the collector.
    """
    global _pauses, _resume  # one collector per process: one count of the blocks pausing it
    with _pauses_guard:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_guard:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def _embedding(step: Step[T], storage: Storage, *, bulk: bool) -> Step[T]:
    """``step``, whose saved records are embedded once it has run."""
    writer = storage.writer
    if writer is None or isinstance(step, Done):
        return step
    return _watched(step, writer, inline=bulk and writer.in_process)


def _watched(step: Plan[T] | StoreOp[T], writer: VectorWriter, *, inline: bool) -> Plan[T]:
    # A plain proxy of the plan: every operation goes to the runner unchanged and its result
    # (or failure) back to the plan; the saves are noted on the way and handed over at the
    # end, in one submission (or embedded here, in one batch, for a bulk write).
    saved: list[tuple[str, MemoryEntry]] = []
    if isinstance(step, StoreOp):
        result: T = yield step
        _note(step, result, saved)
    else:
        try:
            op = step.send(None)
            while True:
                try:
                    sent = yield op
                except Exception as exc:  # noqa: BLE001  # the plan decides, as under the runner
                    op = step.throw(exc)
                    continue
                _note(op, sent, saved)
                op = step.send(sent)
        except StopIteration as done:
            result = done.value
        except BaseException:
            # What was stored before the failure is stored: it is embedded all the same.
            writer.submit_many(saved)
            raise
    if saved:
        if inline:
            yield Call(partial(writer.write_now, saved), partial(writer.async_write_now, saved))
        else:
            writer.submit_many(saved)
    return result


def _note(op: object, result: object, saved: list[tuple[str, MemoryEntry]]) -> None:
    if isinstance(op, Then):
        # The result is mapped, so a SaveIf's outcome is unknown here: embedding is harmless
        # either way, since the store attaches a vector only to the text it was made from.
        op, result = op.op, True
    if isinstance(op, Save):
        saved.append((op.namespace, op.entry))
    elif isinstance(op, SaveIf):
        if result is True:
            saved.append((op.namespace, op.entry))
    elif isinstance(op, SaveMany):
        saved.extend((op.namespace, entry) for entry in op.entries)
