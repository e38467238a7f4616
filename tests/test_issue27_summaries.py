"""Issue 27 as a user reads it: defaults that are valid, refusals that name a value that
works, any model summarising, one warning line per failure, backoff, pins and a summary on
demand, through the public names, sync and async.
"""

from __future__ import annotations

import inspect
import logging
import re
from typing import Any

import pytest

from memlane import ConversationMemory, MemoryManager, SummaryStatus
from memlane.strategies import SummarizerStrategy
from memlane.types import ConversationTurn
from summary_models import SummaryModel

MODES = ["sync", "async"]


async def run(owner: Any, name: str, way: str, *args: Any, **kwargs: Any) -> Any:
    """``owner.name(...)``, or ``await owner.async_name(...)`` when ``way`` is ``"async"``."""
    if way == "sync":
        return getattr(owner, name)(*args, **kwargs)
    return await getattr(owner, f"async_{name}")(*args, **kwargs)


def joined(turns: list[ConversationTurn]) -> str:
    """A plain summarizer: the prompts it folds, shortened."""
    return "summary: " + "; ".join(turn.user_prompt[:12] for turn in turns)


class TestNames:
    """The issue's names on the memory and the manager, each with its async twin."""

    @pytest.mark.parametrize("owner", [ConversationMemory, MemoryManager])
    def test_signatures(self, owner: type) -> None:
        for prefix in ("", "async_"):
            now = inspect.signature(getattr(owner, f"{prefix}summarize_now")).parameters
            assert list(now)[1:] == ["conversation_id", "focus"]
            assert now["focus"].kind is inspect.Parameter.KEYWORD_ONLY
            assert now["focus"].default is None
            pin = inspect.signature(getattr(owner, f"{prefix}pin_turn")).parameters
            assert list(pin)[1:] == ["conversation_id", "turn_id"]
            status = inspect.signature(getattr(owner, f"{prefix}summary_status")).parameters
            assert list(status)[1:] == ["conversation_id"]
            add = inspect.signature(getattr(owner, f"{prefix}add_turn")).parameters
            assert add["pinned"].default is False
            assert add["pinned"].kind is inspect.Parameter.KEYWORD_ONLY

    def test_status_fields(self) -> None:
        status = ConversationMemory(max_tokens=100, summarizer=joined)
        status.add_turn("c", "hello", "hi")
        fields = status.summary_status("c")
        for name in ("state", "failing_since", "last_error"):
            assert hasattr(fields, name)


class TestThresholds:
    @pytest.mark.parametrize("max_tokens", [*range(1, 70), 100, 4096, 128_000])
    def test_the_default_is_always_valid(self, max_tokens: int) -> None:
        memory = ConversationMemory(max_tokens=max_tokens, summarizer=joined)
        assert 1 <= memory.summarize_threshold <= max_tokens
        manager = MemoryManager(max_conversation_tokens=max_tokens, summarizer=joined)
        assert manager.conversation.summarize_threshold == memory.summarize_threshold

    def test_max_tokens_50(self) -> None:
        memory = ConversationMemory(max_tokens=50, summarizer=joined)
        for i in range(12):
            memory.add_turn("c", f"question {i} about the invoices", f"answer {i}")
        assert memory.get_summary("c") is not None
        assert memory.get_history_tokens("c") <= 50

    @pytest.mark.parametrize(
        ("max_tokens", "threshold"), [(50, 45), (50, 50), (100, 99), (20, 19), (10, 5), (2, 2)]
    )
    def test_a_refused_value_names_one_that_works(self, max_tokens: int, threshold: int) -> None:
        with pytest.raises(ValueError, match="summarize_threshold") as raised:
            ConversationMemory(
                max_tokens=max_tokens, summarize_threshold=threshold, summarizer=joined
            )
        suggested = re.search(r"e\.g\. summarize_threshold=(\d+)", str(raised.value))
        assert suggested is not None, str(raised.value)
        assert int(suggested.group(1)) != threshold
        memory = ConversationMemory(
            max_tokens=max_tokens, summarize_threshold=int(suggested.group(1)), summarizer=joined
        )
        memory.add_turn("c", "hello", "hi")


