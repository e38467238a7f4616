"""The strategies as configuration: pydantic models that load an agent platform's JSON.

Short-term strategies (``memory_strategy_id``) choose what of the conversation enters each
prompt; long-term strategies (``long_term_memory_id``) say when old interactions are
summarised or erased. Every model forbids unknown fields and checks types strictly, so a typo
or a string where a number belongs fails loudly, naming the field and the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_ai.models import Model

from memlane._deprecation import deprecated_alias
from memlane.strategies.conditions import compile_condition

__all__ = [
    "KnowledgeBases",
    "LongTermStrategy",
    "MemoryMaxTokensStrategy",
    "NeuralyzerStrategy",
    "ShortTermStrategy",
    "Strategy",
    "SummarizerStrategy",
    "TextSplitterConfig",
    "ToolResultClearing",
    "load_long_term",
    "load_short_term",
    "load_strategy",
]


class _Config(BaseModel):
    # strict: "8000" or 8000.5 where an int belongs is a mistake in hand-written JSON, not
    # something to coerce silently; frozen: a strategy shared by memories cannot be changed
    # under one of them.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _check_conditions(values: list[str], scope: Literal["message", "interaction"]) -> list[str]:
    for expression in values:
        compile_condition(expression, scope)
    return values


class Strategy(_Config):
    """What every strategy is: :meth:`from_config` loads one from an agent platform's JSON.

    The four strategies below derive from it; ``isinstance(x, Strategy)`` tells a strategy
    from any other value.
    """

    @classmethod
    def from_config(cls, data: str | bytes | Mapping[str, Any]) -> Self:
        """A strategy from its JSON (text or an already decoded object).

        ``memory_strategy_id`` makes it a short-term strategy, ``long_term_memory_id`` a
        long-term one. Called on a strategy class (``SummarizerStrategy.from_config(...)``),
        the JSON must describe that strategy.

        Args:
            data: The JSON object.

        Returns:
            The strategy.

        Raises:
            ValueError: Invalid JSON, neither or both ids, an unknown id, an unknown field, a
                value of the wrong type or out of range, a bad condition, or a strategy other
                than the class called. A :class:`pydantic.ValidationError` (a ``ValueError``)
                names the field and the offending value.

        Example:
            >>> Strategy.from_config(
            ...     '{"memory_strategy_id": "max_tokens", "memory_max_tokens": 800}'
            ... )
            MemoryMaxTokensStrategy(memory_strategy_id='max_tokens', memory_max_tokens=800, conditions=[])
        """
        value = _as_data(data)
        if not isinstance(value, Mapping):
            raise ValueError(f"a strategy must be a JSON object, got {value!r}")
        short, long = "memory_strategy_id" in value, "long_term_memory_id" in value
        if short == long:
            raise ValueError(
                "a strategy needs exactly one of memory_strategy_id (short-term) and "
                f"long_term_memory_id (long-term); got {dict(value)!r}"
            )
        strategy = _SHORT.validate_python(value) if short else _LONG.validate_python(value)
        if not isinstance(strategy, cls):
            raise ValueError(
                f"{cls.__name__}.from_config was given a {type(strategy).__name__}: {dict(value)!r}"
            )
        return strategy


class MemoryMaxTokensStrategy(Strategy):
    """Short-term: the newest whole interactions that fit in ``memory_max_tokens``.

    Walks the conversation backwards by interaction and keeps interactions while their tokens
    (after ``conditions``) fit. A part for which any condition is false is left out, and so is
    the other half of its tool call/return pair (see :mod:`memlane.strategies.conditions` for
    the names a condition may use).

    Attributes:
        memory_strategy_id: ``"max_tokens"``.
        memory_max_tokens: The budget of the history, in tokens; ``-1`` includes nothing.
        conditions: Expressions every part sent must satisfy, e.g.
            ``"message.role != 'tool'"`` (no tool calls, no tool returns).

    Example:
        >>> MemoryMaxTokensStrategy.from_config(
        ...     '{"memory_strategy_id": "max_tokens", "memory_max_tokens": 8000}'
        ... )
        MemoryMaxTokensStrategy(memory_strategy_id='max_tokens', memory_max_tokens=8000, conditions=[])
    """

    memory_strategy_id: Literal["max_tokens"] = "max_tokens"
    memory_max_tokens: int = Field(default=10000, ge=-1)
    conditions: list[str] = Field(default_factory=list)

    @field_validator("conditions")
    @classmethod
    def _conditions_compile(cls, value: list[str]) -> list[str]:
        return _check_conditions(value, "message")


class ToolResultClearing(Strategy):
    """Short-term: tool results older than the newest ``keep_last`` interactions are replaced
    by a placeholder that says how many tokens they took.

    A cheap step before paying for a summary: every call keeps its (now short) return, so the
    history stays valid for every provider.

    Attributes:
        memory_strategy_id: ``"tool_result_clearing"``.
        keep_last: How many of the newest interactions keep their tool results whole.
    """

    memory_strategy_id: Literal["tool_result_clearing"] = "tool_result_clearing"
    keep_last: int = Field(default=3, ge=0)


class TextSplitterConfig(_Config):
    """How a summary is cut into chunks before it is stored in a knowledge base.

    Attributes:
        chunk_size: The most tokens a chunk may have.
        chunk_overlap: Tokens of the end of a chunk repeated at the start of the next, so a
            fact cut at a boundary is found whole in one of them.
    """

    chunk_size: int = Field(default=512, ge=1)
    chunk_overlap: int = Field(default=64, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> Self:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size "
                f"({self.chunk_size})"
            )
        return self


class KnowledgeBases(_Config):
    """Where a summarizer stores its summaries, and when they are searched.

    Attributes:
        collection_id: The collection (a long-term memory namespace) summaries go to.
        search_mode: ``"always"``: the ``top_k`` most relevant earlier summaries are
            retrieved for every new prompt; ``"never"``: they are only stored.
        top_k: How many summaries a search returns.
    """

    collection_id: str = Field(min_length=1)
    search_mode: Literal["always", "never"] = "always"
    top_k: int = Field(default=3, ge=1)


class _LongTermTriggers(Strategy):
    """The fields every long-term strategy shares: when it fires and what it keeps.

    For every numeric threshold, 0 disables it and -1 means never (both never fire; -1 says
    so on purpose).
    """

    input_tokens_threshold: int = Field(default=0, ge=-1)
    interaction_keep: int = Field(default=0, ge=0)
    interaction_conditions: list[str] = Field(default_factory=list)
    interaction_threshold_qty: int = Field(default=0, ge=-1)
    interaction_threshold_tokens: int = Field(default=0, ge=-1)
    on_tools_success_threshold: list[str] = Field(default_factory=list)
    on_tools_error_threshold: list[str] = Field(default_factory=list)

    @field_validator("interaction_conditions")
    @classmethod
    def _conditions_compile(cls, value: list[str]) -> list[str]:
        return _check_conditions(value, "interaction")

    @model_validator(mode="after")
    def _threshold_above_keep(self) -> Self:
        # Reaching the threshold with no more interactions than are kept would fire on
        # every turn and remove nothing.
        qty = self.interaction_threshold_qty
        if qty > 0 and qty <= self.interaction_keep:
            raise ValueError(
                f"interaction_threshold_qty ({qty}) must be greater than interaction_keep "
                f"({self.interaction_keep}), or the strategy fires without removing anything"
            )
        return self


class SummarizerStrategy(_LongTermTriggers):
    """Long-term: when a trigger fires, the interactions beyond ``interaction_keep`` are folded
    into a chain-of-density summary.

    Attributes:
        long_term_memory_id: ``"summarizer"``.
        interaction_threshold_qty: Fires when this many interactions count (0: disabled).
        interaction_threshold_tokens: Fires when the counted interactions reach this many
            tokens (0: disabled).
        cod_max_loops: The most model calls one summary may take; each makes it denser
            without making it longer.
        interaction_keep: Interactions kept whole after summarising.
        instructions: Extra guidance for the summary (what to focus on).
        knowledge_base: Where summaries are also stored, split by ``text_splitter``, to be
            searched later; ``None`` keeps only the rolling summary.
        text_splitter: How a stored summary is cut into chunks.
        model: The pydantic-ai model (or model string) that writes summaries; not part of
            the JSON. ``None``: the model of the agent it runs under, else the memory's
            summarizer.

    Example:
        >>> s = SummarizerStrategy.from_config(
        ...     {"long_term_memory_id": "summarizer", "cod_max_loops": 3}
        ... )
        >>> (s.interaction_threshold_qty, s.interaction_threshold_tokens, s.cod_max_loops)
        (20, 20000, 3)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    long_term_memory_id: Literal["summarizer"] = "summarizer"
    interaction_threshold_qty: int = Field(default=20, ge=-1)
    interaction_threshold_tokens: int = Field(default=20000, ge=-1)
    cod_max_loops: int = Field(default=5, ge=1)
    interaction_keep: int = Field(default=0, ge=0)
    instructions: str | None = None
    knowledge_base: KnowledgeBases | None = None
    text_splitter: TextSplitterConfig = Field(default_factory=TextSplitterConfig)
    model: Model | str | None = Field(default=None, exclude=True, repr=False)


