"""The compact form of a turn that left the history, the messages of a string turn, and the
texts a turn is counted by.

A frozen turn thaws into messages equal to those given (attribute order included), as new
objects, holding nothing the cyclic garbage collector tracks once it has looked; the two
messages of a string turn equal what pydantic-ai's constructors build; ``message_texts``
answers what its general rule answers for every kind of part.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from memlane import messages as messages_mod
from memlane.messages import default_messages, freeze_messages, message_texts, unpack_messages

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
EXAMPLES = int(os.environ.get("MEMLANE_HYPOTHESIS_EXAMPLES", "100"))


def every_kind() -> list[ModelMessage]:
    """A run with a part of each kind a turn carries: prompts, tools, retries, media."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart(content="be brief", timestamp=AT),
                UserPromptPart(
                    content=[
                        "look",
                        BinaryContent(data=b"\xff\x00ab", media_type="image/png"),
                        ImageUrl(url="https://example.com/a.png"),
                    ],
                    timestamp=AT,
                ),
            ],
            instructions="answer in English",
        ),
        ModelResponse(
            parts=[
                ThinkingPart(content="hmm"),
                TextPart(content="checking"),
                ToolCallPart(
                    tool_name="weather",
                    args={"city": "Oslo", "days": [1, 2], "span": (1.5, None), "ok": True},
                    tool_call_id="c1",
                ),
            ],
            usage=RequestUsage(input_tokens=10, output_tokens=3, details={"reasoning": 2}),
            model_name="m",
            provider_details={"nested": {"deep": [1, {"x": "y"}]}},
            timestamp=AT,
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(tool_name="weather", content={"t": 3}, tool_call_id="c1"),
                RetryFeedbackPart(
                    content="try again", retry=RetryInfo(cause="model_retry"), timestamp=AT
                ),
            ]
        ),
        ModelResponse(parts=[TextPart(content="3 degrees")], timestamp=AT),
    ]


def same_objects(got: Any, want: Any) -> None:
    """Equal, of the same classes, with the same attributes in the same order: what a
    pickle round trip gives."""
    assert type(got) is type(want)
    if isinstance(want, list | tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same_objects(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            same_objects(got[key], want[key])
    elif hasattr(want, "__dict__") and not isinstance(want, type):
        assert list(vars(got)) == list(vars(want))
        for key, value in vars(want).items():
            same_objects(vars(got)[key], value)
    else:
        assert got == want


@dataclasses.dataclass
class Stateful:
    """A dataclass that says itself what a pickle keeps of it."""

    n: int
    restored: bool = dataclasses.field(default=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"n": self.n}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.n, self.restored = state["n"], True


class TestFrozenTurns:
    """A frozen turn thaws into new objects equal to the ones given."""

    def test_every_kind_of_part(self) -> None:
        messages = every_kind()
        frozen = freeze_messages(messages)
        assert type(frozen) is tuple
        assert type(frozen[0]) is int  # the tuple form, not a pickle
        back = unpack_messages(frozen)
        same_objects(back, messages)
        assert back == messages
        assert back[1] is not messages[1]
        assert back[1].usage is not messages[1].usage  # type: ignore[union-attr]  # a ModelResponse
        assert unpack_messages(frozen) is not back  # each read thaws anew

    def test_strings_are_shared_not_copied(self) -> None:
        messages = every_kind()
        frozen = freeze_messages(messages)
        texts = [
            content
            for message in messages
            for part in message.parts
            if isinstance(content := getattr(part, "content", None), str)
        ]
        assert len(texts) == 5
        assert all(any(value is text for value in frozen) for text in texts)

    def test_the_collector_stops_tracking_it(self) -> None:
        frozen = freeze_messages(every_kind())
        assert all(type(value) is not tuple for value in frozen)  # one flat tuple
        gc.collect()  # one look is enough: every value in it is an atom
        assert not gc.is_tracked(frozen)

    def test_what_it_cannot_hold_is_pickled(self) -> None:
        messages: list[ModelMessage] = [
            ModelResponse(
                parts=[ToolCallPart(tool_name="f", args={"s": {1, 2}}, tool_call_id="c")],
                timestamp=AT,
            )
        ]
        frozen = freeze_messages(messages)
        assert type(frozen) is tuple
        assert type(frozen[0]) is bytes
        assert unpack_messages(frozen) == messages

    def test_a_class_that_customises_pickling_is_pickled(self) -> None:
        messages: list[ModelMessage] = [
            ModelResponse(parts=[TextPart(content="x")], provider_details={"s": Stateful(2)})
        ]
        frozen = freeze_messages(messages)
        assert type(frozen[0]) is bytes  # its own __getstate__ decides what is kept
        back = unpack_messages(frozen)
        assert back == messages
        assert back[0].provider_details["s"].restored  # type: ignore[union-attr,index]  # set above

    @settings(deadline=None, max_examples=EXAMPLES)
    @given(
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.tuples(inner, inner)
                | st.dictionaries(st.text(max_size=5), inner, max_size=4)
            ),
            max_leaves=20,
        )
    )
    def test_any_json_like_arguments(self, args: Any) -> None:
        messages: list[ModelMessage] = [
            ModelResponse(
                parts=[ToolCallPart(tool_name="f", args={"a": args}, tool_call_id="c")],
                timestamp=AT,
            )
        ]
        frozen = freeze_messages(messages)
        assert type(frozen[0]) is int
        back = unpack_messages(frozen)
        same_objects(back, messages)


