"""Chooses between the Rust extension and the pure-Python twin.

This is the only module that imports ``memlane._core``. Everything else asks it for the
active implementation, so one switch (``MEMLANE_PURE_PYTHON=1``) flips the whole package.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Literal

logger = logging.getLogger("memlane")

_TRUTHY = {"1", "true", "yes", "on"}


def _load_core() -> ModuleType | None:
    if os.environ.get("MEMLANE_PURE_PYTHON", "").strip().lower() in _TRUTHY:
        logger.debug("memlane: MEMLANE_PURE_PYTHON is set; using the pure-Python backend")
        return None
    try:
        from memlane import _core
    except ImportError as exc:  # platform without a wheel, or a broken build
        logger.debug("memlane: Rust extension unavailable (%s); using the pure-Python backend", exc)
        return None
    return _core


core: ModuleType | None = _load_core()
"""The Rust extension module, or ``None`` when the pure-Python twin is active."""

BACKEND: Literal["rust", "python"] = "rust" if core is not None else "python"
"""Which implementation is active: ``"rust"`` or ``"python"``."""


def rust_core() -> ModuleType | None:
    """The Rust extension if it can be imported at all, whatever ``BACKEND`` says.

    Differential tests use this to run both implementations side by side in one process.
    """
    if core is not None:
        return core
    try:
        from memlane import _core
    except ImportError:
        return None
    return _core
