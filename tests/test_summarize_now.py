"""summarize_now(cid, *, focus=None) (issue 27): folds everything but the kept turns (pinned
ones, a summarizer strategy's interaction_keep) now, whatever the threshold, with an optional
focus line for the summarizer; chain of density adds it to its instructions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane import ConversationMemory, SQLiteStore, _backend
from memlane.conversation import summary_backoff
from memlane.errors import ConversationNotFoundError
from memlane.strategies import SummarizerStrategy
from summary_models import Clock, CountingSummarizer, SummaryModel, call

MODES = ["sync", "async"]
FOCUS = "keep the decisions about invoices"


def roomy(summarizer: object, store: SQLiteStore | None = None) -> ConversationMemory:
    """A memory far from its threshold: nothing is summarised unless asked."""
    return ConversationMemory(max_tokens=4000, summarizer=summarizer, store=store)  # type: ignore[arg-type]  # the test summarizers are callables of turns


class TestFoldsEverythingButTheKeptTurns:
    """Every turn but the pinned ones goes into the summary, at once."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_plain_summarizer(
        self, impl: _backend.Implementation, mode: str, tmp_path: Path
    ) -> None:
        summarizer = CountingSummarizer()
        memory = roomy(summarizer, SQLiteStore(tmp_path / "c.db"))
        for i in range(5):
            await call(memory, "add_turn", mode, "c", f"[p{i}]", "answer", pinned=i == 2)
        assert summarizer.calls == 0
        summary = await call(memory, "summarize_now", mode, "c")
        assert summary == "[p0] [p1] [p3] [p4]"
        assert await call(memory, "get_summary", mode, "c") == summary
        assert [t.turn_id for t in await call(memory, "get_turns", mode, "c")] == [2]
        # Twice: the previous summary leads the input, and nothing but it is left to fold.
        await call(memory, "add_turn", mode, "c", "[p5]", "answer")
        assert await call(memory, "summarize_now", mode, "c") == "[p0] [p1] [p3] [p4] [p5]"
        restarted = roomy(CountingSummarizer(), SQLiteStore(tmp_path / "c.db"))
        assert await call(restarted, "get_summary", mode, "c") == "[p0] [p1] [p3] [p4] [p5]"
        assert [t.turn_id for t in await call(restarted, "get_turns", mode, "c")] == [2]

    @pytest.mark.parametrize("mode", MODES)
    async def test_focus_reaches_a_plain_summarizer(
        self, impl: _backend.Implementation, mode: str
    ) -> None:
        summarizer = CountingSummarizer()
        memory = roomy(summarizer)
        await call(memory, "add_turn", mode, "c", "[p0]", "answer")
        await call(memory, "summarize_now", mode, "c")
        await call(memory, "add_turn", mode, "c", "[p1]", "answer")
        await call(memory, "summarize_now", mode, "c", focus=FOCUS)
        turns = summarizer.inputs[-1]
        assert turns[0].metadata == {"summary": True}
        assert (turns[1].user_prompt, turns[1].metadata) == (FOCUS, {"focus": True})
        assert [t.user_prompt for t in turns[2:]] == ["[p1]"]

    @pytest.mark.parametrize("mode", MODES)
    async def test_chain_of_density_keeps_interactions_and_hears_the_focus(
        self, impl: _backend.Implementation, mode: str
    ) -> None:
        model = SummaryModel("text")
        strategy = SummarizerStrategy(
            model=model.model, interaction_threshold_qty=100, interaction_keep=2, cod_max_loops=1
        )
        memory = ConversationMemory(max_tokens=4000, long_term_strategy=strategy)
        for i in range(5):
            await call(memory, "add_turn", mode, "c", f"question {i}", f"answer {i}")
        summary = await call(memory, "summarize_now", mode, "c", focus=FOCUS)
        assert summary == model.answers[0]
        assert model.calls == 1
        assert FOCUS in (model.instructions[0] or "")
        assert [t.turn_id for t in await call(memory, "get_turns", mode, "c")] == [3, 4]

    @pytest.mark.parametrize("mode", MODES)
    async def test_nothing_to_fold(self, impl: _backend.Implementation, mode: str) -> None:
        summarizer = CountingSummarizer()
        memory = roomy(summarizer)
        await call(memory, "add_turn", mode, "c", "[p0]", "answer", pinned=True)
        assert await call(memory, "summarize_now", mode, "c") is None
        assert summarizer.calls == 0


class TestFailuresAndErrors:
    """A failure is raised to the caller and loses nothing; bad calls are refused."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_a_failure_is_raised(
        self, impl: _backend.Implementation, mode: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(summary_backoff, "monotonic", Clock())
        summarizer = CountingSummarizer()
        summarizer.up = False
        memory = roomy(summarizer)
        for i in range(3):
            await call(memory, "add_turn", mode, "c", f"[p{i}]", "answer")
        with pytest.raises(ConnectionError, match="provider down"):
            await call(memory, "summarize_now", mode, "c")
        assert len(await call(memory, "get_turns", mode, "c")) == 3
        assert (await call(memory, "summary_status", mode, "c")).state == "failing"
        # Asked for explicitly, it runs even while backed off, and a success ends the backoff.
        summarizer.up = True
        assert await call(memory, "summarize_now", mode, "c") == "[p0] [p1] [p2]"
        assert (await call(memory, "summary_status", mode, "c")).state == "ok"

    @pytest.mark.parametrize("mode", MODES)
    async def test_bad_calls(self, impl: _backend.Implementation, mode: str) -> None:
        memory = roomy(CountingSummarizer())
        await call(memory, "add_turn", mode, "c", "q", "a")
        with pytest.raises(TypeError, match="focus must be str or None, not int"):
            await call(memory, "summarize_now", mode, "c", focus=3)
        with pytest.raises(ConversationNotFoundError, match="nope"):
            await call(memory, "summarize_now", mode, "nope")
        plain = ConversationMemory()
        await call(plain, "add_turn", mode, "c", "q", "a")
        with pytest.raises(ValueError, match="summarize_now needs a summarizer"):
            await call(plain, "summarize_now", mode, "c")
