"""Builders of shared-memory messages, and the rule every message is checked by.

A message is a ``dict`` with ``type``, ``content`` and ``timestamp`` (ISO-8601 UTC) and,
where relevant, ``agent_key``, ``tool``, ``args``, ``phase_id`` and ``is_global``. The
builders set the timestamp; :func:`check_message` adds one to a message that lacks it, and
refuses what no store could hold, before anything is written.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from memlane._validate import type_name
from memlane.errors import InvalidValueError
from memlane.shared import constants
from memlane.stores.protocol import find_unstorable

__all__ = [
    "check_message",
    "create_action",
    "create_assistant_message",
    "create_error",
    "create_final",
    "create_observation",
    "create_script_instruction",
    "create_strategic_plan",
    "create_suggested_plan",
    "create_synthesis",
    "create_task_entry",
    "create_user_message",
    "feed_of",
    "json_copy",
    "now_iso",
    "parse_timestamp",
]


def now_iso() -> str:
    """The current time as the messages carry it: ISO-8601, UTC, microseconds."""
    return datetime.now(UTC).isoformat()


def _entry(kind: str, content: Any, agent_key: str | None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"type": kind, "content": content, "timestamp": now_iso()}
    if agent_key is not None:
        message["agent_key"] = agent_key
    message.update({k: v for k, v in extra.items() if v is not None})
    return check_message(message)


def create_user_message(content: Any) -> dict[str, Any]:
    """A ``user_message``: what the user said.

    Raises:
        ValueError: ``content`` is not plain JSON.
    """
    return _entry(constants.USER_MESSAGE, content, None)


def create_assistant_message(content: Any) -> dict[str, Any]:
    """An ``assistant_message``: what the system answered the user.

    Raises:
        ValueError: ``content`` is not plain JSON.
    """
    return _entry(constants.ASSISTANT_MESSAGE, content, None)


def create_task_entry(content: Any, *, agent_key: str | None = None) -> dict[str, Any]:
    """A ``task`` handed to ``agent_key`` (the memory's own agent when ``None``).

    Raises:
        TypeError, ValueError: A bad ``agent_key``, or ``content`` that is not plain JSON.
    """
    return _entry(constants.TASK, content, agent_key)


def create_action(tool: str, args: Any, *, agent_key: str | None = None) -> dict[str, Any]:
    """An ``action``: ``agent_key`` called ``tool`` with ``args``.

    The content reads ``tool(args)``, so a view sent as text says what was called.

    Raises:
        TypeError: ``tool`` is not a ``str``.
        ValueError: ``args`` is not plain JSON, or a bad ``agent_key``.
    """
    if not isinstance(tool, str):
        raise TypeError(f"tool must be str, not {type_name(tool)}")
    found = find_unstorable(args, "args")
    if found is not None:
        raise InvalidValueError(f"message cannot be stored as JSON: {found}")
    rendered = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return _entry(constants.ACTION, f"{tool}({rendered})", agent_key, tool=tool, args=args)


def create_observation(content: Any, *, agent_key: str | None = None) -> dict[str, Any]:
    """An ``observation``: what the tool of the preceding ``action`` returned.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.OBSERVATION, content, agent_key)


def create_error(content: Any, *, agent_key: str | None = None) -> dict[str, Any]:
    """An ``error`` an agent met.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.ERROR, content, agent_key)


def create_final(content: Any, *, agent_key: str | None = None) -> dict[str, Any]:
    """A ``final`` result of an agent's task.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.FINAL, content, agent_key)


def create_synthesis(
    content: Any, *, phase_id: str | int | None = None, agent_key: str | None = None
) -> dict[str, Any]:
    """A ``synthesis`` of phase ``phase_id``: a manager's summary of its workers' results.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.SYNTHESIS, content, agent_key, phase_id=phase_id)


def create_strategic_plan(
    content: Any, *, phase_id: str | int | None = None, agent_key: str | None = None
) -> dict[str, Any]:
    """A ``strategic_plan`` of the whole job.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.STRATEGIC_PLAN, content, agent_key, phase_id=phase_id)


