"""Long-term memory under a :class:`~memlane.agents.MemoryAgent`: context, tools, episodes.

:class:`LongTermBinding` holds what one agent was given (the memory, the user it serves, its
own id) and does the three things the agent asks of it:

* the context the instructions carry on every run: the facts visible from the user (and the
  agent, when it has a name) — the user's own first, then the agent's, then global ones —
  headed by the user and their latest episodes when the user is a known
  :class:`~memlane.longterm.users.MemoryUser`;
* the ``recall``/``remember`` toolset of :func:`~memlane.agents.memory_tools`, with the scope
  ids bound here: with a user, ``remember`` writes to the ``user`` scope of that user and
  ``recall`` sees the user's facts; without one, ``remember`` writes global facts;
* episodes: a finished run through ``episode_from_run``, a run that raised through
  ``record_episode`` with ``success=False``, the messages exchanged before it failed and the
  exception as its error.

The context is read again for every run (pydantic-ai evaluates instruction functions before
each model request), so a fact remembered in one run is in the next run's instructions.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.toolsets import FunctionToolset
from pydantic_core import to_jsonable_python

from memlane._validate import check_identifier
from memlane.agents.tools import memory_tools
from memlane.longterm import LongTermMemory
from memlane.longterm.episodes import Episode, run_actions
from memlane.longterm.model import Fact
from memlane.longterm.users import UserContext, UserNotFoundError

__all__ = ["CONTEXT_FACTS", "LongTermBinding"]

CONTEXT_FACTS = 50
"""At most this many facts (highest confidence first) join an agent's instructions."""

_HEADER = "Long-term memory (read more with the recall tool, add with remember):"


def context_text(facts: list[Fact], user: UserContext | None) -> str | None:
    """The instructions' long-term section; ``None`` when memory knows nothing to say."""
    if user is not None:
        body = user.model_copy(update={"facts": facts}).to_context_string()
    elif facts:
        body = "\n".join(["Known facts:", *(f"- {fact}" for fact in facts)])
    else:
        return None
    return f"{_HEADER}\n{body}"


def _failure_input(user_prompt: Any) -> Any:
    # A prompt may hold images or other content objects: the episode keeps their JSON form.
    return to_jsonable_python(user_prompt, fallback=str)


class LongTermBinding:
    """One agent's view of long-term memory.

    Args:
        long_term: The memory.
        user_id: The user the agent serves, or ``None``.
        agent_id: The agent's id for its scope and its episodes, or ``None`` (episodes then
            name the agent ``"agent"``).
        record_episodes: Whether runs become episodes.

    Raises:
        TypeError, ValueError: A bad ``user_id`` or ``agent_id``.
    """

    def __init__(
        self,
        long_term: LongTermMemory,
        *,
        user_id: str | None,
        agent_id: str | None,
        record_episodes: bool,
    ) -> None:
        if user_id is not None:
            check_identifier(user_id, "user_id")
        if agent_id is not None:
            check_identifier(agent_id, "agent_id")
        self.long_term = long_term
        self.user_id = user_id
        self.agent_id = agent_id
        self.record_episodes = record_episodes
        where: dict[str, Any] = (
            {"scope": "user", "scope_id": user_id} if user_id is not None else {}
        )
        self.toolset: FunctionToolset[Any] = memory_tools(
            long_term, user_id=user_id, agent_id=agent_id, **where
        )

    # ------------------------------------------------------------------ instructions

    def instructions(self) -> str | None:
        """The context, read with the sync methods (pydantic-ai runs this in a worker thread)."""
        user: UserContext | None = None
        if self.user_id is not None:
            with suppress(UserNotFoundError):  # an id of the caller's own, not a known user
                user = self.long_term.user_context(self.user_id)
        facts = self.long_term.recall(
            user_id=self._visible_user(user), agent_id=self.agent_id, limit=CONTEXT_FACTS
        )
        return context_text(facts, user)

    async def async_instructions(self) -> str | None:
        """:meth:`instructions` with the ``async_`` methods."""
        user: UserContext | None = None
        if self.user_id is not None:
            with suppress(UserNotFoundError):  # an id of the caller's own, not a known user
                user = await self.long_term.async_user_context(self.user_id)
        facts = await self.long_term.async_recall(
            user_id=self._visible_user(user), agent_id=self.agent_id, limit=CONTEXT_FACTS
        )
        return context_text(facts, user)

    def _visible_user(self, user: UserContext | None) -> str | None:
        # A merged user's facts moved to the user they were merged into, which the context
        # names: read those, not the retired id's empty scope.
        return user.user.id if user is not None else self.user_id

    # ------------------------------------------------------------------ episodes

    def _episode_ids(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id or "agent", "user_id": self.user_id}

    def record(self, result: Any, conversation_id: str) -> Episode | None:
        """Stores a finished run as an episode, when episodes are recorded."""
        if not self.record_episodes:
            return None
        return self.long_term.episode_from_run(
            result, conversation_id=conversation_id, **self._episode_ids()
        )

    async def async_record(self, result: Any, conversation_id: str) -> Episode | None:
        """:meth:`record` with the ``async_`` method."""
        if not self.record_episodes:
            return None
        return await self.long_term.async_episode_from_run(
            result, conversation_id=conversation_id, **self._episode_ids()
        )

    def _failure(
        self,
        error: BaseException,
        user_prompt: Any,
        messages: Sequence[ModelMessage],
        history_length: int,
        conversation_id: str,
    ) -> dict[str, Any]:
        # pydantic-ai captures the history it was sent ahead of the run's own messages.
        own = list(messages[history_length:])
        stamps = [message.timestamp for message in own if message.timestamp is not None]
        return {
            "trigger": "agent_run",
            "input": _failure_input(user_prompt),
            "messages": own,
            "actions": run_actions(own),
            "success": False,
            "error": f"{type(error).__name__}: {error}",
            "conversation_id": conversation_id,
            "started_at": min(stamps) if stamps else None,
            **self._episode_ids(),
        }

    def record_failure(
        self,
        error: BaseException,
        user_prompt: Any,
        messages: Sequence[ModelMessage],
        history_length: int,
        conversation_id: str,
    ) -> None:
        """Stores a run that raised ``error`` as a failed episode, when episodes are recorded.

        The run's error is what the caller sees: one that recording raises is attached to it
        as a note rather than replacing it.
        """
        if not self.record_episodes:
            return
        try:
            self.long_term.record_episode(
                **self._failure(error, user_prompt, messages, history_length, conversation_id)
            )
        except Exception as exc:  # noqa: BLE001  # the run's own error must reach the caller
            error.add_note(f"recording the failed run as an episode failed too: {exc!r}")

    async def async_record_failure(
        self,
        error: BaseException,
        user_prompt: Any,
        messages: Sequence[ModelMessage],
        history_length: int,
        conversation_id: str,
    ) -> None:
        """:meth:`record_failure` with the ``async_`` method."""
        if not self.record_episodes:
            return
        try:
            await self.long_term.async_record_episode(
                **self._failure(error, user_prompt, messages, history_length, conversation_id)
            )
        except Exception as exc:  # noqa: BLE001  # the run's own error must reach the caller
            error.add_note(f"recording the failed run as an episode failed too: {exc!r}")
