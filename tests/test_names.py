"""Renamed names: the new ones work, the old ones still work and warn; every error is memlane's."""

from __future__ import annotations

import pytest

from memlane import _backend
from memlane.errors import ConditionError, MemlaneError
from memlane.strategies import conditions
from memlane.strategies.conditions import ConditionError as FromConditions


class TestEveryErrorIsMemlanes:
    """memlane's exceptions share one base and keep the built-in callers catch."""

    def test_condition_error(self) -> None:
        assert FromConditions is ConditionError
        assert issubclass(ConditionError, MemlaneError)
        assert issubclass(ConditionError, ValueError)
        with pytest.raises(MemlaneError, match="nope"):
            conditions.compile_condition("nope(")

    def test_demo_error(self) -> None:
        from memlane.demo import DemoError

        assert issubclass(DemoError, MemlaneError)


class TestSharedOldNames:
    """memlane.shared's names before the sync/async scheme still work, and warn."""

    async def test_memory_methods(self) -> None:
        from memlane.shared import LocalAgentMemory

        memory = LocalAgentMemory()
        with pytest.warns(DeprecationWarning, match="add_message"):
            await memory.add({"type": "user_message", "content": "u"})
        with pytest.warns(DeprecationWarning, match="add_global_message"):
            await memory.add_global({"type": "note", "content": "g"})
        with pytest.warns(DeprecationWarning, match="get_message_history"):
            shown = await memory.get_history(limit=5)
        assert [m["content"] for m in shown] == ["u", "g"]

    async def test_state_store_methods(self) -> None:
        from memlane.shared import SharedStateStore

        state = SharedStateStore()
        with pytest.warns(DeprecationWarning, match="append_agent_message"):
            await state.append_agent_msg("job", "w1", {"type": "action", "content": "a"})
        with pytest.warns(DeprecationWarning, match="get_agent_messages"):
            assert [m["content"] for m in await state.list_agent_msgs("job", "w1")] == ["a"]
        with pytest.warns(DeprecationWarning, match="append_conversation_message"):
            await state.append_conversation_msg("job", {"type": "user_message", "content": "u"})
        with pytest.warns(DeprecationWarning, match="get_conversation_messages"):
            assert len(await state.list_conversation_msgs("job")) == 1
        with pytest.warns(DeprecationWarning, match="append_global_message"):
            await state.append_global_update("job", {"type": "note", "content": "g"})
        with pytest.warns(DeprecationWarning, match="get_global_messages"):
            assert len(await state.list_global_updates("job")) == 1

    def test_class_names_are_the_same_classes(self) -> None:
        import memlane.shared
        import memlane.shared.memory
        from memlane.shared import LocalAgentMemory, ProcessSharedMemory

        for module in (memlane.shared, memlane.shared.memory):
            with pytest.warns(DeprecationWarning, match="LocalAgentMemory"):
                assert module.InMemoryMemory is LocalAgentMemory
            with pytest.warns(DeprecationWarning, match="ProcessSharedMemory"):
                assert module.SharedInMemoryMemory is ProcessSharedMemory

    def test_memory_from_config(self) -> None:
        from memlane.shared import BaseMemory, LocalAgentMemory
        from memlane.shared.memory_config import memory_from_config

        with pytest.warns(DeprecationWarning, match="BaseMemory.from_config"):
            built = memory_from_config({"type": "InMemoryMemory"})
        assert isinstance(built, LocalAgentMemory)
        assert isinstance(BaseMemory.from_config({"type": "LocalAgentMemory"}), LocalAgentMemory)
        with pytest.warns(DeprecationWarning, match="BaseMemory.from_config"):
            from memlane.shared import memory_from_config as old  # noqa: F401


