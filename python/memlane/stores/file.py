"""FileStore: one human-readable JSON file per namespace, each rewritten atomically."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from memlane.errors import CorruptStoreError, StoreError
from memlane.stores._base import LocalStore, ensure_directory
from memlane.stores.protocol import (
    check_entry,
    check_entry_id,
    check_key,
    check_namespace,
    entry_to_row,
)
from memlane.types import MemoryEntry

__all__ = ["FileStore", "namespace_filename"]


def namespace_filename(namespace: str) -> str:
    """A file name that is unique per namespace and cannot leave its directory.

    Readable characters are kept for humans; everything else is percent-encoded, and a short
    hash of the exact namespace is appended so that no two namespaces ever share a file
    (the design memlane grew out of mapped ``a/b`` and ``a_b`` to one file).
    """
    safe = "".join(
        c if c.isascii() and (c.isalnum() or c in "-_") else f"%{ord(c):02X}" for c in namespace
    )
    digest = hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[:80]}.{digest}.json"


def _doc(entry: MemoryEntry) -> dict[str, Any]:
    row = entry_to_row(entry)  # the value rule, applied as every store applies it
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


def _merge(docs: list[dict[str, Any]], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``docs`` after saving ``doc``: whoever held its key goes, its entry_id is replaced in place."""
    key, entry_id = doc["key"], doc["entry_id"]
    kept = [
        d
        for d in docs
        if not (key is not None and d.get("key") == key and d.get("entry_id") != entry_id)
    ]
    for i, d in enumerate(kept):
        if d.get("entry_id") == entry_id:
            kept[i] = doc
            return kept
    kept.append(doc)
    return kept


class FileStore(LocalStore):
    """One human-readable JSON file per namespace under ``base_dir``.

    Writes go to a temporary file that is then renamed over the old one, so a crash leaves
    either the old or the new file, never half of one. A file that cannot be parsed raises
    :class:`~memlane.errors.CorruptStoreError` naming it; it is never silently overwritten.
    The ``async_`` methods run in a worker thread.

    Args:
        base_dir: The directory; it is created if missing.

    Raises:
        StorePathError: ``base_dir`` is not a directory and cannot be made one (an ``OSError``).
    """

    persistent = True

    def __init__(self, base_dir: str | os.PathLike[str] = ".memlane") -> None:
        self.base_dir = Path(base_dir)
        ensure_directory(self.base_dir, f"FileStore {self.base_dir}")
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_dir}>"

    def _path(self, namespace: str) -> Path:
        self._check_open()
        return self.base_dir / namespace_filename(check_namespace(namespace))

    def _read(self, namespace: str) -> list[dict[str, Any]]:
        path = self._path(namespace)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("namespace") != namespace:
                raise ValueError("not a memlane namespace file for this namespace")
            entries = data["entries"]
            if not isinstance(entries, list):
                raise ValueError("'entries' is not a list")
        except (ValueError, KeyError) as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        return entries

    def _write(self, namespace: str, entries: list[dict[str, Any]]) -> None:
        path = self._path(namespace)
        if not entries:
            path.unlink(missing_ok=True)
            return
        payload = json.dumps(
            {"namespace": namespace, "entries": entries}, ensure_ascii=False, indent=2
        )
        try:
            fd, tmp = tempfile.mkstemp(dir=self.base_dir, prefix=".tmp-", suffix=".json")
        except OSError as exc:
            raise StoreError(f"FileStore {self.base_dir}: {exc.strerror}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _from_doc(self, doc: dict[str, Any], namespace: str) -> MemoryEntry:
        try:
            return MemoryEntry.model_validate(doc)
        except ValueError as exc:
            raise CorruptStoreError(f"corrupt entry in {self._path(namespace)}: {exc}") from exc

    def _namespace_files(self) -> list[tuple[Path, str]]:
        """Every namespace file and the namespace it holds."""
        self._check_open()
        found = []
        for path in sorted(self.base_dir.glob("*.json")):
            try:
                found.append((path, json.loads(path.read_text(encoding="utf-8"))["namespace"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        return found

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry``; the namespace file is rewritten atomically.

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            CorruptStoreError: The existing file cannot be parsed.
            StoreClosedError: The store was closed.
        """
        self.save_many(namespace, [entry])

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries with one atomic rewrite of the namespace file: all or none."""
        check_namespace(namespace)
        new_docs = [_doc(check_entry(e)) for e in entries]
        with self._lock:
            docs = self._read(namespace)
            for doc in new_docs:
                docs = _merge(docs, doc)
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
        check_entry_id(entry_id)
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

    def namespaces(self) -> list[str]:
        """Namespaces that have a file."""
        return [namespace for _, namespace in self._namespace_files()]

    def cleanup_expired(self) -> int:
        """Rewrites every file without its expired entries; how many were removed."""
        removed = 0
        with self._lock:
            for _, namespace in self._namespace_files():
                docs = self._read(namespace)
                kept = [d for d in docs if not self._from_doc(d, namespace).is_expired]
                if len(kept) != len(docs):
                    removed += len(docs) - len(kept)
                    self._write(namespace, kept)
        return removed
