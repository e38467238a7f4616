"""memlane: memory for LLM agents.

Token-budgeted conversation memory, a scoped working-memory scratchpad and pluggable stores,
with a Rust core (``memlane._core``) and a pure-Python twin of every Rust piece.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from memlane._backend import BACKEND
from memlane.tokens import TokenEstimator

try:
    __version__ = version("memlane")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["BACKEND", "TokenEstimator", "__version__"]
