"""How a view orders the feeds it combines, and how it keeps the newest messages that fit.

Every message lies in one feed (:func:`~memlane.shared.message_builder.feed_of`), so a view
that combines feeds lists each message once. Its order: by timestamp where every message has
one, ties kept in feed order (conversation, agent traces, global), each feed in its store's
order; when any message lacks a timestamp (a custom store may return such), the feeds one
after the other in that order. Both orders are total, so every process that reads the same
feeds shows them in the same order.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from memlane.shared.constants import ACTION, OBSERVATION
from memlane.shared.message_builder import parse_timestamp

__all__ = ["Ordered", "budget_start", "merge_feeds", "order_feeds"]

Message = dict[str, Any]
SortKey = tuple[Any, ...]


class Ordered:
    """The messages of several feeds in view order, with the sort key of each."""

    __slots__ = ("_stamps", "keys", "messages", "timed")

    def __init__(self, feeds: Sequence[Sequence[Message]], extra: Sequence[Message] = ()) -> None:
        # Order by time only if every message (including ``extra``, messages whose place the
        # caller asks about) carries one.
        stamps: dict[int, datetime] = {}
        timed = True
        for message in [m for feed in feeds for m in feed] + list(extra):
            stamp = parse_timestamp(message.get("timestamp"))
            if stamp is None:
                timed = False
                break
            stamps[id(message)] = stamp
        self.timed = timed
        # Keys built inline (a view orders every message it keeps, on every round): unique,
        # as (rank, pos) is, so sorting the (key, message) pairs never compares messages.
        rows: list[tuple[SortKey, Message]]
        if timed:
            rows = [
                ((stamps[id(message)], rank, pos), message)
                for rank, feed in enumerate(feeds)
                for pos, message in enumerate(feed)
            ]
        else:
            rows = [
                ((rank, pos), message)
                for rank, feed in enumerate(feeds)
                for pos, message in enumerate(feed)
            ]
        rows.sort(key=_first)
        self.keys = [key for key, _ in rows]
        self.messages = [message for _, message in rows]
        self._stamps = stamps

    def _key(self, message: Message, rank: int, pos: int, stamps: dict[int, datetime]) -> SortKey:
        if self.timed:
            return (stamps[id(message)], rank, pos)
        return (rank, pos)

    def place(self, message: Message, rank: int, pos: int) -> int:
        """How many messages sort before ``message``, at ``pos`` of feed ``rank``."""
        return bisect.bisect_left(self.keys, self._key(message, rank, pos, self._stamps))


def _first(row: tuple[SortKey, Message]) -> SortKey:
    return row[0]


def order_feeds(feeds: Sequence[Sequence[Message]]) -> list[Message]:
    """The messages of ``feeds`` (each in its store's order) in view order."""
    return Ordered(feeds).messages


def merge_feeds(feeds: Sequence[Sequence[Message]]) -> list[Message]:
    """Several agents' traces as one feed, in view order (each trace ranked by its place)."""
    return order_feeds(feeds)


def _unit_starts(messages: Sequence[Message]) -> list[int]:
    """For each message, the earliest index its budget unit reaches back to.

    An ``observation`` belongs with the oldest ``action`` of the same agent not yet answered
    (parallel calls answered in order), so a budget keeps or drops both.
    """
    starts = list(range(len(messages)))
    pending: dict[Any, deque[int]] = {}
    for i, message in enumerate(messages):
        kind = message.get("type")
        agent = message.get("agent_key")
        if kind == ACTION:
            pending.setdefault(agent, deque()).append(i)
        elif kind == OBSERVATION and pending.get(agent):
            starts[i] = pending[agent].popleft()
    return starts


def budget_start(
    messages: Sequence[Message], max_tokens: int, count: Callable[[Message], int]
) -> tuple[int, int | None]:
    """Where the newest messages that fit ``max_tokens`` begin, and whether one did not fit.

    Whole units are kept or dropped, newest first, stopping at the first unit that does not
    fit: an ``action`` and its ``observation`` are never split.

    Returns:
        ``(start, refused)``: ``messages[start:]`` fit; ``refused`` is where the unit that
        did not fit begins (``None`` when everything fits). Messages placed before
        ``refused`` could not change the answer.
    """
    starts = _unit_starts(messages)
    total = 0
    end = len(messages)
    while end > 0:
        start = starts[end - 1]
        i = end - 1
        while i > start:
            i -= 1
            start = min(start, starts[i])
        cost = sum(count(m) for m in messages[start:end])
        if total + cost > max_tokens:
            return end, start
        total += cost
        end = start
    return 0, None
