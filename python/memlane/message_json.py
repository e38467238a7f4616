"""pydantic-ai messages in JSON form (what ``dump_python(mode="json")`` gives), built without
pydantic's serializer for the message kinds memlane knows.

Every turn a persistent store keeps is its messages' JSON. pydantic's serializer spends most of
its time in Python callbacks of pydantic-ai's (the usage's wrap serializer, the part
discriminators): ~22 us for a request and a response with usage, the largest piece of a SQLite
turn's Python. The messages a run returns are a few dataclasses whose fields hold strings,
numbers, datetimes and plain dicts; for those the JSON form is each field's value in field
order, which :func:`messages_json` builds directly (~11 us). Once a turn's classes are checked,
:func:`turn_text` writes the form, its text and the turn's text in one walk, in Rust where the
extension is active (``write_turn``; its twin is :mod:`memlane._pure.message_json`).

Anything else goes to pydantic's serializer: a class :func:`_candidates` does not list (file
and media content, native tools, retry feedback, deltas), an instance with attributes its class
does not declare (extra usage fields, which pydantic-ai serializes too), a field its class
excludes holding a value that is not the excluded default, a tool return whose content is not a
scalar (pydantic-ai records file digests beside it), or a value of a type the JSON form would
have to convert (bytes, tuples, enums, non-finite floats, subclasses of the built-ins). A class
is also checked once per process against pydantic's own output the first time it is met, so a
pydantic-ai version that serializes one differently falls back instead of storing a different
form; a test compares the two for every part kind.
"""

from __future__ import annotations

import functools
import threading
import typing
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError, to_json

from memlane._pure.message_json import MessageClass, Unknown, dump, getter

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelMessage

__all__ = ["messages_json", "turn_text"]


_verified: dict[type, MessageClass] = {}
"""Classes whose fast form matched pydantic's the first time they were met: the ones
:func:`turn_text` writes."""
_refused: set[type] = set()
"""Classes met whose fast form did not match: always serialized by pydantic."""
_lock = threading.Lock()


@functools.cache
def _adapter() -> TypeAdapter[list[ModelMessage]]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter


@functools.cache
def _candidates() -> dict[type, MessageClass]:
    """The classes the fast path may write, with their specs, made from pydantic's own dump of
    an instance built with the defaults (its keys are the fields pydantic writes, in order)."""
    import dataclasses

    from pydantic import TypeAdapter
    from pydantic_ai.messages import (
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

    samples: list[tuple[Any, tuple[str, ...]]] = [
        (ModelRequest(parts=[]), ()),
        (ModelResponse(parts=[]), ()),
        (UserPromptPart(content=""), ()),
        (SystemPromptPart(content=""), ()),
        (TextPart(content=""), ()),
        (ThinkingPart(content=""), ()),
        (ToolCallPart(tool_name=""), ()),
        (ToolReturnPart(tool_name="", content=""), ("content",)),
        (RequestUsage(), ()),
    ]
    specs: dict[type, MessageClass] = {}
    for sample, scalars in samples:
        cls = type(sample)
        dumped = TypeAdapter(cls).dump_python(sample, mode="json")
        declared = {field.name for field in dataclasses.fields(cls)}
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001, S112
            continue  # an annotation that does not resolve: pydantic writes the class
        if not isinstance(dumped, dict) or not set(dumped) <= declared:
            continue  # a version that writes this class some other way: pydantic writes it
        floats = tuple(name for name in dumped if hints.get(name) is float)
        guarded = tuple(
            name for name in dumped if name not in floats and "float" in repr(hints.get(name))
        )
        names = tuple(dumped)
        left_out = tuple(sorted(declared - set(names)))
        specs[cls] = MessageClass(
            names,
            frozenset(declared | set(vars(sample))),
            left_out,
            getter(left_out)(sample),
            scalars,
            floats,
            guarded,
            getter(names),
            getter(left_out),
            getter(scalars),
            getter(guarded),
        )
    return specs


def messages_json(messages: list[ModelMessage]) -> list[Any]:
    """``ModelMessagesTypeAdapter.dump_python(messages, mode="json")``, built directly for the
    message kinds memlane knows (see the module's docstring); pydantic's result otherwise."""
    pending: list[type] = []

    def meet(cls: type) -> MessageClass:  # a class met for the first time
        spec = _candidates().get(cls)
        if spec is None or cls in _refused:
            raise Unknown
        pending.append(cls)
        return spec

    try:
        dumped: list[Any] = dump(messages, _verified, meet)
    # KeyError: a field neither set nor inherited; OverflowError: an int no float holds
    except (Unknown, RecursionError, KeyError, OverflowError):
        return _slow(messages)
    if pending:
        return _verify(messages, dumped, pending)
    return dumped


def _slow(messages: list[ModelMessage]) -> list[Any]:
    dumped: list[Any] = _adapter().dump_python(messages, mode="json")
    return dumped


def _verify(messages: list[ModelMessage], dumped: list[Any], pending: list[type]) -> list[Any]:
    """pydantic's dump of ``messages``; the classes met for the first time are trusted from now
    on if the fast form equals it (key order included), refused otherwise."""
    expected = _slow(messages)
    try:  # as JSON text: key order and 0 against 0.0 count
        same = to_json(dumped) == to_json(expected)
    except PydanticSerializationError:
        same = False
    specs = _candidates()
    with _lock:
        for cls in pending:
            if same:
                _verified.setdefault(cls, specs[cls])
            else:
                _refused.add(cls)
    return expected


def turn_text(
    messages: Any,
    turn_id: int,
    user_prompt: str,
    assistant_response: str,
    timestamp: str,
    token_estimate: int,
) -> tuple[list[Any], bytes, str] | None:
    """``(raw, messages, text)`` of a turn without metadata: its messages' JSON form (what
    :func:`messages_json` returns), their JSON text, and the turn's JSON text, written by the
    active implementation (the Rust writer, or its twin
    :func:`memlane._pure.message_json.write_turn`) for the classes checked already.

    ``None`` where pydantic must decide: a class met for the first time (which
    :func:`messages_json` checks), or any value the writer does not take for certain.
    """
    from memlane import _backend  # here: the selector's twins import memlane.types, then this

    return _backend.active.write_turn(
        messages, _verified, turn_id, user_prompt, assistant_response, timestamp, token_estimate
    )
