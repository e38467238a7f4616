"""pydantic-ai messages in JSON form (what ``dump_python(mode="json")`` gives), built without
pydantic's serializer for the message kinds memlane knows.

Every turn a persistent store keeps is its messages' JSON. pydantic's serializer spends most of
its time in Python callbacks of pydantic-ai's (the usage's wrap serializer, the part
discriminators): ~22 us for a request and a response with usage, the largest piece of a SQLite
turn's Python. The messages a run returns are a few dataclasses whose fields hold strings,
numbers, datetimes and plain dicts; for those the JSON form is each field's value in field
order, which :func:`messages_json` builds directly (~11 us).

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
import math
import threading
import typing
from collections.abc import Callable
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelMessage

__all__ = ["messages_json"]


class _Spec(NamedTuple):
    """How the fast path writes one class: the fields pydantic writes, in its order, and a
    getter of their values (class attributes too: a usage object keeps only the counts it was
    given); the attributes an instance may have (any other is one pydantic-ai may serialize
    too); a getter of the fields pydantic leaves out, and the values they must hold (it leaves
    them out only then); a getter of the fields that must hold a scalar; the fields typed
    ``float``, where pydantic writes an ``int`` as a float; a getter of the fields whose type
    names a float elsewhere (``dict[str, float]``), which the fast path writes only when
    ``None``."""

    names: tuple[str, ...]
    values: Callable[[Any], tuple[Any, ...]]
    attributes: frozenset[str]
    left_out: Callable[[Any], tuple[Any, ...]]
    defaults: tuple[Any, ...]
    scalars: Callable[[Any], tuple[Any, ...]]
    checked: bool
    floats: tuple[str, ...]
    guarded: Callable[[Any], tuple[Any, ...]] | None


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``names`` as a tuple, however many (``attrgetter`` of one returns it bare)."""
    if not names:
        return lambda _: ()
    get = attrgetter(*names, names[0]) if len(names) == 1 else attrgetter(*names)
    if len(names) == 1:
        return lambda value: get(value)[:1]
    return get


class _Unknown(Exception):  # a signal inside messages_json, never raised out
    """A value the fast path does not write the way pydantic does."""


_SCALARS = frozenset({str, int, bool, type(None)})
"""Values written as they are (exact types: a subclass, e.g. an enum, may serialize otherwise)."""

_verified: dict[type, _Spec] = {}
"""Classes whose fast form matched pydantic's the first time they were met."""
_refused: set[type] = set()
"""Classes met whose fast form did not match: always serialized by pydantic."""
_lock = threading.Lock()


@functools.cache
def _adapter() -> TypeAdapter[list[ModelMessage]]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter


@functools.cache
def _candidates() -> dict[type, _Spec]:
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
    specs: dict[type, _Spec] = {}
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
        specs[cls] = _Spec(
            names,
            _getter(names),
            frozenset(declared | set(vars(sample))),
            _getter(left_out),
            _getter(left_out)(sample),
            _getter(scalars),
            bool(scalars),
            floats,
            _getter(guarded) if guarded else None,
        )
    return specs


def _dump(value: Any, pending: list[type]) -> Any:
    """``value`` in JSON form; :class:`_Unknown` for anything the fast path leaves to pydantic.
    Classes met for the first time are added to ``pending``."""
    cls = type(value)
    if cls is list:
        return [item if type(item) in _SCALARS else _dump(item, pending) for item in value]
    if cls is datetime:
        return to_jsonable_python(value)
    if cls is dict:
        if not all(type(key) is str for key in value):
            raise _Unknown
        return {
            key: item if type(item) in _SCALARS else _dump(item, pending)
            for key, item in value.items()
        }
    if cls is float:
        if not math.isfinite(value):
            raise _Unknown
        return value
    spec = _verified.get(cls)
    if spec is None:
        spec = _candidates().get(cls)
        if spec is None or cls in _refused:
            raise _Unknown
        pending.append(cls)
    values = value.__dict__
    if not values.keys() <= spec.attributes:
        raise _Unknown
    if spec.defaults and spec.left_out(value) != spec.defaults:
        raise _Unknown
    if spec.checked and not _SCALARS.issuperset(map(type, spec.scalars(value))):
        raise _Unknown
    names = spec.names
    if len(values) != len(names):  # fields kept by the class, or attributes pydantic skips
        values = dict(zip(names, spec.values(value), strict=True))
    if spec.guarded is not None and spec.guarded(value) != (None,) * len(spec.guarded(value)):
        raise _Unknown
    out = {}
    for name in names:
        item = values[name]
        out[name] = item if type(item) in _SCALARS else _dump(item, pending)
    for name in spec.floats:
        item = out[name]
        if type(item) is bool:
            raise _Unknown
        if type(item) is int:
            out[name] = float(item)
    return out


def messages_json(messages: list[ModelMessage]) -> list[Any]:
    """``ModelMessagesTypeAdapter.dump_python(messages, mode="json")``, built directly for the
    message kinds memlane knows (see the module's docstring); pydantic's result otherwise."""
    pending: list[type] = []
    try:
        dumped: list[Any] = _dump(messages, pending)
    # KeyError: a field neither set nor inherited; OverflowError: an int no float holds
    except (_Unknown, RecursionError, KeyError, OverflowError):
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
