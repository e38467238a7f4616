"""The twin's in-process mirror of an SQLite file's vectors, kept in step by the file's change log.

Twin of ``rust/src/store/sqlite_vectors/mirror.rs``. Reading every blob of ``memory_vectors``
for each search costs a pass over the file (about 800 ms here at 100,000 vectors of 256
dimensions); a mirror holds one (file, model, dimensions)'s vectors with each entry's
namespace, importance and expiry, so a search is one matrix-vector product.

Invariants:

* The mirror equals what ``MIRROR_LOAD`` reads at the change-log position ``gen`` it was
  brought to. Triggers in the file append an entry's ``seq`` to ``memory_vector_changes``
  whenever its vector is written or dropped, or its namespace, importance or expiry change
  while it has one, in the writing transaction, whichever process or implementation writes.
  So re-reading the rows of the ``seq`` logged after ``gen`` brings the mirror to the file's
  state; the caller does it inside the read transaction the search runs in, so the mirror,
  the search and the rows fetched afterwards all see one snapshot.
* The log is pruned from its old end. A mirror whose position fell out of it, or lies past
  its end (another snapshot, or a file restored from a copy), is rebuilt from the table.
* A mirror belongs to one connection, named by the random id the connection keeps in its
  temporary schema (``MIRROR_ID``): a connection reads one file for its whole life, so a
  file made again at the same path, or another in-memory database, never meets an old
  mirror. The process keeps the few used last.
"""

from __future__ import annotations

import heapq
import threading
from array import array
from collections import OrderedDict
from typing import Any

from memlane._pure.vector_index import dot, numpy_module

__all__ = ["KEPT_MIRRORS", "Mirror", "mirror_for"]

KEPT_MIRRORS = 4
"""How many mirrors the process keeps (the least recently searched goes first): each holds
its file's vectors, about as much memory as they take in the file."""

_mirrors: OrderedDict[tuple[str, str, int], Mirror] = OrderedDict()
_mirrors_lock = threading.Lock()


def mirror_for(connection: str, model: str, dims: int) -> Mirror:
    """The mirror of ``model``'s ``dims``-dimensional vectors for the connection named
    ``connection``, made empty if the process has none."""
    key = (connection, model, dims)
    with _mirrors_lock:
        mirror = _mirrors.get(key)
        if mirror is None:
            mirror = _mirrors[key] = Mirror(dims)
            while len(_mirrors) > KEPT_MIRRORS:
                _mirrors.popitem(last=False)
        _mirrors.move_to_end(key)
        return mirror


