"""Message stores: :class:`BaseMessageStore`, the interface memories read and write through,
and :class:`InMemoryMessageStore`, the one that lives in a process.

A message store holds the feeds of each *location* (a job, a namespace): the conversation,
one trace per agent and the global broadcasts. Its methods are synchronous, as in the
frameworks users come from; each has an ``async_`` twin that memories await, which a
subclass may override (the defaults call the synchronous method).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from memlane._validate import check_identifier, check_positive_int, type_name
from memlane.shared.message_builder import check_message, feed_of, json_copy

__all__ = ["BaseMessageStore", "InMemoryMessageStore", "check_agent_keys", "check_limit"]

Message = dict[str, Any]


def check_limit(limit: object) -> int | None:
    """``None`` (every message) or an ``int`` above 0.

    Raises:
        TypeError: Neither ``None`` nor an ``int``.
        ValueError: Zero or negative.
    """
    return None if limit is None else check_positive_int(limit, "limit")


def check_agent_keys(agent_keys: object) -> list[str]:
    """A list of agent keys, each a non-empty ``str``; duplicates dropped, order kept.

    Raises:
        TypeError: A ``str`` (one key is not a list of keys) or not a sequence of ``str``.
        ValueError: An empty key or one with NUL.
    """
    if isinstance(agent_keys, str) or not isinstance(agent_keys, Sequence | set | frozenset):
        raise TypeError(f"agent_keys must be a list of str, not {type_name(agent_keys)}")
    return list(dict.fromkeys(check_identifier(k, "agent key") for k in agent_keys))


def newest(messages: list[Message], limit: int | None) -> list[Message]:
    """The newest ``limit`` of ``messages`` (all when ``None``), oldest first."""
    return messages if limit is None or len(messages) <= limit else messages[-limit:]


class BaseMessageStore(ABC):
    """Where the feeds of shared memory live; implement the five methods to bring your own.

    ``limit`` always means the newest ``limit`` messages, returned oldest first; ``None``
    means all of them. A subclass that implements only the five synchronous methods works
    with every memory of :mod:`memlane.shared`.
    """

    @abstractmethod
    def get_conversation_messages(self, location: str, limit: int | None = None) -> list[Message]:
        """The conversation of ``location``: its ``user_message`` and ``assistant_message`` s."""

    @abstractmethod
    def get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> list[Message]:
        """The trace of one agent: its messages that are neither conversation nor global."""

    @abstractmethod
    def get_global_messages(self, location: str, limit: int | None = None) -> list[Message]:
        """The broadcasts of ``location``: its messages with ``is_global`` set."""

    @abstractmethod
    def get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> list[Message]:
        """The traces of several agents, as one feed in the store's order."""

    @abstractmethod
    def append(self, location: str, message: Message) -> None:
        """Adds ``message`` to the feed of ``location`` it belongs to."""

    async def async_get_conversation_messages(
        self, location: str, limit: int | None = None
    ) -> list[Message]:
        """Async :meth:`get_conversation_messages`."""
        return self.get_conversation_messages(location, limit)

    async def async_get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> list[Message]:
        """Async :meth:`get_agent_messages`."""
        return self.get_agent_messages(location, agent_key, limit)

    async def async_get_global_messages(
        self, location: str, limit: int | None = None
    ) -> list[Message]:
        """Async :meth:`get_global_messages`."""
        return self.get_global_messages(location, limit)

    async def async_get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> list[Message]:
        """Async :meth:`get_team_messages`."""
        return self.get_team_messages(location, agent_keys, limit)

    async def async_append(self, location: str, message: Message) -> None:
        """Async :meth:`append`."""
        self.append(location, message)


class _Location:
    __slots__ = ("agents", "conversation", "global_")

    def __init__(self) -> None:
        self.conversation: list[tuple[int, Message]] = []
        self.global_: list[tuple[int, Message]] = []
        self.agents: dict[str | None, list[tuple[int, Message]]] = {}


def _copies(rows: list[tuple[int, Message]], limit: int | None) -> list[Message]:
    chosen = rows if limit is None or len(rows) <= limit else rows[-limit:]
    return [json_copy(message) for _, message in chosen]


