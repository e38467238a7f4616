"""Where memory lives: five stores behind one :class:`MemoryStore` protocol.

:class:`InMemoryStore` and :class:`SQLiteStore` run on the Rust tables when the extension is
active and on their pure-Python twins otherwise; :class:`FileStore` keeps readable JSON files;
:class:`PostgreSQLStore` and :class:`MongoDBStore` share memory across a fleet of hosts (their
drivers are optional extras, imported when a store is created).

Every store has the same methods: ``save``, ``save_many``, ``load``, ``load_by_key``,
``delete``, ``clear``, ``namespaces``, ``cleanup_expired``, ``initialize`` and ``close``, each
with an ``async_`` twin, and works as ``with store:`` and ``async with store:``. Each also
implements :class:`ConditionalStore`: ``save_if`` (an atomic compare-and-swap on a key's
version), ``load_range`` (keyed entries in a key range, by index) and ``delete_many`` (several
entries at once, in one transaction on SQLite and PostgreSQL), which hosts sharing a store
and operator tools rely on; a custom store without them still serves one process.

Every store opens read-only with ``read_only=True``: it creates and migrates nothing, every
write raises :class:`~memlane.errors.ReadOnlyStoreError`, and a place that is not a memlane
store raises :class:`~memlane.errors.NotAStoreError` naming it. Each is also a
:class:`SearchableStore`: ``search`` ranks the entries carrying a ``search_text`` by a
query's words, from the store's own full-text index. And each is a :class:`VectorStore`:
``save_vectors`` keeps an embedding beside an entry (in step with it) and ``vector_search``
ranks by cosine similarity.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlane.stores.fallbacks import VectorFallbackWarning
    from memlane.stores.file import FileStore
    from memlane.stores.in_memory import InMemoryStore
    from memlane.stores.mongodb import IndexFallbackWarning, MongoDBStore
    from memlane.stores.postgres import PostgreSQLStore
    from memlane.stores.protocol import (
        AsyncMemoryStore,
        ConditionalStore,
        MemoryStore,
        SearchableStore,
        SearchHit,
        SyncMemoryStore,
        VectorStore,
    )
    from memlane.stores.sqlite import SQLiteStore
    from memlane.stores.vectors import EntryVector

_PROTOCOL = "memlane.stores.protocol"

# Each store is imported the first time it is named (PEP 562): a process that keeps memory
# in this process's memory never loads the file, SQLite or network stores.
_LAZY: dict[str, str] = {
    "AsyncMemoryStore": _PROTOCOL,
    "EntryVector": "memlane.stores.vectors",
    "ConditionalStore": _PROTOCOL,
    "FileStore": "memlane.stores.file",
    "InMemoryStore": "memlane.stores.in_memory",
    "IndexFallbackWarning": "memlane.stores._connect",
    "MemoryStore": _PROTOCOL,
    "MongoDBStore": "memlane.stores.mongodb",
    "PostgreSQLStore": "memlane.stores.postgres",
    "SQLiteStore": "memlane.stores.sqlite",
    "SearchHit": _PROTOCOL,
    "SearchableStore": _PROTOCOL,
    "SyncMemoryStore": _PROTOCOL,
    "VectorFallbackWarning": "memlane.stores.fallbacks",
    "VectorStore": _PROTOCOL,
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'memlane.stores' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AsyncMemoryStore",
    "ConditionalStore",
    "EntryVector",
    "FileStore",
    "InMemoryStore",
    "IndexFallbackWarning",
    "MemoryStore",
    "MongoDBStore",
    "PostgreSQLStore",
    "SQLiteStore",
    "SearchHit",
    "SearchableStore",
    "SyncMemoryStore",
    "VectorFallbackWarning",
    "VectorStore",
]
