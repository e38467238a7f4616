"""With a summarizer, every turn is either in the history sent or folded into the summary.

Turns are kept up to ``summarize_threshold`` and the summary gets the rest of the budget, so
the two always fit together; a turn the history cannot send beside the summary (one larger
than the room left) is folded in too. Checked with hypothesis over budgets, thresholds, turn
sizes and summary lengths, on both implementations, inline and in the background.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.messages import ModelResponse

from memlane import ConversationMemory, MemoryManager, SQLiteStore, _backend
from memlane.conversation.plan import MIN_SUMMARY_ROOM, default_threshold
from memlane.types import ConversationTurn


def sent_and_summarised(memory: ConversationMemory, cid: str, added: int) -> None:
    """The invariant, read through the public API only."""
    history = memory.get_message_history(cid)
    turns = memory.get_turns(cid)
    sent = sum(isinstance(m, ModelResponse) for m in history)
    assert sent == len(turns), f"{len(turns) - sent} kept turns are neither sent nor summarised"
    summarised = turns[0].turn_id if turns else added
    assert summarised + len(turns) == added
    assert (memory.get_summary(cid) is not None) == (summarised > 0)
    assert memory.get_history_tokens(cid) <= memory.max_tokens


def summarizer_of(lengths: list[int]) -> Any:
    calls = iter(lengths * 1000)

    def summarize(turns: list[ConversationTurn]) -> str:
        return " ".join(["gist"] * next(calls))

    return summarize


class TestEveryTurnIsSentOrSummarised:
    """Random budgets, thresholds, turn sizes and summary lengths keep the invariant."""

    @given(
        max_tokens=st.integers(MIN_SUMMARY_ROOM + 1, 600),
        threshold_share=st.floats(0.05, 1.0),
        sizes=st.lists(st.integers(1, 250), min_size=1, max_size=25),
        summary_lengths=st.lists(st.integers(1, 400), min_size=1, max_size=4),
    )
    def test_inline(
        self,
        impl: _backend.Implementation,
        max_tokens: int,
        threshold_share: float,
        sizes: list[int],
        summary_lengths: list[int],
    ) -> None:
        threshold = max(1, min(max_tokens - MIN_SUMMARY_ROOM, int(max_tokens * threshold_share)))
        memory = ConversationMemory(
            max_tokens=max_tokens,
            summarize_threshold=threshold,
            summarizer=summarizer_of(summary_lengths),
        )
        for i, size in enumerate(sizes):
            memory.add_turn("c", " ".join(["word"] * size), f"answer {i}")
            sent_and_summarised(memory, "c", i + 1)

    @given(
        sizes=st.lists(st.integers(1, 120), min_size=1, max_size=15),
        summary_lengths=st.lists(st.integers(1, 200), min_size=1, max_size=3),
    )
    def test_in_the_background_once_flushed(
        self, impl: _backend.Implementation, sizes: list[int], summary_lengths: list[int]
    ) -> None:
        memory = ConversationMemory(
            max_tokens=200,
            summarizer=summarizer_of(summary_lengths),
            summarize_in_background=True,
        )
        for i, size in enumerate(sizes):
            memory.add_turn("c", " ".join(["word"] * size), f"answer {i}")
            assert memory.get_history_tokens("c") <= 200
        memory.flush()
        sent_and_summarised(memory, "c", len(sizes))

    def test_the_issues_example(self, impl: _backend.Implementation) -> None:
        # Before: 4 turns kept unsummarised, only 2 sent, nothing said.
        memory = ConversationMemory(
            max_tokens=100, summarize_threshold=80, summarizer=summarizer_of([30])
        )
        for i in range(8):
            memory.add_turn("c", f"question {i} about the topic at hand", f"answer {i} in words")
            sent_and_summarised(memory, "c", i + 1)

    def test_a_turn_larger_than_the_room_left_is_summarised(
        self, impl: _backend.Implementation, tmp_path: Any
    ) -> None:
        memory = ConversationMemory(
            max_tokens=100,
            summarize_threshold=60,
            summarizer=summarizer_of([10]),
            store=SQLiteStore(tmp_path / "c.db"),
        )
        memory.add_turn("c", "small", "ok")
        memory.add_turn("c", " ".join(["big"] * 95), "ok")  # fits alone, not beside a summary
        sent_and_summarised(memory, "c", 2)
        again = ConversationMemory(
            max_tokens=100,
            summarize_threshold=60,
            summarizer=summarizer_of([10]),
            store=SQLiteStore(tmp_path / "c.db"),
        )
        sent_and_summarised(again, "c", 2)


class TestTheDefaultThreshold:
    """One default everywhere: min(3072, three quarters of the budget)."""

    @pytest.mark.parametrize(
        ("budget", "expected"), [(128_000, 3072), (4096, 3072), (4000, 3000), (100, 75), (1, 1)]
    )
    def test_values(self, budget: int, expected: int) -> None:
        assert default_threshold(budget) == expected
        assert ConversationMemory(max_tokens=budget).summarize_threshold == expected
        manager = MemoryManager(max_conversation_tokens=budget)
        assert manager.conversation.summarize_threshold == expected

    def test_small_budgets_stay_valid_with_a_summarizer(self) -> None:
        for budget in (MIN_SUMMARY_ROOM * 4, 100, 1000):
            memory = ConversationMemory(max_tokens=budget, summarizer=summarizer_of([1]))
            assert memory.max_tokens - memory.summarize_threshold >= MIN_SUMMARY_ROOM


class TestThresholdsThatLeaveNoRoom:
    """With a summarizer, a threshold leaving the summary no room is refused, naming both."""

    @pytest.mark.parametrize("threshold", [100, 150, 100 - MIN_SUMMARY_ROOM + 1])
    def test_refused(self, threshold: int) -> None:
        with pytest.raises(ValueError, match=rf"summarize_threshold={threshold}.*max_tokens=100"):
            ConversationMemory(
                max_tokens=100, summarize_threshold=threshold, summarizer=summarizer_of([1])
            )
        with pytest.raises(ValueError, match="summarize_threshold"):
            MemoryManager(
                max_conversation_tokens=100,
                summarize_threshold=threshold,
                summarizer=summarizer_of([1]),
            )

    def test_without_a_summarizer_any_threshold_is_valid(self) -> None:
        assert (
            ConversationMemory(max_tokens=100, summarize_threshold=500).summarize_threshold == 500
        )
