"""Facts extracted from turns as they leave a conversation's history, off the request path.

The model is pydantic-ai's offline ``FunctionModel``: it reads the turns it is given and
answers with the facts they state, so the tests can check which turns it saw, and when.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memlane import LongTermMemory, MemoryManager, SQLiteStore
from memlane._backend import Implementation
from memlane.conversation import ConversationMemory
from memlane.longterm import FactExtractor
from memlane.types import ConversationTurn

STATED = re.compile(r"my (\w+) is (\w+)")


class Reader:
    """Answers with one fact per ``my <key> is <value>`` in the turns; records what it read."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        text = "\n".join(str(getattr(part, "content", "")) for part in request.parts)
        self.seen.extend(re.findall(r"\[turn (\d+)\]", text))
        facts = [
            {
                "key": f"user_{key}",
                "value": value,
                "fact_type": "user_preference",
                "confidence": 0.9,
            }
            for key, value in STATED.findall(text)
        ]
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"response": facts})])


def add(memory: ConversationMemory, count: int, cid: str = "c", first: int = 0) -> None:
    for i in range(first, first + count):
        said = "my colour is teal" if i == 0 else f"more words about the weather {i}"
        memory.add_turn(cid, f"turn {i}: {said}", "noted, thanks for telling me")


def seen_once(reader: Reader) -> list[int]:
    turns = [int(t) for t in reader.seen]
    assert len(turns) == len(set(turns)), f"a turn was extracted twice: {sorted(turns)}"
    return sorted(turns)


@pytest.fixture
def reader(impl: Implementation) -> Reader:
    return Reader()


def memory_with(reader: Reader, **options: Any) -> ConversationMemory:
    return ConversationMemory(
        fact_extractor=FactExtractor.from_config(FunctionModel(reader)),
        long_term=options.pop("long_term", None) or LongTermMemory(),
        **{"max_tokens": 60, **options},
    )


class TestTurnsLeavingTheWindow:
    def test_a_departed_turn_is_extracted_once_and_its_fact_remembered(
        self, reader: Reader
    ) -> None:
        memory = memory_with(reader)
        add(memory, 8)
        memory.flush()
        first = memory.get_turns("c")[0].turn_id  # every turn still kept in full ...
        history_from = len(memory.get_turns("c")) - len(memory.get_message_history("c")) // 2
        departed = seen_once(reader)
        assert first == 0
        assert departed == list(range(history_from))  # ... went once it left
        fact = memory.long_term.get_fact("user_colour")
        assert fact is not None
        assert fact.value == "teal"

    def test_turns_still_in_the_history_are_not_extracted(self, reader: Reader) -> None:
        memory = memory_with(reader, max_tokens=10_000)
        add(memory, 5)
        memory.flush()
        assert reader.seen == []
        assert memory.long_term.get_fact("user_colour") is None

    def test_turns_folded_into_a_summary_are_extracted(self, reader: Reader) -> None:
        memory = memory_with(
            reader,
            max_tokens=10_000,  # nothing leaves the window: only the summary takes turns
            summarize_threshold=40,
            summarizer=lambda turns: "earlier turns",
        )
        add(memory, 8)
        memory.flush()
        assert memory.get_summary("c") == "earlier turns"
        assert seen_once(reader) == list(range(memory.get_turns("c")[0].turn_id))
        assert memory.long_term.get_fact("user_colour") is not None

    async def test_async_callers_extract_on_their_loop(self, reader: Reader) -> None:
        memory = memory_with(reader)
        for i in range(8):
            await memory.async_add_turn("c", f"turn {i}: my pet is cat", "noted")
        await memory.async_flush()
        assert seen_once(reader)
        assert (await memory.long_term.async_get_fact("user_pet")).value == "cat"

    def test_a_failing_extractor_is_a_warning_and_loses_no_turn(
        self, impl: Implementation, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise RuntimeError("model down")

        memory = ConversationMemory(
            max_tokens=60,
            fact_extractor=FactExtractor.from_config(FunctionModel(broken)),
            long_term=LongTermMemory(),
        )
        with caplog.at_level(logging.WARNING, logger="memlane"):
            add(memory, 8)
            memory.flush()
        assert [t.turn_id for t in memory.get_turns("c")] == list(range(8))
        assert any("fact extraction" in r.getMessage() for r in caplog.records)


class TestTheEndOfAnEpisode:
    """extract_facts hands the turns the extractor has not seen, kept ones included, once."""

    def test_kept_turns_go_once(self, reader: Reader) -> None:
        memory = memory_with(reader, max_tokens=10_000)
        add(memory, 3)
        memory.extract_facts("c")
        memory.flush()
        assert seen_once(reader) == [0, 1, 2]
        assert memory.long_term.get_fact("user_colour").value == "teal"
        add(memory, 2, first=3)
        memory.extract_facts("c")
        memory.flush()
        assert seen_once(reader) == [0, 1, 2, 3, 4]  # only the new ones went the second time
        memory.extract_facts("c")  # nothing new: no job
        memory.flush()
        assert seen_once(reader) == [0, 1, 2, 3, 4]

    async def test_async(self, reader: Reader) -> None:
        memory = memory_with(reader, max_tokens=10_000)
        await memory.async_add_turn("c", "turn 0: my pet is cat", "noted")
        await memory.async_extract_facts("c")
        await memory.async_flush()
        assert (await memory.long_term.async_get_fact("user_pet")).value == "cat"

    def test_needs_an_extractor_and_a_known_conversation(self, reader: Reader) -> None:
        with pytest.raises(ValueError, match="fact_extractor"):
            ConversationMemory().extract_facts("c")
        with pytest.raises(KeyError, match="nope"):
            memory_with(reader).extract_facts("nope")

    def test_a_memory_agent_recording_episodes_extracts_at_their_end(self, reader: Reader) -> None:
        from memlane.agents import MemoryAgent

        manager = MemoryManager(
            max_conversation_tokens=10_000,
            fact_extractor=FactExtractor.from_config(FunctionModel(reader)),
            fact_scope="user",
            fact_scope_id="ada",
        )

        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[TextPart("noted")])

        agent = MemoryAgent(
            FunctionModel(answer),
            memory=manager,
            long_term=True,
            user_id="ada",
            record_episodes=True,
        )
        agent.run_sync("[turn 0] my city is Adelaide", conversation_id="c")
        manager.flush()
        assert manager.long_term is not None
        city = manager.long_term.get_fact("user_city", user_id="ada")
        assert city is not None
        assert city.value == "Adelaide"
        silent = MemoryAgent(FunctionModel(answer), memory=manager, long_term=True, user_id="ada")
        silent.run_sync("[turn 1] my dog is Rex", conversation_id="d")
        manager.flush()
        assert manager.long_term.get_fact("user_dog", user_id="ada") is None


