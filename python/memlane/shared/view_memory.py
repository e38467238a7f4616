"""What an agent's memory does (:class:`BaseMemory`) and the role views every shared memory gives.

A view reads one location of a message store: what one agent adds, another agent's view of
the same location shows, if its role is shown it. Each operation is written once, as a plan
(:mod:`memlane._runner`): the sync methods (``add_message``, ``get_message_history``) run it
blocking, their ``async_`` twins await it, and reads of several feeds overlap when awaited.
The public memories built on this are in :mod:`memlane.shared.agent_memories`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from memlane._deprecation import warn_renamed
from memlane._runner import Call, Gather, Plan, Step, run_async, run_sync
from memlane._validate import check_identifier, check_positive_int, type_name
from memlane.shared.constants import CONVERSATION_TYPES
from memlane.shared.convert import message_tokens
from memlane.shared.filters import (
    Feed,
    HistoryFilter,
    Role,
    ViewSpec,
    WholeFeedFilter,
    selects_each_message,
)
from memlane.shared.message_builder import check_message, json_copy
from memlane.shared.message_store import (
    BaseMessageStore,
    InMemoryMessageStore,
    check_agent_keys,
    check_limit,
    newest,
)
from memlane.shared.order import Ordered, budget_start
from memlane.shared.persistent import StoreMessageStore
from memlane.tokens import TokenEstimator

if TYPE_CHECKING:
    from memlane.stores.protocol import MemoryStore

__all__ = ["BaseMemory", "ViewMemory"]

Message = dict[str, Any]


class _Source(NamedTuple):
    """A feed of a view and how to read its newest ``n`` messages (all for ``None``)."""

    feed: Feed
    read: Callable[[int | None], Step[list[Message]]]


# Messages per feed a budgeted view reads first; 4x more each time the answer needs more.
# Small, so a tight budget over a large job reads about what it shows.
_FIRST_READ = 16
_estimator: TokenEstimator | None = None


def _in_feed(feed: Feed, messages: list[Message]) -> list[Message]:
    """Of what a store gave for ``feed``, the messages that lie in it (see
    :func:`~memlane.shared.message_builder.feed_of`).

    A custom store may give a broadcast or a conversation message in an agent's trace too (the
    frameworks' example stores select a trace by ``agent_key`` alone), and a broadcast in the
    conversation: each is shown from its own feed only, so a view lists it once.
    """
    if feed == "global":
        return messages
    kept = [
        m
        for m in messages
        if m.get("is_global") not in (True, 1)
        and (feed == "conversation" or m.get("type") not in CONVERSATION_TYPES)
    ]
    return messages if len(kept) == len(messages) else kept


def _as_read(feed: Feed, messages: list[Message]) -> list[Message]:
    """``messages`` as they are: what memlane's own stores give for a feed lies in it."""
    del feed
    return messages


def _default_estimator() -> TokenEstimator:
    global _estimator  # one exact estimator per process, made on first use
    if _estimator is None:
        _estimator = TokenEstimator()
    return _estimator


