"""Renamed public names: the old one keeps working for one release and says what replaced it."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
Q = ParamSpec("Q")
T = TypeVar("T")
U = TypeVar("U")

__all__ = ["deprecated_alias", "deprecated_twins", "moved_names", "warn_renamed"]


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
    """``function`` under its old name ``old``: the same call, after a warning naming ``new``.

    The alias of a coroutine function is a coroutine function (``inspect`` says so, and a
    method alias is a method), warning when awaited.
    """
    alias: Callable[P, Any]
    if inspect.iscoroutinefunction(function):
        coroutine_function = function

        @functools.wraps(function)
        async def alias(*args: P.args, **kwargs: P.kwargs) -> Any:
            warn_renamed(old, new)
            return await coroutine_function(*args, **kwargs)

    else:

        @functools.wraps(function)
        def alias(*args: P.args, **kwargs: P.kwargs) -> T:
            warn_renamed(old, new)
            return function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.rsplit(".", 1)[-1]
    alias.__doc__ = f"Deprecated alias of :func:`{new}` (kept for one release)."
    # The async branch returns the awaitable T is, so the signature is ``function``'s.
    return cast("Callable[P, T]", alias)


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


def deprecated_twins(
    old: str, sync: Callable[P, T], asynchronous: Callable[Q, U]
) -> tuple[Callable[P, T], Callable[Q, U]]:
    """Aliases of the methods ``sync`` and ``asynchronous`` under their old names ``old`` and
    ``async_old``, each warning with its new name (both named as their ``__qualname__`` says:
    ``Class.method``)."""
    owner = sync.__qualname__.rsplit(".", 1)[0]
    return (
        deprecated_alias(sync, f"{owner}.{old}", sync.__qualname__),
        deprecated_alias(asynchronous, f"{owner}.async_{old}", asynchronous.__qualname__),
    )
