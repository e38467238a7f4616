"""The namespace log behind FileStore: JSON lines, each a put or a delete, and the index they build.

A namespace file is UTF-8 text, one JSON object per line::

    {"memlane": "namespace log", "format": 1, "namespace": "notes", "file_id": "9f2c..."}
    {"op": "put", "entry": {"entry_id": "…", "key": "greeting", "content": "héllo", …}}
    {"op": "put", "entries": [{…}, {…}]}
    {"op": "delete", "entry_id": "…"}
    {"op": "vectors", "model": "wordllama:l2_supercat", "vectors": [{"entry_id": "…",
        "digest": "…", "vector": "<base64 of float32 little-endian>"}]}

Replaying the lines in order gives the namespace, as the whole-file format gave it: a put
replaces the entry with its ``entry_id`` in place (insertion order is kept) and first removes
any other entry holding its key; a delete removes one entry. A ``save_many`` is one line, so
it is all or none. A vectors line attaches each vector to its entry if the entry is there and
its search text still has the vector's digest (replacing the entry's vector of any model); a
put keeps an entry's vector only if its search text is unchanged, a delete drops it. The rule
is applied at replay, so every reader derives the same vectors from the same lines. A memlane
from before vectors refuses a file holding a vectors line (not a put or a delete).

Invariants the store relies on:

* A file is only ever created or rewritten whole (temporary file, fsync, rename), so its
  header line is always complete, and the bytes of one file before a complete line never
  change afterwards: a reader that has replayed up to an offset only reads what follows it.
* Only complete lines count. Bytes after the last newline are an append cut short by a
  crash: readers ignore them, and the next writer (under the lock) truncates them away.
* ``file_id`` is random per file, so a file that replaced another under a reused inode
  number is never taken for the one a reader knew.

Files of the whole-file format (``{"namespace": …, "entries": […]}``) are read as they are;
the first write rewrites them as a log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memlane.stores.ranking import SEARCH_TEXT
from memlane.stores.stored_values import entry_to_row
from memlane.stores.vectors import decode_vector, encode_vector, text_digest
from memlane.types import MemoryEntry

__all__ = [
    "COMPACT_MIN_BYTES",
    "NamespaceIndex",
    "encode_delete",
    "encode_put",
    "encode_vectors",
    "namespace_in",
    "new_index",
    "parse",
]

LOG_MARK = "namespace log"
"""The header's ``memlane`` value: what tells a log from a whole-file namespace."""

FORMAT = 1

COMPACT_MIN_BYTES = 64 * 1024
"""A log smaller than this is never compacted: rewriting a small file often gains nothing."""


def _line(obj: dict[str, Any]) -> bytes:
    # ensure_ascii=False keeps the text readable; a lone surrogate raises UnicodeEncodeError
    # here, before anything is written, as the whole-file format did.
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")


def encode_put(docs: list[dict[str, Any]]) -> bytes:
    """The line that saves ``docs`` (one entry, or several all or none)."""
    if len(docs) == 1:
        return _line({"op": "put", "entry": docs[0]})
    return _line({"op": "put", "entries": docs})


def encode_vectors(model: str, vectors: list[tuple[str, str, list[float]]]) -> bytes:
    """The line that attaches ``vectors`` (entry id, digest, floats) of ``model``."""
    items = [
        {"entry_id": i, "digest": d, "vector": base64.b64encode(encode_vector(v)).decode()}
        for i, d, v in vectors
    ]
    return _line({"op": "vectors", "model": model, "vectors": items})


def _digest_of(doc: dict[str, Any]) -> str | None:
    metadata = doc.get("metadata")
    text = metadata.get(SEARCH_TEXT) if isinstance(metadata, dict) else None
    return text_digest(text) if isinstance(text, str) else None


@dataclass(frozen=True, slots=True)
class StoredVector:
    """An entry's vector as the log holds it."""

    model: str
    digest: str
    vector: list[float]


def encode_delete(entry_id: str) -> bytes:
    """The line that deletes the entry ``entry_id``."""
    return _line({"op": "delete", "entry_id": entry_id})


def _header(namespace: str) -> bytes:
    return _line(
        {
            "memlane": LOG_MARK,
            "format": FORMAT,
            "namespace": namespace,
            "file_id": secrets.token_hex(8),
        }
    )


