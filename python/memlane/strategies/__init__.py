"""Memory strategies as configuration: what of a conversation enters each prompt
(short-term) and when old interactions are summarised or erased (long-term).

The models load an agent platform's JSON (:meth:`Strategy.from_config`); the functions beside them
are pure, over pydantic-ai messages grouped into :class:`Interaction` s (a memlane turn is
one), so a memory, a manager or an agent can run them the same way.

Example:
    >>> from memlane.strategies import Strategy
    >>> Strategy.from_config({"long_term_memory_id": "neuralyzer", "interaction_keep": 2})
    NeuralyzerStrategy(input_tokens_threshold=0, interaction_keep=2, interaction_conditions=[], interaction_threshold_qty=-1, interaction_threshold_tokens=-1, on_tools_success_threshold=[], on_tools_error_threshold=[], long_term_memory_id='neuralyzer')
"""

from __future__ import annotations

from memlane.strategies.conditions import ConditionError, compile_condition
from memlane.strategies.density import (
    COD_INSTRUCTIONS,
    DensityStep,
    async_chain_of_density_summary,
    chain_of_density_summary,
    format_interactions,
)
from memlane.strategies.interactions import (
    CountTokens,
    Interaction,
    ToolOutcomes,
    group_interactions,
    interactions_from_turns,
    message_token_counter,
    tool_outcomes,
)
from memlane.strategies.models import (
    KnowledgeBases,
    LongTermStrategy,
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    ShortTermStrategy,
    Strategy,
    SummarizerStrategy,
    TextSplitterConfig,
    ToolResultClearing,
    load_long_term,
    load_short_term,
    load_strategy,
)
from memlane.strategies.short_term import (
    CLEARED_PREFIX,
    apply_short_term,
    clear_tool_results,
    keep_max_tokens,
    select_short_term,
)
from memlane.strategies.splitter import split_text
from memlane.strategies.triggers import (
    LongTermPlan,
    counted_interactions,
    plan_long_term,
    trigger_reasons,
)

__all__ = [
    "CLEARED_PREFIX",
    "COD_INSTRUCTIONS",
    "ConditionError",
    "CountTokens",
    "DensityStep",
    "Interaction",
    "KnowledgeBases",
    "LongTermPlan",
    "LongTermStrategy",
    "MemoryMaxTokensStrategy",
    "NeuralyzerStrategy",
    "ShortTermStrategy",
    "Strategy",
    "SummarizerStrategy",
    "TextSplitterConfig",
    "ToolOutcomes",
    "ToolResultClearing",
    "apply_short_term",
    "async_chain_of_density_summary",
    "chain_of_density_summary",
    "clear_tool_results",
    "compile_condition",
    "counted_interactions",
    "format_interactions",
    "group_interactions",
    "interactions_from_turns",
    "keep_max_tokens",
    "load_long_term",
    "load_short_term",
    "load_strategy",
    "message_token_counter",
    "plan_long_term",
    "select_short_term",
    "split_text",
    "tool_outcomes",
    "trigger_reasons",
]
