"""Old path of :mod:`memlane.shared.memory_config`, kept so existing imports keep working."""

from memlane.shared.memory_config import (
    PRESETS,
    build_memory,
    memory_from_config,
)

__all__ = [
    "PRESETS",
    "build_memory",
    "memory_from_config",
]
