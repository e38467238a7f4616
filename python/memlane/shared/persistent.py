""":class:`StoreMessageStore`: the feeds of shared memory on any memlane store.

Each feed of a location is a dense log in the location's store namespace, as a conversation's
is: message ``N`` of a feed is the entry keyed ``<feed>:<N, 12 digits>`` (``c`` for the
conversation, ``g`` for broadcasts, ``a:<agent>`` for an agent's trace), written with an
insert-if-absent conditional write. Whoever writes a key first owns it, so processes that
share a store agree on one order of every feed; one that loses reads what it missed and takes
the next number. Each feed is its own key range, so a view reads only the feeds it shows,
and ``limit`` reads only the newest ``limit`` keys of each: one indexed range read per feed,
whatever the size of the location. The agents of a location are listed under ``r:<agent>``.

Location and agent names are escaped injectively (``%`` and ``:``), so no name reaches into
another location's namespace or another agent's feed.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from typing import Any

from memlane._locks import LockTable
from memlane._runner import Plan, StoreCall, async_method, sync_method
from memlane._validate import check_identifier, type_name
from memlane.errors import CorruptStoreError
from memlane.longterm.model import namespace as join_namespace
from memlane.shared.message_builder import check_message, feed_of
from memlane.shared.message_store import BaseMessageStore, check_agent_keys, check_limit
from memlane.shared.order import merge_feeds
from memlane.stores.protocol import MemoryStore
from memlane.types import MemoryEntry, MemoryScope, utc_now

__all__ = ["StoreMessageStore", "feed_namespace"]

Message = dict[str, Any]
_DIGITS = 12
_REGISTRY = "r:"
_REGISTRY_STOP = "r;"


def feed_namespace(location: str) -> str:
    """The store namespace holding the feeds of ``location``."""
    return join_namespace("shared", location)


def _stream(feed: str, agent: str | None) -> str:
    if feed == "conversation":
        return "c:"
    if feed == "global":
        return "g:"
    return "n:" if agent is None else f"a:{join_namespace(agent)}:"


def _key(stream: str, seq: int) -> str:
    return f"{stream}{seq:0{_DIGITS}d}"


def _stop(stream: str) -> str:
    return stream[:-1] + ";"  # the first key after every "<stream>..." key (";" follows ":")


def _seq(stream: str, key: str | None) -> int:
    digits = "" if key is None else key[len(stream) :]
    if len(digits) != _DIGITS or not digits.isdigit() or not digits.isascii():
        raise CorruptStoreError(f"corrupt shared-memory key {key!r}")
    return int(digits)


def _entry(key: str, content: Any) -> MemoryEntry:
    return MemoryEntry.model_construct(
        entry_id=uuid.uuid4().hex,
        scope=MemoryScope.WORKING,
        key=key,
        content=content,
        metadata={},
        created_at=utc_now(),
        expires_at=None,
        importance=0.5,
        version=0,
    )


def _message(entry: MemoryEntry) -> Message:
    if not isinstance(entry.content, dict):
        raise CorruptStoreError(f"corrupt shared-memory message {entry.key!r}")
    # InMemoryStore hands back the stored objects themselves: a caller must not reach them.
    return copy.deepcopy(entry.content)


class StoreMessageStore(BaseMessageStore):
    """A :class:`BaseMessageStore` on a memlane store: SQLite, files, PostgreSQL, MongoDB.

    Several processes may append to one location at once: each feed is a log whose next
    number is claimed with ``save_if`` (insert-if-absent), so every reader sees one order.
    In this process, appends to one feed take turns (a lock per feed), so hundreds of
    coroutines do not all race for the same number. Each method has an ``async_`` twin; both
    run the same plan.

    Args:
        store: Any memlane store. One without ``save_if`` and ``load_range`` works in one
            process only.
    """

    def __init__(self, store: MemoryStore) -> None:
        if not callable(getattr(store, "load_by_key", None)):
            raise TypeError(f"store must be a memlane MemoryStore, not {type_name(store)}")
        self.store = store
        # The next number of each (namespace, stream) seen: a lower bound, never above the
        # truth (feeds only grow), so a range read from it finds whatever others appended.
        self._heads: dict[tuple[str, str], int] = {}
        self._registered: set[tuple[str, str | None]] = set()
        self._locks = LockTable()

    def __repr__(self) -> str:
        return f"StoreMessageStore({self.store!r})"

    # ------------------------------------------------------------------------ plans

    def _advance(self, ns: str, stream: str, head: int) -> None:
        if head > self._heads.get((ns, stream), 0):
            self._heads[(ns, stream)] = head

    def _head(self, ns: str, stream: str) -> Plan[int]:
        """The feed's next number: cached, else found by probing keys (the log is dense)."""
        known = self._heads.get((ns, stream))
        if known is not None:
            return known
        present, absent = -1, 0
        while (yield StoreCall("load_by_key", (ns, _key(stream, absent)))) is not None:
            present, absent = absent, absent * 2 + 1
        while absent - present > 1:
            middle = (present + absent) // 2
            if (yield StoreCall("load_by_key", (ns, _key(stream, middle)))) is None:
                absent = middle
            else:
                present = middle
        self._advance(ns, stream, absent)
        return absent

    def _read(self, ns: str, stream: str, limit: int | None) -> Plan[list[Message]]:
        start = 0
        if limit is not None:
            start = max(0, (yield from self._head(ns, stream)) - limit)
        entries = yield StoreCall("load_range", (ns, _key(stream, start), _stop(stream)))
        if entries:
            self._advance(ns, stream, _seq(stream, entries[-1].key) + 1)
        if limit is not None:
            entries = entries[-limit:]
        return [_message(entry) for entry in entries]

    def _get_conversation_messages(
        self, location: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The conversation of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        ns, limit = feed_namespace(check_identifier(location, "location")), check_limit(limit)
        return (yield from self._read(ns, "c:", limit))

    def _get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The trace of ``agent_key``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location``, ``agent_key`` or ``limit``.
        """
        ns, limit = feed_namespace(check_identifier(location, "location")), check_limit(limit)
        stream = _stream("agent", check_identifier(agent_key, "agent_key"))
        return (yield from self._read(ns, stream, limit))

    def _get_global_messages(self, location: str, limit: int | None = None) -> Plan[list[Message]]:
        """The broadcasts of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        ns, limit = feed_namespace(check_identifier(location, "location")), check_limit(limit)
        return (yield from self._read(ns, "g:", limit))

    def _team(self, ns: str, keys: Sequence[str | None], limit: int | None) -> Plan[list[Message]]:
        feeds = []
        for agent in keys:  # a comprehension cannot delegate to a plan with yield from
            feeds.append((yield from self._read(ns, _stream("agent", agent), limit)))  # noqa: PERF401
        merged = merge_feeds(feeds)
        return merged if limit is None else merged[-limit:]

    def _get_team_messages(
        self, location: str, agent_keys: Sequence[str], limit: int | None = None
    ) -> Plan[list[Message]]:
        """The traces of ``agent_keys`` as one feed: by timestamp, then by the order of
        ``agent_keys``, each agent's in its log's order; newest ``limit``, oldest first.

        Raises:
            TypeError, ValueError: A bad ``location``, ``agent_keys`` or ``limit``.
        """
        ns, limit = feed_namespace(check_identifier(location, "location")), check_limit(limit)
        return (yield from self._team(ns, check_agent_keys(agent_keys), limit))

    def _list_agents(self, location: str) -> Plan[list[str | None]]:
        """The agents with a trace in ``location`` (``None``: messages naming no agent).

        Raises:
            TypeError, ValueError: A bad ``location``.
        """
        ns = feed_namespace(check_identifier(location, "location"))
        entries = yield StoreCall("load_range", (ns, _REGISTRY, _REGISTRY_STOP))
        return [entry.content.get("agent_key") for entry in entries]

    def _get_all_agent_messages(
        self, location: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """Every agent's trace in ``location`` as one feed (see :meth:`get_team_messages`).

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        limit = check_limit(limit)
        agents = yield from self._list_agents(location)
        return (yield from self._team(feed_namespace(location), agents, limit))

    def _append(self, location: str, message: Message) -> Plan[None]:
        """Adds a checked copy of ``message`` to the feed it belongs to, after every message
        any process appended to that feed before.

        Raises:
            TypeError: ``message`` is not a ``dict``, or ``location`` not a ``str``.
            ValueError: A bad message (see :func:`check_message`) or an empty ``location``.
        """
        ns = feed_namespace(check_identifier(location, "location"))
        stored = check_message(message)
        feed, agent = feed_of(stored)
        stream = _stream(feed, agent)
        yield self._locks[f"{ns}\x00{stream}"]
        if feed == "agent" and (ns, agent) not in self._registered:
            marker = _REGISTRY + ("" if agent is None else join_namespace(agent))
            yield StoreCall("save_if", (ns, _entry(marker, {"agent_key": agent}), None))
            self._registered.add((ns, agent))
        head = yield from self._head(ns, stream)
        while not (yield StoreCall("save_if", (ns, _entry(_key(stream, head), stored), None))):
            # Another process took the number: read what it (and others) appended.
            missed = yield StoreCall("load_range", (ns, _key(stream, head), _stop(stream)))
            head = _seq(stream, missed[-1].key) + 1 if missed else head + 1
        self._advance(ns, stream, head + 1)

    get_conversation_messages = sync_method(_get_conversation_messages)
    async_get_conversation_messages = async_method(_get_conversation_messages)
    get_agent_messages = sync_method(_get_agent_messages)
    async_get_agent_messages = async_method(_get_agent_messages)
    get_global_messages = sync_method(_get_global_messages)
    async_get_global_messages = async_method(_get_global_messages)
    get_team_messages = sync_method(_get_team_messages)
    async_get_team_messages = async_method(_get_team_messages)
    get_all_agent_messages = sync_method(_get_all_agent_messages)
    async_get_all_agent_messages = async_method(_get_all_agent_messages)
    list_agents = sync_method(_list_agents)
    async_list_agents = async_method(_list_agents)
    append = sync_method(_append)
    async_append = async_method(_append)
