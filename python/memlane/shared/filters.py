"""Role views: which feeds a role's history shows, and which of their messages.

A view combines up to three feeds of a namespace: the conversation, agent traces (one
agent's, a team's, or every agent's) and the global broadcasts. A :class:`HistoryFilter`
names the feeds for a role (:meth:`~HistoryFilter.spec`) and keeps the messages of each that
the role is shown (:meth:`~HistoryFilter.select`):

* :class:`OrchestratorHistoryFilter`: the conversation only, its newest
  ``max_conversation_turns`` turns.
* :class:`ManagerHistoryFilter`: the manager's own traces, its subordinates' results
  (``final``) and the phases' syntheses, and the broadcasts; not the conversation, and not
  the subordinates' intermediate steps.
* :class:`WorkerHistoryFilter`: the conversation, the worker's own traces of its current
  task (from its newest ``task`` on) and the broadcasts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from memlane._validate import check_positive_int
from memlane.shared.constants import FINAL, SYNTHESIS, TASK, USER_MESSAGE

__all__ = [
    "Feed",
    "HistoryFilter",
    "ManagerHistoryFilter",
    "OrchestratorHistoryFilter",
    "Role",
    "ViewSpec",
    "WorkerHistoryFilter",
]

Message = dict[str, Any]
_RESULTS = frozenset((FINAL, SYNTHESIS))
Feed = Literal["conversation", "agents", "global"]


@dataclass(frozen=True, slots=True)
class Role:
    """Whose view is built: the memory's agent and the agents it manages."""

    agent_key: str | None
    subordinates: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """The feeds a view reads.

    Attributes:
        conversation: Whether the conversation is shown.
        agents: Whose traces are shown; ``None`` for every agent of the namespace.
        global_: Whether the broadcasts are shown.
    """

    conversation: bool
    agents: tuple[str, ...] | None
    global_: bool


class HistoryFilter(ABC):
    """Decides what a role's history shows; pass one to ``get_history(filter=...)``."""

    @abstractmethod
    def spec(self, role: Role) -> ViewSpec:
        """The feeds the view of ``role`` reads."""

    def reads_at_least(self, feed: Feed) -> int:
        """How many of a feed's newest messages a limited or budgeted view should read at
        once: a filter whose window spans a known number of messages says so, sparing the
        view a second read. 0 leaves it to the view."""
        del feed
        return 0

    def select(self, feed: Feed, messages: list[Message], role: Role) -> tuple[list[Message], bool]:
        """Of the newest messages of one feed (oldest first), those the view shows.

        The messages are read only: they may be the ones a message store keeps for its next
        reads (the view copies those it returns).

        Args:
            feed: Which feed ``messages`` come from.
            messages: Its newest messages, possibly not all of them.
            role: Whose view is built.

        Returns:
            The messages to show, and whether the filter's window closed within them (older
            messages of the feed would not be shown either, so none need reading).
        """
        del feed, role
        return messages, False


def selects_each_message(chosen: HistoryFilter) -> bool:
    """Whether ``chosen`` keeps or drops each message of the agents feed by itself, never by
    the messages around it: then the agents' traces may be read and selected one by one.
    Known of memlane's own ``select`` methods only (an override may look at neighbours)."""
    return type(chosen).select in _EACH_MESSAGE


class WholeFeedFilter(HistoryFilter):
    """The namespace's whole feed: the conversation, every agent's traces, the broadcasts."""

    def spec(self, role: Role) -> ViewSpec:
        """Every feed."""
        del role
        return ViewSpec(conversation=True, agents=None, global_=True)


class OwnTracesFilter(HistoryFilter):
    """What a :class:`~memlane.shared.MessageStoreMemory` shows: the conversation, the agent's
    own traces and the broadcasts."""

    def spec(self, role: Role) -> ViewSpec:
        """The conversation, ``role.agent_key`` 's trace, the broadcasts."""
        own = () if role.agent_key is None else (role.agent_key,)
        return ViewSpec(conversation=True, agents=own, global_=True)


class TeamFilter(HistoryFilter):
    """What a :class:`~memlane.shared.HierarchicalMessageStoreMemory` shows: the manager's own
    traces, every subordinate's whole traces and the broadcasts."""

    def spec(self, role: Role) -> ViewSpec:
        """The traces of ``role.agent_key`` and its subordinates, the broadcasts."""
        return ViewSpec(conversation=False, agents=_team(role), global_=True)


