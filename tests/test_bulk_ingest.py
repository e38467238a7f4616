"""What makes a bulk ingest fast holds the answers it replaced: tokens by piece, float32 rows,
facts built without validation, fresh ids, the paused collector, kept digests."""

from __future__ import annotations

import gc
import hashlib
import threading
import uuid
from array import array

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane import _backend
from memlane.embeddings import embed_documents, resolve_embedder
from memlane.embeddings.local import _load, _token_ids, local_embedding_model
from memlane.embeddings.resolve import embed_rows
from memlane.longterm import LongTermMemory
from memlane.longterm.fact_model import Fact, FactScope, FactType
from memlane.longterm.fact_plans import new_entry_id
from memlane.longterm.storage import collector_paused
from memlane.stores import InMemoryStore
from memlane.stores.vectors import EntryVector, check_entry_vectors, text_digest
from memlane.types import CheckedJson

# Spaces, runs of them, the normaliser's own U+2581, added tokens, and what falls back to
# bytes: every way a text's pieces could meet.
_BITS = [" ", "  ", "\u2581", "a", "the", "ab", "x1", "_", "-", ".", "é", "日本", "😀", "\n"]
_BITS += ["\t", "<s>", "</s>", "<unk>", "<", "\u0301", "\x00", "INV-48213", "10.0.0.1"]


class TestTokensByPiece:
    """A text's token ids looked up piece by piece are the tokenizer's own, in order."""

    def test_the_wheels_tokenizer_splits_at_spaces(self) -> None:
        assert _load().pieces is not None

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.lists(st.sampled_from(_BITS), max_size=14).map("".join), max_size=40))
    def test_same_ids_as_the_tokenizer(self, texts: list[str]) -> None:
        table = _load()
        expected = [e.ids for e in table.encode(texts, add_special_tokens=False)]
        assert _token_ids(table, texts) == expected
        assert _token_ids(table, texts) == expected  # again, every piece now known

    def test_edges(self) -> None:
        table = _load()
        texts = ["", " ", "   ", "a ", " a", "a  b", "\u2581", "\u2581\u2581a", "<s> hi", "x</s>"]
        expected = [e.ids for e in table.encode(texts, add_special_tokens=False)]
        assert _token_ids(table, texts) == expected

    def test_same_vectors_as_token_by_token(self) -> None:
        texts = ["Ada drinks her coffee black, no sugar.", "INV-48213 was paid", "  spaced  out "]
        table = _load()
        ids = [e.ids for e in table.encode(texts, add_special_tokens=False)]
        rows = numpy.stack([table.rows[i].sum(axis=0) for i in ids])
        rows /= numpy.linalg.norm(rows, axis=1, keepdims=True)
        numpy.testing.assert_allclose(local_embedding_model().encode(texts), rows, atol=1e-6)


class TestFloat32Rows:
    """The writer hands a store float32 arrays equal to the lists it replaced, checked alike."""

    def test_rows_equal_documents(self) -> None:
        embedder = resolve_embedder("local")
        assert embedder is not None
        texts = ["coffee black", "", "tea with milk"]
        rows, documents = embed_rows(embedder, texts), embed_documents(embedder, texts)
        assert rows[1] is None
        assert documents[1] is None
        for row, document in zip(rows, documents, strict=True):
            if row is not None:
                assert isinstance(row, array)
                assert row.typecode == "f"
                assert list(row) == document

    def test_an_array_stays_an_array_and_is_made_unit(self) -> None:
        (checked,) = check_entry_vectors([EntryVector("e", "d", array("f", [3.0, 4.0]))])
        assert isinstance(checked.vector, array)
        assert list(checked.vector) == pytest.approx([0.6, 0.8])
        given_unit = array("f", [0.6, 0.8])
        (same,) = check_entry_vectors([EntryVector("e", "d", given_unit)])
        assert list(same.vector) == list(given_unit)
        assert same.vector is not given_unit

    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ([], "must not be empty"),
            ([0.0, 0.0], "must have a direction"),
            ([1.0, float("nan")], "must hold finite"),
            ([float("inf"), 1.0], "must hold finite"),
        ],
    )
    def test_an_array_is_refused_as_a_list_is(self, values: list[float], message: str) -> None:
        for vector in (array("f", values), values):
            with pytest.raises(ValueError, match=f"vector {message}"):
                check_entry_vectors([EntryVector("e", "d", vector)])

    def test_the_index_stores_an_array_as_the_list(self, impl: _backend.Implementation) -> None:
        index = impl.VectorIndex()
        index.upsert("a", "ns", "m", "d", array("f", [0.6, 0.8]), 1.0, None, "from array")
        index.upsert("b", "ns", "m", "d", [0.8, 0.6], 1.0, None, "from list")
        row = numpy.array([0.0, 1.0], dtype=numpy.float32)
        index.upsert("c", "ns", "m", "d", row, 1.0, None, "from numpy")  # type: ignore[arg-type]  # an ndarray is no Sequence to mypy; its float32 buffer is what is tested
        hits = index.search(["ns"], "m", [0.6, 0.8], 3, 0.0, 0.0)
        assert [payload for payload, _ in hits] == ["from array", "from list", "from numpy"]
        assert [score for _, score in hits] == pytest.approx([1.0, 0.96, 0.8], abs=1e-6)