class TestDefaultMessages:
    """The two messages of a string turn are what pydantic-ai's constructors build."""

    def test_equal_to_the_constructors(self) -> None:
        built = [
            ModelRequest(parts=[UserPromptPart(content="hi", timestamp=AT)]),
            ModelResponse(parts=[TextPart(content="hello")], timestamp=AT),
        ]
        made = default_messages("hi", "hello", AT)
        same_objects(made, built)
        assert made == built

    def test_nothing_mutable_is_shared(self) -> None:
        one, two = default_messages("a", "b", AT), default_messages("a", "b", AT)
        assert one[0].parts is not two[0].parts
        assert one[1].parts is not two[1].parts
        assert one[1].usage is not two[1].usage  # type: ignore[union-attr]  # a ModelResponse
        assert one[1].usage.details is not two[1].usage.details  # type: ignore[union-attr]  # a ModelResponse

    def test_without_templates_the_constructors_build_them(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(messages_mod, "_turn_templates", lambda: None)
        built = [
            ModelRequest(parts=[UserPromptPart(content="hi", timestamp=AT)]),
            ModelResponse(parts=[TextPart(content="hello")], timestamp=AT),
        ]
        same_objects(default_messages("hi", "hello", AT), built)

    def test_the_templates_are_used(self) -> None:
        # The fast path is taken with the installed pydantic-ai: otherwise every turn would
        # silently fall back to the constructors.
        assert messages_mod._turn_templates() is not None


def texts_by_rule(messages: list[ModelMessage]) -> list[str]:
    """The general rule of message_texts, without its shortcut for plain text parts."""
    from pydantic_ai.messages import BaseToolCallPart, BaseToolReturnPart, RetryPromptPart

    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                texts += [part.tool_name, part.args_as_json_str()]
            elif isinstance(part, BaseToolReturnPart):
                texts += [part.tool_name, part.model_response_str()]
            elif isinstance(part, RetryFeedbackPart | RetryPromptPart) and not isinstance(
                part.content, str
            ):
                texts.append(part.model_response())
            else:
                texts.extend(messages_mod._content_texts(getattr(part, "content", None)))
    return texts


class TestMessageTexts:
    """Every text a request carries is counted, whatever kind of part holds it."""

    def test_every_kind_of_part(self) -> None:
        messages = every_kind()
        assert message_texts(messages) == texts_by_rule(messages)
        assert "hmm" in message_texts(messages)
        assert "https://example.com/a.png" in message_texts(messages)

    def test_a_str_subclass_content(self) -> None:
        class Text(str):
            __slots__ = ()

        messages: list[ModelMessage] = [ModelResponse(parts=[TextPart(content=Text("x y"))])]
        assert message_texts(messages) == texts_by_rule(messages) == ["x y"]


class TestShapesAcrossThreads:
    """Threads freezing objects of new shapes at once each thaw their own."""

    def test_new_shapes_from_many_threads(self) -> None:
        import threading

        barrier = threading.Barrier(8)
        failures: list[str] = []

        def work(n: int) -> None:
            kinds = [
                dataclasses.make_dataclass(f"K{n}_{i}", [(f"f{n}_{i}", int)]) for i in range(50)
            ]
            barrier.wait()
            for i, kind in enumerate(kinds):
                messages: list[ModelMessage] = [
                    ModelResponse(
                        parts=[TextPart(content=f"{n} {i}")],
                        provider_details={"v": kind(i)},
                        timestamp=AT,
                    )
                ]
                frozen = freeze_messages(messages)
                if type(frozen[0]) is not int or unpack_messages(frozen) != messages:
                    failures.append(f"{n} {i}")

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
