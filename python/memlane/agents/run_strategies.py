"""What a :class:`~memlane.agents.MemoryAgent` adds around each run, beside its memory.

Before a run: the agent's short-term strategies shape the history the memory returns, the
knowledge base (when the memory's summarizer strategy has one searched ``"always"``) adds
what earlier summaries said, and a :class:`~memlane.agents.RequestBudget` keeps each request
of the run within the budget. After a run: the agent's own long-term strategy sees what the
run reported and folds the conversation through the memory.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, UserPromptPart
from pydantic_ai.run import AgentRunResult

from memlane.agents.calibration import Calibration
from memlane.agents.capability import _prompt_text
from memlane.agents.request_budget import RequestBudget
from memlane.conversation.agent_hooks import async_fold_by_strategy, fold_by_strategy
from memlane.conversation.strategies import check_long_term, check_short_term
from memlane.manager import MemoryManager
from memlane.strategies import (
    Interaction,
    LongTermStrategy,
    MemoryMaxTokensStrategy,
    ShortTermStrategy,
    SummarizerStrategy,
    group_interactions,
    message_token_counter,
    select_short_term,
    tool_outcomes,
)
from memlane.tokens import TokenEstimator

__all__ = ["RunStrategies"]

_SHORT_TERM_CACHES = 1024
"""Conversations whose short-term strategy caches an agent keeps (least recently used go)."""


class RunStrategies:
    """An agent's short-term and long-term strategies, budget and calibration.

    Args:
        memory: The agent's memory.
        short_term: Short-term strategies, one, a list or their JSON.
        long_term_strategy: A summarizer or neuralyzer strategy, or its JSON.
        calibrate: Keep a :class:`~memlane.agents.Calibration` in the memory's store.
        agent_model: The agent's own model (a summarizer strategy without one uses it).

    Raises:
        TypeError, ValueError: A bad strategy, or a summarizer strategy with no model
            anywhere.
    """

    def __init__(
        self,
        memory: MemoryManager,
        *,
        short_term: Any,
        long_term_strategy: Any,
        calibrate: object,
        agent_model: Any,
    ) -> None:
        self.memory = memory
        self.short_term: list[ShortTermStrategy] = check_short_term(short_term)
        self.long_term_strategy: LongTermStrategy | None = check_long_term(long_term_strategy)
        if not isinstance(calibrate, bool):
            raise TypeError(f"calibrate must be bool, not {type(calibrate).__name__}")
        self.calibration = Calibration(memory.store) if calibrate else None
        if (
            isinstance(self.long_term_strategy, SummarizerStrategy)
            and self.long_term_strategy.model is None
            and agent_model is None
            and memory.conversation.summarizer is None
        ):
            raise ValueError(
                "a SummarizerStrategy needs a model: set its model, give the agent one, or "
                "build the memory with a summarizer"
            )
        self.agent_model = agent_model
        estimator = memory.conversation.estimator
        self.estimator = estimator if isinstance(estimator, TokenEstimator) else TokenEstimator()
        self._count = message_token_counter(self.estimator)
        # Per conversation: the first message of the history the cache was built on, and the
        # short-term strategies' cache. Interactions are indexed by position, so a history
        # whose front moved (turns summarised, or out of the memory's window) starts anew.
        self._caches: OrderedDict[str, tuple[object, dict[Any, object]]] = OrderedDict()

    @property
    def max_tokens(self) -> int:
        """The budget of one whole request: the ``memory_max_tokens`` of the last
        :class:`~memlane.strategies.MemoryMaxTokensStrategy` of the agent's ``short_term``
        (else of the memory's) that sets one, else the memory's ``max_tokens``."""
        for strategies in (self.short_term, self.memory.conversation.short_term):
            limits = [
                s.memory_max_tokens
                for s in strategies
                if isinstance(s, MemoryMaxTokensStrategy) and s.memory_max_tokens > 0
            ]
            if limits:
                return limits[-1]
        return self.memory.conversation.max_tokens

    def history(self, cid: str, history: list[ModelMessage]) -> list[ModelMessage]:
        """The memory's history after the short-term strategies, the summary first."""
        if not self.short_term or not history:
            return history
        interactions = group_interactions(history, self._count)
        lead: list[Interaction] = []
        if interactions and not _opens_with_prompt(interactions[0].messages):
            lead, interactions = [interactions[0]], interactions[1:]
        front = interactions[0].messages[0] if interactions else None
        known = self._caches.pop(cid, None)
        cache = known[1] if known is not None and known[0] == front else {}
        self._caches[cid] = (front, cache)
        while len(self._caches) > _SHORT_TERM_CACHES:
            self._caches.popitem(last=False)
        kept = select_short_term(self.short_term, interactions, self._count, cache)
        return [m for interaction in [*lead, *kept] for m in interaction.messages]

    def budget(self, *, sync: bool) -> RequestBudget:
        """The capability that keeps each request of a run within :attr:`max_tokens`."""
        return RequestBudget(
            self.max_tokens, estimator=self.estimator, calibration=self.calibration, sync_store=sync
        )

    def _wants_knowledge(self) -> bool:
        strategy = self.memory.conversation.long_term_strategy
        return (
            isinstance(strategy, SummarizerStrategy)
            and strategy.knowledge_base is not None
            and strategy.knowledge_base.search_mode == "always"
        )

    def knowledge(self, cid: str, user_prompt: str | Sequence[Any] | None) -> str | None:
        """What the knowledge base holds relevant to the prompt, for the instructions."""
        if not self._wants_knowledge():
            return None
        return self.memory.conversation.knowledge_for(cid, _user_text(user_prompt))

    async def async_knowledge(
        self, cid: str, user_prompt: str | Sequence[Any] | None
    ) -> str | None:
        """Async :meth:`knowledge`."""
        if not self._wants_knowledge():
            return None
        return await self.memory.conversation.async_knowledge_for(cid, _user_text(user_prompt))

    def _fold_args(self, result: AgentRunResult[Any], model: Any) -> dict[str, Any]:
        messages = result.new_messages()
        return {
            "input_tokens": _peak_input_tokens(messages),
            "tool_outcomes": tool_outcomes(messages),
            "model": model if model is not None else self.agent_model,
        }

    def after_run(self, cid: str, result: AgentRunResult[Any], model: Any) -> None:
        """Runs the long-term strategy on what the run reported (``model``: the run's)."""
        if self.long_term_strategy is not None:
            fold_by_strategy(
                self.memory.conversation,
                cid,
                self.long_term_strategy,
                **self._fold_args(result, model),
            )

    async def async_after_run(self, cid: str, result: AgentRunResult[Any], model: Any) -> None:
        """Async :meth:`after_run`."""
        if self.long_term_strategy is not None:
            await async_fold_by_strategy(
                self.memory.conversation,
                cid,
                self.long_term_strategy,
                **self._fold_args(result, model),
            )


def _opens_with_prompt(messages: Sequence[ModelMessage]) -> bool:
    """Whether an interaction starts at a user prompt (not the summary before the first)."""
    first = messages[0]
    return isinstance(first, ModelRequest) and any(
        isinstance(p, UserPromptPart) for p in first.parts
    )


def _peak_input_tokens(messages: Sequence[ModelMessage]) -> int | None:
    """The most input tokens one request of a run reported: the largest context it sent.

    Not the run's total, which adds up every request of a tool loop although the model's
    context never held more than the largest of them.
    """
    reported = [
        m.usage.input_tokens
        for m in messages
        if isinstance(m, ModelResponse) and m.usage.input_tokens
    ]
    return max(reported) if reported else None


def _user_text(user_prompt: str | Sequence[Any] | None) -> str:
    if user_prompt is None:
        return ""
    if isinstance(user_prompt, str):
        return user_prompt
    return _prompt_text([ModelRequest(parts=[UserPromptPart(content=user_prompt)])])
