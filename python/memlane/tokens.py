"""Token counting: :class:`TokenEstimator`, backed by Rust when the extension is active."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane._backend import core
from memlane._pure.tokens import TokenEstimator as PyTokenEstimator

if TYPE_CHECKING or core is None:
    TokenEstimator = PyTokenEstimator
else:
    TokenEstimator = core.TokenEstimator

__all__ = ["PyTokenEstimator", "TokenEstimator"]


def _rebuild_estimator(encoding_name: str, tokens_per_word: float, mode: str) -> TokenEstimator:
    """Unpickles an estimator on whichever backend is active in the receiving process."""
    return TokenEstimator(encoding_name=encoding_name, tokens_per_word=tokens_per_word, mode=mode)
