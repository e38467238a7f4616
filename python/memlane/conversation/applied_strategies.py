"""Memory strategies under a :class:`~memlane.ConversationMemory`: what each prompt is sent
(short-term) and when old interactions are summarised or erased (long-term).

A conversation's retained turns are its interactions (a memlane turn is one). Short-term
strategies choose, at every read of the history, which of them are sent and how (see
:func:`memlane.strategies.select_short_term`); the summary, when there is one, still leads.
A long-term strategy decides after every turn whether to fold the oldest interactions (see
:func:`memlane.strategies.plan_long_term`): a :class:`~memlane.strategies.SummarizerStrategy`
folds them into the rolling summary with a chain-of-density summary, a
:class:`~memlane.strategies.NeuralyzerStrategy` erases them, summary included. Either way
they leave the prompt, not the store (see ``retain_transcript``), through the same
conditional commit as any summary, so hosts sharing a store stay in step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse

from memlane.conversation.conversation_state import ConversationState
from memlane.messages import summary_message
from memlane.strategies import (
    Interaction,
    LongTermStrategy,
    MemoryMaxTokensStrategy,
    NeuralyzerStrategy,
    ShortTermStrategy,
    SummarizerStrategy,
    ToolResultClearing,
    async_chain_of_density_summary,
    chain_of_density_summary,
    format_interactions,
    interactions_from_turns,
    load_long_term,
    load_short_term,
    plan_long_term,
    select_short_term,
    tool_outcomes,
)
from memlane.strategies.interactions import CountTokens
from memlane.strategies.window import MaxTokensWindow
from memlane.types import ConversationTurn

__all__ = [
    "DensitySummarizer",
    "check_long_term",
    "check_short_term",
    "fold_count",
    "short_term_view",
]


def check_short_term(value: object) -> list[ShortTermStrategy]:
    """``short_term=`` as a list of strategies: one, several, or their JSON.

    Raises:
        TypeError, ValueError: Not a short-term strategy (pydantic's error names the field
            and value of bad JSON).
    """
    if value is None:
        return []
    if isinstance(value, MemoryMaxTokensStrategy | ToolResultClearing):
        return [value]
    if isinstance(value, list | tuple) and all(
        isinstance(v, MemoryMaxTokensStrategy | ToolResultClearing) for v in value
    ):
        return list(value)
    if isinstance(value, str | bytes | dict | list | tuple):
        return load_short_term(value)
    raise TypeError(
        "short_term must be a short-term strategy, a list of them or their JSON, "
        f"not {type(value).__name__}"
    )


def check_long_term(value: object) -> LongTermStrategy | None:
    """A long-term strategy given as the object or its JSON (``None``: none).

    Raises:
        TypeError, ValueError: Not a long-term strategy.
    """
    if value is None or isinstance(value, SummarizerStrategy | NeuralyzerStrategy):
        return value
    # A str is JSON only when it is an object: ``long_term="yes"`` is a wrong type, not JSON.
    if isinstance(value, dict):
        return load_long_term(value)
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if text.lstrip().startswith("{"):
            return load_long_term(value)
    raise TypeError(
        "long_term must be bool or LongTermMemory, or a SummarizerStrategy or "
        f"NeuralyzerStrategy (or its JSON object), not {value!r}"
    )


class _StoredMessages(Sequence[ModelMessage]):
    """A retained turn's messages, decoded from the state the first time they are read.

    A strategy walks back from the newest interaction and stops when its budget is full, so
    most of a long conversation's turns are never decoded for it.
    """

    __slots__ = ("_decoded", "_state", "_turn_id")

    def __init__(self, state: ConversationState, turn_id: int) -> None:
        self._state = state
        self._turn_id = turn_id
        self._decoded: list[ModelMessage] | None = None

    def _messages(self) -> list[ModelMessage]:
        if self._decoded is None:
            self._decoded = self._state.messages(self._turn_id - self._state.summarized_turns)
        return self._decoded

    def __getitem__(self, index: Any) -> Any:
        return self._messages()[index]

    def __len__(self) -> int:
        return len(self._messages())

    def __iter__(self) -> Iterator[ModelMessage]:
        return iter(self._messages())

    def forget(self) -> None:
        """Drops the decoded messages: a turn the window has left is not read again, and its
        message objects would otherwise stay alive for the life of the conversation."""
        self._decoded = None


_INTERACTIONS = "memlane:interactions"  # the state's cache key of its interaction list


def _interactions(state: ConversationState) -> list[Interaction]:
    """The retained turns as interactions (tokens known, messages decoded when read).

    Kept in the state's strategy cache and extended by the turns added since, so a read
    costs what changed, not the conversation's length; a summary (or erasure) starts it
    again.
    """
    first = state.summarized_turns
    cached = state.strategy_cache.get(_INTERACTIONS)
    if isinstance(cached, tuple) and cached[0] == first:
        built: list[Interaction] = cached[1]
    else:
        built = []
        state.strategy_cache[_INTERACTIONS] = (first, built)
    records = state.records
    for i in range(len(built), len(records)):
        built.append(Interaction(_StoredMessages(state, first + i), first + i, records[i][3]))
    return built


_WINDOW = "memlane:max-tokens-window"  # the state's cache key of a strategy's window


def _window_of(
    strategy: MemoryMaxTokensStrategy,
    state: ConversationState,
    interactions: list[Interaction],
    count: CountTokens,
) -> list[Interaction]:
    """What ``strategy`` keeps, from a window kept in the state across reads.

    The window is fed the interaction list itself, which only grows while the state keeps
    it: a summary or erasure (a new list), a reload, a clear or an import (a new state)
    start a window afresh. Turns another host added arrive as appended records, like this
    host's own.
    """
    key = (_WINDOW, strategy.memory_max_tokens, tuple(strategy.conditions))
    cached = state.strategy_cache.get(key)
    if isinstance(cached, tuple) and cached[0] is interactions:
        window: MaxTokensWindow = cached[1]
    else:
        window = MaxTokensWindow(strategy, count)
        state.strategy_cache[key] = (interactions, window)
    released = window.start
    kept = window.update(interactions)
    for interaction in interactions[released : window.start]:
        if isinstance(interaction.messages, _StoredMessages):
            interaction.messages.forget()
    return kept


def _select(
    strategies: Sequence[ShortTermStrategy], state: ConversationState, count: CountTokens
) -> list[Interaction]:
    interactions = _interactions(state)
    first = strategies[0] if strategies else None
    if isinstance(first, MemoryMaxTokensStrategy) and MaxTokensWindow.supports(first):
        kept = _window_of(first, state, interactions, count)
        if len(strategies) == 1:
            return kept
        return select_short_term(strategies[1:], kept, count, state.strategy_cache)
    return select_short_term(strategies, interactions, count, state.strategy_cache)


def short_term_view(
    strategies: Sequence[ShortTermStrategy], state: ConversationState, count: CountTokens
) -> tuple[list[ModelMessage], int]:
    """The history the short-term strategies send, summary first, and its tokens.

    Pinned turns are sent whatever the strategies chose, in their place in time: those the
    summary passed over first, then the chosen interactions with the pinned ones among them.
    """
    kept = _select(strategies, state, count)
    history: list[ModelMessage] = []
    tokens = 0
    if state.summary is not None:
        history.append(summary_message(state.summary, state.summary_at))
        tokens += state.summary_tokens
    if state.pinned_ids:
        for record in state.folded_pins:
            history.extend(state.folded_pin_messages(record))
            tokens += record[3]
        kept = _with_pins(state, kept)
    for interaction in kept:
        history.extend(interaction.messages)
        tokens += interaction.token_count(count)
    return history, tokens


def _with_pins(state: ConversationState, kept: list[Interaction]) -> list[Interaction]:
    """``kept`` with every retained pinned turn it lacks, in turn order."""
    chosen = {interaction.index for interaction in kept}
    interactions = _interactions(state)
    first = state.summarized_turns
    missing = [
        interactions[turn_id - first]
        for turn_id in state.pinned_ids
        if turn_id >= first and turn_id not in chosen
    ]
    if not missing:
        return kept
    return sorted([*kept, *missing], key=lambda interaction: interaction.index)


def _last_input_tokens(messages: Sequence[ModelMessage]) -> int | None:
    """What the provider reported the newest request cost, if it did."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse) and message.usage.input_tokens:
            return int(message.usage.input_tokens)
    return None


