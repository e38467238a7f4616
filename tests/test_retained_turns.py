"""Retained turns that left the history are packed (issue 28: ≤ 1 KiB per retained turn): blocks
of records pickled together and compressed, read back exactly — texts, datetimes with their own
time zones, metadata, pins and frozen pydantic-ai messages — through every reader of a
conversation's records: turns, transcripts, snapshots, summaries, pins and eviction.
"""

from __future__ import annotations

import pickle
import random
import sys
import tracemalloc
from collections import deque
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from memlane import ConversationMemory, InMemoryStore, TokenEstimator, _backend
from memlane.conversation import retained_turns
from memlane.conversation.conversation_state import ConversationState, Record, new_ledger
from memlane.conversation.retained_turns import BLOCK, Codec, RetainedTurns
from memlane.messages import freeze_messages, unpack_messages
from memlane.types import ConversationTurn
from summary_models import CountingSummarizer

EXAMPLES = 40
WORDS = ["the", "invoice", "account", "pays", "on", "fridays", "and", "the", "user", "refunds"]
SMALL = 4  # records per block in the generated cases: several blocks from few records
CODECS = ["zstd", "zlib"]

ZONES: list[Any] = [
    None,
    UTC,
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-3), "BRT"),
    timezone(timedelta(seconds=-1, microseconds=7)),
    ZoneInfo("Europe/Paris"),
    ZoneInfo("America/New_York"),
]

texts = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="日本語の文字列中文字符한국어😀🎉👍🏽 abc\n", max_size=40),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
moments = st.builds(
    lambda at, zone, fold: at.replace(tzinfo=zone, fold=fold),
    # Naive bounds, as hypothesis asks; each moment gets its zone after.
    st.datetimes(
        min_value=datetime(1970, 1, 2),  # noqa: DTZ001
        max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    ),
    st.sampled_from(ZONES),
    st.sampled_from([0, 1]),
)