class NeuralyzerStrategy(_LongTermTriggers):
    """Long-term: when a trigger fires, everything but the last ``interaction_keep``
    interactions leaves the prompt, with no summary. Faster than summarising, for when the
    history is not needed.

    Attributes:
        long_term_memory_id: ``"neuralyzer"``.
        interaction_threshold_qty: -1 (never) unless set.
        interaction_threshold_tokens: -1 (never) unless set.
        interaction_keep: Interactions kept after erasing.
    """

    long_term_memory_id: Literal["neuralyzer"] = "neuralyzer"
    interaction_threshold_qty: int = Field(default=-1, ge=-1)
    interaction_threshold_tokens: int = Field(default=-1, ge=-1)


ShortTermStrategy = Annotated[
    MemoryMaxTokensStrategy | ToolResultClearing, Field(discriminator="memory_strategy_id")
]
"""A short-term strategy, told apart by ``memory_strategy_id``."""

LongTermStrategy = Annotated[
    SummarizerStrategy | NeuralyzerStrategy, Field(discriminator="long_term_memory_id")
]
"""A long-term strategy, told apart by ``long_term_memory_id``."""


# Titled, so an error reads "1 validation error for LongTermStrategy" rather than pydantic's
# name for the tagged union.
_SHORT: TypeAdapter[MemoryMaxTokensStrategy | ToolResultClearing] = TypeAdapter(
    ShortTermStrategy, config=ConfigDict(title="ShortTermStrategy")
)
_SHORT_LIST: TypeAdapter[list[MemoryMaxTokensStrategy | ToolResultClearing]] = TypeAdapter(
    list[ShortTermStrategy], config=ConfigDict(title="ShortTermStrategies")
)
_LONG: TypeAdapter[SummarizerStrategy | NeuralyzerStrategy] = TypeAdapter(
    LongTermStrategy, config=ConfigDict(title="LongTermStrategy")
)


