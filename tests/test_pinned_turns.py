"""Pinned turns (issue 27): add_turn(..., pinned=True) and pin_turn(cid, turn_id) keep a turn in
the prompt whatever the summaries and the budget window do; it counts against the budget, and
pins that alone would exceed it are refused at pin time; the store's log (restarts), the
transcript and snapshots keep the flag.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelResponse

from memlane import ConversationMemory, SQLiteStore, _backend
from memlane.errors import ConversationNotFoundError
from memlane.messages import message_texts
from memlane.strategies import MemoryMaxTokensStrategy
from memlane.types import ConversationTurn
from summary_models import CountingSummarizer, call

MODES = ["sync", "async"]
WORDS = "word " * 10  # an answer of ~10 tokens


async def history_text(memory: ConversationMemory, cid: str, mode: str) -> str:
    return " ".join(message_texts(await call(memory, "get_message_history", mode, cid)))


def summarising(store: SQLiteStore | None = None) -> ConversationMemory:
    return ConversationMemory(
        max_tokens=150, summarize_threshold=80, summarizer=CountingSummarizer(), store=store
    )


class TestAPinnedTurnStays:
    """Never summarised away nor trimmed from the prompt; the budget holds."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_through_summaries(self, impl: _backend.Implementation, mode: str) -> None:
        memory = summarising()
        await call(
            memory, "add_turn", mode, "c", "[pin] the invoice account is 4471", WORDS, pinned=True
        )
        for i in range(20):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
            assert await call(memory, "get_history_tokens", mode, "c") <= 150
            assert "[pin]" in await history_text(memory, "c", mode)
        summary = await call(memory, "get_summary", mode, "c")
        assert "[p00]" in summary
        assert "[pin]" not in summary  # kept verbatim, not folded into the summary
        turns = await call(memory, "get_turns", mode, "c")
        assert turns[0].turn_id == 0
        assert turns[0].metadata == {"pinned": True}
        history = await history_text(memory, "c", mode)
        # Summary first, then the pinned turn, then the newest turns: the order of time.
        assert history.index("[pin]") < history.index("[p19]")

    @pytest.mark.parametrize("mode", MODES)
    async def test_through_the_budget_window(
        self, impl: _backend.Implementation, mode: str
    ) -> None:
        memory = ConversationMemory(max_tokens=100)
        await call(memory, "add_turn", mode, "c", "[p00]", WORDS)
        await call(memory, "add_turn", mode, "c", "[pin]", WORDS, pinned=True)
        for i in range(2, 20):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
            assert await call(memory, "get_history_tokens", mode, "c") <= 100
        history = await history_text(memory, "c", mode)
        assert "[pin]" in history
        assert "[p00]" not in history
        assert "[p19]" in history

    @pytest.mark.parametrize("mode", MODES)
    async def test_pinned_later(self, impl: _backend.Implementation, mode: str) -> None:
        memory = summarising()
        for i in range(4):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
        turn = await call(memory, "pin_turn", mode, "c", 2)
        assert (turn.turn_id, turn.metadata) == (2, {"pinned": True})
        again = await call(memory, "pin_turn", mode, "c", 2)  # twice is harmless
        assert again.metadata == {"pinned": True}
        for i in range(4, 24):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
            assert await call(memory, "get_history_tokens", mode, "c") <= 150
        history = await history_text(memory, "c", mode)
        assert "[p02]" in history
        summary = await call(memory, "get_summary", mode, "c")
        assert re.findall(r"\[p\d+\]", summary)[:3] == ["[p00]", "[p01]", "[p03]"]

    @pytest.mark.parametrize("mode", MODES)
    async def test_under_a_short_term_strategy(
        self, impl: _backend.Implementation, mode: str
    ) -> None:
        memory = ConversationMemory(
            max_tokens=1000, short_term=MemoryMaxTokensStrategy(memory_max_tokens=60)
        )
        await call(memory, "add_turn", mode, "c", "[pin]", WORDS, pinned=True)
        for i in range(10):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
        history = await history_text(memory, "c", mode)
        assert "[pin]" in history
        assert "[p00]" not in history


