"""FileStore: one human-readable JSON file per namespace, each rewritten atomically."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from memlane.errors import CorruptStoreError, StoreError
from memlane.stores._base import LocalStore, awaitable, ensure_directory
from memlane.stores.protocol import (
    SearchHit,
    check_entry,
    check_entry_id,
    check_expected_version,
    check_key,
    check_key_range,
    check_keyed_entry,
    check_namespace,
    check_search,
    entry_to_row,
    next_version,
    rank_entries,
)
from memlane.types import MemoryEntry

__all__ = ["LOCK_FILENAME", "FileStore", "namespace_filename"]

LOCK_FILENAME = ".memlane.lock"
"""The lock file in a store's directory; a dotfile, which no namespace file name can be."""

LOCK_TIMEOUT = 30.0
"""Seconds a write waits for another process's write to finish, as SQLite's busy timeout."""


def namespace_filename(namespace: str) -> str:
    """A file name that is unique per namespace and cannot leave its directory.

    Readable characters are kept for humans; everything else is percent-encoded, and a short
    hash of the exact namespace is appended so that no two namespaces ever share a file
    (the design memlane grew out of mapped ``a/b`` and ``a_b`` to one file).
    """
    # "." is percent-encoded, so a namespace file never starts with one: dotfiles (the lock
    # file, temporary files) are never mistaken for namespaces.
    safe = "".join(
        c if c.isascii() and (c.isalnum() or c in "-_") else f"%{ord(c):02X}" for c in namespace
    )
    digest = hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe[:80]}.{digest}.json"


def _doc(entry: MemoryEntry, version: int = 0) -> dict[str, Any]:
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
        "version": version,
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


_KEY_CACHE_FILES = 4096
"""How many files' key lists a FileStore keeps for :meth:`FileStore.load_range`."""


