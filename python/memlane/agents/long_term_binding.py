"""Long-term memory under a :class:`~memlane.agents.MemoryAgent`: context, tools, episodes.

(Formerly ``memlane.agents.long_term``, which still re-exports it.)

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

Each pair of methods (``instructions``/``async_instructions``, ``record``/``async_record``,
``record_failure``/``async_record_failure``) runs one plan whose operations are the memory's
own sync or ``async_`` methods, on the sync or the async runner.

The context is read again for every run (pydantic-ai evaluates instruction functions before
each model request), so a fact remembered in one run is in the next run's instructions.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from functools import partial
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.toolsets import FunctionToolset
from pydantic_core import to_jsonable_python

from memlane._runner import Call, Plan, run_async, run_sync
from memlane._validate import check_identifier
from memlane.agents.tools import memory_tools
from memlane.errors import UserNotFoundError
from memlane.longterm.episode_model import Episode, run_actions
from memlane.longterm.fact_model import Fact
from memlane.longterm.long_term_memory import LongTermMemory
from memlane.longterm.user_model import UserContext

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

    def _instructions_plan(self) -> Plan[str | None]:
        """The one definition of :meth:`instructions` and :meth:`async_instructions`."""
        memory, user_id, agent_id = self.long_term, self.user_id, self.agent_id
        user: UserContext | None = None
        if user_id is not None:
            with suppress(UserNotFoundError):  # an id of the caller's own, not a known user
                user = yield Call(
                    partial(memory.user_context, user_id),
                    partial(memory.async_user_context, user_id),
                )
        seen = self._visible_user(user)
        facts: list[Fact] = yield Call(
            partial(memory.recall, user_id=seen, agent_id=agent_id, limit=CONTEXT_FACTS),
            partial(memory.async_recall, user_id=seen, agent_id=agent_id, limit=CONTEXT_FACTS),
        )
        return context_text(facts, user)

    def instructions(self) -> str | None:
        """The context, read with the sync methods (pydantic-ai runs this in a worker thread)."""
        return run_sync(self._instructions_plan(), None)

    async def async_instructions(self) -> str | None:
        """:meth:`instructions` with the ``async_`` methods."""
        return await run_async(self._instructions_plan(), None)

    def _visible_user(self, user: UserContext | None) -> str | None:
        # A merged user's facts moved to the user they were merged into, which the context
        # names: read those, not the retired id's empty scope.
        return user.user.id if user is not None else self.user_id

    # ------------------------------------------------------------------ episodes

    def _episode_ids(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id or "agent", "user_id": self.user_id}

    def _record_plan(self, result: Any, conversation_id: str) -> Plan[Episode | None]:
        """The one definition of :meth:`record` and :meth:`async_record`."""
        if not self.record_episodes:
            return None
        memory, ids = self.long_term, {"conversation_id": conversation_id, **self._episode_ids()}
        episode: Episode = yield Call(
            partial(memory.episode_from_run, result, **ids),
            partial(memory.async_episode_from_run, result, **ids),
        )
        return episode

    def record(self, result: Any, conversation_id: str) -> Episode | None:
        """Stores a finished run as an episode, when episodes are recorded."""
        return run_sync(self._record_plan(result, conversation_id), None)

    async def async_record(self, result: Any, conversation_id: str) -> Episode | None:
        """:meth:`record` with the ``async_`` method."""
        return await run_async(self._record_plan(result, conversation_id), None)

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

    def _record_failure_plan(
        self,
        error: BaseException,
        user_prompt: Any,
        messages: Sequence[ModelMessage],
        history_length: int,
        conversation_id: str,
    ) -> Plan[None]:
        """The one definition of :meth:`record_failure` and :meth:`async_record_failure`."""
        if not self.record_episodes:
            return
        memory = self.long_term
        try:
            failed = self._failure(error, user_prompt, messages, history_length, conversation_id)
            yield Call(
                partial(memory.record_episode, **failed),
                partial(memory.async_record_episode, **failed),
            )
        except Exception as exc:  # noqa: BLE001  # the run's own error must reach the caller
            error.add_note(f"recording the failed run as an episode failed too: {exc!r}")

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
        plan = self._record_failure_plan(
            error, user_prompt, messages, history_length, conversation_id
        )
        run_sync(plan, None)

    async def async_record_failure(
        self,
        error: BaseException,
        user_prompt: Any,
        messages: Sequence[ModelMessage],
        history_length: int,
        conversation_id: str,
    ) -> None:
        """:meth:`record_failure` with the ``async_`` method."""
        plan = self._record_failure_plan(
            error, user_prompt, messages, history_length, conversation_id
        )
        await run_async(plan, None)
