"""tiktoken's merge of a periodic piece (one character repeated, a short pattern repeated),
done on one period instead of every byte: twin of ``rust/src/tokens/periodic.rs``.

The merge of a piece ``s * k + t`` (``s`` of at most ``MAX_PERIOD`` bytes, ``t`` a proper
prefix of ``s``) is followed step by step, in tiktoken's order (lowest rank first, then
leftmost), on a state that stands for the whole token sequence: ``prefix``, then ``unit``
repeated ``copies`` times, then ``suffix``. Each step either rewrites that state (the sequence
it stands for is the same) or performs exactly the merges tiktoken performs next:

* a lowest pair in the prefix or the suffix is merged there, as tiktoken would;
* a lowest pair across the prefix's edge (or the suffix's) moves one copy of the unit into the
  prefix (or the suffix), where the next step merges it;
* a one-token unit ``X`` becomes ``XX`` (half the copies, an odd ``X`` into the suffix);
* a lowest pair of rank ``r`` inside the unit: tiktoken now merges the pairs of rank ``r`` left
  to right. Provided none of the pairs those merges make ranks below ``r`` (checked: none can
  rank ``r``, as that would be the same bytes as the token made), that is a left-to-right
  scan, and if the scan of one copy does not reach into the next, every copy is scanned the
  same way: the unit becomes its scanned self. A scan that reaches into the next copy makes
  the unit start one token later (the first token into the prefix, the rest of the last copy
  into the suffix) and is scanned again.

Anything else (a merge making a pair below the rank being merged, prefix or suffix growing past
``MAX_EDGE``, more pair lookups than ``LOOKUPS_PER_BYTE`` allows) answers ``None``, and the
caller runs the general merge, so the count is tiktoken's in every case; the shortcut only
decides how fast it comes.
"""

from __future__ import annotations

from typing import Final

MAX_PERIOD: Final = 8
"""Longest period looked for, in bytes: a character is at most four, and a few characters
repeated (``"ab" * n``) are as common a worst case."""
MAX_EDGE: Final = 48
"""Tokens the prefix and suffix may hold together: each step reads all their pairs."""
LOOKUPS_PER_BYTE: Final = 2
LOOKUPS_AT_LEAST: Final = 256
"""Pair lookups the shortcut may make, per byte of the piece and in all: a real encoding needs a
few steps per merge level, and a pattern it gives up on costs at most about what the general
merge (three lookups a byte) adds to it."""
FEW_COPIES: Final = 4
"""Below this many copies the state is written out and merged directly."""

_NONE: Final = 1 << 62  # the rank of two tokens that do not merge
_PREFIX, _PREFIX_EDGE, _UNIT, _SUFFIX_EDGE, _SUFFIX = range(5)


def count(ranks: dict[bytes, int], piece: bytes) -> int | None:
    """The count of tiktoken's merge of ``piece``, if it is periodic and the shortcut applies."""
    n = len(piece)
    for period in range(1, MAX_PERIOD + 1):
        if n >= 2 * FEW_COPIES * period and piece[period:] == piece[: n - period]:
            break
    else:
        return None
    return _State(
        ranks,
        budget=LOOKUPS_PER_BYTE * n + LOOKUPS_AT_LEAST,
        unit=[piece[i : i + 1] for i in range(period)],
        copies=n // period,
        suffix=[piece[i : i + 1] for i in range(n - n % period, n)],
    ).run()


