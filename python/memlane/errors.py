"""memlane's exceptions, defined once and raised by both the Rust and the pure-Python paths.

Each subclasses the built-in that callers already catch, so ``except KeyError`` or
``except OSError`` keeps working. Every failure of a store to reach or use its data is a
:class:`StoreError` (an ``OSError``), whatever the backend, and names the path or address.
"""

from __future__ import annotations


class MemlaneError(Exception):
    """Base class of every exception memlane defines."""


class NotFoundError(MemlaneError, KeyError):
    """An id that memory does not hold (a ``KeyError`` with a readable message)."""

    def __str__(self) -> str:
        # KeyError.__str__ repr()s its argument; keep the readable message instead.
        return str(self.args[0]) if self.args else ""


class ConversationNotFoundError(NotFoundError):
    """A conversation id that memory does not hold."""


class UserNotFoundError(NotFoundError):
    """A long-term memory user id the store does not hold."""


class ProcedureNotFoundError(NotFoundError):
    """A procedure id the store does not hold."""


class UnstorableValueError(MemlaneError, TypeError):
    """Content a store cannot hold (for example, not JSON-serialisable)."""


class InvalidValueError(MemlaneError, ValueError):
    """A value a backend cannot hold at all (for example, NUL characters in PostgreSQL text)."""


class StoreError(MemlaneError, OSError):
    """A store could not read or write its data (I/O, locking, a server); names where."""


class StorePathError(StoreError):
    """A path that cannot hold a store (a directory where a file belongs, or the reverse)."""


class CorruptStoreError(StoreError, ValueError):
    """A persisted file or row that cannot be read back; names where it is."""


class StoreConnectionError(StoreError, ConnectionError):
    """A database server that could not be reached; names host and port."""


class StoreClosedError(MemlaneError, ValueError):
    """A local store used after :meth:`close` (a ``ValueError``, as for a closed file)."""


class ReadOnlyStoreError(StoreError):
    """A write to a store opened read-only (``read_only=True``); names the store."""


class NotAStoreError(StoreError):
    """A file or database that is not a memlane store (missing, empty, or another
    application's); names the file or place. Nothing is created or changed in it."""


class ConditionError(MemlaneError, ValueError):
    """A strategy condition that does not parse, names something unknown, or fails to
    evaluate; the message quotes the expression."""
