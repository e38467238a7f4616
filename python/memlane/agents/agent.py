"""`MemoryAgent`: a pydantic-ai agent whose runs are turns of a memlane conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
)
from typing import Any, Generic, TypeVar, cast, overload

from pydantic_ai import Agent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.models import Model
from pydantic_ai.output import OutputSpec
from pydantic_ai.run import AgentRunResult

from memlane.agents.calibration import Calibration
from memlane.agents.capability import async_store_run, store_run
from memlane.agents.long_term import LongTermBinding
from memlane.agents.results import MemoryRunResult, MemoryStreamedRun
from memlane.agents.run_inputs import RunPreparation, long_term_of
from memlane.agents.run_strategies import RunStrategies
from memlane.longterm import LongTermMemory
from memlane.longterm.episodes import Episode
from memlane.manager import MemoryManager
from memlane.strategies import LongTermStrategy, ShortTermStrategy
from memlane.types import ConversationTurn

__all__ = ["MemoryAgent", "MemoryRunResult", "MemoryStreamedRun"]

OutputT = TypeVar("OutputT")
RunOutputT = TypeVar("RunOutputT")


class MemoryAgent(Generic[OutputT]):
    """A pydantic-ai agent that remembers its conversations.

    Every run with a ``conversation_id`` is sent that conversation's history, kept inside the
    memory's token budget (rolling summary first, then whole recent turns), and its new
    messages are stored as one turn. Each model request of the run is kept within
    :attr:`max_tokens` as a whole — instructions (working memory and long-term context
    included), tool definitions, history and the run's own messages: the oldest turns are
    left out of the request, whole, until it fits (:class:`~memlane.agents.RequestBudget`).
    Counts are memlane's exact o200k counts, scaled by the serving model's
    :class:`~memlane.agents.Calibration` ratio, which every response's reported input tokens
    refine and the memory's store keeps. The working-memory facts are added to the run's
    instructions, which pydantic-ai evaluates before every model request, so a fact a tool
    sets is seen by the next request of the same run.

    With long-term memory (``long_term=``), every run's instructions also carry what it holds
    for the agent's user — their facts (then the agent's and global ones), and, for a user
    :meth:`~memlane.longterm.LongTermMemory.identify_user` knows, their name and latest
    episodes — read again for each run, so what one run remembers the next one is told. The
    run has the ``recall``/``remember`` tools of :func:`~memlane.agents.memory_tools`: with a
    ``user_id``, ``remember`` stores facts in the ``user`` scope of that user and ``recall``
    sees them; without one, ``remember`` stores global facts. With ``record_episodes=True``
    each run is stored as an episode (see :meth:`run`).

    The wrapped agent is :attr:`agent`; everything it offers stays available there. The class
    is generic over the agent's output type, so ``MemoryAgent(Agent[None, str](...))`` runs
    give a ``MemoryRunResult[str]``.

    Args:
        agent_or_model: A :class:`pydantic_ai.Agent` (any ``AbstractAgent``), or a model
            (``"openai:gpt-4o-mini"``, a :class:`~pydantic_ai.models.Model`) to build one from.
        memory: Conversations and working memory.
        name: The agent's name (defaults to the agent's own); a
            :class:`~memlane.agents.DelegationRouter` scopes the working memory of each
            delegate by it.
        inject_working_memory: Add ``memory.get_working_context()`` to the instructions when
            it is not empty.
        long_term: A :class:`~memlane.longterm.LongTermMemory`; ``True`` for the memory's
            own (``MemoryManager(long_term=True)``); ``None`` or ``False`` for none. Or a
            long-term strategy, as ``long_term_strategy``.
        user_id: The user the agent serves: the id
            :meth:`~memlane.longterm.LongTermMemory.identify_user` returned (the tools' scope
            is bound to it, so give the surviving id after a merge), or any id of your own.
        record_episodes: Store each run as an episode of the agent (its name, else
            ``"agent"``) for ``user_id``. When ``memory`` has a ``fact_extractor``, the end of
            each episode also hands the conversation's turns the extractor has not seen to it,
            in the background (:meth:`~memlane.MemoryManager.extract_facts`).
        short_term: Short-term strategies (:mod:`memlane.strategies`; one, a list applied
            in order, or their JSON) applied to the history the memory returns before each
            run, the summary still first. A :class:`~memlane.strategies.MemoryMaxTokensStrategy`
            among them (else among the memory's) also sets :attr:`max_tokens`.
        long_term_strategy: A :class:`~memlane.strategies.SummarizerStrategy` or
            :class:`~memlane.strategies.NeuralyzerStrategy` (or its JSON): after each run its
            triggers see the run's reported input tokens (of its largest request) and its
            tools' outcomes, and the interactions it folds are summarised (with its
            ``model``, else the run's or agent's, else the memory's summarizer) or erased,
            through the memory (:func:`memlane.conversation.agent_hooks.fold_by_strategy`).
        calibrate: Learn and apply the per-model :class:`~memlane.agents.Calibration`
            (kept in the memory's store); ``False``: counts are used as they are.
        **agent_kwargs: Passed to :class:`pydantic_ai.Agent` when building one from a model
            (``instructions=``, ``tools=``, ``output_type=``, ...).

    Raises:
        TypeError: ``memory`` is not a :class:`~memlane.MemoryManager`, ``agent_kwargs``
            are given with a ready-made agent, a strategy is given both as ``long_term`` and
            ``long_term_strategy``, or ``long_term``, ``short_term``, ``user_id``,
            ``record_episodes`` or ``calibrate`` has the wrong type.
        ValueError: ``long_term=True`` with a manager that has no long-term memory,
            ``user_id``/``record_episodes=True`` without long-term memory, a summarizer
            strategy with no model anywhere, or strategy JSON that does not validate.

    Note:
        Give the agent ``instructions=`` rather than ``system_prompt=``: pydantic-ai sends
        instructions with every request, while a system prompt is only added to a run without
        history, so it lives in the first turn and is summarised away with it.
    """

    @overload
    def __init__(
        self,
        agent_or_model: AbstractAgent[Any, OutputT],
        *,
        memory: MemoryManager,
        name: str | None = None,
        inject_working_memory: bool = True,
        long_term: LongTermMemory | bool | LongTermStrategy | dict[str, Any] | str | None = None,
        user_id: str | None = None,
        record_episodes: bool = False,
        short_term: Any = None,
        long_term_strategy: Any = None,
        calibrate: bool = True,
    ) -> None: ...

    @overload
    def __init__(
        self: MemoryAgent[str],
        agent_or_model: Model | str,
        *,
        memory: MemoryManager,
        name: str | None = None,
        inject_working_memory: bool = True,
        long_term: LongTermMemory | bool | LongTermStrategy | dict[str, Any] | str | None = None,
        user_id: str | None = None,
        record_episodes: bool = False,
        short_term: Any = None,
        long_term_strategy: Any = None,
        calibrate: bool = True,
        output_type: None = None,
        **agent_kwargs: Any,
    ) -> None: ...

    @overload
    def __init__(
        self,
        agent_or_model: Model | str,
        *,
        memory: MemoryManager,
        name: str | None = None,
        inject_working_memory: bool = True,
        long_term: LongTermMemory | bool | LongTermStrategy | dict[str, Any] | str | None = None,
        user_id: str | None = None,
        record_episodes: bool = False,
        short_term: Any = None,
        long_term_strategy: Any = None,
        calibrate: bool = True,
        output_type: OutputSpec[OutputT],
        **agent_kwargs: Any,
    ) -> None: ...

    def __init__(
        self,
        agent_or_model: AbstractAgent[Any, OutputT] | Model | str,
        *,
        memory: MemoryManager,
        name: str | None = None,
        inject_working_memory: bool = True,
        long_term: LongTermMemory | bool | LongTermStrategy | dict[str, Any] | str | None = None,
        user_id: str | None = None,
        record_episodes: bool = False,
        short_term: Any = None,
        long_term_strategy: Any = None,
        calibrate: bool = True,
        **agent_kwargs: Any,
    ) -> None:
        if not isinstance(memory, MemoryManager):
            raise TypeError(f"memory must be MemoryManager, not {type(memory).__name__}")
        if isinstance(agent_or_model, AbstractAgent):
            if agent_kwargs:
                raise TypeError(
                    f"agent keyword arguments {sorted(agent_kwargs)} apply only when building an "
                    "agent from a model; configure the Agent you pass instead"
                )
            self.agent: AbstractAgent[Any, OutputT] = agent_or_model
        else:
            # The overloads type output_type=None as "no output type", which pydantic-ai's
            # Agent does not accept: leave it to the Agent's default (str).
            if agent_kwargs.get("output_type", str) is None:
                del agent_kwargs["output_type"]
            self.agent = cast(
                "AbstractAgent[Any, OutputT]", Agent(agent_or_model, name=name, **agent_kwargs)
            )
        self.memory = memory
        self.name = name if name is not None else self.agent.name
        self.inject_working_memory = inject_working_memory
        if not (long_term is None or isinstance(long_term, bool | LongTermMemory)):
            # A long-term strategy (or its JSON) given as long_term, as platforms name it.
            if long_term_strategy is not None:
                raise TypeError("pass the long-term strategy as long_term or long_term_strategy")
            long_term_strategy, long_term = long_term, None
        self.long_term = long_term_of(memory, long_term)
        self._strategies = RunStrategies(
            memory,
            short_term=short_term,
            long_term_strategy=long_term_strategy,
            calibrate=calibrate,
            agent_model=getattr(self.agent, "model", None),
        )
        if not isinstance(record_episodes, bool):
            raise TypeError(f"record_episodes must be bool, not {type(record_episodes).__name__}")
        self._binding: LongTermBinding | None = None
        if self.long_term is not None:
            self._binding = LongTermBinding(
                self.long_term,
                user_id=user_id,
                agent_id=self.name,
                record_episodes=record_episodes,
            )
        elif user_id is not None or record_episodes:
            raise ValueError("user_id and record_episodes=True need long_term memory")
        self._preparation = RunPreparation(
            memory, self._strategies, self._binding, self._working_memory
        )

    @property
    def user_id(self) -> str | None:
        """The user the agent serves (fixed when it is made: the tools' scope is bound to it)."""
        return None if self._binding is None else self._binding.user_id

    @property
    def record_episodes(self) -> bool:
        """Whether runs are stored as episodes."""
        return self._binding is not None and self._binding.record_episodes

    @property
    def max_tokens(self) -> int:
        """The budget of every whole request a run makes (instructions, tool definitions,
        history and the run's own messages): the ``memory_max_tokens`` of the last
        :class:`~memlane.strategies.MemoryMaxTokensStrategy` among the agent's
        ``short_term`` (else the memory's) that sets one, else the memory's ``max_tokens``."""
        return self._strategies.max_tokens

    @property
    def short_term(self) -> list[ShortTermStrategy]:
        """The agent's short-term strategies (``[]``: the memory's history as it is)."""
        return self._strategies.short_term

    @property
    def long_term_strategy(self) -> LongTermStrategy | None:
        """The agent's own long-term strategy, run after each run, or ``None``."""
        return self._strategies.long_term_strategy

    @property
    def calibration(self) -> Calibration | None:
        """The per-model calibration (``None`` with ``calibrate=False``)."""
        return self._strategies.calibration

    def _working_memory(self) -> str | None:
        # Sync on purpose: pydantic-ai runs a plain instruction function in a worker thread,
        # so a database store's I/O never blocks the event loop.
        return self.memory.get_working_context() or None

    def _metadata(self) -> dict[str, Any] | None:
        # The user a turn was said by goes with it, so search_transcripts(user_id=...) finds
        # their turns across conversations.
        meta = {"agent": self.name} if self.name else {}
        if self.user_id is not None:
            meta["user_id"] = self.user_id
        return meta or None

    @property
    def _extracts(self) -> bool:
        # An episode's end is the other moment facts are extracted (the first: turns leaving
        # the history), when the memory has an extractor.
        return self.memory.conversation.fact_extractor is not None

    def _result(
        self,
        cid: str,
        turn: ConversationTurn,
        result: AgentRunResult[RunOutputT],
        episode: Episode | None,
    ) -> MemoryRunResult[RunOutputT]:
        return MemoryRunResult(
            output=result.output,
            conversation_id=cid,
            turn=turn,
            result=result,
            agent_name=self.name,
            episode=episode,
        )

    @overload
    async def run(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[OutputT]: ...

    @overload
    async def run(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: OutputSpec[RunOutputT],
        **kwargs: Any,
    ) -> MemoryRunResult[RunOutputT]: ...

    async def run(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[Any]:
        """Runs the agent on the conversation and stores the run as one turn.

        Args:
            user_prompt: The prompt.
            conversation_id: The conversation to continue; ``None`` starts a new one (its id
                is on the result).
            **kwargs: Passed to :meth:`pydantic_ai.Agent.run` (``deps=``, ``instructions=``
                (added to the working memory), ``toolsets=`` (added to the memory tools),
                ``output_type=``, ``model=``, ...).

        Returns:
            The output, the conversation id, the stored turn and, with ``record_episodes``,
            the episode.

        Raises:
            TypeError: ``message_history=`` or ``conversation=`` was passed (memory supplies
                the history).
            pydantic_ai.exceptions.AgentRunError: The run failed; no turn was stored. With
                ``record_episodes``, the run is stored as a failed episode holding the
                messages exchanged before the failure and the error (``"{type}: {message}"``);
                a run cancelled or interrupted by ``KeyboardInterrupt`` is not.
        """
        cid, history, run_kwargs = await self._preparation.async_prepare(
            user_prompt, conversation_id, kwargs, self.inject_working_memory
        )
        with self._preparation.capture() as messages:
            try:
                result = await self.agent.run(
                    user_prompt, message_history=history or None, **run_kwargs
                )
            except Exception as exc:
                if self._binding is not None:
                    await self._binding.async_record_failure(
                        exc, user_prompt, messages, len(history), cid
                    )
                raise
        turn = await async_store_run(self.memory, cid, result, metadata=self._metadata())
        await self._strategies.async_after_run(cid, result, kwargs.get("model"))
        episode = None if self._binding is None else await self._binding.async_record(result, cid)
        if episode is not None and self._extracts:
            await self.memory.async_extract_facts(cid)
        return self._result(cid, turn, result, episode)

    @overload
    def run_sync(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[OutputT]: ...

    @overload
    def run_sync(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: OutputSpec[RunOutputT],
        **kwargs: Any,
    ) -> MemoryRunResult[RunOutputT]: ...

    def run_sync(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[Any]:
        """Sync :meth:`run` (not from inside a running event loop, like pydantic-ai's).

        Args:
            user_prompt: The prompt.
            conversation_id: The conversation to continue; ``None`` starts a new one.
            **kwargs: Passed to :meth:`pydantic_ai.Agent.run_sync`.

        Returns:
            The output, the conversation id, the stored turn and the episode.

        Raises:
            TypeError: ``message_history=`` or ``conversation=`` was passed.
            pydantic_ai.exceptions.AgentRunError: The run failed, as for :meth:`run`.
        """
        cid, history, run_kwargs = self._preparation.prepare(
            user_prompt, conversation_id, kwargs, self.inject_working_memory
        )
        with self._preparation.capture() as messages:
            try:
                result = self.agent.run_sync(
                    user_prompt, message_history=history or None, **run_kwargs
                )
            except Exception as exc:
                if self._binding is not None:
                    self._binding.record_failure(exc, user_prompt, messages, len(history), cid)
                raise
        turn = store_run(self.memory, cid, result, metadata=self._metadata())
        self._strategies.after_run(cid, result, kwargs.get("model"))
        episode = None if self._binding is None else self._binding.record(result, cid)
        if episode is not None and self._extracts:
            self.memory.extract_facts(cid)
        return self._result(cid, turn, result, episode)

    @overload
    def run_stream(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: None = None,
        **kwargs: Any,
    ) -> AbstractAsyncContextManager[MemoryStreamedRun[OutputT]]: ...

    @overload
    def run_stream(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        output_type: OutputSpec[RunOutputT],
        **kwargs: Any,
    ) -> AbstractAsyncContextManager[MemoryStreamedRun[RunOutputT]]: ...

    @asynccontextmanager
    async def run_stream(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[MemoryStreamedRun[Any]]:
        """Streams a run; the turn is stored when the block ends with the stream complete.

        A stream that fails, is cancelled, or is left before its end stores no turn. With
        ``record_episodes``, a complete stream is stored as an episode and one that fails
        (the model's error, or one raised in the block) as a failed episode, as for
        :meth:`run`; a stream cancelled or left before its end is not an episode.

        Args:
            user_prompt: The prompt.
            conversation_id: The conversation to continue; ``None`` starts a new one.
            **kwargs: Passed to :meth:`pydantic_ai.Agent.run_stream`.

        Yields:
            The streamed run (its ``conversation_id`` is known from the start).
        """
        cid, history, run_kwargs = await self._preparation.async_prepare(
            user_prompt, conversation_id, kwargs, self.inject_working_memory
        )
        with self._preparation.capture() as messages:
            try:
                async with self.agent.run_stream(
                    user_prompt, message_history=history or None, **run_kwargs
                ) as stream:
                    streamed: MemoryStreamedRun[Any] = MemoryStreamedRun(stream, cid, self.name)
                    yield streamed
                    if stream.is_complete:
                        streamed.turn = await async_store_run(
                            self.memory, cid, stream.result, metadata=self._metadata()
                        )
                        await self._strategies.async_after_run(
                            cid, stream.result, kwargs.get("model")
                        )
            except Exception as exc:
                if self._binding is not None:
                    await self._binding.async_record_failure(
                        exc, user_prompt, messages, len(history), cid
                    )
                raise
        if stream.is_complete and self._binding is not None:
            streamed.episode = await self._binding.async_record(stream.result, cid)
            if streamed.episode is not None and self._extracts:
                await self.memory.async_extract_facts(cid)
