"""What the parts of one :class:`~memlane.longterm.LongTermMemory` share: a store, an embedder.

The facts, episodes, procedures and users of one memory, and the parts that read across them
(recall, search, forgetting a person), each hold the same :class:`Storage`: their records live
in its store, and its embedder slot is where semantic search will find the model that turns
text into vectors. Nothing reads the embedder yet; it is accepted and kept so that callers and
stores can be wired for it before the vectors arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from memlane._validate import type_name

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder, EmbeddingModel

    from memlane.stores import MemoryStore

__all__ = ["EmbedderLike", "Storage", "check_embedder"]

EmbedderLike: TypeAlias = "Embedder | EmbeddingModel | str"
"""What the embedder slot holds: a pydantic-ai embedder, an embedding model, or its name."""


@dataclass(frozen=True, slots=True)
class Storage:
    """The store and the embedder slot every part of one long-term memory holds.

    Frozen: the parts hold one object, so they can never disagree about either.

    Attributes:
        store: Where the records live.
        embedder: The embedder for semantic search, or ``None``; kept, not used yet.
    """

    store: MemoryStore
    embedder: EmbedderLike | None = None


class StoragePart:
    """What every part of a long-term memory has: the storage they share, and its store, which
    the runner runs the part's plans against.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    @property
    def store(self) -> MemoryStore:
        """Where the part's records live."""
        return self._storage.store


def check_embedder(embedder: object) -> EmbedderLike | None:
    """``embedder`` if it is ``None``, a non-empty model name, or a pydantic-ai embedder/model.

    pydantic-ai's embeddings module is imported only to check a value that is neither
    ``None`` nor a ``str``: a memory without an embedder never loads it.

    Raises:
        TypeError: Anything else; the message names ``embedder``.
        ValueError: An empty name.
    """
    if embedder is None:
        return None
    if isinstance(embedder, str):
        if not embedder.strip():
            raise ValueError(f"embedder must be a non-empty model name, got {embedder!r}")
        return embedder
    from pydantic_ai.embeddings import Embedder, EmbeddingModel

    if isinstance(embedder, Embedder | EmbeddingModel):
        return embedder
    raise TypeError(
        "embedder must be a pydantic-ai Embedder, EmbeddingModel or model name (str), "
        f"not {type_name(embedder)}"
    )
