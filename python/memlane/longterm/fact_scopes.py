"""Where facts live and which scopes a caller sees: namespaces and the checks of scopes and ids.

Shared by every part that reads facts (facts, recall, search, forgetting a person) and by the
records package, which lists facts without a memory.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from memlane._validate import check_identifier, type_name
from memlane.longterm.fact_model import FactScope, FactType
from memlane.longterm.namespaces import namespace
from memlane.longterm.value_checks import check_enum, check_json_value, plain_copy

__all__ = [
    "FACTS_PREFIX",
    "MEMORY_TYPES",
    "SCOPE_ORDER",
    "cached_settings",
    "check_ids",
    "check_key",
    "check_pairs",
    "check_scope",
    "check_settings",
    "fact_namespace",
    "visible_namespaces",
]

MEMORY_TYPES = ("facts", "procedures", "episodes", "all")
"""What ``recall(query=...)`` searches."""

FACTS_PREFIX = ("longterm", "facts")
"""The namespace parts every fact namespace starts with."""

SCOPE_ORDER = (FactScope.SESSION, FactScope.USER, FactScope.AGENT, FactScope.GLOBAL)
"""The scopes from the most specific to the least."""


@functools.lru_cache(maxsize=4096)
def fact_namespace(scope: FactScope, scope_id: str | None) -> str:
    """The namespace holding the facts of one scope id (``global``: no id).

    Cached: every read and write of a fact builds it, and escaping the parts costs more than
    the store's lookup of the key.
    """
    if scope is FactScope.GLOBAL:
        return namespace(*FACTS_PREFIX, scope.value)
    assert scope_id is not None
    return namespace(*FACTS_PREFIX, scope.value, scope_id)


def check_scope(scope: object, scope_id: object) -> tuple[FactScope, str | None]:
    """A scope and its id: required for every scope but ``global``, refused for ``global``.

    Refusing an id for ``global`` catches ``remember(k, v, scope_id="u1")`` with the scope
    forgotten, which would otherwise write a fact every user sees. A scope and id of the exact
    types ``remember`` is usually given take a cache (every write checks them).
    """
    if (type(scope) is str or type(scope) is FactScope) and (
        scope_id is None or type(scope_id) is str
    ):
        return _checked_scope(scope, scope_id)
    return _check_scope(scope, scope_id)


@functools.lru_cache(maxsize=4096)
def _checked_scope(scope: str, scope_id: str | None) -> tuple[FactScope, str | None]:
    # An error is raised, never cached: a bad scope or id is refused every time. "user" and
    # FactScope.USER are one key (equal, same hash), with one answer.
    return _check_scope(scope, scope_id)


def _check_scope(scope: object, scope_id: object) -> tuple[FactScope, str | None]:
    checked = check_enum(scope, FactScope, "scope")
    if checked is FactScope.GLOBAL:
        if scope_id is not None:
            raise ValueError(
                f"scope_id must be None for the global scope, got {scope_id!r} "
                "(pass scope='session', 'user' or 'agent' to scope a fact)"
            )
        return checked, None
    if scope_id is None:
        raise ValueError(f"scope {checked.value!r} needs a scope_id")
    return checked, check_identifier(scope_id, "scope_id")


def check_ids(
    session_id: object, user_id: object, agent_id: object
) -> list[tuple[FactScope, str | None]]:
    """The scopes visible from these ids, most specific first; ``global`` always."""
    visible: list[tuple[FactScope, str | None]] = []
    for scope, given, name in (
        (FactScope.SESSION, session_id, "session_id"),
        (FactScope.USER, user_id, "user_id"),
        (FactScope.AGENT, agent_id, "agent_id"),
    ):
        if given is not None:
            visible.append((scope, check_identifier(given, name)))
    visible.append((FactScope.GLOBAL, None))
    return visible


def visible_namespaces(session_id: object, user_id: object, agent_id: object) -> tuple[str, ...]:
    """The namespaces of the scopes :func:`check_ids` returns, in its order (checked as it
    checks them).

    Every ``get_fact`` asks for them: ids that are ``str`` or ``None`` take a cache (an id
    seen before costs one lookup); anything else takes :func:`check_ids` and its errors.
    """
    if (
        (session_id is None or type(session_id) is str)
        and (user_id is None or type(user_id) is str)
        and (agent_id is None or type(agent_id) is str)
    ):
        return _visible_namespaces(session_id, user_id, agent_id)
    return tuple(fact_namespace(s, i) for s, i in check_ids(session_id, user_id, agent_id))


@functools.lru_cache(maxsize=4096)
def _visible_namespaces(
    session_id: str | None, user_id: str | None, agent_id: str | None
) -> tuple[str, ...]:
    # An error is raised, never cached: a bad id is refused every time.
    return tuple(fact_namespace(s, i) for s, i in check_ids(session_id, user_id, agent_id))


def check_key(key: object) -> str:
    """A fact's key: a non-empty ``str`` without NUL."""
    return check_identifier(key, "key")


def check_settings(
    scope: object, scope_id: object, fact_type: object
) -> tuple[FactScope, str | None, FactType]:
    """``remember``'s scope, scope id and fact type, checked (errors name the argument)."""
    checked_scope, checked_id = check_scope(scope, scope_id)
    return checked_scope, checked_id, check_enum(fact_type, FactType, "fact_type")


# Every remember checks these, and most pass the same few: the answers for hashable values of
# the exact types (str, FactScope, FactType, None; the caller makes sure) are kept; an error is
# raised, never kept. "user" and FactScope.USER are one key (equal, same hash) with one
# answer, as check_scope's.
cached_settings = functools.lru_cache(maxsize=4096)(check_settings)


def check_pairs(facts: object) -> list[tuple[str, Any]]:
    """``remember_many``'s facts as checked ``(key, plain value)`` pairs."""
    if isinstance(facts, Mapping):
        items: Iterable[Any] = facts.items()
    elif isinstance(facts, str | bytes) or not isinstance(facts, Iterable):
        raise TypeError(f"facts must be a mapping or (key, value) pairs, not {type_name(facts)}")
    else:
        items = facts
    pairs: list[tuple[str, Any]] = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"facts must hold (key, value) pairs, not {type_name(item)}")
        pairs.append((check_key(item[0]), plain_copy(check_json_value(item[1], "value"))))
    return pairs
