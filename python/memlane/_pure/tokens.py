"""Pure-Python twin of the Rust token counter: the same BPE over the same bundled rank files.

The byte-pair merge follows tiktoken exactly — repeatedly merge the adjacent pair with the
lowest rank, leftmost first — so counts agree with the Rust path for every input. Long
pieces use a heap with lazy invalidation (O(n log n)) instead of the O(n^2) rescan, which is
what keeps a megabyte without whitespace in bounded time.
"""

from __future__ import annotations

import base64
import heapq
import threading
from collections.abc import Iterable
from importlib import resources
from typing import Final

import regex

from memlane._pure.unicode_classes import CLASSES

ENCODING_NAMES: Final = ("cl100k_base", "o200k_base")
MODES: Final = ("exact", "heuristic")

# OpenAI's original split patterns (what tiktoken runs); the twin runs `_TWIN_PATTERNS`.
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
    out = []
    for name in names:
        for lo, hi in CLASSES[name]:
            out.append(f"\\U{lo:08X}" if lo == hi else f"\\U{lo:08X}-\\U{hi:08X}")
    return "".join(out)


def _expand(template: str) -> str:
    classes = {name: _ranges(name) for name in CLASSES}
    return template.format_map(classes)


# The same patterns with every Unicode class spelled as the Rust `regex` crate's exact ranges,
# so the twin and the extension agree even on code points that a newer Unicode version (the
# `regex` module's) has assigned since; `\Z` because `$` would also match before a final "\n".
_TWIN_PATTERNS: Final = {
    "cl100k_base": _expand(
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n{L}{N}]?+[{L}]++|[{N}]{{1,3}}+| ?[^{S}{L}{N}]++[\r\n]*+|[{S}]++\Z|[{S}]*[\r\n]|[{S}]+(?![^{S}])|[{S}]"""
    ),
    "o200k_base": _expand(
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


def _clean(text: str) -> str:
    """Replaces lone surrogates like tiktoken does: UTF-16 round trip, lone halves to U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class _Bpe:
    """One encoding's ranks, pattern and a bounded cache of piece counts."""

    def __init__(self, encoding_name: str) -> None:
        self.ranks = load_ranks(encoding_name)
        # Most pieces are whole tokens; looking them up as str skips encoding them.
        self.text_ranks: set[str] = set()
        for token in self.ranks:
            try:
                self.text_ranks.add(token.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        self.pattern = regex.compile(_TWIN_PATTERNS[encoding_name])
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


def _is_positive_finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return 0 < float(value) < float("inf")
    except OverflowError:  # an int too large for a float
        return False


def _check_text(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    return text


class TokenEstimator:
    """Counts tokens exactly (BPE) or by the whitespace-word heuristic.

    Args:
        encoding_name: ``"o200k_base"`` (default) or ``"cl100k_base"``.
        tokens_per_word: Tokens per whitespace-separated word in heuristic mode.
        mode: ``"exact"`` for real BPE counts, ``"heuristic"`` for words × tokens_per_word.

    Raises:
        ValueError: An unknown encoding or mode, or a non-positive ``tokens_per_word``.
    """

    __slots__ = ("_bpe", "_encoding_name", "_mode", "_tokens_per_word")

    def __init__(
        self,
        *,
        encoding_name: str = "o200k_base",
        tokens_per_word: float = 1.33,
        mode: str = "exact",
    ) -> None:
        if not isinstance(encoding_name, str) or encoding_name not in ENCODING_NAMES:
            valid = ", ".join(repr(n) for n in ENCODING_NAMES)
            raise ValueError(f"unknown encoding_name {encoding_name!r}; valid: {valid}")
        if not _is_positive_finite(tokens_per_word):
            raise ValueError(
                f"tokens_per_word must be a finite number > 0, got {tokens_per_word!r}"
            )
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: 'exact', 'heuristic'")
        self._encoding_name = encoding_name
        self._tokens_per_word = float(tokens_per_word)
        self._mode = mode
        self._bpe: _Bpe | None = None

    @property
    def encoding_name(self) -> str:
        """Name of the BPE encoding used in exact mode."""
        return self._encoding_name

    @property
    def tokens_per_word(self) -> float:
        """Tokens per whitespace-separated word in heuristic mode."""
        return self._tokens_per_word

    @property
    def mode(self) -> str:
        """``"exact"`` or ``"heuristic"``."""
        return self._mode

    def _count(self, text: str) -> int:
        if not text:
            return 0
        if self._mode == "heuristic":
            return max(1, int(len(text.split()) * self._tokens_per_word))
        bpe = self._bpe
        if bpe is None:
            bpe = self._bpe = get_bpe(self._encoding_name)
        return bpe.count(_clean(text))

    def estimate(self, text: str) -> int:
        """Number of tokens in ``text``.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        return self._count(_check_text(text, "text"))

    def estimate_many(self, texts: Iterable[str]) -> list[int]:
        """Token counts of a batch, in input order.

        Raises:
            TypeError: ``texts`` is a ``str`` or not iterable, or an item is not a ``str``.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of str, not str")
        try:
            items = list(texts)
        except TypeError:
            raise TypeError(
                f"texts must be an iterable of str, not {type(texts).__name__}"
            ) from None
        checked = [_check_text(t, f"texts[{i}]") for i, t in enumerate(items)]
        return [self._count(t) for t in checked]

    def fits(self, text: str, max_tokens: int) -> bool:
        """Whether ``text`` fits in ``max_tokens`` tokens.

        Raises:
            TypeError: ``text`` is not a ``str`` or ``max_tokens`` is not an ``int``.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise TypeError(f"max_tokens must be int, not {type(max_tokens).__name__}")
        return self.estimate(text) <= max_tokens

    def __repr__(self) -> str:
        return (
            f"TokenEstimator(encoding_name={self._encoding_name!r}, "
            f"tokens_per_word={self._tokens_per_word!r}, mode={self._mode!r})"
        )

    def __reduce__(self) -> tuple[object, tuple[str, float, str]]:
        from memlane.tokens import _rebuild_estimator

        return (_rebuild_estimator, (self._encoding_name, self._tokens_per_word, self._mode))
