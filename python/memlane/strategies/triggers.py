"""When a long-term strategy fires, and what it then keeps.

Pure functions: the caller passes the interactions still in the prompt, what the last run
reported (its input tokens, which tools succeeded or failed) and gets back a
:class:`LongTermPlan` saying which interactions to summarise (or erase) and which to keep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memlane.strategies.conditions import compile_condition, interaction_view
from memlane.strategies.interactions import (
    CountTokens,
    Interaction,
    ToolOutcomes,
    message_token_counter,
)
from memlane.strategies.models import NeuralyzerStrategy, SummarizerStrategy

__all__ = ["LongTermPlan", "counted_interactions", "plan_long_term", "trigger_reasons"]


@dataclass(frozen=True, slots=True)
class LongTermPlan:
    """What a long-term strategy does now.

    Attributes:
        reasons: Each trigger that fired, readably (``"interaction_threshold_qty: 20 >= 20"``);
            empty when none did.
        fold: The interactions to summarise (summarizer) or erase (neuralyzer), oldest first;
            empty unless a trigger fired and there is more than ``interaction_keep``.
        keep: The interactions that stay in the prompt, oldest first.
    """

    reasons: tuple[str, ...]
    fold: list[Interaction] = field(default_factory=list)
    keep: list[Interaction] = field(default_factory=list)

    @property
    def fired(self) -> bool:
        """Whether the strategy runs now: a trigger fired and there is something to fold."""
        return bool(self.reasons) and bool(self.fold)


def counted_interactions(
    strategy: SummarizerStrategy | NeuralyzerStrategy,
    interactions: Sequence[Interaction],
    count_tokens: CountTokens,
) -> list[Interaction]:
    """The interactions that count toward the thresholds: those meeting every
    ``interaction_conditions`` (all of them when there are none), with ``tokens`` set.

    Args:
        strategy: The strategy.
        interactions: The interactions in the prompt, oldest first.
        count_tokens: Counts tokens not known yet.

    Returns:
        The counted interactions, oldest first.
    """
    counted = [interaction.counted(count_tokens) for interaction in interactions]
    if not strategy.interaction_conditions:
        return counted
    conditions = [compile_condition(c, "interaction") for c in strategy.interaction_conditions]
    reads = frozenset[str]().union(*(c.reads for c in conditions))
    last = len(counted) - 1
    return [
        interaction
        for position, interaction in enumerate(counted)
        if all(
            c.holds(interaction_view(interaction, last - position, count_tokens, reads))
            for c in conditions
        )
    ]


def trigger_reasons(
    strategy: SummarizerStrategy | NeuralyzerStrategy,
    interactions: Sequence[Interaction],
    *,
    input_tokens: int | None = None,
    tool_outcomes: ToolOutcomes | None = None,
    count_tokens: CountTokens | None = None,
) -> tuple[str, ...]:
    """Which of the strategy's triggers fire.

    * ``input_tokens_threshold``: the last run's reported input tokens exceed it;
    * ``interaction_threshold_qty``: the counted interactions number at least this many;
    * ``interaction_threshold_tokens``: their tokens reach it;
    * ``on_tools_success_threshold`` / ``on_tools_error_threshold``: a listed tool succeeded /
      failed in the last run.

    A numeric threshold of 0 is disabled and -1 never fires.

    Args:
        strategy: The strategy.
        interactions: The interactions in the prompt, oldest first.
        input_tokens: The last run's reported input tokens (``usage.input_tokens``), if any.
        tool_outcomes: The last run's tools (:func:`~memlane.strategies.tool_outcomes`).
        count_tokens: Counts tokens not known yet (default: as memlane counts a turn).

    Returns:
        One readable reason per trigger that fired; empty when none did.
    """
    reasons: list[str] = []
    threshold = strategy.input_tokens_threshold
    if threshold > 0 and input_tokens is not None and input_tokens > threshold:
        reasons.append(f"input_tokens_threshold: {input_tokens} > {threshold}")
    qty, tokens = strategy.interaction_threshold_qty, strategy.interaction_threshold_tokens
    if qty > 0 or tokens > 0:
        count = count_tokens if count_tokens is not None else message_token_counter()
        counted = counted_interactions(strategy, interactions, count)
        if qty > 0 and len(counted) >= qty:
            reasons.append(f"interaction_threshold_qty: {len(counted)} >= {qty}")
        total = sum(i.token_count(count) for i in counted)
        if tokens > 0 and total >= tokens:
            reasons.append(f"interaction_threshold_tokens: {total} >= {tokens}")
    outcomes = tool_outcomes if tool_outcomes is not None else ToolOutcomes()
    succeeded = [t for t in strategy.on_tools_success_threshold if t in outcomes.succeeded]
    if succeeded:
        reasons.append(f"on_tools_success_threshold: {', '.join(succeeded)} succeeded")
    failed = [t for t in strategy.on_tools_error_threshold if t in outcomes.failed]
    if failed:
        reasons.append(f"on_tools_error_threshold: {', '.join(failed)} failed")
    return tuple(reasons)


def plan_long_term(
    strategy: SummarizerStrategy | NeuralyzerStrategy,
    interactions: Sequence[Interaction],
    *,
    input_tokens: int | None = None,
    tool_outcomes: ToolOutcomes | None = None,
    count_tokens: CountTokens | None = None,
) -> LongTermPlan:
    """Whether the strategy fires now, and which interactions it folds and keeps.

    When it fires, the last ``interaction_keep`` interactions are kept and every earlier one
    is folded: summarised by a :class:`~memlane.strategies.SummarizerStrategy`, erased by a
    :class:`~memlane.strategies.NeuralyzerStrategy`.

    Args:
        strategy: The strategy.
        interactions: The interactions in the prompt (not summarised or erased yet), oldest
            first.
        input_tokens: The last run's reported input tokens, if any.
        tool_outcomes: The last run's tools.
        count_tokens: Counts tokens not known yet (default: as memlane counts a turn).

    Returns:
        The plan; ``plan.fired`` says whether to act.
    """
    reasons = trigger_reasons(
        strategy,
        interactions,
        input_tokens=input_tokens,
        tool_outcomes=tool_outcomes,
        count_tokens=count_tokens,
    )
    if not reasons:
        return LongTermPlan(reasons, [], list(interactions))
    cut = max(0, len(interactions) - strategy.interaction_keep)
    return LongTermPlan(reasons, list(interactions[:cut]), list(interactions[cut:]))
