"""Pure-Python twin of ``write_turn`` (``rust/src/py/message_json.rs``): a turn's JSON text,
written from its pydantic-ai messages for the classes already checked against pydantic.

:mod:`memlane.message_json` decides which classes those are (a class is checked against
pydantic's own output the first time it is met) and holds each one's :class:`MessageClass`;
:func:`dump` is the walk both it and :func:`write_turn` use. Anything the walk does not take
for certain (see :class:`MessageClass`) makes :func:`write_turn` return ``None``, and the
caller takes the path that asks pydantic. The Rust writer follows the same rules on the same
``MessageClass`` tuples; a differential test compares the two.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, NamedTuple

from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

__all__ = ["MessageClass", "Unknown", "dump", "getter", "write_turn"]


class MessageClass(NamedTuple):
    """How one class is written: the fields pydantic writes, in its order (class attributes
    too: a usage object keeps only the counts it was given); the attributes an instance may
    have (any other is one pydantic-ai may serialize too); the fields pydantic leaves out, and
    the values they must hold (it leaves them out only then); the fields that must hold a
    scalar; the fields typed ``float``, where pydantic writes an ``int`` as a float; the fields
    whose type names a float elsewhere (``dict[str, float]``), written only when ``None``.

    The first seven items are names and values, which the Rust writer reads by position; the
    last four are getters of the same fields, for this twin.
    """

    names: tuple[str, ...]
    attributes: frozenset[str]
    left_out: tuple[str, ...]
    defaults: tuple[Any, ...]
    scalars: tuple[str, ...]
    floats: tuple[str, ...]
    guarded: tuple[str, ...]
    values: Callable[[Any], tuple[Any, ...]]
    left_out_values: Callable[[Any], tuple[Any, ...]]
    scalar_values: Callable[[Any], tuple[Any, ...]]
    guarded_values: Callable[[Any], tuple[Any, ...]]


def getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``names`` as a tuple, however many (``attrgetter`` of one returns it bare)."""
    if not names:
        return lambda _: ()
    get = attrgetter(*names, names[0]) if len(names) == 1 else attrgetter(*names)
    if len(names) == 1:
        return lambda value: get(value)[:1]
    return get


class Unknown(Exception):  # a signal inside the walk, never raised out of memlane
    """A value the walk does not write the way pydantic does."""


SCALARS = frozenset({str, int, bool, type(None)})
"""Values written as they are (exact types: a subclass, e.g. an enum, may serialize otherwise)."""

_MINUTE = timedelta(minutes=1)

Meet = Callable[[type], MessageClass]
"""What the walk asks of a class not in ``known``: its spec, or :class:`Unknown`."""


def _refuse(cls: type) -> MessageClass:
    raise Unknown


def dump(value: Any, known: dict[type, MessageClass], meet: Meet = _refuse) -> Any:
    """``value`` in JSON form (pydantic's ``dump_python(mode="json")``); :class:`Unknown` for
    anything left to pydantic. A class not in ``known`` is given to ``meet``."""
    cls = type(value)
    if cls is list:
        return [item if type(item) in SCALARS else dump(item, known, meet) for item in value]
    if cls is datetime:
        offset = value.utcoffset()
        if offset is not None and offset % _MINUTE:  # pydantic drops an offset's seconds
            raise Unknown
        return to_jsonable_python(value)
    if cls is dict:
        if not all(type(key) is str for key in value):
            raise Unknown
        return {
            key: item if type(item) in SCALARS else dump(item, known, meet)
            for key, item in value.items()
        }
    if cls is float:
        if not math.isfinite(value):
            raise Unknown
        return value
    spec = known.get(cls)
    if spec is None:
        spec = meet(cls)
    values = value.__dict__
    if not values.keys() <= spec.attributes:
        raise Unknown
    if spec.defaults and spec.left_out_values(value) != spec.defaults:
        raise Unknown
    if spec.scalars and not SCALARS.issuperset(map(type, spec.scalar_values(value))):
        raise Unknown
    names = spec.names
    if len(values) != len(names):  # fields kept by the class, or attributes pydantic skips
        values = dict(zip(names, spec.values(value), strict=True))
    if spec.guarded and spec.guarded_values(value) != (None,) * len(spec.guarded):
        raise Unknown
    out = {}
    for name in names:
        item = values[name]
        out[name] = item if type(item) in SCALARS else dump(item, known, meet)
    for name in spec.floats:
        item = out[name]
        if type(item) is bool:
            raise Unknown
        if type(item) is int:
            out[name] = float(item)
    return out


def write_turn(
    messages: Any,
    known: dict[type, MessageClass],
    turn_id: int,
    user_prompt: str,
    assistant_response: str,
    timestamp: str,
    token_estimate: int,
) -> tuple[list[Any], bytes, str] | None:
    """``(raw, messages, text)``: the messages' JSON form, their JSON text, and the turn's
    JSON text (the object :func:`~memlane.types.turn_json` makes, without metadata, with the
    messages' text spliced in); ``None`` where the caller must ask pydantic."""
    if type(messages) is not list or type(turn_id) is not int or type(token_estimate) is not int:
        return None
    try:
        raw: list[Any] = dump(messages, known)
        encoded = to_json(raw)
        head = to_json(
            {
                "turn_id": turn_id,
                "user_prompt": user_prompt,
                "assistant_response": assistant_response,
            }
        )
        tail = to_json({"timestamp": timestamp, "token_estimate": token_estimate, "metadata": {}})
    # KeyError: a field neither set nor inherited; OverflowError: an int no float holds;
    # PydanticSerializationError: a lone surrogate
    except (Unknown, RecursionError, KeyError, OverflowError, PydanticSerializationError):
        return None
    # Both halves are compact objects: the messages go between them, in field order.
    return raw, encoded, (head[:-1] + b',"raw_messages":' + encoded + b"," + tail[1:]).decode()
