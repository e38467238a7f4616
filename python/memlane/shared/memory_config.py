"""Memories from configuration: :meth:`BaseMemory.from_config`, from a ``dict`` or a YAML file.

A configuration names a memory class or a preset under ``type`` and its arguments under
``config``::

    type: SharedMemory
    config:
      namespace: ${JOB_ID}
      agent_key: worker_1
      store: {type: sqlite, path: .memlane/shared.sqlite3}
      filter: worker

``${VAR}`` anywhere in a string is replaced by the environment variable ``VAR`` (a missing
one is an error naming it; ``${VAR:-fallback}`` gives ``fallback`` instead). Presets:
``standalone`` (a :class:`~memlane.shared.LocalAgentMemory`), ``worker`` and ``manager`` (a
shared memory with the worker or manager view, on ``store`` if one is configured, else in
this process).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from memlane._deprecation import deprecated_alias
from memlane._validate import type_name
from memlane.shared.agent_memories import (
    BaseMemory,
    HierarchicalMessageStoreMemory,
    LocalAgentMemory,
    MessageStoreMemory,
    ProcessSharedMemory,
    SharedMemory,
)
from memlane.shared.filters import (
    HistoryFilter,
    ManagerHistoryFilter,
    OrchestratorHistoryFilter,
    WorkerHistoryFilter,
)
from memlane.shared.persistent import StoreMessageStore
from memlane.stores import FileStore, InMemoryStore, MemoryStore, SQLiteStore

__all__ = ["PRESETS", "build_memory", "memory_from_config"]

PRESETS = ("standalone", "worker", "manager")
"""The preset names ``type`` accepts besides the memory classes."""

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

_FILTERS: dict[str, Callable[..., HistoryFilter]] = {
    "worker": WorkerHistoryFilter,
    "WorkerHistoryFilter": WorkerHistoryFilter,
    "manager": ManagerHistoryFilter,
    "ManagerHistoryFilter": ManagerHistoryFilter,
    "orchestrator": OrchestratorHistoryFilter,
    "OrchestratorHistoryFilter": OrchestratorHistoryFilter,
}


def _expand(value: Any, where: str) -> Any:
    """``value`` with every ``${VAR}`` of its strings taken from the environment."""
    if isinstance(value, str):

        def variable(match: re.Match[str]) -> str:
            name, fallback = match.group(1), match.group(2)
            found = os.environ.get(name, fallback)
            if found is None:
                raise ValueError(f"environment variable {name} is not set (used in {where})")
            return found

        return _VARIABLE.sub(variable, value)
    if isinstance(value, Mapping):
        return {k: _expand(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def _load_yaml(path: Path) -> Any:
    try:
        import yaml  # optional: only a YAML configuration needs it
    except ImportError as exc:  # pragma: no cover - the yaml extra is not installed
        raise ImportError("a YAML configuration needs PyYAML: pip install 'memlane[yaml]'") from exc
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from exc


def _make_store(spec: Any) -> MemoryStore:
    if not isinstance(spec, Mapping):
        raise TypeError(f"store must be a mapping with a type, not {type_name(spec)}")
    options = dict(spec)
    kind = options.pop("type", None)
    if kind in ("memory", "in_memory"):
        return InMemoryStore(**options)
    if kind == "sqlite":
        return SQLiteStore(**options)
    if kind == "file":
        return FileStore(**options)
    if kind == "postgres":
        from memlane.stores.postgres import PostgreSQLStore  # optional driver

        return PostgreSQLStore(**options)
    if kind == "mongodb":
        from memlane.stores.mongodb import MongoDBStore  # optional driver

        return MongoDBStore(**options)
    raise ValueError(
        f"unknown store type {kind!r}; valid: 'memory', 'sqlite', 'file', 'postgres', 'mongodb'"
    )


def _make_filter(spec: Any) -> HistoryFilter | None:
    if spec is None or isinstance(spec, HistoryFilter):
        return spec
    options: dict[str, Any] = {}
    if isinstance(spec, Mapping):
        options = dict(spec)
        spec = options.pop("type", None)
    if not isinstance(spec, str) or spec not in _FILTERS:
        valid = ", ".join(repr(name) for name in _FILTERS)
        raise ValueError(f"unknown filter {spec!r}; valid: {valid}")
    return _FILTERS[spec](**options)


def _build(kind: str, options: dict[str, Any], store: MemoryStore | None) -> BaseMemory:
    if "filter" in options:
        options["filter"] = _make_filter(options["filter"])
    spec = options.pop("store", None)
    if spec is not None:
        store = spec if isinstance(spec, MemoryStore) else _make_store(spec)
    # A configuration is data: the classes' former names keep meaning what they did.
    kind = _FORMER_NAMES.get(kind, kind)
    if kind == "standalone":
        kind = "LocalAgentMemory"
    elif kind in ("worker", "manager"):
        options.setdefault("filter", _make_filter(kind))
        kind = "ProcessSharedMemory" if store is None else "SharedMemory"
    if kind == "LocalAgentMemory":
        return LocalAgentMemory(**options)
    if kind == "ProcessSharedMemory":
        return ProcessSharedMemory(**options)
    if store is None:
        raise ValueError(f"{kind} needs a store: give config.store or store=")
    if kind == "SharedMemory":
        return SharedMemory(store, **options)
    messages = StoreMessageStore(store)
    if kind == "MessageStoreMemory":
        return MessageStoreMemory(messages, **options)
    return HierarchicalMessageStoreMemory(messages, **options)


_FORMER_NAMES = {
    "InMemoryMemory": "LocalAgentMemory",
    "SharedInMemoryMemory": "ProcessSharedMemory",
}

_KINDS = (
    "LocalAgentMemory",
    "ProcessSharedMemory",
    *_FORMER_NAMES,
    "SharedMemory",
    "MessageStoreMemory",
    "HierarchicalMessageStoreMemory",
    *PRESETS,
)


def build_memory(
    config: Mapping[str, Any] | str | os.PathLike[str], *, store: MemoryStore | None = None
) -> BaseMemory:
    """The memory a configuration describes (what :meth:`BaseMemory.from_config` builds).

    Args:
        config: A mapping with ``type`` (a memory class name or a preset) and ``config``
            (its arguments; ``filter`` may name a filter, ``store`` describe a memlane store
            as ``{type: sqlite, path: ...}``), or the path of a YAML file holding one.
        store: The memlane store of memories that need one, unless ``config.store`` says.

    Returns:
        The memory.

    Raises:
        TypeError: ``config`` is neither a mapping nor a path, or an argument has a wrong
            type or name.
        ValueError: An unknown type, filter or store type; an environment variable that is
            not set (named); a file that is not valid YAML; a bad argument value.
        OSError: The file cannot be read.
    """
    where = "config"
    if isinstance(config, str | os.PathLike):
        where = os.fspath(config)
        config = _load_yaml(Path(config))
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping with type and config, not {type_name(config)}")
    unknown = set(config) - {"type", "config"}
    if unknown:
        raise ValueError(f"unknown keys in {where}: {sorted(unknown)}; expected type and config")
    expanded = _expand(dict(config), where)
    kind = expanded.get("type")
    if kind not in _KINDS:
        raise ValueError(f"unknown memory type {kind!r} in {where}; valid: {', '.join(_KINDS)}")
    options = expanded.get("config") or {}
    if not isinstance(options, Mapping):
        raise TypeError(f"config.config must be a mapping, not {type_name(options)}")
    return _build(kind, dict(options), store)


memory_from_config = deprecated_alias(
    build_memory, "memlane.shared.memory_from_config", "BaseMemory.from_config"
)
