"""Pages of records: filtering by text and date, sorting, and the rows each kind shows.

Rows are plain JSON (what ``--json`` prints and the API returns). Every listing accepts the
same paging arguments; they are checked here, once, so the command line and the web API
refuse the same values with the same messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from memlane.longterm import Episode
from memlane.types import MemoryEntry, as_utc

__all__ = [
    "NOUNS",
    "SORTS",
    "TIMESTAMPS",
    "check_page",
    "count",
    "entry_size",
    "episode_row",
    "iso",
    "page",
    "plural",
    "to_json",
    "working_row",
]

TIMESTAMPS: dict[str, str] = {
    "facts": "updated_at",
    "episodes": "ended_at",
    "procedures": "created_at",
    "users": "created_at",
    "conversations": "last_activity",
}
"""The field each kind's ``since``/``until`` filter reads."""

SORTS: dict[str, tuple[str, ...]] = {
    "facts": (
        "id", "key", "scope", "scope_id", "scope_name", "fact_type", "confidence",
        "times_confirmed", "created_at", "updated_at",
    ),
    "episodes": (
        "id", "agent_id", "user_id", "user_name", "trigger", "success", "started_at",
        "ended_at", "duration", "rating",
    ),
    "procedures": (
        "id", "name", "procedure_type", "times_used", "success_rate", "created_at",
        "last_used_at",
    ),
    "users": (
        "id", "display_name", "canonical_id", "message_count", "conversation_count",
        "created_at", "last_seen_at",
    ),
    "conversations": (
        "id", "turns", "history_tokens", "total_tokens", "budget", "budget_used",
        "last_activity",
    ),
}  # fmt: skip
"""The fields each kind may be sorted by."""


def to_json(model: Any) -> dict[str, Any]:
    """A pydantic model as the JSON object it serialises to."""
    data: dict[str, Any] = model.model_dump(mode="json")
    return data


def iso(value: datetime | None) -> str | None:
    """An ISO 8601 timestamp, or ``None``."""
    return None if value is None else value.isoformat()


# One encoder for every row: json.dumps with an argument builds a new one per call, which was
# a third of a ``q`` filter's cost over a thousand rows.
_JSON = json.JSONEncoder(ensure_ascii=False)


def _text(record: dict[str, Any]) -> str:
    return _JSON.encode(record).casefold()


def _check_bound(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(value).__name__}")
    return as_utc(value)


def _when(item: dict[str, Any], field: str) -> datetime | None:
    raw = item.get(field)
    return None if not isinstance(raw, str) else as_utc(datetime.fromisoformat(raw))


def _sort_key(value: Any) -> tuple[int, Any]:
    # Missing values go last whichever way the page is sorted; the rest compare as they are
    # (a field holds one type), text case-insensitively.
    if value is None:
        return (1, 0)
    if isinstance(value, str):
        return (0, value.casefold())
    return (0, value)


