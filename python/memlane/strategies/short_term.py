"""Short-term strategies at work: which messages of the conversation enter the next prompt.

Pure functions over interactions; nothing here reads or writes a store. Every function keeps
tool calls and their returns together: a provider rejects a return whose call is missing, and
a call whose return is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    NativeToolReturnPart,
    RetryPromptPart,
    ToolReturnPart,
)

from memlane.strategies.conditions import (
    CompiledCondition,
    compile_condition,
    interaction_view,
    message_view,
)
from memlane.strategies.interactions import (
    CountTokens,
    Interaction,
    message_token_counter,
    part_tool_call_id,
    with_parts,
)
from memlane.strategies.models import MemoryMaxTokensStrategy, ToolResultClearing

__all__ = [
    "CLEARED_PREFIX",
    "apply_short_term",
    "clear_tool_results",
    "keep_max_tokens",
    "select_short_term",
]

CLEARED_PREFIX = "[tool result cleared to save context: it took "
"""How the placeholder of a cleared tool result begins (it goes on ``"<n> tokens]"``)."""


def _paired_ids(interactions: Iterable[Interaction]) -> set[str]:
    """The tool-call ids that have both a call and an answer among ``interactions``."""
    calls: set[str] = set()
    answers: set[str] = set()
    for interaction in interactions:
        for message in interaction.messages:
            for part in message.parts:
                call_id = part_tool_call_id(part)
                if call_id is None:
                    continue
                if isinstance(part, BaseToolReturnPart | RetryPromptPart):
                    answers.add(call_id)
                else:
                    calls.add(call_id)
    return calls & answers


def _without(interaction: Interaction, drop_ids: set[str], drop_parts: set[int]) -> Interaction:
    """``interaction`` without the parts in ``drop_parts`` (by ``id``) and the tool parts whose
    call id is in ``drop_ids``; itself when nothing goes, and messages left empty go too."""
    messages: list[ModelMessage] = []
    changed = False
    for message in interaction.messages:
        parts = [
            part
            for part in message.parts
            if id(part) not in drop_parts and part_tool_call_id(part) not in drop_ids
        ]
        if len(parts) == len(message.parts):
            messages.append(message)
            continue
        changed = True
        if parts:
            messages.append(with_parts(message, parts))
    if not changed:
        return interaction
    return Interaction(messages, interaction.index)


def _filtered(
    interaction: Interaction,
    age: int,
    conditions: Sequence[CompiledCondition],
    count_tokens: CountTokens,
) -> Interaction:
    """``interaction`` without the parts some condition rejects, nor their tool partners."""
    evaluator = conditions[0].evaluator()
    view = interaction_view(interaction, age, count_tokens)
    drop_parts: set[int] = set()
    drop_ids: set[str] = set()
    for message in interaction.messages:
        for part in message.parts:
            seen = message_view(part)
            if not all(c.holds(evaluator, view, seen) for c in conditions):
                drop_parts.add(id(part))
                call_id = part_tool_call_id(part)
                if call_id is not None:
                    drop_ids.add(call_id)
    if not drop_parts:
        return interaction if interaction.tokens is not None else interaction.counted(count_tokens)
    return _without(interaction, drop_ids, drop_parts)


def _repair_pairs(kept: list[Interaction], paired: set[str]) -> list[Interaction]:
    """``kept`` without the halves of pairs (``paired`` in the input) whose other half is gone."""
    still = _paired_ids(kept)
    broken = paired - still
    if not broken:
        return kept
    repaired = [_without(interaction, broken, set()) for interaction in kept]
    return [interaction for interaction in repaired if interaction.messages]


def keep_max_tokens(
    strategy: MemoryMaxTokensStrategy,
    interactions: Sequence[Interaction],
    count_tokens: CountTokens,
) -> list[Interaction]:
    """The newest interactions whose tokens, once filtered by the conditions, fit the budget.

    Walks backwards and stops at the first interaction that does not fit, so what is kept is
    a suffix of the conversation (interactions filtered down to nothing are left out of it).
    A tool call and its return are kept or left out together, even across interactions.

    Args:
        strategy: The budget and the conditions.
        interactions: The conversation, oldest first.
        count_tokens: Counts what a filtered interaction costs.

    Returns:
        The kept interactions, oldest first; ``tokens`` is set where known.
    """
    budget = strategy.memory_max_tokens
    if budget < 0:
        return []
    conditions = [compile_condition(c, "message") for c in strategy.conditions]
    kept: list[Interaction] = []
    used = 0
    last = len(interactions) - 1
    for position in range(last, -1, -1):
        interaction = interactions[position]
        if conditions:
            interaction = _filtered(interaction, last - position, conditions, count_tokens)
        tokens = interaction.token_count(count_tokens)
        if used + tokens > budget:
            break
        used += tokens
        if interaction.messages:
            kept.append(interaction)
    kept.reverse()
    return _repair_pairs(kept, _paired_ids(interactions))


def _placeholder(tokens: int) -> str:
    return f"{CLEARED_PREFIX}{tokens} tokens]"


def _cleared(interaction: Interaction, count_tokens: CountTokens) -> Interaction:
    messages: list[ModelMessage] = []
    changed = False
    for message in interaction.messages:
        parts = list(message.parts)
        for i, part in enumerate(parts):
            # Exactly these kinds: the harness's own returns (tool search, capability loads)
            # carry structured content that pydantic-ai reads back.
            if not isinstance(part, ToolReturnPart | NativeToolReturnPart) or (
                type(part) not in (ToolReturnPart, NativeToolReturnPart)
                or (isinstance(part.content, str) and part.content.startswith(CLEARED_PREFIX))
            ):
                continue
            tokens = count_tokens([with_parts(message, [part])])
            replacement = dataclasses.replace(part, content=_placeholder(tokens))  # type: ignore[arg-type]  # only the two exact kinds above, whose content is Any
            # A result shorter than its placeholder stays: clearing it would cost tokens.
            if count_tokens([with_parts(message, [replacement])]) < tokens:
                parts[i] = replacement
        if any(new is not old for new, old in zip(parts, message.parts, strict=True)):
            changed = True
            messages.append(with_parts(message, parts))
        else:
            messages.append(message)
    return Interaction(messages, interaction.index) if changed else interaction


def clear_tool_results(
    strategy: ToolResultClearing,
    interactions: Sequence[Interaction],
    count_tokens: CountTokens,
) -> list[Interaction]:
    """The interactions with tool results older than the newest ``keep_last`` cleared.

    A cleared return keeps its tool name and call id (so its call stays answered) and its
    content becomes ``"[tool result cleared to save context: it took <n> tokens]"``, ``n``
    being what the return cost in a request. Results shorter than the placeholder, and results
    cleared already, stay as they are.

    Args:
        strategy: How many of the newest interactions keep their results.
        interactions: The conversation, oldest first.
        count_tokens: Counts what a return costs.

    Returns:
        The interactions, oldest first; changed ones have ``tokens`` unset.
    """
    cut = max(0, len(interactions) - strategy.keep_last)
    return [_cleared(i, count_tokens) for i in interactions[:cut]] + list(interactions[cut:])


def select_short_term(
    strategies: MemoryMaxTokensStrategy
    | ToolResultClearing
    | Sequence[MemoryMaxTokensStrategy | ToolResultClearing],
    interactions: Sequence[Interaction],
    count_tokens: CountTokens | None = None,
) -> list[Interaction]:
    """The interactions (as they will be sent) after each strategy in turn.

    What :func:`apply_short_term` flattens into messages; use it to see which interactions
    were kept (their ``index``).

    Args:
        strategies: One strategy or several, applied in order (e.g. clear old tool results,
            then keep what fits).
        interactions: The conversation, oldest first.
        count_tokens: Counts tokens; by default as memlane counts a turn, with an exact
            :class:`~memlane.TokenEstimator` on the active implementation.

    Returns:
        The interactions to send, oldest first.
    """
    count = count_tokens if count_tokens is not None else message_token_counter()
    chain = (
        [strategies]
        if isinstance(strategies, MemoryMaxTokensStrategy | ToolResultClearing)
        else list(strategies)
    )
    current = list(interactions)
    for strategy in chain:
        if isinstance(strategy, ToolResultClearing):
            current = clear_tool_results(strategy, current, count)
        elif isinstance(strategy, MemoryMaxTokensStrategy):
            current = keep_max_tokens(strategy, current, count)
        else:
            raise TypeError(f"not a short-term strategy: {strategy!r}")
    return current


def apply_short_term(
    strategies: MemoryMaxTokensStrategy
    | ToolResultClearing
    | Sequence[MemoryMaxTokensStrategy | ToolResultClearing],
    interactions: Sequence[Interaction],
    count_tokens: CountTokens | None = None,
) -> list[ModelMessage]:
    """The message history to send: the interactions after the strategies, flattened.

    Args:
        strategies: One strategy or several, applied in order.
        interactions: The conversation, oldest first.
        count_tokens: Counts tokens (default: as memlane counts a turn).

    Returns:
        The messages, oldest first.

    Raises:
        ConditionError: A condition fails on a part (a ``ValueError`` quoting it).
        TypeError: Something in ``strategies`` is not a short-term strategy.

    Example:
        >>> from memlane.strategies import MemoryMaxTokensStrategy, apply_short_term
        >>> from memlane.strategies import group_interactions
        >>> from memlane.messages import default_messages
        >>> from datetime import UTC, datetime
        >>> at = datetime(2026, 1, 1, tzinfo=UTC)
        >>> history = default_messages("hi", "hello!", at) + default_messages("2+2?", "4", at)
        >>> sent = apply_short_term(
        ...     MemoryMaxTokensStrategy(memory_max_tokens=6), group_interactions(history)
        ... )
        >>> [m.parts[0].content for m in sent]
        ['2+2?', '4']
    """
    return [
        message
        for interaction in select_short_term(strategies, interactions, count_tokens)
        for message in interaction.messages
    ]
