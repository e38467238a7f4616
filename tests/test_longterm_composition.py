"""LongTermMemory holds its parts: one store and one embedder slot, a public API only."""

from __future__ import annotations

import inspect
import pydoc
from pathlib import Path

import pytest
from pydantic_ai.embeddings import Embedder, TestEmbeddingModel

from memlane import SQLiteStore
from memlane.longterm import LongTermMemory
from memlane.stores import InMemoryStore


def _public(names: list[str]) -> list[str]:
    return [n for n in names if not n.startswith("_")]


class TestEmbedderSlot:
    """The constructor resolves its embedder the pydantic-ai way and checks it."""

    def test_none_by_default(self) -> None:
        memory = LongTermMemory()
        assert memory.embedder is None
        assert memory.embedding_model is None

    @pytest.mark.parametrize(
        ("embedder", "model_id"),
        [
            ("openai:text-embedding-3-small", "openai:text-embedding-3-small"),
            (TestEmbeddingModel(), "test:test"),
            ("local", "wordllama:l2_supercat"),
        ],
        ids=["name", "model", "local"],
    )
    def test_resolved_to_an_embedder(self, embedder: object, model_id: str) -> None:
        memory = LongTermMemory(embedder=embedder)  # type: ignore[arg-type]  # the test builds each kind
        assert isinstance(memory.embedder, Embedder)
        assert memory.embedding_model == model_id

    def test_an_embedder_is_kept_as_given(self) -> None:
        embedder = Embedder(TestEmbeddingModel())
        assert LongTermMemory(embedder=embedder).embedder is embedder

    @pytest.mark.parametrize("bad", [42, object(), b"openai:x", ["openai:x"]])
    def test_anything_else_is_a_type_error_naming_it(self, bad: object) -> None:
        with pytest.raises(TypeError, match=r"^embedder must be .*not "):
            LongTermMemory(embedder=bad)  # type: ignore[arg-type]  # what a caller might pass

    @pytest.mark.parametrize("bad", ["  ", "nosuchprovider:model", "no-provider"])
    def test_a_bad_name_is_a_value_error(self, bad: str) -> None:
        with pytest.raises(ValueError, match=r"^embedder "):
            LongTermMemory(embedder=bad)

    def test_read_only(self) -> None:
        memory = LongTermMemory()
        with pytest.raises(AttributeError):
            memory.embedder = None  # type: ignore[misc]  # the property has no setter


class TestOneStore:
    """Every part reads and writes the one store the memory was given."""

    def test_the_store_given(self) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        assert memory.store is store
        with pytest.raises(AttributeError):
            memory.store = InMemoryStore()  # type: ignore[misc]  # the property has no setter

    def test_parts_see_each_others_records(self) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        user = memory.identify_user("telegram", 1)
        memory.remember("lang", "en", scope="user", scope_id=user.id, fact_type="user_preference")
        memory.record_episode(agent_id="a", trigger="t", input="i", success=True, user_id=user.id)
        memory.add_procedure("p", trigger_conditions={}, procedure_type="code_snippet", content=1)
        # A second memory over the same store sees all of it, and the user's cached
        # preferences followed the preference fact.
        other = LongTermMemory(store)
        assert other.get_user(user.id).preferences == {"lang": "en"}  # type: ignore[union-attr]  # the user exists
        assert len(other.user_context(user.id).recent_episodes) == 1
        assert [p.name for p in other.procedures()] == ["p"]
        report = other.forget_user(user.id)
        assert report.facts == [f"user:{user.id}:lang"]
        assert memory.get_user(user.id) is None

    async def test_async_twins_share_it_too(self, tmp_path: Path) -> None:
        store = SQLiteStore(tmp_path / "m.db")
        try:
            memory = LongTermMemory(store)
            await memory.async_remember("k", 1)
            assert (await memory.async_get_fact("k")).value == 1  # type: ignore[union-attr]  # just remembered
            assert memory.get_fact("k").value == 1  # type: ignore[union-attr]  # just remembered
        finally:
            store.close()


class TestPublicApiOnly:
    """help() and dir() show the public API: no plans, mixins or parts."""

    def test_dir_of_the_class_and_an_instance(self) -> None:
        for names in (dir(LongTermMemory), dir(LongTermMemory())):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            assert private == []
            assert "remember" in names
            assert "async_forget_user" in names

    def test_every_method_has_its_async_twin(self) -> None:
        methods = [
            n
            for n in _public(dir(LongTermMemory))
            if callable(getattr(LongTermMemory, n)) and not n.startswith("async_")
        ]
        assert len(methods) == 25
        for name in methods:
            sync = getattr(LongTermMemory, name)
            twin = getattr(LongTermMemory, f"async_{name}")
            assert not inspect.iscoroutinefunction(sync), name
            assert inspect.iscoroutinefunction(twin), name
            assert inspect.signature(sync) == inspect.signature(twin), name
            assert sync.__doc__, name
            assert sync.__qualname__ == f"LongTermMemory.{name}"

    def test_help_names_no_internals(self) -> None:
        text = pydoc.plain(pydoc.render_doc(LongTermMemory))
        assert "remember(self, key: 'str', value: 'Any', *, scope:" in text
        for internal in ("Mixin", "_plan", "_storage", " _facts", "StoreCall", "Users.", "Facts."):
            assert internal not in text, internal


class TestOldPaths:
    """Modules that moved keep their old import paths."""

    def test_memory_module(self) -> None:
        from memlane.longterm.memory import LongTermMemory as Old

        assert Old is LongTermMemory

    def test_search_module(self) -> None:
        from memlane.longterm import ranked_search, search

        assert search.RankedSearch is ranked_search.RankedSearch
        assert search.search_call is ranked_search.search_call

    def test_model_forget_extraction_and_binding_modules(self) -> None:
        from memlane.agents import long_term, long_term_binding
        from memlane.longterm import (
            extraction,
            fact_extraction,
            fact_model,
            forget,
            forget_user,
            model,
            namespaces,
            value_checks,
        )

        assert model.Fact is fact_model.Fact
        assert model.namespace is namespaces.namespace
        assert model.check_json_value is value_checks.check_json_value
        assert forget.ForgetReport is forget_user.ForgetReport
        assert extraction.create_fact_extractor is fact_extraction.create_fact_extractor
        assert long_term.LongTermBinding is long_term_binding.LongTermBinding
