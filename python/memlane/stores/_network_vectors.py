"""The vector operations of the database-server stores, and the scoring done in memlane.

:class:`NetworkVectorStore` adds :class:`~memlane.stores.protocol.VectorStore`'s methods to
:class:`~memlane.stores._network.NetworkStore`: the arguments are checked once here, before
any I/O, and each store runs them through its ``_do_*`` hooks with the same retry-once as
every other operation (each is idempotent: a save of vectors is an upsert by entry).

Where a server cannot rank vectors itself (PostgreSQL without pgvector, a MongoDB-compatible
server without ``$vectorSearch``), :func:`best_vectors` ranks the candidates the store read:
one matrix product with numpy when it is importable, a plain dot product per row otherwise,
both over the same float32 values, so either way the scores are the cosine similarity of unit
vectors as every store computes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from memlane.stores._base import blocking
from memlane.stores._network import NetworkStore
from memlane.stores.fallbacks import VectorFallbackWarning
from memlane.stores.protocol import SearchHit, check_namespace
from memlane.stores.vectors import (
    EntryVector,
    check_entry_vectors,
    check_missing_vectors,
    check_model,
    check_vector_search,
    decode_vector,
)
from memlane.types import MemoryEntry, utc_now

if TYPE_CHECKING:
    from types import ModuleType

R = TypeVar("R")

__all__ = ["NetworkVectorStore", "best_vectors"]


def _numpy() -> ModuleType | None:
    try:
        import numpy  # optional: only the scoring of a fallback needs it
    except ImportError:
        return None
    return numpy


def best_vectors(
    query: Sequence[float],
    candidates: Sequence[tuple[bytes, float, int]],
    limit: int,
    *,
    use_numpy: bool = True,
) -> list[tuple[int, float]]:
    """The best ``limit`` candidates by cosine similarity to ``query``.

    Args:
        query: A unit vector.
        candidates: ``(encoded unit vector, importance, insertion order)``, in any order;
            every vector has ``len(query)`` dimensions.
        limit: How many to return.
        use_numpy: Score with numpy when it is importable (``False``: the plain loop that
            runs without it).

    Returns:
        ``(index into candidates, score)``, best first; ties by importance (higher first),
        then insertion (earlier first).
    """
    if not candidates:
        return []
    np = _numpy() if use_numpy else None
    if np is None:
        # The same float32 values, multiplied in double precision: scores differ from
        # numpy's float32 products in the last bits only, and equal vectors score equal.
        scores = [
            sum(a * b for a, b in zip(decode_vector(c[0]), query, strict=True)) for c in candidates
        ]
        best = sorted(
            range(len(candidates)), key=lambda i: (-scores[i], -candidates[i][1], candidates[i][2])
        )[:limit]
    else:
        rows = np.frombuffer(b"".join(c[0] for c in candidates), dtype="<f4")
        scores = rows.reshape(len(candidates), len(query)) @ np.asarray(query, dtype=np.float32)
        chosen = np.arange(len(candidates))
        if len(candidates) > limit:
            # Every candidate scoring at least the limit-th best: ties at the boundary are
            # then ordered below like the rest.
            kth = np.partition(scores, len(candidates) - limit)[len(candidates) - limit]
            chosen = np.flatnonzero(scores >= kth)
        importance = np.array([candidates[i][1] for i in chosen.tolist()])
        order = np.array([candidates[i][2] for i in chosen.tolist()])
        best = chosen[np.lexsort((order, -importance, -scores[chosen]))][:limit].tolist()
    # float32 arithmetic can put a unit vector's similarity to itself a hair above 1.
    return [(i, max(-1.0, min(1.0, float(scores[i])))) for i in best]


class NetworkVectorStore(NetworkStore[R]):
    """A :class:`NetworkStore` that keeps vectors beside entries (see
    :class:`~memlane.stores.protocol.VectorStore`).

    Subclasses implement ``_do_save_vectors``, ``_do_vector_search`` and
    ``_do_missing_vectors``, and call :meth:`_warn_vector_fallback` when the server cannot
    rank vectors itself.
    """

    _vector_warned = False

    def _warn_vector_fallback(self, reason: str) -> None:
        """Warns once per store that memlane scores the vectors: ``reason`` names what the
        server lacks."""
        if self._vector_warned:
            return
        self._vector_warned = True
        warnings.warn(
            f"{self._kind} server at {self.address} {reason}; memlane reads the candidate "
            "vectors and scores them itself, which is slower on large namespaces",
            VectorFallbackWarning,
            stacklevel=4,
        )

    async def _do_save_vectors(
        self, resource: R, namespace: str, model: str, vectors: list[EntryVector], now: datetime
    ) -> int:
        raise NotImplementedError

    async def _do_vector_search(
        self,
        resource: R,
        namespaces: list[str],
        query: list[float],
        model: str,
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        """Searches checked, non-empty ``namespaces`` with a unit ``query``."""
        raise NotImplementedError

    async def _do_missing_vectors(
        self, resource: R, namespaces: list[str], model: str, limit: int, now: datetime
    ) -> list[MemoryEntry]:
        raise NotImplementedError

    async def async_save_vectors(
        self, namespace: str, model: str, vectors: Sequence[EntryVector]
    ) -> int:
        """Attaches each vector to its entry of ``namespace`` while the entry's search text is
        still the one the vector was made from (see
        :meth:`memlane.stores.VectorStore.save_vectors`).

        Returns:
            How many vectors were attached.

        Raises:
            TypeError, ValueError: A bad argument, named; vectors of different dimensions; a
                ``model`` this server cannot hold.
            ReadOnlyStoreError: The store was opened read-only.
            StoreConnectionError: The server is unreachable (after one retry).
        """
        checked = check_entry_vectors(vectors)
        self._check_names(namespace=check_namespace(namespace), model=check_model(model))
        self._check_write()
        # An id this server cannot hold names no stored entry: nothing to attach to.
        kept = [v for v in checked if self._name_problem(v.entry_id) is None]
        if not kept:
            return 0
        now = utc_now()
        return await self._call(lambda r: self._do_save_vectors(r, namespace, model, kept, now))

    async def async_vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` whose ``model`` vector is most similar to ``vector``
        (see :meth:`memlane.stores.VectorStore.vector_search`).

        Raises:
            TypeError, ValueError: A bad argument, named (before any I/O).
            StoreConnectionError: The server is unreachable (after one retry).
        """
        names, query, model, limit, minimum = check_vector_search(
            namespaces, vector, model, limit, min_importance
        )
        self._check_names(model=model)
        names = [n for n in names if self._name_problem(n) is None]
        if not names:
            return []
        now = utc_now()
        return await self._call(
            lambda r: self._do_vector_search(r, names, query, model, limit, minimum, now)
        )

    async def async_missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Unexpired entries of ``namespaces`` with a search text and no ``model`` vector,
        oldest first (see :meth:`memlane.stores.VectorStore.missing_vectors`).

        Raises:
            TypeError, ValueError: A bad argument, named (before any I/O).
            StoreConnectionError: The server is unreachable (after one retry).
        """
        names, model, limit = check_missing_vectors(namespaces, model, limit)
        self._check_names(model=model)
        names = [n for n in names if self._name_problem(n) is None]
        if not names:
            return []
        now = utc_now()
        return await self._call(lambda r: self._do_missing_vectors(r, names, model, limit, now))

    save_vectors = blocking(async_save_vectors)
    vector_search = blocking(async_vector_search)
    missing_vectors = blocking(async_missing_vectors)
