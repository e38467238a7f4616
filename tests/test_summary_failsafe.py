"""Summaries that fail safe (issue 27): a model answering in plain text summarises; a failure
is one warning line naming the conversation and the model; a failing summarizer is backed off
per conversation (exponential, capped, reset by a success) while the history keeps its budget;
summary_status says how it stands; the default threshold is valid for every budget.

Models are pydantic-ai ``FunctionModel``s (tests/summary_models.py); the backoff's clock is
moved by hand, so no test waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest

from memlane import ConversationMemory, SQLiteStore, _backend
from memlane.conversation import summary_backoff
from memlane.conversation.agent_hooks import async_fold_by_strategy, fold_by_strategy
from memlane.conversation.summary_backoff import BACKOFF_CAP, BACKOFF_INITIAL, SummaryBackoff
from memlane.errors import ConversationNotFoundError
from memlane.messages import message_texts
from memlane.strategies import LongTermPlan, SummarizerStrategy
from memlane.types import ConversationTurn
from summary_models import Clock, CountingSummarizer, SummaryModel, call

MODES = ["sync", "async"]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The backoff's clock, moved by the test."""
    moved = Clock()
    monkeypatch.setattr(summary_backoff, "monotonic", moved)
    return moved


def density_memory(model: SummaryModel, **options: object) -> ConversationMemory:
    """A memory whose summarizer strategy folds all but the newest turn after three."""
    strategy = SummarizerStrategy(
        model=model.model,
        interaction_threshold_qty=3,
        interaction_keep=1,
        cod_max_loops=options.pop("loops", 1),  # type: ignore[arg-type]  # an int in every call
    )
    return ConversationMemory(max_tokens=400, long_term_strategy=strategy, **options)  # type: ignore[arg-type]  # the options are ConversationMemory's own


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "memlane" and r.levelno >= logging.WARNING]


