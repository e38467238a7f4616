"""The embedded stores' former home; they live in :mod:`memlane.stores` now.

Kept so that existing imports keep working.
"""

from __future__ import annotations

from memlane.stores.file import FileStore, namespace_filename
from memlane.stores.in_memory import InMemoryStore
from memlane.stores.protocol import (
    MemoryStore,
    check_entry,
    check_entry_id,
    check_key,
    check_namespace,
    check_storable,
    dumps_json,
    entry_to_row,
    row_to_entry,
)
from memlane.stores.sqlite import SQLiteStore
from memlane.stores.stored_values import _find_unstorable

check_key_like = check_entry_id
"""The former name of :func:`~memlane.stores.protocol.check_entry_id`."""

__all__ = [
    "FileStore",
    "InMemoryStore",
    "MemoryStore",
    "SQLiteStore",
    "_find_unstorable",
    "check_entry",
    "check_entry_id",
    "check_key",
    "check_key_like",
    "check_namespace",
    "check_storable",
    "dumps_json",
    "entry_to_row",
    "namespace_filename",
    "row_to_entry",
]