@dataclass(eq=False)
class NamespaceIndex:
    """A namespace as replayed from its file, and where in that file the replay stopped.

    ``live`` estimates the bytes a compacted file would take, so the store can tell when the
    log has grown to twice that.
    """

    namespace: str
    header: bytes
    """The file's first line; empty for a whole-file (legacy) namespace or a file not yet written."""
    legacy: bool = False
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    vectors: dict[str, StoredVector] = field(default_factory=dict)
    vector_sizes: dict[str, int] = field(default_factory=dict)
    live: int = 0
    end: int = 0
    """The offset after the last complete line replayed (0: no file written yet)."""
    stamp: tuple[int, int, int] = (0, 0, 0)
    """(inode, mtime_ns, size) of the file when last read or written."""
    _sorted: list[str] | None = None

    def put(self, doc: dict[str, Any], size: int) -> None:
        """Applies a put of ``doc``, whose line takes about ``size`` bytes."""
        entry_id, key = doc["entry_id"], doc["key"]
        if key is not None:
            holder = self.by_key.get(key)
            if holder is not None and holder != entry_id:
                self.delete(holder)
        old = self.docs.get(entry_id)
        if old is not None and old["key"] is not None and self.by_key.get(old["key"]) == entry_id:
            del self.by_key[old["key"]]
        held = self.vectors.get(entry_id)
        if held is not None and held.digest != _digest_of(doc):
            self._drop_vector(entry_id)
        self.docs[entry_id] = doc
        if key is not None:
            self.by_key[key] = entry_id
        self.live += size - self.sizes.get(entry_id, 0)
        self.sizes[entry_id] = size
        self._sorted = None

    def put_line(self, docs: list[dict[str, Any]], line_size: int) -> None:
        """Applies the put line of ``docs``, ``line_size`` bytes long."""
        for doc in docs:
            self.put(doc, line_size // len(docs))

    def delete(self, entry_id: str) -> bool:
        """Applies a delete; whether the entry was there."""
        doc = self.docs.pop(entry_id, None)
        if doc is None:
            return False
        if doc["key"] is not None and self.by_key.get(doc["key"]) == entry_id:
            del self.by_key[doc["key"]]
        self.live -= self.sizes.pop(entry_id, 0)
        self._drop_vector(entry_id)
        self._sorted = None
        return True

    def _drop_vector(self, entry_id: str) -> None:
        if self.vectors.pop(entry_id, None) is not None:
            self.live -= self.vector_sizes.pop(entry_id, 0)

    def takes(self, entry_id: str, digest: str) -> bool:
        """Whether the entry is here with the search text of ``digest``."""
        doc = self.docs.get(entry_id)
        return doc is not None and _digest_of(doc) == digest

    def attach(self, model: str, vectors: list[tuple[str, str, list[float]]], size: int) -> int:
        """Applies a vectors line of ``size`` bytes: each vector whose entry is here with the
        text of its digest replaces the entry's vector; how many were attached."""
        attached = 0
        for entry_id, digest, vector in vectors:
            if not self.takes(entry_id, digest):
                continue
            self._drop_vector(entry_id)
            self.vectors[entry_id] = StoredVector(model, digest, vector)
            self.vector_sizes[entry_id] = size // len(vectors)
            self.live += size // len(vectors)
            attached += 1
        return attached

    def vectors_of(self, model: str, dims: int) -> list[tuple[dict[str, Any], list[float]]]:
        """The documents with a vector of ``model`` and ``dims``, and the vector, file order."""
        found = []
        for entry_id, doc in self.docs.items():
            held = self.vectors.get(entry_id)
            if held is not None and held.model == model and len(held.vector) == dims:
                found.append((doc, held.vector))
        return found

    def without_vectors(self, model: str) -> list[dict[str, Any]]:
        """The documents with a search text and no vector of ``model``, file order."""
        return [
            doc
            for entry_id, doc in self.docs.items()
            if _digest_of(doc) is not None
            and (entry_id not in self.vectors or self.vectors[entry_id].model != model)
        ]

    def sorted_keys(self) -> list[str]:
        """The keys held, sorted; kept until the next change."""
        if self._sorted is None:
            self._sorted = sorted(self.by_key)
        return self._sorted

    def consume(self, data: bytes) -> None:
        """Replays the complete lines of ``data``, the file's bytes from :attr:`end` on.

        Raises:
            ValueError: A complete line is not a put or a delete.
        """
        complete = data.rfind(b"\n") + 1
        start = 0
        while start < complete:
            stop = data.index(b"\n", start) + 1
            self._apply(data[start:stop], self.end + start)
            start = stop
        self.end += complete

    def _apply(self, line: bytes, offset: int) -> None:
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line at byte {offset}: {exc}") from None
        op = record.get("op") if isinstance(record, dict) else None
        if op == "put":
            docs = [record["entry"]] if "entry" in record else record.get("entries")
            if not isinstance(docs, list) or not docs:
                raise ValueError(f"line at byte {offset}: a put without entries")
            self.put_line([_checked(doc) for doc in docs], len(line))
        elif op == "delete" and isinstance(record.get("entry_id"), str):
            self.delete(record["entry_id"])
        elif op == "vectors" and isinstance(record.get("model"), str):
            items = record.get("vectors")
            if not isinstance(items, list) or not items:
                raise ValueError(f"line at byte {offset}: a vectors line without vectors")
            self.attach(record["model"], [_vector(item) for item in items], len(line))
        else:
            raise ValueError(f"line at byte {offset}: not a put, a delete or vectors")

    def rewrite(self) -> bytes:
        """The compacted file holding exactly the live entries; the index now describes it.

        Each entry gets a line of its own, so the file reads as a list of entries.
        """
        self.header = _header(self.namespace)
        self.legacy = False
        lines = [self.header]
        self.sizes = {}
        for entry_id, doc in self.docs.items():
            line = encode_put([doc])
            self.sizes[entry_id] = len(line)
            lines.append(line)
        self.vector_sizes = {}
        for entry_id, held in self.vectors.items():
            line = encode_vectors(held.model, [(entry_id, held.digest, held.vector)])
            self.vector_sizes[entry_id] = len(line)
            lines.append(line)
        data = b"".join(lines)
        self.live = self.end = len(data)
        return data

    def should_compact(self, size: int) -> bool:
        """Whether a log of ``size`` bytes has grown to about twice its live entries."""
        return size >= COMPACT_MIN_BYTES and size > 2 * self.live


def _checked(doc: object) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("entry_id"), str):
        raise ValueError(f"an entry without an entry_id: {str(doc)[:80]}")
    key = doc.get("key")
    if key is not None and not isinstance(key, str):
        raise ValueError(f"entry {doc['entry_id']!r}: key is not a str")
    doc.setdefault("key", None)
    return doc


