"""Token counting: :class:`TokenEstimator`, one class on both implementations.

The estimator owns the policy (argument checks, defaults, repr, pickling, lone-surrogate
repair) and hands the counting to a small engine: ``memlane._core.Encoder`` on the Rust path,
its twin :class:`memlane._pure.tokens.Encoder` on the pure-Python path, chosen through
:data:`memlane._backend.active` when the estimator is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

from memlane import _backend
from memlane._pure.tokens import ENCODING_NAMES, Encoder
from memlane._validate import type_name

__all__ = ["PyTokenEstimator", "TokenEstimator"]

Mode = Literal["exact", "heuristic"]
_MODES: tuple[Mode, ...] = ("exact", "heuristic")


def _is_positive_finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return 0 < float(value) < math.inf
    except OverflowError:  # an int too large for a float
        return False


def _repair(text: str) -> str:
    """Lone surrogates replaced as tiktoken does: a UTF-16 round trip joins valid pairs and
    turns lone halves into U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class TokenEstimator:
    """Counts tokens exactly (BPE over the bundled rank files) or by a word heuristic.

    Exact counts equal OpenAI's tiktoken for the same encoding, special-token strings counted
    as plain text; a lone surrogate is replaced by U+FFFD first, as tiktoken does. Batches are
    counted on all cores on the Rust path.

    Args:
        encoding_name: The BPE encoding used in exact mode: ``"o200k_base"`` or
            ``"cl100k_base"``.
        tokens_per_word: Tokens per whitespace-separated word in heuristic mode (> 0).
        mode: ``"exact"`` for real BPE counts, ``"heuristic"`` for
            ``max(1, int(words * tokens_per_word))`` (0 for empty text).

    Raises:
        ValueError: An unknown encoding or mode, or a ``tokens_per_word`` that is not a
            finite number above 0.

    Example:
        >>> from memlane import TokenEstimator
        >>> TokenEstimator().estimate("hello world")
        2
        >>> TokenEstimator(mode="heuristic").estimate("one two three four")
        5
    """

    __slots__ = ("_count", "_count_many", "_encoding_name", "_mode", "_tokens_per_word")

    def __init__(
        self,
        *,
        encoding_name: str = "o200k_base",
        tokens_per_word: float = 1.33,
        mode: Mode = "exact",
    ) -> None:
        if not isinstance(encoding_name, str) or encoding_name not in ENCODING_NAMES:
            valid = ", ".join(repr(n) for n in ENCODING_NAMES)
            raise ValueError(f"unknown encoding_name {encoding_name!r}; valid: {valid}")
        if not _is_positive_finite(tokens_per_word):
            raise ValueError(
                f"tokens_per_word must be a finite number > 0, got {tokens_per_word!r}"
            )
        if not isinstance(mode, str) or mode not in _MODES:
            valid = ", ".join(repr(m) for m in _MODES)
            raise ValueError(f"unknown mode {mode!r}; valid: {valid}")
        self._encoding_name = encoding_name
        self._tokens_per_word = float(tokens_per_word)
        self._mode: Mode = mode
        engine = self._engine()
        encoder = (
            engine.exact(encoding_name)
            if mode == "exact"
            else engine.heuristic(self._tokens_per_word)
        )
        self._count: Callable[[str], int] = encoder.count
        self._count_many: Callable[[list[str]], list[int]] = encoder.count_many

    def _engine(self) -> type[Encoder]:
        return _backend.active.Encoder

    @property
    def encoding_name(self) -> str:
        """Name of the BPE encoding used in exact mode."""
        return self._encoding_name

    @property
    def tokens_per_word(self) -> float:
        """Tokens per whitespace-separated word in heuristic mode."""
        return self._tokens_per_word

    @property
    def mode(self) -> Mode:
        """``"exact"`` or ``"heuristic"``."""
        return self._mode

    def estimate(self, text: str) -> int:
        """Number of tokens in ``text``.

        Args:
            text: The text to count.

        Returns:
            Its token count (0 for ``""``).

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type_name(text)}")
        try:
            return self._count(text)
        except UnicodeEncodeError:
            return self._count(_repair(text))

    def estimate_many(self, texts: Iterable[str]) -> list[int]:
        """Token counts of a batch, in input order (on all cores on the Rust path).

        Args:
            texts: The texts to count.

        Returns:
            One count per text.

        Raises:
            TypeError: ``texts`` is a ``str`` or not iterable, or an item is not a ``str``.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be an iterable of str, not str")
        try:
            items = list(texts)
        except TypeError:
            raise TypeError(f"texts must be an iterable of str, not {type_name(texts)}") from None
        # One C-level pass in the common case; the slow loop only finds the culprit.
        if not all(map(str.__instancecheck__, items)):
            for i, item in enumerate(items):
                if not isinstance(item, str):
                    raise TypeError(f"texts[{i}] must be str, not {type_name(item)}")
        return self._estimate_texts(items)

    def _estimate_texts(self, texts: list[str]) -> list[int]:
        """:meth:`estimate_many` of a list already known to hold only ``str``.

        memlane's own callers (a conversation counting the turn it just validated) use it
        to skip checking every text twice.
        """
        try:
            return self._count_many(texts)
        except UnicodeEncodeError:
            return self._count_many([_repair(t) for t in texts])

    def fits(self, text: str, max_tokens: int) -> bool:
        """Whether ``text`` fits in ``max_tokens`` tokens.

        Raises:
            TypeError: ``text`` is not a ``str`` or ``max_tokens`` is not an ``int``.
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise TypeError(f"max_tokens must be int, not {type_name(max_tokens)}")
        return self.estimate(text) <= max_tokens

    def __repr__(self) -> str:
        return (
            f"TokenEstimator(encoding_name={self._encoding_name!r}, "
            f"tokens_per_word={self._tokens_per_word!r}, mode={self._mode!r})"
        )

    def __reduce__(
        self,
    ) -> tuple[Callable[[str, float, str], TokenEstimator], tuple[str, float, str]]:
        # Rebuilt with the implementation active where it is unpickled.
        return (_rebuild_estimator, (self._encoding_name, self._tokens_per_word, self._mode))


class PyTokenEstimator(TokenEstimator):
    """A :class:`TokenEstimator` that always counts with the pure-Python twin.

    For differential tests and benchmarks; it unpickles as a plain :class:`TokenEstimator`.
    """

    __slots__ = ()

    def _engine(self) -> type[Encoder]:
        return _backend.PYTHON.Encoder


def _rebuild_estimator(encoding_name: str, tokens_per_word: float, mode: str) -> TokenEstimator:
    """Unpickles an estimator on whichever implementation is active in the receiving process."""
    return TokenEstimator(
        encoding_name=encoding_name,
        tokens_per_word=tokens_per_word,
        mode=mode,  # type: ignore[arg-type]  # checked by the constructor
    )
