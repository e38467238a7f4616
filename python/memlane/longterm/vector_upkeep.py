"""Keeping a long-term memory's vectors in step: ``flush`` and ``reembed``.

Writes return before their records are embedded (see :mod:`memlane.embeddings.writer`):
:meth:`VectorUpkeep.flush` waits for the memory's writer. :meth:`VectorUpkeep.reembed` embeds
every fact, procedure and episode in the store that has no vector of this memory's model:
records written before an embedder was set, by a process without one, with another model
(its vectors are never compared with this one's), or whose embedding failed. Opening a memory
over the same store with the same model embeds nothing: it is the explicit ``reembed`` that
catches up, never the constructor.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from memlane._runner import (
    Call,
    MissingVectors,
    Namespaces,
    Plan,
    SaveVectors,
    async_method,
    sync_method,
)
from memlane._validate import check_positive_int, type_name
from memlane.embeddings.resolve import async_embed_documents, embed_documents
from memlane.longterm.episode_model import EPISODES_NAMESPACE
from memlane.longterm.fact_scopes import FACTS_PREFIX
from memlane.longterm.namespaces import parse_namespace
from memlane.longterm.procedures import PROCEDURES_NAMESPACE
from memlane.longterm.storage import StoragePart
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import EntryVector, text_digest
from memlane.types import MemoryEntry

__all__ = ["VectorUpkeep", "record_namespaces"]


def record_namespaces(names: list[str]) -> list[str]:
    """The namespaces among ``names`` that hold embedded long-term records: every scope's
    facts, the procedures and the episodes (not users, nor their identifiers)."""
    return [
        name
        for name in names
        if name in (PROCEDURES_NAMESPACE, EPISODES_NAMESPACE)
        or tuple(parse_namespace(name)[:2]) == FACTS_PREFIX
    ]


class VectorUpkeep(StoragePart):
    """``flush`` and ``reembed`` of one long-term memory, with their ``async_`` twins.

    Args:
        storage: The store (and embedder) the memory's parts share.
    """

    def _flush(self) -> Plan[None]:
        """Waits until every record written through this memory so far has its vector
        stored; at once without an embedder.

        Raises:
            Exception: The first embedding or store failure since the last flush, as raised
                (the records concerned stay findable by keyword; ``reembed`` retries them).
        """
        writer = self._storage.writer
        if writer is not None:
            yield Call(writer.flush, writer.async_flush)

    flush = sync_method(_flush)
    async_flush = async_method(_flush)

    def _reembed(
        self, *, batch_size: int = 500, progress: Callable[[int], object] | None = None
    ) -> Plan[int]:
        """Embeds every long-term record that has no vector of this memory's model; how many
        were embedded.

        Records of every scope id are covered, whoever wrote them. A record whose vector is
        of another model gets one of this model (the old one is replaced). Run it after
        changing the embedder; a memory reopened with the same model has nothing to do.

        Args:
            batch_size: Records per embedder call.
            progress: Called with the running total after each batch (a progress bar).

        Returns:
            How many records got a vector.

        Raises:
            ValueError: The memory has no embedder (names ``embedder``), or a bad
                ``batch_size``.
            TypeError: ``batch_size`` is not an ``int``, or ``progress`` is not callable.
        """
        embedder, writer = self._storage.embedder, self._storage.writer
        if embedder is None or writer is None:
            raise ValueError("reembed needs an embedder: pass embedder= to the memory")
        batch_size = check_positive_int(batch_size, "batch_size")
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be callable, not {type_name(progress)}")
        yield Call(writer.flush, writer.async_flush)
        done = 0
        for name in record_namespaces((yield Namespaces())):
            # A record the model gives no direction (or whose text changes under us, over and
            # over) would come back forever: each (id, text) is tried once per call. Those
            # stay missing, oldest first, so the store is asked for as many more as are stuck
            # so: otherwise a batch of them would hide every record after them.
            tried: set[tuple[str, str]] = set()
            stuck = 0
            while True:
                missing: list[MemoryEntry] = yield MissingVectors(
                    [name], writer.model, batch_size + stuck
                )
                fresh = [
                    (e, e.metadata[SEARCH_TEXT])
                    for e in missing
                    if (e.entry_id, text_digest(e.metadata[SEARCH_TEXT])) not in tried
                ][:batch_size]
                if not fresh:
                    break
                texts = [text for _, text in fresh]
                vectors: list[list[float] | None] = yield Call(
                    partial(embed_documents, embedder, texts),
                    partial(async_embed_documents, embedder, texts),
                )
                batch = []
                for (entry, text), vector in zip(fresh, vectors, strict=True):
                    tried.add((entry.entry_id, text_digest(text)))
                    if vector is not None:
                        batch.append(EntryVector(entry.entry_id, text_digest(text), vector))
                attached = (yield SaveVectors(name, writer.model, batch)) if batch else 0
                stuck += len(fresh) - attached
                if attached:
                    done += attached
                    if progress is not None:
                        progress(done)
        return done

    reembed = sync_method(_reembed)
    async_reembed = async_method(_reembed)
