"""Embedders the pydantic-ai way: what ``embedder=`` accepts, its id, and embedding text with it.

``embedder=`` takes a :class:`pydantic_ai.Embedder`, an
:class:`~pydantic_ai.embeddings.EmbeddingModel`, a model name pydantic-ai infers
(``"openai:text-embedding-3-small"``, ``"sentence-transformers:all-MiniLM-L6-v2"``) or
``"local"`` (:func:`~memlane.embeddings.local_embedding_model`); :func:`resolve_embedder`
makes every one an ``Embedder``. A name is checked against the providers pydantic-ai knows but
not connected: credentials and network are first needed when something is embedded.

:func:`embedder_id` is what a store keeps beside each vector (``"wordllama:l2_supercat"``), so
vectors of different models are never compared. :func:`embed_query` and
:func:`embed_documents` return unit vectors; the local model is called directly (no event
loop), every other model through the ``Embedder``'s own sync or async method.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, get_args

from memlane._validate import type_name

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder, EmbeddingModel, EmbeddingResult

    from memlane.embeddings.local import LocalEmbeddingModel

__all__ = [
    "LOCAL",
    "async_embed_documents",
    "async_embed_query",
    "check_embedder_name",
    "embed_documents",
    "embed_query",
    "embed_rows",
    "embedder_id",
    "is_local",
    "resolve_embedder",
]

LOCAL = "local"
"""The name that selects :func:`~memlane.embeddings.local_embedding_model`."""

_DIRECT = ("cohere", "bedrock", "google", "google-cloud", "sentence-transformers", "voyageai")


def _providers() -> frozenset[str]:
    """The provider prefixes pydantic-ai's ``infer_embedding_model`` turns into a model."""
    from pydantic_ai.models import OpenAIChatCompatibleProvider, OpenAIResponsesCompatibleProvider

    return frozenset(
        (
            "openai",
            *_DIRECT,
            *get_args(OpenAIChatCompatibleProvider.__value__),
            *get_args(OpenAIResponsesCompatibleProvider.__value__),
        )
    )


def check_embedder_name(name: str) -> str:
    """``name`` stripped, if it is ``"local"`` or a ``provider:model`` name pydantic-ai infers.

    Raises:
        ValueError: Empty, without a ``provider:`` prefix, or with a provider pydantic-ai
            has no embedding model for; the message names ``embedder``.
    """
    stripped = name.strip()
    if not stripped:
        raise ValueError(f"embedder must be a non-empty model name, got {name!r}")
    if stripped == LOCAL:
        return stripped
    provider, colon, model = stripped.partition(":")
    if not colon or not provider or not model:
        raise ValueError(
            f"embedder must be 'local' or a 'provider:model' name such as "
            f"'openai:text-embedding-3-small', got {name!r}"
        )
    if not provider.startswith("gateway/") and provider not in _providers():
        known = ", ".join(sorted(_providers()))
        raise ValueError(
            f"embedder {name!r} names a provider pydantic-ai has no embedding model for "
            f"({provider!r}); known: {known}"
        )
    return stripped


def resolve_embedder(embedder: object) -> Embedder | None:
    """The :class:`pydantic_ai.Embedder` that ``embedder`` describes, or ``None``.

    Args:
        embedder: ``None``; ``"local"``; a model name pydantic-ai infers
            (``"openai:text-embedding-3-small"``); an
            :class:`~pydantic_ai.embeddings.EmbeddingModel`; or an ``Embedder`` (returned
            as it is).

    Returns:
        An ``Embedder`` (a name's model is made on first use, so no credentials are needed
        here), or ``None`` for ``None``.

    Raises:
        TypeError: Anything else (``embedder=42``); the message names ``embedder``.
        ValueError: An empty or unknown name; the message names ``embedder``.
        ImportError: ``"local"`` without WordLlama installed (names ``memlane[embed]``).
    """
    if embedder is None:
        return None
    if isinstance(embedder, str):
        name = check_embedder_name(embedder)
        from pydantic_ai.embeddings import Embedder

        if name == LOCAL:
            from memlane.embeddings.local import local_embedding_model

            return Embedder(local_embedding_model())
        return Embedder(name)
    from pydantic_ai.embeddings import Embedder, EmbeddingModel

    if isinstance(embedder, Embedder):
        return embedder
    if isinstance(embedder, EmbeddingModel):
        return Embedder(embedder)
    raise TypeError(
        "embedder must be a pydantic-ai Embedder, EmbeddingModel, a model name (str) or "
        f"'local', not {type_name(embedder)}"
    )


def embedder_id(embedder: Embedder) -> str:
    """``"<system>:<model_name>"``: the model string a store keeps beside each vector.

    A name given as a string is its own id (``"openai:text-embedding-3-small"``), without
    making the model. An embedder keeps the first id it was given here: pydantic-ai replaces
    the name by the model it makes on the first call, whose ``system:model_name`` may spell it
    otherwise (``"gateway/openai:x"`` becomes ``"openai:x"``), and vectors written under a
    second id would all be missing again for the first.
    """
    known = _ids.get(embedder)
    if known is not None:
        return known
    model = embedder.model
    made = model if isinstance(model, str) else f"{model.system}:{model.model_name}"
    return _ids.setdefault(embedder, made)


_ids: weakref.WeakKeyDictionary[Embedder, str] = weakref.WeakKeyDictionary()
"""Each live embedder's id, as first given (``Embedder`` compares by identity)."""