class TestPinsCountAgainstTheBudget:
    """Pins that alone would exceed the budget are refused at pin time, naming the numbers."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_refused_at_pin_time(self, impl: _backend.Implementation, mode: str) -> None:
        memory = ConversationMemory(max_tokens=60)
        await call(memory, "add_turn", mode, "c", "first", "word " * 30, pinned=True)
        await call(memory, "add_turn", mode, "c", "second", "word " * 30)
        with pytest.raises(
            ValueError, match=r"turn 1 \(\d+ tokens\).*total \d+ tokens.*max_tokens=60"
        ):
            await call(memory, "pin_turn", mode, "c", 1)
        with pytest.raises(ValueError, match=r"the new turn \(\d+ tokens\).*max_tokens=60"):
            await call(memory, "add_turn", mode, "c", "third", "word " * 30, pinned=True)
        turns = await call(memory, "get_turns", mode, "c")
        assert [t.user_prompt for t in turns] == ["first", "second"]  # nothing stored
        assert turns[1].metadata == {}

    def test_with_a_summarizer_the_summary_keeps_its_room(
        self, impl: _backend.Implementation
    ) -> None:
        memory = summarising()
        memory.add_turn("c", "first", "word " * 50, pinned=True)
        with pytest.raises(ValueError, match=r"summarize_threshold=80"):
            memory.add_turn("c", "second", "word " * 40, pinned=True)


class TestPinErrors:
    """A folded, unknown or badly typed turn id, or an unknown conversation, is refused."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_errors(self, impl: _backend.Implementation, mode: str) -> None:
        memory = summarising()
        for i in range(12):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
        with pytest.raises(ValueError, match=r"turn_id=0 .*already folded into the summary"):
            await call(memory, "pin_turn", mode, "c", 0)
        with pytest.raises(ValueError, match=r"turn_id=99 does not exist.*newest turn is 11"):
            await call(memory, "pin_turn", mode, "c", 99)
        with pytest.raises(TypeError, match="turn_id must be int, not str"):
            await call(memory, "pin_turn", mode, "c", "3")
        with pytest.raises(ValueError, match="turn_id must be >= 0"):
            await call(memory, "pin_turn", mode, "c", -1)
        with pytest.raises(ConversationNotFoundError):
            await call(memory, "pin_turn", mode, "other", 0)
        with pytest.raises(TypeError, match="pinned must be bool"):
            await call(memory, "add_turn", mode, "c", "q", "a", pinned="yes")


class TestTheFlagIsKept:
    """The log (a restart), the transcript and a snapshot keep the pinned flag."""

    @pytest.mark.parametrize("mode", MODES)
    async def test_restart_and_transcript(
        self, impl: _backend.Implementation, mode: str, tmp_path: Path
    ) -> None:
        path = tmp_path / "c.db"
        memory = summarising(SQLiteStore(path))
        await call(memory, "add_turn", mode, "c", "[pin]", WORDS, pinned=True)
        await call(memory, "add_turn", mode, "c", "[p01]", WORDS)
        await call(memory, "pin_turn", mode, "c", 1)
        for i in range(2, 16):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
        restarted = summarising(SQLiteStore(path))
        for reader in (memory, restarted):
            turns = await call(reader, "get_turns", mode, "c")
            assert [t.turn_id for t in turns if t.metadata.get("pinned")] == [0, 1]
            history = await history_text(reader, "c", mode)
            assert "[pin]" in history
            assert "[p01]" in history
        transcript = await call(restarted, "get_transcript", mode, "c")
        assert [t.turn_id for t in transcript] == list(range(16))
        assert [t.turn_id for t in transcript if t.metadata.get("pinned")] == [0, 1]
        assert await call(restarted, "get_history_tokens", mode, "c") == await call(
            memory, "get_history_tokens", mode, "c"
        )

    @pytest.mark.parametrize("mode", MODES)
    async def test_snapshot(self, impl: _backend.Implementation, mode: str, tmp_path: Path) -> None:
        memory = summarising()
        await call(memory, "add_turn", mode, "c", "[pin]", WORDS, pinned=True)
        for i in range(1, 14):
            await call(memory, "add_turn", mode, "c", f"[p{i:02d}]", WORDS)
        await call(memory, "pin_turn", mode, "c", 13)
        snapshot = await call(memory, "export_conversation", mode, "c")
        assert [t["turn_id"] for t in snapshot["pinned_turns"]] == [0]
        for target in (summarising(), summarising(SQLiteStore(tmp_path / "c.db"))):
            await call(target, "import_conversation", mode, snapshot)
            turns = await call(target, "get_turns", mode, "c")
            assert [t.turn_id for t in turns if t.metadata.get("pinned")] == [0, 13]
            assert await history_text(target, "c", mode) == await history_text(memory, "c", mode)
        restarted = summarising(SQLiteStore(tmp_path / "c.db"))
        assert await history_text(restarted, "c", mode) == await history_text(memory, "c", mode)

    def test_a_malformed_pinned_turn_is_refused(self) -> None:
        memory = summarising()
        memory.add_turn("c", "[pin]", WORDS, pinned=True)
        for i in range(1, 14):
            memory.add_turn("c", f"[p{i:02d}]", WORDS)
        snapshot = memory.export_conversation("c")
        snapshot["pinned_turns"][0]["turn_id"] = snapshot["summarized_turns"]
        with pytest.raises(ValueError, match=r"data\['pinned_turns'\]\[0\]\['turn_id'\]"):
            summarising().import_conversation(snapshot)


class TestPinsKeepTheInvariants:
    """Random turn sizes, pins and summary lengths: every kept turn is sent, every pin is kept,
    the history fits the budget, and every other turn is sent or summarised."""

    @given(
        turns=st.lists(st.tuples(st.integers(1, 60), st.booleans()), min_size=1, max_size=20),
        summary_words=st.integers(1, 30),
    )
    def test_random(
        self, impl: _backend.Implementation, turns: list[tuple[int, bool]], summary_words: int
    ) -> None:
        def summarize(folded: list[ConversationTurn]) -> str:
            return " ".join(["gist"] * summary_words)

        memory = ConversationMemory(max_tokens=300, summarize_threshold=200, summarizer=summarize)
        pinned: list[int] = []
        for i, (size, pin) in enumerate(turns):
            prompt = f"[t{i:02d}] " + "word " * size
            try:
                memory.add_turn("c", prompt, "ok", pinned=pin)
            except ValueError:
                assert pin  # only a pin the budget cannot hold is refused
                continue
            if pin:
                pinned.append(i)
            history = memory.get_message_history("c")
            kept = memory.get_turns("c")
            assert sum(isinstance(m, ModelResponse) for m in history) == len(kept)
            assert memory.get_history_tokens("c") <= 300
            text = " ".join(message_texts(history))
            for number in pinned:
                assert f"[t{number:02d}]" in text
            kept_ids = [t.turn_id for t in kept]
            assert kept_ids == sorted(kept_ids)
            assert [t.turn_id for t in kept if t.metadata.get("pinned")] == [
                t.turn_id for t in memory.get_transcript("c") if t.metadata.get("pinned")
            ]

    @settings(max_examples=25, deadline=None)
    @given(
        turns=st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=16),
        late_pins=st.lists(st.integers(0, 15), max_size=3),
    )
    def test_a_restart_rebuilds_the_same_conversation(
        self,
        impl: _backend.Implementation,
        tmp_path_factory: pytest.TempPathFactory,
        turns: list[tuple[int, bool]],
        late_pins: list[int],
    ) -> None:
        path = tmp_path_factory.mktemp("pins") / "c.db"
        memory = summarising(SQLiteStore(path))
        for i, (size, pin) in enumerate(turns):
            with contextlib.suppress(ValueError):  # a pin the budget cannot hold
                memory.add_turn("c", f"[t{i:02d}] " + "word " * size, "ok", pinned=pin)
        for turn_id in late_pins:
            with contextlib.suppress(ValueError):  # folded, not there yet, or too big
                memory.pin_turn("c", turn_id)
        restarted = summarising(SQLiteStore(path))
        for read in ("get_turns", "get_summary", "get_history_tokens", "get_total_tokens"):
            assert getattr(restarted, read)("c") == getattr(memory, read)("c"), read
        assert message_texts(restarted.get_message_history("c")) == message_texts(
            memory.get_message_history("c")
        )
