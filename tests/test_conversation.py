"""ConversationMemory: whole-turn FIFO trimming inside the budget, rolling summaries, persistence."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from memlane import (
    ConversationMemory,
    ConversationTurn,
    FileStore,
    MemoryManager,
    SQLiteStore,
    TokenEstimator,
)
from memlane.conversation import SUMMARY_PREFIX, message_texts

# Every test here runs on both implementations (the ledger is Rust or its twin).
pytestmark = pytest.mark.usefixtures("impl")


def first_content(message: ModelMessage) -> Any:
    """The content of a message's first part, which must be a prompt or a text."""
    part = message.parts[0]
    assert isinstance(part, UserPromptPart | TextPart | SystemPromptPart)
    return part.content


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def tool_turn(i: int) -> list[Any]:
    return [
        ModelRequest(parts=[UserPromptPart(content=f"look up item {i}")]),
        ModelResponse(
            parts=[ToolCallPart(tool_name="lookup", args={"item": i}, tool_call_id=f"c{i}")]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name="lookup", content={"item": i, "value": "x" * 40}, tool_call_id=f"c{i}"
                )
            ]
        ),
        ModelResponse(parts=[TextPart(content=f"item {i} is x")]),
    ]


class TestTokenEstimateOfATurn:
    """A turn's estimate counts every part the model will be sent, tool calls included."""

    def test_counts_all_parts(self) -> None:
        est = TokenEstimator()
        mem = ConversationMemory(estimator=est)
        messages = tool_turn(1)
        turn = mem.add_turn("c", "look up item 1", "item 1 is x", messages)
        expected = sum(est.estimate(t) for t in message_texts(messages))
        assert turn.token_estimate == expected
        only_strings = est.estimate("look up item 1") + est.estimate("item 1 is x")
        assert turn.token_estimate > only_strings

    def test_default_messages_built_from_strings(self) -> None:
        mem = ConversationMemory()
        turn = mem.add_turn("c", "hello", "hi there")
        assert isinstance(turn.raw_messages[0], ModelRequest)
        assert first_content(turn.raw_messages[0]) == "hello"
        assert first_content(turn.raw_messages[1]) == "hi there"
        assert turn.token_estimate == 1 + 2
        assert turn.turn_id == 0
        assert mem.add_turn("c", "a", "b").turn_id == 1


def oracle_window(counts: list[int], budget: int) -> int:
    """Brute force: how many most recent turns fit."""
    total, n = 0, 0
    for c in reversed(counts):
        if total + c > budget:
            break
        total += c
        n += 1
    return n


class TestBudget:
    """History is the longest run of most recent whole turns within max_tokens."""

    @given(sizes=st.lists(st.integers(0, 60), max_size=40), budget=st.integers(1, 200))
    def test_window_matches_brute_force(self, sizes: list[int], budget: int) -> None:
        mem = ConversationMemory(
            max_tokens=budget, estimator=TokenEstimator(mode="heuristic", tokens_per_word=1.0)
        )
        counts = []
        for i, n in enumerate(sizes):
            turn = mem.add_turn("c", "", words(n, f"t{i}_"))
            counts.append(turn.token_estimate)
            history = mem.get_message_history("c")
            kept = oracle_window(counts, budget)
            assert len(history) == 2 * kept
            assert mem.get_history_tokens("c") == sum(counts[len(counts) - kept :])
            assert mem.get_history_tokens("c") <= budget

    def test_turn_larger_than_budget_is_left_out(self) -> None:
        mem = ConversationMemory(max_tokens=10)
        mem.add_turn("c", "small", "ok")
        mem.add_turn("c", words(50), words(50))
        assert mem.get_message_history("c") == []
        mem.add_turn("c", "again", "fine")
        assert len(mem.get_message_history("c")) == 2

    def test_tool_calls_travel_with_their_returns(self) -> None:
        mem = ConversationMemory(max_tokens=150)
        for i in range(20):
            mem.add_turn("c", f"look up item {i}", f"item {i} is x", tool_turn(i))
        history = mem.get_message_history("c")
        assert history, "something must fit"
        first_part = history[0].parts[0]
        assert isinstance(first_part, UserPromptPart)
        calls = {p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolCallPart)}
        returns = {
            p.tool_call_id for m in history for p in m.parts if isinstance(p, ToolReturnPart)
        }
        assert calls == returns

    def test_unknown_conversation_has_empty_history(self) -> None:
        mem = ConversationMemory()
        assert mem.get_message_history("nope") == []
        assert mem.get_turns("nope") == []
        assert mem.get_total_tokens("nope") == 0
        assert mem.get_summary("nope") is None