def is_local(embedder: Embedder) -> bool:
    """Whether ``embedder`` runs the local model (in this process, in microseconds)."""
    return _local(embedder) is not None


def _blocking(call: Callable[[], Coroutine[Any, Any, EmbeddingResult]]) -> EmbeddingResult:
    """``call()``'s result, from sync code: on a fresh event loop, in a worker thread when
    this thread already runs one (a sync method called from async code must not fail, nor
    stall that loop's other work longer than the call)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="memlane-embed") as pool:
        return pool.submit(asyncio.run, call()).result()


def _local(embedder: Embedder) -> LocalEmbeddingModel | None:
    # The local model runs in microseconds: called directly, it needs no event loop (and
    # none of the Embedder's thread hops) on either path.
    from memlane.embeddings.local import LocalEmbeddingModel

    model: EmbeddingModel | str = embedder.model
    return model if isinstance(model, LocalEmbeddingModel) else None


def _units(rows: Sequence[Sequence[float]]) -> list[list[float] | None]:
    """Each row scaled to length 1; ``None`` for a row without a direction (never stored)."""
    from memlane.stores.vectors import unit

    out: list[list[float] | None] = []
    for row in rows:
        try:
            out.append(unit(row))
        except ValueError:
            out.append(None)
    return out


def _query_vector(text: str, rows: Sequence[Sequence[float]]) -> list[float]:
    (vector,) = _units(rows)
    if vector is None:
        raise ValueError(f"query {text!r} has no embedding (the model found nothing in it)")
    return vector


def _local_query(local: LocalEmbeddingModel, text: str) -> list[float]:
    (vector,) = _local_documents(local, [text])
    if vector is None:
        raise ValueError(f"query {text!r} has no embedding (the model found nothing in it)")
    return vector


def encodable(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (which a ``str`` may hold, and a store keeps)
    becomes U+FFFD characters, since no model's tokenizer or API accepts it.

    Only what is sent to the model changes: the stored text and its digest stay as they are.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _encodable_all(texts: Sequence[str]) -> list[str]:
    return [encodable(text) for text in texts]


def embed_query(embedder: Embedder, text: str) -> list[float]:
    """``text``'s unit vector as a search query, blocking.

    Raises:
        ValueError: The model gives ``text`` no direction (a text without tokens).
    """
    text = encodable(text)
    local = _local(embedder)
    if local is not None:
        return _local_query(local, text)
    result = _blocking(lambda: embedder.embed_query(text))
    return _query_vector(text, result.embeddings)


async def async_embed_query(embedder: Embedder, text: str) -> list[float]:
    """Async :func:`embed_query`."""
    text = encodable(text)
    local = _local(embedder)
    if local is not None:
        return _local_query(local, text)
    return _query_vector(text, (await embedder.embed_query(text)).embeddings)


def embed_documents(embedder: Embedder, texts: Sequence[str]) -> list[list[float] | None]:
    """The unit vectors of ``texts`` as documents, one call for all, blocking; ``None`` for a
    text the model gives no direction."""
    if not texts:
        return []
    texts = _encodable_all(texts)
    local = _local(embedder)
    if local is not None:
        return _local_documents(local, texts)
    result = _blocking(lambda: embedder.embed_documents(list(texts)))
    return _checked(texts, _units(result.embeddings))


def embed_rows(embedder: Embedder, texts: Sequence[str]) -> list[Sequence[float] | None]:
    """:func:`embed_documents` for a store's ``save_vectors``: the local model's rows come as
    float32 ``array("f")`` copies of its output rather than lists of Python floats.

    A bulk ingest hands the store 100,000 vectors of 256 numbers: building each as a list of
    floats, and reading it back into float32 in the store, cost more than embedding it. An
    ``array("f")`` is a ``Sequence[float]`` every store accepts, and a contiguous buffer the
    in-memory index copies as it is.
    """
    if not texts:
        return []
    local = _local(embedder)
    if local is None:
        return list(embed_documents(embedder, texts))
    from array import array

    vectors = local.encode(_encodable_all(texts))
    norms = (vectors * vectors).sum(axis=1).tolist()
    width = vectors.shape[1] * 4
    blob = vectors.astype("<f4", copy=False).tobytes()
    return [
        array("f", blob[i * width : (i + 1) * width]) if norm else None
        for i, norm in enumerate(norms)
    ]


async def async_embed_documents(
    embedder: Embedder, texts: Sequence[str]
) -> list[list[float] | None]:
    """Async :func:`embed_documents`."""
    if not texts:
        return []
    texts = _encodable_all(texts)
    local = _local(embedder)
    if local is not None:
        return _local_documents(local, texts)
    return _checked(texts, _units((await embedder.embed_documents(list(texts))).embeddings))


def _local_documents(local: LocalEmbeddingModel, texts: Sequence[str]) -> list[list[float] | None]:
    # The local model's rows are unit length already (or zero): no per-float pass in Python.
    vectors = local.encode(texts)
    norms = (vectors * vectors).sum(axis=1)
    directed = [bool(x) for x in norms.tolist()]
    return [row if ok else None for row, ok in zip(vectors.tolist(), directed, strict=True)]


def _checked(texts: Sequence[str], vectors: list[list[float] | None]) -> list[list[float] | None]:
    if len(vectors) != len(texts):
        raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors
