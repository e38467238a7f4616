"""The max-tokens window kept across reads: the same interactions as keep_max_tokens walking
the whole conversation, however it grew, and started afresh whenever the conversation's
older turns change (a summary or erasure, a clear, an import, another host's summary).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from memlane import ConversationMemory, SQLiteStore, _backend
from memlane.strategies import (
    Interaction,
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    ToolResultClearing,
    apply_short_term,
    interactions_from_turns,
    keep_max_tokens,
    message_token_counter,
)
from memlane.strategies.max_tokens_window import MaxTokensWindow

CONDITIONS = ["message.role != 'tool'", "len(message.content) < 200"]


def random_interaction(i: int, rng: random.Random, waiting: list[str]) -> list[ModelMessage]:
    """A prompt and an answer, sometimes tool round trips (some answered one interaction
    later), sometimes long texts, sometimes only a tool return (nothing left once filtered)."""
    messages: list[ModelMessage] = []
    if waiting and rng.random() < 0.5:  # the deferred result of the previous interaction
        call_id = waiting.pop()
        back = ToolReturnPart(tool_name="search", content=f"late {call_id}", tool_call_id=call_id)
        messages.append(ModelRequest(parts=[back]))
        if rng.random() < 0.3:
            return messages
    prompt = f"question {i} " + "word " * rng.choice([1, 5, 60])
    messages.append(ModelRequest(parts=[UserPromptPart(content=prompt)]))
    for t in range(rng.choice([0, 0, 1, 2])):
        call_id = f"c{i}-{t}"
        call = ToolCallPart("search", {"q": i}, tool_call_id=call_id)
        messages.append(ModelResponse(parts=[TextPart(content=f"looking {t}"), call]))
        if rng.random() < 0.2:
            waiting.append(call_id)
            continue
        result = "page " * rng.choice([3, 80])
        back = ToolReturnPart(tool_name="search", content=result, tool_call_id=call_id)
        messages.append(ModelRequest(parts=[back]))
    answer = f"answer {i} " + "text " * rng.choice([2, 10, 70])
    messages.append(ModelResponse(parts=[TextPart(content=answer)]))
    return messages


def random_conversation(seed: int, length: int) -> list[Interaction]:
    rng = random.Random(seed)
    waiting: list[str] = []
    count = message_token_counter()
    return [
        Interaction(random_interaction(i, rng, waiting), i).counted(count) for i in range(length)
    ]


class TestWindowAsTheWalk:
    """Fed a growing conversation in uneven steps, the window keeps what the walk keeps."""

    @pytest.mark.parametrize("seed", range(6))
    @pytest.mark.parametrize(
        "conditions", [[], CONDITIONS, ["message.role != 'tool'"], ["interaction.index % 3 != 1"]]
    )
    @pytest.mark.parametrize("budget", [-1, 0, 40, 300, 2000, 100_000])
    def test_growing_conversation(
        self, impl: _backend.Implementation, seed: int, conditions: list[str], budget: int
    ) -> None:
        count = message_token_counter()
        conversation = random_conversation(seed, 60)
        strategy = MemoryMaxTokensStrategy(memory_max_tokens=budget, conditions=conditions)
        window = MaxTokensWindow(strategy, count)
        rng = random.Random(seed)
        seen: list[Interaction] = []
        while len(seen) < len(conversation):
            step = rng.choice([1, 1, 1, 2, 7, 25])
            seen.extend(conversation[len(seen) : len(seen) + step])
            assert window.update(seen) == keep_max_tokens(strategy, seen, count)
            assert window.update(seen) == keep_max_tokens(strategy, seen, count)  # no news

    def test_kept_tokens_are_set(self) -> None:
        count = message_token_counter()
        conversation = random_conversation(1, 30)
        window = MaxTokensWindow(MemoryMaxTokensStrategy(conditions=CONDITIONS), count)
        kept = window.update(conversation)
        assert kept
        assert all(i.tokens == count(i.messages) for i in kept)

    def test_a_shorter_conversation_starts_again(self) -> None:
        count = message_token_counter()
        strategy = MemoryMaxTokensStrategy(memory_max_tokens=300, conditions=CONDITIONS)
        window = MaxTokensWindow(strategy, count)
        window.update(random_conversation(2, 40))
        other = random_conversation(3, 10)
        assert window.update(other) == keep_max_tokens(strategy, other, count)

    def test_age_conditions_are_not_windowed(self) -> None:
        strategy = MemoryMaxTokensStrategy(conditions=["interaction.age < 2"])
        assert not MaxTokensWindow.supports(strategy)
        with pytest.raises(ValueError, match=r"interaction\.age"):
            MaxTokensWindow(strategy, message_token_counter())


# ---------------------------------------------------------------------------- under memory


def tool_turn(i: int, *, long: bool) -> list[ModelMessage]:
    call = ToolCallPart("search", {"q": i}, tool_call_id=f"t{i}")
    result = ("a long page " * 200) if long else f"result {i}"
    return [
        ModelRequest(parts=[UserPromptPart(content=f"question {i}")]),
        ModelResponse(parts=[call]),
        ModelRequest(parts=[ToolReturnPart("search", result, tool_call_id=f"t{i}")]),
        ModelResponse(parts=[TextPart(content=f"answer {i} " + "word " * (i % 7) * 10)]),
    ]


def add(memory: ConversationMemory, cid: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        if i % 3 == 1:
            memory.add_turn(cid, f"question {i}", f"answer {i}", tool_turn(i, long=i % 2 == 0))
        else:
            memory.add_turn(cid, f"question {i}", f"answer {i} " + "word " * (i % 5) * 12)


def expected(memory: ConversationMemory, cid: str) -> list[ModelMessage]:
    """The history the strategies send, worked out afresh from the retained turns."""
    interactions = interactions_from_turns(memory.get_turns(cid))
    return apply_short_term(memory.short_term, interactions, message_token_counter())


def sent(memory: ConversationMemory, cid: str) -> list[ModelMessage]:
    """The history without its leading summary message, if there is one."""
    history = memory.get_message_history(cid)
    if memory.get_summary(cid) is not None:
        return history[1:]
    return history


def strategy() -> MemoryMaxTokensStrategy:
    return MemoryMaxTokensStrategy(memory_max_tokens=400, conditions=CONDITIONS)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path) -> Any:
    return None if request.param == "memory" else SQLiteStore(tmp_path / "s.sqlite3")


class TestUnderMemory:
    """ConversationMemory's window stays what a fresh walk keeps as its conversation changes."""

    def test_read_after_every_turn_and_after_many(self, store: Any) -> None:
        memory = ConversationMemory(short_term=strategy(), store=store)
        for i in range(30):
            add(memory, "c", i, 1)
            assert sent(memory, "c") == expected(memory, "c")
        add(memory, "c", 30, 40)  # many turns between two reads
        assert sent(memory, "c") == expected(memory, "c")
        tokens = memory.get_history_tokens("c")
        assert tokens == sum(message_token_counter()([m]) for m in sent(memory, "c"))

    def test_after_an_erasure(self, store: Any) -> None:
        memory = ConversationMemory(
            short_term=strategy(),
            long_term=NeuralyzerStrategy(interaction_threshold_qty=12, interaction_keep=3),
            store=store,
        )
        # Reads between uneven runs of turns: after an erasure the conversation may hold
        # more turns than at the last read, or fewer.
        turn = 0
        for step in [1, 1, 3, 1, 12, 2, 9, 14, 1, 5, 11, 13, 1, 1, 7]:
            add(memory, "c", turn, step)
            turn += step
            assert sent(memory, "c") == expected(memory, "c")
        assert memory.get_turns("c")[0].turn_id > 0  # erasures happened

    def test_after_a_summary(self, store: Any) -> None:
        memory = ConversationMemory(
            short_term=strategy(), max_tokens=600, summarizer=lambda turns: "so far", store=store
        )
        turn = 0
        for step in [1, 2, 1, 9, 3, 14, 1, 6, 11, 2, 13, 1]:
            add(memory, "c", turn, step)
            turn += step
            assert sent(memory, "c") == expected(memory, "c")
        assert memory.get_summary("c") == "so far"

    def test_after_clear_and_import(self, store: Any) -> None:
        memory = ConversationMemory(short_term=strategy(), store=store)
        add(memory, "c", 0, 20)
        before = sent(memory, "c")
        snapshot = memory.export_conversation("c")
        memory.clear("c")
        assert memory.get_message_history("c") == []
        add(memory, "c", 100, 4)  # the same turn ids, other turns
        assert sent(memory, "c") == expected(memory, "c")
        assert sent(memory, "c") != before
        memory.clear("c")
        memory.import_conversation(snapshot)
        assert sent(memory, "c") == before == expected(memory, "c")

    def test_with_chains(self, store: Any) -> None:
        memory = ConversationMemory(
            short_term=[strategy(), ToolResultClearing(keep_last=1)], store=store
        )
        other = ConversationMemory(
            short_term=[
                ToolResultClearing(keep_last=2),
                MemoryMaxTokensStrategy(memory_max_tokens=400),
            ],
            store=store,
        )
        for i in range(20):
            add(memory, "c", i, 1)
            add(other, "d", i, 1)
            assert sent(memory, "c") == expected(memory, "c")
            assert sent(other, "d") == expected(other, "d")


class TestTwoHosts:
    """A second memory on the same store sees the first one's turns and summaries."""

    def test_turns_and_summaries_of_another_host(self, tmp_path: Path) -> None:
        path = tmp_path / "shared.sqlite3"
        writer = ConversationMemory(
            short_term=strategy(),
            long_term=NeuralyzerStrategy(interaction_threshold_qty=15, interaction_keep=4),
            store=SQLiteStore(path),
        )
        reader = ConversationMemory(short_term=strategy(), store=SQLiteStore(path))
        add(writer, "c", 0, 5)
        assert sent(reader, "c") == expected(writer, "c")
        turn = 5
        for step in [1, 1, 12, 2, 1, 9, 13, 1, 3, 11, 1, 14, 2]:
            add(writer, "c", turn, step)
            turn += step
            assert sent(reader, "c") == expected(writer, "c") == sent(writer, "c")
        assert writer.get_turns("c")[0].turn_id > 0  # erasures happened
        assert [t.turn_id for t in reader.get_turns("c")] == [
            t.turn_id for t in writer.get_turns("c")
        ]
        add(reader, "c", 2000, 3)  # and the other way round
        assert sent(writer, "c") == expected(reader, "c") == sent(reader, "c")
