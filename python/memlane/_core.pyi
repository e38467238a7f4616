"""Type stubs for memlane's Rust extension. Import the public names from ``memlane``."""

from collections.abc import Iterable
from typing import Literal

__version__: str

class TokenEstimator:
    """Counts tokens exactly (BPE, rank files compiled in) or by the whitespace-word heuristic.

    Args:
        encoding_name: ``"o200k_base"`` (default) or ``"cl100k_base"``.
        tokens_per_word: Tokens per whitespace-separated word in heuristic mode.
        mode: ``"exact"`` for real BPE counts, ``"heuristic"`` for words × tokens_per_word.

    Raises:
        ValueError: An unknown encoding or mode, or a non-positive ``tokens_per_word``.
    """

    def __init__(
        self,
        *,
        encoding_name: str = "o200k_base",
        tokens_per_word: float = 1.33,
        mode: Literal["exact", "heuristic"] | str = "exact",
    ) -> None: ...
    @property
    def encoding_name(self) -> str:
        """Name of the BPE encoding used in exact mode."""
    @property
    def tokens_per_word(self) -> float:
        """Tokens per whitespace-separated word in heuristic mode."""
    @property
    def mode(self) -> str:
        """``"exact"`` or ``"heuristic"``."""
    def estimate(self, text: str) -> int:
        """Number of tokens in ``text``; the GIL is released for long texts.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
    def estimate_many(self, texts: Iterable[str]) -> list[int]:
        """Token counts of a batch, in input order, counted on all cores without the GIL.

        Raises:
            TypeError: ``texts`` is a ``str`` or not iterable, or an item is not a ``str``.
        """
    def fits(self, text: str, max_tokens: int) -> bool:
        """Whether ``text`` fits in ``max_tokens`` tokens."""
