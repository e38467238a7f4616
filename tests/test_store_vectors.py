"""The vector contract every store keeps (:class:`memlane.stores.VectorStore`), on both paths.

:class:`VectorStoreContract` holds the rules; it is collected through subclasses that supply a
``vstore`` fixture yielding a :class:`~store_kinds.Made`. This module runs it on the local
stores (memory, file, SQLite) with both implementations; a network store's test module reuses
it with its own fixture::

    from test_store_vectors import VectorStoreContract


    @pytest.fixture(params=["postgres", "mongodb"])
    async def vstore(request, tmp_path):
        async for made in open_store(request.param, request, tmp_path):
            yield made


    class TestNetworkStoresKeepTheVectorContract(VectorStoreContract):
        '''PostgreSQL and MongoDB keep every rule of VectorStore.'''

Scores are cosine similarities; stores compute them in float32 (Rust, numpy) or float64 (the
file store's scan), so they are compared to :data:`SCORE_TOLERANCE`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sqlite3
import struct
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

from conftest import require_rust_core
from memlane import _backend
from memlane._pure import memory_table as pure_memory_table
from memlane._runner import MissingVectors, SaveVectors, VectorSearch
from memlane.errors import CorruptStoreError, ReadOnlyStoreError
from memlane.stores import (
    EntryVector,
    FileStore,
    InMemoryStore,
    SearchableStore,
    SQLiteStore,
    VectorStore,
)
from memlane.stores.file import namespace_filename
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import (
    check_model,
    check_query_vector,
    decode_vector,
    encode_vector,
    text_digest,
    unit,
)
from memlane.types import MemoryEntry, utc_now
from store_kinds import Made, open_store

SCORE_TOLERANCE = 1e-5

LOCAL_VECTOR_STORES = ["memory", "file", "sqlite"]
"""The stores this module runs the contract on; network stores run it from their own module."""

MODEL = "test:model"


def doc(
    text: str | None, *, key: str | None = None, importance: float = 0.5, **kw: Any
) -> MemoryEntry:
    """An entry searchable by ``text`` (or by nothing)."""
    metadata = {} if text is None else {SEARCH_TEXT: text}
    return MemoryEntry(
        key=key, content={"text": text}, metadata=metadata, importance=importance, **kw
    )


def vec(entry: MemoryEntry, *values: float) -> EntryVector:
    """A vector for ``entry``'s current search text."""
    text = entry.metadata[SEARCH_TEXT]
    return EntryVector(entry.entry_id, text_digest(text), unit(values))


def contents(hits: Sequence[Any]) -> list[str]:
    return [hit.entry.content["text"] for hit in hits]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    ua, ub = unit(a), unit(b)
    return math.fsum(x * y for x, y in zip(ua, ub, strict=True))


def as_vectors(made: Made) -> VectorStore:
    """The made store, as the vector protocol it must implement."""
    assert isinstance(made.store, VectorStore)
    return made.store


async def put(store: Any, namespace: str, *entries: MemoryEntry) -> None:
    for entry in entries:
        await store.async_save(namespace, entry)


