"""pydantic-ai agents with memory: conversations, working memory, delegation, conversation stores.

* :class:`MemoryAgent` wraps a :class:`pydantic_ai.Agent`: each run is sent the conversation's
  budgeted history and stored as one turn; the working-memory facts reach the model as
  instructions.
* :func:`memory_history` is the same trimming for an :class:`~pydantic_ai.Agent` you run
  yourself, as a :class:`~pydantic_ai.capabilities.ProcessHistory` capability (pydantic-ai 2.x
  has no ``history_processors=``); :func:`store_run` stores such a run.
* :class:`DelegationRouter` hands each prompt to one of several agents; they share the
  conversation and keep their own facts.
* :class:`MemlaneConversationStore` is pydantic-ai's own
  :class:`~pydantic_ai.conversation_store.ConversationStore` over any memlane store.

Histories are whole turns, so what a model is sent never starts with a tool return whose call
was trimmed away and never holds a call without its return: pydantic-ai would otherwise repair
the history by silently dropping the orphans, and providers reject it outright.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import pydantic_core
from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models import Model
from pydantic_ai.result import StreamedRunResult
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext

from memlane.conversation import ConversationMemory
from memlane.manager import MemoryManager
from memlane.store import MemoryStore
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope, utc_now

__all__ = [
    "DelegationRouter",
    "MemlaneConversationStore",
    "MemoryAgent",
    "MemoryRunResult",
    "MemoryStreamedRun",
    "RoundRobinStrategy",
    "Strategy",
    "async_store_run",
    "memory_history",
    "store_run",
]

OutputT = TypeVar("OutputT")

# Memory supplies these: a caller's own would be silently replaced, so they are refused.
_RESERVED_RUN_KWARGS = ("message_history", "conversation")


# ---------------------------------------------------------------------------- storing a run


def _prompt_text(messages: Sequence[ModelMessage]) -> str:
    """The user's words in a run's messages (file and image inputs named by their URL)."""
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if not isinstance(part, UserPromptPart):
                continue
            if isinstance(part.content, str):
                texts.append(part.content)
                continue
            for item in part.content:
                if isinstance(item, str):
                    texts.append(item)
                elif (url := getattr(item, "url", None)) is not None:
                    texts.append(str(url))
    return "\n".join(texts)


def _output_text(output: object) -> str:
    """A run's output as the turn's ``assistant_response``: text as is, anything else as JSON."""
    if isinstance(output, str):
        return output
    return pydantic_core.to_json(output, fallback=str).decode()


def _turn_args(result: AgentRunResult[Any]) -> tuple[str, str, list[ModelMessage]]:
    # new_messages(), never all_messages(): a ProcessHistory capability replaces the run's
    # history with the trimmed one, so all_messages() would store a trimmed copy of old turns.
    messages = list(result.new_messages())
    return _prompt_text(messages), _output_text(result.output), messages


def store_run(
    memory: MemoryManager | ConversationMemory,
    conversation_id: str,
    result: AgentRunResult[Any],
    *,
    metadata: dict[str, Any] | None = None,
) -> ConversationTurn:
    """Stores a finished pydantic-ai run as one turn of a conversation.

    The turn holds the run's ``new_messages()`` (tool calls and returns included); its
    ``user_prompt`` is the prompt's text and its ``assistant_response`` the output (as JSON
    when it is not a string).

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation; an unknown id starts it.
        result: The run, e.g. ``agent.run_sync(...)``.
        metadata: Free-form annotations stored with the turn.

    Returns:
        The stored turn.
    """
    return memory.add_turn(conversation_id, *_turn_args(result), metadata=metadata)


async def async_store_run(
    memory: MemoryManager | ConversationMemory,
    conversation_id: str,
    result: AgentRunResult[Any],
    *,
    metadata: dict[str, Any] | None = None,
) -> ConversationTurn:
    """Async :func:`store_run` (an async summarizer is awaited, store I/O off the loop)."""
    return await memory.async_add_turn(conversation_id, *_turn_args(result), metadata=metadata)


# ---------------------------------------------------------------------------- history capability


def memory_history(
    memory: MemoryManager | ConversationMemory, conversation_id: str
) -> ProcessHistory[Any]:
    """The conversation's budgeted history as a pydantic-ai ``ProcessHistory`` capability.

    Before every model request of a run, whatever history the run carries from earlier runs is
    replaced by ``memory``'s history of ``conversation_id`` (summary first, then whole recent
    turns); the messages of the current run are kept. Pass it per run
    (``agent.run(prompt, capabilities=[memory_history(memory, cid)])``) or on the agent for one
    conversation, and store the run with :func:`store_run` / :func:`async_store_run`.

    pydantic-ai keeps the processed history as the run's own, so ``all_messages()`` of such a
    run is the trimmed history: store ``new_messages()`` (which :func:`store_run` does), never
    ``all_messages()``.

    Args:
        memory: Where the conversation lives.
        conversation_id: The conversation.

    Returns:
        The capability.

    Raises:
        ValueError: ``conversation_id`` is not a non-empty string.
    """
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ValueError(f"conversation_id must be a non-empty str, got {conversation_id!r}")

    async def replace_history(
        ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        # The run's own messages carry its run_id; everything else is history memory owns.
        current = [m for m in messages if m.run_id == ctx.run_id]
        return [*await memory.async_get_message_history(conversation_id), *current]

    return ProcessHistory(replace_history)


# ---------------------------------------------------------------------------- MemoryAgent


@dataclass
class MemoryRunResult(Generic[OutputT]):
    """A run of a :class:`MemoryAgent`: pydantic-ai's result plus where it was stored.

    Attributes:
        output: The run's output.
        conversation_id: The conversation the turn was stored in (new when none was given).
        turn: The stored turn.
        result: pydantic-ai's :class:`~pydantic_ai.run.AgentRunResult`.
        agent_name: The agent that ran (set by :class:`DelegationRouter`; else the agent's name).
    """

    output: OutputT
    conversation_id: str
    turn: ConversationTurn
    result: AgentRunResult[OutputT]
    agent_name: str | None = None

    def new_messages(self) -> list[ModelMessage]:
        """The messages of this run (what was stored as the turn)."""
        return self.result.new_messages()

    def all_messages(self) -> list[ModelMessage]:
        """The history the run was sent plus its new messages."""
        return self.result.all_messages()


class MemoryStreamedRun(Generic[OutputT]):
    """A streamed run of a :class:`MemoryAgent` (what ``async with agent.run_stream(...)`` gives).

    Stream with :meth:`stream_text`, :meth:`stream_output` or :meth:`get_output`; pydantic-ai's
    :class:`~pydantic_ai.result.StreamedRunResult` is :attr:`stream`. The turn is stored when
    the ``async with`` block ends with the stream complete; :attr:`turn` is then set.
    """

    def __init__(
        self, stream: StreamedRunResult[Any, OutputT], conversation_id: str, agent_name: str | None
    ) -> None:
        self.stream = stream
        self.conversation_id = conversation_id
        self.agent_name = agent_name
        self.turn: ConversationTurn | None = None

    @property
    def is_complete(self) -> bool:
        """Whether the model's answer has been streamed to its end."""
        return self.stream.is_complete

    def stream_text(
        self, *, delta: bool = False, debounce_by: float | None = 0.1
    ) -> AsyncIterator[str]:
        """See :meth:`pydantic_ai.result.StreamedRunResult.stream_text`."""
        return self.stream.stream_text(delta=delta, debounce_by=debounce_by)

    def stream_output(self, *, debounce_by: float | None = 0.1) -> AsyncIterator[OutputT]:
        """See :meth:`pydantic_ai.result.StreamedRunResult.stream_output`."""
        return self.stream.stream_output(debounce_by=debounce_by)

    async def get_output(self) -> OutputT:
        """Streams to the end and returns the output."""
        return await self.stream.get_output()

    def new_messages(self) -> list[ModelMessage]:
        """The messages of this run so far."""
        return self.stream.new_messages()


def _check_conversation_id(conversation_id: object) -> str:
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


class MemoryAgent(Generic[OutputT]):
    """A pydantic-ai agent that remembers its conversations.

    Every run with a ``conversation_id`` is sent that conversation's history, kept inside the
    memory's token budget (rolling summary first, then whole recent turns), and its new
    messages are stored as one turn. The working-memory facts are added to the run's
    instructions, which pydantic-ai evaluates before every model request, so a fact a tool
    sets is seen by the next request of the same run.

    The wrapped agent is :attr:`agent`; everything it offers stays available there.

    Args:
        agent_or_model: A :class:`pydantic_ai.Agent` (any ``AbstractAgent``), or a model
            (``"openai:gpt-4o-mini"``, a :class:`~pydantic_ai.models.Model`) to build one from.
        memory: Conversations and working memory.
        name: The agent's name (defaults to the agent's own); a :class:`DelegationRouter`
            scopes the working memory of each delegate by it.
        inject_working_memory: Add ``memory.get_working_context()`` to the instructions when
            it is not empty.
        **agent_kwargs: Passed to :class:`pydantic_ai.Agent` when building one from a model
            (``instructions=``, ``tools=``, ``output_type=``, ...).

    Raises:
        TypeError: ``memory`` is not a :class:`~memlane.MemoryManager`, or ``agent_kwargs``
            are given with a ready-made agent.

    Note:
        Give the agent ``instructions=`` rather than ``system_prompt=``: pydantic-ai sends
        instructions with every request, while a system prompt is only added to a run without
        history, so it lives in the first turn and is summarised away with it.
    """

    def __init__(
        self,
        agent_or_model: AbstractAgent[Any, OutputT] | Model | str,
        *,
        memory: MemoryManager,
        name: str | None = None,
        inject_working_memory: bool = True,
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
            self.agent = Agent(agent_or_model, name=name, **agent_kwargs)
        self.memory = memory
        self.name = name if name is not None else self.agent.name
        self.inject_working_memory = inject_working_memory

    def _working_memory(self) -> str | None:
        # Sync on purpose: pydantic-ai runs a plain instruction function in a worker thread,
        # so a database store's I/O never blocks the event loop.
        return self.memory.get_working_context() or None

    def _run_kwargs(self, conversation_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        for reserved in _RESERVED_RUN_KWARGS:
            if reserved in kwargs:
                raise TypeError(
                    f"{reserved}= is supplied by memory; MemoryAgent runs take conversation_id="
                )
        if self.inject_working_memory:
            kwargs["instructions"] = _add_instruction(
                kwargs.get("instructions"), self._working_memory
            )
        # pydantic-ai tags the run's messages with the id, so traces name memlane's conversation.
        kwargs["conversation_id"] = conversation_id
        return kwargs

    def _metadata(self) -> dict[str, Any] | None:
        return {"agent": self.name} if self.name else None

    def _result(
        self, cid: str, turn: ConversationTurn, result: AgentRunResult[Any]
    ) -> MemoryRunResult[Any]:
        return MemoryRunResult(
            output=result.output,
            conversation_id=cid,
            turn=turn,
            result=result,
            agent_name=self.name,
        )

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
                (added to the working memory), ``output_type=``, ``model=``, ...).

        Returns:
            The output, the conversation id and the stored turn.

        Raises:
            TypeError: ``message_history=`` or ``conversation=`` was passed (memory supplies
                the history).
            pydantic_ai.exceptions.AgentRunError: The run failed; nothing was stored.
        """
        cid = (
            uuid.uuid4().hex if conversation_id is None else _check_conversation_id(conversation_id)
        )
        history = (
            [] if conversation_id is None else await self.memory.async_get_message_history(cid)
        )
        result = await self.agent.run(
            user_prompt, message_history=history or None, **self._run_kwargs(cid, kwargs)
        )
        turn = await async_store_run(self.memory, cid, result, metadata=self._metadata())
        return self._result(cid, turn, result)

    def run_sync(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> MemoryRunResult[Any]:
        """Sync :meth:`run` (not from inside a running event loop, like pydantic-ai's)."""
        cid = (
            uuid.uuid4().hex if conversation_id is None else _check_conversation_id(conversation_id)
        )
        history = [] if conversation_id is None else self.memory.get_message_history(cid)
        result = self.agent.run_sync(
            user_prompt, message_history=history or None, **self._run_kwargs(cid, kwargs)
        )
        turn = store_run(self.memory, cid, result, metadata=self._metadata())
        return self._result(cid, turn, result)

    @asynccontextmanager
    async def run_stream(
        self,
        user_prompt: str | Sequence[Any] | None = None,
        *,
        conversation_id: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[MemoryStreamedRun[Any]]:
        """Streams a run; the turn is stored when the block ends with the stream complete.

        A stream that fails, is cancelled, or is left before its end stores nothing.

        Args:
            user_prompt: The prompt.
            conversation_id: The conversation to continue; ``None`` starts a new one.
            **kwargs: Passed to :meth:`pydantic_ai.Agent.run_stream`.

        Yields:
            The streamed run (its ``conversation_id`` is known from the start).
        """
        cid = (
            uuid.uuid4().hex if conversation_id is None else _check_conversation_id(conversation_id)
        )
        history = (
            [] if conversation_id is None else await self.memory.async_get_message_history(cid)
        )
        run_kwargs = self._run_kwargs(cid, kwargs)
        async with self.agent.run_stream(
            user_prompt, message_history=history or None, **run_kwargs
        ) as stream:
            streamed: MemoryStreamedRun[Any] = MemoryStreamedRun(stream, cid, self.name)
            yield streamed
            if stream.is_complete:
                streamed.turn = await async_store_run(
                    self.memory, cid, stream.result, metadata=self._metadata()
                )


# ---------------------------------------------------------------------------- delegation


@runtime_checkable
class Strategy(Protocol):
    """Chooses which delegate of a :class:`DelegationRouter` handles a prompt."""

    def select(
        self, prompt: str | Sequence[Any] | None, delegates: Sequence[MemoryAgent[Any]]
    ) -> MemoryAgent[Any] | Awaitable[MemoryAgent[Any]]:
        """One of ``delegates`` (or an awaitable of it, for a strategy that asks a model)."""
        ...


class RoundRobinStrategy:
    """Hands prompts to the delegates in turn."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def select(
        self, prompt: str | Sequence[Any] | None, delegates: Sequence[MemoryAgent[Any]]
    ) -> MemoryAgent[Any]:
        """The next delegate in order."""
        with self._lock:
            return delegates[next(self._counter) % len(delegates)]


class DelegationRouter:
    """Routes each prompt to one agent; they share conversations and keep their own facts.

    Each delegate runs as a :class:`MemoryAgent` over ``memory.fork(working_scope_id=name)``:
    the same conversation memory (so the next delegate sees what the previous one said) and a
    working-memory scope of its own.

    Args:
        agents: pydantic-ai agents or :class:`MemoryAgent` s, each with a distinct name (a
            MemoryAgent's own memory is replaced by the fork).
        strategy: Chooses the delegate for each prompt.
        memory: The shared memory.

    Raises:
        ValueError: No agents, an agent without a name, or two with the same name.
        TypeError: ``strategy`` has no ``select`` method.
    """

    def __init__(
        self,
        agents: Sequence[AbstractAgent[Any, Any] | MemoryAgent[Any]],
        strategy: Strategy,
        *,
        memory: MemoryManager,
    ) -> None:
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
            **kwargs: Passed to :meth:`MemoryAgent.run`.

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
        return await choice.run(user_prompt, conversation_id=conversation_id, **kwargs)


# ---------------------------------------------------------------------------- conversation store

_RECORD_ADAPTER: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
_ENTRY_ADAPTER: TypeAdapter[ConversationEntry] = TypeAdapter(ConversationEntry)

# One lock per memlane store, shared by every MemlaneConversationStore over it, makes the
# revision check and the write one step for all writers in this process.
_write_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_write_locks_guard = threading.Lock()


def _write_lock(store: MemoryStore) -> threading.Lock:
    with _write_locks_guard:
        lock = _write_locks.get(store)
        if lock is None:
            lock = _write_locks[store] = threading.Lock()
        return lock


class MemlaneConversationStore(ConversationStore):
    """pydantic-ai's :class:`~pydantic_ai.conversation_store.ConversationStore` on a memlane store.

    Conversations saved through pydantic-ai (``conversation = await store.load(cid)``,
    ``await agent.run(prompt, conversation=conversation)``, ``await store.save(result)``) live
    in any memlane store: in memory, SQLite, files or a database server. Records go in the
    namespace ``pydantic-ai:conversations`` (keyed by conversation id), entries in
    ``pydantic-ai:entries`` (keyed by entry id), both as JSON.

    Revisions are checked and written as one step under a lock shared by every instance over
    the same store object in this process, so conflicting writers there get
    :class:`~pydantic_ai.conversation_store.ConversationConflict`. Writers in other processes
    sharing a store file are checked too, but the check and the write are two store
    operations, since memlane's store protocol has no compare-and-swap.

    ``delete`` removes the entries no remaining conversation reaches (it reads every entry to
    find them, so it is O(entries stored)).

    Args:
        memory: A :class:`~memlane.MemoryManager` or :class:`~memlane.ConversationMemory`
            (its store is used) or a :class:`~memlane.store.MemoryStore`.

    Raises:
        TypeError: ``memory`` is none of these.
    """

    RECORDS = "pydantic-ai:conversations"
    ENTRIES = "pydantic-ai:entries"

    def __init__(self, memory: MemoryManager | ConversationMemory | MemoryStore) -> None:
        store = memory.store if isinstance(memory, MemoryManager | ConversationMemory) else memory
        if not isinstance(store, MemoryStore):
            raise TypeError(
                "memory must be a MemoryManager, ConversationMemory or MemoryStore, "
                f"not {type(memory).__name__}"
            )
        self.store: MemoryStore = store
        self._lock = _write_lock(store)

    # ---------------------------------------------------------------- encoding

    @staticmethod
    def _record_id(conversation_id: str) -> str:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:pydantic-ai:{conversation_id}").hex

    def _record_entry(self, record: ConversationRecord) -> MemoryEntry:
        return MemoryEntry.model_construct(
            entry_id=self._record_id(record.conversation_id),
            scope=MemoryScope.CONVERSATION,
            key=record.conversation_id,
            content=_RECORD_ADAPTER.dump_python(record, mode="json"),
            metadata={"kind": "pydantic-ai-record"},
            created_at=utc_now(),
            expires_at=None,
            importance=0.5,
        )

    @staticmethod
    def _entry_entry(entry: ConversationEntry) -> MemoryEntry:
        return MemoryEntry.model_construct(
            entry_id=uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:pydantic-ai-entry:{entry.id}").hex,
            scope=MemoryScope.CONVERSATION,
            key=entry.id,
            content=_ENTRY_ADAPTER.dump_python(entry, mode="json"),
            metadata={"kind": "pydantic-ai-entry", "parent_id": entry.parent_id},
            created_at=utc_now(),
            expires_at=None,
            importance=0.5,
        )

    @staticmethod
    def _record(stored: MemoryEntry | None) -> ConversationRecord | None:
        return None if stored is None else _RECORD_ADAPTER.validate_python(stored.content)

    # ---------------------------------------------------------------- primitives

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of a conversation, or ``None``."""
        return self._record(await self.store.async_load_by_key(self.RECORDS, conversation_id))

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The records (of ``scope``), most recently saved first, at most ``limit``."""
        records = [
            _RECORD_ADAPTER.validate_python(e.content)
            for e in await self.store.async_load(self.RECORDS)
        ]
        records = [r for r in records if scope is None or r.scope == scope]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Stores ``new_entries`` and ``record`` if the stored revision is ``expected_revision``.

        Raises:
            ConversationConflict: The stored revision differs, or ``record.head_id`` names an
                entry that neither the store nor ``new_entries`` has.
        """
        await asyncio.to_thread(self._write_record, record, list(new_entries), expected_revision)

    def _write_record(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        with self._lock:
            stored = self._record(self.store.load_by_key(self.RECORDS, record.conversation_id))
            if (stored.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(record.conversation_id)
            head = record.head_id
            if (
                head is not None
                and head not in {e.id for e in new_entries}
                and self.store.load_by_key(self.ENTRIES, head) is None
            ):
                raise ConversationConflict(record.conversation_id)
            # Entries first, the record last: a crash in between leaves only unreachable
            # entries, which the next delete collects, never a record pointing at nothing.
            save_many = getattr(self.store, "save_many", None)
            encoded = [self._entry_entry(e) for e in new_entries]
            if save_many is not None:
                save_many(self.ENTRIES, encoded)
            else:
                for item in encoded:
                    self.store.save(self.ENTRIES, item)
            self.store.save(self.RECORDS, self._record_entry(record))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Deletes a record and the entries no remaining record's history reaches.

        Raises:
            ConversationConflict: No record with ``expected_revision`` is stored.
        """
        await asyncio.to_thread(self._delete_record, conversation_id, expected_revision)

    def _delete_record(self, conversation_id: str, expected_revision: str) -> None:
        with self._lock:
            stored_entry = self.store.load_by_key(self.RECORDS, conversation_id)
            stored = self._record(stored_entry)
            if stored_entry is None or stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            self.store.delete(self.RECORDS, stored_entry.entry_id)
            entries = self.store.load(self.ENTRIES)
            parents = {e.key: e.metadata.get("parent_id") for e in entries}
            reachable: set[str] = set()
            for rest in self.store.load(self.RECORDS):
                other = _RECORD_ADAPTER.validate_python(rest.content)
                for tip in [other.head_id, *other.branches]:
                    while tip is not None and tip not in reachable:
                        reachable.add(tip)
                        tip = parents.get(tip)
            for e in entries:
                if e.key not in reachable:
                    self.store.delete(self.ENTRIES, e.entry_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this id.

        Raises:
            KeyError: No such entry.
        """
        stored = await self.store.async_load_by_key(self.ENTRIES, entry_id)
        if stored is None:
            raise KeyError(entry_id)
        return _ENTRY_ADAPTER.validate_python(stored.content)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id``, oldest first (the last ``limit``), in one worker call."""
        return await asyncio.to_thread(self._read_history, head_id, limit)

    def _read_history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        entries: list[ConversationEntry] = []
        entry_id = head_id
        while entry_id is not None and (limit is None or len(entries) < limit):
            stored = self.store.load_by_key(self.ENTRIES, entry_id)
            if stored is None:
                raise KeyError(entry_id)
            entry = _ENTRY_ADAPTER.validate_python(stored.content)
            entries.append(entry)
            entry_id = entry.parent_id
        entries.reverse()
        return entries
