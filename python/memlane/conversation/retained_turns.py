"""The retained turns of a conversation: recent ones as tuples, older ones compressed in blocks.

A host keeps every retained turn of every conversation it serves (no summarizer: all of them),
and a turn's text is most of what it costs: ~1.4 KiB a turn in CPython's string form on a mixed
corpus, where CJK text or one emoji makes a string two or four bytes a character. Turns that
have left the history are read only when someone asks for old turns (a transcript, a snapshot,
a summary, a pin), so :class:`RetainedTurns` keeps them packed: :data:`BLOCK` records at a time,
pickled together and compressed (zstd level 1 when the ``zstandard`` package is installed, zlib
level 1 otherwise), about a third of their size. What cannot be packed stays as it is, beside
its block: a pinned turn (read by every history while it is older than the window) and a record
whose values pickle refuses (messages kept live because they could not be frozen).

Packing is done a block at a time, once :data:`BLOCK` records have left the window, so a turn
pays its share of one pickle and one compression; reading a packed record decodes its whole
block, which is kept until another block is read (reads of old turns walk them in order).
"""

from __future__ import annotations

import pickle
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlane.conversation.conversation_state import Record

BLOCK = 64
"""Records packed together: a larger block compresses better (zlib level 1 on the mixed corpus:
~490 bytes a turn at 64 against ~540 at 16; zstd level 1 ~470 at 64) but costs more to decode
for one record."""


