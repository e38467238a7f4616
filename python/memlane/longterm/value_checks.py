"""Checks of the values long-term memory's callers pass, each naming the argument it checks.

:func:`check_json_value` applies the stores' value rule (plain JSON) to an argument;
:func:`check_enum` accepts an enum member or its ``str`` value.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any, TypeVar, cast

from memlane._validate import type_name
from memlane.errors import UnstorableValueError
from memlane.stores.protocol import find_unstorable

__all__ = ["check_enum", "check_json_value", "checked_copy", "plain_copy"]


def check_json_value(value: Any, name: str) -> Any:
    """``value`` if it is plain JSON, the rule every store applies (see ``check_storable``).

    Raises:
        UnstorableValueError: Not plain JSON (a ``TypeError``); the message names the
            argument and where in it the offending value is, e.g. ``value['a'][2]``.
    """
    found = find_unstorable(value, name)
    if found is None:
        return value
    raise UnstorableValueError(f"{name} must be plain JSON: {found} is not JSON-serialisable")


E = TypeVar("E", bound=enum.Enum)


def check_enum(value: object, kind: type[E], name: str) -> E:
    """A member of ``kind``, given as the member or its ``str`` value.

    Raises:
        TypeError: Neither a member nor a ``str``.
        ValueError: A ``str`` that is no member's value; the message lists the allowed ones.
    """
    if isinstance(value, kind):
        return value
    if type(value) is str:
        # The enum's own table of values: calling kind(value) costs three times as long.
        member = kind._value2member_map_.get(value)
        if member is not None:
            return cast(E, member)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type_name(value)}")
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}") from None


_PLAIN_SCALARS = (str, int, float, bool)


class _NotExact(Exception):
    """A value holding a subclass of a JSON type, which only a JSON round trip normalises."""


def plain_copy(value: Any) -> Any:
    """A checked JSON value as stored: its own copy, tuples as lists (scalars as they are).

    Values of the exact built-in types are copied directly (a third of the time of a
    ``json`` round trip, which was a tenth of a ``remember``); a value holding a subclass
    (an ``IntEnum``, a ``str`` subclass) takes the round trip, which makes it plain.
    """
    if type(value) in _PLAIN_SCALARS or value is None:
        return value
    try:
        return _exact_copy(value)
    except _NotExact:
        return json.loads(json.dumps(value))


def checked_copy(value: Any, name: str) -> Any:
    """``plain_copy(check_json_value(value, name))`` in one walk for a value of the exact
    built-in types (the value a ``remember`` is given, walked twice before).

    Raises:
        UnstorableValueError: As :func:`check_json_value`.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    try:
        return _exact_copy(value)
    except _NotExact:
        return plain_copy(check_json_value(value, name))


def _exact_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        copied = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotExact
            # A scalar is kept without a call: most values are objects of scalars.
            copied[k] = v if type(v) in _EXACT_SCALARS or v is None else _exact_copy(v)
        return copied
    if kind is list or kind is tuple:
        return [v if type(v) in _EXACT_SCALARS or v is None else _exact_copy(v) for v in value]
    if kind in _EXACT_SCALARS or value is None:
        return value
    # A NaN or an infinity is not JSON: checked_copy must refuse it, and plain_copy's round
    # trip gives it back as it is.
    if kind is float and math.isfinite(value):
        return value
    raise _NotExact


# Floats are left out: each one is looked at (see above). One function, no keyword: a
# keyword-only flag took CPython's specialised call path away from every copy.
_EXACT_SCALARS = (str, int, bool)
