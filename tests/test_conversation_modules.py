"""ConversationMemory holds its parts: its class shows only the public API, its instances
their private parts; the conversation package's old module paths still import what they did;
no module of the package passes 500 lines."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import memlane.conversation
from memlane import ConversationMemory
from memlane.conversation.agent_hooks import async_fold_by_strategy, fold_by_strategy
from memlane.conversation.conversation_cache import ConversationCache
from memlane.conversation.history_reads import HistoryReads
from memlane.conversation.rolling_summary import RollingSummaries

PACKAGE = Path(memlane.conversation.__file__).parent


class TestPublicSurface:
    """dir() on the class lists public names only; an instance adds its parts."""

    def test_the_class_has_no_private_names(self) -> None:
        private = [n for n in dir(ConversationMemory) if n.startswith("_") and not n.endswith("__")]
        assert private == []

    def test_an_instance_holds_its_parts(self) -> None:
        memory = ConversationMemory()
        private = {k: type(v) for k, v in vars(memory).items() if k.startswith("_")}
        assert private == {
            "_conversations": ConversationCache,
            "_summaries": RollingSummaries,
            "_reads": HistoryReads,
            "_transcripts": type(None),  # a TranscriptSearch with an embedder
        }

    def test_every_method_pair_keeps_its_signature(self) -> None:
        for name in ("add_turn", "get_message_history", "clear", "import_conversation"):
            sync = inspect.signature(getattr(ConversationMemory, name))
            awaited = inspect.signature(getattr(ConversationMemory, f"async_{name}"))
            assert sync == awaited
            assert getattr(ConversationMemory, name).__qualname__ == f"ConversationMemory.{name}"
        params = list(inspect.signature(ConversationMemory.add_turn).parameters)
        assert params == [
            "self",
            "conversation_id",
            "user_prompt",
            "assistant_response",
            "raw_messages",
            "metadata",
            "pinned",
        ]

    def test_the_fold_pair_is_one_function_run_two_ways(self) -> None:
        assert inspect.signature(fold_by_strategy) == inspect.signature(async_fold_by_strategy)
        assert inspect.signature(fold_by_strategy).return_annotation == "LongTermPlan"
        assert inspect.iscoroutinefunction(async_fold_by_strategy)
        assert not inspect.iscoroutinefunction(fold_by_strategy)


OLD_PATHS = {
    "memlane.conversation.memory": (
        "ConversationMemory",
        "memlane.conversation.conversation_memory",
    ),
    "memlane.conversation.lifecycle": ("check_cid", "memlane.conversation.conversation_cache"),
    "memlane.conversation.plan": ("default_threshold", "memlane.conversation.rolling_summary"),
    "memlane.conversation.summaries": ("RollingSummaries", "memlane.conversation.rolling_summary"),
    "memlane.conversation.state": ("ConversationState", "memlane.conversation.conversation_state"),
    "memlane.conversation.strategies": (
        "short_term_view",
        "memlane.conversation.applied_strategies",
    ),
    "memlane.conversation.budget": ("BUDGET_KEY", "memlane.conversation.conversation_budget"),
}


class TestOldPaths:
    """A module that moved leaves a re-export at its old path."""

    @pytest.mark.parametrize("old", sorted(OLD_PATHS))
    def test_the_old_path_gives_the_same_object(self, old: str) -> None:
        name, new = OLD_PATHS[old]
        assert getattr(importlib.import_module(old), name) is getattr(
            importlib.import_module(new), name
        )

    def test_state_names_come_from_both_new_modules(self) -> None:
        from memlane.conversation.conversation_log import log_key
        from memlane.conversation.state import log_key as old_log_key

        assert old_log_key is log_key


class TestModuleSizes:
    """No module of the conversation package passes 500 lines."""

    @pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
    def test_under_500_lines(self, path: Path) -> None:
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 500
