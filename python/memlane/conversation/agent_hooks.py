"""A long-term strategy run by an agent over a :class:`~memlane.ConversationMemory`.

A memory's own ``long_term_strategy`` is checked after every turn it stores. An agent may
bring its own (``MemoryAgent(long_term=SummarizerStrategy(...))``): after each run its
triggers are evaluated with what that run reported (input tokens, tool outcomes), and the
interactions it folds go through the memory's conditional summary commit, exactly as the
memory's own strategy's would: summarised by chain of density (with the agent's model when
the strategy names none), or erased by a neuralyzer.
"""

from __future__ import annotations

import logging
from typing import Any

from memlane._runner import Plan, Summarize, run_async, run_sync
from memlane.conversation.applied_strategies import DensitySummarizer
from memlane.conversation.conversation_cache import check_cid
from memlane.conversation.conversation_memory import ConversationMemory
from memlane.strategies import (
    Interaction,
    LongTermPlan,
    LongTermStrategy,
    NeuralyzerStrategy,
    SummarizerStrategy,
    ToolOutcomes,
    plan_long_term,
)

__all__ = ["async_fold_by_strategy", "fold_by_strategy"]

logger = logging.getLogger("memlane")


def _fold_plan(
    memory: ConversationMemory,
    cid: str,
    strategy: LongTermStrategy,
    input_tokens: int | None,
    outcomes: ToolOutcomes,
) -> Plan[LongTermPlan]:
    yield from memory._conversations.locked(cid)
    state = yield from memory._conversations.coherent_plan(cid, create=False)
    if state is None:
        return LongTermPlan(())
    first = state.summarized_turns
    interactions = [
        Interaction(state.messages(i), first + i, record[3])
        for i, record in enumerate(state.records)
    ]
    plan = plan_long_term(
        strategy,
        interactions,
        input_tokens=input_tokens,
        tool_outcomes=outcomes,
        count_tokens=memory._reads.counter.count_messages,
    )
    if not plan.fired:
        return plan
    count = len(plan.fold)
    summary: str | None = None
    if isinstance(strategy, SummarizerStrategy):
        # The lock is held while the model summarises: another turn of this conversation
        # waits rather than being folded by a summary that never saw it.
        try:
            summary = yield Summarize(memory._summaries.summary_input(state, count))
        except Exception:  # noqa: BLE001  # a failing summarizer must never lose a turn
            logger.warning("memlane: summarizer failed; turns kept unsummarised", exc_info=True)
            return LongTermPlan(())
        if not isinstance(summary, str):
            raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
    basis = (state, state.summarized_turns, tuple(state.entry_ids)[:count])
    committed = yield from memory._summaries.commit_plan(cid, basis, count, summary, strategy)
    return plan if committed else LongTermPlan(())


def _summarizer(memory: ConversationMemory, strategy: LongTermStrategy, model: Any) -> Any:
    if not isinstance(strategy, SummarizerStrategy):
        return None
    if strategy.model is None and model is None:
        return memory.summarizer
    return DensitySummarizer(strategy, model)


def _check(
    strategy: object, conversation_id: object, input_tokens: object
) -> tuple[LongTermStrategy, str]:
    if not isinstance(strategy, SummarizerStrategy | NeuralyzerStrategy):
        raise TypeError(
            "strategy must be SummarizerStrategy or NeuralyzerStrategy, "
            f"not {type(strategy).__name__}"
        )
    if input_tokens is not None and (
        isinstance(input_tokens, bool) or not isinstance(input_tokens, int)
    ):
        raise TypeError(f"input_tokens must be int or None, not {type(input_tokens).__name__}")
    return strategy, check_cid(conversation_id)


def fold_by_strategy(
    memory: ConversationMemory,
    conversation_id: str,
    strategy: LongTermStrategy,
    *,
    input_tokens: int | None = None,
    tool_outcomes: ToolOutcomes | None = None,
    model: Any = None,
) -> LongTermPlan:
    """Runs a long-term strategy on a conversation now, with what the last run reported.

    Args:
        memory: The conversation's memory.
        conversation_id: The conversation (an unknown one: nothing happens).
        strategy: A :class:`~memlane.strategies.SummarizerStrategy` or
            :class:`~memlane.strategies.NeuralyzerStrategy`.
        input_tokens: The last run's reported input tokens.
        tool_outcomes: The last run's tools (:func:`~memlane.strategies.tool_outcomes`).
        model: The model a summarizer strategy without ``model`` summarises with; ``None``:
            the memory's summarizer.

    Returns:
        What the strategy did: ``plan.fired`` and the interactions it folded. A summary that
        lost to another host's is not committed and the plan returned is empty.

    Raises:
        TypeError: Not a long-term strategy, or a bad argument.
        ValueError: A summarizer strategy with no model anywhere.
    """
    strategy, cid = _check(strategy, conversation_id, input_tokens)
    summarizer = _summarizer(memory, strategy, model)
    if isinstance(strategy, SummarizerStrategy) and summarizer is None:
        raise ValueError("a SummarizerStrategy needs a model: set its model or the agent's")
    outcomes = tool_outcomes if tool_outcomes is not None else ToolOutcomes()
    plan = _fold_plan(memory, cid, strategy, input_tokens, outcomes)
    return run_sync(plan, memory.store, summarizer)


async def async_fold_by_strategy(
    memory: ConversationMemory,
    conversation_id: str,
    strategy: LongTermStrategy,
    *,
    input_tokens: int | None = None,
    tool_outcomes: ToolOutcomes | None = None,
    model: Any = None,
) -> LongTermPlan:
    """Async :func:`fold_by_strategy`: the model and the store awaited."""
    strategy, cid = _check(strategy, conversation_id, input_tokens)
    summarizer = _summarizer(memory, strategy, model)
    if isinstance(strategy, SummarizerStrategy) and summarizer is None:
        raise ValueError("a SummarizerStrategy needs a model: set its model or the agent's")
    outcomes = tool_outcomes if tool_outcomes is not None else ToolOutcomes()
    plan = _fold_plan(memory, cid, strategy, input_tokens, outcomes)
    return await run_async(plan, memory.store, summarizer)
