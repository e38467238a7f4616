"""The Rust turn writer against its pure-Python twin, and both against pydantic-ai's own JSON.

``write_turn`` writes a turn's messages only for the classes Python has checked against
pydantic; on anything it does not take for certain it returns ``None`` and ``turn_json`` asks
pydantic. Here both writers get the same generated messages (every part kind the specs list,
strings with control characters, quotes, non-ASCII, astral characters and lone surrogates,
edge floats, big ints, nested arguments, datetimes in every zone form, extra attributes,
subclasses): they must agree on whether to write, and on every byte when they do, and what
they write must be pydantic-ai's ``dump_json``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_json

from conftest import require_rust_core
from memlane import _backend, message_json
from memlane._backend import BackendName
from memlane._pure import message_json as twin
from memlane.types import ConversationTurn, TurnJson, turn_json

pytestmark = pytest.mark.twins

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


class Str(str):
    """A subclass of a builtin: pydantic may write it otherwise, so neither writer does."""

    __slots__ = ()


class Part(TextPart):
    """A subclass of a checked class: not checked itself."""


def check_every_class() -> None:
    """Meets every class the specs list once, so both writers write them."""
    message_json.messages_json(
        [
            ModelRequest(
                parts=[
                    UserPromptPart(content="q", timestamp=AT),
                    SystemPromptPart(content="s", timestamp=AT),
                    ToolReturnPart(tool_name="t", content="r", tool_call_id="c", timestamp=AT),
                ],
                timestamp=AT,
            ),
            ModelResponse(
                parts=[
                    TextPart(content="a"),
                    ThinkingPart(content="h"),
                    ToolCallPart(tool_name="t", args={"a": 1}, tool_call_id="c"),
                ],
                usage=RequestUsage(input_tokens=1),
                timestamp=AT,
            ),
        ]
    )
    assert set(message_json._verified) == set(message_json._candidates())


characters = st.characters(exclude_categories=()) | st.sampled_from(
    ['"', "\\", "\x00", "\x1f", "\x7f", "\u2028", "é", "😀", "\ud800", "\udfff"]
)
texts = st.text(characters, max_size=12) | st.builds(Str, st.text(max_size=3))
floats = st.floats() | st.sampled_from([-0.0, 0.0, 1.0, 1e16, 1e-7, 1e-5, 1e15, 5e-324, 1e308])
ints = st.integers() | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30])
zones = st.sampled_from(
    [
        None,
        UTC,
        timezone(timedelta(hours=5, minutes=30)),
        timezone(timedelta(hours=-7)),
        timezone(timedelta(seconds=17)),
        timezone(timedelta(hours=-1, seconds=-1)),
    ]
)
datetimes = st.datetimes(timezones=zones | st.timezones())
leaves = st.none() | st.booleans() | ints | floats | texts | datetimes
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3)
    | st.tuples(inner)
    | st.dictionaries(texts, inner, max_size=3)
    | st.dictionaries(st.integers(), inner, min_size=1, max_size=1),
    max_leaves=8,
)
details = st.none() | st.dictionaries(texts, json_values, max_size=3)


def with_extra(part: Any, extra: bool) -> Any:
    if extra:
        part.unexpected = 1  # an attribute pydantic-ai may serialize too
    return part


request_parts: st.SearchStrategy[Any] = st.one_of(
    st.builds(UserPromptPart, content=texts, timestamp=datetimes),
    st.builds(SystemPromptPart, content=texts, timestamp=datetimes),
    st.builds(
        ToolReturnPart,
        tool_name=texts,
        content=texts | ints | floats | st.none() | json_values,
        tool_call_id=texts,
        metadata=json_values,
        timestamp=datetimes,
    ),
)
response_parts: st.SearchStrategy[Any] = st.one_of(
    st.builds(TextPart, content=texts, id=st.none() | texts, provider_details=details),
    st.builds(Part, content=texts),
    st.builds(ThinkingPart, content=texts, signature=st.none() | texts, provider_details=details),
    st.builds(
        ToolCallPart,
        tool_name=texts,
        args=st.none() | texts | st.dictionaries(texts, json_values, max_size=3),
        tool_call_id=texts,
    ),
)
usages = st.builds(
    RequestUsage,
    input_tokens=ints,
    output_tokens=st.integers(min_value=0, max_value=10**6),
    audio_seconds=st.none() | floats | ints | st.booleans(),
    details=st.dictionaries(texts, ints, max_size=2),
    unmeasured_requests=st.sampled_from([0, 0, 1]),
)
messages = st.lists(
    st.one_of(
        st.builds(
            ModelRequest,
            parts=st.lists(st.builds(with_extra, request_parts, st.booleans()), max_size=3),
            timestamp=st.none() | datetimes,
            instructions=st.none() | texts,
            run_id=st.none() | texts,
        ),
        st.builds(
            ModelResponse,
            parts=st.lists(response_parts, max_size=3),
            usage=usages,
            model_name=st.none() | texts,
            timestamp=datetimes,
            provider_details=details,
            finish_reason=st.none() | st.just("stop"),
        ),
    ),
    max_size=3,
)


@given(
    messages=messages,
    turn_id=st.integers(min_value=0, max_value=2**70),
    prompt=texts,
    answer=texts,
    timestamp=texts,
    tokens=st.integers(min_value=0, max_value=2**70),
)
def test_rust_writes_what_the_twin_writes(
    messages: list[Any], turn_id: int, prompt: str, answer: str, timestamp: str, tokens: int
) -> None:
    core = require_rust_core()
    check_every_class()
    known = message_json._verified
    args = (messages, known, turn_id, prompt, answer, timestamp, tokens)
    written = core.write_turn(*args)
    assert written == twin.write_turn(*args)
    event("written" if written is not None else "left to pydantic")
    if written is None:
        return
    raw, encoded, text = written
    expected = ModelMessagesTypeAdapter.dump_json(messages)
    assert encoded == expected
    assert to_json(raw) == expected
    assert raw == ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    head = {"turn_id": turn_id, "user_prompt": prompt, "assistant_response": answer}
    tail = {"timestamp": timestamp, "token_estimate": tokens, "metadata": {}}
    assert text.encode() == to_json({**head, "raw_messages": raw, **tail})


@given(value=floats)
def test_floats_are_written_as_pydantic_writes_them(value: float) -> None:
    core = require_rust_core()
    check_every_class()
    response = ModelResponse(
        parts=[ToolCallPart(tool_name="t", args={"x": value}, tool_call_id="c")], timestamp=AT
    )
    written = core.write_turn([response], message_json._verified, 1, "", "", "", 0)
    if not math.isfinite(value):
        assert written is None
        return
    assert written is not None
    assert written[1] == ModelMessagesTypeAdapter.dump_json([response])


class TestTurnJsonTakesTheWriter:
    """``turn_json`` returns the writer's text once the classes are checked, and the same
    text either way."""

    @pytest.mark.parametrize("name", ["rust", "python"])
    def test_same_turn_json(self, name: BackendName) -> None:
        require_rust_core()
        check_every_class()
        turn = ConversationTurn(
            turn_id=3,
            user_prompt="q\n",
            assistant_response="a é",
            raw_messages=[
                ModelRequest(parts=[UserPromptPart(content="q\n", timestamp=AT)]),
                ModelResponse(
                    parts=[TextPart(content="a é")],
                    usage=RequestUsage(input_tokens=1000, output_tokens=200, audio_seconds=2),
                    model_name="m",
                    timestamp=AT,
                ),
            ],
            timestamp=AT,
            token_estimate=10,
        )
        with _backend.use(name):
            made = turn_json(turn)
        assert type(made) is TurnJson
        assert made == turn.model_dump(mode="json")
        assert made.messages == ModelMessagesTypeAdapter.dump_json(turn.raw_messages)
        assert made.text is not None
        assert made.text.encode() == to_json(turn.model_dump(mode="json"))