class TestManager:
    def test_an_extractor_turns_long_term_memory_on(self, reader: Reader, tmp_path: Path) -> None:
        manager = MemoryManager(
            store=SQLiteStore(tmp_path / "m.db"),
            max_conversation_tokens=60,
            fact_extractor=FactExtractor.from_config(FunctionModel(reader)),
            fact_scope="user",
            fact_scope_id="ada",
        )
        assert manager.long_term is not None
        add(manager.conversation, 8)
        manager.flush()
        fact = manager.long_term.get_fact("user_colour", user_id="ada")
        assert fact is not None
        assert fact.scope.value == "user"
        assert manager.long_term.get_fact("user_colour") is None  # seen from the user only
        restarted = LongTermMemory(SQLiteStore(tmp_path / "m.db"))
        assert restarted.get_fact("user_colour", user_id="ada") == fact
        manager.close()


class TestArguments:
    def test_an_extractor_needs_long_term_memory(self, impl: Implementation) -> None:
        extractor = FactExtractor.from_config(FunctionModel(Reader()))
        with pytest.raises(ValueError, match="long_term"):
            ConversationMemory(fact_extractor=extractor)

    def test_something_else_is_refused(self, impl: Implementation) -> None:
        with pytest.raises(TypeError, match=r"FactExtractor\.from_config"):
            ConversationMemory(fact_extractor=lambda turns: [], long_term=LongTermMemory())

    def test_the_scope_is_checked_up_front(self, impl: Implementation) -> None:
        extractor = FactExtractor.from_config(FunctionModel(Reader()))
        with pytest.raises(ValueError, match="scope_id"):
            ConversationMemory(
                fact_extractor=extractor, long_term=LongTermMemory(), fact_scope="user"
            )


def test_the_turns_given_are_conversation_turns(reader: Reader) -> None:
    given: list[list[ConversationTurn]] = []
    extractor = FactExtractor.from_config(FunctionModel(reader))
    apply = extractor.apply

    def spy(long_term: Any, turns: list[ConversationTurn], **kwargs: Any) -> Any:
        given.append(turns)
        return apply(long_term, turns, **kwargs)

    extractor.apply = spy  # type: ignore[method-assign,assignment]
    memory = ConversationMemory(max_tokens=60, fact_extractor=extractor, long_term=LongTermMemory())
    add(memory, 8)
    memory.flush()
    assert given
    assert all(isinstance(t, ConversationTurn) for batch in given for t in batch)
