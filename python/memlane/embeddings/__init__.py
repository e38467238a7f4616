"""Embeddings: turning records into vectors, offline or through any pydantic-ai model.

* :func:`local_embedding_model` (``local.py``): WordLlama ``l2_supercat``, 256 dimensions,
  read from the installed wheel's files, no network (``pip install memlane[embed]``).
* :func:`resolve_embedder` and :func:`embedder_id` (``resolve.py``): what ``embedder=``
  accepts (a pydantic-ai ``Embedder``, an ``EmbeddingModel``, a model name, ``"local"``) and
  the id a store keeps beside each vector; :func:`embed_query` / :func:`async_embed_query`.
* :class:`VectorWriter` (``writer.py``): embeds stored records in batches, off the request
  path; ``flush()`` waits for it.

Nothing here loads pydantic-ai, numpy or WordLlama until a model is made or used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlane.embeddings.resolve import (
    async_embed_documents,
    async_embed_query,
    embed_documents,
    embed_query,
    embedder_id,
    resolve_embedder,
)
from memlane.embeddings.writer import VectorWriter

if TYPE_CHECKING:
    from memlane.embeddings.local import LocalEmbeddingModel, local_embedding_model

__all__ = [
    "LocalEmbeddingModel",
    "VectorWriter",
    "async_embed_documents",
    "async_embed_query",
    "embed_documents",
    "embed_query",
    "embedder_id",
    "local_embedding_model",
    "resolve_embedder",
]

_LOCAL = frozenset({"LocalEmbeddingModel", "local_embedding_model"})


def __getattr__(name: str) -> Any:
    """The local model's module (which imports pydantic-ai) loads when first named."""
    if name not in _LOCAL:
        raise AttributeError(f"module 'memlane.embeddings' has no attribute {name!r}")
    from memlane.embeddings import local

    value = getattr(local, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
