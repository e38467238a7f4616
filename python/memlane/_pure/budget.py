"""Pure-Python twin of the Rust budget ledger: which recent turns fit the token budget.

The ledger holds one token count per retained turn and keeps, incrementally, the longest run
of most recent turns whose counts sum to at most the budget left after the summary. Every
operation is O(1) amortised: a running total and a moving window start, never a re-sum.

Arguments are trusted, as the Rust ledger's typed ones are: counts are ``int``s from 0 up,
which is what the conversation code passes. Only the ledger's own rules are checked: a budget
above 0, and no eviction of more turns than are retained.
"""

from __future__ import annotations

from collections import deque


class BudgetLedger:
    """Token counts of a conversation's retained turns and the window that fits the budget.

    Positions are absolute turn indices: the first retained turn is ``offset``, the newest is
    ``offset + len - 1``; eviction from the front advances ``offset``.

    Args:
        max_tokens: The budget (> 0).
    """

    __slots__ = ("_counts", "_max_tokens", "_offset", "_reserved", "_start", "_total", "_window")

    def __init__(self, max_tokens: int) -> None:
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {max_tokens!r}")
        self._max_tokens = max_tokens
        self._counts: deque[int] = deque()
        self._offset = 0  # absolute index of _counts[0]
        self._start = 0  # absolute index of the window's first turn
        self._total = 0  # sum of every retained count
        self._window = 0  # sum of the counts in the window
        self._reserved = 0  # tokens taken by the summary, 0 when it is left out

    @property
    def max_tokens(self) -> int:
        """The budget."""
        return self._max_tokens

    @property
    def total(self) -> int:
        """Sum of every retained turn's count."""
        return self._total

    @property
    def window_tokens(self) -> int:
        """Sum of the counts in the window (the summary excluded)."""
        return self._window

    @property
    def reserved(self) -> int:
        """Tokens reserved for the summary (0 when it does not fit and is left out)."""
        return self._reserved

    @property
    def offset(self) -> int:
        """Absolute index of the oldest retained turn."""
        return self._offset

    @property
    def window_start(self) -> int:
        """Absolute index of the oldest turn in the window (``end`` when it is empty)."""
        return self._start

    @property
    def end(self) -> int:
        """Absolute index one past the newest turn."""
        return self._offset + len(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def _available(self) -> int:
        return self._max_tokens - self._reserved

    def _shrink(self) -> None:
        limit = self._available()
        counts, offset = self._counts, self._offset
        while self._window > limit:
            self._window -= counts[self._start - offset]
            self._start += 1

    def _grow(self) -> None:
        limit = self._available()
        counts, offset = self._counts, self._offset
        while self._start > offset and self._window + counts[self._start - 1 - offset] <= limit:
            self._start -= 1
            self._window += counts[self._start - offset]

    def push(self, tokens: int) -> None:
        """Appends the newest turn's count and slides the window."""
        self._counts.append(tokens)
        self._total += tokens
        self._window += tokens
        self._shrink()

    def pop_front(self, n: int) -> int:
        """Evicts the ``n`` oldest turns; returns the tokens they held."""
        if n > len(self._counts):
            raise ValueError(f"cannot evict {n!r} of {len(self._counts)} turns")
        freed = 0
        for _ in range(n):
            tokens = self._counts.popleft()
            freed += tokens
            if self._offset >= self._start:  # the turn was inside the window
                self._window -= tokens
                self._start = self._offset + 1
            self._offset += 1
        self._total -= freed
        return freed

    def set_summary_tokens(self, tokens: int) -> bool:
        """Reserves room for a summary of ``tokens``; returns whether it is included.

        A summary larger than the whole budget is left out (reserving nothing) rather than
        pushing the history over the budget. The window shrinks or grows to fit what is left.
        """
        included = tokens <= self._max_tokens
        self._reserved = tokens if included else 0
        self._shrink()
        self._grow()
        return included
