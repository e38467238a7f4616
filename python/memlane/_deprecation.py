"""Renamed public names: the old one keeps working for one release and says what replaced it."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["deprecated_alias", "moved_names", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns that ``old`` is deprecated in favour of ``new`` (a :class:`DeprecationWarning`).

    ``stacklevel`` counts from this function: 3 points at the caller of the deprecated name
    when that name calls this directly.
    """
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def deprecated_alias(function: Callable[P, T], old: str, new: str) -> Callable[P, T]:
    """``function`` under its old name ``old``: the same call, after a warning naming ``new``."""

    @functools.wraps(function)
    def alias(*args: P.args, **kwargs: P.kwargs) -> T:
        warn_renamed(old, new)
        return function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.rsplit(".", 1)[-1]
    alias.__doc__ = f"Deprecated alias of :func:`{new}` (kept for one release)."
    return alias


def moved_names(module: str, renamed: dict[str, tuple[str, object]]) -> Callable[[str], object]:
    """A module ``__getattr__`` serving each old name of ``renamed`` (old: (new, object)).

    The old name is the same object as the new one (``isinstance`` and ``is`` keep their
    answers); reading it, by attribute or ``from ... import``, warns once per call site.
    """

    def module_getattr(name: str) -> object:
        if name in renamed:
            new, value = renamed[name]
            warn_renamed(f"{module}.{name}", new)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return module_getattr
