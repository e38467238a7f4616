"""Budgets that count everything a model request carries.

A conversation's history is budgeted by the memory, but a request also carries the
instructions (the agent's, the run's, and the working-memory and long-term context memlane
adds), the definitions of every tool the run offers (name, description, JSON schema) and
the run's own messages. :class:`RequestBudget` is a pydantic-ai capability that, just before
each model request, counts all of it with memlane's estimator and drops history
interactions oldest-first, whole, until the request fits: a tool call never travels without
its return, and the summary leads (it is dropped only when no interaction is left to drop).

With a :class:`~memlane.agents.Calibration`, counts are scaled by the serving model's
ratio, and each response's reported ``input_tokens`` refines that ratio (responses of
pydantic-ai's offline models, whose usage is a guess, are not observed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
from pydantic_ai.tools import RunContext, ToolDefinition

from memlane._validate import check_positive_int
from memlane.agents.calibration import Calibration
from memlane.messages import message_texts
from memlane.strategies import Interaction, group_interactions
from memlane.tokens import TokenEstimator

__all__ = ["RequestBudget", "RequestCount", "count_request"]

logger = logging.getLogger("memlane")

_ESTIMATING_PROVIDERS = frozenset({None, "test"})
"""Providers of responses whose usage is pydantic-ai's guess, not a tokenizer's count: its
offline ``FunctionModel`` (no provider) and ``TestModel``. Calibrating on them would learn the
guess (about 50 tokens for any request), so they are not observed."""


def _tool_texts(tools: Sequence[ToolDefinition]) -> list[str]:
    texts: list[str] = []
    for tool in tools:
        texts.append(tool.name)
        if tool.description:
            texts.append(tool.description)
        texts.append(json.dumps(tool.parameters_json_schema, separators=(",", ":")))
    return texts


@dataclass(frozen=True, slots=True)
class RequestCount:
    """What one model request carries, in memlane's tokens (before calibration).

    Attributes:
        instructions: The instructions, joined as pydantic-ai joins them.
        tools: The function and output tool definitions.
        messages: The messages (history and the run's own).
    """

    instructions: int
    tools: int
    messages: int

    @property
    def total(self) -> int:
        """Everything the request carries."""
        return self.instructions + self.tools + self.messages


def _count(estimator: TokenEstimator, texts: list[str]) -> int:
    return sum(estimator._estimate_texts(texts)) if texts else 0


def _fixed_texts(parameters: ModelRequestParameters) -> tuple[list[str], list[str]]:
    parts = parameters.instruction_parts or []
    instructions = "\n\n".join(part.content for part in parts if part.content)
    tools = _tool_texts([*parameters.function_tools, *parameters.output_tools])
    return ([instructions] if instructions else []), tools


def count_request(
    messages: Sequence[ModelMessage],
    parameters: ModelRequestParameters,
    estimator: TokenEstimator | None = None,
) -> RequestCount:
    """Counts a model request: its instructions, tool definitions and messages.

    Args:
        messages: The messages sent.
        parameters: The request's parameters (``request_context.model_request_parameters``
            in a capability hook), which carry the instructions and the tools.
        estimator: The counter (exact o200k by default).

    Returns:
        The counts.
    """
    counter = estimator if estimator is not None else TokenEstimator()
    instructions, tools = _fixed_texts(parameters)
    return RequestCount(
        _count(counter, instructions),
        _count(counter, tools),
        _count(counter, message_texts(messages)),
    )


@dataclass
class RequestBudget(AbstractCapability[Any]):
    """A capability keeping every model request of a run within ``max_tokens``.

    Before each request, the history (the messages not of this run) is cut from its oldest
    interaction, whole, until instructions + tool definitions + history + the run's own
    messages fit, scaled by the serving model's calibration ratio. Only the request is cut:
    the run's history is left as it was. When the run's own part does not fit even without
    history, no history is sent and a warning says so.

    Args:
        max_tokens: The budget of one whole request.
        estimator: Counts tokens (exact o200k by default).
        calibration: Scales counts per model and learns from reported usage; ``None``:
            counts are used as they are.
        sync_store: Read and write the calibration through the store's blocking methods
            in a worker thread (for runs made with ``run_sync``, whose store calls are the
            sync ones), instead of awaiting its async methods.
    """

    max_tokens: int
    estimator: TokenEstimator = field(default_factory=TokenEstimator)
    calibration: Calibration | None = None
    sync_store: bool = False
    _pending: int = field(default=0, init=False, repr=False)  # the count of the request in flight
    # Each message's count, by id for the run's lifetime: the entry holds the message, so
    # its id cannot be handed to another while the entry exists.
    _counts: dict[int, tuple[ModelMessage, int]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        check_positive_int(self.max_tokens, "max_tokens")

    async def for_run(self, ctx: RunContext[Any]) -> RequestBudget:
        # One instance per run: the count in flight belongs to a run.
        return dataclasses.replace(self)

    def _tokens(self, messages: Sequence[ModelMessage]) -> int:
        """The messages' tokens, each message counted once per run."""
        total = 0
        for message in messages:
            known = self._counts.get(id(message))
            if known is None or known[0] is not message:
                known = (message, _count(self.estimator, message_texts([message])))
                self._counts[id(message)] = known
            total += known[1]
        return total

    async def _ratio(self, model_name: str) -> float:
        if self.calibration is None:
            return 1.0
        if self.sync_store:
            return await asyncio.to_thread(self.calibration.ratio, model_name)
        return await self.calibration.async_ratio(model_name)

    async def _observe(self, model_name: str, counted: int, reported: int) -> None:
        assert self.calibration is not None
        if self.sync_store:
            await asyncio.to_thread(
                self.calibration.observe, model_name, counted=counted, reported=reported
            )
        else:
            await self.calibration.async_observe(model_name, counted=counted, reported=reported)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        messages = list(request_context.messages)
        split = next((i for i, m in enumerate(messages) if m.run_id == ctx.run_id), len(messages))
        history, own = messages[:split], messages[split:]
        instructions, tools = _fixed_texts(request_context.model_request_parameters)
        fixed = _count(self.estimator, [*instructions, *tools]) + self._tokens(own)
        ratio = await self._ratio(request_context.model.model_name)
        # The most tokens whose scaled count still fits: tokens * ratio <= max_tokens.
        room = math.floor(self.max_tokens / ratio) - fixed
        kept = _fit_history(history, room, self._tokens)
        if room < 0:
            logger.warning(
                "memlane: a request's instructions, tools and messages of the run take %d "
                "tokens (x%.2f calibration), over the budget of %d: no history sent",
                fixed,
                ratio,
                self.max_tokens,
            )
        request_context.messages = [*kept, *own]
        self._pending = fixed + self._tokens(kept)
        return request_context

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        model_name = request_context.model.model_name
        reported = response.usage.input_tokens
        if (
            self.calibration is not None
            and reported > 0
            and self._pending > 0
            and response.provider_name not in _ESTIMATING_PROVIDERS
        ):
            await self._observe(model_name, self._pending, reported)
        return response


