"""Chooses between the Rust extension and the pure-Python twin.

This is the only module that imports ``memlane._core`` and the only one that branches on the
implementation. Everything else constructs its hot pieces through :data:`active`
(``_backend.active.BudgetLedger(...)``) and calls its functions the same way
(``_backend.active.write_turn(...)``), so one switch (``MEMLANE_PURE_PYTHON=1``) flips the
whole package, and a test or a benchmark can select either implementation inside one process
with :func:`use`.

Under ``TYPE_CHECKING`` the twin classes are the types of every field, so ``mypy --strict``
checks each call into either implementation against the readable reference.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, cast

from memlane._pure import budget as _pure_budget
from memlane._pure import message_json as _pure_message_json
from memlane._pure import search as _pure_search
from memlane._pure import store as _pure_store
from memlane._pure import tokens as _pure_tokens
from memlane._pure import vector_index as _pure_vector_index

logger = logging.getLogger("memlane")

_TRUTHY = {"1", "true", "yes", "on"}

BackendName = Literal["rust", "python"]

WriteTurn = Callable[
    [object, dict[type, _pure_message_json.MessageClass], int, str, str, str, int],
    tuple[list[Any], bytes, str] | None,
]
"""A turn's JSON writer: :func:`memlane._pure.message_json.write_turn` or its Rust twin."""


@dataclass(frozen=True, slots=True)
class Implementation:
    """The classes of one implementation; the twin's are the reference types."""

    name: BackendName
    Encoder: type[_pure_tokens.Encoder]
    BudgetLedger: type[_pure_budget.BudgetLedger]
    MemoryTable: type[_pure_store.MemoryTable]
    SearchIndex: type[_pure_search.SearchIndex]
    SqliteTable: type[_pure_store.SqliteTable]
    VectorIndex: type[_pure_vector_index.VectorIndex]
    write_turn: WriteTurn


VectorIndexType = _pure_vector_index.VectorIndex
"""The type of either implementation's ``VectorIndex`` (the twin's, as mypy reads both)."""

PYTHON = Implementation(
    name="python",
    Encoder=_pure_tokens.Encoder,
    BudgetLedger=_pure_budget.BudgetLedger,
    MemoryTable=_pure_store.MemoryTable,
    SearchIndex=_pure_search.SearchIndex,
    SqliteTable=_pure_store.SqliteTable,
    VectorIndex=_pure_vector_index.VectorIndex,
    write_turn=_pure_message_json.write_turn,
)
"""The pure-Python twin: the readable reference."""


def _import_core() -> ModuleType | None:
    try:
        from memlane import _core
    except ImportError as exc:  # platform without a wheel, or a broken build
        logger.debug("memlane: Rust extension unavailable (%s); using the pure-Python backend", exc)
        return None
    return _core


def _rust(module: ModuleType) -> Implementation:
    # The extension's classes mirror the twin's API (held to it by the differential tests);
    # the casts let the type checker read them as the twin.
    return Implementation(
        name="rust",
        Encoder=cast("type[_pure_tokens.Encoder]", module.Encoder),
        BudgetLedger=cast("type[_pure_budget.BudgetLedger]", module.BudgetLedger),
        MemoryTable=cast("type[_pure_store.MemoryTable]", module.MemoryTable),
        SearchIndex=cast("type[_pure_search.SearchIndex]", module.SearchIndex),
        SqliteTable=cast("type[_pure_store.SqliteTable]", module.SqliteTable),
        VectorIndex=cast("type[_pure_vector_index.VectorIndex]", module.VectorIndex),
        write_turn=cast("WriteTurn", module.write_turn),
    )


def _load_core() -> ModuleType | None:
    if os.environ.get("MEMLANE_PURE_PYTHON", "").strip().lower() in _TRUTHY:
        logger.debug("memlane: MEMLANE_PURE_PYTHON is set; using the pure-Python backend")
        return None
    return _import_core()


core: ModuleType | None = _load_core()
"""The Rust extension module, or ``None`` when the pure-Python twin is active."""

BACKEND: BackendName = "rust" if core is not None else "python"
"""Which implementation this process chose at import: ``"rust"`` or ``"python"``."""

active: Implementation = _rust(core) if core is not None else PYTHON
"""The implementation new objects are built with (normally the one :data:`BACKEND` names)."""


def rust_core() -> ModuleType | None:
    """The Rust extension if it can be imported at all, whatever ``BACKEND`` says.

    Differential tests use this to run both implementations side by side in one process.
    """
    return core if core is not None else _import_core()


def implementation(name: BackendName) -> Implementation:
    """The implementation called ``name``.

    Raises:
        ValueError: ``name`` is not ``"rust"`` or ``"python"``.
        ImportError: ``"rust"`` was asked for and the extension cannot be imported.
    """
    if name == "python":
        return PYTHON
    if name != "rust":
        raise ValueError(f"backend must be 'rust' or 'python', got {name!r}")
    module = rust_core()
    if module is None:
        raise ImportError("memlane._core (the Rust extension) cannot be imported")
    return _rust(module)


@contextlib.contextmanager
def use(name: BackendName) -> Iterator[Implementation]:
    """Builds new objects with implementation ``name`` inside the ``with`` block.

    For tests and benchmarks that compare both implementations in one process; objects keep
    the implementation they were built with after the block ends.
    """
    global active
    saved = active
    active = implementation(name)
    try:
        yield active
    finally:
        active = saved
