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

Messages never change once written, so what a message store has read of a feed it keeps
(:mod:`memlane.shared.feed_cache`): a later read asks the store only whether the number after
the newest it holds is taken, one keyed read per feed, and reads just the messages it has
not seen.

Location and agent names are escaped injectively (``%`` and ``:``), so no name reaches into
another location's namespace or another agent's feed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from memlane._locks import LockTable
from memlane._runner import Load, LoadByKey, LoadRange, Plan, SaveIf, async_method, sync_method
from memlane._validate import check_identifier, type_name
from memlane.errors import CorruptStoreError
from memlane.longterm.model import namespace as join_namespace
from memlane.shared.feed_cache import Windows
from memlane.shared.message_builder import check_message, feed_of, json_copy
from memlane.shared.message_store import BaseMessageStore, check_agent_keys, check_limit
from memlane.shared.order import merge_feeds
from memlane.stores.in_memory import InMemoryStore
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


def _messages(entries: list[MemoryEntry]) -> list[Message]:
    for entry in entries:
        if not isinstance(entry.content, dict):
            raise CorruptStoreError(f"corrupt shared-memory message {entry.key!r}")
    return [entry.content for entry in entries]


def _copies(messages: list[Message]) -> list[Message]:
    # What a read gives is kept for later reads (and, on InMemoryStore, is the store's own
    # object): a caller gets copies.
    return [json_copy(message) for message in messages]