class TestSummaries:
    """Evicted turns roll into a summary that keeps older knowledge and counts against the budget."""

    def make(self, **kw: Any) -> tuple[ConversationMemory, list[list[ConversationTurn]]]:
        calls: list[list[ConversationTurn]] = []

        def summarizer(turns: list[ConversationTurn]) -> str:
            calls.append(turns)
            return " ; ".join(t.assistant_response.split()[0] for t in turns)

        params = {"max_tokens": 100, "summarize_threshold": 60, "summarizer": summarizer, **kw}
        return ConversationMemory(**params), calls

    def test_summary_rolls_forward(self) -> None:
        mem, calls = self.make()
        for i in range(12):
            mem.add_turn("c", f"q{i}", f"fact{i} " + words(8))
        assert calls, "the threshold was crossed"
        assert mem.get_total_tokens("c") <= 60
        second = calls[1]
        assert second[0].metadata == {"summary": True}
        assert second[0].user_prompt == ""
        assert second[0].assistant_response == (
            calls[0] and " ; ".join(t.assistant_response.split()[0] for t in calls[0])
        )
        summary = mem.get_summary("c")
        assert summary is not None
        assert summary.startswith("fact0")
        history = mem.get_message_history("c")
        head = history[0].parts[0]
        assert isinstance(head, SystemPromptPart)
        assert head.content == SUMMARY_PREFIX + summary
        assert mem.get_history_tokens("c") <= 100

    def test_newest_turn_always_stays(self) -> None:
        mem, _ = self.make(summarize_threshold=5)
        mem.add_turn("c", "q", words(30))
        mem.add_turn("c", "q", words(30))
        turns = mem.get_turns("c")
        assert len(turns) == 1
        assert turns[0].turn_id == 1

    def test_without_summarizer_nothing_is_summarised(self) -> None:
        mem = ConversationMemory(max_tokens=50, summarize_threshold=10)
        for _ in range(10):
            mem.add_turn("c", "q", words(10))
        assert mem.get_summary("c") is None
        assert len(mem.get_turns("c")) == 10

    def test_failing_summarizer_keeps_turns(self, caplog: pytest.LogCaptureFixture) -> None:
        def broken(turns: list[ConversationTurn]) -> str:
            raise RuntimeError("model down")

        mem = ConversationMemory(max_tokens=100, summarize_threshold=20, summarizer=broken)
        for _ in range(5):
            mem.add_turn("c", "q", words(10))
        assert len(mem.get_turns("c")) == 5
        assert "summarizer failed" in caplog.text

    async def test_async_summarizer(self) -> None:
        async def summarizer(turns: list[ConversationTurn]) -> str:
            await asyncio.sleep(0)
            return f"{len(turns)} turns"

        mem = ConversationMemory(max_tokens=100, summarize_threshold=30, summarizer=summarizer)
        for _ in range(6):
            await mem.async_add_turn("c", "q", words(10))
        assert mem.get_summary("c") is not None


class TestPersistence:
    """A new memory on the same SQLite file or directory returns the identical history."""

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_restart_returns_identical_history(self, tmp_path: Path, kind: str) -> None:
        def store() -> Any:
            return SQLiteStore(tmp_path / "m.db") if kind == "sqlite" else FileStore(tmp_path / "d")

        def summarizer(turns: list[ConversationTurn]) -> str:
            return "|".join(t.user_prompt for t in turns)

        mem = ConversationMemory(
            max_tokens=300, summarize_threshold=200, summarizer=summarizer, store=store()
        )
        for i in range(25):
            msgs = tool_turn(i) if i % 3 == 0 else None
            mem.add_turn("conv", f"q{i}", f"a{i} " + words(10), msgs, metadata={"i": i})
        before = mem.get_message_history("conv")
        again = ConversationMemory(
            max_tokens=300, summarize_threshold=200, summarizer=summarizer, store=store()
        )
        assert again.get_message_history("conv") == before
        assert [t.turn_id for t in again.get_turns("conv")] == [
            t.turn_id for t in mem.get_turns("conv")
        ]
        assert again.get_summary("conv") == mem.get_summary("conv")
        assert again.conversation_ids == ["conv"]
        again.add_turn("conv", "next", "answer")
        assert again.get_turns("conv")[-1].turn_id == 25

    def test_unserialisable_metadata_stores_nothing(self, tmp_path: Path) -> None:
        mem = ConversationMemory(store=SQLiteStore(tmp_path / "m.db"))
        mem.add_turn("c", "q", "a")
        with pytest.raises(TypeError, match="metadata"):
            mem.add_turn("c", "q2", "a2", metadata={"when": object()})
        assert len(mem.get_turns("c")) == 1
        assert len(ConversationMemory(store=SQLiteStore(tmp_path / "m.db")).get_turns("c")) == 1