def run_messages(prompt: str, answer: str, at: datetime, tokens: int) -> list[ModelMessage]:
    """A turn as an agent run returns it: usage, model and provider names, a tool call."""
    return [
        ModelRequest(parts=[UserPromptPart(content=prompt, timestamp=at)], instructions=None),
        ModelResponse(
            parts=[
                TextPart(content=answer),
                ToolCallPart(tool_name="lookup", args={"q": prompt[:20]}, tool_call_id="c1"),
            ],
            usage=RequestUsage(input_tokens=tokens, output_tokens=tokens // 2 + 1),
            model_name="gpt-4o-2024-08-06",
            provider_name="openai",
            timestamp=at,
        ),
    ]


@st.composite
def records(draw: st.DrawFn, turn_id: int) -> Record:
    prompt, answer, at = draw(texts), draw(texts), draw(moments)
    tokens = draw(st.integers(0, 10**6))
    metadata = draw(st.none() | st.dictionaries(st.text(max_size=8), json_values, min_size=1))
    if draw(st.booleans()) and draw(st.booleans()):
        metadata = {**(metadata or {}), "pinned": True}
    kind = draw(st.sampled_from(["strings", "frozen", "json", "pickled"]))
    payload: Any = None
    if kind == "frozen":
        payload = freeze_messages(run_messages(prompt, answer, draw(moments), tokens))
    elif kind == "json":
        payload = '[{"kind": "request", "parts": []}]'
    elif kind == "pickled":  # freeze_messages' own fallback: a pickle in a 1-tuple
        payload = (pickle.dumps(run_messages(prompt, answer, at, tokens)),)
    return (turn_id, prompt, answer, tokens, at, metadata, payload)


def exact(value: Any) -> Any:
    """``value`` with what ``==`` overlooks made visible: a datetime's time zone and fold (aware
    datetimes compare as instants), every value's type, and ``...`` as itself."""
    if isinstance(value, datetime):
        return ("datetime", value.replace(tzinfo=None), repr(value.tzinfo), value.fold)
    if isinstance(value, tuple | list):
        return (type(value).__name__, [exact(item) for item in value])
    if isinstance(value, dict):
        return ("dict", [(exact(k), exact(v)) for k, v in value.items()])
    return (type(value).__name__, value)


def conversation(
    records_: list[Record], codec: Codec, budget: int = 10**9
) -> tuple[ConversationState, list[Record]]:
    """A state holding ``records_`` (their payloads as they are), every one out of the window."""
    state = ConversationState(new_ledger(budget))
    state.records = RetainedTurns(codec)
    for record in records_:
        state.append_record(record, "", None)
    state.records.settle(len(records_))
    return state, records_


class TestBlocksReadBackExactly:
    """Whatever a record holds comes back from its block as it went in, on both paths."""

    @pytest.mark.parametrize("codec", CODECS)
    @settings(max_examples=EXAMPLES, deadline=None)
    @given(data=st.data())
    def test_random_records(self, impl: _backend.Implementation, codec: str, data: Any) -> None:
        count = data.draw(st.integers(SMALL, 3 * SMALL + 2))
        given_records = [data.draw(records(i)) for i in range(count)]
        kept = RetainedTurns(Codec(codec), SMALL)
        for record in given_records:
            kept.append(record)
        kept.settle(count)
        assert kept.packed == count // SMALL * SMALL
        assert len(kept) == count
        assert exact(list(kept)) == exact(given_records)
        for i in data.draw(st.permutations(range(count))):
            assert exact(kept[i]) == exact(given_records[i])
            assert exact(kept[i - count]) == exact(given_records[i])

    @pytest.mark.parametrize("codec", CODECS)
    @settings(max_examples=EXAMPLES, deadline=None)
    @given(data=st.data())
    def test_frozen_messages_thaw_equal(
        self, impl: _backend.Implementation, codec: str, data: Any
    ) -> None:
        given_messages = [
            run_messages(data.draw(texts), data.draw(texts), data.draw(moments), i)
            for i in range(SMALL)
        ]
        kept = RetainedTurns(Codec(codec), SMALL)
        for i, messages in enumerate(given_messages):
            kept.append((i, "", "", 1, datetime.now(UTC), None, freeze_messages(messages)))
        kept.settle(SMALL)
        assert kept.packed == SMALL
        for i, messages in enumerate(given_messages):
            back = unpack_messages(kept[i][6])
            assert back == messages
            assert exact([vars(m) for m in back]) == exact([vars(m) for m in messages])


class TestADequeOfRecords:
    """Appending, reading, replacing and taking from the front act as on a deque."""

    @settings(max_examples=EXAMPLES, deadline=None)
    @given(ops=st.lists(st.tuples(st.sampled_from("aaasspr"), st.integers(0, 10**6)), max_size=80))
    def test_random_operations(self, ops: list[tuple[str, int]]) -> None:
        kept, plain = RetainedTurns(Codec("zlib"), SMALL), deque[Record]()
        at = datetime(2026, 1, 1, tzinfo=UTC)
        for n, (op, value) in enumerate(ops):
            if op == "a":
                record: Record = (n, f"prompt {n}", "answer " * (value % 7), value, at, None, None)
                kept.append(record)
                plain.append(record)
            elif op == "s":
                kept.settle(value % (len(plain) + 1))
            elif op == "p" and plain:
                assert kept.popleft() == plain.popleft()
            elif op == "r" and plain:
                i = value % len(plain)
                record = (*plain[i][:5], {"pinned": True}, plain[i][6])
                kept[i] = plain[i] = record
            assert len(kept) == len(plain)
        assert list(kept) == list(plain)
        assert [kept[i] for i in range(len(plain))] == list(plain)

    def test_out_of_range(self) -> None:
        kept = RetainedTurns()
        kept.append((0, "p", "a", 1, datetime.now(UTC), None, None))
        assert kept[-1] == kept[0]
        with pytest.raises(IndexError):
            kept[1]
        with pytest.raises(IndexError):
            kept[-2]

    def test_unknown_codec_is_named(self) -> None:
        with pytest.raises(ValueError, match="'lzma'"):
            Codec("lzma")


class TestWhatCannotBePackedStays:
    """A record pickle refuses, and a pinned one, stay beside their block as they are."""

    def test_unpicklable_and_pinned(self, impl: _backend.Implementation) -> None:
        class Local:  # pickle cannot name a class defined in a function
            pass

        odd = [Local()]
        at = datetime(2026, 1, 1, tzinfo=UTC)
        given_records: list[Record] = [
            (i, f"p{i}", f"a{i}", 1, at, {"pinned": True} if i == 5 else None, None)
            for i in range(BLOCK)
        ]
        given_records[9] = (9, "p9", "a9", 1, at, None, odd)
        state, _ = conversation(given_records, Codec("zstd"))
        assert state.records.packed == BLOCK
        assert state.records[9][6] is odd
        assert state.records[5] is given_records[5]
        assert list(state.records) == given_records


class TestAConversationOfThousandsOfTurns:
    """Thousands of turns through ConversationMemory read back equal, almost all packed."""

    @pytest.mark.parametrize("with_messages", [False, True])
    def test_read_back(self, impl: _backend.Implementation, with_messages: bool) -> None:
        memory = ConversationMemory(
            max_tokens=300, estimator=TokenEstimator(mode="heuristic"), store=InMemoryStore()
        )
        cid = memory.new_conversation()
        rng = random.Random(7)
        added: list[ConversationTurn] = []
        for i in range(2000):
            prompt = f"[{i}] " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 40)))
            answer = f"答え {i} 😀 " + " ".join(rng.choice(WORDS) for _ in range(30))
            messages = run_messages(prompt, answer, datetime.now(UTC), i) if with_messages else None
            meta = {"n": i, "tags": ["x", i]} if i % 11 == 0 else None
            added.append(memory.add_turn(cid, prompt, answer, messages, metadata=meta))
        state = memory._conversations.states[cid]
        assert state.records.packed >= 2000 - 2 * BLOCK - 30
        turns = memory.get_turns(cid)
        assert [t.model_dump() for t in turns] == [t.model_dump() for t in added]
        assert [t.raw_messages for t in turns] == [t.raw_messages for t in added]
        # A snapshot carries them out and into another memory exactly.
        other = ConversationMemory(max_tokens=300, estimator=TokenEstimator(mode="heuristic"))
        copy = other.import_conversation(memory.export_conversation(cid))
        assert [t.model_dump() for t in other.get_turns(copy)] == [t.model_dump() for t in added]
        assert other.get_message_history(copy) == memory.get_message_history(cid)


