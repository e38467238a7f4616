"""The max-tokens window kept up to date as a conversation grows, for a host that reads its
history after every turn.

:func:`~memlane.strategies.keep_max_tokens` walks back from the newest interaction on every
read. When no condition reads ``interaction.age``, what an interaction costs once filtered
never changes, so appending interactions can only move the window's oldest end forward:
:class:`MaxTokensWindow` filters each interaction once, when it is new, and keeps the
window's filtered interactions and their token total, so a read costs what changed since the
last one plus the window's length, not the conversation's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from memlane.strategies.conditions import compile_condition
from memlane.strategies.interactions import CountTokens, Interaction
from memlane.strategies.models import MemoryMaxTokensStrategy
from memlane.strategies.short_term import Sendable, filter_interaction, repair_pairs, sendable

__all__ = ["MaxTokensWindow"]


class MaxTokensWindow:
    """What :func:`~memlane.strategies.keep_max_tokens` keeps of an append-only conversation.

    Feed :meth:`update` the same growing sequence every time (interactions only appended);
    when older ones change (a summary or erasure removed some, the conversation was cleared
    or reloaded), start a new window.

    Args:
        strategy: The budget and the conditions; none may read ``interaction.age`` (see
            :meth:`supports`).
        count_tokens: Counts what a filtered interaction costs.

    Raises:
        ValueError: A condition reads ``interaction.age``.
    """

    __slots__ = (
        "_budget",
        "_conditions",
        "_count",
        "_entries",
        "_reads",
        "_tooled",
        "_used",
        "seen",
        "start",
    )

    def __init__(self, strategy: MemoryMaxTokensStrategy, count_tokens: CountTokens) -> None:
        if not self.supports(strategy):
            raise ValueError("a condition reads interaction.age: the window changes every turn")
        self._budget = strategy.memory_max_tokens
        self._conditions = tuple(compile_condition(c, "message") for c in strategy.conditions)
        self._reads = frozenset[str]().union(*(c.reads for c in self._conditions))
        self._count = count_tokens
        # Each kept interaction as filtered, its tokens, and whether anything of it is left.
        self._entries: deque[tuple[Sendable, int, bool]] = deque()
        self._used = 0  # tokens of the entries
        self._tooled = 0  # entries with a tool call or answer: only they can break a pair
        self.seen = 0  # how many interactions update has looked at
        self.start = 0  # position of the oldest kept (filtered) interaction; ``seen``: none

    @staticmethod
    def supports(strategy: MemoryMaxTokensStrategy) -> bool:
        """Whether the strategy's window only moves forward as interactions are appended."""
        return not any(
            "interaction.age" in compile_condition(c, "message").reads for c in strategy.conditions
        )

    def _entry(self, interaction: Interaction, age: int) -> tuple[Sendable, int, bool]:
        if self._conditions:
            interaction = filter_interaction(
                interaction, age, self._conditions, self._reads, self._count
            )
        if not isinstance(interaction.messages, list):
            # A lazy sequence (the stored turn, decoded when read) is read on every turn the
            # interaction stays in the window: a list is flattened into the history at once.
            interaction = Interaction(
                list(interaction.messages), interaction.index, interaction.tokens
            )
        entry = sendable(interaction, self._count)
        kept = entry.interaction
        return entry, kept.token_count(self._count), bool(kept.messages)

    def update(self, interactions: Sequence[Interaction]) -> list[Interaction]:
        """The window of ``interactions``, as :func:`keep_max_tokens` returns it.

        Args:
            interactions: The conversation, oldest first: what the last call saw, plus any
                interactions appended since.

        Returns:
            The kept interactions, oldest first, with ``tokens`` set.
        """
        budget = self._budget
        if budget < 0:
            return []
        end = len(interactions)
        if end < self.seen:  # not the conversation it was fed: start again
            self._entries.clear()
            self._used = self.seen = self.start = 0
        entries = self._entries
        # Newest first, only the interactions not seen yet: once they alone fill the budget,
        # nothing older is sent, the window kept so far included.
        fresh: list[tuple[Sendable, int, bool]] = []
        used = 0
        for position in range(end - 1, self.seen - 1, -1):
            item = self._entry(interactions[position], end - 1 - position)
            if used + item[1] > budget:
                entries.clear()
                self._used = self._tooled = 0
                oldest = position + 1
                break
            used += item[1]
            fresh.append(item)
        else:
            oldest = self.start
        fresh.reverse()
        for item in fresh:
            entries.append(item)
            if item[0].calls or item[0].answers:
                self._tooled += 1
        self._used += used
        while self._used > budget:  # what no longer fits beside the new interactions
            gone, tokens, _ = entries.popleft()
            self._used -= tokens
            if gone.calls or gone.answers:
                self._tooled -= 1
            oldest += 1
        self.seen = end
        self.start = oldest
        if not self._tooled:  # no tool part sent, so no pair to repair
            return [entry.interaction for entry, _, nonempty in entries if nonempty]
        return repair_pairs([entry for entry, _, nonempty in entries if nonempty], interactions)