def fold_count(strategy: LongTermStrategy, state: ConversationState, count: CountTokens) -> int:
    """How many of the oldest retained turns the long-term strategy folds now (0: none).

    The triggers see the newest turn's reported input tokens and its tools' outcomes: what
    the run that made it cost and did.
    """
    if not state.records:
        return 0
    newest = state.messages(len(state.records) - 1)
    plan = plan_long_term(
        strategy,
        _interactions(state),
        input_tokens=_last_input_tokens(newest),
        tool_outcomes=tool_outcomes(newest),
        count_tokens=count,
    )
    return len(plan.fold) if plan.fired else 0


class DensitySummarizer:
    """A summarizer running a :class:`~memlane.strategies.SummarizerStrategy`'s chain of
    density: at most ``cod_max_loops`` model calls, with its ``instructions``.

    Takes the memory's summarizer input (the previous summary as a leading turn marked
    ``metadata={"summary": True}``, a focus line as a turn marked ``{"focus": True}``, then
    the turns to fold); the focus line joins the chain's instructions.

    Args:
        strategy: The strategy; its ``model`` is used.
        model: The model when the strategy has none.
    """

    def __init__(self, strategy: SummarizerStrategy, model: Any) -> None:
        self.strategy = strategy
        self.model = strategy.model if strategy.model is not None else model

    def _split(
        self, turns: list[ConversationTurn], focus: str | None
    ) -> tuple[str | None, str | None, str]:
        """The previous summary, the focus line and the turns to fold, as text."""
        previous = None
        if turns and turns[0].metadata.get("summary"):
            previous, turns = turns[0].assistant_response, turns[1:]
        if turns and turns[0].metadata.get("focus"):
            focus, turns = focus or turns[0].user_prompt, turns[1:]
        return previous, focus, format_interactions(interactions_from_turns(turns))

    @property
    def model_name(self) -> str:
        """The model's name, as a failure is reported."""
        model = self.model
        return model if isinstance(model, str) else str(getattr(model, "model_name", model))

    def __call__(self, turns: list[ConversationTurn], *, focus: str | None = None) -> str:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._summarize(turns, focus)
        # A blocking call made on an event loop's thread (sync add_turn in async code): the
        # model's run needs a loop of its own, so it runs on a fresh one in a worker thread
        # (asyncio.run closes it again).
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(
                lambda: asyncio.run(self.async_summarize(turns, focus=focus))
            ).result()

    def _summarize(self, turns: list[ConversationTurn], focus: str | None) -> str:
        previous, focus, text = self._split(turns, focus)
        return chain_of_density_summary(
            self.model,
            text,
            previous,
            max_loops=self.strategy.cod_max_loops,
            instructions=self.strategy.instructions,
            focus=focus,
        )

    async def async_summarize(
        self, turns: list[ConversationTurn], *, focus: str | None = None
    ) -> str:
        """The same summary, awaiting the model."""
        previous, focus, text = self._split(turns, focus)
        return await async_chain_of_density_summary(
            self.model,
            text,
            previous,
            max_loops=self.strategy.cod_max_loops,
            instructions=self.strategy.instructions,
            focus=focus,
        )
