"""The vector index: Rust against both twins (numpy and plain Python) and a brute-force model.

The Rust ``VectorIndex`` and its pure-Python twin, built once with numpy and once without, are
driven with the same operations and must return the same payloads in the same order with the
same scores as a model that scores every vector with ``math.fsum``. The state machine's
vectors hold small dyadic values, whose products and sums float32 represents exactly, so every
implementation must agree to the bit whatever order it sums in; a second test on arbitrary
floats holds Rust and the plain twin bit-equal (they round the same steps) and numpy close.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import require_rust_core
from memlane._pure import vector_index as pure

NAMESPACES = ["a", "b", "\ud800"]  # a lone surrogate is a legal namespace in memory
ENTRY_IDS = ["e1", "e2", "e3", "e4", "e5", "e6"]
MODELS = ["m1", "m2"]
DIGESTS = ["d1", "d2"]
IMPORTANCES = [0.0, 0.3, 0.5, 1.0]
EXPIRY_OFFSETS = [None, None, -5.0, 0.0, 1.0, 60.0, math.nan]
# Dyadic values: every product and every partial sum of up to 12 of them is exact in float32.
COMPONENTS = [-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0]


def plain_twin() -> pure.VectorIndex:
    """The twin as it runs where numpy cannot be imported."""
    saved = pure.NUMPY
    pure.NUMPY = False
    try:
        return pure.VectorIndex()
    finally:
        pure.NUMPY = saved


def vectors(dims: st.SearchStrategy[int]) -> st.SearchStrategy[list[float]]:
    return dims.flatmap(lambda n: st.lists(st.sampled_from(COMPONENTS), min_size=n, max_size=n))


@dataclass
class ModelRow:
    namespace: str
    model: str
    digest: str
    vector: list[float]
    importance: float
    expires_at: float | None
    payload: object
    seq: int


class VectorIndexMachine(RuleBasedStateMachine):
    """Drives Rust, the numpy twin, the plain twin and a brute-force model alike."""

    def __init__(self) -> None:
        super().__init__()
        self.indexes = [require_rust_core().VectorIndex(), pure.VectorIndex(), plain_twin()]
        self.model: dict[str, ModelRow] = {}
        self.now = 1_000.0
        self.serial = 0

    def each(self) -> Iterator[pure.VectorIndex]:
        return iter(self.indexes)

    def live(self, row: ModelRow) -> bool:
        return row.expires_at is None or row.expires_at > self.now

    @rule(
        entry_id=st.sampled_from(ENTRY_IDS),
        namespace=st.sampled_from(NAMESPACES),
        model=st.sampled_from(MODELS),
        digest=st.sampled_from(DIGESTS),
        vector=vectors(st.integers(1, 12)),
        importance=st.sampled_from(IMPORTANCES),
        offset=st.sampled_from(EXPIRY_OFFSETS),
    )
    def upsert(
        self,
        entry_id: str,
        namespace: str,
        model: str,
        digest: str,
        vector: list[float],
        importance: float,
        offset: float | None,
    ) -> None:
        self.serial += 1
        payload = ("payload", self.serial)  # one object, given to all: identity is compared
        expires_at = None if offset is None else self.now + offset
        for index in self.each():
            index.upsert(
                entry_id, namespace, model, digest, vector, importance, expires_at, payload
            )
        old = self.model.get(entry_id)
        seq = old.seq if old is not None and old.namespace == namespace else self.serial
        self.model[entry_id] = ModelRow(
            namespace, model, digest, vector, importance, expires_at, payload, seq
        )

    @rule(
        entry_id=st.sampled_from(ENTRY_IDS),
        namespace=st.sampled_from(NAMESPACES),
        digest=st.sampled_from(DIGESTS),
        importance=st.sampled_from(IMPORTANCES),
    )
    def refresh(self, entry_id: str, namespace: str, digest: str, importance: float) -> None:
        self.serial += 1
        payload = ("refreshed", self.serial)
        row = self.model.get(entry_id)
        kept = row is not None and row.namespace == namespace and row.digest == digest
        for index in self.each():
            assert index.refresh(entry_id, namespace, digest, importance, None, payload) is kept
        if row is not None and kept:
            row.importance, row.expires_at, row.payload = importance, None, payload
        else:
            self.model.pop(entry_id, None)

    @rule(entry_id=st.sampled_from(ENTRY_IDS))
    def remove(self, entry_id: str) -> None:
        held = self.model.pop(entry_id, None) is not None
        for index in self.each():
            assert index.remove(entry_id) is held

    @rule(namespace=st.sampled_from(NAMESPACES))
    def clear(self, namespace: str) -> None:
        doomed = [i for i, r in self.model.items() if r.namespace == namespace]
        for entry_id in doomed:
            del self.model[entry_id]
        assert [index.clear(namespace) for index in self.each()] == [len(doomed)] * 3

    @rule()
    def cleanup_expired(self) -> None:
        doomed = [i for i, r in self.model.items() if not self.live(r)]
        for entry_id in doomed:
            del self.model[entry_id]
        assert [index.cleanup_expired(self.now) for index in self.each()] == [len(doomed)] * 3

    @rule(step=st.sampled_from([0.0, 1.0, 5.0, 60.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @rule(
        namespaces=st.lists(st.sampled_from(NAMESPACES), max_size=3),
        model=st.sampled_from(MODELS),
        query=vectors(st.integers(1, 12)),
        limit=st.integers(1, 8),
        min_importance=st.sampled_from(IMPORTANCES),
    )
    def search(
        self,
        namespaces: list[str],
        model: str,
        query: list[float],
        limit: int,
        min_importance: float,
    ) -> None:
        ranked = sorted(
            (
                (math.fsum(a * b for a, b in zip(r.vector, query, strict=True)), r)
                for r in self.model.values()
                if r.namespace in namespaces
                and r.model == model
                and len(r.vector) == len(query)
                and r.importance >= min_importance
                and self.live(r)
            ),
            key=lambda hit: (-hit[0], -hit[1].importance, hit[1].seq),
        )[:limit]
        expected = [(r.payload, score) for score, r in ranked]
        args = (namespaces, model, query, limit, min_importance, self.now)
        for index in self.each():
            found = index.search(*args)
            assert [s for _, s in found] == [s for _, s in expected]
            assert all(f is e for (f, _), (e, _) in zip(found, expected, strict=True))

    @rule(entry_id=st.sampled_from(ENTRY_IDS))
    def model_of(self, entry_id: str) -> None:
        row = self.model.get(entry_id)
        expected = None if row is None else row.model
        assert [index.model_of(entry_id) for index in self.each()] == [expected] * 3

    @invariant()
    def same_size(self) -> None:
        assert [len(index) for index in self.each()] == [len(self.model)] * 3


class TestIndexesAgreeOnAnyOperationSequence(VectorIndexMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust, numpy twin, plain twin and model: same hits, order and scores, step by step."""


