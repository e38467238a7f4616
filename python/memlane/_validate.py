"""Argument checks shared by every public entry point, each written once.

Each check returns the value it accepted (so callers can write ``x = check_str(x, "x")``) and
raises the built-in a caller would catch, with a message that names the argument and the
offending value or type.
"""

from __future__ import annotations

import math
from datetime import timedelta


def type_name(value: object) -> str:
    """The name messages use for ``value``'s type."""
    return type(value).__name__


def check_str(value: object, name: str) -> str:
    """A ``str``.

    Raises:
        TypeError: Anything else.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type_name(value)}")
    return value


def check_identifier(value: object, name: str) -> str:
    """A non-empty ``str`` without NUL, as namespaces and ids must be.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Empty, or containing ``\\x00``.
    """
    if type(value) is str and value and "\x00" not in value:  # the common case, first
        return value
    check_str(value, name)
    assert isinstance(value, str)
    if not value or "\x00" in value:
        raise ValueError(f"{name} must be a non-empty string without NUL, got {value!r}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """An ``int`` above zero (``bool`` is not a count).

    Raises:
        TypeError: Not an ``int``.
        ValueError: Zero or negative.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type_name(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def check_seconds(value: object, name: str) -> float:
    """A positive, finite number of seconds.

    Raises:
        TypeError: Not an ``int`` or ``float``.
        ValueError: Zero, negative, infinite or NaN.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type_name(value)}")
    if not 0 < value < math.inf:  # NaN fails both comparisons
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return float(value)


def check_ttl(value: object, name: str = "ttl") -> timedelta | None:
    """``None`` (never expires), or a positive finite duration in seconds or as a timedelta.

    Raises:
        TypeError: Neither a number nor a ``timedelta``.
        ValueError: Not positive, or not finite.
    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(
            f"{name} must be seconds (int or float) or timedelta, not {type_name(value)}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive finite duration, got {value!r}")
    return timedelta(seconds=seconds)


def check_fraction(value: object, name: str) -> float:
    """A number from 0.0 to 1.0 inclusive.

    Raises:
        TypeError: Not an ``int`` or ``float``.
        ValueError: Outside ``[0.0, 1.0]``, or NaN.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, not {type_name(value)}")
    if not 0.0 <= value <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"{name} must be between 0.0 and 1.0, got {value!r}")
    return float(value)