class TestFactsBuiltWithoutValidation:
    """A created fact and its entry are what validation would have made."""

    def test_a_created_fact_validates_to_itself(self) -> None:
        memory = LongTermMemory(InMemoryStore())
        fact = memory.remember("k", {"a": [1, 2.5]}, scope="user", scope_id="u1").fact
        validated = Fact(
            key="k",
            value={"a": [1, 2.5]},
            fact_type=FactType.WORLD_KNOWLEDGE,
            scope=FactScope.USER,
            scope_id="u1",
            confidence=0.8,
            created_at=fact.created_at,
            updated_at=fact.updated_at,
        )
        assert fact == validated
        assert fact.model_fields_set == validated.model_fields_set
        assert Fact.model_validate(fact.model_dump()) == fact

    def test_the_store_keeps_the_entry_built_at_its_version(self) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        memory.remember("k", "v")
        memory.remember("k", "w")
        (name,) = store.namespaces()
        held = store.load_by_key(name, "k")
        assert held is not None
        assert held.version == 2
        assert type(held.content) is CheckedJson
        stored = memory.get_fact("k")
        assert stored is not None
        assert held.content == stored.model_dump(mode="json")
        assert [r.value for r in stored.history] == ["v"]


class TestEntryIds:
    """Fresh entry ids keep uuid4().hex's form and never repeat."""

    def test_form_and_uniqueness(self) -> None:
        ids = [new_entry_id() for _ in range(5000)]
        assert len(set(ids)) == len(ids)
        for made in ids[:200]:
            parsed = uuid.UUID(hex=made)
            assert parsed.hex == made
            assert parsed.version == 4
            assert parsed.variant == uuid.RFC_4122


class TestCollectorPaused:
    """A bulk write pauses the cyclic collector and resumes it as it found it."""

    def test_nested_and_threaded_pauses_resume_once(self) -> None:
        assert gc.isenabled()
        inside = threading.Event()
        leave = threading.Event()

        def other() -> None:
            with collector_paused():
                inside.set()
                leave.wait(10)

        worker = threading.Thread(target=other)
        with collector_paused():
            worker.start()
            assert inside.wait(10)
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other thread's pause still holds
        leave.set()
        worker.join()
        assert gc.isenabled()

    def test_a_disabled_collector_stays_disabled(self) -> None:
        gc.disable()
        try:
            with collector_paused():
                pass
            assert not gc.isenabled()
        finally:
            gc.enable()

    def test_remember_many_resumes_it_after_a_failure(self) -> None:
        memory = LongTermMemory(InMemoryStore())
        with pytest.raises(TypeError, match="value"):
            memory.remember_many([("a", 1), ("b", {1, 2})])
        assert gc.isenabled()


class TestBulkIngestWithTheLocalModel:
    """remember_many with the local model leaves every fact with its vector, found by meaning."""

    def test_every_fact_gets_its_vector(self, impl: _backend.Implementation) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store, embedder="local")
        facts = [(f"note_{i:05d}", f"item {i} was moved to shelf {i % 7}") for i in range(1500)]
        facts.append(("ada_coffee", "Ada drinks her coffee black, no sugar."))
        results = memory.remember_many(facts)
        memory.flush()
        assert [r.status for r in results] == ["created"] * len(facts)
        assert gc.isenabled()
        (name,) = store.namespaces()
        assert store.missing_vectors([name], "wordllama:l2_supercat") == []
        hits = memory.search("how does she take her coffee", mode="semantic", limit=1)
        assert [hit.key for hit in hits] == ["ada_coffee"]


class TestTextDigests:
    """Kept or not, a digest is the text's BLAKE2b."""

    @pytest.mark.parametrize("size", [0, 1, 1024, 1025, 100_000])
    def test_short_and_long_texts(self, size: int) -> None:
        text = ("é" * size)[:size]
        expected = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
        assert text_digest(text) == expected
        assert text_digest(text) == expected