class FileStore(LocalStore):
    """One human-readable JSON file per namespace under ``base_dir``.

    Writes go to a temporary file that is then renamed over the old one, so a crash leaves
    either the old or the new file, never half of one. A file that cannot be parsed raises
    :class:`~memlane.errors.CorruptStoreError` naming it; it is never silently overwritten.
    The ``async_`` methods run in a worker thread.

    Several processes can share the directory: every read-modify-write (each save, delete,
    clear, cleanup and :meth:`save_if`) holds a lock on ``.memlane.lock`` in it, so no
    acknowledged write is lost to another process's rewrite of the same file. Reads take no
    lock: a file is only ever replaced whole. An entry written before versions existed reads
    as version 0.

    :meth:`search` keeps no index: it reads every entry of the searched namespaces and ranks
    them (:func:`~memlane.stores.protocol.rank_entries`), so its cost grows with their size.
    A file store is for data a human reads; a large searched memory belongs in SQLite.

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
        self._file_lock = FileLock(self.base_dir / LOCK_FILENAME, timeout=LOCK_TIMEOUT)
        # The sorted keys of recently read files, by the identity of the version read: a
        # host asking "anything after my head?" of a file that has not changed is answered
        # by one stat, not by parsing the whole namespace again.
        self._keys: OrderedDict[Path, tuple[tuple[int, int, int], list[str]]] = OrderedDict()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_dir}>"

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Holds the thread lock, then the directory's file lock: the one writer anywhere.

        Raises:
            StoreError: Another process held the lock for :data:`LOCK_TIMEOUT` seconds, or
                the lock file cannot be opened.
            StoreClosedError: The store was closed.
        """
        with self._lock:
            self._check_open()
            try:
                self._file_lock.acquire()
            except Timeout as exc:
                raise StoreError(
                    f"FileStore {self.base_dir}: another process held {LOCK_FILENAME} "
                    f"for {LOCK_TIMEOUT:g} s"
                ) from exc
            except OSError as exc:
                raise StoreError(f"FileStore {self.base_dir}: cannot lock: {exc}") from exc
            try:
                yield
            finally:
                self._file_lock.release()

    def _path(self, namespace: str) -> Path:
        self._check_open()
        return self.base_dir / namespace_filename(check_namespace(namespace))

    def _read(self, namespace: str) -> list[dict[str, Any]]:
        return self._read_stamped(namespace)[0]

    def _read_stamped(
        self, namespace: str
    ) -> tuple[list[dict[str, Any]], tuple[int, int, int] | None]:
        """The file's entries, and the identity of the version read (``None``: no file).

        Every write replaces the file by a rename, so inode, mtime and size taken from the
        open file identify exactly the version whose text is read.
        """
        path = self._path(namespace)
        try:
            with path.open("rb") as fh:
                info = os.fstat(fh.fileno())
                text = fh.read().decode("utf-8")
        except FileNotFoundError:
            return [], None
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("namespace") != namespace:
                raise ValueError("not a memlane namespace file for this namespace")
            entries = data["entries"]
            if not isinstance(entries, list):
                raise ValueError("'entries' is not a list")
        except (ValueError, KeyError) as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        return entries, stamp

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
            if path.name.startswith("."):  # another process's temporary file
                continue
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
        with self._exclusive():
            docs = self._read(namespace)
            for doc in new_docs:
                docs = _merge(docs, doc)
            self._write(namespace, docs)

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        """Saves ``entry`` if its key's unexpired holder is at ``expected_version`` (``None``:
        there is none); whether it did (see
        :meth:`~memlane.stores.protocol.ConditionalStore.save_if`). Atomic across processes:
        the read and the rewrite happen under the directory's lock.

        Raises:
            TypeError: ``entry.key`` is ``None`` or ``expected_version`` is not an ``int``;
                :class:`~memlane.errors.UnstorableValueError` for content or metadata that is
                not plain JSON.
            ValueError: ``expected_version`` is negative or too large.
            CorruptStoreError: The existing file cannot be parsed.
            StoreClosedError: The store was closed.
        """
        check_namespace(namespace)
        entry = check_keyed_entry(entry)
        expected_version = check_expected_version(expected_version)
        doc = _doc(entry, next_version(expected_version))
        with self._exclusive():
            docs = self._read(namespace)
            holders = (self._from_doc(d, namespace) for d in docs if d.get("key") == entry.key)
            # An expired holder still sits in the file until replaced, but counts as absent.
            current = next((h.version for h in holders if not h.is_expired), None)
            if current != expected_version:
                return False
            self._write(namespace, _merge(docs, doc))
            return True

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        with self._lock:
            docs = self._read(namespace)
        entries = [self._from_doc(d, namespace) for d in docs]
        return [e for e in entries if not e.is_expired]

    def search(
        self,
        namespaces: Sequence[str],
        query: str,
        *,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries of ``namespaces`` most relevant to ``query``, best first (see
        :meth:`~memlane.stores.protocol.SearchableStore.search`).

        There is no index: every entry of ``namespaces`` is read and ranked by
        :func:`~memlane.stores.protocol.rank_entries` (BM25 over the searched namespaces'
        unexpired searchable entries), which is the reference the indexed stores are held to.
        Each namespace file is read as it stands when reached; no lock is taken.

        Args:
            namespaces: The namespaces to search.
            query: Text whose terms (:func:`~memlane.stores.protocol.search_terms`) are
                looked for; it is only ever data.
            limit: The most hits returned (at least 1).
            min_importance: Entries below this importance are left out.

        Returns:
            The hits, best first.

        Raises:
            TypeError, ValueError: A bad argument, named (see
                :func:`~memlane.stores.protocol.check_search`).
            CorruptStoreError: A namespace file cannot be parsed.
            StoreClosedError: The store was closed.
        """
        names, terms, limit, min_importance = check_search(namespaces, query, limit, min_importance)
        self._check_open()
        if not terms:
            return []
        entries = [entry for name in names for entry in self.load(name)]
        return rank_entries(entries, terms, limit, min_importance)

    async_search = awaitable(search)

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Unexpired keyed entries with ``start <= key < stop``, in key order."""
        start, stop = check_key_range(start, stop)
        path = self._path(namespace)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        known = self._keys.get(path)
        if known is not None and known[0] == (info.st_ino, info.st_mtime_ns, info.st_size):
            keys = known[1]
            if bisect.bisect_left(keys, start) == bisect.bisect_left(keys, stop):
                return []  # the version on disk has no key in the range
        with self._lock:
            docs, stamp = self._read_stamped(namespace)
            if stamp is not None:
                self._keys[path] = (
                    stamp,
                    sorted(d["key"] for d in docs if isinstance(d.get("key"), str)),
                )
                self._keys.move_to_end(path)
                if len(self._keys) > _KEY_CACHE_FILES:
                    self._keys.popitem(last=False)
        found = [
            self._from_doc(d, namespace)
            for d in docs
            if isinstance(d.get("key"), str) and start <= d["key"] < stop
        ]
        return sorted((e for e in found if not e.is_expired), key=_key)

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
        with self._exclusive():
            docs = self._read(namespace)
            kept = [d for d in docs if d.get("entry_id") != entry_id]
            if len(kept) == len(docs):
                return False
            self._write(namespace, kept)
            return True

    def clear(self, namespace: str) -> int:
        """Removes the namespace file; how many entries it held."""
        with self._exclusive():
            count = len(self._read(namespace))
            self._path(namespace).unlink(missing_ok=True)
            return count

    def namespaces(self) -> list[str]:
        """Namespaces that have a file."""
        return [namespace for _, namespace in self._namespace_files()]

    def cleanup_expired(self) -> int:
        """Rewrites every file without its expired entries; how many were removed."""
        removed = 0
        with self._exclusive():
            for _, namespace in self._namespace_files():
                docs = self._read(namespace)
                kept = [d for d in docs if not self._from_doc(d, namespace).is_expired]
                if len(kept) != len(docs):
                    removed += len(docs) - len(kept)
                    self._write(namespace, kept)
        return removed


def _key(entry: MemoryEntry) -> str:
    assert entry.key is not None  # load_range keeps keyed entries only
    return entry.key
