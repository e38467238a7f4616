"""memlane.embeddings: the offline model, what ``embedder=`` accepts, query vectors."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic_ai.embeddings import Embedder, EmbeddingModel, TestEmbeddingModel

from memlane.embeddings import (
    VectorWriter,
    async_embed_documents,
    async_embed_query,
    embed_documents,
    embed_query,
    embedder_id,
    local_embedding_model,
    resolve_embedder,
)
from memlane.embeddings.local import LocalEmbeddingModel
from memlane.stores import InMemoryStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _run(code: str) -> Any:
    """Runs ``code`` in a fresh interpreter; the JSON it prints last."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


class TestLocalModel:
    """WordLlama l2_supercat from the wheel's files: 256-d unit vectors, offline."""

    def test_identity(self) -> None:
        model = local_embedding_model()
        assert isinstance(model, EmbeddingModel)
        assert (model.system, model.model_name) == ("wordllama", "l2_supercat")
        assert embedder_id(Embedder(model)) == "wordllama:l2_supercat"

    async def test_unit_vectors_of_256_dimensions(self) -> None:
        result = await local_embedding_model().embed(["coffee", "tea"], input_type="document")
        assert [len(v) for v in result.embeddings] == [256, 256]
        for vector in result.embeddings:
            assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-5)
        assert result.inputs == ["coffee", "tea"]
        assert (result.provider_name, result.model_name) == ("wordllama", "l2_supercat")

    def test_a_text_without_tokens_has_no_direction(self) -> None:
        vectors = local_embedding_model().encode(["", "coffee"])
        assert not vectors[0].any()
        assert vectors[1].any()
        embedder = Embedder(local_embedding_model())
        assert embed_documents(embedder, ["", "coffee"])[0] is None
        with pytest.raises(ValueError, match="has no embedding"):
            embed_query(embedder, "")

    def test_finds_a_preference_stated_in_other_words(self) -> None:
        embedder = Embedder(local_embedding_model())
        facts = [
            "Ada drinks it black, no sugar",
            "The office wifi password rotates every month",
            "Invoice INV-48213 was paid on Tuesday",
            "Bob's flight to Lisbon leaves at 9",
        ]
        query = embed_query(embedder, "how does she take her coffee?")
        vectors = embed_documents(embedder, facts)
        scores = [_cos(query, v) for v in vectors if v is not None]
        assert max(range(len(facts)), key=scores.__getitem__) == 0

    def test_long_and_short_texts_in_one_batch(self) -> None:
        # Texts are padded in groups by length: one long text must not change the others.
        model = local_embedding_model()
        short = ["coffee black", "tea with milk"]
        alone = model.encode(short)
        mixed = model.encode([short[0], "word " * 5000, short[1]])
        assert abs(mixed[0] - alone[0]).max() < 1e-6
        assert abs(mixed[2] - alone[1]).max() < 1e-6

    def test_same_vectors_as_wordllama_itself(self) -> None:
        """The direct loader computes WordLlama's own normalised average pooling."""
        texts = ["Ada drinks her coffee black, no sugar.", "how does she take her hot drink", "x"]
        found = _run(
            f"""
            import json
            from pathlib import Path
            import importlib.util
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference
            from memlane.embeddings import local_embedding_model

            base = Path(next(iter(importlib.util.find_spec("wordllama").submodule_search_locations)))
            with safe_open(str(base / "weights" / "l2_supercat_256.safetensors"), "np") as f:
                table = f.get_tensor("embedding.weight")
            tokenizer = Tokenizer.from_file(
                str(base / "tokenizers" / "l2_supercat_tokenizer_config.json")
            )
            theirs = WordLlamaInference(table, tokenizer).embed({texts!r}, norm=True)
            ours = local_embedding_model().encode({texts!r})
            print(json.dumps(float(abs(theirs - ours).max())))
            """
        )
        assert found < 1e-6

    def test_never_opens_a_socket_nor_imports_wordllama(self) -> None:
        """Loading and embedding run under an audit hook that fails on any network use."""
        found = _run(
            """
            import json, logging, sys

            def no_network(event, args):
                if event.startswith("socket.") and event != "socket.__new__":
                    raise RuntimeError(f"network use: {event} {args!r}")
                if event == "socket.__new__":
                    raise RuntimeError("a socket was made")

            sys.addaudithook(no_network)
            from memlane.embeddings import embed_documents, embed_query, resolve_embedder

            embedder = resolve_embedder("local")
            vectors = embed_documents(embedder, ["Ada drinks it black", "tea"])
            query = embed_query(embedder, "coffee")
            print(json.dumps({
                "dims": [len(v) for v in vectors] + [len(query)],
                "wordllama": "wordllama" in sys.modules,
                "requests": "requests" in sys.modules,
                "root_handlers": len(logging.getLogger().handlers),
            }))
            """
        )
        assert found == {"dims": [256, 256, 256], "wordllama": False, "requests": False,
                         "root_handlers": 0}  # fmt: skip

    def test_missing_wordllama_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = importlib.util.find_spec

        def without_wordllama(name: str, *args: Any) -> Any:
            return None if name == "wordllama" else real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", without_wordllama)
        with pytest.raises(ImportError, match=r"memlane\[embed\]"):
            local_embedding_model()
        with pytest.raises(ImportError, match=r"memlane\[embed\]"):
            resolve_embedder("local")

    async def test_token_count(self) -> None:
        model = local_embedding_model()
        assert await model.count_tokens("coffee") >= 1
        assert await model.max_input_tokens() is None


