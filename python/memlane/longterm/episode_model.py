"""Episodes as data: what one past agent run was, and how one is built from its parts or a run.

:class:`Episode` (with its :class:`EpisodeOutcome`) is what :class:`~memlane.longterm.episodes.Episodes`
stores and returns; :func:`build_episode` checks every argument of ``record_episode`` and makes
one; :func:`run_actions` reads the tool calls of pydantic-ai messages. Every episode lives in
:data:`EPISODES_NAMESPACE`, keyed by its id, with its searchable text beside it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator
from pydantic_core import to_jsonable_python

from memlane._validate import check_identifier, check_str, type_name
from memlane.longterm.fact_model import render_value
from memlane.longterm.namespaces import namespace
from memlane.longterm.value_checks import check_json_value
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry, MemoryScope, as_utc, utc_now

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

# pydantic-ai is imported where messages are read or written, not with long-term memory.

__all__ = [
    "ACTION_TEXT",
    "EPISODES_NAMESPACE",
    "Episode",
    "EpisodeOutcome",
    "build_episode",
    "check_actions",
    "check_messages",
    "episode_entry",
    "first_prompt",
    "loaded_episodes",
    "run_actions",
    "run_timing",
]


ACTION_TEXT = 500
"""At most this many characters of an action's arguments, and of its result, join the
episode's search text."""

EPISODES_NAMESPACE = namespace("longterm", "episodes")
"""The namespace every episode is stored in, keyed by :attr:`Episode.id`."""


class EpisodeOutcome(BaseModel):
    """How a run ended.

    Attributes:
        success: Whether it reached its goal.
        output: The final output (any plain JSON value).
        error: What went wrong, for a failure.
    """

    success: bool
    output: Any = None
    error: str | None = None


class Episode(BaseModel):
    """One past agent run.

    Attributes:
        id: Unique id (uuid4 hex).
        trigger: What started the run, e.g. ``"user_message"`` or ``"schedule"``.
        input: What the run was given (any plain JSON value).
        messages: The run's messages as JSON objects (pydantic-ai's message shape when they
            came from pydantic-ai; :meth:`model_messages` turns them back into messages).
        actions: The tool calls, in order, each ``{"tool": name, "args": {...}, "result": ...}``
            (an episode built from a run adds ``tool_call_id`` and the return's ``outcome``).
        outcome: Success or failure, the final output and the error.
        started_at: When the run started, aware UTC.
        ended_at: When it ended, aware UTC.
        duration: ``ended_at - started_at`` in seconds.
        rating: Optional human rating (any finite number, on the caller's scale).
        comment: Optional human comment.
        agent_id: The agent that ran.
        user_id: The user it ran for, if any.
        conversation_id: The conversation it belonged to, if any.
    """

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    trigger: str
    input: Any = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    actions: list[dict[str, Any]] = Field(default_factory=list)
    outcome: EpisodeOutcome
    started_at: datetime
    ended_at: datetime
    duration: float = Field(ge=0.0)
    rating: float | None = None
    comment: str | None = None
    agent_id: str
    user_id: str | None = None
    conversation_id: str | None = None

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)

    @property
    def success(self) -> bool:
        """Whether the run succeeded (``outcome.success``)."""
        return self.outcome.success

    def model_messages(self) -> list[ModelMessage]:
        """The messages as pydantic-ai messages.

        Raises:
            pydantic.ValidationError: A message is a plain dict not in pydantic-ai's shape.
        """
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        messages: list[ModelMessage] = ModelMessagesTypeAdapter.validate_python(self.messages)
        return messages

    def search_text(self) -> str:
        """What an episode is found by (recall's fuzzy rule, ranked and semantic search): the
        trigger, the input, the output, the error and the actions (each tool with its
        arguments and result, the latter two cut at :data:`ACTION_TEXT` characters so one
        large tool result does not drown the rest)."""
        texts = [self.trigger, render_value(self.input), render_value(self.outcome.output)]
        if self.outcome.error:
            texts.append(self.outcome.error)
        for action in self.actions:
            parts = [str(action.get("tool", ""))]
            parts.extend(
                render_value(action[field])[:ACTION_TEXT]
                for field in ("args", "result")
                if action.get(field) is not None
            )
            texts.append(" ".join(parts))
        return "\n".join(texts)


# ---------------------------------------------------------------------------- building


def build_episode(
    *,
    agent_id: object,
    trigger: object,
    input: object,  # the public name
    messages: object,
    actions: object,
    success: object,
    output: object,
    error: object,
    user_id: object,
    conversation_id: object,
    started_at: object,
    ended_at: object,
    rating: object,
    comment: object,
) -> Episode:
    """An :class:`Episode` from checked arguments (every check of :meth:`record_episode`)."""
    if not isinstance(success, bool):
        raise TypeError(f"success must be bool, not {type_name(success)}")
    end = utc_now() if ended_at is None else as_utc(_check_time(ended_at, "ended_at"))
    start = end if started_at is None else as_utc(_check_time(started_at, "started_at"))
    if start > end:
        raise ValueError(f"started_at must not be after ended_at, got {start} > {end}")
    return Episode.model_construct(
        id=uuid.uuid4().hex,
        trigger=check_identifier(trigger, "trigger"),
        input=check_json_value(input, "input"),
        messages=check_messages(messages),
        actions=check_actions(actions),
        outcome=EpisodeOutcome(
            success=success,
            output=check_json_value(output, "output"),
            error=_optional_str(error, "error"),
        ),
        started_at=start,
        ended_at=end,
        duration=(end - start).total_seconds(),
        rating=_check_rating(rating),
        comment=_optional_str(comment, "comment"),
        agent_id=check_identifier(agent_id, "agent_id"),
        user_id=_optional_id(user_id, "user_id"),
        conversation_id=_optional_id(conversation_id, "conversation_id"),
    )


