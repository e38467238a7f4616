"""The namespace indexes a FileStore keeps in memory, each in step with its file.

Each index is checked against its file's inode, modification time and size whenever it is
asked for: a file that grew is read from where the index stopped, a file that was replaced is
read again whole. The least recently used indexes are dropped beyond :data:`INDEXED_FILES`.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from memlane.errors import CorruptStoreError, StoreError
from memlane.stores._file_log import NamespaceIndex, namespace_in, stamp

__all__ = ["INDEXED_FILES", "IndexCache", "Parser", "namespace_files"]

Parser = Callable[[str, bytes], NamespaceIndex]
"""Reads a whole namespace file: :func:`memlane.stores._file_log.parse`."""

INDEXED_FILES = 1024
"""How many namespaces' indexes a FileStore keeps in memory; the least recently used go."""


class IndexCache:
    """Namespace indexes by file path, least recently used first. The caller serialises."""

    def __init__(self) -> None:
        self._indexes: OrderedDict[Path, NamespaceIndex] = OrderedDict()

    def clear(self) -> None:
        """Forgets every index."""
        self._indexes.clear()

    def forget(self, path: Path) -> None:
        """Forgets the index of ``path``: the next read starts from the file."""
        self._indexes.pop(path, None)

    def remember(self, path: Path, index: NamespaceIndex) -> None:
        """Keeps ``index`` as the one of ``path``, most recently used."""
        self._indexes[path] = index
        self._indexes.move_to_end(path)
        if len(self._indexes) > INDEXED_FILES:
            self._indexes.popitem(last=False)

    def lookup(self, path: Path) -> tuple[bool, NamespaceIndex | None]:
        """Whether the index of ``path`` is known to be in step with its file without reading
        it, and if so the index (``None``: there is no file).

        A file whose inode, mtime and size are those last seen costs one stat.
        """
        known = self._indexes.get(path)
        if known is None:
            return False, None
        try:
            info = os.stat(path)
        except FileNotFoundError:
            del self._indexes[path]
            return True, None
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        if known.stamp == stamp(info) and known.end == info.st_size:
            self._indexes.move_to_end(path)
            return True, known
        return False, None

    def read(self, path: Path, namespace: str, parse: Parser) -> NamespaceIndex | None:
        """Brings the namespace's index in step with its file, reading only what is new.

        A file read whole is read by ``parse`` (:func:`~memlane.stores._file_log.parse`,
        which the store names so that a test can tell a whole read from an incremental one).
        The file's identity is taken from the open file, so it names exactly the version
        read. The index is taken out while it is updated: if reading fails, the next call
        starts afresh rather than from a half-replayed index.

        Raises:
            CorruptStoreError: The file is not a namespace file for ``namespace``.
            StoreError: The OS refused to read it.
        """
        known = self._indexes.pop(path, None)
        try:
            with path.open("rb") as fh:
                info = os.fstat(fh.fileno())
                index = None
                if (
                    known is not None
                    and not known.legacy
                    and known.stamp[0] == info.st_ino
                    and info.st_size >= known.end
                    and fh.read(len(known.header)) == known.header
                ):
                    fh.seek(known.end)
                    known.consume(fh.read(info.st_size - known.end))
                    index = known
                if index is None:
                    fh.seek(0)
                    index = parse(namespace, fh.read(info.st_size))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
        index.stamp = stamp(info)
        self.remember(path, index)
        return index


def namespace_files(base_dir: Path) -> list[tuple[Path, str]]:
    """Every namespace file in ``base_dir`` and the namespace it holds, by file name.

    Raises:
        CorruptStoreError: A file is not a memlane namespace file.
        StoreError: The OS refused to read one.
    """
    found = []
    for path in sorted(base_dir.glob("*.json")):
        if path.name.startswith("."):  # another process's temporary file
            continue
        try:
            with path.open("rb") as fh:
                found.append((path, namespace_in(fh.readline(), fh.read)))
        except FileNotFoundError:  # cleared by another process since the listing
            continue
        except OSError as exc:
            raise StoreError(f"FileStore {path}: {exc.strerror}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStoreError(f"corrupt memlane file {path}: {exc}") from exc
    return found
