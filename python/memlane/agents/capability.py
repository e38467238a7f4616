"""Memory for a pydantic-ai :class:`~pydantic_ai.Agent` you run yourself.

:func:`memory_history` trims each run's history as a
:class:`~pydantic_ai.capabilities.ProcessHistory` capability (pydantic-ai 2.x has no
``history_processors=``) and keeps each whole request within the budget;
:func:`store_run` and :func:`async_store_run` store the finished run as one turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from memlane._validate import check_positive_int
from memlane.agents.calibration import Calibration
from memlane.agents.request_budget import RequestBudget
from memlane.conversation import ConversationMemory
from memlane.manager import MemoryManager
from memlane.tokens import TokenEstimator
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


@dataclass
class _MemoryHistory(ProcessHistory[Any]):
    """The memory's history, then the whole request cut to the budget."""

    budget: RequestBudget | None = None

    async def for_run(self, ctx: RunContext[Any]) -> _MemoryHistory:
        assert self.budget is not None
        return dataclasses.replace(self, budget=await self.budget.for_run(ctx))

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        assert self.budget is not None
        request_context = await super().before_model_request(ctx, request_context)
        return await self.budget.before_model_request(ctx, request_context)

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        assert self.budget is not None
        return await self.budget.after_model_request(
            ctx, request_context=request_context, response=response
        )


def memory_history(
    memory: MemoryManager | ConversationMemory,
    conversation_id: str,
    *,
    max_tokens: int | None = None,
    calibrate: bool = True,
) -> ProcessHistory[Any]:
    """The conversation's budgeted history as a pydantic-ai ``ProcessHistory`` capability.

    Before every model request of a run, whatever history the run carries from earlier runs is
    replaced by ``memory``'s history of ``conversation_id`` (summary first, then whole recent
    turns); the messages of the current run are kept. The whole request — instructions, tool
    definitions, that history and the run's own messages — is then kept within
    ``max_tokens``: the oldest turns, whole, are left out of the request until it fits (see
    :class:`~memlane.agents.RequestBudget`). Pass it per run
    (``agent.run(prompt, capabilities=[memory_history(memory, cid)])``) or on the agent for one
    conversation, and store the run with :func:`store_run` / :func:`async_store_run`.

    pydantic-ai keeps the processed history as the run's own, so ``all_messages()`` of such a
    run is the trimmed history: store ``new_messages()`` (which :func:`store_run` does), never
    ``all_messages()``.

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation.
        max_tokens: The budget of each whole request; ``None``: the memory's ``max_tokens``.
        calibrate: Scale counts by the serving model's ratio of reported to counted tokens,
            learnt from every response and kept in the memory's store (see
            :class:`~memlane.agents.Calibration`).

    Returns:
        The capability.

    Raises:
        ValueError: ``conversation_id`` is not a non-empty string, or ``max_tokens`` is not
            positive.
        TypeError: ``max_tokens`` is not an ``int`` or ``calibrate`` not a ``bool``.
    """
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"conversation_id must be a non-empty str, got {conversation_id!r}")
    if not isinstance(calibrate, bool):
        raise TypeError(f"calibrate must be bool, not {type(calibrate).__name__}")
    conversation = memory.conversation if isinstance(memory, MemoryManager) else memory
    budget = (
        conversation.max_tokens
        if max_tokens is None
        else check_positive_int(max_tokens, "max_tokens")
    )
    estimator = conversation.estimator

    async def replace_history(
        ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        # The run's own messages carry its run_id; everything else is history memory owns.
        current = [m for m in messages if m.run_id == ctx.run_id]
        return [*await memory.async_get_message_history(conversation_id), *current]

    return _MemoryHistory(
        replace_history,
        budget=RequestBudget(
            budget,
            estimator=estimator if isinstance(estimator, TokenEstimator) else TokenEstimator(),
            calibration=Calibration(conversation.store) if calibrate else None,
        ),
    )
