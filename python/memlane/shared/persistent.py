""":class:`StoreMessageStore`: the feeds of shared memory on any memlane store.

Each feed of a location (its conversation, its broadcasts, each agent's trace) is a dense
log, as a conversation's is: message ``N`` of a feed is the entry keyed ``N`` (12 digits),
written with an insert-if-absent conditional write. Whoever writes a number first owns it, so
processes that share a store agree on one order of every feed; one that loses reads what it
missed and takes the next number.

A feed is cut into blocks of :data:`BLOCK` numbers, each block its own store namespace
(``shared:<location>:<feed>:<block>``). A view reads only the feeds it shows, and ``limit``
only the blocks holding their newest numbers: one range read of a block or two per feed,
whatever the size of the location, on every store: one whose range reads are indexed
(SQLite, PostgreSQL, MongoDB) and one that reads a whole namespace to answer (a file per
namespace, an in-memory table) alike. The agents of a location are listed in
``shared:<location>:agents``.

Location and agent names are escaped injectively (``%`` and ``:``), so no name reaches into
another location's namespace or another agent's feed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from memlane._locks import LockTable
from memlane._runner import Plan, StoreCall, async_method, sync_method
from memlane._validate import check_identifier, type_name
from memlane.errors import CorruptStoreError
from memlane.longterm.model import namespace as join_namespace
from memlane.shared.message_builder import check_message, feed_of, json_copy
from memlane.shared.message_store import BaseMessageStore, check_agent_keys, check_limit
from memlane.shared.order import merge_feeds
from memlane.stores.memory import InMemoryStore
from memlane.stores.protocol import MemoryStore
from memlane.types import MemoryEntry, MemoryScope, utc_now

__all__ = ["BLOCK", "StoreMessageStore", "bulk_entries", "feed_namespace"]

Message = dict[str, Any]
BLOCK = 256
"""Numbers per block of a feed: what a store without range indexes reads for a view."""
_DIGITS = 12


def feed_namespace(location: str) -> str:
    """The prefix of every store namespace holding the feeds of ``location``."""
    return join_namespace("shared", location)


class _Feed:
    """One feed of one location: where its blocks live."""

    __slots__ = ("base", "parts")

    def __init__(self, location: str, feed: str, agent: str | None) -> None:
        if feed == "conversation":
            self.parts: tuple[str, ...] = ("shared", location, "c")
        elif feed == "global":
            self.parts = ("shared", location, "g")
        elif agent is None:
            self.parts = ("shared", location, "n")
        else:
            self.parts = ("shared", location, "a", agent)
        self.base = join_namespace(*self.parts)

    def namespace(self, seq: int) -> str:
        """The store namespace of the block holding number ``seq``."""
        return join_namespace(*self.parts, str(seq // BLOCK))


def _registry(location: str) -> str:
    return join_namespace("shared", location, "agents")


def _agent_marker(agent: str | None) -> str:
    return "n" if agent is None else "a:" + join_namespace(agent)


def _key(seq: int) -> str:
    return f"{seq:0{_DIGITS}d}"


def _block_end(seq: int) -> int:
    return (seq // BLOCK + 1) * BLOCK


def _seq(key: str | None) -> int:
    if key is None or len(key) != _DIGITS or not key.isdigit() or not key.isascii():
        raise CorruptStoreError(f"corrupt shared-memory key {key!r}")
    return int(key)


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


def bulk_entries(location: str, messages: Sequence[Message]) -> list[tuple[str, MemoryEntry]]:
    """The (store namespace, entry) pairs that appending ``messages`` in order to an empty
    ``location`` writes, for loading a large job with ``save_many`` (a migration, a
    benchmark's fill) instead of one conditional write per message.

    Raises:
        TypeError, ValueError: A bad location or message, as :meth:`StoreMessageStore.append`.
    """
    location = check_identifier(location, "location")
    heads: dict[str, int] = {}
    agents: dict[str | None, None] = {}
    pairs = []
    for message in messages:
        stored = check_message(message)
        feed, agent = feed_of(stored)
        if feed == "agent":
            agents[agent] = None
        where = _Feed(location, feed, agent)
        seq = heads.get(where.base, 0)
        heads[where.base] = seq + 1
        pairs.append((where.namespace(seq), _entry(_key(seq), stored)))
    registry = _registry(location)
    pairs += [(registry, _entry(_agent_marker(a), {"agent_key": a})) for a in agents]
    return pairs


def _message(entry: MemoryEntry, shares: bool) -> Message:
    if not isinstance(entry.content, dict):
        raise CorruptStoreError(f"corrupt shared-memory message {entry.key!r}")
    # InMemoryStore hands back the stored objects themselves (``shares``): a caller must not
    # reach them. Every other store decodes a fresh copy per read.
    return json_copy(entry.content) if shares else entry.content


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
        self._shares = isinstance(store, InMemoryStore)
        # The next number of each feed seen: a lower bound, never above the truth (feeds
        # only grow), so a range read from it finds whatever others appended.
        self._heads: dict[str, int] = {}
        self._registered: set[tuple[str, str | None]] = set()
        self._locks = LockTable()

    def __repr__(self) -> str:
        return f"StoreMessageStore({self.store!r})"

    # ------------------------------------------------------------------------ plans

    def _advance(self, feed: _Feed, head: int) -> None:
        if head > self._heads.get(feed.base, 0):
            self._heads[feed.base] = head

    def _probe(self, feed: _Feed, seq: int) -> Plan[bool]:
        return (yield StoreCall("load_by_key", (feed.namespace(seq), _key(seq)))) is not None

    def _head(self, feed: _Feed) -> Plan[int]:
        """The feed's next number: cached, else found by probing keys (the log is dense)."""
        known = self._heads.get(feed.base)
        if known is not None:
            return known
        present, absent = -1, 0
        while (yield from self._probe(feed, absent)):
            present, absent = absent, absent * 2 + 1
        while absent - present > 1:
            middle = (present + absent) // 2
            if (yield from self._probe(feed, middle)):
                present = middle
            else:
                absent = middle
        self._advance(feed, absent)
        return absent

    def _from(self, feed: _Feed, seq: int) -> Plan[list[MemoryEntry]]:
        """Every entry of the feed from number ``seq`` on, block by block: a block that ends
        full may be followed by another."""
        found: list[MemoryEntry] = []
        while True:
            end = _block_end(seq)
            entries = yield StoreCall("load_range", (feed.namespace(seq), _key(seq), _key(end)))
            found += entries
            if not entries or _seq(entries[-1].key) != end - 1:
                break
            seq = end
        if found:
            self._advance(feed, _seq(found[-1].key) + 1)
        return found

    def _read(self, feed: _Feed, limit: int | None) -> Plan[list[Message]]:
        start = 0
        if limit is not None:
            start = max(0, (yield from self._head(feed)) - limit)
        entries = yield from self._from(feed, start)
        if limit is not None:
            entries = entries[-limit:]
        shares = self._shares
        return [_message(entry, shares) for entry in entries]

    def _get_conversation_messages(
        self, location: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The conversation of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        return (yield from self._read(_Feed(location, "conversation", None), limit))

    def _get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The trace of ``agent_key``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location``, ``agent_key`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        agent_key = check_identifier(agent_key, "agent_key")
        return (yield from self._read(_Feed(location, "agent", agent_key), limit))

    def _get_global_messages(self, location: str, limit: int | None = None) -> Plan[list[Message]]:
        """The broadcasts of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        return (yield from self._read(_Feed(location, "global", None), limit))

    def _team(
        self, location: str, keys: Sequence[str | None], limit: int | None
    ) -> Plan[list[Message]]:
        feeds = []
        for agent in keys:  # a comprehension cannot delegate to a plan with yield from
            feeds.append((yield from self._read(_Feed(location, "agent", agent), limit)))  # noqa: PERF401
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
        location, limit = check_identifier(location, "location"), check_limit(limit)
        return (yield from self._team(location, check_agent_keys(agent_keys), limit))

    def _list_agents(self, location: str) -> Plan[list[str | None]]:
        """The agents with a trace in ``location`` (``None``: messages naming no agent).

        Raises:
            TypeError, ValueError: A bad ``location``.
        """
        ns = _registry(check_identifier(location, "location"))
        entries = yield StoreCall("load", (ns,))
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
        return (yield from self._team(location, agents, limit))

    def _append(self, location: str, message: Message) -> Plan[None]:
        """Adds a checked copy of ``message`` to the feed it belongs to, after every message
        any process appended to that feed before.

        Raises:
            TypeError: ``message`` is not a ``dict``, or ``location`` not a ``str``.
            ValueError: A bad message (see :func:`check_message`) or an empty ``location``.
        """
        location = check_identifier(location, "location")
        stored = check_message(message)
        kind, agent = feed_of(stored)
        feed = _Feed(location, kind, agent)
        yield self._locks[feed.base]
        if kind == "agent" and (location, agent) not in self._registered:
            marker = _entry(_agent_marker(agent), {"agent_key": agent})
            yield StoreCall("save_if", (_registry(location), marker, None))
            self._registered.add((location, agent))
        head = yield from self._head(feed)
        while not (
            yield StoreCall("save_if", (feed.namespace(head), _entry(_key(head), stored), None))
        ):
            # Another process took the number: read what it (and others) appended.
            missed = yield from self._from(feed, head)
            head = _seq(missed[-1].key) + 1 if missed else head + 1
        self._advance(feed, head + 1)

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
