"""A view as text and as pydantic-ai messages: :func:`render`, :func:`to_model_messages`.

What a budget counts is exactly the text :func:`to_model_messages` sends, so a view cut to
``max_tokens`` costs what it says once it reaches the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from memlane._validate import type_name
from memlane.shared.constants import ASSISTANT_MESSAGE, USER_MESSAGE
from memlane.shared.message_builder import parse_timestamp
from memlane.tokens import TokenEstimator

__all__ = ["message_tokens", "render", "to_model_messages"]

Message = dict[str, Any]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def render(message: Message) -> str:
    """The text a message is sent as.

    A conversation message is its content; any other reads ``[<type> from <agent>] content``
    (``[global <type>] ...`` for a broadcast, ``phase <id>`` added where there is one), so a
    model told a worker's trace knows whose step each line is.
    """
    kind = message.get("type")
    content = _text(message.get("content", ""))
    if kind in (USER_MESSAGE, ASSISTANT_MESSAGE) and message.get("is_global") is not True:
        return content
    label = f"global {kind}" if message.get("is_global") is True else str(kind)
    agent = message.get("agent_key")
    if isinstance(agent, str):
        label += f" from {agent}"
    if message.get("phase_id") is not None:
        label += f", phase {_text(message['phase_id'])}"
    return f"[{label}] {content}"


def message_tokens(message: Message, estimator: TokenEstimator) -> int:
    """The exact tokens of a message as :func:`to_model_messages` sends it."""
    return estimator.estimate(render(message))


def to_model_messages(history: Iterable[Message]) -> list[ModelMessage]:
    """A view as pydantic-ai messages a worker agent can be run with (``message_history=``).

    ``assistant_message`` s become model responses; the conversation's user messages and
    every trace message (rendered by :func:`render`) become user-prompt parts, consecutive
    ones gathered into one request. Timestamps are the messages' own, so the same view gives
    equal messages every time.

    Raises:
        TypeError: An item of ``history`` is not a ``dict``.
    """
    result: list[ModelMessage] = []
    parts: list[UserPromptPart] = []
    for message in history:
        if not isinstance(message, dict):
            raise TypeError(f"history items must be dict, not {type_name(message)}")
        stamp = parse_timestamp(message.get("timestamp"))
        text = render(message)
        if message.get("type") == ASSISTANT_MESSAGE and message.get("is_global") is not True:
            if parts:
                result.append(ModelRequest(parts=parts))
                parts = []
            response = ModelResponse(parts=[TextPart(content=text)])
            if stamp is not None:
                response.timestamp = stamp
            result.append(response)
        elif stamp is not None:
            parts.append(UserPromptPart(content=text, timestamp=stamp))
        else:
            parts.append(UserPromptPart(content=text))
    if parts:
        result.append(ModelRequest(parts=parts))
    return result
