"""``ConversationMemory``: chat histories kept inside a token budget.

Turns are evicted FIFO, whole: the history is the longest run of most recent turns whose token
estimates fit ``max_tokens`` (after the rolling summary, when there is one), so a tool call
always travels with its return. Running totals and a moving window (the budget ledger, Rust
when the extension is active) make ``add_turn`` and ``get_message_history`` O(1) amortised in
the length of the conversation.

Each public method is a thin wrapper: it validates its arguments, then runs one plan of
:mod:`memlane.conversation.plan` under the conversation's lock, with blocking store calls
(``name``) or awaited ones (``async_name``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse

from memlane._locks import LockTable
from memlane._runner import Plan, Summarizer, run_async, run_sync
from memlane._validate import check_identifier, check_positive_int, check_str
from memlane.conversation.plan import ConversationLogic
from memlane.conversation.snapshot import export_snapshot, parse_snapshot
from memlane.conversation.state import ConversationState, namespace
from memlane.store import InMemoryStore, MemoryStore, dumps_json
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn

T = TypeVar("T")


def _check_messages(raw_messages: object) -> list[ModelMessage]:
    if not isinstance(raw_messages, list | tuple):
        raise TypeError(
            f"raw_messages must be a list of ModelMessage, not {type(raw_messages).__name__}"
        )
    for i, message in enumerate(raw_messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise TypeError(
                f"raw_messages[{i}] must be ModelRequest or ModelResponse, not {type(message).__name__}"
            )
    return list(raw_messages)


def _check_cid(conversation_id: object) -> str:
    return check_identifier(conversation_id, "conversation_id")


class ConversationMemory(ConversationLogic):
    """Chat histories kept inside a token budget, with optional rolling summaries.

    Every method has an ``async_`` twin that runs the same logic with awaited store calls.
    Sync callers in threads and async callers on event loops may mix freely on one
    conversation: each operation holds the conversation's lock, so turn ids are unique and
    in commit order.

    Args:
        max_tokens: Budget of the history returned by :meth:`get_message_history`.
        summarize_threshold: When the retained turns of a conversation total more tokens than
            this and a ``summarizer`` is set, the oldest turns are folded into the summary
            until the total is back under it (the newest turn always stays).
        estimator: Counts tokens; exact ``o200k_base`` by default.
        summarizer: ``summarizer(turns) -> str`` (or an awaitable of it); ``None``: never
            summarise. It receives the previous summary (if any) as a leading turn with an
            empty ``user_prompt`` and ``metadata={"summary": True}``, then the evicted turns.
        store: Where turns and summaries persist; a private in-memory store by default. On a
            persistent store a new instance after a restart returns the identical history.

    Raises:
        TypeError: A budget that is not an ``int``, or a summarizer that is not callable.
        ValueError: A budget that is not positive.
    """

    def __init__(
        self,
        *,
        max_tokens: int = 4096,
        summarize_threshold: int = 3072,
        estimator: TokenEstimator | None = None,
        summarizer: Summarizer | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        self.max_tokens = check_positive_int(max_tokens, "max_tokens")
        self.summarize_threshold = check_positive_int(summarize_threshold, "summarize_threshold")
        if summarizer is not None and not callable(summarizer):
            raise TypeError(f"summarizer must be callable, not {type(summarizer).__name__}")
        self.estimator = estimator if estimator is not None else TokenEstimator()
        self.summarizer = summarizer
        bind_estimator = getattr(summarizer, "bind_estimator", None)
        if callable(bind_estimator):
            bind_estimator(self.estimator)
        self.store: MemoryStore = store if store is not None else InMemoryStore()
        # Turns are mirrored into the store only where they outlive the process; an in-memory
        # store would just hold a second copy of what the cached state already has.
        self._persistent = bool(getattr(self.store, "persistent", True))
        self._states: dict[str, ConversationState] = {}
        self._locks = LockTable()

    def _summarizes(self) -> bool:
        return self.summarizer is not None

    @staticmethod
    def namespace(conversation_id: str) -> str:
        """The store namespace of a conversation."""
        return namespace(conversation_id)

    # ------------------------------------------------------------------ the two runners

    def _run(self, cid: str, plan: Plan[T]) -> T:
        with self._locks[cid]:
            return run_sync(plan, self.store, self.summarizer)

    async def _arun(self, cid: str, plan: Plan[T]) -> T:
        async with self._locks[cid]:
            return await run_async(plan, self.store, self.summarizer)

    def _read(self, cid: str, read: Callable[[ConversationState | None], T]) -> T:
        with self._locks[cid]:
            # Reads are the hot path; a state already in hand makes the plan a no-op.
            state = self._states.get(cid)
            if state is not None or not self._persistent:
                return read(state)
            return run_sync(self._read_plan(cid, read), self.store)

    async def _aread(self, cid: str, read: Callable[[ConversationState | None], T]) -> T:
        async with self._locks[cid]:
            state = self._states.get(cid)
            if state is not None or not self._persistent:
                return read(state)
            return await run_async(self._read_plan(cid, read), self.store)

    # ------------------------------------------------------------------ starting and adding

    def new_conversation(self) -> str:
        """Starts a conversation and returns its id."""
        cid = self._new_id()
        self._run(cid, self._state_plan(cid, create=True))
        return cid

    async def async_new_conversation(self) -> str:
        """Async :meth:`new_conversation`."""
        cid = self._new_id()
        await self._arun(cid, self._state_plan(cid, create=True))
        return cid

    @staticmethod
    def _new_id() -> str:
        return uuid.uuid4().hex

    def _check_turn(
        self,
        conversation_id: object,
        user_prompt: object,
        assistant_response: object,
        raw_messages: object,
        metadata: object,
    ) -> tuple[str, list[ModelMessage] | None, int]:
        """Validates add_turn's arguments before anything is stored; counts the turn."""
        cid = _check_cid(conversation_id)
        prompt = check_str(user_prompt, "user_prompt")
        response = check_str(assistant_response, "assistant_response")
        messages = None if raw_messages is None else _check_messages(raw_messages)
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise TypeError(f"metadata must be dict, not {type(metadata).__name__}")
            if self._persistent:
                dumps_json(metadata, key=None, field="metadata")
        return cid, messages, self._count(prompt, response, messages)

    def add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """Appends a turn (creating the conversation if needed) and keeps the budget.

        Args:
            conversation_id: The conversation; an unknown id starts a new one.
            user_prompt: What the user said.
            assistant_response: What the assistant answered.
            raw_messages: The turn's pydantic-ai messages (tool calls included); built from
                the two strings when omitted.
            metadata: Free-form annotations stored with the turn.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            TypeError: An argument of the wrong type (nothing is stored).
            UnstorableValueError: ``metadata`` cannot be persisted (nothing is stored).
        """
        cid, messages, tokens = self._check_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata
        )
        plan = self._add_turn_plan(cid, user_prompt, assistant_response, messages, metadata, tokens)
        return self._run(cid, plan)

    async def async_add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """Async :meth:`add_turn`; store I/O and an async summarizer are awaited."""
        cid, messages, tokens = self._check_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata
        )
        plan = self._add_turn_plan(cid, user_prompt, assistant_response, messages, metadata, tokens)
        return await self._arun(cid, plan)

    # ------------------------------------------------------------------ reading

    def get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """The messages to send with the next request: summary first, then whole recent turns.

        The estimates of what is returned sum to at most ``max_tokens``. An unknown
        conversation has an empty history.
        """
        cid = _check_cid(conversation_id)
        return self._read(cid, _history)

    async def async_get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """Async :meth:`get_message_history`."""
        cid = _check_cid(conversation_id)
        return await self._aread(cid, _history)

    def get_history_tokens(self, conversation_id: str) -> int:
        """Estimated tokens of :meth:`get_message_history` (summary included)."""
        cid = _check_cid(conversation_id)
        return self._read(cid, _tokens)

    async def async_get_history_tokens(self, conversation_id: str) -> int:
        """Async :meth:`get_history_tokens`."""
        cid = _check_cid(conversation_id)
        return await self._aread(cid, _tokens)

    def get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Retained turns (not yet summarised), oldest first."""
        cid = _check_cid(conversation_id)
        return self._read(cid, _turns)

    async def async_get_turns(self, conversation_id: str) -> list[ConversationTurn]:
        """Async :meth:`get_turns`."""
        cid = _check_cid(conversation_id)
        return await self._aread(cid, _turns)

    def get_total_tokens(self, conversation_id: str) -> int:
        """Sum of the token estimates of the retained turns (the summary excluded)."""
        cid = _check_cid(conversation_id)
        return self._read(cid, _total)

    async def async_get_total_tokens(self, conversation_id: str) -> int:
        """Async :meth:`get_total_tokens`."""
        cid = _check_cid(conversation_id)
        return await self._aread(cid, _total)

    def get_summary(self, conversation_id: str) -> str | None:
        """The rolling summary of evicted turns, or ``None``."""
        cid = _check_cid(conversation_id)
        return self._read(cid, _summary)

    async def async_get_summary(self, conversation_id: str) -> str | None:
        """Async :meth:`get_summary`."""
        cid = _check_cid(conversation_id)
        return await self._aread(cid, _summary)

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of every known conversation (in this process and in the store)."""
        return run_sync(self._ids_plan(), self.store)

    async def async_conversation_ids(self) -> list[str]:
        """Async :attr:`conversation_ids`."""
        return await run_async(self._ids_plan(), self.store)

    # ------------------------------------------------------------------ forgetting

    def clear(self, conversation_id: str) -> None:
        """Forgets a conversation, in memory and in the store."""
        cid = _check_cid(conversation_id)
        self._run(cid, self._clear_plan(cid))

    async def async_clear(self, conversation_id: str) -> None:
        """Async :meth:`clear`."""
        cid = _check_cid(conversation_id)
        await self._arun(cid, self._clear_plan(cid))

    def clear_all(self) -> None:
        """Forgets every conversation."""
        for cid in self.conversation_ids:
            self.clear(cid)

    async def async_clear_all(self) -> None:
        """Async :meth:`clear_all`."""
        for cid in await self.async_conversation_ids():
            await self.async_clear(cid)

    # ------------------------------------------------------------------ export / import

    def export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """A JSON-ready snapshot of a conversation.

        Returns:
            ``conversation_id``, ``turns`` (``turn_id``, ``user_prompt``,
            ``assistant_response``, ``token_estimate``, ``metadata``, ``timestamp`` and
            ``raw_messages`` serialised with pydantic-ai's ``ModelMessagesTypeAdapter``),
            ``summary``, ``summary_created_at``, ``summarized_turns`` and ``total_tokens``.

        Raises:
            ConversationNotFoundError: (a ``KeyError``) the id is unknown.
        """
        cid = _check_cid(conversation_id)
        return self._run(cid, self._export_plan(cid))

    async def async_export_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Async :meth:`export_conversation`."""
        cid = _check_cid(conversation_id)
        return await self._arun(cid, self._export_plan(cid))

    def _export_plan(self, cid: str) -> Plan[dict[str, Any]]:
        state = yield from self._existing_plan(cid)
        return export_snapshot(cid, state)

    def import_conversation(
        self, data: dict[str, Any], *, conversation_id: str | None = None
    ) -> str:
        """Loads an :meth:`export_conversation` snapshot; returns the conversation id.

        Missing token estimates are re-computed; turns without ``raw_messages`` are rebuilt
        from their prompt and response. The whole snapshot is validated before anything is
        stored.

        Args:
            data: The snapshot.
            conversation_id: Import under this id instead of the snapshot's (or a new one).

        Raises:
            ValueError: The snapshot is malformed, or the id already holds a conversation
                (nothing is overwritten).
        """
        snapshot = parse_snapshot(data, self.estimator)
        cid = _check_cid(snapshot.target_id(conversation_id))
        return self._run(cid, self._import_plan(cid, snapshot))

    async def async_import_conversation(
        self, data: dict[str, Any], *, conversation_id: str | None = None
    ) -> str:
        """Async :meth:`import_conversation`."""
        snapshot = parse_snapshot(data, self.estimator)
        cid = _check_cid(snapshot.target_id(conversation_id))
        return await self._arun(cid, self._import_plan(cid, snapshot))


def _history(state: ConversationState | None) -> list[ModelMessage]:
    return [] if state is None else state.history()


def _turns(state: ConversationState | None) -> list[ConversationTurn]:
    return [] if state is None else state.turns()


def _total(state: ConversationState | None) -> int:
    return 0 if state is None else int(state.ledger.total)


def _summary(state: ConversationState | None) -> str | None:
    return None if state is None else state.summary


def _tokens(state: ConversationState | None) -> int:
    return 0 if state is None else state.history_tokens
