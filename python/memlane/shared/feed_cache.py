"""The newest messages of each feed a :class:`~memlane.shared.StoreMessageStore` has read.

A feed is an append-only log: message ``N``, once written, never changes (each number is
claimed with an insert-if-absent write and never rewritten). So what was read of a feed can
be kept and reused: a view asks the store only whether the number after the newest it holds
is taken (one keyed read) and reads only messages it has not seen, whatever the size of the
job. Without this a budgeted view re-reads its feeds on each widening round, and every view
re-reads the newest blocks on every call.

Kept messages are the store's (or the store's decoding's) own objects: they are never handed
to a caller without a copy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["MAX_KEPT", "Window", "Windows"]

Message = dict[str, Any]
MAX_KEPT = 65_536
"""Messages kept per message store, over all feeds: the least recently read feeds go first."""


class Window:
    """A run of one feed's consecutive messages, numbers ``lo`` to ``hi - 1``."""

    __slots__ = ("lo", "messages")

    def __init__(self, lo: int, messages: list[Message]) -> None:
        self.lo = lo
        self.messages = messages

    @property
    def hi(self) -> int:
        """The number after the newest message held."""
        return self.lo + len(self.messages)

    def since(self, seq: int) -> list[Message]:
        """The messages held from number ``seq`` on (``seq >= lo``)."""
        return self.messages[seq - self.lo :]


class Windows:
    """The windows of every feed, least recently read first, at most ``limit`` messages."""

    def __init__(self, limit: int = MAX_KEPT) -> None:
        self.limit = limit
        self._windows: OrderedDict[str, Window] = OrderedDict()
        self._size = 0
        # Threads share a message store (its sync methods): each change is made whole.
        self._lock = threading.Lock()

    def get(self, feed: str) -> Window | None:
        """The window of ``feed`` (now the most recently read), or ``None``."""
        with self._lock:
            window = self._windows.get(feed)
            if window is not None:
                self._windows.move_to_end(feed)
            return window

    def extend(self, feed: str, seq: int, messages: list[Message], *, replace: bool = True) -> None:
        """Records that ``messages`` are numbers ``seq`` on of ``feed``.

        Joined to the feed's window when they touch or overlap it; otherwise they replace it
        if ``replace`` (a run with a gap would claim messages it does not hold).
        """
        if messages:
            with self._lock:
                self._extend(feed, seq, messages, replace)

    def _extend(self, feed: str, seq: int, messages: list[Message], replace: bool) -> None:
        window = self._windows.get(feed)
        end = seq + len(messages)
        if window is None or end < window.lo or seq > window.hi:
            if replace:
                self._put(feed, Window(seq, list(messages)))
        else:
            before = messages[: max(0, window.lo - seq)]
            after = messages[max(0, window.hi - seq) :]
            if before:
                window.messages = before + window.messages
                window.lo = seq
            window.messages.extend(after)
            self._size += len(before) + len(after)
            self._windows.move_to_end(feed)
        self._trim()

    def _put(self, feed: str, window: Window) -> None:
        old = self._windows.pop(feed, None)
        if old is not None:
            self._size -= len(old.messages)
        self._windows[feed] = window
        self._size += len(window.messages)

    def _trim(self) -> None:
        while self._size > self.limit and len(self._windows) > 1:
            _, window = self._windows.popitem(last=False)
            self._size -= len(window.messages)
        if self._size > self.limit:
            # One feed alone over the limit keeps its newest messages.
            window = next(iter(self._windows.values()))
            cut = self._size - self.limit
            del window.messages[:cut]
            window.lo += cut
            self._size -= cut

    def __len__(self) -> int:
        return self._size
