"""Cutting a text into chunks of at most ``chunk_size`` tokens, as
:class:`~memlane.strategies.TextSplitterConfig` says, before it is stored for search."""

from __future__ import annotations

from collections.abc import Callable

from memlane.strategies.models import TextSplitterConfig
from memlane.tokens import TokenEstimator

__all__ = ["split_text"]

# Tried in order: a piece too long to fit is cut at paragraphs, then lines, then sentences,
# then words, and only then between characters, so chunks break where a reader would.
_SEPARATORS = ("\n\n", "\n", ". ", " ")


def _pieces(text: str, separator: str) -> list[str]:
    """``text`` cut after each ``separator``; the pieces join back to ``text``."""
    parts = text.split(separator)
    pieces = [part + separator for part in parts[:-1]] + [parts[-1]]
    return [piece for piece in pieces if piece]


def _by_characters(text: str, size: int, count: Callable[[str], int]) -> list[str]:
    units: list[str] = []
    while text:
        lo, hi = 1, len(text)  # the longest prefix that fits; at least one character
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid]) <= size:
                lo = mid
            else:
                hi = mid - 1
        units.append(text[:lo])
        text = text[lo:]
    return units


def _units(text: str, size: int, count: Callable[[str], int], level: int) -> list[str]:
    """``text`` as pieces of at most ``size`` tokens each, cut at the coarsest separator."""
    if count(text) <= size:
        return [text]
    if level == len(_SEPARATORS):
        return _by_characters(text, size, count)
    units: list[str] = []
    for piece in _pieces(text, _SEPARATORS[level]):
        units.extend(_units(piece, size, count, level + 1))
    return units


def split_text(
    text: str, config: TextSplitterConfig, count: Callable[[str], int] | None = None
) -> list[str]:
    """``text`` in chunks of at most ``config.chunk_size`` tokens.

    Chunks break at paragraphs, lines, sentences or words where they can. Each chunk after
    the first starts with the end of the previous one, up to ``config.chunk_overlap`` tokens
    of whole pieces. Without overlap the chunks join back to ``text``. A single character
    that alone costs more than ``chunk_size`` tokens makes a chunk of its own.

    Args:
        text: What to split.
        config: Chunk size and overlap, in tokens.
        count: Counts a text's tokens; by default an exact :class:`~memlane.TokenEstimator`.

    Returns:
        The chunks, in order; none for an empty text.

    Example:
        >>> from memlane.strategies import TextSplitterConfig, split_text
        >>> split_text("One.\\n\\nTwo.", TextSplitterConfig(chunk_size=2, chunk_overlap=0))
        ['One.\\n\\n', 'Two.']
    """
    if not text:
        return []
    counter = count if count is not None else TokenEstimator().estimate
    size, overlap = config.chunk_size, config.chunk_overlap
    chunks: list[str] = []
    current: list[str] = []
    for unit in _units(text, size, counter, 0):
        if not current or counter("".join([*current, unit])) <= size:
            current.append(unit)
            continue
        chunks.append("".join(current))
        # The new chunk opens with the previous one's last pieces, as many as fit the overlap
        # and still leave room for this unit.
        seed: list[str] = []
        for piece in reversed(current):
            candidate = [piece, *seed]
            if counter("".join(candidate)) > overlap or counter("".join([*candidate, unit])) > size:
                break
            seed = candidate
        current = [*seed, unit]
    if current:
        chunks.append("".join(current))
    return chunks
