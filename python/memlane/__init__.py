"""memlane: memory for LLM agents.

Token-budgeted conversation memory, a scoped working-memory scratchpad and pluggable stores,
with a Rust core (``memlane._core``) and a pure-Python twin of every Rust piece.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from memlane._backend import BACKEND
from memlane.conversation import ConversationMemory
from memlane.errors import (
    ConversationNotFoundError,
    CorruptStoreError,
    InvalidValueError,
    MemlaneError,
    NotFoundError,
    ProcedureNotFoundError,
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

try:
    __version__ = version("memlane")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

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
    "NotFoundError",
    "PostgreSQLStore",
    "ProcedureNotFoundError",
    "SQLiteStore",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreError",
    "StorePathError",
    "TokenEstimator",
    "UnstorableValueError",
    "UserNotFoundError",
    "WorkingMemory",
    "__version__",
]