class TestAnyModelSummarises:
    """Chain of density takes the structured step, and the text when the model answers text."""

    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("kind", ["text", "structured"])
    async def test_one_call_per_pass(
        self,
        impl: _backend.Implementation,
        mode: str,
        kind: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        model = SummaryModel(kind)
        memory = density_memory(model)
        for i in range(3):
            await call(memory, "add_turn", mode, "c", f"question {i}", f"answer {i}")
        assert model.calls == 1
        assert await call(memory, "get_summary", mode, "c") == model.answers[0]
        assert [t.turn_id for t in await call(memory, "get_turns", mode, "c")] == [2]
        assert (await call(memory, "summary_status", mode, "c")).state == "ok"
        assert warnings_of(caplog) == []

    @pytest.mark.parametrize("mode", MODES)
    async def test_text_loops_stop_when_the_summary_stops_changing(
        self, impl: _backend.Implementation, mode: str
    ) -> None:
        model = SummaryModel("text", ["a long first summary of invoices", "invoices: Fridays"])
        memory = density_memory(model, loops=5)
        for i in range(3):
            await call(memory, "add_turn", mode, "c", f"question {i}", f"answer {i}")
        # v1, a denser v2, then v2 again: the chain ends there, not at cod_max_loops.
        assert model.calls == 3
        assert await call(memory, "get_summary", mode, "c") == "invoices: Fridays"


class TestAFailureIsOneLine:
    """A failing, or empty, model: one warning naming conversation and model, one call, no
    turn lost."""

    @pytest.mark.parametrize("mode", MODES)
    @pytest.mark.parametrize("kind", ["failing", "empty"])
    async def test_one_warning_line(
        self,
        impl: _backend.Implementation,
        mode: str,
        kind: str,
        caplog: pytest.LogCaptureFixture,
        clock: Clock,
    ) -> None:
        model = SummaryModel(kind)
        memory = density_memory(model)
        for i in range(3):
            await call(memory, "add_turn", mode, "conv-7", f"question {i}", f"answer {i}")
        assert model.calls == 1
        [record] = warnings_of(caplog)
        message = record.getMessage()
        assert "'conv-7'" in message
        assert f"summary-{kind}" in message
        assert "\n" not in message
        assert record.exc_info is None
        assert await call(memory, "get_summary", mode, "conv-7") is None
        assert len(await call(memory, "get_transcript", mode, "conv-7")) == 3
        status = await call(memory, "summary_status", mode, "conv-7")
        assert status.state == "failing"
        assert status.failures == 1
        assert status.last_error is not None

    @pytest.mark.parametrize("mode", MODES)
    async def test_an_empty_summary_from_a_plain_summarizer_is_a_failure(
        self, impl: _backend.Implementation, mode: str, clock: Clock
    ) -> None:
        memory = ConversationMemory(
            max_tokens=100, summarize_threshold=20, summarizer=lambda turns: "  "
        )
        for i in range(4):
            await call(memory, "add_turn", mode, "c", f"question {i}", "word " * 8)
        assert await call(memory, "get_summary", mode, "c") is None
        status = await call(memory, "summary_status", mode, "c")
        assert status.state == "failing"
        assert "empty summary" in (status.last_error or "")


class TestBackoff:
    """Per conversation, exponential and capped; reset by a success; budget kept meanwhile."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_not_called_every_turn(
        self, impl: _backend.Implementation, mode: str, clock: Clock
    ) -> None:
        summarizer = CountingSummarizer()
        summarizer.up = False
        memory = ConversationMemory(max_tokens=120, summarize_threshold=60, summarizer=summarizer)
        added = 0

        async def turn() -> None:
            nonlocal added
            await call(memory, "add_turn", mode, "c", f"[p{added:02d}]", "word " * 10)
            added += 1
            assert await call(memory, "get_history_tokens", mode, "c") <= 120

        while summarizer.calls == 0:
            await turn()
        for _ in range(5):
            await turn()
        assert summarizer.calls == 1
        delay = BACKOFF_INITIAL
        for failures in range(2, 6):
            clock.advance(delay - 0.001)
            await turn()
            assert summarizer.calls == failures - 1  # not yet
            clock.advance(0.001)
            await turn()
            assert summarizer.calls == failures
            delay *= 2
        status = await call(memory, "summary_status", mode, "c")
        assert (status.state, status.failures) == ("failing", 5)
        # Another conversation is not backed off.
        await call(memory, "add_turn", mode, "other", "hello", "word " * 40)
        await call(memory, "add_turn", mode, "other", "again", "word " * 40)
        assert summarizer.calls == 6

    @pytest.mark.parametrize("mode", MODES)
    async def test_the_oldest_turns_wait_and_are_summarised_when_it_is_back(
        self, impl: _backend.Implementation, mode: str, clock: Clock, tmp_path: Path
    ) -> None:
        summarizer = CountingSummarizer()
        summarizer.up = False
        memory = ConversationMemory(
            max_tokens=120,
            summarize_threshold=60,
            summarizer=summarizer,
            store=SQLiteStore(tmp_path / "c.db"),
        )
        prompts = [f"[p{i:02d}]" for i in range(12)]
        for p in prompts:
            await call(memory, "add_turn", mode, "c", p, "word " * 10)
            assert await call(memory, "get_history_tokens", mode, "c") <= 120
        history = " ".join(message_texts(await call(memory, "get_message_history", mode, "c")))
        assert prompts[0] not in history  # left the prompt...
        transcript = await call(memory, "get_transcript", mode, "c")
        assert [t.user_prompt for t in transcript] == prompts  # ...not the store
        assert (await call(memory, "summary_status", mode, "c")).pending_turns > 0

        summarizer.up = True
        clock.advance(BACKOFF_CAP)
        await call(memory, "add_turn", mode, "c", "[p12]", "word " * 10)
        prompts.append("[p12]")
        summary = await call(memory, "get_summary", mode, "c")
        kept = [t.user_prompt for t in await call(memory, "get_turns", mode, "c")]
        assert re.findall(r"\[p\d+\]", summary) + kept == prompts
        status = await call(memory, "summary_status", mode, "c")
        assert (status.state, status.failures, status.failing_since) == ("ok", 0, None)

    async def test_a_success_resets_the_delay(
        self, impl: _backend.Implementation, clock: Clock
    ) -> None:
        summarizer = CountingSummarizer()
        memory = ConversationMemory(max_tokens=120, summarize_threshold=60, summarizer=summarizer)
        summarizer.up = False
        for i in range(8):
            memory.add_turn("c", f"q{i}", "word " * 10)
        clock.advance(BACKOFF_INITIAL)
        memory.add_turn("c", "q8", "word " * 10)
        assert summarizer.calls == 2  # the delay is 2 s now
        summarizer.up = True
        clock.advance(2 * BACKOFF_INITIAL)
        memory.add_turn("c", "q9", "word " * 10)
        assert memory.summary_status("c").state == "ok"
        summarizer.up = False
        calls = summarizer.calls
        for i in range(10, 16):
            memory.add_turn("c", f"q{i}", "word " * 10)
        assert summarizer.calls == calls + 1
        clock.advance(BACKOFF_INITIAL)  # the first delay again, not the doubled one
        memory.add_turn("c", "q16", "word " * 10)
        assert summarizer.calls == calls + 2

    async def test_in_the_background_no_job_starts_while_backed_off(
        self, impl: _backend.Implementation, clock: Clock
    ) -> None:
        summarizer = CountingSummarizer()
        summarizer.up = False
        memory = ConversationMemory(
            max_tokens=120,
            summarize_threshold=60,
            summarizer=summarizer,
            summarize_in_background=True,
        )
        for i in range(10):
            await memory.async_add_turn("c", f"q{i}", "word " * 10)
            await memory.async_flush()
            assert await memory.async_get_history_tokens("c") <= 120
        assert summarizer.calls == 1
        assert (await memory.async_summary_status("c")).state == "failing"

    def test_the_delay_doubles_up_to_the_cap(self, clock: Clock) -> None:
        backoff = SummaryBackoff()
        delays = []
        for _ in range(12):
            backoff.failed("c", 0, ConnectionError("down"), "model", 1)
            delay = 0.0
            while not backoff.ready("c", 0):
                step = BACKOFF_INITIAL / 4
                clock.advance(step)
                delay += step
            delays.append(delay)
        expected = [min(BACKOFF_CAP, BACKOFF_INITIAL * 2**i) for i in range(12)]
        assert delays == expected
        assert delays[-1] == BACKOFF_CAP
        backoff.succeeded("c")
        assert backoff.ready("c", 0)

    def test_a_summary_committed_elsewhere_ends_it(self, clock: Clock) -> None:
        backoff = SummaryBackoff()
        backoff.failed("c", 4, ConnectionError("down"), "model", 1)
        assert not backoff.ready("c", 4)
        assert backoff.status("c", 4, 3, running=False).state == "failing"
        # The conversation's summary covers more turns now: another host summarised it.
        assert backoff.status("c", 9, 0, running=False).state == "ok"
        assert backoff.ready("c", 9)


class TestHangingModel:
    """A model that hangs never holds add_turn up in the background; the status says pending."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_pending_until_released(self, impl: _backend.Implementation, mode: str) -> None:
        model = SummaryModel("hanging")
        memory = density_memory(model, summarize_in_background=True)
        for i in range(4):
            await call(memory, "add_turn", mode, "c", f"question {i}", f"answer {i}")
        for _ in range(1000):  # the async job runs on this loop: wait by yielding to it
            if model.entered.is_set():
                break
            await asyncio.sleep(0.01)
        assert model.entered.is_set()
        assert not model.release.is_set()  # add_turn returned while the model hangs
        status = await call(memory, "summary_status", mode, "c")
        assert status.state == "pending"
        assert await call(memory, "get_history_tokens", mode, "c") <= 400
        model.release.set()
        await call(memory, "flush", mode)
        assert await call(memory, "get_summary", mode, "c") == model.answers[0]
        assert (await call(memory, "summary_status", mode, "c")).state == "ok"


class TestSummaryStatus:
    """ok for a conversation with nothing to fold; an unknown id is an error; reading writes nothing."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_ok_and_unknown(self, impl: _backend.Implementation, mode: str) -> None:
        memory = ConversationMemory(max_tokens=100, summarizer=CountingSummarizer())
        await call(memory, "add_turn", mode, "c", "hello", "hi")
        status = await call(memory, "summary_status", mode, "c")
        assert (status.state, status.pending_turns, status.last_error) == ("ok", 0, None)
        with pytest.raises(ConversationNotFoundError, match="nope"):
            await call(memory, "summary_status", mode, "nope")
        with pytest.raises(TypeError, match="conversation_id"):
            await call(memory, "summary_status", mode, 7)

    def test_reading_the_status_writes_nothing(self, tmp_path: Path, clock: Clock) -> None:
        summarizer = CountingSummarizer()
        summarizer.up = False
        store = SQLiteStore(tmp_path / "c.db")
        memory = ConversationMemory(
            max_tokens=120, summarize_threshold=60, summarizer=summarizer, store=store
        )
        for i in range(8):
            memory.add_turn("c", f"q{i}", "word " * 10)
        before = [(e.entry_id, e.version) for e in store.load(ConversationMemory.namespace("c"))]
        memory.summary_status("c")
        after = [(e.entry_id, e.version) for e in store.load(ConversationMemory.namespace("c"))]
        assert before == after
        assert summarizer.calls == 1


class TestTheDefaultThresholdIsAlwaysValid:
    """A default leaves the summary its room; a refused value's error names one that works."""

    @pytest.mark.parametrize("budget", [50, 40, 20, 17, 10, 2])
    def test_small_budgets(self, impl: _backend.Implementation, budget: int) -> None:
        summarizer = CountingSummarizer()
        memory = ConversationMemory(max_tokens=budget, summarizer=summarizer)
        assert 1 <= memory.summarize_threshold < budget
        for i in range(6):
            memory.add_turn("c", f"q{i}", "a")
            assert memory.get_history_tokens("c") <= budget

    def test_the_issues_example(self, impl: _backend.Implementation) -> None:
        memory = ConversationMemory(max_tokens=50, summarizer=CountingSummarizer())
        assert memory.summarize_threshold == 34  # min(3072, 37, 50 - 16)
        for i in range(6):
            memory.add_turn("c", f"question {i}", "word " * 6)
        assert memory.get_summary("c") is not None

    @pytest.mark.parametrize(("budget", "threshold"), [(50, 40), (100, 100), (20, 19), (300, 299)])
    def test_a_refused_value_names_one_that_works(self, budget: int, threshold: int) -> None:
        with pytest.raises(ValueError, match=rf"summarize_threshold={threshold}\b") as raised:
            ConversationMemory(
                max_tokens=budget, summarize_threshold=threshold, summarizer=CountingSummarizer()
            )
        suggested = re.search(r"e\.g\. summarize_threshold=(\d+)", str(raised.value))
        assert suggested is not None
        works = ConversationMemory(
            max_tokens=budget,
            summarize_threshold=int(suggested.group(1)),
            summarizer=CountingSummarizer(),
        )
        works.add_turn("c", "q", "a")


class TestAnAgentsStrategy:
    """The fold an agent's own summarizer strategy runs after a run fails safe the same way."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_one_line_and_backed_off(
        self,
        impl: _backend.Implementation,
        mode: str,
        caplog: pytest.LogCaptureFixture,
        clock: Clock,
    ) -> None:
        model = SummaryModel("failing")
        memory = ConversationMemory(max_tokens=400)
        strategy = SummarizerStrategy(
            interaction_threshold_qty=3, interaction_keep=1, cod_max_loops=1
        )
        for i in range(3):
            await call(memory, "add_turn", mode, "c", f"question {i}", f"answer {i}")

        async def fold() -> LongTermPlan:
            if mode == "sync":
                return fold_by_strategy(memory, "c", strategy, model=model.model)
            return await async_fold_by_strategy(memory, "c", strategy, model=model.model)

        for _ in range(3):
            assert not (await fold()).fold
        assert model.calls == 1
        [record] = warnings_of(caplog)
        assert "'c'" in record.getMessage()
        assert record.exc_info is None
        assert (await call(memory, "summary_status", mode, "c")).state == "failing"
        clock.advance(BACKOFF_INITIAL)
        model.kind = "text"
        assert len((await fold()).fold) == 2
        assert await call(memory, "get_summary", mode, "c") == model.answers[0]
        assert (await call(memory, "summary_status", mode, "c")).state == "ok"


class TestACallerTimesOutAHangingSummarizer:
    """An inline summary the caller cancels (asyncio.wait_for) counts as a failure: the turn
    is kept, and the next turns do not wait for the summarizer again."""

    async def test_cancelled_inline_summary(
        self, impl: _backend.Implementation, clock: Clock
    ) -> None:
        released = asyncio.Event()
        calls = 0

        async def hanging(turns: list[ConversationTurn]) -> str:
            nonlocal calls
            calls += 1
            await released.wait()
            return "late summary"

        memory = ConversationMemory(max_tokens=120, summarize_threshold=60, summarizer=hanging)
        added = 0
        while calls == 0:
            turn = memory.async_add_turn("c", f"q{added}", "word " * 10)
            try:
                await asyncio.wait_for(turn, 0.5)
            except TimeoutError:
                break
            finally:
                added += 1
        assert calls == 1
        assert len(await memory.async_get_turns("c")) == added  # the turn was stored
        status = await memory.async_summary_status("c")
        assert (status.state, status.last_error) == ("failing", "cancelled while summarising")
        for i in range(3):
            await memory.async_add_turn("c", f"more {i}", "word " * 10)  # returns: backed off
            assert await memory.async_get_history_tokens("c") <= 120
        assert calls == 1
        released.set()
