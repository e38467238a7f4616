"""memlane: memory for LLM agents.

Token-budgeted conversation memory, a scoped working-memory scratchpad and pluggable stores,
with a Rust core (``memlane._core``) and a pure-Python twin of every Rust piece.

``import memlane`` loads none of this: each public name is imported from its module the first
time it is used (PEP 562), so a CLI call or a serverless start pays only for what it touches.
"""

from __future__ import annotations

import importlib

# Not typing.TYPE_CHECKING: importing typing would be most of what `import memlane` costs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from memlane._backend import BACKEND
    from memlane.conversation import ConversationMemory
    from memlane.conversation.summary_backoff import SummaryStatus
    from memlane.errors import (
        ConversationNotFoundError,
        CorruptStoreError,
        InvalidValueError,
        MemlaneError,
        NotAStoreError,
        NotFoundError,
        ProcedureNotFoundError,
        ReadOnlyStoreError,
        StoreClosedError,
        StoreConnectionError,
        StoreError,
        StorePathError,
        UnstorableValueError,
        UserNotFoundError,
    )
    from memlane.longterm import LongTermMemory
    from memlane.manager import MemoryManager
    from memlane.stores import (
        FileStore,
        InMemoryStore,
        MemoryStore,
        MongoDBStore,
        PostgreSQLStore,
        SQLiteStore,
    )
    from memlane.tokens import TokenEstimator
    from memlane.types import ConversationTurn, MemoryEntry, MemoryScope
    from memlane.working import WorkingMemory

    __version__: str

_ERRORS = "memlane.errors"
_STORES = "memlane.stores"

_LAZY: dict[str, str] = {
    "BACKEND": "memlane._backend",
    "ConversationMemory": "memlane.conversation.memory",
    "ConversationNotFoundError": _ERRORS,
    "ConversationTurn": "memlane.types",
    "CorruptStoreError": _ERRORS,
    "FileStore": "memlane.stores.file",
    "InMemoryStore": "memlane.stores.in_memory",
    "InvalidValueError": _ERRORS,
    "LongTermMemory": "memlane.longterm.memory",
    "MemlaneError": _ERRORS,
    "MemoryEntry": "memlane.types",
    "MemoryManager": "memlane.manager",
    "MemoryScope": "memlane.types",
    "MemoryStore": "memlane.stores.protocol",
    "MongoDBStore": "memlane.stores.mongodb",
    "NotAStoreError": _ERRORS,
    "NotFoundError": _ERRORS,
    "PostgreSQLStore": "memlane.stores.postgres",
    "ProcedureNotFoundError": _ERRORS,
    "ReadOnlyStoreError": _ERRORS,
    "SQLiteStore": "memlane.stores.sqlite",
    "StoreClosedError": _ERRORS,
    "StoreConnectionError": _ERRORS,
    "StoreError": _ERRORS,
    "StorePathError": _ERRORS,
    "SummaryStatus": "memlane.conversation.summary_backoff",
    "TokenEstimator": "memlane.tokens",
    "UnstorableValueError": _ERRORS,
    "UserNotFoundError": _ERRORS,
    "WorkingMemory": "memlane.working",
}
"""Where each public name lives: the module imported when the name is first used."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memlane")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"


def __getattr__(name: str) -> Any:
    """Imports a public name on first use and keeps it, so later uses are plain lookups."""
    if name == "__version__":
        value: Any = _version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'memlane' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BACKEND",
    "ConversationMemory",
    "ConversationNotFoundError",
    "ConversationTurn",
    "CorruptStoreError",
    "FileStore",
    "InMemoryStore",
    "InvalidValueError",
    "LongTermMemory",
    "MemlaneError",
    "MemoryEntry",
    "MemoryManager",
    "MemoryScope",
    "MemoryStore",
    "MongoDBStore",
    "NotAStoreError",
    "NotFoundError",
    "PostgreSQLStore",
    "ProcedureNotFoundError",
    "ReadOnlyStoreError",
    "SQLiteStore",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreError",
    "StorePathError",
    "SummaryStatus",
    "TokenEstimator",
    "UnstorableValueError",
    "UserNotFoundError",
    "WorkingMemory",
    "__version__",
]
