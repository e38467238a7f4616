"""A turn's pydantic-ai messages: kept live while in the history, serialised only when needed.

On an in-memory store nothing serialises a turn's messages while it is in the history, and a
turn leaving it is frozen once; on a persistent store its JSON is made once, for the entry, and
kept when the turn leaves the history (nothing frozen).
What callers see is unchanged: histories and turns equal the messages given, and a caller's
later changes to its own list do not reach them. Operation counts, never wall-clock time.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_json

from memlane import (
    ConversationMemory,
    ConversationTurn,
    InMemoryStore,
    SQLiteStore,
    TokenEstimator,
)
from memlane import messages as messages_mod
from memlane import types as types_mod
from memlane.conversation import conversation_log as log_mod
from memlane.conversation import conversation_state as state_mod
from memlane.conversation.state import ConversationState, new_ledger
from memlane.errors import UnstorableValueError
from memlane.message_json import messages_json, turn_text
from memlane.stores import protocol, stored_values
from memlane.types import new_turn, turn_json

pytestmark = pytest.mark.usefixtures("impl")

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def turn_messages(i: int, words: int = 20) -> list[ModelMessage]:
    """A turn as an agent run returns it: usage, model and provider names included."""
    prompt = f"question {i} " + "word " * words
    return [
        ModelRequest(parts=[UserPromptPart(content=prompt, timestamp=AT)]),
        ModelResponse(
            parts=[TextPart(content=f"answer {i} " + "word " * words)],
            usage=RequestUsage(input_tokens=100 + i, output_tokens=20),
            model_name="gpt-4o-2024-08-06",
            provider_name="openai",
            timestamp=AT,
        ),
    ]


def texts(messages: list[ModelMessage]) -> tuple[str, str]:
    prompt, response = messages[0].parts[0], messages[1].parts[0]
    assert isinstance(prompt, UserPromptPart)
    assert isinstance(prompt.content, str)
    assert isinstance(response, TextPart)
    return prompt.content, response.content


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts every serialisation of messages memlane can make."""
    counts: Counter[str] = Counter()

    def counting(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    # pydantic-ai's adapter (what packed every turn before), the adapter a turn's
    # raw_messages are serialised with by the turn model's own serialiser, and what builds a
    # persistent store's entry.
    monkeypatch.setattr(
        ModelMessagesTypeAdapter,
        "dump_json",
        counting("dump_json", ModelMessagesTypeAdapter.dump_json),
    )
    adapter = types_mod._messages_adapter()
    monkeypatch.setattr(adapter, "dump_python", counting("json", adapter.dump_python))
    monkeypatch.setattr(types_mod, "messages_json", counting("json", messages_json))

    def writing(*args: Any) -> Any:  # the writer, when it wrote (None sends on to the above)
        written = turn_text(*args)
        counts["json"] += written is not None
        return written

    monkeypatch.setattr(types_mod, "turn_text", writing)
    monkeypatch.setattr(
        state_mod, "freeze_messages", counting("freeze", messages_mod.freeze_messages)
    )
    return counts


def in_memory(max_tokens: int = 4000) -> ConversationMemory:
    return ConversationMemory(
        max_tokens=max_tokens, estimator=TokenEstimator(mode="heuristic"), store=InMemoryStore()
    )


def test_in_memory_turns_in_the_history_are_never_serialised(calls: Counter[str]) -> None:
    memory = in_memory()
    cid = memory.new_conversation()
    given = [turn_messages(i) for i in range(5)]
    for messages in given:
        memory.add_turn(cid, *texts(messages), messages)
        memory.get_message_history(cid)
    assert memory.get_message_history(cid) == [m for turn in given for m in turn]
    assert [t.raw_messages for t in memory.get_turns(cid)] == given
    assert calls == Counter()


def test_in_memory_turn_is_frozen_once_when_it_leaves_the_history(calls: Counter[str]) -> None:
    memory = in_memory(max_tokens=200)  # about three turns fit
    cid = memory.new_conversation()
    given = [turn_messages(i) for i in range(30)]
    for messages in given:
        memory.add_turn(cid, *texts(messages), messages)
        memory.get_message_history(cid)
    state = memory._conversations.states[cid]
    left = state.first_in_history
    assert 20 < left < 30
    assert calls == Counter(freeze=left)  # no JSON at all
    # Frozen turns read back equal, as new objects; those in the history are the live ones.
    turns = memory.get_turns(cid)
    assert [t.raw_messages for t in turns] == given
    assert all(t.raw_messages[1] is not given[i][1] for i, t in enumerate(turns[:left]))
    history = memory.get_message_history(cid)
    assert history == [m for turn in given[left:] for m in turn]
    assert calls == Counter(freeze=left)  # reading freezes nothing more


def test_persistent_store_serialises_each_turn_once(tmp_path: Path, calls: Counter[str]) -> None:
    memory = ConversationMemory(
        max_tokens=200,
        estimator=TokenEstimator(mode="heuristic"),
        store=SQLiteStore(tmp_path / "m.db"),
    )
    cid = memory.new_conversation()
    given = [turn_messages(i) for i in range(12)]
    for messages in given:
        memory.add_turn(cid, *texts(messages), messages)
        memory.get_message_history(cid)
    left = memory._conversations.states[cid].first_in_history
    assert left > 0
    # The entry's JSON, once per turn; a turn leaving the window keeps it, so none is frozen.
    assert calls == Counter(json=len(given))
    state = memory._conversations.states[cid]
    assert all(type(state.records[i][6]) is bytes for i in range(len(given)))
    assert [t.raw_messages for t in memory.get_turns(cid)] == given
    memory.close()
    # What the store holds reads back equal, in another memory.
    again = ConversationMemory(max_tokens=200, store=SQLiteStore(tmp_path / "m.db"))
    assert [t.raw_messages for t in again.get_turns(cid)] == given
    again.close()


def test_later_changes_to_the_callers_list_do_not_reach_memlane() -> None:
    memory = in_memory(max_tokens=200)
    cid = memory.new_conversation()
    mine = turn_messages(0)
    expected = list(mine)
    memory.add_turn(cid, *texts(mine), mine)
    mine.append(ModelRequest(parts=[UserPromptPart(content="added later", timestamp=AT)]))
    mine.pop(0)
    assert memory.get_message_history(cid) == expected
    assert memory.get_turns(cid)[0].raw_messages == expected
    for i in range(1, 20):  # the turn leaves the history and is frozen as it was given
        memory.add_turn(cid, *texts(turn_messages(i)), turn_messages(i))
    assert memory._conversations.states[cid].first_in_history > 0
    assert memory.get_turns(cid)[0].raw_messages == expected


class Opaque:
    """Neither a dataclass the tuple form can hold nor a class pickle can name (see
    :func:`opaque`)."""

    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.x == self.x

    __hash__ = None  # type: ignore[assignment]  # unhashable: __eq__ is redefined


def opaque(x: int) -> Any:
    class Local(Opaque):  # pickle cannot name a class defined in a function
        pass

    return Local(x)


def tool_turn(value: object) -> list[ModelMessage]:
    """A turn whose response carries ``value`` where no text is counted from it."""
    return [
        ModelRequest(parts=[UserPromptPart(content="call it", timestamp=AT)]),
        ModelResponse(
            parts=[ToolCallPart(tool_name="f", args={"p": 1}, tool_call_id="c")],
            provider_details={"p": value},
            timestamp=AT,
        ),
    ]


def test_messages_that_cannot_be_frozen_nor_pickled_stay_live() -> None:
    memory = in_memory(max_tokens=200)
    cid = memory.new_conversation()
    odd = tool_turn(opaque(1))
    memory.add_turn(cid, "call it", "", odd)
    for i in range(20):
        memory.add_turn(cid, *texts(turn_messages(i)), turn_messages(i))
    state = memory._conversations.states[cid]
    assert state.first_in_history > 0
    assert state.records[0][6] == odd  # still the live list
    assert memory.get_turns(cid)[0].raw_messages == odd


def test_a_dataclass_of_the_callers_own_is_frozen_as_tuples() -> None:
    @dataclasses.dataclass
    class Local:  # pickle could not name it; the tuple form holds its class by index
        x: int

    memory = in_memory(max_tokens=200)
    cid = memory.new_conversation()
    odd = tool_turn(Local(1))
    memory.add_turn(cid, "call it", "", odd)
    for i in range(20):
        memory.add_turn(cid, *texts(turn_messages(i)), turn_messages(i))
    state = memory._conversations.states[cid]
    assert state.first_in_history > 0
    assert type(state.records[0][6]) is tuple
    back = memory.get_turns(cid)[0].raw_messages
    assert back == odd
    assert back[1].provider_details["p"] is not odd[1].provider_details["p"]  # type: ignore[union-attr,index]  # a ModelResponse with provider details, built above


def test_frozen_turns_come_back_when_the_window_grows() -> None:
    state = ConversationState(new_ledger(1000))
    memory = in_memory()
    cid = memory.new_conversation()
    given = [turn_messages(i) for i in range(6)]
    for messages in given:
        turn = memory.add_turn(cid, *texts(messages), messages)
        state.append(turn, "", default_messages=False)
    assert state.history() == [m for turn in given for m in turn]
    state.set_summary("s", 900, AT)  # a large summary pushes turns out: they are frozen
    assert state.window_from > 0
    assert all(isinstance(record[6], tuple) for record in list(state.records)[: state.window_from])
    state.set_summary("s", 1, AT)  # a small one lets them back in, decoded from the frozen form
    assert state.window_from == 0
    history = state.history()
    assert history[1:] == [m for turn in given for m in turn]
    assert [state.messages(i) for i in range(len(given))] == given


def test_freeze_round_trips_exact_objects() -> None:
    messages = turn_messages(3)
    frozen = messages_mod.freeze_messages(messages)
    assert isinstance(frozen, tuple)
    back = messages_mod.unpack_messages(frozen)
    assert back == messages
    assert back[0] is not messages[0]
    # JSON payloads (a turn read from the store) still decode.
    assert messages_mod.unpack_messages(ModelMessagesTypeAdapter.dump_json(messages)) == messages
    assert messages_mod.unpack_messages(messages) == messages


def _turns_to_store() -> list[ConversationTurn]:
    at = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    tool_call: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content="weather?", timestamp=at)]),
        ModelResponse(
            parts=[
                ToolCallPart(
                    tool_name="weather", args={"city": "Oslo", "days": [1, 2]}, tool_call_id="c1"
                )
            ],
            timestamp=at,
        ),
    ]
    image: list[ModelMessage] = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    content=["look", BinaryContent(data=b"\xff\x00ab", media_type="image/png")],
                    timestamp=at,
                )
            ]
        ),
        ModelResponse(parts=[TextPart(content="a cat")], timestamp=at),
    ]
    return [
        new_turn(  # given as strings: its messages are built when first read
            turn_id=0,
            user_prompt="hi",
            assistant_response="hello",
            timestamp=at,
            token_estimate=3,
            metadata={},
        ),
        new_turn(
            turn_id=1,
            user_prompt="q",
            assistant_response="a",
            raw_messages=turn_messages(1),
            timestamp=at,
            token_estimate=40,
            metadata={"user": "u1", "scores": [0.5, 1], "nested": {"ok": True, "none": None}},
        ),
        ConversationTurn(
            turn_id=2,
            user_prompt="weather?",
            assistant_response="",
            raw_messages=tool_call,
            timestamp=at,
            token_estimate=9,
            metadata={"when": at, "tags": ("a", "b")},
        ),
        ConversationTurn(
            turn_id=3,
            user_prompt="look",
            assistant_response="a cat",
            raw_messages=image,
            timestamp=at,
        ),
        ConversationTurn(
            turn_id=4, user_prompt="", assistant_response="summary", raw_messages=[], timestamp=at
        ),
    ]


