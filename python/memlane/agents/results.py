"""What a :class:`~memlane.agents.MemoryAgent` run gives: the result and the streamed run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic_ai.messages import ModelMessage
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRunResult

from memlane.longterm.episodes import Episode
from memlane.types import ConversationTurn

__all__ = ["MemoryRunResult", "MemoryStreamedRun"]

OutputT = TypeVar("OutputT")


@dataclass
class MemoryRunResult(Generic[OutputT]):
    """A run of a :class:`~memlane.agents.MemoryAgent`: pydantic-ai's result plus where it was stored.

    Attributes:
        output: The run's output.
        conversation_id: The conversation the turn was stored in (new when none was given).
        turn: The stored turn.
        result: pydantic-ai's :class:`~pydantic_ai.run.AgentRunResult`.
        agent_name: The agent that ran (set by :class:`~memlane.agents.DelegationRouter`;
            else the agent's name).
        episode: The episode the run was stored as (``record_episodes=True``), else ``None``.
    """

    output: OutputT
    conversation_id: str
    turn: ConversationTurn
    result: AgentRunResult[OutputT]
    agent_name: str | None = None
    episode: Episode | None = None

    def new_messages(self) -> list[ModelMessage]:
        """The messages of this run (what was stored as the turn).

        Returns:
            The messages, oldest first.
        """
        return self.result.new_messages()

    def all_messages(self) -> list[ModelMessage]:
        """The history the run was sent plus its new messages.

        Returns:
            The messages, oldest first.
        """
        return self.result.all_messages()


class MemoryStreamedRun(Generic[OutputT]):
    """A streamed run of a :class:`~memlane.agents.MemoryAgent` (what ``async with agent.run_stream(...)`` gives).

    Stream with :meth:`stream_text`, :meth:`stream_output` or :meth:`get_output`; pydantic-ai's
    :class:`~pydantic_ai.result.StreamedRunResult` is :attr:`stream`. The turn is stored when
    the ``async with`` block ends with the stream complete; :attr:`turn` is then set, and
    :attr:`episode` too when the agent records episodes.

    Args:
        stream: pydantic-ai's streamed run.
        conversation_id: The conversation the turn goes to.
        agent_name: The agent that runs.
    """

    def __init__(
        self, stream: StreamedRunResult[Any, OutputT], conversation_id: str, agent_name: str | None
    ) -> None:
        self.stream = stream
        self.conversation_id = conversation_id
        self.agent_name = agent_name
        self.turn: ConversationTurn | None = None
        self.episode: Episode | None = None

    @property
    def is_complete(self) -> bool:
        """Whether the model's answer has been streamed to its end."""
        return self.stream.is_complete

    def stream_text(
        self, *, delta: bool = False, debounce_by: float | None = 0.1
    ) -> AsyncIterator[str]:
        """The text as it arrives; see :meth:`pydantic_ai.result.StreamedRunResult.stream_text`.

        Args:
            delta: Yield each new piece rather than the text so far.
            debounce_by: Group what arrives within this many seconds.

        Returns:
            The text, piece by piece.
        """
        return self.stream.stream_text(delta=delta, debounce_by=debounce_by)

    def stream_output(self, *, debounce_by: float | None = 0.1) -> AsyncIterator[OutputT]:
        """The partial outputs; see :meth:`pydantic_ai.result.StreamedRunResult.stream_output`.

        Args:
            debounce_by: Group what arrives within this many seconds.

        Returns:
            The output as validated so far, then the whole.
        """
        return self.stream.stream_output(debounce_by=debounce_by)

    async def get_output(self) -> OutputT:
        """Streams to the end.

        Returns:
            The output.
        """
        return await self.stream.get_output()

    def new_messages(self) -> list[ModelMessage]:
        """The messages of this run so far.

        Returns:
            The messages, oldest first.
        """
        return self.stream.new_messages()