def _fit_history(
    history: list[ModelMessage], room: int, count: Callable[[Sequence[ModelMessage]], int]
) -> list[ModelMessage]:
    """The newest whole interactions of ``history`` that fit ``room``, the summary first."""
    if not history or room <= 0:
        return []
    merged, history = _split_summary(history)
    interactions = group_interactions(history, count)
    lead: list[Interaction] = []
    # Messages before the first prompt (the summary) lead, and are dropped last.
    if interactions and not _starts_with_prompt(interactions[0].messages):
        lead, interactions = [interactions[0]], interactions[1:]
    total = sum(i.tokens or 0 for i in [*lead, *interactions])
    while interactions and total > room:
        total -= interactions.pop(0).tokens or 0
    if total > room:
        return []
    kept = [m for i in [*lead, *interactions] for m in i.messages]
    if merged is not None and len(kept) > 1 and kept[1] is history[1]:
        kept[:2] = [merged]  # both halves kept: the request as pydantic-ai made it
    return kept


def _split_summary(history: list[ModelMessage]) -> tuple[ModelMessage | None, list[ModelMessage]]:
    """``history`` with leading system prompts (the summary) as a request of their own.

    pydantic-ai merges adjacent requests, so the summary arrives in one request with the
    oldest turn's prompt; split, the summary can lead while that turn is left out. Returns
    the merged request (``None`` when there was nothing to split) and the history.
    """
    first = history[0]
    if not isinstance(first, ModelRequest):
        return None, history
    lead = 0
    while lead < len(first.parts) and isinstance(first.parts[lead], SystemPromptPart):
        lead += 1
    if lead == 0 or lead == len(first.parts):
        return None, history
    summary = dataclasses.replace(first, parts=first.parts[:lead])
    rest = dataclasses.replace(first, parts=first.parts[lead:])
    return first, [summary, rest, *history[1:]]


def _starts_with_prompt(messages: Sequence[ModelMessage]) -> bool:
    first = messages[0] if messages else None
    return isinstance(first, ModelRequest) and any(
        isinstance(p, UserPromptPart) for p in first.parts
    )