class TestFactoryConvention:
    """Factories are X.from_config(...); the older spellings still work, and warn."""

    def test_llm_summarizer(self) -> None:
        from pydantic_ai.models.test import TestModel

        from memlane.summarization import LLMSummarizer, create_llm_summarizer

        model = TestModel()
        made = LLMSummarizer.from_config(model=model, max_summary_tokens=40)
        with pytest.warns(DeprecationWarning, match="LLMSummarizer.from_config"):
            old = create_llm_summarizer(model=model, max_summary_tokens=40)
        assert type(made) is type(old) is LLMSummarizer
        assert (made.model, made.max_summary_tokens, made.prompt_template) == (
            old.model,
            old.max_summary_tokens,
            old.prompt_template,
        )
        with pytest.raises(ValueError, match="max_summary_tokens must be > 0, got 0"):
            LLMSummarizer.from_config(model=model, max_summary_tokens=0)

    def test_fact_extractor(self) -> None:
        from memlane.longterm import FactExtractor, create_fact_extractor

        made = FactExtractor.from_config("test", min_confidence=0.7, fact_type="relationship")
        with pytest.warns(DeprecationWarning, match="FactExtractor.from_config"):
            old = create_fact_extractor("test", min_confidence=0.7, fact_type="relationship")
        assert type(made) is type(old) is FactExtractor
        assert vars(made) == vars(old)
        with pytest.raises(ValueError, match="min_confidence"):
            FactExtractor.from_config("test", min_confidence=1.5)

    def test_strategy(self) -> None:
        from memlane.strategies import (
            MemoryMaxTokensStrategy,
            NeuralyzerStrategy,
            Strategy,
            SummarizerStrategy,
            load_strategy,
        )

        data = {"long_term_memory_id": "neuralyzer", "interaction_keep": 2}
        made = Strategy.from_config(data)
        with pytest.warns(DeprecationWarning, match="Strategy.from_config"):
            old = load_strategy(data)
        assert made == old == NeuralyzerStrategy(interaction_keep=2)
        assert NeuralyzerStrategy.from_config(data) == made
        assert isinstance(made, Strategy)
        with pytest.raises(ValueError, match=r"SummarizerStrategy\.from_config was given a "):
            SummarizerStrategy.from_config(data)
        with pytest.raises(ValueError, match="exactly one of"):
            MemoryMaxTokensStrategy.from_config("{}")

    def test_create_store_stays_a_function(self) -> None:
        from memlane.config import MemlaneSettings, create_store
        from memlane.stores import InMemoryStore

        # MemoryStore is a protocol, so there is no class for a from_config to live on; the
        # function does not warn.
        assert isinstance(
            create_store(MemlaneSettings.from_env(backend="in_memory")), InMemoryStore
        )


class TestCleanupNames:
    """Removing expired conversations is cleanup_expired_conversations on the memory and the
    manager; the memory's old name warns, and a store's cleanup_expired (entries) stays."""

    def test_the_old_names_warn_and_do_the_same(self, impl: _backend.Implementation) -> None:
        import asyncio
        import inspect

        from memlane import ConversationMemory, InMemoryStore, MemoryManager

        store = InMemoryStore()
        memory = ConversationMemory(store=store, conversation_ttl=60)
        memory.add_turn("c", "hi", "hello")
        assert memory.cleanup_expired_conversations() == 0
        assert asyncio.run(memory.async_cleanup_expired_conversations()) == 0
        with pytest.warns(DeprecationWarning, match="cleanup_expired_conversations"):
            assert memory.cleanup_expired() == 0
        assert inspect.iscoroutinefunction(memory.async_cleanup_expired)
        with pytest.warns(DeprecationWarning, match="async_cleanup_expired_conversations"):
            assert asyncio.run(memory.async_cleanup_expired()) == 0
        assert [t.user_prompt for t in memory.get_turns("c")] == ["hi"]
        manager = MemoryManager()
        assert manager.cleanup_expired_conversations() == 0
        assert MemoryManager.cleanup_expired_conversations.__name__ == (
            "cleanup_expired_conversations"
        )
        assert not hasattr(manager, "cleanup_expired")
        assert store.cleanup_expired() == 0


class TestOldModulePaths:
    """A module that moved to a self-explaining name is still importable by its old path."""

    @pytest.mark.parametrize(
        ("old", "new", "name"),
        [
            ("memlane.stores.memory", "memlane.stores.in_memory", "InMemoryStore"),
            ("memlane.shared.window", "memlane.shared.feed_cache", "Windows"),
            ("memlane.shared.config", "memlane.shared.memory_config", "build_memory"),
            ("memlane.shared.state", "memlane.shared.state_store", "SharedStateStore"),
            (
                "memlane.strategies.window",
                "memlane.strategies.max_tokens_window",
                "MaxTokensWindow",
            ),
            ("memlane.agents.budget", "memlane.agents.request_budget", "RequestBudget"),
            ("memlane.shared.memory", "memlane.shared.agent_memories", "SharedMemory"),
        ],
    )
    def test_same_object(self, old: str, new: str, name: str) -> None:
        import importlib

        assert getattr(importlib.import_module(old), name) is getattr(
            importlib.import_module(new), name
        )