class TestExportImport:
    """Export is JSON-ready and import restores the same history."""

    def test_round_trip(self) -> None:
        mem = ConversationMemory(max_tokens=500)
        for i in range(5):
            mem.add_turn("c", f"q{i}", f"a{i}", tool_turn(i) if i == 2 else None, metadata={"n": i})
        data = json.loads(json.dumps(mem.export_conversation("c")))
        assert data["conversation_id"] == "c"
        assert [t["turn_id"] for t in data["turns"]] == list(range(5))
        assert data["total_tokens"] == mem.get_total_tokens("c")
        other = ConversationMemory(max_tokens=500)
        assert other.import_conversation(data) == "c"
        assert other.get_message_history("c") == mem.get_message_history("c")

    def test_import_without_messages_or_counts(self) -> None:
        mem = ConversationMemory()
        cid = mem.import_conversation(
            {"turns": [{"user_prompt": "hello", "assistant_response": "hi there"}]},
            conversation_id="new",
        )
        assert cid == "new"
        (turn,) = mem.get_turns("new")
        assert turn.token_estimate == 3
        assert len(mem.get_message_history("new")) == 2

    def test_import_never_overwrites(self) -> None:
        mem = ConversationMemory()
        mem.add_turn("c", "q", "a")
        with pytest.raises(ValueError, match="'c' already exists"):
            mem.import_conversation({"conversation_id": "c", "turns": []})
        assert len(mem.get_turns("c")) == 1

    @pytest.mark.parametrize("bad", ["", 0, 3.5])
    def test_a_bad_conversation_id_is_refused_not_replaced(self, bad: object) -> None:
        mem = ConversationMemory()
        data = {"conversation_id": "c", "turns": [{"user_prompt": "q", "assistant_response": "a"}]}
        with pytest.raises((ValueError, TypeError), match="conversation"):
            mem.import_conversation(data, conversation_id=bad)  # type: ignore[arg-type]  # a caller's wrong type
        assert mem.conversation_ids == []

    def test_export_unknown_names_it(self) -> None:
        with pytest.raises(KeyError) as info:
            ConversationMemory().export_conversation("ghost")
        assert "ghost" in str(info.value)

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ({"turns": "x"}, "data\\['turns'\\] must be a list"),
            (
                {"turns": [{"user_prompt": 1, "assistant_response": "a"}]},
                "data\\['turns'\\]\\[0\\]\\['user_prompt'\\]",
            ),
            ({"turns": [], "summary": 3}, "data\\['summary'\\]"),
        ],
    )
    def test_malformed_import(self, data: dict[str, Any], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            ConversationMemory().import_conversation(data)


class TestBadInput:
    """Bad arguments raise precise errors and store nothing."""

    @pytest.mark.parametrize(
        ("kw", "exc", "msg"),
        [
            ({"max_tokens": 0}, ValueError, "max_tokens must be > 0, got 0"),
            ({"max_tokens": -5}, ValueError, "max_tokens must be > 0, got -5"),
            ({"max_tokens": 1.5}, TypeError, "max_tokens must be int, not float"),
            ({"summarize_threshold": 0}, ValueError, "summarize_threshold must be > 0"),
            ({"summarizer": "nope"}, TypeError, "summarizer must be callable"),
        ],
    )
    def test_constructor(self, kw: dict[str, Any], exc: type[Exception], msg: str) -> None:
        with pytest.raises(exc, match=msg):
            ConversationMemory(**kw)

    def test_add_turn_arguments(self) -> None:
        mem = ConversationMemory()
        with pytest.raises(TypeError, match="conversation_id must be str, not int"):
            mem.add_turn(1, "q", "a")  # type: ignore[arg-type]  # the wrong type is the point
        with pytest.raises(TypeError, match="user_prompt must be str, not NoneType"):
            mem.add_turn("c", None, "a")  # type: ignore[arg-type]
        with pytest.raises(
            TypeError, match=r"raw_messages\[0\] must be ModelRequest or ModelResponse, not str"
        ):
            mem.add_turn("c", "q", "a", ["hello"])  # type: ignore[list-item]
        assert mem.conversation_ids == [] or mem.get_turns("c") == []

    def test_manager_budget_validation(self) -> None:
        with pytest.raises(ValueError, match="max_tokens must be > 0"):
            MemoryManager(max_conversation_tokens=0)


class TestConcurrency:
    """Many threads and coroutines appending to one conversation keep every turn once, in order."""

    def test_threads(self, tmp_path: Path) -> None:
        mem = ConversationMemory(store=SQLiteStore(tmp_path / "m.db"), max_tokens=100_000)

        def worker(n: int) -> None:
            for i in range(25):
                mem.add_turn("c", f"{n}-{i}", "a")

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        turns = mem.get_turns("c")
        assert [t.turn_id for t in turns] == list(range(100))
        assert len({t.user_prompt for t in turns}) == 100
        reloaded = ConversationMemory(
            store=SQLiteStore(tmp_path / "m.db"), max_tokens=100_000
        ).get_turns("c")
        assert [t.user_prompt for t in reloaded] == [t.user_prompt for t in turns]

    async def test_coroutines(self, tmp_path: Path) -> None:
        mem = ConversationMemory(store=SQLiteStore(tmp_path / "m.db"), max_tokens=100_000)
        await asyncio.gather(*(mem.async_add_turn("c", f"p{i}", "a") for i in range(50)))
        turns = await mem.async_get_turns("c")
        assert [t.turn_id for t in turns] == list(range(50))
        reloaded = ConversationMemory(
            store=SQLiteStore(tmp_path / "m.db"), max_tokens=100_000
        ).get_turns("c")
        assert [t.user_prompt for t in reloaded] == [t.user_prompt for t in turns]


class TestCompactRetainedTurns:
    """Turns outside the window are kept compactly and come back identical."""

    def test_old_turns_round_trip(self) -> None:
        mem = ConversationMemory(max_tokens=120)
        originals = [tool_turn(i) for i in range(30)]
        for i, messages in enumerate(originals):
            mem.add_turn(
                "c",
                f"look up item {i}",
                f"item {i} is x",
                messages if i % 2 else None,
                metadata={"i": i},
            )
        turns = mem.get_turns("c")
        assert [t.turn_id for t in turns] == list(range(30))
        assert [t.metadata for t in turns] == [{"i": i} for i in range(30)]
        for i, turn in enumerate(turns):
            if i % 2:
                assert turn.raw_messages == originals[i]
            else:
                assert [first_content(m) for m in turn.raw_messages] == [
                    f"look up item {i}",
                    f"item {i} is x",
                ]
        again = mem.get_turns("c")
        assert [t.raw_messages for t in again] == [t.raw_messages for t in turns]

    def test_window_grows_back_when_the_summary_shrinks(self) -> None:
        lengths = iter([60, 5, 5, 5, 5, 5, 5, 5, 5, 5])

        def summarizer(turns: list[ConversationTurn]) -> str:
            return words(next(lengths))

        est = TokenEstimator(mode="heuristic", tokens_per_word=1.0)
        mem = ConversationMemory(
            max_tokens=100, summarize_threshold=60, summarizer=summarizer, estimator=est
        )
        for i in range(40):
            mem.add_turn("c", "", words(12, f"t{i}_"))
            turns = mem.get_turns("c")
            summary = mem.get_summary("c")
            reserved = est.estimate(SUMMARY_PREFIX + summary) if summary is not None else 0
            if reserved > 100:
                reserved = 0
            kept = oracle_window([t.token_estimate for t in turns], 100 - reserved)
            expected = [m for t in turns[len(turns) - kept :] for m in t.raw_messages]
            history = mem.get_message_history("c")
            body = history[1:] if reserved else history
            assert body == expected


class TestFastTurnConstruction:
    """new_turn builds exactly what ConversationTurn.model_construct builds."""

    def test_equal_to_model_construct(self) -> None:
        from memlane.types import new_turn, utc_now

        values: dict[str, Any] = {
            "turn_id": 3,
            "user_prompt": "q",
            "assistant_response": "a",
            "raw_messages": tool_turn(1),
            "timestamp": utc_now(),
            "token_estimate": 9,
            "metadata": {"k": "v"},
        }
        fast = new_turn(**values)
        slow = ConversationTurn.model_construct(**values)
        assert fast == slow
        assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
        assert fast.model_fields_set == slow.model_fields_set
        assert ConversationTurn.model_validate(fast.model_dump()) == slow

    def test_entries_equal_to_model_construct(self) -> None:
        from memlane.types import MemoryEntry, MemoryScope, new_entry, utc_now

        values: dict[str, Any] = {
            "entry_id": "e1",
            "scope": MemoryScope.LONG_TERM,
            "key": "k",
            "content": {"value": [1, "two"]},
            "metadata": {"search_text": "k two"},
            "created_at": utc_now(),
            "expires_at": None,
            "importance": 0.8,
            "version": 0,
        }
        assert set(values) == set(MemoryEntry.model_fields)  # every field given
        fast = new_entry(**values)
        slow = MemoryEntry.model_construct(**values)
        assert fast == slow
        assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
        assert fast.model_fields_set == slow.model_fields_set
        assert MemoryEntry.model_validate(fast.model_dump()) == slow