class Mirror:
    """One (file, model, dimensions)'s vectors with their rows' filters; see the module.

    With numpy, the floats are a matrix with spare capacity and the filters are arrays beside
    it, so a search never loops over rows in Python; without, plain lists and :func:`dot`.
    Removal moves the last row into the hole.
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.gen: int | None = None  # None: never loaded
        self.lock = threading.Lock()
        self._np = numpy_module()
        self._slots: dict[int, int] = {}  # seq -> row
        self._namespace_ids: dict[str, int] = {}
        self._clear()

    def _clear(self) -> None:
        self._slots.clear()
        self._n = 0
        np = self._np
        if np is None:
            self._seqs: Any = []
            self._floats: list[array[float]] = []
            self._spaces: Any = []
            self._importance: Any = []
            self._expiry: Any = []
            return
        self._matrix: Any = np.zeros((0, self.dims), dtype=np.float32)
        self._seqs = np.zeros(0, dtype=np.int64)
        self._spaces = np.zeros(0, dtype=np.int64)
        self._importance = np.zeros(0, dtype=np.float64)
        self._expiry = np.zeros(0, dtype=np.float64)  # +inf: never expires

    def __len__(self) -> int:
        return self._n

    def load(self, rows: list[tuple[Any, ...]], gen: int) -> None:
        """Replaces the contents with ``rows`` (seq, blob, namespace, importance, expiry)."""
        self._clear()
        self.apply(rows, gen)

    def apply(self, rows: list[tuple[Any, ...]], gen: int) -> None:
        """Brings each changed ``seq`` to its row (seq, blob, namespace, importance, expiry),
        dropping it where the row has no blob of this mirror's length; now at ``gen``."""
        for seq, blob, namespace, importance, expires_at in rows:
            at = self._slots.get(seq)
            if blob is None or namespace is None or len(blob) != 4 * self.dims:
                if at is not None:
                    self._remove(at)
                continue
            self._put(seq, at, blob, namespace, float(importance), expires_at)
        self.gen = gen

    def _put(
        self,
        seq: int,
        at: int | None,
        blob: bytes,
        namespace: str,
        importance: float,
        expires_at: float | None,
    ) -> None:
        space = self._namespace_ids.setdefault(namespace, len(self._namespace_ids))
        if at is None:
            at = self._n
            self._n += 1
            self._slots[seq] = at
            self._grow()
        np = self._np
        if np is None:
            values = array("f")
            values.frombytes(blob)
            parts: tuple[Any, ...] = (seq, values, space, importance, expires_at)
            for column, value in zip(self._columns(), parts, strict=True):
                if at == len(column):
                    column.append(value)
                else:
                    column[at] = value
            return
        self._matrix[at] = np.frombuffer(blob, dtype="<f4")
        self._seqs[at] = seq
        self._spaces[at] = space
        self._importance[at] = importance
        self._expiry[at] = np.inf if expires_at is None else float(expires_at)

    def _columns(self) -> tuple[Any, ...]:
        return (self._seqs, self._floats, self._spaces, self._importance, self._expiry)

    def _grow(self) -> None:
        np = self._np
        if np is None or self._n <= len(self._seqs):
            return
        size = max(64, 2 * len(self._seqs))
        matrix = np.zeros((size, self.dims), dtype=np.float32)
        matrix[: len(self._matrix)] = self._matrix
        self._matrix = matrix
        for name in ("_seqs", "_spaces", "_importance", "_expiry"):
            old = getattr(self, name)
            grown = np.zeros(size, dtype=old.dtype)
            grown[: len(old)] = old
            setattr(self, name, grown)

    def _remove(self, at: int) -> None:
        last = self._n - 1
        if self._np is None:
            columns = self._columns()
            del self._slots[columns[0][at]]
            for column in columns:
                column[at] = column[last]
                column.pop()
        else:
            del self._slots[int(self._seqs[at])]
            if at != last:
                self._matrix[at] = self._matrix[last]
                for column in (self._seqs, self._spaces, self._importance, self._expiry):
                    column[at] = column[last]
        if at != last:
            self._slots[int(self._seqs[at])] = at
        self._n = last

    def search(
        self,
        namespaces: list[str],
        query: list[float],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[int, float]]:
        """(seq, dot product with ``query``) of the rows of ``namespaces`` unexpired at ``now``
        with ``importance >= min_importance``: best first, then importance, then the oldest
        (lowest seq); at most ``limit``."""
        spaces = {self._namespace_ids[n] for n in namespaces if n in self._namespace_ids}
        if not spaces or limit <= 0 or self._n == 0:
            return []
        hits: list[tuple[float, float, int]]
        np = self._np
        if np is None:
            q = array("f", query)
            hits = [
                (dot(self._floats[i], q), self._importance[i], self._seqs[i])
                for i in range(self._n)
                if self._spaces[i] in spaces
                and self._importance[i] >= min_importance
                and (self._expiry[i] is None or self._expiry[i] > now)
            ]
        else:
            n = self._n
            products = self._matrix[:n] @ np.asarray(query, dtype=np.float32)
            keep = (self._importance[:n] >= min_importance) & (self._expiry[:n] > now)
            if len(spaces) < len(self._namespace_ids):
                keep &= np.isin(self._spaces[:n], np.fromiter(spaces, dtype=np.int64))
            rows = np.flatnonzero(keep)
            products = products[rows]
            if len(products) > limit:
                # Only rows scoring at least the limit-th best can be among the best (ties
                # kept, so the exact tie-break below still decides).
                cut = np.partition(products, len(products) - limit)[len(products) - limit]
                wanted = np.flatnonzero(products >= cut)
                products, rows = products[wanted], rows[wanted]
            hits = list(
                zip(
                    products.tolist(),
                    self._importance[rows].tolist(),
                    self._seqs[rows].tolist(),
                    strict=True,
                )
            )
        best = heapq.nsmallest(limit, hits, key=lambda hit: (-hit[0], -hit[1], hit[2]))
        return [(seq, score) for score, _, seq in best]
