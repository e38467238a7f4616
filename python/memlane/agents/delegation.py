"""Delegation: several named agents take turns on one conversation, each with its own facts,
and, given a shared memory, a record of each delegate's work under its name."""

from __future__ import annotations

import inspect
import itertools
import threading
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    ModelMessage,
    RetryPromptPart,
)
from pydantic_core import to_jsonable_python

from memlane._validate import type_name
from memlane.agents.agent import MemoryAgent, MemoryRunResult
from memlane.manager import MemoryManager
from memlane.shared.memory import BaseMemory
from memlane.shared.message_builder import (
    create_action,
    create_error,
    create_final,
    create_observation,
    create_task_entry,
)

__all__ = ["DelegationRouter", "DelegationStrategy", "RoundRobinStrategy"]


@runtime_checkable
class DelegationStrategy(Protocol):
    """Chooses which delegate of a :class:`DelegationRouter` handles a prompt."""

    def select(
        self, prompt: str | Sequence[Any] | None, delegates: Sequence[MemoryAgent[Any]]
    ) -> MemoryAgent[Any] | Awaitable[MemoryAgent[Any]]:
        """Chooses the delegate for ``prompt``.

        Args:
            prompt: The prompt the router was given.
            delegates: The router's delegates, in the order they were given.

        Returns:
            One of ``delegates``, or an awaitable of it (for a strategy that asks a model).
        """
        ...


class RoundRobinStrategy:
    """Hands prompts to the delegates in turn."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def select(
        self, prompt: str | Sequence[Any] | None, delegates: Sequence[MemoryAgent[Any]]
    ) -> MemoryAgent[Any]:
        """The next delegate in order.

        Args:
            prompt: Unused: the order alone decides.
            delegates: The router's delegates.

        Returns:
            The delegate after the one chosen last time.
        """
        with self._lock:
            return delegates[next(self._counter) % len(delegates)]


class DelegationRouter:
    """Routes each prompt to one agent; they share conversations and keep their own facts.

    Each delegate runs as a :class:`~memlane.agents.MemoryAgent` over
    ``memory.fork(working_scope_id=name)``: the same conversation memory (so the next delegate
    sees what the previous one said) and a working-memory scope of its own.

    Args:
        agents: pydantic-ai agents or :class:`~memlane.agents.MemoryAgent` s, each with a
            distinct name (a MemoryAgent's own memory is replaced by the fork).
        strategy: Chooses the delegate for each prompt.
        memory: The shared memory.
        shared: A :mod:`memlane.shared` memory (e.g. a
            :class:`~memlane.shared.SharedMemory`) that records, under each delegate's name,
            the task it was handed, the tool calls it made and what they returned, its
            error if it failed and its final output; a manager's
            :class:`~memlane.shared.HierarchicalMessageStoreMemory` on the same location
            then sees its workers' work. ``None`` records nothing.

    Raises:
        ValueError: No agents, an agent without a name, or two with the same name.
        TypeError: ``strategy`` has no ``select`` method, or ``shared`` is not a
            :class:`~memlane.shared.BaseMemory`.
    """

    def __init__(
        self,
        agents: Sequence[AbstractAgent[Any, Any] | MemoryAgent[Any]],
        strategy: DelegationStrategy,
        *,
        memory: MemoryManager,
        shared: BaseMemory | None = None,
    ) -> None:
        if shared is not None and not isinstance(shared, BaseMemory):
            raise TypeError(f"shared must be a memlane.shared memory, not {type_name(shared)}")
        self.shared = shared
        if not agents:
            raise ValueError("DelegationRouter needs at least one agent")
        if not callable(getattr(strategy, "select", None)):
            raise TypeError(f"strategy must have a select() method, got {type(strategy).__name__}")
        self.memory = memory
        self.strategy = strategy
        self.delegates: dict[str, MemoryAgent[Any]] = {}
        for agent in agents:
            inner = agent.agent if isinstance(agent, MemoryAgent) else agent
            name = agent.name
            if not name:
                raise ValueError("every delegate needs a name: its working memory is scoped by it")
            if name in self.delegates:
                raise ValueError(f"two delegates are named {name!r}; they would share one scope")
            inject = agent.inject_working_memory if isinstance(agent, MemoryAgent) else True
            self.delegates[name] = MemoryAgent(
                inner,
                memory=memory.fork(working_scope_id=name),
                name=name,
                inject_working_memory=inject,
            )

    async def route(
        self,
        user_prompt: str | Sequence[Any] | None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[Any]:
        """Runs the delegate the strategy chooses on the conversation.

        Args:
            user_prompt: The prompt.
            conversation_id: The shared conversation; ``None`` starts a new one.
            **kwargs: Passed to :meth:`MemoryAgent.run <memlane.agents.MemoryAgent.run>`.

        Returns:
            The run, with ``agent_name`` naming the delegate.

        Raises:
            ValueError: The strategy chose something that is not one of the delegates.
        """
        delegates = list(self.delegates.values())
        choice = self.strategy.select(user_prompt, delegates)
        if inspect.isawaitable(choice):
            choice = await choice
        if not any(choice is d for d in delegates):
            raise ValueError(
                f"strategy {type(self.strategy).__name__} chose {choice!r}, "
                "not one of the delegates"
            )
        shared = self.shared
        if shared is None:
            return await choice.run(user_prompt, conversation_id=conversation_id, **kwargs)
        name = choice.name
        assert name is not None  # every delegate was checked to have one
        await shared.async_add_message(create_task_entry(_prompt_text(user_prompt), agent_key=name))
        try:
            result = await choice.run(user_prompt, conversation_id=conversation_id, **kwargs)
        except Exception as exc:
            await shared.async_add_message(
                create_error(f"{type(exc).__name__}: {exc}", agent_key=name)
            )
            raise
        for message in _trace(result.new_messages(), name):
            await shared.async_add_message(message)
        await shared.async_add_message(create_final(_jsonable(result.output), agent_key=name))
        return result


def _prompt_text(prompt: str | Sequence[Any] | None) -> str:
    """The text of a prompt as a task records it (non-text parts named by their URL or type)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    texts = []
    for part in prompt:
        if isinstance(part, str):
            texts.append(part)
        else:
            texts.append(str(getattr(part, "url", None) or f"<{type(part).__name__}>"))
    return "\n".join(texts)


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON (a structured output as its fields), else its ``str``."""
    try:
        return to_jsonable_python(value)
    except ValueError:
        return str(value)


def _trace(messages: Sequence[ModelMessage], name: str) -> list[dict[str, Any]]:
    """A run's tool calls as ``action`` s and what they returned as ``observation`` s."""
    trace: list[dict[str, Any]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, BaseToolCallPart):
                trace.append(
                    create_action(part.tool_name, _jsonable(part.args_as_dict()), agent_key=name)
                )
            elif isinstance(part, BaseToolReturnPart):
                trace.append(create_observation(part.model_response_str(), agent_key=name))
            elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
                trace.append(create_observation(part.model_response(), agent_key=name))
    return trace