class TestResolveEmbedder:
    """embedder= takes what pydantic-ai takes, plus "local"; anything else names embedder."""

    def test_none(self) -> None:
        assert resolve_embedder(None) is None

    def test_local(self) -> None:
        embedder = resolve_embedder("local")
        assert isinstance(embedder, Embedder)
        assert isinstance(embedder.model, LocalEmbeddingModel)
        assert embedder_id(embedder) == "wordllama:l2_supercat"

    @pytest.mark.parametrize(
        "name",
        [
            "openai:text-embedding-3-small",
            "sentence-transformers:all-MiniLM-L6-v2",
            "voyageai:voyage-3.5",
            "ollama:nomic-embed-text",
            "gateway/openai:text-embedding-3-small",
        ],
    )
    def test_a_name_pydantic_ai_infers(self, name: str) -> None:
        # Not connected: no credentials are needed until something is embedded.
        embedder = resolve_embedder(f" {name} ")
        assert isinstance(embedder, Embedder)
        assert embedder.model == name
        assert embedder_id(embedder) == name

    def test_the_id_stays_the_name_once_pydantic_ai_makes_the_model(self) -> None:
        embedder = resolve_embedder("gateway/openai:text-embedding-3-small")
        assert isinstance(embedder, Embedder)
        assert embedder_id(embedder) == "gateway/openai:text-embedding-3-small"
        # What pydantic-ai's first embed does: the name is replaced by the model it makes,
        # whose system:model_name spells it otherwise (the openai package is not installed
        # here, so a test model stands in for OpenAIEmbeddingModel).
        embedder._model = TestEmbeddingModel("text-embedding-3-small", provider_name="openai")
        assert embedder_id(embedder) == "gateway/openai:text-embedding-3-small"
        assert embedder_id(Embedder("openai:x")) == "openai:x"  # per embedder

    def test_a_model_or_an_embedder(self) -> None:
        model = TestEmbeddingModel("m", provider_name="p")
        from_model = resolve_embedder(model)
        assert isinstance(from_model, Embedder)
        assert from_model.model is model
        assert embedder_id(from_model) == "p:m"
        embedder = Embedder(model)
        assert resolve_embedder(embedder) is embedder

    @pytest.mark.parametrize("bad", [42, 1.5, object(), b"local", ["local"], True])
    def test_anything_else_is_a_type_error_naming_it(self, bad: object) -> None:
        with pytest.raises(TypeError, match=r"^embedder must be .*not "):
            resolve_embedder(bad)

    @pytest.mark.parametrize(
        ("bad", "problem"),
        [
            ("", "non-empty"),
            ("   ", "non-empty"),
            ("text-embedding-3-small", "provider:model"),
            ("openai:", "provider:model"),
            (":model", "provider:model"),
            ("nosuchprovider:model", "no embedding model for"),
        ],
    )
    def test_a_bad_name_is_a_value_error_naming_it(self, bad: str, problem: str) -> None:
        with pytest.raises(ValueError, match=rf"^embedder .*{problem}"):
            resolve_embedder(bad)