class TestPinsAndSummariesOverPackedTurns:
    """Pinning a packed turn, and summaries that evict packed turns, work as on plain ones."""

    def test_pin_a_packed_turn(self, impl: _backend.Implementation) -> None:
        memory = ConversationMemory(max_tokens=200, estimator=TokenEstimator(mode="heuristic"))
        cid = memory.new_conversation()
        for i in range(400):
            memory.add_turn(cid, f"[p{i:03d}] question", "answer " * 5)
        state = memory._conversations.states[cid]
        assert state.records.packed > 100
        pinned = memory.pin_turn(cid, 70)  # inside the second block
        assert pinned.metadata == {"pinned": True}
        assert "[p070]" in str(memory.get_message_history(cid))
        turns = memory.get_turns(cid)
        assert [t.turn_id for t in turns] == list(range(400))
        assert [t.metadata for t in turns if t.metadata] == [{"pinned": True}]
        assert [t.user_prompt for t in turns] == [f"[p{i:03d}] question" for i in range(400)]
        for i in range(400, 600):  # and the blocks after it still pack
            memory.add_turn(cid, f"[p{i:03d}] question", "answer " * 5)
        assert "[p070]" in str(memory.get_message_history(cid))
        assert memory.get_turns(cid)[70].metadata == {"pinned": True}

    def test_summaries_fold_packed_turns_in_order(self, impl: _backend.Implementation) -> None:
        summarizer = CountingSummarizer()
        memory = ConversationMemory(
            max_tokens=3000,
            summarize_threshold=2000,
            summarizer=summarizer,
            estimator=TokenEstimator(mode="heuristic"),
            retain_transcript=True,
        )
        cid = memory.new_conversation()
        memory.add_turn(cid, "[pin] keep this", "ok", pinned=True)
        for i in range(1, 1200):
            memory.add_turn(cid, f"[p{i:04d}]", "answer " * 10)
        assert summarizer.calls > 0
        folded = [t.user_prompt for call in summarizer.inputs for t in call if t.turn_id > 0]
        numbers = [int(p[2:6]) for p in folded if p.startswith("[p")]
        assert numbers == sorted(numbers)
        assert len(set(numbers)) == len(numbers)
        turns = memory.get_turns(cid)
        assert turns[0].user_prompt == "[pin] keep this"
        assert [t.user_prompt for t in turns[1:]] == [
            f"[p{i:04d}]" for i in range(turns[1].turn_id, 1200)
        ]
        transcript = memory.get_transcript(cid)
        assert [t.turn_id for t in transcript] == list(range(1200))
        assert "[pin] keep this" in str(memory.get_message_history(cid))


class TestBytesPerPackedTurn:
    """A packed turn costs far less than its text in CPython's string form (a size bound)."""

    @pytest.mark.parametrize("codec", CODECS)
    def test_bound(self, impl: _backend.Implementation, codec: str) -> None:
        rng = random.Random(3)
        mixed = [*WORDS, "日本語", "中文字符", "한국어", "😀", "déjà", "{'k': [1, 2]}"]
        state = ConversationState(new_ledger(2000))
        state.records = RetainedTurns(Codec(codec))
        at = datetime(2026, 1, 1, tzinfo=UTC)
        turns = 40 * BLOCK
        text_bytes = 0
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(turns):
                prompt = " ".join(rng.choice(mixed) for _ in range(60))
                answer = " ".join(rng.choice(mixed) for _ in range(200))
                text_bytes += sys.getsizeof(prompt) + sys.getsizeof(answer)
                state.append_record((i, prompt, answer, 300, at, None, None), "", None)
                del prompt, answer
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert state.records.packed >= turns - 2 * BLOCK
        # Packed, a turn keeps well under half its text (zstd and zlib: about a sixth here).
        assert (after - before) / turns < 0.4 * text_bytes / turns
        assert retained_turns.CODEC.name in CODECS
