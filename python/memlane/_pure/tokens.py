"""Pure-Python twin of the Rust token counter (``memlane._core.Encoder``): the same BPE over
the same bundled rank files. :class:`memlane.tokens.TokenEstimator` validates its arguments and
delegates the counting to one of the two.

The byte-pair merge follows tiktoken exactly — repeatedly merge the adjacent pair with the
lowest rank, leftmost first — so counts agree with the Rust path for every input. Long
pieces use a heap with lazy invalidation (O(n log n)) instead of the O(n^2) rescan, which is
what keeps a megabyte without whitespace in bounded time; a periodic piece (one character
repeated) is merged on one period (`memlane._pure.periodic`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import heapq
import threading
from importlib import resources
from typing import Final

from memlane._pure import periodic

ENCODING_NAMES: Final = ("cl100k_base", "o200k_base")
"""The bundled encodings, sorted (both implementations count with exactly these)."""

# OpenAI's original split patterns (what tiktoken runs); the twin runs `twin_pattern`'s.
_PATTERNS: Final = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}


def _ranges(*names: str) -> str:
    """The listed classes as the body of a regex character class (no brackets)."""
    from memlane._pure.unicode_classes import CLASSES

    out = []
    for name in names:
        for lo, hi in CLASSES[name]:
            out.append(f"\\U{lo:08X}" if lo == hi else f"\\U{lo:08X}-\\U{hi:08X}")
    return "".join(out)


def _expand(template: str) -> str:
    from memlane._pure.unicode_classes import CLASSES

    classes = {name: _ranges(name) for name in CLASSES}
    return template.format_map(classes)


@functools.cache
def twin_pattern(encoding_name: str) -> str:
    r"""The split pattern the twin runs for ``encoding_name``, built on first use.

    OpenAI's pattern with every Unicode class spelled as the Rust `regex` crate's exact
    ranges, so the twin and the extension agree even on code points that a newer Unicode
    version (the `regex` module's) has assigned since; `\Z` because `$` would also match
    before a final "\n". Building them (and importing `regex` and the class tables) is left
    to the first twin encoder: the Rust path never needs them.
    """
    return _TWIN_TEMPLATES[encoding_name]()


_TWIN_TEMPLATES: Final = {
    "cl100k_base": lambda: _expand(
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n{L}{N}]?+[{L}]++|[{N}]{{1,3}}+| ?[^{S}{L}{N}]++[\r\n]*+|[{S}]++\Z|[{S}]*[\r\n]|[{S}]+(?![^{S}])|[{S}]"""
    ),
    "o200k_base": lambda: _expand(
        "|".join(
            [
                r"""[^\r\n{L}{N}]?[{Lu}{Lt}{Lm}{Lo}{M}]*[{Ll}{Lm}{Lo}{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n{L}{N}]?[{Lu}{Lt}{Lm}{Lo}{M}]+[{Ll}{Lm}{Lo}{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[{N}]{{1,3}}""",
                r""" ?[^{S}{L}{N}]+[\r\n/]*""",
                r"""[{S}]*[\r\n]+""",
                r"""[{S}]+(?![^{S}])""",
                r"""[{S}]+""",
            ]
        )
    ),
}

# tiktoken switches to the heap merge at 100 bytes; the choice does not change results.
_LARGE_PIECE: Final = 100
_CACHE_LIMIT: Final = 1 << 16


def load_ranks(encoding_name: str) -> dict[bytes, int]:
    """The mergeable ranks of a bundled ``.tiktoken`` file (base64 token, space, rank)."""
    data = resources.files("memlane").joinpath("_ranks", f"{encoding_name}.tiktoken").read_bytes()
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _merge_small(ranks: dict[bytes, int], piece: bytes) -> int:
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best_rank = -1
        best_i = -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and (best_rank < 0 or rank < best_rank):
                best_rank, best_i = rank, i
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return len(parts)


