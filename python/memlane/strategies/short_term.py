"""Short-term strategies at work: which messages of the conversation enter the next prompt.

Pure functions over interactions; nothing here reads or writes a store. Every function keeps
tool calls and their returns together: a provider rejects a return whose call is missing, and
a call whose return is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    NativeToolReturnPart,
    RetryPromptPart,
    ToolReturnPart,
)

from memlane.strategies.conditions import (
    CompiledCondition,
    MessageView,
    compile_condition,
    interaction_view,
    message_view,
)
from memlane.strategies.interactions import (
    CountTokens,
    Interaction,
    message_token_counter,
    part_content,
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


def _is_answer(part: object) -> bool:
    return isinstance(part, BaseToolReturnPart | RetryPromptPart)


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
                (answers if _is_answer(part) else calls).add(call_id)
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


def filter_interaction(
    interaction: Interaction,
    age: int,
    conditions: Sequence[CompiledCondition],
    reads: frozenset[str],
    count_tokens: CountTokens,
) -> Interaction:
    """``interaction`` without the parts some condition rejects, nor their tool partners."""
    view = interaction_view(interaction, age, count_tokens, reads)
    # A part's content (a tool call's arguments or a result, serialised) is found only when
    # a condition that reads it is reached: one rejecting the part first spares the work.
    lazy = "message.content" in reads
    light = reads - {"message.content"}
    drop_parts: set[int] = set()
    drop_ids: set[str] = set()
    for message in interaction.messages:
        for part in message.parts:
            seen = message_view(part, light)
            pending = lazy
            holds = True
            for condition in conditions:
                if pending and "message.content" in condition.reads:
                    seen = MessageView(seen.role, part_content(part), seen.tool_name)
                    pending = False
                if not condition.holds(view, seen):
                    holds = False
                    break
            if not holds:
                drop_parts.add(id(part))
                call_id = part_tool_call_id(part)
                if call_id is not None:
                    drop_ids.add(call_id)
    if not drop_parts:
        return interaction
    return _without(interaction, drop_ids, drop_parts)


@dataclass(frozen=True, slots=True)
class Sendable:
    """An interaction as the window would send it, with what the walk needs to know of it."""

    interaction: Interaction  # filtered, ``tokens`` set
    calls: frozenset[str]  # ids of its tool calls
    answers: frozenset[str]  # ids of its tool returns and retry prompts


def sendable(interaction: Interaction, count_tokens: CountTokens) -> Sendable:
    calls: set[str] = set()
    answers: set[str] = set()
    for message in interaction.messages:
        for part in message.parts:
            call_id = part_tool_call_id(part)
            if call_id is not None:
                (answers if _is_answer(part) else calls).add(call_id)
    return Sendable(interaction.counted(count_tokens), frozenset(calls), frozenset(answers))


def keep_max_tokens(
    strategy: MemoryMaxTokensStrategy,
    interactions: Sequence[Interaction],
    count_tokens: CountTokens,
    cache: MutableMapping[Hashable, object] | None = None,
) -> list[Interaction]:
    """The newest interactions whose tokens, once filtered by the conditions, fit the budget.

    Walks backwards and stops at the first interaction that does not fit, so what is kept is
    a suffix of the conversation (interactions filtered down to nothing are left out of it).
    A tool call and its return are kept or left out together, even across interactions.

    Args:
        strategy: The budget and the conditions.
        interactions: The conversation, oldest first.
        count_tokens: Counts what a filtered interaction costs.
        cache: Remembers each interaction as filtered and counted, by its ``index``, its
            ``tokens`` and the conditions, so the next turn's walk does not filter it again.
            Keep one per conversation and empty it when an index may come to mean another
            interaction of the same tokens (the conversation was cleared). Unused when a
            condition reads ``interaction.age``, which changes every turn.

    Returns:
        The kept interactions, oldest first, with ``tokens`` set.
    """
    budget = strategy.memory_max_tokens
    if budget < 0:
        return []
    conditions = [compile_condition(c, "message") for c in strategy.conditions]
    reads = frozenset[str]().union(*(c.reads for c in conditions))
    memo = None if "interaction.age" in reads else cache
    rules = tuple(strategy.conditions)
    kept: list[Sendable] = []
    used = 0
    last = len(interactions) - 1
    for position in range(last, -1, -1):
        interaction = interactions[position]
        key = (interaction.index, interaction.tokens, rules)
        entry = memo.get(key) if memo is not None else None
        if not isinstance(entry, Sendable):
            if conditions:
                interaction = filter_interaction(
                    interaction, last - position, conditions, reads, count_tokens
                )
            entry = sendable(interaction, count_tokens)
            if memo is not None:
                memo[key] = entry
        tokens = entry.interaction.token_count(count_tokens)
        if used + tokens > budget:
            break
        used += tokens
        if entry.interaction.messages:
            kept.append(entry)
    kept.reverse()
    return repair_pairs(kept, interactions)


def repair_pairs(kept: list[Sendable], interactions: Sequence[Interaction]) -> list[Interaction]:
    """``kept`` without the halves of the pairs of ``interactions`` whose other half is gone.

    Pairs that were never whole (a call still waiting for a deferred result) stay as they
    were: only what a strategy broke is repaired.
    """
    calls = frozenset[str]().union(*(entry.calls for entry in kept))
    answers = frozenset[str]().union(*(entry.answers for entry in kept))
    lonely = calls ^ answers
    window = [entry.interaction for entry in kept]
    if not lonely:  # the common case: no need to look at what was left out
        return window
    broken = lonely & _paired_ids(interactions)
    if not broken:
        return window
    repaired = [_without(interaction, set(broken), set()) for interaction in window]
    return [interaction for interaction in repaired if interaction.messages]


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
    if not changed:
        return interaction.counted(count_tokens)
    return Interaction(messages, interaction.index).counted(count_tokens)


def clear_tool_results(
    strategy: ToolResultClearing,
    interactions: Sequence[Interaction],
    count_tokens: CountTokens,
    cache: MutableMapping[Hashable, object] | None = None,
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
        cache: Remembers each cleared interaction by its ``index`` and ``tokens`` (see
            :func:`keep_max_tokens`).

    Returns:
        The interactions, oldest first; cleared ones have ``tokens`` set.
    """
    cut = max(0, len(interactions) - strategy.keep_last)
    cleared: list[Interaction] = []
    for interaction in interactions[:cut]:
        key = ("tool_result_clearing", interaction.index, interaction.tokens)
        entry = cache.get(key) if cache is not None else None
        if not isinstance(entry, Interaction):
            entry = _cleared(interaction, count_tokens)
            if cache is not None:
                cache[key] = entry
        cleared.append(entry)
    return cleared + list(interactions[cut:])


