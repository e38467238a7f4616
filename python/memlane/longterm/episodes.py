"""Episodes: what happened in a past agent run, kept so later runs can learn from it.

An episode records what triggered a run, its input, the conversation's messages, the tool
calls made (each with its result), the outcome, the timing and, optionally, human feedback
(the data and how it is built: :mod:`memlane.longterm.episode_model`).
:meth:`Episodes.record_episode` stores one from its parts and :meth:`Episodes.episode_from_run`
builds and stores one from a pydantic-ai run result.

Every episode lives in one namespace of the store, keyed by its id; :meth:`Episodes.episodes`
reads that namespace and filters it, so listing costs one read of every stored episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from memlane._runner import Load, Plan, Save, Step, Then, async_method, sync_method
from memlane._validate import check_identifier, check_positive_int, type_name
from memlane.longterm.episode_model import (
    EPISODES_NAMESPACE,
    Episode,
    EpisodeOutcome,
    build_episode,
    check_actions,
    check_messages,
    episode_entry,
    first_prompt,
    loaded_episodes,
    run_actions,
    run_timing,
)
from memlane.longterm.fuzzy import matches_words
from memlane.longterm.storage import StoragePart, async_writing_method, writing_method

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.run import AgentRunResult

    from memlane.types import MemoryEntry

# pydantic-ai is imported where messages are read or written, not with long-term memory.

__all__ = [
    "EPISODES_NAMESPACE",
    "Episode",
    "EpisodeOutcome",
    "Episodes",
    "build_episode",
    "check_actions",
    "check_messages",
    "load_episodes_plan",
    "run_actions",
    "search_episodes_plan",
]


class Episodes(StoragePart):
    """The episodes of one long-term memory; every operation has an ``async_`` twin.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def _record_episode(
        self,
        *,
        agent_id: str,
        trigger: str,
        input: Any,  # the public name
        messages: Sequence[Any] = (),
        actions: Sequence[dict[str, Any]] = (),
        success: bool,
        output: Any = None,
        error: str | None = None,
        user_id: str | None = None,
        conversation_id: str | None = None,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        rating: float | None = None,
        comment: str | None = None,
    ) -> Step[Episode]:
        """Stores an episode built from its parts and returns it.

        Args:
            agent_id: The agent that ran.
            trigger: What started the run.
            input: What the run was given (plain JSON).
            messages: pydantic-ai messages, or plain JSON objects, in order.
            actions: Tool calls, each a dict with a ``str`` ``"tool"``, optional ``"args"``
                (a dict) and ``"result"``; plain JSON.
            success: Whether the run reached its goal.
            output: The final output (plain JSON).
            error: What went wrong.
            user_id: The user it ran for.
            conversation_id: The conversation it belonged to.
            started_at: When it started; ``ended_at`` by default.
            ended_at: When it ended; now by default.
            rating: Human rating, a finite number.
            comment: Human comment.

        Returns:
            The stored episode, with its ``id`` and ``duration``.

        Raises:
            TypeError: An argument of the wrong type (the message names it); a value that is
                not plain JSON (:class:`~memlane.errors.UnstorableValueError`).
            ValueError: An empty id or trigger, ``started_at`` after ``ended_at``, a
                non-finite rating. Nothing is written.
        """
        episode = build_episode(
            agent_id=agent_id,
            trigger=trigger,
            input=input,
            messages=messages,
            actions=actions,
            success=success,
            output=output,
            error=error,
            user_id=user_id,
            conversation_id=conversation_id,
            started_at=started_at,
            ended_at=ended_at,
            rating=rating,
            comment=comment,
        )
        return _save(episode)

    record_episode = writing_method(_record_episode)
    async_record_episode = async_writing_method(_record_episode)

    def _episode_from_run(
        self,
        result: AgentRunResult[Any],
        *,
        agent_id: str,
        trigger: str = "agent_run",
        input: Any = None,  # the public name
        user_id: str | None = None,
        conversation_id: str | None = None,
        rating: float | None = None,
        comment: str | None = None,
    ) -> Step[Episode]:
        """Builds an episode from a pydantic-ai run result, stores it and returns it.

        The episode holds the run's own messages (``result.new_messages()``, not the
        history it was given), every tool call with the return that answered it (matched by
        ``tool_call_id``; a call never answered has result ``None``), the span of the
        messages' timestamps as its timing, and a successful outcome whose output is the run's
        output as JSON. The output tool pydantic-ai uses for structured output is not an
        action. A run that raised has no result: record it with :meth:`record_episode` and
        ``success=False``.

        Args:
            result: What ``Agent.run``/``run_sync`` returned.
            agent_id: The agent that ran.
            trigger: What started the run.
            input: What the run was given; the run's first user prompt by default.
            user_id: The user it ran for.
            conversation_id: The conversation it belonged to.
            rating: Human rating, a finite number.
            comment: Human comment.

        Returns:
            The stored episode.

        Raises:
            TypeError: ``result`` has no messages, or another argument of the wrong type.
            ValueError: As for :meth:`record_episode`. Nothing is written.
        """
        new_messages = getattr(result, "new_messages", None)
        if not callable(new_messages):
            raise TypeError(f"result must be a pydantic-ai AgentRunResult, not {type_name(result)}")
        run_messages: list[ModelMessage] = list(new_messages())
        # pydantic-ai marks the structured-output tool only on the result (a private field,
        # read defensively): its call carries the output, which the episode already holds.
        output_tool = getattr(result, "_output_tool_name", None)
        started_at, ended_at = run_timing(run_messages)
        episode = build_episode(
            agent_id=agent_id,
            trigger=trigger,
            input=first_prompt(run_messages) if input is None else input,
            messages=run_messages,
            actions=run_actions(run_messages, skip_tool=output_tool),
            success=True,
            output=to_jsonable_python(result.output, fallback=str),
            error=None,
            user_id=user_id,
            conversation_id=conversation_id,
            started_at=started_at,
            ended_at=ended_at,
            rating=rating,
            comment=comment,
        )
        return _save(episode)

    episode_from_run = writing_method(_episode_from_run)
    async_episode_from_run = async_writing_method(_episode_from_run)

    def _episodes(
        self,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        success: bool | None = None,
        limit: int | None = None,
    ) -> Step[list[Episode]]:
        """Stored episodes, most recent first (by ``ended_at``), filtered by what is given.

        Args:
            agent_id: Only this agent's.
            user_id: Only this user's.
            success: Only successes (``True``) or failures (``False``).
            limit: At most this many.

        Raises:
            TypeError: An argument of the wrong type.
            ValueError: An empty id, or ``limit`` below 1.
        """
        if agent_id is not None:
            check_identifier(agent_id, "agent_id")
        if user_id is not None:
            check_identifier(user_id, "user_id")
        if success is not None and not isinstance(success, bool):
            raise TypeError(f"success must be bool or None, not {type_name(success)}")
        if limit is not None:
            check_positive_int(limit, "limit")

        def pick(entries: list[MemoryEntry]) -> list[Episode]:
            found = [
                episode
                for episode in loaded_episodes(entries)
                if (agent_id is None or episode.agent_id == agent_id)
                and (user_id is None or episode.user_id == user_id)
                and (success is None or episode.outcome.success is success)
            ]
            return found if limit is None else found[:limit]

        return Then(Load(EPISODES_NAMESPACE), pick)

    episodes = sync_method(_episodes)
    async_episodes = async_method(_episodes)


def load_episodes_plan() -> Plan[list[Episode]]:
    """Every stored episode, most recent first (for other parts: a user's context)."""
    entries: list[MemoryEntry] = yield Load(EPISODES_NAMESPACE)
    return loaded_episodes(entries)


def search_episodes_plan(words: list[str], limit: int) -> Plan[list[Episode]]:
    """Episodes whose search text (trigger, input, output, error, actions) matches ``words``
    by the fuzzy rule.

    Recall's search for ``memory_type="episodes"``: most recent first, at most ``limit``.
    """
    entries: list[MemoryEntry] = yield Load(EPISODES_NAMESPACE)
    found = [e for e in loaded_episodes(entries) if matches_words(words, e.search_text())]
    return found[:limit]


def _save(episode: Episode) -> Then[None, Episode]:
    entry, stored = episode_entry(episode)
    return Then(Save(EPISODES_NAMESPACE, entry), lambda _: stored)