def _as_data(data: str | bytes | Mapping[str, Any] | Sequence[Any]) -> Any:
    if isinstance(data, str | bytes):
        try:
            return json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"strategy JSON does not parse: {exc}") from exc
    return data


load_strategy = deprecated_alias(Strategy.from_config, "load_strategy", "Strategy.from_config")
"""Deprecated alias of :meth:`Strategy.from_config` (kept for one release)."""


def load_short_term(
    data: str | bytes | Mapping[str, Any] | Sequence[Any],
) -> list[MemoryMaxTokensStrategy | ToolResultClearing]:
    """Short-term strategies, applied in order, from one JSON object or an array of them.

    Args:
        data: The JSON (text or decoded).

    Returns:
        The strategies, in order.

    Raises:
        ValueError: As for :meth:`Strategy.from_config`, or an object that is not short-term.
    """
    value = _as_data(data)
    if isinstance(value, Mapping):
        return [_SHORT.validate_python(value)]
    return _SHORT_LIST.validate_python(value)


def load_long_term(
    data: str | bytes | Mapping[str, Any],
) -> SummarizerStrategy | NeuralyzerStrategy:
    """A long-term strategy from its JSON (text or decoded).

    Raises:
        ValueError: As for :meth:`Strategy.from_config`, or an object that is not long-term.
    """
    return _LONG.validate_python(_as_data(data))