def select_short_term(
    strategies: MemoryMaxTokensStrategy
    | ToolResultClearing
    | Sequence[MemoryMaxTokensStrategy | ToolResultClearing],
    interactions: Sequence[Interaction],
    count_tokens: CountTokens | None = None,
    cache: MutableMapping[Hashable, object] | None = None,
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
        cache: A per-conversation cache each strategy remembers its work in (see
            :func:`keep_max_tokens`); the same dict serves every turn.

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
            current = clear_tool_results(strategy, current, count, cache)
        elif isinstance(strategy, MemoryMaxTokensStrategy):
            current = keep_max_tokens(strategy, current, count, cache)
        else:
            raise TypeError(f"not a short-term strategy: {strategy!r}")
    return current


def apply_short_term(
    strategies: MemoryMaxTokensStrategy
    | ToolResultClearing
    | Sequence[MemoryMaxTokensStrategy | ToolResultClearing],
    interactions: Sequence[Interaction],
    count_tokens: CountTokens | None = None,
    cache: MutableMapping[Hashable, object] | None = None,
) -> list[ModelMessage]:
    """The message history to send: the interactions after the strategies, flattened.

    Args:
        strategies: One strategy or several, applied in order.
        interactions: The conversation, oldest first.
        count_tokens: Counts tokens (default: as memlane counts a turn).
        cache: A per-conversation cache (see :func:`select_short_term`).

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
        for interaction in select_short_term(strategies, interactions, count_tokens, cache)
        for message in interaction.messages
    ]