def page(
    kind: str,
    items: list[dict[str, Any]],
    *,
    q: str | None,
    offset: object,
    limit: object,
    sort: str | None = None,
    descending: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    show: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One page of ``items``: those containing ``q`` and dated within [since, until], sorted.

    Args:
        kind: Which kind the rows are (names the sortable fields and the date field).
        items: Every row, in the kind's natural order (kept for ties and without ``sort``).
        q: Only rows whose JSON holds this text, case-insensitively.
        offset: Rows to skip (``>= 0``).
        limit: At most this many rows (``>= 1``), or ``None`` for all.
        sort: A field of :data:`SORTS` ``[kind]``.
        descending: Sort from the highest value.
        since: Only rows whose :data:`TIMESTAMPS` field is at or after this.
        until: Only rows whose :data:`TIMESTAMPS` field is at or before this.
        show: Turns the rows of the page into what is returned (e.g. validates them), so
            rows built cheaply can be filtered and counted and only the page pays more.

    Returns:
        ``{"items", "total", "offset", "limit"}``; ``total`` counts every match.

    Raises:
        ValueError: A bad offset or limit, or an unknown sort field (the allowed ones named).
        TypeError: A bound that is not a ``datetime``.
    """
    checked_offset, checked_limit = check_page(offset, limit)
    if sort is not None and sort not in SORTS[kind]:
        raise ValueError(f"cannot sort {kind} by {sort!r}; sort by one of {', '.join(SORTS[kind])}")
    low, high = _check_bound(since, "since"), _check_bound(until, "until")
    if q:
        wanted = q.casefold()
        items = [item for item in items if wanted in _text(item)]
    if low is not None or high is not None:
        field = TIMESTAMPS[kind]
        dated = [(item, _when(item, field)) for item in items]
        items = [
            item
            for item, when in dated
            if when is not None and (low is None or when >= low) and (high is None or when <= high)
        ]
    if sort is not None:
        present = [i for i in items if i.get(sort) is not None]
        missing = [i for i in items if i.get(sort) is None]
        present.sort(key=lambda item: _sort_key(item.get(sort)), reverse=descending)
        items = present + missing
    end = None if checked_limit is None else checked_offset + checked_limit
    shown = items[checked_offset:end]
    return {
        "items": shown if show is None else show(shown),
        "total": len(items),
        "offset": checked_offset,
        "limit": checked_limit,
    }


def check_page(offset: object, limit: object) -> tuple[int, int | None]:
    """A checked ``(offset, limit)``.

    Raises:
        ValueError: An offset below 0 or a limit below 1 (or not integers).
    """
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    return offset, limit


def episode_row(episode: Episode, names: dict[str, str | None]) -> dict[str, Any]:
    """An episode without its messages, with its user's display name."""
    return {
        "id": episode.id,
        "agent_id": episode.agent_id,
        "user_id": episode.user_id,
        "user_name": None if episode.user_id is None else names.get(episode.user_id),
        "conversation_id": episode.conversation_id,
        "trigger": episode.trigger,
        "input": episode.input,
        "success": episode.success,
        "output": episode.outcome.output,
        "error": episode.outcome.error,
        "actions": len(episode.actions),
        "messages": len(episode.messages),
        "started_at": iso(episode.started_at),
        "ended_at": iso(episode.ended_at),
        "duration": episode.duration,
        "rating": episode.rating,
    }


def working_row(entry: MemoryEntry) -> dict[str, Any]:
    """A working-memory fact: its key (also its id), value, importance and expiry."""
    return {
        "id": entry.key,
        "key": entry.key,
        "value": entry.content,
        "importance": entry.importance,
        "created_at": iso(entry.created_at),
        "expires_at": iso(entry.expires_at),
    }


def entry_size(entry: MemoryEntry) -> int:
    """The JSON size of an entry's content in bytes (what ``stats`` adds up)."""
    return len(json.dumps(entry.content, ensure_ascii=False).encode("utf-8"))


NOUNS: dict[str, tuple[str, str]] = {
    "facts": ("fact", "facts"),
    "episodes": ("episode", "episodes"),
    "procedures": ("procedure", "procedures"),
    "users": ("user", "users"),
    "conversations": ("conversation", "conversations"),
    "working": ("working-memory entry", "working-memory entries"),
    "identifiers": ("channel identifier", "channel identifiers"),
    "turns": ("turn", "turns"),
}
"""Each kind's noun, singular and plural, for ``deleted 1 conversation``."""


def count(number: int, kind: str) -> str:
    """``number`` with the noun of ``kind`` agreeing: ``1 conversation``, ``2 facts``."""
    one, many = NOUNS[kind]
    return plural(number, one, many)


def plural(count: int, singular: str, many: str | None = None) -> str:
    """``"1 fact"``, ``"2 facts"``: a count with its noun agreeing (``many`` if irregular)."""
    if count == 1:
        return f"{count} {singular}"
    return f"{count} {many if many is not None else singular + 's'}"
