"""What a :class:`~memlane.agents.MemoryAgent` run is given before the model is asked.

Its conversation id (a new one, or the caller's, checked), the history the memory and the
short-term strategies choose, and pydantic-ai's keyword arguments with memory's additions:
the knowledge base's context, the working memory, the long-term context and tools, the
request budget. ``run`` and ``run_stream`` prepare through the memory's ``async_`` methods,
``run_sync`` through the sync ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic_ai import capture_run_messages
from pydantic_ai.messages import ModelMessage

from memlane.agents.long_term import LongTermBinding
from memlane.agents.run_strategies import RunStrategies
from memlane.longterm import LongTermMemory
from memlane.manager import MemoryManager

__all__ = ["RunInputs", "RunPreparation", "long_term_of"]

# Memory supplies these: a caller's own would be silently replaced, so they are refused.
_RESERVED_RUN_KWARGS = ("message_history", "conversation")


class RunInputs(NamedTuple):
    """One run's conversation id, the history it is sent, and its pydantic-ai arguments."""

    cid: str
    history: list[ModelMessage]
    kwargs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunPreparation:
    """Prepares an agent's runs from its memory, strategies and long-term binding.

    Attributes:
        memory: The agent's memory.
        strategies: Its short- and long-term strategies and request budget.
        binding: Its long-term memory binding, if any.
        working_memory: The instruction function giving the working-memory facts.
    """

    memory: MemoryManager
    strategies: RunStrategies
    binding: LongTermBinding | None
    working_memory: Callable[[], str | None]

    def prepare(
        self, user_prompt: Any, conversation_id: str | None, kwargs: dict[str, Any], inject: bool
    ) -> RunInputs:
        """A sync run's inputs (``inject``: add the working memory to the instructions).

        Raises:
            TypeError: A reserved keyword argument, or a ``conversation_id`` not a ``str``.
            ValueError: The reserved conversation id ``"new"``.
        """
        cid = _check(conversation_id, kwargs)
        history = (
            []
            if conversation_id is None
            else self.strategies.history(cid, self.memory.get_message_history(cid))
        )
        knowledge = self.strategies.knowledge(cid, user_prompt)
        return RunInputs(cid, history, self._kwargs(cid, kwargs, knowledge, inject, sync=True))

    async def async_prepare(
        self, user_prompt: Any, conversation_id: str | None, kwargs: dict[str, Any], inject: bool
    ) -> RunInputs:
        """Async :meth:`prepare`."""
        cid = _check(conversation_id, kwargs)
        history = (
            []
            if conversation_id is None
            else self.strategies.history(cid, await self.memory.async_get_message_history(cid))
        )
        knowledge = await self.strategies.async_knowledge(cid, user_prompt)
        return RunInputs(cid, history, self._kwargs(cid, kwargs, knowledge, inject, sync=False))

    def capture(self) -> AbstractContextManager[list[ModelMessage]]:
        """What captures a run's messages: only a run that becomes an episode needs them,
        should it fail; capturing otherwise would hide the run from a caller's own
        ``capture_run_messages()``."""
        if self.binding is not None and self.binding.record_episodes:
            return capture_run_messages()
        return nullcontext([])

    def _kwargs(
        self,
        cid: str,
        kwargs: dict[str, Any],
        knowledge: str | None,
        inject: bool,
        *,
        sync: bool,
    ) -> dict[str, Any]:
        kwargs = dict(kwargs)
        if knowledge:
            kwargs["instructions"] = _add_instruction(kwargs.get("instructions"), knowledge)
        if inject:
            kwargs["instructions"] = _add_instruction(
                kwargs.get("instructions"), self.working_memory
            )
        if self.binding is not None:
            # run_sync reads through the sync methods (in pydantic-ai's worker thread), the
            # async runs through the async_ twins, as each path's store calls expect.
            context = self.binding.instructions if sync else self.binding.async_instructions
            kwargs["instructions"] = _add_instruction(kwargs.get("instructions"), context)
            kwargs["toolsets"] = [*(kwargs.get("toolsets") or ()), self.binding.toolset]
        # Last of the run's capabilities: it sees the request as the others left it.
        budget = self.strategies.budget(sync=sync)
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or ()), budget]
        # pydantic-ai tags the run's messages with the id, so traces name memlane's conversation.
        kwargs["conversation_id"] = cid
        return kwargs


def long_term_of(memory: MemoryManager, long_term: object) -> LongTermMemory | None:
    """The long-term memory ``long_term=`` names (``True``: the manager's own).

    Raises:
        ValueError: ``True`` and the manager has no long-term memory.
        TypeError: Neither a :class:`~memlane.longterm.LongTermMemory`, a ``bool`` nor
            ``None``.
    """
    if long_term is None or long_term is False:
        return None
    if long_term is True:
        if memory.long_term is None:
            raise ValueError(
                "long_term=True uses the manager's long-term memory, and this MemoryManager "
                "has none: build it with MemoryManager(long_term=True) or pass a LongTermMemory"
            )
        return memory.long_term
    if isinstance(long_term, LongTermMemory):
        return long_term
    raise TypeError(
        f"long_term must be LongTermMemory, bool or None, not {type(long_term).__name__}"
    )


def _check(conversation_id: object, kwargs: dict[str, Any]) -> str:
    """The run's conversation id (a new one for ``None``), after refusing reserved kwargs."""
    for reserved in _RESERVED_RUN_KWARGS:
        if reserved in kwargs:
            raise TypeError(
                f"{reserved}= is supplied by memory; MemoryAgent runs take conversation_id="
            )
    if conversation_id is None:
        return uuid.uuid4().hex
    if not isinstance(conversation_id, str):
        raise TypeError(f"conversation_id must be str, not {type(conversation_id).__name__}")
    if conversation_id == "new":
        raise ValueError(
            "'new' is pydantic-ai's reserved conversation id; omit conversation_id to start one"
        )
    return conversation_id


def _add_instruction(instructions: Any, extra: Any) -> list[Any]:
    """A run's ``instructions=`` with ``extra`` appended (pydantic-ai joins them all)."""
    if instructions is None:
        return [extra]
    if isinstance(instructions, str) or not isinstance(instructions, Sequence):
        return [instructions, extra]
    return [*instructions, extra]
