"""Pure-Python twin of the Rust vector index: entries' unit vectors, scored by exact dot products.

Keeps the invariants ``rust/src/vectors.rs`` documents: an entry has at most one vector;
vectors are grouped by (model, dimensions) and a search reads only its group, so vectors of
another model or dimension are never compared; removal moves a group's last row into the hole;
a vector replaced within its namespace keeps its sequence number, and ties go to importance,
then to the oldest.

The Rust index also keeps an int8 copy of each row and scores exactly only the rows whose
error-bounded int8 score can reach the answer; that pass changes speed, never results, so this
twin scores every row and is what the differential tests hold the Rust index to.

Each group stores its rows as float32, in a numpy matrix when numpy can be imported (one
matrix-vector product per search) and in ``array("f")`` rows otherwise; :data:`NUMPY` says
which, and tests flip it to cover both. numpy is imported when an index is made, not with
memlane. Scores equal the Rust index's to float32 rounding, and exactly when the products and
sums are representable.
"""

from __future__ import annotations

import heapq
import struct
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memlane._pure.memory_table import _live

__all__ = ["NUMPY", "VectorIndex", "dot", "numpy_module"]

NUMPY: bool = True
"""Whether an index made from now on uses numpy when it can be imported (tests set it to
``False`` to build the plain one)."""

_numpy: Any = None


