"""Shared multi-agent memory: namespaced feeds that a manager and its workers write and read.

One job's record: the user conversation, each agent's trace (tasks, tool actions and
observations, errors, final results, plans, syntheses) and broadcasts to every agent. Each
role is shown its slice (:class:`WorkerHistoryFilter`, :class:`ManagerHistoryFilter`,
:class:`OrchestratorHistoryFilter`), cut to a token budget if asked, and turned into
pydantic-ai messages by :func:`to_model_messages`.

* In one process: :class:`InMemoryMemory`, :class:`SharedInMemoryMemory` over the
  process-wide :class:`SharedStateStore`.
* Through a message store: :class:`MessageStoreMemory` (worker view) and
  :class:`HierarchicalMessageStoreMemory` (manager view) over any :class:`BaseMessageStore`,
  e.g. :class:`InMemoryMessageStore` or :class:`StoreMessageStore`.
* On any memlane store, across processes and restarts: :class:`SharedMemory` and
  :class:`StoreMessageStore`.
* From configuration: :func:`memory_from_config`.
"""

from __future__ import annotations

from memlane.shared import constants, message_builder
from memlane.shared.config import PRESETS, memory_from_config
from memlane.shared.convert import render, to_model_messages
from memlane.shared.filters import (
    HistoryFilter,
    ManagerHistoryFilter,
    OrchestratorHistoryFilter,
    Role,
    ViewSpec,
    WorkerHistoryFilter,
)
from memlane.shared.memory import (
    BaseMemory,
    HierarchicalMessageStoreMemory,
    InMemoryMemory,
    MessageStoreMemory,
    SharedInMemoryMemory,
    SharedMemory,
)
from memlane.shared.message_store import BaseMessageStore, InMemoryMessageStore
from memlane.shared.persistent import StoreMessageStore
from memlane.shared.state import SharedStateStore

__all__ = [
    "PRESETS",
    "BaseMemory",
    "BaseMessageStore",
    "HierarchicalMessageStoreMemory",
    "HistoryFilter",
    "InMemoryMemory",
    "InMemoryMessageStore",
    "ManagerHistoryFilter",
    "MessageStoreMemory",
    "OrchestratorHistoryFilter",
    "Role",
    "SharedInMemoryMemory",
    "SharedMemory",
    "SharedStateStore",
    "StoreMessageStore",
    "ViewSpec",
    "WorkerHistoryFilter",
    "constants",
    "memory_from_config",
    "message_builder",
    "render",
    "to_model_messages",
]