class Codec:
    """A compressor and its decompressor, safe to call from many threads at once.

    Args:
        name: ``"zstd"`` (needs the ``zstandard`` package) or ``"zlib"``.

    Raises:
        ValueError: ``name`` is neither.
        ImportError: ``"zstd"`` without the ``zstandard`` package.
    """

    __slots__ = ("compress", "decompress", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "zlib":
            self.compress: Callable[[bytes], bytes] = lambda data: zlib.compress(data, 1)
            self.decompress: Callable[[bytes], bytes] = zlib.decompress
            return
        if name != "zstd":
            raise ValueError(f"codec must be 'zstd' or 'zlib', got {name!r}")
        import zstandard

        # A zstd context serves one call at a time: one per thread.
        local = threading.local()

        def compress(data: bytes) -> bytes:
            compressor = getattr(local, "compressor", None)
            if compressor is None:
                compressor = local.compressor = zstandard.ZstdCompressor(level=1)
            # A copy of the exact size: the result holds the buffer zstd sized for the worst
            # case, as large as the input.
            return bytes(memoryview(compressor.compress(data)))

        def decompress(data: bytes) -> bytes:
            decompressor = getattr(local, "decompressor", None)
            if decompressor is None:
                decompressor = local.decompressor = zstandard.ZstdDecompressor()
            unpacked: bytes = decompressor.decompress(data)
            return unpacked

        self.compress, self.decompress = compress, decompress


def default_codec() -> Codec:
    """zstd when the ``zstandard`` package is installed (five times faster than zlib at the
    same size), zlib otherwise."""
    try:
        return Codec("zstd")
    except ImportError:
        return Codec("zlib")


CODEC = default_codec()
"""The codec new blocks are packed with."""


class _Block:
    """A block of records: the pickle of those that pack, compressed, and those that do not
    (by their place in the block; ``None`` stands for them in the pickle)."""

    __slots__ = ("codec", "data", "kept")

    def __init__(self, codec: Codec, data: bytes, kept: dict[int, Record] | None) -> None:
        self.codec = codec
        self.data = data
        self.kept = kept

    @classmethod
    def pack(cls, records: list[Record], codec: Codec) -> _Block:
        kept: dict[int, Record] = {}
        for i, record in enumerate(records):
            metadata = record[5]
            if metadata is not None and metadata.get("pinned") is True:
                kept[i] = record
        plain: list[Record | None] = [None if i in kept else r for i, r in enumerate(records)]
        try:
            data = pickle.dumps(plain, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001  # whatever a value's pickling raises: find which
            for i, maybe in enumerate(plain):
                if maybe is not None and not _pickles(maybe):
                    kept[i] = maybe
                    plain[i] = None
            data = pickle.dumps(plain, pickle.HIGHEST_PROTOCOL)
        return cls(codec, codec.compress(data), kept or None)

    def unpack(self) -> list[Record]:
        # Bytes this process made from its own records: pickle is safe here.
        records: list[Any] = pickle.loads(self.codec.decompress(self.data))  # noqa: S301
        if self.kept:
            for i, record in self.kept.items():
                records[i] = record
        return records


def _pickles(record: Record) -> bool:
    try:
        pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001  # whatever a value's pickling raises
        return False
    return True


class RetainedTurns:
    """A conversation's retained records, oldest first, with the part of a deque's interface
    the conversation uses: ``len``, indexing (reading and replacing one record), iteration,
    ``append`` and ``popleft``.

    Three runs, in order: ``front``, the unpacked rest of a block that :meth:`popleft`
    started; ``blocks``, packed records; ``hot``, the newest records as they were appended.
    :meth:`settle` packs records of ``hot`` that have left the window.

    Args:
        codec: How blocks are compressed (:data:`CODEC` by default).
        block: Records a block packs (:data:`BLOCK` by default).
    """

    __slots__ = ("_cache", "append", "base", "block", "blocks", "codec", "front", "hot")

    def __init__(self, codec: Codec | None = None, block: int = BLOCK) -> None:
        self.codec = CODEC if codec is None else codec
        self.block = block
        self.front: deque[Record] = deque()
        self.blocks: list[_Block] = []
        self.hot: deque[Record] = deque()
        self.base = 0  # how many records come before hot: the front's and the blocks'
        # The deque's own method: appending is every turn's path, and a Python frame is not.
        self.append: Callable[[Record], None] = self.hot.append
        self._cache: tuple[_Block, list[Record]] | None = None

    def __len__(self) -> int:
        return self.base + len(self.hot)

    def _records(self, block: _Block) -> list[Record]:
        cache = self._cache
        if cache is not None and cache[0] is block:
            return cache[1]
        records = block.unpack()
        self._cache = (block, records)  # one assignment: a reader in another thread sees either
        return records

    def _locate(self, index: int) -> tuple[int, int]:
        """Which run holds record ``index`` (0: front, 1: blocks, 2: hot) and where in it."""
        size = self.base + len(self.hot)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("retained turn index out of range")
        front = len(self.front)
        if index < front:
            return 0, index
        index -= front
        packed = len(self.blocks) * self.block
        if index < packed:
            return 1, index
        return 2, index - packed

    def __getitem__(self, index: int) -> Record:
        at = index - self.base
        if 0 <= at < len(self.hot):  # the newest turns: what every turn's path reads
            return self.hot[at]
        run, at = self._locate(index)
        if run == 2:
            return self.hot[at]
        if run == 0:
            return self.front[at]
        return self._records(self.blocks[at // self.block])[at % self.block]

    def __setitem__(self, index: int, record: Record) -> None:
        run, at = self._locate(index)
        if run == 2:
            self.hot[at] = record
        elif run == 0:
            self.front[at] = record
        else:  # a packed record changes (a pin): its block is packed again
            number = at // self.block
            records = list(self._records(self.blocks[number]))
            records[at % self.block] = record
            self.blocks[number] = _Block.pack(records, self.codec)

    def __iter__(self) -> Iterator[Record]:
        yield from self.front
        for block in self.blocks:
            yield from self._records(block)
        yield from self.hot

    def popleft(self) -> Record:
        """Removes and returns the oldest record."""
        if not self.front and self.blocks:
            self.front.extend(self._records(self.blocks.pop(0)))
            self._cache = None
        if self.front:
            self.base -= 1
            return self.front.popleft()
        return self.hot.popleft()

    def settle(self, cold: int) -> None:
        """Packs whole blocks of the records below index ``cold`` that are not packed yet:
        the caller says how many records have left the window (their messages are frozen)."""
        hot, size = self.hot, self.block
        while cold - self.base >= size and len(hot) >= size:
            records = [hot.popleft() for _ in range(size)]
            self.blocks.append(_Block.pack(records, self.codec))
            self.base += size

    @property
    def packed(self) -> int:
        """How many records are packed in blocks."""
        return len(self.blocks) * self.block