class TestScoresOnArbitraryFloats:
    """Rust and the plain twin round the same float32 steps; numpy differs by rounding only."""

    @given(
        pairs=st.integers(1, 300).flatmap(
            lambda n: st.tuples(
                st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n),
                st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n),
            )
        )
    )
    def test_dot(self, pairs: tuple[list[float], list[float]]) -> None:
        stored, query = pairs
        rust, np_twin, plain = require_rust_core().VectorIndex(), pure.VectorIndex(), plain_twin()
        for index in (rust, np_twin, plain):
            index.upsert("e", "ns", "m", "d", stored, 0.5, None, "p")
        (_, r), (_, p) = (
            rust.search(["ns"], "m", query, 1, 0.0, 0.0)[0],
            plain.search(["ns"], "m", query, 1, 0.0, 0.0)[0],
        )
        (_, n) = np_twin.search(["ns"], "m", query, 1, 0.0, 0.0)[0]
        assert r == p == pure.dot(stored, query)
        exact = math.fsum(a * b for a, b in zip(stored, query, strict=True))
        bound = 1e-6 * len(stored)
        assert abs(r - exact) <= bound
        assert abs(n - exact) <= bound


class TestTwinStorage:
    """The twin keeps float32 rows contiguous in numpy when it can, in arrays otherwise."""

    def test_numpy_group_grows_and_moves_rows(self) -> None:
        index = pure.VectorIndex()
        for i in range(20):
            index.upsert(f"e{i}", "ns", "m", "d", [float(i), 1.0], 0.5, None, i)
        for i in range(0, 20, 2):
            assert index.remove(f"e{i}")
        found = index.search(["ns"], "m", [1.0, 0.0], 20, 0.0, 0.0)
        assert [p for p, _ in found] == list(range(19, 0, -2))
        assert [s for _, s in found] == [float(i) for i in range(19, 0, -2)]
        group = next(iter(index._groups.values()))
        assert isinstance(group.matrix, numpy.ndarray)
        assert group.matrix.dtype == numpy.float32

    def test_plain_twin_without_numpy(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pure, "_numpy", None)
        monkeypatch.setattr(pure, "NUMPY", False)
        assert pure.numpy_module() is None
        index = pure.VectorIndex()
        index.upsert("e", "ns", "m", "d", [0.5, 0.5], 0.5, None, "p")
        assert index.search(["ns"], "m", [1.0, 1.0], 1, 0.0, 0.0) == [("p", 1.0)]
        group = next(iter(index._groups.values()))
        assert group.matrix is None
        assert len(group.floats) == 1


