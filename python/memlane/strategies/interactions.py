"""Interactions: a user prompt and every assistant and tool message after it, the unit that
strategies keep, drop, clear, summarise or erase.

A memlane turn (:class:`~memlane.ConversationTurn`) is an interaction already;
:func:`interactions_from_turns` wraps stored turns and :func:`group_interactions` splits a
flat pydantic-ai history at its user prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    UserPromptPart,
)

from memlane.messages import default_messages, message_texts
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn

__all__ = [
    "CountTokens",
    "Interaction",
    "Role",
    "ToolOutcomes",
    "group_interactions",
    "interactions_from_turns",
    "message_token_counter",
    "part_content",
    "part_role",
    "part_tool_call_id",
    "part_tool_name",
    "tool_outcomes",
    "with_parts",
]

Role = Literal["user", "assistant", "tool", "system"]
"""What ``message.role`` says of a message part in a condition."""

CountTokens = Callable[[Sequence[ModelMessage]], int]
"""Counts the tokens a model request carries for some messages."""

ModelPart = object
"""A part of a :class:`ModelRequest` or :class:`ModelResponse` (pydantic-ai has many kinds)."""


@dataclass(frozen=True, slots=True)
class Interaction:
    """One user prompt and every assistant and tool message after it, until the next prompt.

    Attributes:
        messages: The interaction's pydantic-ai messages, oldest first.
        index: Its 0-based position in the conversation (a turn's ``turn_id``).
        tokens: What its messages cost in a request; ``None`` until counted.
    """

    messages: Sequence[ModelMessage]
    index: int = 0
    tokens: int | None = field(default=None, compare=False)

    def counted(self, count_tokens: CountTokens) -> Interaction:
        """This interaction with ``tokens`` set (itself when they are known already).

        Args:
            count_tokens: Counts the messages when ``tokens`` is ``None``.

        Returns:
            An interaction whose ``tokens`` is an ``int``.
        """
        if self.tokens is not None:
            return self
        return Interaction(self.messages, self.index, count_tokens(self.messages))

    def token_count(self, count_tokens: CountTokens) -> int:
        """``tokens``, counted with ``count_tokens`` when not known yet."""
        return self.tokens if self.tokens is not None else count_tokens(self.messages)


def message_token_counter(estimator: TokenEstimator | None = None) -> CountTokens:
    """A :data:`CountTokens` that counts as memlane counts a turn's ``token_estimate``.

    Every text the request carries is counted (:func:`memlane.messages.message_texts`):
    prompts, answers, tool names, arguments and results.

    Args:
        estimator: The counter; by default an exact o200k :class:`~memlane.TokenEstimator`
            on the active implementation.

    Returns:
        The counting function.
    """
    counter = estimator if estimator is not None else TokenEstimator()

    def count_tokens(messages: Sequence[ModelMessage]) -> int:
        return sum(counter._estimate_texts(message_texts(messages)))

    return count_tokens


def with_parts(message: ModelMessage, parts: Sequence[Any]) -> ModelMessage:
    """A copy of ``message`` carrying ``parts`` (parts of its own kind: request or response)."""
    # One branch per kind: mypy checks ``replace`` against a message kind only once narrowed.
    if isinstance(message, ModelRequest):
        return dataclasses.replace(message, parts=list(parts))
    return dataclasses.replace(message, parts=list(parts))


def interactions_from_turns(turns: Iterable[ConversationTurn]) -> list[Interaction]:
    """Stored turns as interactions: their raw messages, ``turn_id`` and ``token_estimate``.

    A turn stored as two strings (no raw messages) becomes its prompt and its answer.

    Args:
        turns: The turns, oldest first.

    Returns:
        One interaction per turn.
    """
    return [
        Interaction(
            messages=turn.raw_messages
            or default_messages(turn.user_prompt, turn.assistant_response, turn.timestamp),
            index=turn.turn_id,
            tokens=turn.token_estimate,
        )
        for turn in turns
    ]


def _has_user_prompt(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(part, UserPromptPart) for part in message.parts
    )


def group_interactions(
    messages: Sequence[ModelMessage], count_tokens: CountTokens | None = None
) -> list[Interaction]:
    """A flat history split into interactions, each starting at a request with a user prompt.

    Messages before the first user prompt (a system prompt on its own, a summary) form an
    interaction of their own.

    Args:
        messages: The history, oldest first (e.g. a run's ``all_messages()``).
        count_tokens: When given, each interaction's ``tokens`` is counted with it.

    Returns:
        The interactions, indexed from 0.
    """
    groups: list[list[ModelMessage]] = []
    for message in messages:
        if not groups or _has_user_prompt(message):
            groups.append([])
        groups[-1].append(message)
    return [
        Interaction(group, i, None if count_tokens is None else count_tokens(group))
        for i, group in enumerate(groups)
    ]


def part_role(part: ModelPart) -> Role:
    """``message.role`` of a part.

    ``user`` for user prompts; ``assistant`` for text, thinking and the other content a model
    produces; ``tool`` for tool calls, tool returns and retry prompts; ``system`` for system
    prompts and the harness's own parts (instruction or capability changes, compactions).
    """
    if isinstance(part, UserPromptPart):
        return "user"
    if isinstance(
        part, BaseToolCallPart | BaseToolReturnPart | RetryPromptPart | RetryFeedbackPart
    ):
        return "tool"
    if isinstance(part, TextPart | ThinkingPart) or getattr(part, "part_kind", "") in (
        "file",
        "speech",
    ):
        return "assistant"
    return "system"


def part_content(part: ModelPart) -> str:
    """``message.content`` of a part: the text the model is sent for it.

    A tool call's arguments as JSON, a tool return's result as the model sees it, a prompt's
    text (multimodal items by URL), ``""`` for parts without text.
    """
    if isinstance(part, BaseToolCallPart):
        return part.args_as_json_str()
    if isinstance(part, BaseToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart | RetryFeedbackPart):
        return part.content if isinstance(part.content, str) else part.model_response()
    if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
        return "\n".join(message_texts([ModelRequest(parts=[part])]))
    content = getattr(part, "content", None)
    return content if isinstance(content, str) else ""


def part_tool_name(part: ModelPart) -> str:
    """``message.tool_name`` of a part: the tool it calls or answers, ``""`` when none."""
    name = getattr(part, "tool_name", None)
    return name if isinstance(name, str) else ""


def part_tool_call_id(part: ModelPart) -> str | None:
    """The id that pairs a tool call with its return (or retry prompt); ``None`` otherwise."""
    if isinstance(part, BaseToolCallPart | BaseToolReturnPart) or (
        isinstance(part, RetryPromptPart) and part.tool_name is not None
    ):
        return part.tool_call_id
    return None


@dataclass(frozen=True, slots=True)
class ToolOutcomes:
    """Which tools succeeded and which failed in a run, for the ``on_tools_*`` triggers.

    Attributes:
        succeeded: Names of tools with at least one successful return.
        failed: Names of tools with at least one failed or retried return.
    """

    succeeded: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()


def tool_outcomes(messages: Iterable[ModelMessage]) -> ToolOutcomes:
    """The tool outcomes of a run, read from its new messages.

    A return whose ``outcome`` is ``"success"`` counts as a success; ``"failed"`` and
    ``"retried"`` (the tool asked the model to try again), and legacy retry prompts, count as
    errors. Denied and interrupted calls are neither.

    Args:
        messages: The run's messages (``result.new_messages()``).

    Returns:
        The names of the tools that succeeded and of those that failed.
    """
    succeeded: set[str] = set()
    failed: set[str] = set()
    for message in messages:
        if not isinstance(message, ModelRequest | ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, BaseToolReturnPart):
                outcome = getattr(part, "outcome", "success")
                if outcome == "success":
                    succeeded.add(part.tool_name)
                elif outcome in ("failed", "retried"):
                    failed.add(part.tool_name)
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                failed.add(part.tool_name)
    return ToolOutcomes(frozenset(succeeded), frozenset(failed))