class TestQueryVectors:
    """Query and document vectors are unit length, on the sync and the async path."""

    async def test_any_model_is_made_unit_length(self) -> None:
        embedder = Embedder(TestEmbeddingModel(dimensions=4))  # every vector is all ones
        assert embed_query(embedder, "q") == [0.5] * 4
        assert await async_embed_query(embedder, "q") == [0.5] * 4
        assert embed_documents(embedder, ["a", "b"]) == [[0.5] * 4] * 2
        assert await async_embed_documents(embedder, ["a"]) == [[0.5] * 4]
        assert embed_documents(embedder, []) == []
        assert await async_embed_documents(embedder, []) == []

    async def test_the_local_model_sync_and_async_agree(self) -> None:
        embedder = resolve_embedder("local")
        assert embedder is not None
        sync = embed_query(embedder, "hot drink")
        assert sync == await async_embed_query(embedder, "hot drink")
        assert embed_documents(embedder, ["hot drink"]) == await async_embed_documents(
            embedder, ["hot drink"]
        )
        assert math.isclose(_cos(sync, sync), 1.0, rel_tol=1e-5)


class TestNothingHeavyUntilUsed:
    """Long-term memory without an embedder loads no model, numpy or pydantic-ai."""

    def test_a_memory_without_an_embedder(self) -> None:
        loaded = _run(
            """
            import json, sys
            import memlane
            from memlane.longterm import LongTermMemory

            memory = LongTermMemory()
            memory.remember("k", "v")
            memory.search("v")
            heavy = ["numpy", "wordllama", "tokenizers", "safetensors", "pydantic_ai",
                     "memlane.embeddings.local"]
            print(json.dumps({name: name in sys.modules for name in heavy}))
            """
        )
        assert not any(loaded.values()), loaded


class TestVectorWriter:
    """The writer embeds what it is given off the caller's thread; flush waits; close stops."""

    def _stored(self, store: InMemoryStore, text: str | None) -> MemoryEntry:
        entry = MemoryEntry(
            key="k", content=1, metadata={} if text is None else {SEARCH_TEXT: text}
        )
        store.save("ns", entry)
        return entry

    def test_submit_flush_close(self) -> None:
        store = InMemoryStore()
        writer = VectorWriter(store, resolve_local())
        assert (writer.model, writer.batch_size) == ("wordllama:l2_supercat", 512)
        entry = self._stored(store, "black coffee")
        writer.submit("ns", [entry, self._stored(InMemoryStore(), None)])
        writer.flush()
        hits = store.vector_search(["ns"], embed_query(writer.embedder, "espresso"),
                                   model=writer.model)  # fmt: skip
        assert [h.entry.entry_id for h in hits] == [entry.entry_id]
        writer.close()
        writer.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            writer.submit("ns", [entry])

    async def test_async_flush_and_close(self) -> None:
        store = InMemoryStore()
        writer = VectorWriter(store, resolve_local(), batch_size=1)
        writer.submit("ns", [self._stored(store, "tea"), self._stored(store, "")])
        await writer.async_flush()
        assert store.missing_vectors(["ns"], writer.model) != []  # "" has no direction
        await writer.async_close()

    def test_checked(self) -> None:
        with pytest.raises(TypeError, match="store must keep vectors"):
            VectorWriter(object(), resolve_local())  # type: ignore[arg-type]  # what a caller might pass
        with pytest.raises(ValueError, match="batch_size"):
            VectorWriter(InMemoryStore(), resolve_local(), batch_size=0)

    def test_a_forked_child_does_not_wait_for_the_parents_thread(self) -> None:
        import multiprocessing

        store = InMemoryStore()
        writer = VectorWriter(store, resolve_local())
        writer.submit("ns", [self._stored(store, "coffee")])
        child = multiprocessing.get_context("fork").Process(target=writer.flush)
        child.start()
        child.join(60)
        assert child.exitcode == 0
        writer.flush()


def resolve_local() -> Embedder:
    embedder = resolve_embedder("local")
    assert embedder is not None
    return embedder