def _vector(item: object) -> tuple[str, str, list[float]]:
    if not isinstance(item, dict):
        raise ValueError(f"a vector that is not an object: {str(item)[:80]}")
    entry_id, digest, data = item.get("entry_id"), item.get("digest"), item.get("vector")
    if not (isinstance(entry_id, str) and isinstance(digest, str) and isinstance(data, str)):
        raise ValueError(f"a vector without entry_id, digest or data: {str(item)[:80]}")
    return entry_id, digest, decode_vector(base64.b64decode(data, validate=True))


def new_index(namespace: str) -> NamespaceIndex:
    """The index of a namespace that has no file yet."""
    return NamespaceIndex(namespace, b"")


def _log_header(first_line: bytes) -> dict[str, Any] | None:
    try:
        header = json.loads(first_line)
    except ValueError:
        return None
    if isinstance(header, dict) and header.get("memlane") == LOG_MARK:
        return header
    return None


def parse(namespace: str, data: bytes) -> NamespaceIndex:
    """The index of a whole file holding ``namespace``, in either format.

    Raises:
        ValueError: The file is not a memlane namespace file for ``namespace``.
    """
    newline = data.find(b"\n")
    header = _log_header(data[: newline + 1]) if newline >= 0 else None
    if header is None:
        return _parse_legacy(namespace, data)
    if header.get("format") != FORMAT:
        raise ValueError(f"unknown log format {header.get('format')!r}")
    if header.get("namespace") != namespace:
        raise ValueError("not a memlane namespace file for this namespace")
    index = NamespaceIndex(namespace, data[: newline + 1])
    index.live = index.end = newline + 1
    index.consume(data[newline + 1 :])
    return index


def _parse_legacy(namespace: str, data: bytes) -> NamespaceIndex:
    parsed = json.loads(data.decode("utf-8"))
    if not isinstance(parsed, dict) or parsed.get("namespace") != namespace:
        raise ValueError("not a memlane namespace file for this namespace")
    entries = parsed.get("entries")
    if not isinstance(entries, list):
        raise ValueError("'entries' is not a list")
    index = NamespaceIndex(namespace, b"", legacy=True)
    for doc in entries:
        index.put(_checked(doc), 0)
    index.end = len(data)
    return index


def namespace_in(first_line: bytes, read_rest: Callable[[], bytes]) -> str:
    """The namespace a file holds, from its first line (``read_rest()``: the rest of a legacy file).

    Raises:
        ValueError, KeyError, TypeError: Not a memlane namespace file.
    """
    header = _log_header(first_line)
    if header is not None:
        namespace = header["namespace"]
    else:
        namespace = json.loads((first_line + read_rest()).decode("utf-8"))["namespace"]
    if not isinstance(namespace, str):
        raise TypeError("the namespace is not a str")
    return namespace


# ---------------------------------------------------------------------------- file names

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


def document(entry: MemoryEntry, version: int = 0) -> dict[str, Any]:
    """The JSON document of ``entry`` as a namespace's log stores it, at ``version``."""
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


def stamp(info: os.stat_result) -> tuple[int, int, int]:
    """What tells a namespace file changed since it was read: inode, mtime, size."""
    return (info.st_ino, info.st_mtime_ns, info.st_size)
