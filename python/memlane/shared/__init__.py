"""Shared multi-agent memory: namespaced feeds that a manager and its workers write and read.

One job's record: the user conversation, each agent's trace (tasks, tool actions and
observations, errors, final results, plans, syntheses) and broadcasts to every agent. Each
role is shown its slice (:class:`WorkerHistoryFilter`, :class:`ManagerHistoryFilter`,
:class:`OrchestratorHistoryFilter`), cut to a token budget if asked, and turned into
pydantic-ai messages by :func:`to_model_messages`.

* In one process: :class:`LocalAgentMemory` (one agent's own), :class:`ProcessSharedMemory`
  over the process-wide :class:`SharedStateStore`.
* Through a message store: :class:`MessageStoreMemory` (worker view) and
  :class:`HierarchicalMessageStoreMemory` (manager view) over any :class:`BaseMessageStore`,
  e.g. :class:`InMemoryMessageStore` or :class:`StoreMessageStore`.
* On any memlane store, across processes and restarts: :class:`SharedMemory` and
  :class:`StoreMessageStore`.
* From configuration: :meth:`BaseMemory.from_config`.

Every memory adds and reads with sync methods and their ``async_`` twins
(``add_message``/``async_add_message``, ``get_message_history``/``async_get_message_history``).
The names before that scheme, and ``InMemoryMemory``, ``SharedInMemoryMemory`` and
``memory_from_config``, still work for one release and warn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlane._deprecation import moved_names
from memlane.shared import constants, message_builder
from memlane.shared.agent_memories import (
    BaseMemory,
    HierarchicalMessageStoreMemory,
    LocalAgentMemory,
    MessageStoreMemory,
    ProcessSharedMemory,
    SharedMemory,
)
from memlane.shared.convert import render, to_model_messages
from memlane.shared.filters import (
    HistoryFilter,
    ManagerHistoryFilter,
    OrchestratorHistoryFilter,
    Role,
    ViewSpec,
    WorkerHistoryFilter,
)
from memlane.shared.memory_config import PRESETS, build_memory
from memlane.shared.message_store import BaseMessageStore, InMemoryMessageStore
from memlane.shared.persistent import StoreMessageStore
from memlane.shared.state_store import SharedStateStore

__all__ = [
    "PRESETS",
    "BaseMemory",
    "BaseMessageStore",
    "HierarchicalMessageStoreMemory",
    "HistoryFilter",
    "InMemoryMessageStore",
    "LocalAgentMemory",
    "ManagerHistoryFilter",
    "MessageStoreMemory",
    "OrchestratorHistoryFilter",
    "ProcessSharedMemory",
    "Role",
    "SharedMemory",
    "SharedStateStore",
    "StoreMessageStore",
    "ViewSpec",
    "WorkerHistoryFilter",
    "constants",
    "message_builder",
    "render",
    "to_model_messages",
]

if TYPE_CHECKING:  # the deprecated names, for type checkers; at run time __getattr__ warns
    from memlane.shared.memory_config import memory_from_config as memory_from_config

    InMemoryMemory = LocalAgentMemory
    SharedInMemoryMemory = ProcessSharedMemory
else:
    __getattr__ = moved_names(
        __name__,
        {
            "InMemoryMemory": ("LocalAgentMemory", LocalAgentMemory),
            "SharedInMemoryMemory": ("ProcessSharedMemory", ProcessSharedMemory),
            "memory_from_config": ("BaseMemory.from_config", build_memory),
        },
    )