class VectorStoreContract:
    """The rules of :class:`~memlane.stores.VectorStore`, for any store a ``vstore`` fixture
    yields (as a :class:`~store_kinds.Made`)."""

    async def test_protocol_sync_and_async(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        assert isinstance(store, VectorStore)
        a, b = doc("coffee black"), doc("green tea")
        await put(store, "ns", a, b)
        assert store.save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
        assert await store.async_save_vectors("ns", MODEL, [vec(b, 0, 1)]) == 1
        assert contents(store.vector_search(["ns"], [1, 0.1], model=MODEL)) == [
            "coffee black",
            "green tea",
        ]
        found = await store.async_vector_search(["ns"], [0.1, 1], model=MODEL, limit=1)
        assert contents(found) == ["green tea"]
        assert store.missing_vectors(["ns"], MODEL) == []
        assert await store.async_missing_vectors(["ns"], "other:model") == [a, b]

    async def test_typed_operations_run_on_the_store(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a = doc("coffee black")
        await put(store, "ns", a)
        assert [e.entry_id for e in MissingVectors(["ns"], MODEL).run(store)] == [a.entry_id]
        assert await SaveVectors("ns", MODEL, [vec(a, 1, 2)]).run_async(store) == 1
        hits = VectorSearch(["ns"], [1, 2], MODEL, limit=3).run(store)
        assert contents(hits) == ["coffee black"]
        assert hits[0].score == pytest.approx(1.0, abs=SCORE_TOLERANCE)
        assert await MissingVectors(["ns"], MODEL).run_async(store) == []

    async def test_scores_are_cosine_similarities_best_first(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        rows = {"north": (0.0, 1.0, 0.0), "east": (1.0, 0.0, 0.0), "north-east": (1, 1, 0.2)}
        entries = {name: doc(name) for name in rows}
        await put(store, "ns", *entries.values())
        vectors = [vec(entries[n], *v) for n, v in rows.items()]
        assert await store.async_save_vectors("ns", MODEL, vectors) == 3
        query = [0.2, 1.0, 0.0]
        hits = await store.async_vector_search(["ns"], query, model=MODEL)
        assert contents(hits) == ["north", "north-east", "east"]
        for hit in hits:
            expected = cosine(rows[hit.entry.content["text"]], query)
            assert hit.score == pytest.approx(expected, abs=SCORE_TOLERANCE)
        opposite = await store.async_vector_search(["ns"], [0.0, -1.0, 0.0], model=MODEL)
        assert opposite[-1].score == pytest.approx(-1.0, abs=SCORE_TOLERANCE)

    async def test_hits_are_the_stored_entries(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a = doc("coffee black", key="drink", importance=0.7)
        await put(store, "ns", a)
        await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
        (hit,) = await store.async_vector_search(["ns"], [1, 0], model=MODEL)
        assert hit.entry == await store.async_load_by_key("ns", "drink")

    async def test_a_vector_attaches_only_to_its_text(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a, b = doc("coffee black"), doc("green tea")
        await put(store, "ns", a, b)
        stale = EntryVector(a.entry_id, text_digest("coffee with milk"), [1.0, 0.0])
        ghost = EntryVector("no-such-entry", text_digest("coffee black"), [1.0, 0.0])
        wrong_namespace = vec(b, 0, 1)
        assert await store.async_save_vectors("other", MODEL, [wrong_namespace]) == 0
        assert await store.async_save_vectors("ns", MODEL, [stale, ghost]) == 0
        assert await store.async_vector_search(["ns", "other"], [1, 0], model=MODEL) == []
        assert await store.async_save_vectors("ns", MODEL, [stale, vec(b, 0, 1)]) == 1
        assert contents(await store.async_vector_search(["ns"], [1, 0], model=MODEL)) == [
            "green tea"
        ]

    async def test_entries_without_search_text_or_expired_take_no_vector(
        self, vstore: Made
    ) -> None:
        store = as_vectors(vstore)
        plain = doc(None)
        gone = doc("old news", expires_at=utc_now() - timedelta(seconds=5))
        await put(store, "ns", plain, gone)
        attempt = [EntryVector(plain.entry_id, text_digest(""), [1.0]), vec(gone, 1)]
        assert await store.async_save_vectors("ns", MODEL, attempt) == 0
        assert await store.async_missing_vectors(["ns"], MODEL) == []

    async def test_models_and_dimensions_are_never_compared(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a, b, c = doc("alpha"), doc("beta"), doc("gamma")
        await put(store, "ns", a, b, c)
        await store.async_save_vectors("ns", "model:a", [vec(a, 1, 0)])
        await store.async_save_vectors("ns", "model:b", [vec(b, 1, 0)])
        await store.async_save_vectors("ns", "model:a", [vec(c, 1, 0, 0)])
        assert contents(await store.async_vector_search(["ns"], [1, 0], model="model:a")) == [
            "alpha"
        ]
        assert contents(await store.async_vector_search(["ns"], [1, 0], model="model:b")) == [
            "beta"
        ]
        three = await store.async_vector_search(["ns"], [1, 0, 0], model="model:a")
        assert contents(three) == ["gamma"]
        assert await store.async_vector_search(["ns"], [1, 0, 0, 0], model="model:a") == []
        assert await store.async_vector_search(["ns"], [1, 0], model="model:c") == []

    async def test_a_new_vector_replaces_any_model(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a = doc("alpha")
        await put(store, "ns", a)
        await store.async_save_vectors("ns", "model:a", [vec(a, 1, 0)])
        await store.async_save_vectors("ns", "model:b", [vec(a, 0, 1)])
        assert await store.async_vector_search(["ns"], [1, 0], model="model:a") == []
        (hit,) = await store.async_vector_search(["ns"], [1, 0], model="model:b")
        assert hit.score == pytest.approx(0.0, abs=SCORE_TOLERANCE)
        assert await store.async_missing_vectors(["ns"], "model:a") == [a]

    async def test_delete_clear_and_expiry_drop_vectors(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a, b, c, d = doc("a"), doc("b"), doc("c"), doc("d")
        await put(store, "ns", a, b, c)
        await put(store, "other", d)
        await store.async_save_vectors("ns", MODEL, [vec(a, 1), vec(b, 1), vec(c, 1)])
        await store.async_save_vectors("other", MODEL, [vec(d, 1)])
        assert await store.async_delete("ns", a.entry_id)
        assert contents(await store.async_vector_search(["ns"], [1], model=MODEL)) == ["b", "c"]
        expired = b.model_copy(update={"expires_at": utc_now() - timedelta(seconds=1)})
        await put(store, "ns", expired)
        assert contents(await store.async_vector_search(["ns"], [1], model=MODEL)) == ["c"]
        await store.async_cleanup_expired()
        assert await store.async_clear("ns") == 1
        assert await store.async_vector_search(["ns"], [1], model=MODEL) == []
        # A new entry under an old id starts without a vector.
        await put(store, "ns", a)
        assert await store.async_vector_search(["ns"], [1], model=MODEL) == []
        assert contents(await store.async_vector_search(["other"], [1], model=MODEL)) == ["d"]

    async def test_a_changed_text_drops_the_vector(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a = doc("coffee black")
        await put(store, "ns", a)
        await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
        changed = a.model_copy(update={"metadata": {SEARCH_TEXT: "tea, green"}})
        await put(store, "ns", changed)
        assert await store.async_vector_search(["ns"], [1, 0], model=MODEL) == []
        assert await store.async_missing_vectors(["ns"], MODEL) == [changed]
        unsearchable = a.model_copy(update={"metadata": {}})
        await put(store, "ns", unsearchable)
        assert await store.async_missing_vectors(["ns"], MODEL) == []
        assert await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 0

    async def test_the_same_text_saved_again_is_found_or_reported_missing(
        self, vstore: Made
    ) -> None:
        store = as_vectors(vstore)
        a = doc("coffee black", importance=0.5)
        await put(store, "ns", a)
        await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
        again = a.model_copy(update={"importance": 0.9, "content": {"text": "coffee, again"}})
        await put(store, "ns", again)
        hits = await store.async_vector_search(["ns"], [1, 0], model=MODEL)
        missing = await store.async_missing_vectors(["ns"], MODEL)
        # A store may keep the vector (same text) or drop it; never both, never the old entry.
        assert (contents(hits), missing) in ((["coffee, again"], []), ([], [again]))
        if hits:
            assert hits[0].entry.importance == 0.9

    async def test_a_key_taken_over_drops_the_holders_vector(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        old, new = doc("old value", key="k"), doc("new value", key="k")
        await put(store, "ns", old)
        await store.async_save_vectors("ns", MODEL, [vec(old, 1, 0)])
        await put(store, "ns", new)
        assert await store.async_vector_search(["ns"], [1, 0], model=MODEL) == []

    async def test_namespaces_importance_and_limit(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        low, high, far = doc("low", importance=0.2), doc("high", importance=0.8), doc("far")
        await put(store, "ns", low, high)
        await put(store, "elsewhere", far)
        await store.async_save_vectors("ns", MODEL, [vec(low, 1, 0), vec(high, 1, 1)])
        await store.async_save_vectors("elsewhere", MODEL, [vec(far, 1, 0.1)])
        search = store.async_vector_search
        assert contents(await search(["ns"], [1, 0], model=MODEL)) == ["low", "high"]
        assert contents(await search(["ns"], [1, 0], model=MODEL, min_importance=0.5)) == ["high"]
        both = await search(["ns", "elsewhere", "ns"], [1, 0], model=MODEL, limit=2)
        assert contents(both) == ["low", "far"]
        assert await search(["nowhere"], [1, 0], model=MODEL) == []
        assert await search([], [1, 0], model=MODEL) == []

    @pytest.mark.parametrize("limit", [2**63 - 1, 2**63, 2**64, 10**30])
    async def test_a_limit_past_any_store_size_means_all(self, vstore: Made, limit: int) -> None:
        # A limit is "at most": one no store could reach (past a 64-bit integer, which
        # PostgreSQL and the Rust index cannot take) asks for every hit, on every store.
        store = as_vectors(vstore)
        a, b = doc("coffee black"), doc("coffee green")
        await put(store, "ns", a, b)
        await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0)])
        found = store.vector_search(["ns"], [1, 0], model=MODEL, limit=limit)
        assert contents(found) == ["coffee black"]
        found = await store.async_vector_search(["ns"], [1, 0], model=MODEL, limit=limit)
        assert contents(found) == ["coffee black"]
        assert store.missing_vectors(["ns"], MODEL, limit=limit) == [b]
        assert await store.async_missing_vectors(["ns"], MODEL, limit=limit) == [b]
        assert isinstance(store, SearchableStore)
        words = store.search(["ns"], "coffee", limit=limit)
        assert sorted(contents(words)) == ["coffee black", "coffee green"]
        words = await store.async_search(["ns"], "coffee", limit=limit)
        assert sorted(contents(words)) == ["coffee black", "coffee green"]

    async def test_ties_go_to_importance_then_insertion(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        first, second, important = doc("first"), doc("second"), doc("important", importance=0.9)
        await put(store, "ns", first, second, important)
        same = [vec(first, 1, 1), vec(second, 1, 1), vec(important, 1, 1)]
        await store.async_save_vectors("ns", MODEL, same)
        hits = await store.async_vector_search(["ns"], [1, 1], model=MODEL)
        assert contents(hits) == ["important", "first", "second"]

    async def test_missing_vectors_oldest_first_up_to_limit(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        entries = [doc(f"text {i}") for i in range(5)]
        await put(store, "ns", *entries, doc(None))
        await store.async_save_vectors("ns", MODEL, [vec(entries[1], 1)])
        assert await store.async_missing_vectors(["ns"], MODEL, limit=3) == [
            entries[0],
            entries[2],
            entries[3],
        ]
        assert len(await store.async_missing_vectors(["ns", "ns"], MODEL)) == 4
        assert await store.async_missing_vectors(["empty"], MODEL) == []

    async def test_vectors_of_a_call_share_their_dimensions(self, vstore: Made) -> None:
        store = as_vectors(vstore)
        a, b = doc("a"), doc("b")
        await put(store, "ns", a, b)
        with pytest.raises(ValueError, match="same dimensions"):
            await store.async_save_vectors("ns", MODEL, [vec(a, 1, 0), vec(b, 1, 0, 0)])
        assert await store.async_vector_search(["ns"], [1, 0], model=MODEL) == []

    @pytest.mark.parametrize(
        ("kwargs", "error", "name"),
        [
            ({"vector": "1 0"}, TypeError, "vector"),
            ({"vector": [1, "0"]}, TypeError, "vector"),
            ({"vector": []}, ValueError, "vector"),
            ({"vector": [math.nan, 1]}, ValueError, "vector"),
            ({"vector": [0.0, 0.0]}, ValueError, "vector"),
            ({"model": 42}, TypeError, "model"),
            ({"model": ""}, ValueError, "model"),
            ({"namespaces": "ns"}, TypeError, "namespaces"),
            ({"namespaces": [""]}, ValueError, "namespace"),
            ({"limit": 0}, ValueError, "limit"),
            ({"limit": 1.5}, TypeError, "limit"),
            ({"min_importance": 2}, ValueError, "min_importance"),
        ],
    )
    async def test_bad_search_arguments_are_named(
        self, vstore: Made, kwargs: dict[str, Any], error: type[Exception], name: str
    ) -> None:
        args: dict[str, Any] = {"namespaces": ["ns"], "vector": [1.0, 0.0], "model": MODEL}
        args.update(kwargs)
        with pytest.raises(error, match=name):
            await as_vectors(vstore).async_vector_search(**args)

    @pytest.mark.parametrize(
        ("args", "error", "name"),
        [
            (("ns", 42, []), TypeError, "model"),
            (("", MODEL, []), ValueError, "namespace"),
            (("ns", MODEL, "vectors"), TypeError, "vectors"),
            (("ns", MODEL, [("id", "digest", [1.0])]), TypeError, "EntryVector"),
            (("ns", MODEL, [EntryVector("id", "d", [math.inf])]), ValueError, "vector"),
            (("ns", MODEL, [EntryVector(1, "d", [1.0])]), TypeError, "entry_id"),  # type: ignore[arg-type]  # the wrong type is the test
        ],
    )
    async def test_bad_save_arguments_are_named(
        self, vstore: Made, args: tuple[Any, ...], error: type[Exception], name: str
    ) -> None:
        with pytest.raises(error, match=name):
            await as_vectors(vstore).async_save_vectors(*args)
        with pytest.raises(TypeError, match="model"):
            await as_vectors(vstore).async_missing_vectors(["ns"], None)  # type: ignore[arg-type]  # the wrong type is the test


@pytest.fixture(params=LOCAL_VECTOR_STORES)
async def vstore(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each local store kind, built by ``impl``."""
    async for made in open_store(request.param, request, tmp_path):
        yield made


class TestLocalStoresKeepTheVectorContract(VectorStoreContract):
    """InMemoryStore, FileStore and SQLiteStore keep every rule of VectorStore, on both paths."""


class TestReadOnlyStoresTakeNoVectors:
    """A store opened read-only refuses save_vectors and still searches the vectors it has."""

    @pytest.mark.parametrize("kind", ["file", "sqlite"])
    def test_persistent(self, kind: str, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "store"
        kinds: dict[str, Any] = {"sqlite": SQLiteStore, "file": FileStore}
        writer: VectorStore = kinds[kind](path)
        a = doc("coffee black")
        writer.save("ns", a)
        assert writer.save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 1
        writer.close()
        reader: VectorStore = kinds[kind](path, read_only=True)
        with pytest.raises(ReadOnlyStoreError):
            reader.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        assert contents(reader.vector_search(["ns"], [1, 0], model=MODEL)) == ["coffee black"]
        assert reader.missing_vectors(["ns"], MODEL) == []
        reader.close()

    def test_memory(self, impl: _backend.Implementation) -> None:
        with pytest.raises(ReadOnlyStoreError):
            InMemoryStore(read_only=True).save_vectors("ns", MODEL, [])


class TestFileStoreVectorsLiveInTheLog:
    """FileStore's vectors are lines of the namespace log: reopened, replayed, compacted."""

    def test_a_reopened_store_finds_them(self, tmp_path: Path) -> None:
        a = doc("coffee black")
        with FileStore(tmp_path) as store:
            store.save("ns", a)
            store.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        with FileStore(tmp_path) as again:
            assert contents(again.vector_search(["ns"], [1, 0], model=MODEL)) == ["coffee black"]
            assert again.missing_vectors(["ns"], MODEL) == []

    def test_another_writer_changing_the_text_drops_the_vector(self, tmp_path: Path) -> None:
        a = doc("coffee black")
        first, second = FileStore(tmp_path), FileStore(tmp_path)
        first.save("ns", a)
        first.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        assert contents(second.vector_search(["ns"], [1, 0], model=MODEL)) == ["coffee black"]
        second.save("ns", a.model_copy(update={"metadata": {SEARCH_TEXT: "tea"}}))
        assert first.vector_search(["ns"], [1, 0], model=MODEL) == []
        # A vector made from the old text, saved late by the first store, is refused.
        assert first.save_vectors("ns", MODEL, [vec(a, 1, 0)]) == 0

    def test_compaction_keeps_vectors(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        entries = [doc(f"fact {i}", key=f"k{i}") for i in range(40)]
        store.save_many("ns", entries)
        store.save_vectors("ns", MODEL, [vec(e, 1, i) for i, e in enumerate(entries)])
        path = tmp_path / namespace_filename("ns")
        assert path.read_bytes().count(b'"op": "vectors"') == 1  # one line for the batch
        for _ in range(60):  # 2 KB puts of one entry (same text): the log is compacted
            store.save("ns", entries[0].model_copy(update={"content": {"text": "x" * 2000}}))
        # The compacted file holds one vectors line per entry.
        assert path.read_bytes().count(b'"op": "vectors"') == 40
        top = FileStore(tmp_path).vector_search(["ns"], [0, 1], model=MODEL, limit=1)
        assert top[0].entry.key == "k39"

    def test_a_vectors_line_cut_short_is_ignored(self, tmp_path: Path) -> None:
        a, b = doc("alpha"), doc("beta")
        store = FileStore(tmp_path)
        store.save_many("ns", [a, b])
        store.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        path = tmp_path / namespace_filename("ns")
        whole = path.read_bytes()
        store.save_vectors("ns", MODEL, [vec(b, 0, 1)])
        path.write_bytes(path.read_bytes()[: len(whole) + 20])  # a crash mid-append
        reader = FileStore(tmp_path)
        assert contents(reader.vector_search(["ns"], [0, 1], model=MODEL)) == ["alpha"]
        assert reader.save_vectors("ns", MODEL, [vec(b, 0, 1)]) == 1
        assert contents(FileStore(tmp_path).vector_search(["ns"], [0, 1], model=MODEL)) == [
            "beta",
            "alpha",
        ]

    def test_a_damaged_vector_is_a_corrupt_store(self, tmp_path: Path) -> None:
        a = doc("alpha")
        store = FileStore(tmp_path)
        store.save("ns", a)
        store.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        path = tmp_path / namespace_filename("ns")
        path.write_bytes(path.read_bytes().replace(b'"vector": "', b'"vector": "!'))
        with pytest.raises(CorruptStoreError, match="corrupt memlane file"):
            FileStore(tmp_path).vector_search(["ns"], [1, 0], model=MODEL)


# ------------------------------------------------------------------------------ SQLite files

PRE_VECTOR_DROP = """
DROP TRIGGER memory_vectors_delete;
DROP TRIGGER memory_vectors_update;
DROP TRIGGER memory_vector_changes_entry;
DROP TABLE memory_vectors;
DROP TABLE memory_vector_changes;
"""


def pre_vector_file(path: Path) -> MemoryEntry:
    """An SQLite store file as memlane wrote it before vectors: one searchable entry."""
    entry = doc("coffee black")
    with SQLiteStore(path) as store:
        store.save("ns", entry)
    conn = sqlite3.connect(path)
    conn.executescript(PRE_VECTOR_DROP)
    conn.close()
    return entry


class TestSQLiteVectorsLiveInTheFile:
    """SQLiteStore keeps vectors in a table of its file, one schema for both paths."""

    def test_a_pre_vector_file_gains_the_table(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        entry = pre_vector_file(path)
        with SQLiteStore(path) as store:
            assert store.missing_vectors(["ns"], MODEL) == [entry]
            assert store.save_vectors("ns", MODEL, [vec(entry, 1, 0)]) == 1
            assert contents(store.vector_search(["ns"], [1, 0], model=MODEL)) == ["coffee black"]

    def test_read_only_open_of_a_pre_vector_file_changes_nothing(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        entry = pre_vector_file(path)
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as store:
            assert store.vector_search(["ns"], [1, 0], model=MODEL) == []
            assert store.missing_vectors(["ns"], MODEL) == [entry]
        assert path.read_bytes() == before

    def test_either_implementation_reads_the_others_vectors(self, tmp_path: Path) -> None:
        path = tmp_path / "shared.sqlite3"
        a, b = doc("alpha"), doc("beta")
        with _backend.use("rust"), SQLiteStore(path) as store:
            store.save_many("ns", [a, b])
            store.save_vectors("ns", MODEL, [vec(a, 1, 0)])
        with _backend.use("python"), SQLiteStore(path) as store:
            assert contents(store.vector_search(["ns"], [1, 0], model=MODEL)) == ["alpha"]
            store.save_vectors("ns", MODEL, [vec(b, 0.6, 0.8)])
        with _backend.use("rust"), SQLiteStore(path) as store:
            hits = store.vector_search(["ns"], [0, 1], model=MODEL)
            assert contents(hits) == ["beta", "alpha"]
            assert hits[0].score == pytest.approx(0.8, abs=SCORE_TOLERANCE)

    def test_scores_agree_between_implementations(self, tmp_path: Path) -> None:
        path = tmp_path / "scores.sqlite3"
        rng = random.Random(7)
        entries = [doc(f"fact {i}", importance=rng.choice([0.3, 0.6])) for i in range(200)]
        with SQLiteStore(path) as store:
            store.save_many("ns", entries)
            vectors = [vec(e, *(rng.uniform(-1, 1) for _ in range(64))) for e in entries]
            store.save_vectors("ns", MODEL, vectors)
        query = [rng.uniform(-1, 1) for _ in range(64)]
        found = {}
        for name in ("rust", "python"):
            with _backend.use(name), SQLiteStore(path, read_only=True) as store:
                found[name] = store.vector_search(["ns"], query, model=MODEL, limit=50)
        rust, python = found["rust"], found["python"]
        assert [h.entry.entry_id for h in rust] == [h.entry.entry_id for h in python]
        for r, p in zip(rust, python, strict=True):
            assert r.score == pytest.approx(p.score, abs=SCORE_TOLERANCE)


WORKER = r"""
import hashlib, json, random, sys, time
from memlane.stores import EntryVector, FileStore, SQLiteStore
from memlane.stores.vectors import text_digest, unit
from memlane.types import MemoryEntry

cfg = json.loads(sys.argv[1])

def meaning(text):
    # The vector "an embedder" gives a text: deterministic, so any process can check it.
    raw = hashlib.sha256(text.encode()).digest()
    return unit([b - 127.5 for b in raw[:16]])

store = (SQLiteStore if cfg["kind"] == "sqlite" else FileStore)(cfg["path"])
rng = random.Random(cfg["seed"])
ids = cfg["ids"]
checked = done = idle = 0
# Rounds count when they did something: an embedder or a searcher that starts before the
# writers waits for them (a bounded number of short naps) instead of finishing early, and
# stops once the writers have stopped.
while done < cfg["rounds"] and idle < (200 if done else 2_000):
    if cfg["role"] == "writer":
        entry_id = rng.choice(ids)
        text = f"text {rng.randrange(4)} of {entry_id}"
        store.save("ns", MemoryEntry(entry_id=entry_id, content=text,
                                     metadata={"search_text": text}))
        done += 1
        continue
    if cfg["role"] == "embedder":
        batch = store.missing_vectors(["ns"], "m", limit=8)
        # Embedded "slowly": a writer may change a text before the vector is saved.
        vectors = [EntryVector(e.entry_id, text_digest(e.metadata["search_text"]),
                               meaning(e.metadata["search_text"])) for e in batch]
        if vectors:
            store.save_vectors("ns", "m", vectors)
    else:
        query = meaning(f"text {rng.randrange(4)} of {rng.choice(ids)}")
        hits = store.vector_search(["ns"], query, model="m", limit=5)
        for hit in hits:
            expected = sum(a * b for a, b in zip(meaning(hit.entry.metadata["search_text"]), query))
            assert abs(hit.score - expected) < 1e-4, (hit.entry.content, hit.score, expected)
            checked += 1
        vectors = hits
    if vectors:
        done, idle = done + 1, 0
    else:
        idle += 1
        time.sleep(0.002)
store.close()
print(json.dumps({"role": cfg["role"], "checked": checked}))
"""


def meaning(text: str) -> list[float]:
    """The worker's embedding of ``text`` (see :data:`WORKER`)."""
    raw = hashlib.sha256(text.encode()).digest()
    return unit([b - 127.5 for b in raw[:16]])


class TestVectorsAcrossProcesses:
    """Processes writing entries, saving vectors and searching one store at once (an SQLite
    file, a file store's directory): a vector only ever stands for its entry's current text."""

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_writers_embedders_and_a_searcher(self, kind: str, tmp_path: Path) -> None:
        path = tmp_path / ("shared.sqlite3" if kind == "sqlite" else "shared")
        ids = [f"e{i}" for i in range(12)]
        (SQLiteStore if kind == "sqlite" else FileStore)(path).close()
        roles = [
            ("writer", "0", 150),
            ("writer", "1", 150),
            ("embedder", "0", 150),
            ("embedder", "1", 150),
            ("searcher", "0", 150),
        ]
        procs = []
        for n, (role, pure, rounds) in enumerate(roles):
            cfg = {"path": str(path), "kind": kind, "role": role, "seed": n, "ids": ids}
            cfg["rounds"] = rounds
            env = {**os.environ, "MEMLANE_PURE_PYTHON": pure}
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER, json.dumps(cfg)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            results.append(json.loads(out))
        assert [r["role"] for r in results] == [role for role, _, _ in roles]
        assert results[-1]["checked"] > 0  # the searcher saw vectors while they changed
        # Every vector left is the one of its entry's current text. The writers may have
        # changed texts after the embedders stopped: a last embedding pass catches up, then
        # every entry, searched by its text's meaning, comes back with the expected scores.
        store: VectorStore = (SQLiteStore if kind == "sqlite" else FileStore)(path)
        late = [
            EntryVector(
                e.entry_id, text_digest(e.metadata[SEARCH_TEXT]), meaning(e.metadata[SEARCH_TEXT])
            )
            for e in store.missing_vectors(["ns"], "m")
        ]
        store.save_vectors("ns", "m", late)
        entries = store.load("ns")
        assert store.missing_vectors(["ns"], "m") == []
        for entry in entries:
            query = meaning(entry.metadata[SEARCH_TEXT])
            hits = store.vector_search(["ns"], query, model="m", limit=len(ids))
            assert len(hits) == len(entries)
            assert hits[0].entry.entry_id == entry.entry_id
            for hit in hits:
                own = meaning(hit.entry.metadata[SEARCH_TEXT])
                expected = math.fsum(a * b for a, b in zip(own, query, strict=True))
                assert hit.score == pytest.approx(expected, abs=SCORE_TOLERANCE)
        store.close()


class TestVectorHelpers:
    """What stores and writers share: digests, unit vectors, their bytes, the checks."""

    def test_text_digest(self) -> None:
        assert text_digest("coffee") == hashlib.blake2b(b"coffee", digest_size=16).hexdigest()
        assert text_digest("coffee") != text_digest("Coffee")
        assert len(text_digest("\ud800 lone surrogate")) == 32

    @given(
        st.lists(
            st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=64
        ).filter(lambda v: any(abs(x) > 1e-3 for x in v))
    )
    def test_unit_has_length_one_and_the_same_direction(self, values: list[float]) -> None:
        u = unit(values)
        assert math.fsum(x * x for x in u) == pytest.approx(1.0, abs=1e-9)
        assert cosine(u, values) == pytest.approx(1.0, abs=1e-9)

    @given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64))
    def test_bytes_round_trip_as_float32_little_endian(self, values: list[float]) -> None:
        data = encode_vector(values)
        assert len(data) == 4 * len(values)
        assert data == struct.pack(f"<{len(values)}f", *values)
        assert decode_vector(data) == values

    @given(
        st.lists(
            st.one_of(st.integers(-1000, 1000), st.floats(-1e3, 1e3, allow_nan=False)),
            min_size=1,
            max_size=32,
        )
    )
    def test_lists_take_the_fast_path_to_the_same_answer(self, values: list[float]) -> None:
        as_list, as_iterable = check_query_vector(values), check_query_vector(iter(values))
        assert as_list == as_iterable == [float(x) for x in values]
        if any(values):
            assert unit(values) == pytest.approx(unit(tuple(values)), abs=1e-12)

    @pytest.mark.parametrize(
        "bad", [[1.0, True], [1.0, math.inf], [math.nan], [1.0, "2"], [1.0, None]]
    )
    def test_the_fast_path_refuses_what_the_slow_one_does(self, bad: list[Any]) -> None:
        with pytest.raises((TypeError, ValueError), match="vector"):
            check_query_vector(bad)

    def test_a_unit_vector_is_copied_as_it_is(self) -> None:
        u = unit([3.0, 4.0])
        again = unit(u)
        assert again == u
        assert again is not u

    def test_decode_refuses_a_partial_float(self) -> None:
        with pytest.raises(ValueError, match="multiple of 4"):
            decode_vector(b"\x00" * 6)

    def test_numpy_vectors_are_accepted(self) -> None:
        values = numpy.array([3.0, 4.0], dtype=numpy.float32)
        assert unit(values) == [0.6, 0.8]  # type: ignore[arg-type]  # an ndarray is no Sequence to mypy; unit takes any iterable of numbers
        assert check_query_vector(values) == [3.0, 4.0]

    @pytest.mark.parametrize(
        ("value", "error"), [(None, TypeError), ("", ValueError), ("a\x00b", ValueError)]
    )
    def test_check_model(self, value: object, error: type[Exception]) -> None:
        with pytest.raises(error, match="model"):
            check_model(value)
        assert check_model("wordllama:l2_supercat") == "wordllama:l2_supercat"


class TestMemoryTableLoadById:
    """The in-memory table's lookup by id, which attaching vectors relies on: Rust and twin
    agree with a model after any saves, deletes and expiries."""

    @given(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["save", "delete", "get"]),
                st.sampled_from(["a", "b"]),
                st.sampled_from(["e1", "e2", "e3"]),
                st.sampled_from([None, "k1", "k2"]),
                st.sampled_from([None, 5.0, 50.0]),
            ),
            max_size=40,
        )
    )
    def test_rust_and_twin_agree(self, ops: list[tuple[str, str, str, str | None, Any]]) -> None:
        rust = require_rust_core().MemoryTable()
        twin = pure_memory_table.MemoryTable()
        now = 10.0
        for n, (op, namespace, entry_id, key, expires_at) in enumerate(ops):
            if op == "save":
                payload = (entry_id, n)
                rust.save(namespace, entry_id, key, expires_at, payload)
                twin.save(namespace, entry_id, key, expires_at, payload)
            elif op == "delete":
                assert rust.delete(namespace, entry_id) == twin.delete(namespace, entry_id)
            for ns in ("a", "b"):
                for i in ("e1", "e2", "e3"):
                    found = twin.load_by_id(ns, i, now)
                    assert rust.load_by_id(ns, i, now) == found
                    live = [p for p in twin.load(ns, now) if p[0] == i]
                    assert live == ([] if found is None else [found])


class StoresMachine(RuleBasedStateMachine):
    """Drives every local store on both implementations with the same writes and vectors;
    every search and catch-up list must agree with the file store's scan, the reference."""

    TEXTS: ClassVar[list[str | None]] = ["red apple", "green pear", "blue sky", None]
    IDS: ClassVar[list[str]] = ["e1", "e2", "e3", "e4"]
    KEYS: ClassVar[list[str | None]] = [None, None, "k1", "k2"]

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="memlane-vectors-"))
        self.reference = FileStore(self.dir / "files")
        self.others: list[VectorStore] = []
        for name in ("rust", "python"):
            with _backend.use(name):
                self.others.append(InMemoryStore())
                self.others.append(SQLiteStore(self.dir / f"{name}.sqlite3"))

    def all(self) -> list[VectorStore]:
        return [self.reference, *self.others]

    @rule(
        namespace=st.sampled_from(["a", "b"]),
        entry_id=st.sampled_from(IDS),
        text=st.sampled_from(TEXTS),
        key=st.sampled_from(KEYS),
        importance=st.sampled_from([0.2, 0.8]),
        expired=st.booleans(),
    )
    def save(
        self,
        namespace: str,
        entry_id: str,
        text: str | None,
        key: str | None,
        importance: float,
        expired: bool,
    ) -> None:
        when = utc_now() + timedelta(seconds=-5 if expired else 3600)
        entry = MemoryEntry(
            entry_id=f"{namespace}-{entry_id}",  # an id per namespace: no store moves it
            key=key,
            content={"text": text},
            metadata={} if text is None else {SEARCH_TEXT: text},
            importance=importance,
            expires_at=when,
        )
        for store in self.all():
            store.save(namespace, entry)

    @rule(namespace=st.sampled_from(["a", "b"]), entry_id=st.sampled_from(IDS))
    def delete(self, namespace: str, entry_id: str) -> None:
        held = {store.delete(namespace, f"{namespace}-{entry_id}") for store in self.all()}
        assert len(held) == 1

    @rule(
        namespace=st.sampled_from(["a", "b"]),
        model=st.sampled_from(["m1", "m2"]),
        picks=st.lists(st.tuples(st.sampled_from(IDS), st.sampled_from(TEXTS[:3])), max_size=4),
    )
    def save_vectors(self, namespace: str, model: str, picks: list[tuple[str, str | None]]) -> None:
        # Each vector is made from a text that may or may not be the entry's current one.
        vectors = [
            EntryVector(entry_id, text_digest(text or ""), meaning(text or ""))
            for entry_id, text in picks
        ]
        counts = {store.save_vectors(namespace, model, vectors) for store in self.all()}
        assert len(counts) == 1

    @rule(
        namespaces=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2),
        model=st.sampled_from(["m1", "m2"]),
        text=st.sampled_from(TEXTS[:3]),
        min_importance=st.sampled_from([0.0, 0.5]),
    )
    def search(self, namespaces: list[str], model: str, text: str, min_importance: float) -> None:
        query = meaning(text)

        def found(store: VectorStore) -> list[tuple[str, float]]:
            hits = store.vector_search(
                namespaces, query, model=model, limit=50, min_importance=min_importance
            )
            scores = [h.score for h in hits]
            assert scores == sorted(scores, reverse=True)
            return sorted((h.entry.entry_id, round(h.score, 4)) for h in hits)

        expected = found(self.reference)
        for store in self.others:
            assert found(store) == expected, store

    @rule(namespaces=st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2))
    def missing(self, namespaces: list[str]) -> None:
        expected = sorted(e.entry_id for e in self.reference.missing_vectors(namespaces, "m1"))
        for store in self.others:
            assert sorted(e.entry_id for e in store.missing_vectors(namespaces, "m1")) == expected

    @rule()
    def cleanup(self) -> None:
        assert len({store.cleanup_expired() for store in self.all()}) == 1

    def teardown(self) -> None:
        for store in self.all():
            store.close()


class TestStoresAgreeOnAnyOperationSequence(StoresMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Memory and SQLite stores, Rust and twin, find what the file store's scan finds."""

    # Five stores per example: a tenth of the suite's examples covers as many operations.
    settings = settings(
        max_examples=max(10, int(os.environ.get("MEMLANE_HYPOTHESIS_EXAMPLES", "200")) // 10),
        stateful_step_count=25,
    )
