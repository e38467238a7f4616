"""A long-term strategy run by an agent over a :class:`~memlane.ConversationMemory`.

A memory's own ``long_term_strategy`` is checked after every turn it stores. An agent may
bring its own (``MemoryAgent(long_term=SummarizerStrategy(...))``): after each run its
triggers are evaluated with what that run reported (input tokens, tool outcomes), and the
interactions it folds go through the memory's conditional summary commit, exactly as the
memory's own strategy's would: summarised by chain of density (with the agent's model when
the strategy names none), or erased by a neuralyzer.

The fold is one plan (:func:`_fold_plan`), prepared with its store and summarizer by
:func:`_fold`; :func:`fold_by_strategy` runs it with the sync runner and
:func:`async_fold_by_strategy` with the async one, both generated from :func:`_fold`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar

from memlane._runner import Plan, Summarize, Summarizer, run_async, run_sync
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


T = TypeVar("T")
P = ParamSpec("P")
F = TypeVar("F", bound=Callable[..., Any])


class _Run(NamedTuple, Generic[T]):
    """A plan with what a runner needs to run it: the store and the summarizer."""

    plan: Plan[T]
    store: Any
    summarizer: Summarizer | None


def _describe(run: F, prepare: Callable[..., Any], name: str) -> F:
    """Gives a generated function its public name and ``prepare``'s signature, returning
    what the plan returns."""
    run.__module__, run.__doc__ = prepare.__module__, prepare.__doc__
    signature = inspect.signature(prepare)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("_Run[") and returns.endswith("]"):
        returns = returns[len("_Run[") : -1]
    run.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]  # a function's signature is settable; mypy does not know the attribute
    run.__name__ = run.__qualname__ = name
    return run


def _blocking(prepare: Callable[P, _Run[T]]) -> Callable[P, T]:
    """The function that runs what ``prepare`` returns with the sync runner."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(*prepare(*args, **kwargs))

    return _describe(run, prepare, prepare.__name__.lstrip("_"))


def _awaiting(prepare: Callable[P, _Run[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """The coroutine function that runs what ``prepare`` returns with the async runner."""
    name = prepare.__name__.lstrip("_")

    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return await run_async(*prepare(*args, **kwargs))

    run = _describe(run, prepare, f"async_{name}")
    run.__doc__ = f"Async :func:`{name}`: the same plan, the model and the store awaited."
    return run


def _fold_plan(
    memory: ConversationMemory,
    cid: str,
    strategy: LongTermStrategy,
    input_tokens: int | None,
    outcomes: ToolOutcomes,
    summarizer: Summarizer | None,
) -> Plan[LongTermPlan]:
    conversations, summaries = memory._conversations, memory._summaries
    yield from conversations.locked(cid)
    state = yield from conversations.coherent_plan(cid, create=False)
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
    turns = summaries.summary_input(state, count)
    if isinstance(strategy, SummarizerStrategy):
        summary = state.summary  # only pins to pass over: the summary stays
    if isinstance(strategy, SummarizerStrategy) and any(
        not t.metadata.get("summary") for t in turns
    ):
        if not summaries.backoff.ready(cid, first):
            return LongTermPlan(())  # backed off after a failure: the turns wait
        # The lock is held while the model summarises: another turn of this conversation
        # waits rather than being folded by a summary that never saw it.
        try:
            summary = yield Summarize(turns)
            if not isinstance(summary, str):
                raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
            if not summary.strip():
                raise ValueError("the summarizer returned an empty summary")
        except Exception as exc:  # noqa: BLE001  # a failing summarizer must never lose a turn
            # Reported once, and not retried at every run (see SummaryBackoff).
            summaries.backoff.failed(cid, first, exc, summarizer, count)
            return LongTermPlan(())
    basis = (state, state.summarized_turns, tuple(state.entry_ids)[:count])
    committed = yield from summaries.commit_plan(cid, basis, count, summary, strategy)
    if committed:
        summaries.backoff.succeeded(cid)
    return plan if committed else LongTermPlan(())


def _summarizer(
    memory: ConversationMemory, strategy: LongTermStrategy, model: Any
) -> Summarizer | None:
    if not isinstance(strategy, SummarizerStrategy):
        return None
    if strategy.model is None and model is None:
        return memory.summarizer
    return DensitySummarizer(strategy, model)


def _fold_by_strategy(
    memory: ConversationMemory,
    conversation_id: str,
    strategy: LongTermStrategy,
    *,
    input_tokens: int | None = None,
    tool_outcomes: ToolOutcomes | None = None,
    model: Any = None,
) -> _Run[LongTermPlan]:
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
    if not isinstance(strategy, SummarizerStrategy | NeuralyzerStrategy):
        raise TypeError(
            "strategy must be SummarizerStrategy or NeuralyzerStrategy, "
            f"not {type(strategy).__name__}"
        )
    if input_tokens is not None and (
        isinstance(input_tokens, bool) or not isinstance(input_tokens, int)
    ):
        raise TypeError(f"input_tokens must be int or None, not {type(input_tokens).__name__}")
    cid = check_cid(conversation_id)
    summarizer = _summarizer(memory, strategy, model)
    if isinstance(strategy, SummarizerStrategy) and summarizer is None:
        raise ValueError("a SummarizerStrategy needs a model: set its model or the agent's")
    outcomes = tool_outcomes if tool_outcomes is not None else ToolOutcomes()
    plan = _fold_plan(memory, cid, strategy, input_tokens, outcomes, summarizer)
    return _Run(plan, memory.store, summarizer)


fold_by_strategy = _blocking(_fold_by_strategy)
async_fold_by_strategy = _awaiting(_fold_by_strategy)
