"""Memory for a pydantic-ai :class:`~pydantic_ai.Agent` you run yourself.

:func:`memory_history` trims each run's history as a
:class:`~pydantic_ai.capabilities.ProcessHistory` capability (pydantic-ai 2.x has no
``history_processors=``); :func:`store_run` and :func:`async_store_run` store the finished run
as one turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic_core
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from memlane.conversation import ConversationMemory
from memlane.manager import MemoryManager
from memlane.types import ConversationTurn

__all__ = ["async_store_run", "memory_history", "store_run"]


def _prompt_text(messages: Sequence[ModelMessage]) -> str:
    """The user's words in a run's messages (file and image inputs named by their URL)."""
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, UserPromptPart):
                continue
            if isinstance(part.content, str):
                texts.append(part.content)
                continue
            for item in part.content:
                if isinstance(item, str):
                    texts.append(item)
                elif (url := getattr(item, "url", None)) is not None:
                    texts.append(str(url))
    return "\n".join(texts)


def _output_text(output: object) -> str:
    """A run's output as the turn's ``assistant_response``: text as is, anything else as JSON."""
    if isinstance(output, str):
        return output
    return pydantic_core.to_json(output, fallback=str).decode()


def _turn_args(result: AgentRunResult[Any]) -> tuple[str, str, list[ModelMessage]]:
    # new_messages(), never all_messages(): a ProcessHistory capability replaces the run's
    # history with the trimmed one, so all_messages() would store a trimmed copy of old turns.
    messages = list(result.new_messages())
    return _prompt_text(messages), _output_text(result.output), messages


def store_run(
    memory: MemoryManager | ConversationMemory,
    conversation_id: str,
    result: AgentRunResult[Any],
    *,
    metadata: dict[str, Any] | None = None,
) -> ConversationTurn:
    """Stores a finished pydantic-ai run as one turn of a conversation.

    The turn holds the run's ``new_messages()`` (tool calls and returns included); its
    ``user_prompt`` is the prompt's text and its ``assistant_response`` the output (as JSON
    when it is not a string).

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation; an unknown id starts it.
        result: The run, e.g. ``agent.run_sync(...)``.
        metadata: Free-form annotations stored with the turn.

    Returns:
        The stored turn.
    """
    return memory.add_turn(conversation_id, *_turn_args(result), metadata=metadata)


async def async_store_run(
    memory: MemoryManager | ConversationMemory,
    conversation_id: str,
    result: AgentRunResult[Any],
    *,
    metadata: dict[str, Any] | None = None,
) -> ConversationTurn:
    """Async :func:`store_run`: an async summarizer is awaited, store I/O kept off the loop.

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation; an unknown id starts it.
        result: The run, e.g. ``await agent.run(...)``.
        metadata: Free-form annotations stored with the turn.

    Returns:
        The stored turn.
    """
    return await memory.async_add_turn(conversation_id, *_turn_args(result), metadata=metadata)


def memory_history(
    memory: MemoryManager | ConversationMemory, conversation_id: str
) -> ProcessHistory[Any]:
    """The conversation's budgeted history as a pydantic-ai ``ProcessHistory`` capability.

    Before every model request of a run, whatever history the run carries from earlier runs is
    replaced by ``memory``'s history of ``conversation_id`` (summary first, then whole recent
    turns); the messages of the current run are kept. Pass it per run
    (``agent.run(prompt, capabilities=[memory_history(memory, cid)])``) or on the agent for one
    conversation, and store the run with :func:`store_run` / :func:`async_store_run`.

    pydantic-ai keeps the processed history as the run's own, so ``all_messages()`` of such a
    run is the trimmed history: store ``new_messages()`` (which :func:`store_run` does), never
    ``all_messages()``.

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation.

    Returns:
        The capability.

    Raises:
        ValueError: ``conversation_id`` is not a non-empty string.
    """
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"conversation_id must be a non-empty str, got {conversation_id!r}")

    async def replace_history(
        ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        # The run's own messages carry its run_id; everything else is history memory owns.
        current = [m for m in messages if m.run_id == ctx.run_id]
        return [*await memory.async_get_message_history(conversation_id), *current]

    return ProcessHistory(replace_history)
