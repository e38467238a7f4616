"""Every store kind, opened for a test: the one place the five are made.

Test modules define their own fixtures (pytest reads fixtures per module, and importing a
fixture by name would shadow it) and open stores through :func:`open_store`, so adding a
store kind or changing how one is started happens here once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import FileStore, InMemoryStore, SQLiteStore
from memlane.stores import MemoryStore
from test_database_stores import StoreFactory, initialized, server_for

STORES = ["memory", "file", "sqlite", "postgres", "mongodb"]
"""Every store kind memlane ships."""

SHARED_STORES = [kind for kind in STORES if kind != "memory"]
"""The kinds another process (or another memory object) can open too."""


class Made:
    """A store of one kind, and what another process needs to open the same one.

    Attributes:
        kind: One of :data:`STORES`.
        store: The open store.
        cfg: ``{"url", "name"}`` for a database store, ``{"path"}`` for a local one.
    """

    def __init__(self, kind: str, store: MemoryStore, cfg: dict[str, Any]) -> None:
        self.kind = kind
        self.store = store
        self.cfg = cfg


async def open_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, name: str = "store"
) -> AsyncIterator[Made]:
    """Yields a fresh store of ``kind`` (on a database server: its own schema or
    collection), closed and dropped afterwards.

    Args:
        kind: One of :data:`STORES`.
        request: The fixture request (it finds the session's database servers).
        tmp_path: Where a local store keeps its file or directory.
        name: The file or directory name of a local store.
    """
    if kind in ("postgres", "mongodb"):
        factory = StoreFactory(kind, server_for(request, kind))
        store = await initialized(factory.make())
        yield Made(kind, store, {"url": factory.server.url, "name": factory.name})
        await factory.cleanup()
        return
    local: MemoryStore
    path = tmp_path / (f"{name}.sqlite3" if kind == "sqlite" else name)
    if kind == "memory":
        local = InMemoryStore()
    elif kind == "sqlite":
        local = SQLiteStore(path)
    else:
        local = FileStore(path)
    yield Made(kind, local, {"path": str(path)})
    local.close()
