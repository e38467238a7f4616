"""memlane's exceptions, defined once and raised by both the Rust and the pure-Python paths.

Each subclasses the built-in that callers already catch, so ``except KeyError`` keeps working.
"""

from __future__ import annotations


class MemlaneError(Exception):
    """Base class of every exception memlane defines."""


class ConversationNotFoundError(MemlaneError, KeyError):
    """A conversation id that memory does not hold."""

    def __str__(self) -> str:
        # KeyError.__str__ repr()s its argument; keep the readable message instead.
        return str(self.args[0]) if self.args else ""


class UnstorableValueError(MemlaneError, TypeError):
    """Content a store cannot hold (for example, not JSON-serialisable)."""


class InvalidValueError(MemlaneError, ValueError):
    """A value a backend cannot hold at all (for example, NUL characters in PostgreSQL text)."""


class CorruptStoreError(MemlaneError, ValueError):
    """A persisted file or row that cannot be read back; names where it is."""


class StoreConnectionError(MemlaneError, ConnectionError):
    """A database server that could not be reached; names host and port."""