def _merge_large(ranks: dict[bytes, int], piece: bytes) -> int:
    n = len(piece)
    end = list(range(1, n + 1))  # end[s]: end of the token starting at s (valid while alive)
    prev = list(range(-1, n - 1))
    alive = [True] * n
    heap: list[tuple[int, int, int]] = []
    for i in range(n - 1):
        rank = ranks.get(piece[i : i + 2])
        if rank is not None:
            heap.append((rank, i, i + 2))
    heapq.heapify(heap)
    count = n
    get = ranks.get
    push = heapq.heappush
    pop = heapq.heappop
    while heap:
        _, start, pair_end = pop(heap)
        if not alive[start]:
            continue
        mid = end[start]
        if mid >= n or end[mid] != pair_end:
            continue  # stale: one side was merged since this pair was pushed
        end[start] = pair_end
        alive[mid] = False
        count -= 1
        if pair_end < n:
            prev[pair_end] = start
            nxt = end[pair_end]
            rank = get(piece[start:nxt])
            if rank is not None:
                push(heap, (rank, start, nxt))
        before = prev[start]
        if before >= 0:
            rank = get(piece[before:pair_end])
            if rank is not None:
                push(heap, (rank, before, pair_end))
    return count


class _Bpe:
    """One encoding's ranks, pattern and a bounded cache of piece counts."""

    def __init__(self, encoding_name: str) -> None:
        self.ranks = load_ranks(encoding_name)
        # Most pieces are whole tokens; looking them up as str skips encoding them.
        self.text_ranks: set[str] = set()
        for token in self.ranks:
            with contextlib.suppress(UnicodeDecodeError):  # a partial UTF-8 sequence
                self.text_ranks.add(token.decode("utf-8"))
        import regex

        self.pattern = regex.compile(twin_pattern(encoding_name))
        self.cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        text_ranks = self.text_ranks
        cache = self.cache
        total = 0
        for piece in self.pattern.findall(text):
            if piece in text_ranks:
                total += 1
                continue
            cached = cache.get(piece)
            if cached is None:
                raw = piece.encode("utf-8")
                if raw in self.ranks:
                    cached = 1
                elif len(raw) < _LARGE_PIECE:
                    cached = _merge_small(self.ranks, raw)
                else:
                    # One character or a short pattern repeated (the heap's worst case: every
                    # pair alike) is merged on one period; anything else by the heap.
                    cached = periodic.count(self.ranks, raw)
                    if cached is None:
                        cached = _merge_large(self.ranks, raw)
                if len(raw) < _LARGE_PIECE:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cache[piece] = cached
            total += cached
        return total


_BPES: dict[str, _Bpe] = {}
_BPES_LOCK = threading.Lock()


def get_bpe(encoding_name: str) -> _Bpe:
    """The shared BPE for an encoding, loaded on first use (the rank-file load)."""
    bpe = _BPES.get(encoding_name)
    if bpe is None:
        with _BPES_LOCK:
            bpe = _BPES.get(encoding_name)
            if bpe is None:
                bpe = _BPES[encoding_name] = _Bpe(encoding_name)
    return bpe


class Encoder:
    """Counts tokens with one BPE encoding, or by the whitespace-word heuristic.

    Twin of ``memlane._core.Encoder``. Arguments are trusted: the public
    :class:`~memlane.tokens.TokenEstimator` validates them first, and repairs a text with a
    lone surrogate (which cannot be UTF-8) when counting it raises ``UnicodeEncodeError``.
    """

    __slots__ = ("_bpe", "_encoding_name", "_tokens_per_word")

    def __init__(self, encoding_name: str | None, tokens_per_word: float) -> None:
        self._encoding_name = encoding_name
        self._tokens_per_word = tokens_per_word
        self._bpe: _Bpe | None = None

    @classmethod
    def exact(cls, encoding_name: str) -> Encoder:
        """Exact BPE counts with the named encoding (its ranks load on the first count)."""
        if encoding_name not in ENCODING_NAMES:
            raise ValueError(f"unknown encoding {encoding_name!r}")
        return cls(encoding_name, 0.0)

    @classmethod
    def heuristic(cls, tokens_per_word: float) -> Encoder:
        """Whitespace-separated words times ``tokens_per_word``, at least 1 for non-empty text."""
        return cls(None, tokens_per_word)

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        if not text:
            return 0
        if self._encoding_name is None:
            return max(1, int(len(text.split()) * self._tokens_per_word))
        bpe = self._bpe
        if bpe is None:
            bpe = self._bpe = get_bpe(self._encoding_name)
        return bpe.count(text)

    def count_many(self, texts: list[str]) -> list[int]:
        """Token counts of a batch, in order."""
        return [self.count(text) for text in texts]