@pytest.mark.parametrize("index", range(5))
def test_turn_json_is_model_dump(index: int) -> None:
    ours, theirs = _turns_to_store()[index], _turns_to_store()[index]
    got, want = turn_json(ours), theirs.model_dump(mode="json")
    assert got == want
    assert list(got) == list(want)
    assert json.dumps(got) == json.dumps(want)
    assert ours == theirs  # a turn given as strings has built its messages either way


def test_turn_entry_reads_back_as_the_turn(tmp_path: Path) -> None:
    turn = _turns_to_store()[1]
    entry = log_mod.turn_entry(turn, "e1", 0)
    assert entry.content == turn.model_dump(mode="json")
    assert ConversationTurn.model_validate(entry.content) == turn


class TestHistoryKeptFlat:
    """The history a read returns equals a walk of every turn in the window, whatever joined,
    left or came back: the flat list kept between reads is only a cache of that walk."""

    @staticmethod
    def walk(state: ConversationState) -> list[ModelMessage]:
        expected: list[ModelMessage] = []
        if state.summary is not None and state.ledger.reserved:
            expected.append(messages_mod.summary_message(state.summary, state.summary_at))
        first = state.window_from - int(state.ledger.offset)  # the window's first record
        for at, messages in enumerate(state.window):
            expected.extend(messages if messages is not None else state.messages(first + at))
        return expected

    @pytest.mark.parametrize("summarize", [False, True])
    def test_after_every_change(self, summarize: bool) -> None:
        lengths = iter([5, 200, 1, 60, 3] * 40)

        def summarizer(turns: list[ConversationTurn]) -> str:
            # Alternately long and short: a shorter summary gives the window room back.
            return "summary " + "word " * next(lengths)

        memory = ConversationMemory(
            max_tokens=400,
            summarizer=summarizer if summarize else None,
            summarize_threshold=250 if summarize else None,
        )
        for i in range(120):
            if i % 3:
                memory.add_turn("c", f"question {i} " + "w " * (i % 17), f"answer {i}")
            else:
                messages = turn_messages(i, words=i % 23)
                memory.add_turn("c", *texts(messages), messages)
            if i % 4 == 0:  # reads skip some turns: several join at once
                continue
            history = memory.get_message_history("c")
            assert history == self.walk(memory._conversations.states["c"])
            history.append(history[0])  # the caller's list is its own
            assert memory.get_message_history("c") == self.walk(memory._conversations.states["c"])
        if summarize:
            assert memory.get_summary("c") is not None

    def test_window_growing_back(self) -> None:
        """A smaller summary gives the window room for older retained turns again."""
        state = ConversationState(new_ledger(100))
        for i in range(12):
            state.append_record((i, f"q{i}", f"a{i}", 10, AT, None, None), f"e{i}", None)
        state.set_summary("short", 5, AT)
        assert state.history() == self.walk(state)
        state.set_summary("long " * 40, 60, AT)  # the window shrinks from the start
        assert state.history() == self.walk(state)
        state.set_summary("short again", 5, AT)  # and grows back
        grown = state.history()
        assert grown == self.walk(state)
        assert len(grown) > 2 * 4  # more turns than fitted beside the long summary
        state.append_record((12, "q12", "a12", 10, AT, None, None), "e12", None)
        assert state.history() == self.walk(state)