class InMemoryMessageStore(BaseMessageStore):
    """A message store in this process's memory, safe for threads and coroutines alike.

    Appends take a lock held for no ``await``, so coroutines of any event loop and threads
    interleave without losing or duplicating a message; one counter orders every message of
    a location, which is the order of a team's combined trace.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locations: dict[str, _Location] = {}
        self._order = itertools.count()

    def append(self, location: str, message: Message) -> None:
        """Adds a checked copy of ``message`` to its feed (see :func:`feed_of`).

        Raises:
            TypeError: ``message`` is not a ``dict``, or ``location`` not a ``str``.
            ValueError: A bad message (see :func:`check_message`) or an empty ``location``.
        """
        location = check_identifier(location, "location")
        stored = check_message(message)
        feed, agent = feed_of(stored)
        self._put(location, feed, agent, stored)

    def _put(self, location: str, feed: str, agent: str | None, stored: Message) -> None:
        """Adds a checked message to one feed of ``location`` (checked already)."""
        with self._lock:
            place = self._locations.get(location)
            if place is None:
                place = self._locations[location] = _Location()
            row = (next(self._order), stored)
            if feed == "global":
                place.global_.append(row)
            elif feed == "conversation":
                place.conversation.append(row)
            else:
                place.agents.setdefault(agent, []).append(row)

    def _read(self, location: object, limit: object) -> tuple[_Location | None, int | None]:
        place = self._locations.get(check_identifier(location, "location"))
        return place, check_limit(limit)

    def get_conversation_messages(self, location: str, limit: int | None = None) -> list[Message]:
        """The conversation of ``location``, newest ``limit`` (all for ``None``), oldest first."""
        place, limit = self._read(location, limit)
        with self._lock:
            return [] if place is None else _copies(place.conversation, limit)

    def get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> list[Message]:
        """The trace of ``agent_key``, newest ``limit`` (all for ``None``), oldest first."""
        place, limit = self._read(location, limit)
        agent_key = check_identifier(agent_key, "agent_key")
        with self._lock:
            return [] if place is None else _copies(place.agents.get(agent_key, []), limit)

    def get_global_messages(self, location: str, limit: int | None = None) -> list[Message]:
        """The broadcasts of ``location``, newest ``limit`` (all for ``None``), oldest first."""
        place, limit = self._read(location, limit)
        with self._lock:
            return [] if place is None else _copies(place.global_, limit)

    def get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> list[Message]:
        """The traces of ``agent_keys`` merged in append order; newest ``limit``, oldest first."""
        place, limit = self._read(location, limit)
        keys = check_agent_keys(agent_keys)
        with self._lock:
            if place is None:
                return []
            return self._team(place, keys, limit)

    def list_agents(self, location: str) -> list[str | None]:
        """The agents with a trace in ``location`` (``None``: messages that name no agent)."""
        place = self._locations.get(check_identifier(location, "location"))
        with self._lock:
            return [] if place is None else list(place.agents)

    def get_all_agent_messages(self, location: str, limit: int | None = None) -> list[Message]:
        """Every agent's trace merged in append order; newest ``limit``, oldest first."""
        place, limit = self._read(location, limit)
        with self._lock:
            return [] if place is None else self._team(place, list(place.agents), limit)

    async def async_get_all_agent_messages(
        self, location: str, limit: int | None = None
    ) -> list[Message]:
        """Async :meth:`get_all_agent_messages`."""
        return self.get_all_agent_messages(location, limit)

    async def async_list_agents(self, location: str) -> list[str | None]:
        """Async :meth:`list_agents`."""
        return self.list_agents(location)

    @staticmethod
    def _team(place: _Location, keys: Sequence[str | None], limit: int | None) -> list[Message]:
        feeds = [place.agents.get(k, []) for k in keys]
        if limit is not None:
            feeds = [feed[-limit:] for feed in feeds]
        merged = list(heapq.merge(*feeds, key=lambda row: row[0]))
        return _copies(merged, limit)

    def locations(self) -> list[str]:
        """Every location holding a message."""
        with self._lock:
            return list(self._locations)