def create_suggested_plan(
    content: Any, *, phase_id: str | int | None = None, agent_key: str | None = None
) -> dict[str, Any]:
    """A ``suggested_plan``, proposed for review.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.SUGGESTED_PLAN, content, agent_key, phase_id=phase_id)


def create_script_instruction(
    content: Any, *, phase_id: str | int | None = None, agent_key: str | None = None
) -> dict[str, Any]:
    """A ``script_instruction`` for an agent.

    Raises:
        ValueError: ``content`` is not plain JSON, or a bad ``agent_key``.
    """
    return _entry(constants.SCRIPT_INSTRUCTION, content, agent_key, phase_id=phase_id)


def _invalid(reason: str) -> InvalidValueError:
    return InvalidValueError(f"invalid message: {reason}")


def check_message(message: object, *, agent_key: str | None = None) -> dict[str, Any]:
    """A stored copy of ``message``: checked, with a timestamp, owned by ``agent_key``.

    The copy is deep, so changing ``message`` afterwards changes nothing stored. A message
    without ``agent_key`` gets ``agent_key`` (the adding memory's agent) when one is given,
    unless it is a conversation message.

    Args:
        message: The message to check.
        agent_key: The agent a message without its own ``agent_key`` belongs to.

    Returns:
        The copy to store.

    Raises:
        TypeError: ``message`` is not a ``dict``.
        ValueError: It lacks a non-empty ``str`` ``type``, cannot be stored as JSON, has an
            ``agent_key`` that is not a non-empty ``str``, an ``is_global`` that is not a
            ``bool``, or a ``timestamp`` that is not ISO-8601 text.
    """
    if not isinstance(message, dict):
        raise TypeError(f"message must be dict, not {type_name(message)}")
    kind = message.get("type")
    if not isinstance(kind, str) or not kind:
        raise _invalid(f"'type' must be a non-empty str, got {kind!r}")
    found = find_unstorable(message, "message")
    if found is not None:
        raise InvalidValueError(f"message cannot be stored as JSON: {found}")
    if kind in constants.CONVERSATION_TYPES:
        agent_key = None  # the conversation is the user's, whichever agent records it
    owner = message.get("agent_key", agent_key)
    if owner is not None and (not isinstance(owner, str) or not owner or "\x00" in owner):
        raise _invalid(f"'agent_key' must be a non-empty str without NUL, got {owner!r}")
    if not isinstance(message.get("is_global", False), bool):
        raise _invalid(f"'is_global' must be bool, got {message['is_global']!r}")
    stamp = message.get("timestamp")
    if stamp is not None and parse_timestamp(stamp) is None:
        raise _invalid(f"'timestamp' must be ISO-8601 text, got {stamp!r}")
    stored: dict[str, Any] = json_copy(message)
    if stamp is None:
        stored["timestamp"] = now_iso()
    if owner is not None:
        stored["agent_key"] = owner
    return stored


def json_copy(value: Any) -> Any:
    """A deep copy of a plain-JSON value (what every message is once checked): several times
    faster than :func:`copy.deepcopy`, which views pay for every message they hand out."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(v) for v in value]
    return value


def parse_timestamp(value: object) -> datetime | None:
    """A message's ``timestamp`` as an aware datetime (naive text is read as UTC), or ``None``
    when it is missing or not ISO-8601 text."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def feed_of(message: dict[str, Any]) -> tuple[str, str | None]:
    """Which feed of its namespace a checked message belongs to, and the agent of an agent feed.

    Every message lies in exactly one feed, so a view that combines feeds lists it once: a
    broadcast (``is_global``) in the global feed, a ``user_message`` or
    ``assistant_message`` in the conversation, anything else in its agent's trace (agent
    ``None`` when it names none).
    """
    if message.get("is_global") is True:
        return "global", None
    if message["type"] in constants.CONVERSATION_TYPES:
        return "conversation", None
    owner = message.get("agent_key")
    return "agent", owner if isinstance(owner, str) else None
