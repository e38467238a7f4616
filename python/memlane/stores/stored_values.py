"""The value rule every store applies, and the row form local stores persist entries in.

Content and metadata must be plain JSON (:func:`check_storable`), so code tested on the
in-memory store behaves the same on a database; :func:`entry_to_row` and
:func:`row_to_entry` convert an entry to and from its persisted row.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic_core import PydanticSerializationError, to_json

from memlane._pure.store import Row
from memlane._validate import type_name
from memlane.errors import CorruptStoreError, UnstorableValueError
from memlane.types import CheckedJson, MemoryEntry, MemoryScope, TurnJson

T = TypeVar("T")


# ---------------------------------------------------------------------------- the value rule

_CHECKED = frozenset({CheckedJson, TurnJson})
"""JSON objects memlane built from values already in JSON form: never walked again."""


def _is_plain_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON built from the exact built-in types (the fast check).

    Exact type tests keep every save cheap (a conversation turn is ~60 values); ``False``
    only sends the value on to :func:`_find_unstorable`, which accepts subclasses too.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or item is None or kind is bool:
            continue
        if kind is dict:
            if any(type(k) is not str for k in item):
                return False
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is not float or not math.isfinite(item):
            return False
    return True


def find_in_json(
    value: Any,
    path: str,
    scalar: Callable[[Any, str], T | None],
    key: Callable[[Any, str], T | None],
) -> T | None:
    """The first problem in a JSON-like value, depth first, or ``None``.

    ``key(k, path)`` judges each dict key and ``scalar(item, path)`` each value that is not a
    dict, list or tuple; ``path`` names where it is, e.g. ``content['a'][2]``.
    """
    if isinstance(value, dict):
        for k, item in value.items():
            found = key(k, path)
            if found is None:
                found = find_in_json(item, f"{path}[{k!r}]", scalar, key)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = find_in_json(item, f"{path}[{i}]", scalar, key)
            if found is not None:
                return found
        return None
    return scalar(value, path)


def _json_scalar(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} (non-finite float {value!r})"
    return f"{path} (type {type_name(value)})"


def _json_key(k: Any, path: str) -> str | None:
    return None if isinstance(k, str) else f"{path} (dict key {k!r} of type {type_name(k)})"


def _find_unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` stops being plain JSON (``None`` if it is), e.g. ``content['a'][2]``."""
    return find_in_json(value, path, _json_scalar, _json_key)


def find_unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` stops being the plain JSON every store holds (``None`` if it is).

    The answer names the place, e.g. ``content['a'][2] (type set)``; exact built-in types
    are checked first, so plain values cost one walk.
    """
    if type(value) in _CHECKED or _is_plain_json(value):
        return None
    return _find_unstorable(value, path)


def _unstorable(key: str | None, found: str) -> UnstorableValueError:
    return UnstorableValueError(
        f"cannot store entry with key {key!r}: {found} is not JSON-serialisable"
    )


def check_storable(entry: MemoryEntry) -> MemoryEntry:
    """``entry`` if its content and metadata are plain JSON, which every store can hold.

    Only what JSON holds exactly is accepted (no NaN, no non-``str`` dict keys), so what is
    read back equals what was saved, whichever store holds it.

    Raises:
        UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``); the
            message names the key and where the offending value is.
    """
    for value, field in ((entry.content, "content"), (entry.metadata, "metadata")):
        found = find_unstorable(value, field)
        if found is not None:
            raise _unstorable(entry.key, found)
    return entry


def dumps_json(value: Any, *, key: str | None, field: str) -> str:
    """JSON text of ``value``, or an error naming the key and the offending type.

    Raises:
        UnstorableValueError: ``value`` is not plain JSON (see :func:`check_storable`).
    """
    if type(value) is dict and not value:  # most entries' metadata: no encoder to build
        return "{}"
    kind = type(value)
    if kind is TurnJson:  # made with the turn's JSON, unless it could not be
        text: str | None = value.text
        if text is not None:
            return text
    if kind in _CHECKED:
        try:
            return to_json(value).decode()
        except PydanticSerializationError:  # a lone surrogate: json.dumps says as before
            pass
    found = find_unstorable(value, field)
    if found is not None:
        raise _unstorable(key, found)
    return _encode(value)


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` without building an encoder
per call (the keyword path of ``json.dumps`` does: ~2 us of a small dict's ~3)."""


def timestamp(value: datetime | None) -> float | None:
    """Unix seconds of an expiry, as the tables store it."""
    return None if value is None else value.timestamp()


def now() -> float:
    """The current time in Unix seconds, for the tables' expiry checks (``time.time``: the
    clock ``datetime.now`` reads, without building a datetime on every store call)."""
    return time.time()


def entry_to_row(entry: MemoryEntry, version: int = 0) -> Row:
    """The persisted form of an entry (validates that it is storable).

    Args:
        entry: The entry; its own ``version`` is ignored, as every store ignores it.
        version: The version to store: 0 for a plain save, the new version for ``save_if``.
    """
    return (
        entry.entry_id,
        entry.scope.value,
        entry.key,
        dumps_json(entry.content, key=entry.key, field="content"),
        dumps_json(entry.metadata, key=entry.key, field="metadata"),
        entry.created_at.isoformat(),
        timestamp(entry.expires_at),
        entry.importance,
        version,
    )


def row_to_entry(row: Row | tuple[Any, ...], where: str) -> MemoryEntry:
    """An entry from its persisted form.

    Accepts the 8-element row of stores written before versions existed, as version 0.

    Raises:
        CorruptStoreError: The row cannot be decoded; the message names ``where``.
    """
    if len(row) == 8:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance = row
        version: Any = 0
    else:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = row
    try:
        if type(version) is not int:
            version = int(version)
        if version < 0:
            raise ValueError(f"negative version {version}")
        return MemoryEntry.model_construct(
            entry_id=entry_id,
            scope=MemoryScope(scope),
            key=key,
            content=json.loads(content),
            metadata=json.loads(metadata),
            created_at=datetime.fromisoformat(created_at),
            expires_at=None if expires_at is None else datetime.fromtimestamp(expires_at, UTC),
            importance=float(importance),
            version=version,
        )
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"corrupt entry {entry_id!r} in {where}: {exc}") from exc