def _team(role: Role) -> tuple[str, ...]:
    own = () if role.agent_key is None else (role.agent_key,)
    return tuple(dict.fromkeys(own + role.subordinates))


class OrchestratorHistoryFilter(HistoryFilter):
    """The conversation only: its newest ``max_conversation_turns`` turns.

    No agent's trace and no broadcast: an orchestrator's role view of those (conversation, own
    traces, broadcasts) is :class:`~memlane.shared.MessageStoreMemory`'s own view. A turn starts at a ``user_message`` and holds the answers that follow it.

    Args:
        max_conversation_turns: How many of the newest turns are shown (> 0).

    Raises:
        TypeError: ``max_conversation_turns`` is not an ``int``.
        ValueError: It is not above 0.
    """

    def __init__(self, max_conversation_turns: int = 10) -> None:
        self.max_conversation_turns = check_positive_int(
            max_conversation_turns, "max_conversation_turns"
        )

    def __repr__(self) -> str:
        return f"OrchestratorHistoryFilter(max_conversation_turns={self.max_conversation_turns})"

    def spec(self, role: Role) -> ViewSpec:
        """The conversation alone."""
        del role
        return ViewSpec(conversation=True, agents=(), global_=False)

    def reads_at_least(self, feed: Feed) -> int:
        """A turn is a question and its answer: the window is about two messages a turn."""
        return 2 * self.max_conversation_turns + 1 if feed == "conversation" else 0

    def select(self, feed: Feed, messages: list[Message], role: Role) -> tuple[list[Message], bool]:
        """The newest ``max_conversation_turns`` turns of the conversation."""
        if feed != "conversation":
            return messages, False
        turns = 0
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("type") == USER_MESSAGE:
                turns += 1
                if turns == self.max_conversation_turns:
                    return messages[i:], True
        return messages, False


class ManagerHistoryFilter(HistoryFilter):
    """The manager's own traces, its subordinates' results and syntheses, the broadcasts.

    Of a subordinate's trace only ``final`` results and ``synthesis`` messages are shown: a
    manager coordinates on outcomes, not on its workers' every tool call.
    """

    def __repr__(self) -> str:
        return "ManagerHistoryFilter()"

    def spec(self, role: Role) -> ViewSpec:
        """The traces of ``role.agent_key`` and its subordinates, the broadcasts."""
        return ViewSpec(conversation=False, agents=_team(role), global_=True)

    def reads_at_least(self, feed: Feed) -> int:
        """Most of a subordinate's trace is left out (only its results are shown): reading
        more of it at once spares the view a second round on a long job."""
        return 64 if feed == "agents" else 0

    def select(self, feed: Feed, messages: list[Message], role: Role) -> tuple[list[Message], bool]:
        """Own messages whole; subordinates' ``final`` and ``synthesis`` messages."""
        if feed != "agents":
            return messages, False
        # Locals: a long job's view runs this over every trace message it reads.
        own, results = role.agent_key, _RESULTS
        kept = [m for m in messages if m.get("type") in results or m.get("agent_key") == own]
        return kept, False


class WorkerHistoryFilter(HistoryFilter):
    """The conversation, the worker's own traces of its current task, the broadcasts.

    The current task starts at the worker's newest ``task`` message; a worker that was never
    handed one is shown all its traces.
    """

    def __repr__(self) -> str:
        return "WorkerHistoryFilter()"

    def spec(self, role: Role) -> ViewSpec:
        """The conversation, ``role.agent_key`` 's trace, the broadcasts."""
        own = () if role.agent_key is None else (role.agent_key,)
        return ViewSpec(conversation=True, agents=own, global_=True)

    def select(self, feed: Feed, messages: list[Message], role: Role) -> tuple[list[Message], bool]:
        """Own traces from the newest ``task`` on; other feeds whole."""
        if feed != "agents":
            return messages, False
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("type") == TASK:
                return messages[i:], True
        return messages, False


# ``select`` methods that treat the agents feed message by message (the base one keeps all).
_EACH_MESSAGE = (
    HistoryFilter.select,
    OrchestratorHistoryFilter.select,
    ManagerHistoryFilter.select,
)