class BaseMemory(ABC):
    """What an agent's memory does: take messages, give the agent's history.

    Each operation is a sync method and its ``async_`` twin. The names before this scheme
    (``add``, ``add_global``, ``get_history``, async only) still work for one release and warn.
    """

    @abstractmethod
    def add_message(self, message: Message) -> None:
        """Records ``message``."""

    @abstractmethod
    async def async_add_message(self, message: Message) -> None:
        """Async :meth:`add_message`."""

    @abstractmethod
    def get_message_history(
        self,
        filter: HistoryFilter | None = None,  # the name users port code with
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """The messages the agent is shown, oldest first."""

    @abstractmethod
    async def async_get_message_history(
        self,
        filter: HistoryFilter | None = None,  # the name users port code with
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Async :meth:`get_message_history`."""

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | str | os.PathLike[str], *, store: MemoryStore | None = None
    ) -> BaseMemory:
        """The memory a configuration describes: a mapping or the path of a YAML file.

        See :mod:`memlane.shared.memory_config` for the format (``type`` names a memory class or a
        preset, ``config`` its arguments, ``${VAR}`` reads the environment).

        Args:
            config: A mapping with ``type`` and ``config``, or the path of a YAML file.
            store: The memlane store of memories that need one, unless ``config.store`` says.

        Raises:
            TypeError: ``config`` is neither a mapping nor a path, or an argument has a wrong
                type or name.
            ValueError: An unknown type, filter or store type; an unset environment variable;
                invalid YAML; a bad argument value.
            OSError: The file cannot be read.
        """
        from memlane.shared.memory_config import (
            build_memory,
        )  # the configuration names every memory

        return build_memory(config, store=store)

    async def add(self, message: Message) -> None:
        """Deprecated: ``await memory.async_add_message(message)``."""
        warn_renamed(f"{type(self).__name__}.add", "add_message or async_add_message")
        await self.async_add_message(message)

    async def get_history(
        self,
        filter: HistoryFilter | None = None,  # the name users port code with
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Deprecated: ``await memory.async_get_message_history(...)``."""
        warn_renamed(
            f"{type(self).__name__}.get_history",
            "get_message_history or async_get_message_history",
        )
        return await self.async_get_message_history(filter, max_tokens=max_tokens, limit=limit)


class ViewMemory(BaseMemory):
    """A memory over one location of a message store, with role views and budgets."""

    _default_filter: HistoryFilter = WholeFeedFilter()

    def __init__(
        self,
        message_store: BaseMessageStore,
        location: str,
        agent_key: str | None,
        *,
        subordinates: Sequence[str] = (),
        filter: HistoryFilter | None = None,  # the name users port code with
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        if not isinstance(message_store, BaseMessageStore):
            raise TypeError(
                f"message_store must be a BaseMessageStore, not {type_name(message_store)}"
            )
        self.message_store = message_store
        self.location = check_identifier(location, "location")
        self.agent_key = None if agent_key is None else check_identifier(agent_key, "agent_key")
        self.subordinates = tuple(check_agent_keys(subordinates))
        self.filter = _check_filter(filter)
        if token_estimator is not None and not isinstance(token_estimator, TokenEstimator):
            raise TypeError(
                f"token_estimator must be a TokenEstimator, not {type_name(token_estimator)}"
            )
        self.token_estimator = token_estimator or _default_estimator()
        # The messages a StoreMessageStore gives a view are the ones it keeps for later reads.
        self._kept = isinstance(message_store, StoreMessageStore)
        # memlane's own stores give each feed exactly its messages; another store's feeds are
        # cut to theirs (:func:`_in_feed`).
        self._exact = isinstance(message_store, StoreMessageStore | InMemoryMessageStore)
        # A StoreMessageStore's reads are plans of store operations, run here on its store;
        # every other message store is reached through Call, which needs none.
        self._runs_on = (
            message_store.store if isinstance(message_store, StoreMessageStore) else None
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(location={self.location!r}, agent_key={self.agent_key!r})"

    # ------------------------------------------------------------------ writing

    def _append(self, stored: Message) -> Plan[None]:
        store, location = self.message_store, self.location
        yield Call(
            lambda: store.append(location, stored),
            lambda: store.async_append(location, stored),
        )

    def add_message(self, message: Message) -> None:
        """Records ``message`` in the feed it belongs to: the conversation for a
        ``user_message`` or ``assistant_message``, the broadcasts if ``is_global``, else the
        trace of its ``agent_key`` (this memory's agent when it names none). A message without
        a timestamp gets the current time.

        Raises:
            TypeError: ``message`` is not a ``dict``.
            ValueError: It lacks ``type``, cannot be stored as JSON, or has a bad
                ``agent_key``, ``is_global`` or ``timestamp``; nothing is written.
        """
        run_sync(self._append(check_message(message, agent_key=self.agent_key)), None)

    async def async_add_message(self, message: Message) -> None:
        """Async :meth:`add_message`."""
        await run_async(self._append(check_message(message, agent_key=self.agent_key)), None)

    def _global(self, message: Message) -> Message:
        stored = check_message(message, agent_key=self.agent_key)
        stored["is_global"] = True
        return stored

    def add_global_message(self, message: Message) -> None:
        """Broadcasts ``message`` to every agent of the location (sets ``is_global``).

        Raises:
            TypeError, ValueError: As :meth:`add_message`; nothing is written.
        """
        run_sync(self._append(self._global(message)), None)

    async def async_add_global_message(self, message: Message) -> None:
        """Async :meth:`add_global_message`."""
        await run_async(self._append(self._global(message)), None)

    async def add_global(self, message: Message) -> None:
        """Deprecated: ``await memory.async_add_global_message(message)``."""
        warn_renamed(
            f"{type(self).__name__}.add_global",
            "add_global_message or async_add_global_message",
        )
        await self.async_add_global_message(message)

    # ------------------------------------------------------------------ reading

    def _read(self, feed: Feed, spec: ViewSpec, want: int | None) -> Plan[list[Message]]:
        store, location = self.message_store, self.location
        read: Call
        if feed == "conversation":
            read = Call(
                lambda: store.get_conversation_messages(location, want),
                lambda: store.async_get_conversation_messages(location, want),
            )
        elif feed == "global":
            read = Call(
                lambda: store.get_global_messages(location, want),
                lambda: store.async_get_global_messages(location, want),
            )
        elif spec.agents is None:
            # Not a BaseMessageStore method: a custom store may lack either half.
            every = getattr(store, "get_all_agent_messages", None)
            async_every = getattr(store, "async_get_all_agent_messages", None)
            read = Call(
                lambda: _every_trace(store, every)(location, want),
                lambda: _every_trace(store, async_every)(location, want),
            )
        elif len(spec.agents) == 1:
            agent = spec.agents[0]
            read = Call(
                lambda: store.get_agent_messages(location, agent, want),
                lambda: store.async_get_agent_messages(location, agent, want),
            )
        else:
            team = list(spec.agents)
            read = Call(
                lambda: store.get_team_messages(location, team, want),
                lambda: store.async_get_team_messages(location, team, want),
            )
        found = yield read
        if not isinstance(found, list) or not all(isinstance(m, dict) for m in found):
            raise TypeError(f"{type(store).__name__} must return a list of dict messages")
        return newest(found, want)  # a custom store may give more than asked

    def _sources(self, spec: ViewSpec, chosen: HistoryFilter) -> Plan[list[_Source]]:
        """The feeds the view reads, in view order, each with how to read its newest ``n``."""
        store = self.message_store
        names: list[Feed] = []
        if spec.conversation:
            names.append("conversation")
        if spec.agents is None or spec.agents:
            names.append("agents")
        if spec.global_:
            names.append("global")
        if not isinstance(store, StoreMessageStore):
            return [_Source(feed, partial(self._read, feed, spec)) for feed in names]
        # Each feed is read as the store keeps it, uncopied (the view copies what it shows).
        # A team's traces are read one by one when the filter keeps each message on its own:
        # the trace a filter leaves out is then read only as far back as the view needs, and
        # the order is the team's (by timestamp, then by agent, then by trace), which is the
        # view's own.
        location, read = self.location, store._view
        sources: list[_Source] = []
        for feed in names:
            if feed != "agents":
                kind = "conversation" if feed == "conversation" else "global"
                sources.append(_Source(feed, partial(read, location, kind, None)))
                continue
            # A stored trace may name no agent (None): it is read as a feed of its own.
            agents: tuple[str | None, ...] | None = spec.agents
            if agents is None:
                agents = tuple((yield from store._list_agents(location)))
            if len(agents) == 1 or (agents and selects_each_message(chosen)):
                sources += [_Source(feed, partial(read, location, "agent", a)) for a in agents]
            else:
                sources.append(_Source(feed, partial(self._read, feed, spec)))
        return sources

    def get_message_history(
        self,
        filter: HistoryFilter | None = None,  # the name users port code with
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """The messages this agent is shown, oldest first.

        Without a filter (given here or set as :attr:`filter`) the memory's own view; a filter
        decides the feeds and messages instead. ``limit`` keeps the newest ``limit``;
        ``max_tokens`` keeps the newest messages whose text fits ``max_tokens`` exact tokens
        of :attr:`token_estimator` (counted as :func:`~memlane.shared.to_model_messages` sends
        them), never an ``action`` without its ``observation``. Either reads only as many of
        each feed's newest messages as the answer needs, not the whole location.

        Args:
            filter: The role view to build (:class:`WorkerHistoryFilter`, ...).
            max_tokens: The token budget of the view (> 0), or ``None``.
            limit: How many messages at most (> 0), or ``None``.

        Raises:
            TypeError: ``filter`` is not a :class:`HistoryFilter`; ``max_tokens`` or
                ``limit`` not an ``int``.
            ValueError: ``max_tokens`` or ``limit`` is not above 0.
        """
        return run_sync(self._history(filter, max_tokens, limit), self._runs_on)

    async def async_get_message_history(
        self,
        filter: HistoryFilter | None = None,  # the name users port code with
        *,
        max_tokens: int | None = None,
        limit: int | None = None,
    ) -> list[Message]:
        """Async :meth:`get_message_history`: the feeds are read concurrently."""
        return await run_async(self._history(filter, max_tokens, limit), self._runs_on)

    def _history(
        self, filter: HistoryFilter | None, max_tokens: int | None, limit: int | None
    ) -> Plan[list[Message]]:
        chosen = _check_filter(filter) or self.filter or self._default_filter
        limit = check_limit(limit)
        if max_tokens is not None:
            max_tokens = check_positive_int(max_tokens, "max_tokens")
        role = Role(self.agent_key, self.subordinates)
        spec = chosen.spec(role)
        sources = yield from self._sources(spec, chosen)
        feeds = [source.feed for source in sources]
        first = limit if max_tokens is None else max(limit or 0, _FIRST_READ)
        wants = [
            None if first is None else max(first, chosen.reads_at_least(feed)) for feed in feeds
        ]

        def count(message: Message) -> int:
            return message_tokens(message, self.token_estimator)

        each = selects_each_message(chosen)
        own = _as_read if self._exact else _in_feed
        selected: list[tuple[list[Message], list[Message], bool]] = [([], [], False)] * len(feeds)
        while True:
            reads: list[list[Message]] = yield Gather(
                [source.read(want) for source, want in zip(sources, wants, strict=True)]
            )
            kept: list[list[Message]] = []
            more: list[int] = []  # feeds that may hold older messages the view could show
            for rank, (feed, read) in enumerate(zip(feeds, reads, strict=True)):
                before, shown, closed = selected[rank]
                older = len(read) - len(before)
                if (
                    each
                    and before
                    and older >= 0
                    and read[older] is before[0]
                    and (read[-1] is before[-1])
                ):
                    # The wider read ends with the last one (the same kept objects): only its
                    # older part is new to a filter that keeps each message by itself.
                    new, new_closed = chosen.select(feed, own(feed, read[:older]), role)
                    shown, closed = new + shown, closed or new_closed
                else:
                    shown, closed = chosen.select(feed, own(feed, read), role)
                selected[rank] = (read, shown, closed)
                kept.append(shown)
                want = wants[rank]
                if want is not None and len(read) >= want and not closed:
                    more.append(rank)
            ordered = Ordered(kept, extra=[reads[rank][0] for rank in more])
            messages = ordered.messages
            start = 0
            stop: int | None = None  # older messages placed before this cannot change the view
            if limit is not None and len(messages) > limit:
                start = stop = len(messages) - limit
            if max_tokens is not None:
                fits, refused = budget_start(messages[start:], max_tokens, count)
                if refused is not None:
                    stop = start + refused
                start += fits
            if not more or (
                stop is not None
                and all(ordered.place(reads[rank][0], rank, -1) <= stop for rank in more)
            ):
                shown = messages[start:]
                return [json_copy(m) for m in shown] if self._kept else shown
            for rank in more:
                # A feed already read back past ``stop`` is left as it is: reading more of it
                # would add only messages no budget reaches (the check above says when).
                if stop is None or ordered.place(reads[rank][0], rank, -1) > stop:
                    wants[rank] = 4 * (wants[rank] or 0)


def _every_trace(store: BaseMessageStore, method: Callable[..., Any] | None) -> Callable[..., Any]:
    if method is None:
        raise TypeError(
            f"{type(store).__name__} cannot list every agent's trace; "
            "give the view the agents it shows"
        )
    return method


def _check_filter(value: object) -> HistoryFilter | None:
    if value is None or isinstance(value, HistoryFilter):
        return value
    raise TypeError(f"filter must be a HistoryFilter, not {type_name(value)}")