class TestAnyModel:
    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("kind", ["text", "structured"])
    async def test_text_or_structured_summarises(self, way: str, kind: str) -> None:
        model = SummaryModel(kind)
        strategy = SummarizerStrategy(
            model=model.model, interaction_threshold_qty=3, interaction_keep=1
        )
        memory = ConversationMemory(max_tokens=400, long_term_strategy=strategy)
        for i in range(3):
            await run(memory, "add_turn", way, "c", f"question {i}", f"answer {i}")
        assert await run(memory, "get_summary", way, "c") == model.answers[0]
        status = await run(memory, "summary_status", way, "c")
        assert isinstance(status, SummaryStatus)
        assert status.state == "ok"

    @pytest.mark.parametrize("way", MODES)
    @pytest.mark.parametrize("kind", ["failing", "empty"])
    async def test_a_failure_is_one_line(
        self, way: str, kind: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        model = SummaryModel(kind)
        strategy = SummarizerStrategy(
            model=model.model, interaction_threshold_qty=3, interaction_keep=1
        )
        memory = ConversationMemory(max_tokens=400, long_term_strategy=strategy)
        with caplog.at_level(logging.INFO):
            for i in range(6):
                await run(memory, "add_turn", way, "conv-9", f"question {i}", f"answer {i}")
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1
        [line] = lines
        assert "'conv-9'" in line.getMessage()
        assert f"summary-{kind}" in line.getMessage()
        assert "\n" not in line.getMessage()
        assert line.exc_info is None
        # Backed off: not called on every turn past the threshold.
        assert model.calls == 1
        assert len(await run(memory, "get_transcript", way, "conv-9")) == 6
        status = await run(memory, "summary_status", way, "conv-9")
        assert status.state == "failing"
        assert status.failures == 1
        assert status.failing_since is not None
        assert status.last_error

    async def test_an_empty_reply_says_so(self) -> None:
        model = SummaryModel("empty")
        strategy = SummarizerStrategy(
            model=model.model, interaction_threshold_qty=3, interaction_keep=1
        )
        memory = ConversationMemory(max_tokens=400, long_term_strategy=strategy)
        for i in range(3):
            memory.add_turn("c", f"question {i}", f"answer {i}")
        status = memory.summary_status("c")
        assert "no summary" in (status.last_error or "")
        assert "empty" in (status.last_error or "")

    def test_a_strategy_given_as_summarizer_says_where_it_goes(self) -> None:
        strategy = SummarizerStrategy(model=SummaryModel("text").model)
        with pytest.raises(TypeError, match="long_term_strategy"):
            ConversationMemory(summarizer=strategy)  # type: ignore[arg-type]  # the mistake


class TestStatus:
    @pytest.mark.parametrize("way", MODES)
    async def test_fields(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=joined)
        memory.add_turn("c", "hello", "hi")
        status = await run(memory, "summary_status", way, "c")
        assert (status.state, status.failing_since, status.last_error) == ("ok", None, None)

    @pytest.mark.parametrize("way", MODES)
    async def test_unknown_conversation(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=joined)
        with pytest.raises(LookupError, match="nope"):
            await run(memory, "summary_status", way, "nope")


class TestPins:
    @pytest.mark.parametrize("way", MODES)
    async def test_a_pinned_turn_never_leaves(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=120, summarize_threshold=60, summarizer=joined)
        await run(memory, "add_turn", way, "c", "invoice INV-1 is disputed", "noted", pinned=True)
        for i in range(20):
            await run(memory, "add_turn", way, "c", f"filler question {i}", "word " * 6)
        turns = await run(memory, "get_turns", way, "c")
        assert turns[0].user_prompt == "invoice INV-1 is disputed"
        assert turns[0].pinned is True
        assert await run(memory, "get_history_tokens", way, "c") <= 120
        transcript = await run(memory, "get_transcript", way, "c")
        assert transcript[0].pinned is True

    @pytest.mark.parametrize("way", MODES)
    async def test_pin_turn_and_the_snapshot(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=200, summarize_threshold=100, summarizer=joined)
        await run(memory, "add_turn", way, "c", "the deadline is Friday", "ok")
        await run(memory, "add_turn", way, "c", "second", "ok")
        pinned = await run(memory, "pin_turn", way, "c", 0)
        assert pinned.pinned is True
        snapshot = await run(memory, "export_conversation", way, "c")
        other = ConversationMemory(max_tokens=200, summarize_threshold=100, summarizer=joined)
        cid = await run(other, "import_conversation", way, snapshot)
        turns = await run(other, "get_turns", way, cid)
        assert [t.pinned for t in turns] == [True, False]

    @pytest.mark.parametrize("way", MODES)
    async def test_pins_over_budget_fail_at_pin_time(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=50, summarizer=joined)
        with pytest.raises(ValueError, match="pin"):
            await run(memory, "add_turn", way, "c", "word " * 200, "x", pinned=True)
        await run(memory, "add_turn", way, "c", "word " * 40, "x")
        with pytest.raises(ValueError, match="pin"):
            await run(memory, "pin_turn", way, "c", 0)
        [turn] = await run(memory, "get_transcript", way, "c")
        assert not turn.pinned

    @pytest.mark.parametrize("bad", ["yes", 1, None])
    def test_pinned_must_be_bool(self, bad: object) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=joined)
        with pytest.raises(TypeError, match="pinned"):
            memory.add_turn("c", "hello", "hi", pinned=bad)  # type: ignore[arg-type]  # on purpose

    def test_pin_turn_of_an_unknown_turn(self) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=joined)
        memory.add_turn("c", "hello", "hi")
        with pytest.raises((LookupError, ValueError), match="7"):
            memory.pin_turn("c", 7)
        with pytest.raises(TypeError, match="turn_id"):
            memory.pin_turn("c", "0")  # type: ignore[arg-type]  # on purpose


class TestSummarizeNow:
    @pytest.mark.parametrize("way", MODES)
    async def test_with_a_focus_line(self, way: str) -> None:
        model = SummaryModel("text", ["dense summary v1: decisions about invoices kept"])
        strategy = SummarizerStrategy(
            model=model.model, interaction_threshold_qty=50, interaction_keep=1
        )
        memory = ConversationMemory(max_tokens=2000, long_term_strategy=strategy)
        for i in range(4):
            await run(memory, "add_turn", way, "c", f"question {i} on invoices", f"answer {i}")
        assert model.calls == 0
        focus = "keep the decisions about invoices"
        summary = await run(memory, "summarize_now", way, "c", focus=focus)
        assert summary == "dense summary v1: decisions about invoices kept"
        assert await run(memory, "get_summary", way, "c") == summary
        assert any(focus in (text or "") for text in model.instructions)

    @pytest.mark.parametrize("way", MODES)
    async def test_plain_summarizer_and_bad_focus(self, way: str) -> None:
        memory = ConversationMemory(max_tokens=2000, summarizer=joined)
        for i in range(4):
            await run(memory, "add_turn", way, "c", f"question {i}", f"answer {i}")
        assert await run(memory, "summarize_now", way, "c")
        with pytest.raises(TypeError, match="focus"):
            await run(memory, "summarize_now", way, "c", focus=3)
        with pytest.raises(LookupError, match="nope"):
            await run(memory, "summarize_now", way, "nope")
