"""The messages' JSON form built without pydantic equals pydantic-ai's own dump, byte for byte.

``messages_json`` writes the message kinds memlane knows itself and hands everything else to
``ModelMessagesTypeAdapter``; either way its result is the adapter's ``dump_python(mode="json")``,
compared here as JSON text so that key order and ``0`` against ``0.0`` count.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_json

from memlane import message_json

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
ZONES = [
    AT,
    AT.replace(microsecond=0),
    AT.astimezone(timezone(timedelta(hours=5, minutes=30))),
    AT.astimezone(timezone(timedelta(hours=-7))),
    AT.astimezone(timezone(timedelta(seconds=17))),
    AT.replace(tzinfo=None),
]


def pydantic_dump(messages: list[ModelMessage]) -> bytes:
    return to_json(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def assert_same(messages: list[ModelMessage]) -> None:
    """Twice: the first call may check the classes against pydantic, the second is the fast
    path (or the fallback) alone."""
    for _ in range(2):
        assert to_json(message_json.messages_json(messages)) == pydantic_dump(messages)


def retry_prompt(content: Any) -> RetryPromptPart:
    with warnings.catch_warnings():  # deprecated in pydantic-ai, still found in stored histories
        warnings.simplefilter("ignore")
        return RetryPromptPart(content=content, tool_name="t", tool_call_id="c", timestamp=AT)


def request_parts() -> Iterator[Any]:
    for at in ZONES:
        yield UserPromptPart(content="hello", timestamp=at)
        yield SystemPromptPart(content="be brief", timestamp=at)
        yield ToolReturnPart(tool_name="t", content="sunny", tool_call_id="c1", timestamp=at)
    yield UserPromptPart(content=["look", ImageUrl(url="https://example.com/a.png")], timestamp=AT)
    yield UserPromptPart(
        content=["raw", BinaryContent(data=b"\xff\x00", media_type="image/png")], timestamp=AT
    )
    # Each with its tool_call_id given: the default is a random id, and the parts' reprs are
    # the tests' ids, which every pytest-xdist worker must collect the same.
    tool = partial(ToolReturnPart, tool_name="t", tool_call_id="c2", timestamp=AT)
    yield tool(content={"temp": 21.5, "ok": True})
    yield tool(content=[1, "two", None])
    yield tool(content=3, metadata={"at": AT, "n": 1})
    yield tool(content="x", metadata=("a", "b"))
    yield tool(content="x", retry=RetryInfo("model_retry", attempt=1))
    yield retry_prompt("try again")
    yield retry_prompt([{"type": "missing", "loc": ("a",), "msg": "Field required", "input": {}}])
    yield RetryFeedbackPart(content="again", retry=RetryInfo("validation_error"), timestamp=AT)


def response_parts() -> Iterator[Any]:
    yield TextPart(content="hi")
    yield TextPart(content="hi", id="t1", provider_name="openai", provider_details={"a": [1, 2.5]})
    yield ThinkingPart(content="hmm", signature="sig", provider_details={"effort": "high"})
    yield ToolCallPart(tool_name="weather", args={"city": "Oslo", "days": [1, 2]}, tool_call_id="c")
    yield ToolCallPart(tool_name="weather", args='{"city": "Oslo"}', tool_call_id="c")
    yield ToolCallPart(tool_name="noargs", tool_call_id="c")
    yield ToolCallPart(tool_name="t", args={"pair": (1, 2)}, tool_call_id="c")
    yield NativeToolCallPart(tool_name="web_search", args={"q": "x"}, tool_call_id="c")
    yield FilePart(content=BinaryContent(data=b"\x89PNG", media_type="image/png"))
    yield TextPart(content="nan", provider_details={"score": float("nan")})
    yield TextPart(content="inf", provider_details={"score": float("inf")})


def usages() -> Iterator[RequestUsage]:
    yield RequestUsage()
    yield RequestUsage(input_tokens=1000, output_tokens=200)
    yield RequestUsage(input_tokens=1, cache_read_tokens=2, details={"reasoning_tokens": 3})
    yield RequestUsage(audio_seconds=1.5)
    yield RequestUsage(audio_seconds=2)  # an int where pydantic writes a float
    yield RequestUsage(unmeasured_requests=1)
    yield RequestUsage(cost=Decimal("0.25"))
    extra = RequestUsage(input_tokens=1)
    extra.custom_count = 7  # type: ignore[attr-defined]  # pydantic-ai serializes extra usage fields
    yield extra


class TestEveryKindMatchesPydantic:
    """Every part kind, usage and timestamp zone: the same JSON as pydantic-ai's adapter."""

    @pytest.mark.parametrize("part", list(request_parts()), ids=repr)
    def test_request_parts(self, part: Any) -> None:
        assert_same([ModelRequest(parts=[part])])
        assert_same([ModelRequest(parts=[part], timestamp=AT, instructions="x", run_id="r")])

    @pytest.mark.parametrize("part", list(response_parts()), ids=repr)
    def test_response_parts(self, part: Any) -> None:
        assert_same([ModelResponse(parts=[part], timestamp=AT)])

    @pytest.mark.parametrize("usage", list(usages()), ids=repr)
    def test_usage(self, usage: RequestUsage) -> None:
        assert_same([ModelResponse(parts=[TextPart(content="a")], usage=usage, timestamp=AT)])

    @pytest.mark.parametrize("at", ZONES, ids=str)
    def test_response_fields(self, at: datetime) -> None:
        response = ModelResponse(
            parts=[TextPart(content="a"), ToolCallPart(tool_name="t", args={}, tool_call_id="c")],
            usage=RequestUsage(input_tokens=3, output_tokens=4),
            model_name="gpt-4o",
            timestamp=at,
            provider_name="openai",
            provider_details={"finish": "stop", "nested": {"list": [1, None, True]}},
            provider_response_id="resp_1",
            finish_reason="stop",
            run_id="run",
            metadata={"k": "v"},
        )
        assert_same([ModelRequest(parts=[UserPromptPart(content="q", timestamp=at)]), response])

    def test_a_whole_agent_turn(self) -> None:
        assert_same(
            [
                ModelRequest(parts=[UserPromptPart(content="weather?", timestamp=AT)]),
                ModelResponse(
                    parts=[ToolCallPart(tool_name="w", args={"c": "Oslo"}, tool_call_id="c")],
                    usage=RequestUsage(input_tokens=10, output_tokens=2),
                    timestamp=AT,
                ),
                ModelRequest(parts=[ToolReturnPart(tool_name="w", content="sun", timestamp=AT)]),
                ModelResponse(parts=[TextPart(content="Sunny.")], timestamp=AT),
            ]
        )

    def test_empty(self) -> None:
        assert_same([])
        assert_same([ModelRequest(parts=[]), ModelResponse(parts=[], timestamp=AT)])


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.datetimes(timezones=st.none() | st.timezones()),
    lambda inner: st.lists(inner, max_size=3)
    | st.tuples(inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(
    prompt=st.text(),
    answer=st.text(),
    details=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    args=st.none() | st.text() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    metadata=json_values,
    at=st.datetimes(timezones=st.none() | st.timezones()),
    tokens=st.integers(min_value=0, max_value=2**40),
)
def test_generated_messages_match_pydantic(
    prompt: str,
    answer: str,
    details: dict[str, Any] | None,
    args: str | dict[str, Any] | None,
    metadata: Any,
    at: datetime,
    tokens: int,
) -> None:
    assert_same(
        [
            ModelRequest(parts=[UserPromptPart(content=prompt, timestamp=at)]),
            ModelResponse(
                parts=[
                    TextPart(content=answer, provider_details=details),
                    ToolCallPart(tool_name="t", args=args, tool_call_id="c"),
                ],
                usage=RequestUsage(input_tokens=tokens, output_tokens=1),
                timestamp=at,
            ),
            ModelRequest(parts=[ToolReturnPart(tool_name="t", content=answer, metadata=metadata)]),
        ]
    )


class TestTheFastPathIsTaken:
    """Known kinds skip pydantic once checked; a class that does not match is left to it."""

    def test_known_kinds_skip_pydantic(self, monkeypatch: pytest.MonkeyPatch) -> None:
        messages: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(content="q", timestamp=AT)]),
            ModelResponse(
                parts=[TextPart(content="a")],
                usage=RequestUsage(input_tokens=1, output_tokens=2),
                timestamp=AT,
            ),
        ]
        message_json.messages_json(messages)  # checks the classes, if no test did before
        slow: list[object] = []

        def counted(m: list[ModelMessage]) -> list[Any]:
            slow.append(m)
            return []

        monkeypatch.setattr(message_json, "_slow", counted)
        fast = message_json.messages_json(messages)
        assert slow == []
        assert to_json(fast) == pydantic_dump(messages)

    def test_a_class_written_differently_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        specs = dict(message_json._candidates())
        spec = specs[TextPart]
        specs[TextPart] = spec._replace(names=tuple(reversed(spec.names)))  # a wrong order
        monkeypatch.setattr(message_json, "_verified", {})
        monkeypatch.setattr(message_json, "_refused", set())
        monkeypatch.setattr(message_json, "_candidates", lambda: specs)
        messages: list[ModelMessage] = [ModelResponse(parts=[TextPart(content="a")], timestamp=AT)]
        assert_same(messages)  # pydantic's form, both times
        assert TextPart in message_json._refused
        assert TextPart not in message_json._verified