class TestCheckedJson:
    """A turn without metadata is JSON memlane built itself: stores encode it once, with
    pydantic's serialiser, without walking it for the value rule again. What they store and
    read back is unchanged, and a turn carrying caller values is checked as before."""

    @pytest.mark.parametrize("index", range(5))
    def test_only_a_turn_without_metadata_is_checked_json(self, index: int) -> None:
        turn = _turns_to_store()[index]
        got = turn_json(turn)
        assert isinstance(got, types_mod.CheckedJson) == (not turn.metadata)
        assert got == turn.model_dump(mode="json")

    @pytest.mark.parametrize("index", range(5))
    def test_its_text_is_made_with_it(self, index: int) -> None:
        """The text a store writes is what encoding the object gives, messages spliced in."""
        turn = _turns_to_store()[index]
        got = turn_json(turn)
        if turn.metadata:
            assert type(got) is dict
            return
        assert isinstance(got, types_mod.TurnJson)
        assert got.text == to_json(dict(got)).decode()
        assert got.messages == to_json(got["raw_messages"])
        assert protocol.dumps_json(got, key="k", field="content") == got.text
        assert json.loads(got.text) == turn.model_dump(mode="json")

    def test_text_of_awkward_strings(self) -> None:
        turn = new_turn(
            turn_id=7,
            user_prompt='"raw_messages":[] \\" ☃ \n\u0000',
            assistant_response="}{,",
            raw_messages=turn_messages(2),
            timestamp=AT,
            token_estimate=0,
            metadata={},
        )
        got = turn_json(turn)
        assert isinstance(got, types_mod.TurnJson)
        assert got.text == to_json(dict(got)).decode()
        assert json.loads(got.text) == turn.model_dump(mode="json")

    def test_a_lone_surrogate_leaves_no_text(self) -> None:
        turn = new_turn(
            turn_id=0,
            user_prompt="bad \udc80",
            assistant_response="a",
            timestamp=AT,
            token_estimate=0,
            metadata={},
        )
        got = turn_json(turn)
        assert isinstance(got, types_mod.TurnJson)
        assert got.text is None
        assert got.messages is None

    @pytest.mark.parametrize("index", range(5))
    def test_its_text_reads_back_as_json_dumps_does(self, index: int) -> None:
        got = turn_json(_turns_to_store()[index])
        text = protocol.dumps_json(got, key="k", field="content")
        assert json.loads(text) == json.loads(json.dumps(got))

    def test_it_is_not_walked(self, monkeypatch: pytest.MonkeyPatch) -> None:
        walked: list[object] = []
        real = stored_values._is_plain_json

        def counting(value: object) -> bool:
            walked.append(value)
            return real(value)

        monkeypatch.setattr(stored_values, "_is_plain_json", counting)
        checked = turn_json(_turns_to_store()[0])
        protocol.dumps_json(checked, key="k", field="content")
        assert protocol.find_unstorable(checked, "content") is None
        assert walked == []
        protocol.dumps_json(dict(checked), key="k", field="content")
        assert len(walked) == 1

    def test_a_lone_surrogate_fails_as_before_and_stores_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "t.sqlite3"
        memory = ConversationMemory(store=SQLiteStore(path))
        cid = memory.new_conversation()
        memory.add_turn(cid, "fine", "ok")
        with pytest.raises(UnicodeEncodeError):
            memory.add_turn(cid, "bad \udc80", "ok")
        again = ConversationMemory(store=SQLiteStore(path))
        assert [t.user_prompt for t in again.get_turns(cid)] == ["fine"]

    def test_metadata_is_still_checked(self, tmp_path: Path) -> None:
        memory = ConversationMemory(store=SQLiteStore(tmp_path / "t.sqlite3"))
        cid = memory.new_conversation()
        with pytest.raises(UnstorableValueError, match=r"(?i)nan"):
            memory.add_turn(cid, "q", "a", metadata={"score": float("nan")})
        assert memory.get_turns(cid) == []

    def test_a_persistent_turn_round_trips(self, tmp_path: Path) -> None:
        path = tmp_path / "t.sqlite3"
        memory = ConversationMemory(store=SQLiteStore(path))
        cid = memory.new_conversation()
        memory.add_turn(cid, 'q ☃ "quoted" \\ \n', "a", turn_messages(3))
        memory.add_turn(cid, "plain", "answer")
        again = ConversationMemory(store=SQLiteStore(path))
        assert again.get_turns(cid) == memory.get_turns(cid)
        assert again.get_message_history(cid) == memory.get_message_history(cid)
