"""pydantic-ai messages as memlane sees them: the texts a request carries, the summary message,
and the compact form retained turns are kept in.

pydantic-ai is imported by the functions that build or decode its messages, the first time one
runs, not with this module: importing it loads the whole package (~0.5 s), which a process that
only ever stores strings never needs.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        UserPromptPart,
    )

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
"""Opens the system prompt that carries a rolling summary."""


def _content_texts(content: Any) -> Iterable[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, Sequence):
        for item in content:
            if isinstance(item, str):
                yield item
            elif (url := getattr(item, "url", None)) is not None:
                yield str(url)


def message_texts(messages: Iterable[ModelMessage]) -> list[str]:
    """Every piece of text a model is sent for these messages.

    Prompts, system prompts, text, thinking, tool-call names and arguments, tool returns and
    retry feedback all count: a turn's estimate must cover what the request will carry.
    """
    from pydantic_ai.messages import (
        BaseToolCallPart,
        BaseToolReturnPart,
        RetryFeedbackPart,
        RetryPromptPart,
    )

    texts: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                texts.append(part.tool_name)
                texts.append(part.args_as_json_str())
            elif isinstance(part, BaseToolReturnPart):
                texts.append(part.tool_name)
                texts.append(part.model_response_str())
            elif isinstance(part, RetryFeedbackPart | RetryPromptPart) and not isinstance(
                part.content, str
            ):
                texts.append(part.model_response())  # retry feedback with validation errors
            else:
                texts.extend(_content_texts(getattr(part, "content", None)))
    return texts


def summary_message(summary: str, created_at: datetime) -> ModelRequest:
    """The message that carries a rolling summary at the head of the history.

    Its timestamp is the summary's own, so the same history compares equal however often
    (and in whichever process) it is rebuilt.
    """
    from pydantic_ai.messages import ModelRequest, SystemPromptPart

    return ModelRequest(
        parts=[SystemPromptPart(content=SUMMARY_PREFIX + summary, timestamp=created_at)]
    )


@functools.cache
def _turn_message_types() -> tuple[
    type[ModelRequest], type[ModelResponse], type[TextPart], type[UserPromptPart]
]:
    """The classes of a turn's two messages, imported once: an import statement in
    :func:`default_messages` cost ~1 us per call, a third of building the messages."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    return ModelRequest, ModelResponse, TextPart, UserPromptPart


def default_messages(user_prompt: str, assistant_response: str, at: datetime) -> list[ModelMessage]:
    """The two messages of a turn given only as strings.

    Timestamps are the turn's, so rebuilding them later yields equal messages.
    """
    request, response, text, prompt = _turn_message_types()
    return [
        request(parts=[prompt(content=user_prompt, timestamp=at)]),
        response(parts=[text(content=assistant_response)], timestamp=at),
    ]


Frozen = tuple[bytes]
"""Messages frozen by :func:`freeze_messages`: their pickle, in a 1-tuple (which tells it from
JSON)."""


def freeze_messages(messages: list[ModelMessage]) -> Frozen | list[ModelMessage]:
    """Messages as one immutable ``bytes`` object, or the list itself if they cannot be pickled.

    The compact form of a turn that has left the history: strings and numbers, which Python's
    cyclic garbage collector stops tracking, where the live messages are a dozen tracked
    objects per turn. It never leaves the process that made it, so pickle is safe here, and
    at about a third of the cost of pydantic's JSON it keeps the exact objects (subclasses and
    values JSON would not round-trip included).
    """
    try:
        return (pickle.dumps(messages, pickle.HIGHEST_PROTOCOL),)
    except Exception:  # noqa: BLE001  # whatever a message's content raises: keep it live
        return messages


def unpack_messages(payload: bytes | str | Frozen | list[ModelMessage]) -> list[ModelMessage]:
    """The messages of a turn's record: its JSON (a turn read back from the store) or what
    :func:`freeze_messages` froze, as new objects; a list of live messages as a new list of
    the same objects."""
    if isinstance(payload, tuple):
        messages: list[ModelMessage] = pickle.loads(payload[0])  # noqa: S301  # made in-process
        return messages
    if isinstance(payload, bytes | str):
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        decoded: list[ModelMessage] = ModelMessagesTypeAdapter.validate_json(payload)
        return decoded
    return list(payload)


def messages_adapter() -> TypeAdapter[list[ModelMessage]]:
    """pydantic-ai's ``ModelMessagesTypeAdapter`` (imported on first use)."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter
