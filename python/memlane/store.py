"""Stores behind one :class:`MemoryStore` protocol: in memory, SQLite and JSON files.

:class:`InMemoryStore` and :class:`SQLiteStore` run on the Rust tables when the extension is
active and on their pure-Python twins otherwise; :class:`FileStore` is Python only. Database
servers live in :mod:`memlane.database_store`.

Every store follows the same rules: saving an ``entry_id`` again replaces that entry; a key is
unique within a namespace (saving a keyed entry replaces whatever held the key, atomically);
``load`` keeps insertion order; expired entries are never returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from memlane import _backend
from memlane._pure import store as pure
from memlane.errors import CorruptStoreError, UnstorableValueError
from memlane.types import MemoryEntry, MemoryScope

__all__ = [
    "FileStore",
    "InMemoryStore",
    "MemoryStore",
    "SQLiteStore",
    "check_namespace",
]

T = TypeVar("T")


@runtime_checkable
class MemoryStore(Protocol):
    """Where memory lives. Sync methods plus ``async_*`` twins that never block the loop."""

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts ``entry`` or replaces the entry with the same ``entry_id`` or key."""

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries of ``namespace`` in insertion order."""

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""

    def clear(self, namespace: str) -> int:
        """Removes every entry of ``namespace``; how many."""

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async :meth:`save`."""

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async :meth:`load`."""

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async :meth:`load_by_key`."""

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Async :meth:`delete`."""

    async def async_clear(self, namespace: str) -> int:
        """Async :meth:`clear`."""


# ---------------------------------------------------------------------------- validation


def check_namespace(namespace: object) -> str:
    """A namespace must be a non-empty ``str`` without NUL characters.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Empty or containing ``\\x00``.
    """
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be str, not {type(namespace).__name__}")
    if not namespace or "\x00" in namespace:
        raise ValueError(f"namespace must be a non-empty string without NUL, got {namespace!r}")
    return namespace


def check_key(key: object) -> str:
    """A lookup key must be a ``str``.

    Raises:
        TypeError: Not a ``str``.
    """
    if not isinstance(key, str):
        raise TypeError(f"key must be str, not {type(key).__name__}")
    return key


def check_entry(entry: object) -> MemoryEntry:
    """The entry argument of ``save`` must be a :class:`MemoryEntry`.

    Raises:
        TypeError: Anything else.
    """
    if not isinstance(entry, MemoryEntry):
        raise TypeError(f"entry must be MemoryEntry, not {type(entry).__name__}")
    return entry


def _find_unstorable(value: Any, path: str) -> str | None:
    """Where ``value`` stops being plain JSON (``None`` if it is), e.g. ``content['a'][2]``."""
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path} (non-finite float {value!r})"
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _find_unstorable(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{path} (dict key {k!r} of type {type(k).__name__})"
            found = _find_unstorable(item, f"{path}[{k!r}]")
            if found:
                return found
        return None
    return f"{path} (type {type(value).__name__})"


def dumps_json(value: Any, *, key: str | None, field: str) -> str:
    """JSON text of ``value``, or a :class:`TypeError` naming the key and the offending type.

    Only what JSON holds exactly is accepted (no NaN, no non-str dict keys), so what is
    read back equals what was saved.

    Raises:
        UnstorableValueError: ``value`` is not plain JSON.
    """
    found = _find_unstorable(value, field)
    if found is not None:
        raise UnstorableValueError(
            f"cannot store entry with key {key!r}: {found} is not JSON-serialisable"
        )
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _timestamp(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _now() -> float:
    return datetime.now(UTC).timestamp()


def entry_to_row(entry: MemoryEntry) -> pure.Row:
    """The persisted form of an entry (validates that it is storable)."""
    return (
        entry.entry_id,
        entry.scope.value,
        entry.key,
        dumps_json(entry.content, key=entry.key, field="content"),
        dumps_json(entry.metadata, key=entry.key, field="metadata"),
        entry.created_at.isoformat(),
        _timestamp(entry.expires_at),
        entry.importance,
    )


def row_to_entry(row: pure.Row | tuple[Any, ...], where: str) -> MemoryEntry:
    """An entry from its persisted form.

    Raises:
        CorruptStoreError: The row cannot be decoded; the message names ``where``.
    """
    entry_id, scope, key, content, metadata, created_at, expires_at, importance = row
    try:
        return MemoryEntry.model_construct(
            entry_id=entry_id,
            scope=MemoryScope(scope),
            key=key,
            content=json.loads(content),
            metadata=json.loads(metadata),
            created_at=datetime.fromisoformat(created_at),
            expires_at=None if expires_at is None else datetime.fromtimestamp(expires_at, UTC),
            importance=float(importance),
        )
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"corrupt entry {entry_id!r} in {where}: {exc}") from exc


class _ThreadedAsync:
    """Async twins that run the sync method in a worker thread, off the event loop."""

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async :meth:`save`, in a worker thread."""
        await self._run(self.save, namespace, entry)  # type: ignore[attr-defined]

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async :meth:`load`, in a worker thread."""
        return await self._run(self.load, namespace)  # type: ignore[attr-defined]

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async :meth:`load_by_key`, in a worker thread."""
        return await self._run(self.load_by_key, namespace, key)  # type: ignore[attr-defined]

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Async :meth:`delete`, in a worker thread."""
        return await self._run(self.delete, namespace, entry_id)  # type: ignore[attr-defined]

    async def async_clear(self, namespace: str) -> int:
        """Async :meth:`clear`, in a worker thread."""
        return await self._run(self.clear, namespace)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- in memory


class _TableStore:
    """What the Rust-backed stores share: the table does the work, this validates arguments."""

    _table: Any

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        return bool(self._table.delete(check_namespace(namespace), check_key_like(entry_id)))

    def clear(self, namespace: str) -> int:
        """Removes every entry of the namespace; how many."""
        return int(self._table.clear(check_namespace(namespace)))

    def cleanup_expired(self) -> int:
        """Removes expired entries; how many."""
        return int(self._table.cleanup_expired(_now()))

    def namespaces(self) -> list[str]:
        """Namespaces holding at least one entry."""
        return list(self._table.namespaces())


def _memory_table() -> Any:
    return _backend.active.MemoryTable()


class InMemoryStore(_TableStore):
    """Entries in process memory, with a key index (``load_by_key`` is O(1)).

    Content is kept as the object you saved (not copied, not serialised), so anything can be
    stored. The default store of every memory.
    """

    persistent = False

    def __init__(self) -> None:
        self._table = _memory_table()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry`` (by ``entry_id``, and by key within the namespace)."""
        entry = check_entry(entry)
        self._table.save(
            check_namespace(namespace), entry.entry_id, entry.key, _timestamp(entry.expires_at), entry
        )

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries of one namespace."""
        for entry in entries:
            self.save(namespace, entry)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        return list(self._table.load(check_namespace(namespace), _now()))

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        found: MemoryEntry | None = self._table.load_by_key(
            check_namespace(namespace), check_key(key), _now()
        )
        return found

    # In-memory operations are O(1) and never wait on I/O: run them inline.
    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        """Async :meth:`save` (inline: nothing to wait for)."""
        self.save(namespace, entry)

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Async :meth:`save_many`."""
        self.save_many(namespace, entries)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        """Async :meth:`load`."""
        return self.load(namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """Async :meth:`load_by_key`."""
        return self.load_by_key(namespace, key)

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        """Async :meth:`delete`."""
        return self.delete(namespace, entry_id)

    async def async_clear(self, namespace: str) -> int:
        """Async :meth:`clear`."""
        return self.clear(namespace)


def check_key_like(entry_id: object) -> str:
    """An ``entry_id`` argument must be a ``str``.

    Raises:
        TypeError: Not a ``str``.
    """
    if not isinstance(entry_id, str):
        raise TypeError(f"entry_id must be str, not {type(entry_id).__name__}")
    return entry_id


# ---------------------------------------------------------------------------- SQLite


def _sqlite_table(path: str) -> Any:
    return _backend.active.SqliteTable(path)


class SQLiteStore(_TableStore, _ThreadedAsync):
    """An SQLite file (WAL, every operation one transaction, indexed by namespace and key).

    Args:
        path: The database file; it and its parent directories are created if missing.
            ``":memory:"`` keeps the database in memory.
    """

    persistent = True

    def __init__(self, path: str | os.PathLike[str] = ".memlane/memory.sqlite3") -> None:
        self.path = os.fspath(path)
        self._table = _sqlite_table(self.path)

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry`` atomically.

        Raises:
            UnstorableValueError: Content or metadata is not JSON-serialisable.
        """
        self._table.save(check_namespace(namespace), entry_to_row(check_entry(entry)))

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries in one transaction: all or none."""
        rows = [entry_to_row(check_entry(e)) for e in entries]
        self._table.save_many(check_namespace(namespace), rows)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        rows = self._table.load(check_namespace(namespace), _now())
        return [row_to_entry(r, self.path) for r in rows]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        row = self._table.load_by_key(check_namespace(namespace), check_key(key), _now())
        return None if row is None else row_to_entry(row, self.path)

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Async :meth:`save_many`, in a worker thread."""
        await self._run(self.save_many, namespace, entries)

    def close(self) -> None:
        """Closes the database."""
        self._table.close()


# ---------------------------------------------------------------------------- JSON files


def namespace_filename(namespace: str) -> str:
    """A file name that is unique per namespace and cannot leave its directory.

    Readable characters are kept for humans; everything else is percent-encoded, and a short
    hash of the exact namespace is appended so that no two namespaces ever share a file
    (the design memlane grew out of mapped ``a/b`` and ``a_b`` to one file).
    """
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else f"%{ord(c):02X}" for c in namespace)
    digest = hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[:80]}.{digest}.json"


class FileStore(_ThreadedAsync):
    """One human-readable JSON file per namespace under ``base_dir``.

    Writes go to a temporary file that is then renamed over the old one, so a crash leaves
    either the old or the new file, never half of one. A file that cannot be parsed raises
    :class:`~memlane.errors.CorruptStoreError` naming it; it is never silently overwritten.
    """

    persistent = True

    def __init__(self, base_dir: str | os.PathLike[str] = ".memlane") -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()

    def _path(self, namespace: str) -> Path:
        return self.base_dir / namespace_filename(check_namespace(namespace))

    def _read(self, namespace: str) -> list[dict[str, Any]]:
        path = self._path(namespace)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("namespace") != namespace:
                raise ValueError("not a memlane namespace file for this namespace")
            entries = data["entries"]
            if not isinstance(entries, list):
                raise ValueError("'entries' is not a list")
            return entries
        except (ValueError, KeyError) as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc

    def _write(self, namespace: str, entries: list[dict[str, Any]]) -> None:
        path = self._path(namespace)
        if not entries:
            path.unlink(missing_ok=True)
            return
        payload = json.dumps(
            {"namespace": namespace, "entries": entries}, ensure_ascii=False, indent=2
        )
        fd, tmp = tempfile.mkstemp(dir=self.base_dir, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @staticmethod
    def _to_doc(entry: MemoryEntry) -> dict[str, Any]:
        row = entry_to_row(entry)
        return {
            "entry_id": entry.entry_id,
            "scope": entry.scope.value,
            "key": entry.key,
            "content": json.loads(row[3]),
            "metadata": json.loads(row[4]),
            "created_at": row[5],
            "expires_at": None if entry.expires_at is None else entry.expires_at.isoformat(),
            "importance": entry.importance,
        }

    def _from_doc(self, doc: dict[str, Any], namespace: str) -> MemoryEntry:
        try:
            return MemoryEntry.model_validate(doc)
        except ValueError as exc:
            raise CorruptStoreError(f"corrupt entry in {self._path(namespace)}: {exc}") from exc

    def _all_namespace_files(self) -> list[Path]:
        return sorted(self.base_dir.glob("*.json"))

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry``; the namespace file is rewritten atomically.

        Raises:
            UnstorableValueError: Content or metadata is not JSON-serialisable.
            CorruptStoreError: The existing file cannot be parsed.
        """
        self.save_many(namespace, [entry])

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries with one atomic rewrite of the namespace file."""
        new_docs = [self._to_doc(check_entry(e)) for e in entries]
        with self._lock:
            docs = self._read(namespace)
            for doc in new_docs:
                docs = [
                    d
                    for d in docs
                    if not (doc["key"] is not None and d.get("key") == doc["key"] and d.get("entry_id") != doc["entry_id"])
                ]
                for i, d in enumerate(docs):
                    if d.get("entry_id") == doc["entry_id"]:
                        docs[i] = doc
                        break
                else:
                    docs.append(doc)
            self._write(namespace, docs)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        with self._lock:
            docs = self._read(namespace)
        entries = [self._from_doc(d, namespace) for d in docs]
        return [e for e in entries if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        check_key(key)
        for entry in self.load(namespace):
            if entry.key == key:
                return entry
        return None

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        check_key_like(entry_id)
        with self._lock:
            docs = self._read(namespace)
            kept = [d for d in docs if d.get("entry_id") != entry_id]
            if len(kept) == len(docs):
                return False
            self._write(namespace, kept)
            return True

    def clear(self, namespace: str) -> int:
        """Removes the namespace file; how many entries it held."""
        with self._lock:
            count = len(self._read(namespace))
            self._path(namespace).unlink(missing_ok=True)
            return count

    def cleanup_expired(self) -> int:
        """Rewrites every file without its expired entries; how many were removed."""
        removed = 0
        with self._lock:
            for path in self._all_namespace_files():
                try:
                    namespace = json.loads(path.read_text(encoding="utf-8"))["namespace"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
                docs = self._read(namespace)
                kept = [d for d in docs if not self._from_doc(d, namespace).is_expired]
                if len(kept) != len(docs):
                    removed += len(docs) - len(kept)
                    self._write(namespace, kept)
        return removed

    def namespaces(self) -> list[str]:
        """Namespaces that have a file."""
        names = []
        for path in self._all_namespace_files():
            try:
                names.append(json.loads(path.read_text(encoding="utf-8"))["namespace"])
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        return names

    async def async_save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Async :meth:`save_many`, in a worker thread."""
        await self._run(self.save_many, namespace, entries)
