"""What names a record: the kinds, and the ids of facts (the one kind whose id is built)."""

from __future__ import annotations

from typing import Any, Literal

from memlane._validate import check_identifier
from memlane.longterm import Fact, FactScope
from memlane.longterm.model import namespace, parse_namespace

__all__ = [
    "KINDS",
    "WORKING_PREFIX",
    "Kind",
    "Page",
    "check_ids",
    "fact_id",
    "parse_fact_id",
]

Kind = Literal["facts", "episodes", "procedures", "users", "conversations"]
KINDS: tuple[Kind, ...] = ("facts", "episodes", "procedures", "users", "conversations")
"""The kinds of record with an id of their own (working memory is listed per scope)."""

WORKING_PREFIX = "working:"
"""Working-memory scopes live in namespaces ``working:{scope_id}``."""

Page = dict[str, Any]
"""``{"items": [...], "total": n, "offset": o, "limit": l}``: one page of a listing."""


def fact_id(fact: Fact) -> str:
    """The id of a fact: its scope, scope id (none for ``global``) and key."""
    if fact.scope is FactScope.GLOBAL:
        return namespace(fact.scope.value, fact.key)
    assert fact.scope_id is not None  # every scope but global has one
    return namespace(fact.scope.value, fact.scope_id, fact.key)


def parse_fact_id(value: object) -> tuple[FactScope, str | None, str]:
    """(scope, scope id, key) of a fact id.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Not a fact id.
    """
    text = check_identifier(value, "fact id")
    parts = parse_namespace(text)
    try:
        scope = FactScope(parts[0])
    except ValueError:
        raise ValueError(
            f"not a fact id: {text!r} (expected global:KEY or SCOPE:SCOPE_ID:KEY)"
        ) from None
    if scope is FactScope.GLOBAL and len(parts) == 2 and parts[1]:
        return scope, None, parts[1]
    if scope is not FactScope.GLOBAL and len(parts) == 3 and parts[1] and parts[2]:
        return scope, parts[1], parts[2]
    raise ValueError(f"not a fact id: {text!r} (expected global:KEY or SCOPE:SCOPE_ID:KEY)")


def check_ids(ids: object) -> list[str]:
    """The ids of a batch delete: a non-empty list of non-empty strings.

    Raises:
        TypeError: Not a list of ``str``.
        ValueError: Empty, or an empty id.
    """
    if not isinstance(ids, list):
        raise TypeError(f"ids must be a list of strings, not {type(ids).__name__}")
    if not ids:
        raise ValueError("ids must name at least one record")
    return [check_identifier(i, f"ids[{n}]") for n, i in enumerate(ids)]
