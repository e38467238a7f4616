"""Old path of :mod:`memlane.shared.agent_memories` and :mod:`memlane.shared.view_memory`."""

from typing import TYPE_CHECKING

from memlane._deprecation import moved_names
from memlane.shared.agent_memories import (
    BaseMemory,
    HierarchicalMessageStoreMemory,
    LocalAgentMemory,
    MessageStoreMemory,
    ProcessSharedMemory,
    SharedMemory,
)

__all__ = [
    "BaseMemory",
    "HierarchicalMessageStoreMemory",
    "LocalAgentMemory",
    "MessageStoreMemory",
    "ProcessSharedMemory",
    "SharedMemory",
]

if TYPE_CHECKING:  # the deprecated names, for type checkers; at run time __getattr__ warns
    InMemoryMemory = LocalAgentMemory
    SharedInMemoryMemory = ProcessSharedMemory
else:
    __getattr__ = moved_names(
        __name__,
        {
            "InMemoryMemory": ("LocalAgentMemory", LocalAgentMemory),
            "SharedInMemoryMemory": ("ProcessSharedMemory", ProcessSharedMemory),
        },
    )