def check_messages(messages: object) -> list[dict[str, Any]]:
    """Messages as JSON objects: pydantic-ai messages are serialised, dicts must be plain JSON.

    Raises:
        TypeError: Not a sequence, or an item neither a pydantic-ai message nor a dict.
    """
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse

    items = _sequence(messages, "messages")
    found: list[dict[str, Any]] = []
    for i, message in enumerate(items):
        if isinstance(message, ModelRequest | ModelResponse):
            found.extend(ModelMessagesTypeAdapter.dump_python([message], mode="json"))
        elif isinstance(message, dict):
            found.append(check_json_value(message, f"messages[{i}]"))
        else:
            raise TypeError(
                f"messages[{i}] must be a pydantic-ai message or dict, not {type_name(message)}"
            )
    return found


def check_actions(actions: object) -> list[dict[str, Any]]:
    """Actions as plain JSON dicts, each naming its ``"tool"``.

    Raises:
        TypeError: Not a sequence of dicts, a ``"tool"`` that is not a ``str``, ``"args"``
            that is not a dict, or a value that is not plain JSON.
        ValueError: An empty tool name.
    """
    found: list[dict[str, Any]] = []
    for i, action in enumerate(_sequence(actions, "actions")):
        if not isinstance(action, dict):
            raise TypeError(f"actions[{i}] must be dict, not {type_name(action)}")
        check_identifier(action.get("tool"), f"actions[{i}]['tool']")
        args = action.get("args", {})
        if not isinstance(args, dict):
            raise TypeError(f"actions[{i}]['args'] must be dict, not {type_name(args)}")
        found.append(check_json_value(dict(action), f"actions[{i}]"))
    return found


def run_actions(
    messages: Iterable[ModelMessage], *, skip_tool: str | None = None
) -> list[dict[str, Any]]:
    """The tool calls of ``messages``, in call order, each with the return that answered it."""
    from pydantic_ai.messages import RetryPromptPart, ToolCallPart, ToolReturnPart

    actions: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name != skip_tool:
                action = {
                    "tool": part.tool_name,
                    "args": to_jsonable_python(part.args_as_dict(), fallback=str),
                    "result": None,
                    "tool_call_id": part.tool_call_id,
                    "outcome": None,
                }
                actions.append(action)
                by_call[part.tool_call_id] = action
            elif isinstance(part, ToolReturnPart) and part.tool_call_id in by_call:
                answered = by_call[part.tool_call_id]
                answered["result"] = to_jsonable_python(part.content, fallback=str)
                answered["outcome"] = part.outcome
            elif isinstance(part, RetryPromptPart) and part.tool_call_id in by_call:
                answered = by_call[part.tool_call_id]
                answered["result"] = part.model_response()
                answered["outcome"] = "retried"
    return actions


def run_timing(messages: list[ModelMessage]) -> tuple[datetime | None, datetime | None]:
    """The span of the messages' (and their parts') timestamps; ``(None, None)`` without any."""
    stamps: list[datetime] = []
    for message in messages:
        if message.timestamp is not None:
            stamps.append(message.timestamp)
        stamps.extend(
            stamp for part in message.parts if (stamp := getattr(part, "timestamp", None))
        )
    if not stamps:
        return None, None
    return min(stamps), max(stamps)


def first_prompt(messages: list[ModelMessage]) -> Any:
    """The first user prompt of ``messages`` as JSON, or ``None``."""
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return to_jsonable_python(part.content, fallback=str)
    return None


def episode_entry(episode: Episode) -> tuple[MemoryEntry, Episode]:
    """The entry storing ``episode``, and the episode as it will be read back.

    Returned as read back (tuples become lists), so what a caller gets equals what a later
    read gives.
    """
    content = episode.model_dump(mode="json")
    entry = MemoryEntry(
        scope=MemoryScope.LONG_TERM,
        key=episode.id,
        content=content,
        metadata={SEARCH_TEXT: episode.search_text()},
        created_at=episode.ended_at,
    )
    return entry, Episode.model_validate(content)


def loaded_episodes(entries: list[MemoryEntry]) -> list[Episode]:
    """Stored episodes, most recent first; insertion order breaks ties, the later first."""
    found = [Episode.model_validate(e.content) for e in reversed(entries) if e.key is not None]
    found.sort(key=lambda episode: episode.ended_at, reverse=True)
    return found


def _sequence(value: object, name: str) -> list[Any]:
    if isinstance(value, str | bytes | dict) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence, not {type_name(value)}")
    return list(value)


def _check_time(value: object, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be datetime or None, not {type_name(value)}")
    return value


def _check_rating(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"rating must be a number or None, not {type_name(value)}")
    if not math.isfinite(value):
        raise ValueError(f"rating must be finite, got {value!r}")
    return float(value)


def _optional_str(value: object, name: str) -> str | None:
    return None if value is None else check_str(value, name)


def _optional_id(value: object, name: str) -> str | None:
    return None if value is None else check_identifier(value, name)