def numpy_module() -> Any:
    """numpy if it can be imported and :data:`NUMPY` allows it, else ``None``."""
    global _numpy
    if not NUMPY:
        return None
    if _numpy is None:
        try:
            import numpy
        except ImportError:  # the plain-Python rows then serve
            return None
        _numpy = numpy
    return _numpy


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product of two float32 vectors, summed as the Rust index sums it: eight
    lanes, then pairwise (rounded to float32 at each step only where Rust rounds)."""
    lanes = [0.0] * 8
    whole = len(a) - len(a) % 8
    for i in range(whole):
        lanes[i % 8] = _f32(lanes[i % 8] + _f32(a[i] * b[i]))
    tail = 0.0
    for i in range(whole, len(a)):
        tail = _f32(tail + _f32(a[i] * b[i]))
    quads = [_f32(lanes[i] + lanes[i + 4]) for i in range(4)]
    return _f32(_f32(_f32(quads[0] + quads[2]) + _f32(quads[1] + quads[3])) + tail)


_F32 = struct.Struct("<f")


def _f32(x: float) -> float:
    # A float32 sum or product computed in float64 and rounded once is the float32 result
    # (float64 has more than twice float32's precision), so this reproduces Rust's f32 steps.
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


@dataclass(slots=True)
class _Row:
    entry_id: str
    namespace: str
    digest: str
    importance: float
    expires_at: float | None
    seq: int
    payload: Any


class _Group:
    """The rows of one (model, dimensions), their floats contiguous."""

    def __init__(self, model: str, dims: int, np: Any) -> None:
        self.model = model
        self.dims = dims
        self.rows: list[_Row] = []
        self.np = np
        # numpy: a matrix with spare capacity (doubling), its first len(rows) rows in use.
        self.matrix: Any = self.np.zeros((0, dims), dtype=self.np.float32) if self.np else None
        self.floats: list[array[float]] = []

    def append(self, vector: Sequence[float], row: _Row) -> int:
        at = len(self.rows)
        self.rows.append(row)
        if self.np is None:
            self.floats.append(array("f", vector))
            return at
        if at == len(self.matrix):
            grown = self.np.zeros((max(8, 2 * at), self.dims), dtype=self.np.float32)
            grown[:at] = self.matrix[:at]
            self.matrix = grown
        self.matrix[at] = vector
        return at

    def pop_into(self, at: int) -> _Row:
        """Removes row ``at``, moving the last row into its place; the removed row."""
        last = len(self.rows) - 1
        if self.np is None:
            self.floats[at] = self.floats[last]
            self.floats.pop()
        else:
            self.matrix[at] = self.matrix[last]
        taken = self.rows[at]
        self.rows[at] = self.rows[last]
        self.rows.pop()
        return taken

    def scores(
        self, query: Sequence[float], picked: list[int], limit: int
    ) -> list[tuple[float, int]]:
        """(dot product with ``query``, row) of the rows ``picked`` that may be among the
        best ``limit``: all of them, or with numpy those scoring at least the ``limit``-th
        best score (ties included, so the caller's tie-break still decides)."""
        if self.np is None:
            q = array("f", query)
            return [(dot(self.floats[i], q), i) for i in picked]
        if not picked:
            return []
        np = self.np
        rows = np.asarray(picked)
        products = self.matrix[rows] @ np.asarray(query, dtype=np.float32)
        if len(products) > limit:
            cut = np.partition(products, len(products) - limit)[len(products) - limit]
            keep = np.flatnonzero(products >= cut)
            products, rows = products[keep], rows[keep]
        return list(zip(products.tolist(), rows.tolist(), strict=True))


def _best_first(hit: tuple[float, float, int, int]) -> tuple[float, float, int]:
    score, importance, seq, _ = hit
    return (-score, -importance, seq)


class VectorIndex:
    """Vectors of entries, grouped by (model, dimensions); see the module docstring."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, int], _Group] = {}
        self._slots: dict[str, tuple[_Group, int]] = {}  # entry id -> (group, row)
        self._next_seq = 0
        self._np = numpy_module()
        # Searches run outside the store's write lock; this keeps them off half-made updates.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    def _take(self, group: _Group, at: int) -> _Row:
        taken = group.pop_into(at)
        if at < len(group.rows):
            self._slots[group.rows[at].entry_id] = (group, at)
        del self._slots[taken.entry_id]
        return taken

    def upsert(
        self,
        entry_id: str,
        namespace: str,
        model: str,
        digest: str,
        vector: Sequence[float],
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Attaches ``vector`` of ``model`` to ``entry_id``, replacing any vector it had."""
        with self._lock:
            slot = self._slots.get(entry_id)
            old = self._take(*slot) if slot is not None else None
            if old is not None and old.namespace == namespace:
                seq = old.seq
            else:
                self._next_seq += 1
                seq = self._next_seq
            key = (model, len(vector))
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(model, len(vector), self._np)
            row = _Row(entry_id, namespace, digest, importance, expires_at, seq, payload)
            self._slots[entry_id] = (group, group.append(vector, row))

    def refresh(
        self,
        entry_id: str,
        namespace: str,
        digest: str,
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> bool:
        """After the entry was saved again: keeps its vector (with the new importance, expiry
        and payload) if it stays in ``namespace`` with the text of ``digest``, else drops it;
        whether it was kept."""
        with self._lock:
            slot = self._slots.get(entry_id)
            if slot is None:
                return False
            group, at = slot
            row = group.rows[at]
            if row.namespace == namespace and row.digest == digest:
                row.importance, row.expires_at, row.payload = importance, expires_at, payload
                return True
            self._take(group, at)
            return False

    def remove(self, entry_id: str) -> bool:
        """Drops ``entry_id``'s vector; whether it had one."""
        with self._lock:
            slot = self._slots.get(entry_id)
            if slot is None:
                return False
            self._take(*slot)
            return True

    def _remove_where(self, drop: Any) -> int:
        removed = 0
        for group in self._groups.values():
            at = 0
            while at < len(group.rows):
                if drop(group.rows[at]):
                    self._take(group, at)  # the last row moved into `at`: look at it next
                    removed += 1
                else:
                    at += 1
        return removed

    def clear(self, namespace: str) -> int:
        """Drops the vectors of a namespace's entries; how many."""
        with self._lock:
            return self._remove_where(lambda row: row.namespace == namespace)

    def cleanup_expired(self, now: float) -> int:
        """Drops the vectors of entries expired at ``now``; how many."""
        with self._lock:
            return self._remove_where(lambda row: not _live(row.expires_at, now))

    def model_of(self, entry_id: str) -> str | None:
        """The model of ``entry_id``'s vector, if it has one."""
        slot = self._slots.get(entry_id)
        return None if slot is None else slot[0].model

    def search(
        self,
        namespaces: list[str],
        model: str,
        query: Sequence[float],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Any, float]]:
        """Entries of ``namespaces`` live at ``now`` with ``importance >= min_importance`` and
        a vector of ``model`` with ``len(query)`` dimensions, by dot product with ``query``:
        best first, then importance, then the oldest; at most ``limit``."""
        with self._lock:
            group = self._groups.get((model, len(query)))
            if group is None or not query:
                return []
            wanted = set(namespaces)
            picked = [
                i
                for i, row in enumerate(group.rows)
                if row.importance >= min_importance
                and row.namespace in wanted
                and _live(row.expires_at, now)
            ]
            hits = [
                (score, group.rows[i].importance, group.rows[i].seq, i)
                for score, i in group.scores(query, picked, limit)
            ]
            best = heapq.nsmallest(limit, hits, key=_best_first)
            return [(group.rows[i].payload, score) for score, _, _, i in best]
