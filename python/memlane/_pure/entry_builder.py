"""Pure-Python twin of the Rust entry builder (``rust/src/py/entries.rs``): rows to entries.

A :data:`Row` is an entry as the tables persist it; :func:`build_entry` makes the
:class:`~memlane.types.MemoryEntry` of a row memlane wrote without validating it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memlane.types import MemoryEntry, construct_unchecked

Row = tuple[str, str, str | None, str, str, str, float | None, float, int]
"""A persisted entry: entry_id, scope, key, content JSON, metadata JSON, created_at ISO,
expires_at (Unix seconds or None), importance, version."""


EntryKit = tuple[Any, dict[str, Any], Callable[[str], Any], Callable[[float, Any], Any], Any]
"""What :func:`build_entry` needs: ``(MemoryEntry, {scope value: MemoryScope},
datetime.fromisoformat, datetime.fromtimestamp, UTC)`` (the SQLite store's ``ENTRY_KIT``)."""

_ENTRY_FIELDS = tuple(MemoryEntry.model_fields)
"""The fields of an entry, in declaration order: all of them are set by :func:`build_entry`
(the Rust builder's list, ``memlane._core.ENTRY_FIELDS``, is held equal to it by a test)."""


def build_entry(row: Row, kit: EntryKit) -> Any | None:
    """The entry of a row memlane wrote, built as ``model_construct`` builds it (no
    validation); ``None`` for a row left to ``row_to_entry`` (JSON ``json.loads`` refuses, an
    unknown scope, a date ``fromisoformat`` refuses, a version that is not a non-negative
    int), which raises the precise error.

    Twin of the Rust builder (``rust/src/py/entries.rs``), which leaves more rows to
    ``row_to_entry`` (``NaN``, integers beyond 64 bits, lone surrogates): either way the entry
    is the one ``row_to_entry`` makes. ``json.loads`` keeps its shared decoder (a
    ``parse_constant`` would build a decoder per call).
    """
    cls, scopes, from_iso, from_timestamp, utc = kit
    entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = row
    member = scopes.get(scope)
    if member is None or type(version) is not int or version < 0:
        return None
    try:
        values = {
            "entry_id": entry_id,
            "scope": member,
            "key": key,
            "content": json.loads(content),
            "metadata": json.loads(metadata),
            "created_at": from_iso(created_at),
            "expires_at": None if expires_at is None else from_timestamp(expires_at, utc),
            "importance": float(importance),
            "version": version,
        }
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None
    return construct_unchecked(cls, values, _ENTRY_FIELDS)


def build_entries(rows: list[Row], kit: EntryKit) -> tuple[list[Any], list[int]]:
    """``(items, odd)``: :func:`build_entry` of each row, in order, except at the indices in
    ``odd``, which hold their rows for ``row_to_entry``."""
    items: list[Any] = []
    odd: list[int] = []
    for i, row in enumerate(rows):
        entry = build_entry(row, kit)
        if entry is None:
            odd.append(i)
            items.append(row)
        else:
            items.append(entry)
    return items, odd
