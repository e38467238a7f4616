"""FileStore: one human-readable JSON-lines log per namespace, appended to and compacted atomically."""

from __future__ import annotations

import bisect
import math
import operator
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from memlane.errors import CorruptStoreError, NotAStoreError, StoreError
from memlane.stores._base import LocalStore, awaitable, ensure_directory, read_only_error
from memlane.stores._file_cache import IndexCache, namespace_files
from memlane.stores._file_log import (
    LOCK_FILENAME,
    LOCK_TIMEOUT,
    NamespaceIndex,
    document,
    encode_delete,
    encode_put,
    encode_vectors,
    namespace_filename,
    new_index,
    parse,
    stamp,
)
from memlane.stores.protocol import (
    SearchHit,
    check_entry,
    check_entry_id,
    check_entry_ids,
    check_expected_version,
    check_key,
    check_key_range,
    check_keyed_entry,
    check_namespace,
    check_search,
    next_version,
    rank_entries,
)
from memlane.stores.vectors import (
    EntryVector,
    check_entry_vectors,
    check_missing_vectors,
    check_model,
    check_vector_search,
)
from memlane.types import MemoryEntry

__all__ = ["LOCK_FILENAME", "FileStore", "namespace_filename"]


class FileStore(LocalStore):
    """One human-readable JSON-lines file per namespace under ``base_dir``.

    Each file is a log: a header line naming the namespace, then one JSON object per line,
    each a put of an entry or a delete (see :mod:`memlane.stores._file_log`). A write appends
    one line, so its cost does not grow with the namespace; when the log has grown to about
    twice what its live entries take, it is compacted. A new or compacted file is written to
    a temporary file that is then renamed over the old one, so a crash leaves either the old
    or the new file, never half of one; an append cut short by a crash leaves an incomplete
    last line, which is ignored and cut off by the next write. A file that cannot be parsed
    raises :class:`~memlane.errors.CorruptStoreError` naming it; it is never silently
    overwritten. Files of the earlier whole-file JSON format are read as they are and
    rewritten as a log by their first write. The ``async_`` methods run in a worker thread.

    Each store keeps an index of the namespaces it reads, checked against the file's inode,
    modification time and size at every call: a file that grew is read from where the index
    stopped, a file that was replaced is read again whole.

    Several processes can share the directory: every write (each save, delete, clear,
    cleanup and :meth:`save_if`) holds a lock on ``.memlane.lock`` in it, so no acknowledged
    write is lost to another process's write to the same file. Reads take no lock: only
    complete lines are read, and a file is only ever replaced whole. An entry written before
    versions existed reads as version 0.

    :meth:`search` keeps no search index: it reads every entry of the searched namespaces
    and ranks them (:func:`~memlane.stores.protocol.rank_entries`), so its cost grows with
    their size. A file store is for data a human reads; a large searched memory belongs in
    SQLite. :meth:`vector_search` is a scan too, the reference the indexed stores are held
    to: vectors are lines of the namespace's log (base64 float32), kept in step with their
    entries when the log is replayed (see :mod:`memlane.stores._file_log`).

    Opened with ``read_only=True``, the directory must exist; nothing is created in it (not
    even the lock file) and every write raises :class:`~memlane.errors.ReadOnlyStoreError`.

    Args:
        base_dir: The directory; it is created if missing.
        read_only: Open an existing directory for reading only.

    Raises:
        StorePathError: ``base_dir`` is not a directory and cannot be made one (an ``OSError``).
        NotAStoreError: Read-only, and ``base_dir`` is not an existing directory.
    """

    persistent = True

    def __init__(
        self, base_dir: str | os.PathLike[str] = ".memlane", *, read_only: bool = False
    ) -> None:
        self.base_dir = Path(base_dir)
        self.read_only = bool(read_only)
        if self.read_only:
            if not self.base_dir.is_dir():
                raise NotAStoreError(
                    f"FileStore {self.base_dir}: not a memlane store: no such directory "
                    "(a read-only store is never created)"
                )
        else:
            ensure_directory(self.base_dir, f"FileStore {self.base_dir}")
        self._lock = threading.RLock()
        self._file_lock = FileLock(self.base_dir / LOCK_FILENAME, timeout=LOCK_TIMEOUT)
        self._indexes = IndexCache()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.base_dir}>"

    def _release(self) -> None:
        self._indexes.clear()

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
            if self.read_only:
                raise read_only_error(self)
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

    def _index(self, namespace: str) -> NamespaceIndex | None:
        """The namespace's index, in step with its file (``None``: no file). Hold ``_lock``."""
        known, index = self._indexes.lookup(self._path(namespace))
        return index if known else self._read_stamped(namespace)

    def _read_stamped(self, namespace: str) -> NamespaceIndex | None:
        """Brings the namespace's index in step with its file, reading only what is new."""
        return self._indexes.read(self._path(namespace), namespace, parse)

    def _commit(
        self,
        namespace: str,
        index: NamespaceIndex | None,
        line: bytes,
        apply: Callable[[NamespaceIndex], object],
    ) -> None:
        """Writes ``line`` and applies it to ``index``: by an append, or by a whole rewrite
        for a new file, a legacy file, or a log due for compaction. Hold :meth:`_exclusive`.

        The index is taken out while it changes, so a failed write leaves none to trust: the
        next call reads the file as it is.
        """
        path = self._path(namespace)
        self._indexes.forget(path)
        if index is None:
            index = new_index(namespace)
        apply(index)
        try:
            if not index.docs:
                path.unlink(missing_ok=True)
                return
            if index.end == 0 or index.legacy or index.should_compact(index.end + len(line)):
                self._rewrite(path, index)
            else:
                self._append(path, index, line)
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        self._indexes.remember(path, index)

    def _append(self, path: Path, index: NamespaceIndex, line: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if os.fstat(fd).st_size > index.end:
                os.ftruncate(fd, index.end)  # an append a crash cut short
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            info = os.fstat(fd)
        finally:
            os.close(fd)
        index.end += len(line)
        index.stamp = stamp(info)

    def _rewrite(self, path: Path, index: NamespaceIndex) -> None:
        data = index.rewrite()
        fd, tmp = tempfile.mkstemp(dir=self.base_dir, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                info = os.fstat(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        index.stamp = stamp(info)

    def _from_doc(self, doc: dict[str, Any], namespace: str) -> MemoryEntry:
        try:
            return MemoryEntry.model_validate(doc)
        except ValueError as exc:
            raise CorruptStoreError(f"corrupt entry in {self._path(namespace)}: {exc}") from exc

    def _namespace_files(self) -> list[tuple[Path, str]]:
        """Every namespace file and the namespace it holds."""
        self._check_open()
        return namespace_files(self.base_dir)

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        """Inserts or replaces ``entry``: one line appended to the namespace's log.

        Raises:
            UnstorableValueError: Content or metadata is not plain JSON (a ``TypeError``).
            CorruptStoreError: The existing file cannot be parsed.
            StoreClosedError: The store was closed.
        """
        self.save_many(namespace, [entry])

    def save_many(self, namespace: str, entries: list[MemoryEntry]) -> None:
        """Saves several entries as one line of the log: all or none."""
        check_namespace(namespace)
        docs = [document(check_entry(e)) for e in entries]
        line = encode_put(docs) if docs else b""
        with self._exclusive():
            index = self._index(namespace)
            if docs:
                self._commit(namespace, index, line, lambda i: i.put_line(docs, len(line)))

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        """Saves ``entry`` if its key's unexpired holder is at ``expected_version`` (``None``:
        there is none); whether it did (see
        :meth:`~memlane.stores.protocol.ConditionalStore.save_if`). Atomic across processes:
        the read and the append happen under the directory's lock.

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
        doc = document(entry, next_version(expected_version))
        line = encode_put([doc])
        with self._exclusive():
            index = self._index(namespace)
            holder = self._holder(index, namespace, doc["key"])
            # An expired holder still sits in the file until replaced, but counts as absent.
            current = None if holder is None or holder.is_expired else holder.version
            if current != expected_version:
                return False
            self._commit(namespace, index, line, lambda i: i.put(doc, len(line)))
            return True

    def _holder(self, index: NamespaceIndex | None, namespace: str, key: str) -> MemoryEntry | None:
        entry_id = None if index is None else index.by_key.get(key)
        if index is None or entry_id is None:
            return None
        return self._from_doc(index.docs[entry_id], namespace)

    def load(self, namespace: str) -> list[MemoryEntry]:
        """Unexpired entries in insertion order."""
        with self._lock:
            index = self._index(namespace)
            docs = [] if index is None else list(index.docs.values())
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

        There is no search index: every entry of ``namespaces`` is read and ranked by
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

    def save_vectors(self, namespace: str, model: str, vectors: Sequence[EntryVector]) -> int:
        """Attaches each vector to its unexpired entry whose search text has the vector's
        digest (see :meth:`~memlane.stores.protocol.VectorStore.save_vectors`): one line of
        the log, under the directory's lock; how many were attached.
        """
        check_namespace(namespace)
        model, checked = check_model(model), check_entry_vectors(vectors)
        with self._exclusive():
            index = self._index(namespace)
            items = [
                (v.entry_id, v.digest, list(v.vector))
                for v in checked
                if index is not None
                and index.takes(v.entry_id, v.digest)
                and not self._from_doc(index.docs[v.entry_id], namespace).is_expired
            ]
            if not items:
                return 0
            line = encode_vectors(model, items)
            self._commit(namespace, index, line, lambda i: i.attach(model, items, len(line)))
            return len(items)

    def vector_search(
        self,
        namespaces: Sequence[str],
        vector: Sequence[float],
        *,
        model: str,
        limit: int = 10,
        min_importance: float = 0.0,
    ) -> list[SearchHit]:
        """The entries nearest ``vector`` by cosine similarity, best first (see
        :meth:`~memlane.stores.protocol.VectorStore.vector_search`): every vector of
        ``model`` in ``namespaces`` is read and scored in float64; ties go to importance,
        then to the entry saved first.
        """
        names, query, model, limit, min_importance = check_vector_search(
            namespaces, vector, model, limit, min_importance
        )
        self._check_open()
        hits: list[tuple[float, float, int, MemoryEntry]] = []
        for name in names:
            with self._lock:
                index = self._index(name)
                held = [] if index is None else index.vectors_of(model, len(query))
            for doc, floats in held:
                entry = self._from_doc(doc, name)
                if not entry.is_expired and entry.importance >= min_importance:
                    score = math.fsum(map(operator.mul, floats, query))
                    hits.append((score, entry.importance, len(hits), entry))
        hits.sort(key=lambda h: (-h[0], -h[1], h[2]))
        return [SearchHit(entry, score) for score, _, _, entry in hits[:limit]]

    def missing_vectors(
        self, namespaces: Sequence[str], model: str, *, limit: int = 1000
    ) -> list[MemoryEntry]:
        """Unexpired entries with a search text and no vector of ``model``, oldest first (by
        ``created_at``, then file order), at most ``limit``."""
        names, model, limit = check_missing_vectors(namespaces, model, limit)
        found = []
        for name in names:
            with self._lock:
                index = self._index(name)
                docs = [] if index is None else index.without_vectors(model)
            found += [e for e in (self._from_doc(d, name) for d in docs) if not e.is_expired]
        found.sort(key=lambda e: e.created_at.timestamp())
        return found[:limit]

    def load_range(self, namespace: str, start: str, stop: str) -> list[MemoryEntry]:
        """Unexpired keyed entries with ``start <= key < stop``, in key order.

        The index keeps the namespace's keys sorted, so a range of an unchanged file costs
        one stat and a bisection.
        """
        start, stop = check_key_range(start, stop)
        with self._lock:
            index = self._index(namespace)
            if index is None:
                return []
            keys = index.sorted_keys()
            found = keys[bisect.bisect_left(keys, start) : bisect.bisect_left(keys, stop)]
            docs = [index.docs[index.by_key[key]] for key in found]
        entries = [self._from_doc(d, namespace) for d in docs]
        return [e for e in entries if not e.is_expired]

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        """The unexpired entry holding ``key``, or ``None``."""
        check_key(key)
        with self._lock:
            holder = self._holder(self._index(namespace), namespace, key)
        return None if holder is None or holder.is_expired else holder

    def delete(self, namespace: str, entry_id: str) -> bool:
        """Removes one entry; whether it existed."""
        check_entry_id(entry_id)
        with self._exclusive():
            index = self._index(namespace)
            if index is None or entry_id not in index.docs:
                return False
            self._commit(namespace, index, encode_delete(entry_id), lambda i: i.delete(entry_id))
            return True

    def delete_many(self, namespace: str, entry_ids: list[str]) -> list[str]:
        """Removes the entries with these ids: one write of their delete lines, under the
        directory's lock; the ids that existed, in the order given.

        Raises:
            TypeError: ``entry_ids`` is not a list of ``str``.
            ReadOnlyStoreError: The store was opened read-only.
            StoreClosedError: The store was closed.
        """
        ids = check_entry_ids(entry_ids)
        check_namespace(namespace)
        with self._exclusive():
            index = self._index(namespace)
            gone = [] if index is None else [i for i in ids if i in index.docs]
            if gone:
                line = b"".join(encode_delete(i) for i in gone)
                self._commit(namespace, index, line, lambda i: [i.delete(x) for x in gone])
            return gone

    def clear(self, namespace: str) -> int:
        """Removes the namespace file; how many entries it held."""
        with self._exclusive():
            index = self._index(namespace)
            path = self._path(namespace)
            self._indexes.forget(path)
            path.unlink(missing_ok=True)
            return 0 if index is None else len(index.docs)

    def namespaces(self) -> list[str]:
        """Namespaces that have a file."""
        return [namespace for _, namespace in self._namespace_files()]

    def cleanup_expired(self) -> int:
        """Compacts every file holding expired entries without them; how many were removed."""
        removed = 0
        with self._exclusive():
            for path, namespace in self._namespace_files():
                index = self._index(namespace)
                if index is None:
                    continue
                expired = [
                    entry_id
                    for entry_id, doc in index.docs.items()
                    if self._from_doc(doc, namespace).is_expired
                ]
                if not expired:
                    continue
                removed += len(expired)
                self._indexes.forget(path)
                for entry_id in expired:
                    index.delete(entry_id)
                try:
                    if index.docs:
                        self._rewrite(path, index)
                        self._indexes.remember(path, index)
                    else:
                        path.unlink(missing_ok=True)
                except OSError as exc:
                    raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        return removed
