"""The memories agents hold, each a view of one location of a message store.

What one agent adds, another agent's view of the same location shows, if its role is shown
it. They differ in the store and in the view ``get_message_history()`` gives without a filter:

* :class:`LocalAgentMemory` (one agent, this process, nothing shared),
  :class:`ProcessSharedMemory` (agents of this process sharing namespaces),
  :class:`SharedMemory` (on a memlane store, across processes and restarts): the location's
  whole feed (every agent's messages, the conversation, the broadcasts).
* :class:`MessageStoreMemory`: the worker view (conversation, own traces, broadcasts).
* :class:`HierarchicalMessageStoreMemory`: the manager view (own traces, every
  subordinate's, broadcasts).

``InMemoryMemory`` and ``SharedInMemoryMemory`` are the deprecated names of the first two
(kept for one release; they warn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from memlane._deprecation import moved_names
from memlane._validate import check_identifier, type_name
from memlane.shared.filters import HistoryFilter, OwnTracesFilter, TeamFilter
from memlane.shared.message_store import BaseMessageStore, InMemoryMessageStore
from memlane.shared.persistent import StoreMessageStore
from memlane.shared.state_store import SharedStateStore
from memlane.shared.view_memory import BaseMemory, ViewMemory
from memlane.stores.protocol import MemoryStore
from memlane.tokens import TokenEstimator

__all__ = [
    "BaseMemory",
    "HierarchicalMessageStoreMemory",
    "LocalAgentMemory",
    "MessageStoreMemory",
    "ProcessSharedMemory",
    "SharedMemory",
]


class LocalAgentMemory(ViewMemory):
    """One agent's own history in this process's memory, for development.

    Nothing is shared: each instance has a store of its own. ``get_message_history()`` lists what was
    added, in order.

    Args:
        filter: A default role view, or ``None`` for everything added.
        token_estimator: Counts tokens for ``max_tokens``; memlane's exact estimator if ``None``.
    """

    def __init__(
        self,
        *,
        filter: HistoryFilter | None = None,  # the name users port code with
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        super().__init__(
            InMemoryMessageStore(), "default", None, filter=filter, token_estimator=token_estimator
        )


class ProcessSharedMemory(ViewMemory):
    """Agents of one process that name the same namespace share its feeds.

    What ``worker_1`` adds, ``worker_2``'s ``get_message_history()`` shows: without a filter it is
    the namespace's whole feed (every agent's messages, the conversation, the broadcasts).
    Namespaces never see each other.

    Args:
        namespace: The job the agents share.
        agent_key: This agent.
        subordinates: The agents this one manages (what :class:`ManagerHistoryFilter` shows).
        filter: A default role view, or ``None`` for the whole feed.
        state: Where the feeds live; the process-wide :meth:`SharedStateStore.default` if
            ``None``.
        token_estimator: Counts tokens for ``max_tokens``; memlane's exact estimator if ``None``.

    Raises:
        TypeError, ValueError: A bad namespace, agent key, subordinate, filter or state.
    """

    def __init__(
        self,
        namespace: str,
        agent_key: str,
        *,
        subordinates: Sequence[str] = (),
        filter: HistoryFilter | None = None,  # the name users port code with
        state: SharedStateStore | None = None,
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        if state is not None and not isinstance(state, SharedStateStore):
            raise TypeError(f"state must be a SharedStateStore, not {type_name(state)}")
        super().__init__(
            state or SharedStateStore.default(),
            check_identifier(namespace, "namespace"),
            check_identifier(agent_key, "agent_key"),
            subordinates=subordinates,
            filter=filter,
            token_estimator=token_estimator,
        )

    @property
    def namespace(self) -> str:
        """The namespace (the store location) of this memory."""
        return self.location


class SharedMemory(ProcessSharedMemory):
    """:class:`ProcessSharedMemory` on a memlane store: the same feeds in SQLite, files,
    PostgreSQL or MongoDB, shared by every process that opens the store, kept across restarts.

    Args:
        store: Any memlane store.
        namespace: The job the agents share.
        agent_key: This agent.
        subordinates: The agents this one manages (what :class:`ManagerHistoryFilter` shows).
        filter: A default role view, or ``None`` for the whole feed.
        token_estimator: Counts tokens for ``max_tokens``; memlane's exact estimator if ``None``.

    Raises:
        TypeError, ValueError: A bad store, namespace, agent key, subordinate or filter.
    """

    def __init__(
        self,
        store: MemoryStore | StoreMessageStore,
        namespace: str,
        agent_key: str,
        *,
        subordinates: Sequence[str] = (),
        filter: HistoryFilter | None = None,  # the name users port code with
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        messages = store if isinstance(store, StoreMessageStore) else StoreMessageStore(store)
        ViewMemory.__init__(
            self,
            messages,
            check_identifier(namespace, "namespace"),
            check_identifier(agent_key, "agent_key"),
            subordinates=subordinates,
            filter=filter,
            token_estimator=token_estimator,
        )
        self.store = messages.store


class MessageStoreMemory(ViewMemory):
    """A worker's memory through a message store.

    ``get_message_history()`` is the worker view: the conversation, this agent's own messages and the
    broadcasts, not other agents' traces.

    Args:
        message_store: Any :class:`BaseMessageStore` (five methods are enough).
        location: The job or namespace.
        agent_key: This agent.
        filter: A default role view, or ``None`` for the worker view.
        token_estimator: Counts tokens for ``max_tokens``; memlane's exact estimator if ``None``.

    Raises:
        TypeError, ValueError: A bad message store, location, agent key or filter.
    """

    _default_filter: HistoryFilter = OwnTracesFilter()

    def __init__(
        self,
        message_store: BaseMessageStore,
        location: str,
        agent_key: str,
        *,
        filter: HistoryFilter | None = None,  # the name users port code with
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        super().__init__(
            message_store,
            location,
            check_identifier(agent_key, "agent_key"),
            filter=filter,
            token_estimator=token_estimator,
        )


class HierarchicalMessageStoreMemory(ViewMemory):
    """A manager's memory through a message store.

    ``get_message_history()`` is the manager view: its own messages, all its subordinates' messages
    and the broadcasts.

    Args:
        message_store: Any :class:`BaseMessageStore` (five methods are enough).
        location: The job or namespace.
        agent_key: This manager.
        subordinates: The agents it manages.
        filter: A default role view, or ``None`` for the manager view.
        token_estimator: Counts tokens for ``max_tokens``; memlane's exact estimator if ``None``.

    Raises:
        TypeError, ValueError: A bad message store, location, agent key, subordinate or filter.
    """

    _default_filter: HistoryFilter = TeamFilter()

    def __init__(
        self,
        message_store: BaseMessageStore,
        location: str,
        agent_key: str,
        subordinates: Sequence[str] | None = None,
        *,
        filter: HistoryFilter | None = None,  # the name users port code with
        token_estimator: TokenEstimator | None = None,
    ) -> None:
        super().__init__(
            message_store,
            location,
            check_identifier(agent_key, "agent_key"),
            subordinates=subordinates or (),
            filter=filter,
            token_estimator=token_estimator,
        )


if TYPE_CHECKING:  # the deprecated names, for type checkers; at run time __getattr__ warns
    InMemoryMemory = LocalAgentMemory
    SharedInMemoryMemory = ProcessSharedMemory
else:
    __getattr__ = moved_names(
        __name__,
        {
            "InMemoryMemory": ("LocalAgentMemory", LocalAgentMemory),
            "SharedInMemoryMemory": ("ProcessSharedMemory", ProcessSharedMemory),
        },
    )