class _State:
    """``prefix``, then ``unit`` ``copies`` times, then ``suffix``: the sequence being merged."""

    def __init__(
        self,
        ranks: dict[bytes, int],
        budget: int,
        unit: list[bytes],
        copies: int,
        suffix: list[bytes],
    ) -> None:
        self.ranks = ranks
        self.budget = budget  # pair lookups left before giving up
        self.prefix: list[bytes] = []
        self.unit = unit
        self.copies = copies
        self.suffix = suffix

    def rank(self, left: bytes, right: bytes) -> int:
        return self.ranks.get(left + right, _NONE)

    def run(self) -> int | None:
        # A scan that reached into the next copy moved the unit's start once; a second time in
        # a row would loop.
        rotated = False
        while True:
            just_rotated, rotated = rotated, False
            # What `lowest` and `scan` look up, at most.
            self.budget -= len(self.prefix) + len(self.suffix) + 2 * len(self.unit) + 4
            if self.budget < 0:
                return None
            if len(self.prefix) + len(self.suffix) > MAX_EDGE:
                return None
            if self.copies < FEW_COPIES:
                return merge_tokens(self.ranks, self.prefix + self.unit * self.copies + self.suffix)
            lowest = self.lowest()
            if lowest is None:
                return len(self.prefix) + self.copies * len(self.unit) + len(self.suffix)
            rank, where, i = lowest
            if where == _PREFIX:
                self.prefix[i : i + 2] = [self.prefix[i] + self.prefix[i + 1]]
            elif where == _SUFFIX:
                self.suffix[i : i + 2] = [self.suffix[i] + self.suffix[i + 1]]
            elif where == _PREFIX_EDGE:
                self.prefix += self.unit
                self.copies -= 1
            elif where == _SUFFIX_EDGE:
                self.suffix = self.unit + self.suffix
                self.copies -= 1
            elif len(self.unit) == 1:
                if self.copies % 2:
                    self.suffix.insert(0, self.unit[0])
                self.unit = self.unit * 2
                self.copies //= 2
            else:
                scanned = self.scan(rank)
                if scanned is None:
                    return None
                if scanned:
                    self.unit = scanned
                elif just_rotated:
                    return None
                else:
                    # unit * c == u0 + (u1.. + u0) * (c - 1) + u1..
                    first, rest = self.unit[0], self.unit[1:]
                    self.suffix = rest + self.suffix
                    self.prefix.append(first)
                    self.unit = [*rest, first]
                    self.copies -= 1
                    rotated = True

    def lowest(self) -> tuple[int, int, int] | None:
        """The lowest pair (rank, where, index), leftmost among equal ranks; ``None`` if no
        two adjacent tokens merge. ``copies >= FEW_COPIES``, so the first copy's pairs, and the
        one across into the second, stand for every pair inside the copies."""
        best: tuple[int, int, int] | None = None

        def offer(rank: int, where: int, i: int = 0) -> None:
            nonlocal best
            if rank != _NONE and (best is None or rank < best[0]):
                best = (rank, where, i)

        prefix, unit, suffix = self.prefix, self.unit, self.suffix
        for i in range(len(prefix) - 1):
            offer(self.rank(prefix[i], prefix[i + 1]), _PREFIX, i)
        if prefix:
            offer(self.rank(prefix[-1], unit[0]), _PREFIX_EDGE)
        for i in range(len(unit) - 1):
            offer(self.rank(unit[i], unit[i + 1]), _UNIT)
        offer(self.rank(unit[-1], unit[0]), _UNIT)
        if suffix:
            offer(self.rank(unit[-1], suffix[0]), _SUFFIX_EDGE)
        for i in range(len(suffix) - 1):
            offer(self.rank(suffix[i], suffix[i + 1]), _SUFFIX, i)
        return best

    def scan(self, rank: int) -> list[bytes] | None:
        """Every copy of the unit scanned left to right for pairs of rank ``rank``, the lowest
        in the sequence: each copy merged into the returned unit if the scan of a copy stops
        inside it; ``[]`` if it reaches into the next copy; ``None`` if a merge would make a
        pair below ``rank``, which tiktoken merges first (the scan is not its order then)."""
        unit = self.unit
        p = len(unit)
        out: list[bytes] = []
        # (index in `out` of each token made, the token after its pair before merging it).
        made: list[tuple[int, bytes | None]] = []
        i = 0
        while i < p:
            if i + 1 < p and self.rank(unit[i], unit[i + 1]) == rank:
                made.append((len(out), unit[i + 2] if i + 2 < p else None))
                out.append(unit[i] + unit[i + 1])
                i += 2
            elif i + 1 == p and self.rank(unit[i], unit[0]) == rank:
                return []
            else:
                out.append(unit[i])
                i += 1
        # A pair a merge makes: the token before it (merged already) with it, and it with the
        # token after its pair (not merged yet). Where the copy meets what is around it, each
        # copy's neighbour is checked: the prefix's last token or the previous copy's, the
        # next copy's first or the suffix's.
        before_first = self.prefix[-1:] + out[-1:]
        after_last = [unit[0], *self.suffix[:1]]
        for k, after in made:
            token = out[k]
            lefts = [out[k - 1]] if k > 0 else before_first
            rights = after_last if after is None else [after]
            if any(self.rank(left, token) < rank for left in lefts) or any(
                self.rank(token, right) < rank for right in rights
            ):
                return None
        return out


def merge_tokens(ranks: dict[bytes, int], tokens: list[bytes]) -> int:
    """tiktoken's merge of a short token sequence: rescan for the lowest pair, leftmost first."""
    tokens = list(tokens)
    while True:
        best_rank, best_i = _NONE, -1
        for i in range(len(tokens) - 1):
            rank = ranks.get(tokens[i] + tokens[i + 1], _NONE)
            if rank < best_rank:
                best_rank, best_i = rank, i
        if best_i < 0:
            return len(tokens)
        tokens[best_i : best_i + 2] = [tokens[best_i] + tokens[best_i + 1]]