def _slice(entries: list[MemoryEntry], seq: int, stop: int) -> list[MemoryEntry]:
    """Of a whole block (in insertion order), the entries numbered ``seq`` to ``stop - 1``.

    A feed's numbers are claimed one after another (each only once the one before exists), so
    a block holds its numbers in order from its first: the slice is positional. Checked at its
    ends; a block found otherwise is filtered and sorted.
    """
    base = seq - seq % BLOCK
    part = entries[seq - base : stop - base]
    if part and part[0].key == _key(seq) and part[-1].key == _key(seq + len(part) - 1):
        return part
    if not part and (not entries or entries[-1].key == _key(base + len(entries) - 1)):
        return part
    low, high = _key(seq), _key(stop)
    found = [e for e in entries if e.key is not None and low <= e.key < high]
    found.sort(key=lambda e: e.key or "")
    return found


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
        # InMemoryStore answers a range by filtering its whole namespace, and a keyed read
        # from its index: a block is loaded whole (its list, at native speed) and sliced.
        self._scans = isinstance(store, InMemoryStore)
        # The next number of each feed seen: a lower bound, never above the truth (feeds
        # only grow), so a range read from it finds whatever others appended.
        self._heads: dict[str, int] = {}
        self._windows = Windows()
        self._registered: set[tuple[str, str | None]] = set()
        self._locks = LockTable()

    def __repr__(self) -> str:
        return f"StoreMessageStore({self.store!r})"

    # ------------------------------------------------------------------------ plans

    def _advance(self, feed: _Feed, head: int) -> None:
        if head > self._heads.get(feed.base, -1):
            self._heads[feed.base] = head

    def _probe(self, feed: _Feed, seq: int) -> Plan[bool]:
        return (yield LoadByKey(feed.namespace(seq), _key(seq))) is not None

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
            entries = yield from self._block(feed, seq, end)
            found += entries
            if not entries or _seq(entries[-1].key) != end - 1:
                break
            seq = end
        if found:
            self._advance(feed, _seq(found[-1].key) + 1)
        return found

    def _block(self, feed: _Feed, seq: int, stop: int) -> Plan[list[MemoryEntry]]:
        """The entries numbered ``seq`` to ``stop - 1``, all in the block holding ``seq``."""
        if self._scans:
            return _slice((yield Load(feed.namespace(seq))), seq, stop)
        found: list[MemoryEntry] = yield LoadRange(feed.namespace(seq), _key(seq), _key(stop))
        return found

    def _between(self, feed: _Feed, seq: int, stop: int) -> Plan[list[MemoryEntry]]:
        """The entries numbered ``seq`` to ``stop - 1`` (all present: below a known head)."""
        found: list[MemoryEntry] = []
        while seq < stop:
            end = min(stop, _block_end(seq))
            found += yield from self._block(feed, seq, end)
            seq = end
        return found

    def _newer(self, feed: _Feed, seq: int) -> Plan[list[MemoryEntry]]:
        """The entries from number ``seq`` on: first whether ``seq`` is taken, by its key (the
        log is dense), as a view finds it is not on most calls."""
        first = yield LoadByKey(feed.namespace(seq), _key(seq))
        if first is None:
            return []
        return [first, *(yield from self._from(feed, seq + 1))]

    def _read(self, feed: _Feed, limit: int | None) -> Plan[list[Message]]:
        """The feed's newest ``limit`` messages (all for ``None``), oldest first: the kept
        objects themselves, which a caller copies before handing out."""
        window = self._windows.get(feed.base)
        if window is None:
            start = 0
            if limit is not None:
                start = max(0, (yield from self._head(feed)) - limit)
            entries = yield from self._from(feed, start)
            messages = _messages(entries)
            if entries:
                self._windows.extend(feed.base, _seq(entries[0].key), messages)
            return messages if limit is None else messages[-limit:]
        # What was read before is reused: only numbers not yet seen are read.
        lo, hi = window.lo, window.hi
        newer = _messages((yield from self._newer(feed, hi)))
        head = hi + len(newer)
        start = 0 if limit is None else max(0, head - limit)
        held = window.messages[max(start, lo) - lo : hi - lo]
        older: list[Message] = []
        if start < lo:
            older = _messages((yield from self._between(feed, start, lo)))
        self._advance(feed, head)
        self._windows.extend(feed.base, hi, newer)
        self._windows.extend(feed.base, start, older, replace=False)
        messages = older + held + newer
        return messages if limit is None else messages[-limit:]

    def _get_conversation_messages(
        self, location: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The conversation of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        return _copies((yield from self._read(_Feed(location, "conversation", None), limit)))

    def _get_agent_messages(
        self, location: str, agent_key: str, limit: int | None = None
    ) -> Plan[list[Message]]:
        """The trace of ``agent_key``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location``, ``agent_key`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        agent_key = check_identifier(agent_key, "agent_key")
        return _copies((yield from self._read(_Feed(location, "agent", agent_key), limit)))

    def _get_global_messages(self, location: str, limit: int | None = None) -> Plan[list[Message]]:
        """The broadcasts of ``location``: newest ``limit`` (all for ``None``), oldest first.

        Raises:
            TypeError, ValueError: A bad ``location`` or ``limit``.
        """
        location, limit = check_identifier(location, "location"), check_limit(limit)
        return _copies((yield from self._read(_Feed(location, "global", None), limit)))

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
        return _copies((yield from self._team(location, check_agent_keys(agent_keys), limit)))

    def _list_agents(self, location: str) -> Plan[list[str | None]]:
        """The agents with a trace in ``location`` (``None``: messages naming no agent).

        Raises:
            TypeError, ValueError: A bad ``location``.
        """
        ns = _registry(check_identifier(location, "location"))
        entries = yield Load(ns)
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
        return _copies((yield from self._team(location, agents, limit)))

    def _view(
        self, location: str, kind: str, agent: str | None, limit: int | None
    ) -> Plan[list[Message]]:
        """One feed's newest ``limit`` messages for a view, which copies only those it shows
        (location and agent already checked by the memory)."""
        return (yield from self._read(_Feed(location, kind, agent), limit))

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
            yield SaveIf(_registry(location), marker, None)
            self._registered.add((location, agent))
        head = yield from self._head(feed)
        while not (yield SaveIf(feed.namespace(head), _entry(_key(head), stored), None)):
            # Another process took the number: read what it (and others) appended.
            missed = yield from self._from(feed, head)
            self._windows.extend(feed.base, head, _messages(missed), replace=False)
            head = _seq(missed[-1].key) + 1 if missed else head + 1
        self._advance(feed, head + 1)
        # The next read of this feed need not read back what was just written.
        self._windows.extend(feed.base, head, [stored], replace=False)

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