class TestInt8PrescanKeepsTheExactAnswer:
    """The Rust index's int8 pre-scan skips only rows that cannot be in the answer: on clustered
    vectors, exact duplicates (ties) and filtered rows it returns what the full scan returns."""

    @given(
        seed=st.integers(0, 2**32 - 1),
        dims=st.sampled_from([1, 3, 8, 33, 64, 256]),
        spread=st.sampled_from([0.0, 1e-4, 1e-2, 0.3]),
        limit=st.integers(1, 40),
    )
    def test_clustered_rows(self, seed: int, dims: int, spread: float, limit: int) -> None:
        rng = numpy.random.default_rng(seed)
        centres = rng.standard_normal((3, dims))
        rust, plain = require_rust_core().VectorIndex(), plain_twin()
        for i in range(150):
            # Every fifth row repeats its centre exactly: ties only the tie-break orders.
            noise = 0.0 if i % 5 == 0 else spread * rng.standard_normal(dims)
            row = centres[i % 3] + noise
            vector = [float(x) for x in (row / numpy.linalg.norm(row)).astype(numpy.float32)]
            namespace = "b" if i % 11 == 0 else "a"
            importance = IMPORTANCES[i % len(IMPORTANCES)]
            expires_at = 5.0 if i % 13 == 0 else None
            for index in (rust, plain):
                index.upsert(f"e{i}", namespace, "m", "d", vector, importance, expires_at, i)
        for query_row in (centres[0], rng.standard_normal(dims)):
            query = [
                float(x) for x in (query_row / numpy.linalg.norm(query_row)).astype(numpy.float32)
            ]
            expected = plain.search(["a"], "m", query, limit, 0.3, 10.0)
            assert expected
            assert rust.search(["a"], "m", query, limit, 0.3, 10.0) == expected


class TestLargeGroupsAgree:
    """A group large enough for the Rust index to split its scan over threads (on a machine
    with more than one core) returns the numpy twin's answer: same hits, order and scores."""

    def test_twenty_thousand_rows(self) -> None:
        rng = numpy.random.default_rng(7)
        # Dyadic components: every score is exact in float32, so both must agree to the bit,
        # and the many equal scores leave the order to importance, then age.
        rows = rng.choice(numpy.array(COMPONENTS, dtype=numpy.float32), size=(20_000, 256))
        rust, twin = require_rust_core().VectorIndex(), pure.VectorIndex()
        for i, row in enumerate(rows.tolist()):
            importance = IMPORTANCES[i % len(IMPORTANCES)]
            for index in (rust, twin):
                index.upsert(f"e{i}", "a" if i % 9 else "b", "m", "d", row, importance, None, i)
        for query in (rows[3].tolist(), rng.choice(COMPONENTS, size=256).tolist()):
            for limit in (1, 10, 200):
                expected = twin.search(["a"], "m", query, limit, 0.3, 0.0)
                assert len(expected) == limit
                assert rust.search(["a"], "m", query, limit, 0.3, 0.0) == expected
