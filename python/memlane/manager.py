"""MemoryManager: conversation memory and working memory composed over one store."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ModelMessage

from memlane.config import MemlaneSettings, create_store
from memlane.conversation import ConversationMemory, Summarizer
from memlane.store import InMemoryStore, MemoryStore
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn
from memlane.working import WorkingMemory


class MemoryManager:
    """The facade an agent host uses: conversations plus a working-memory scope, one store.

    Args:
        store: Shared by both memories; a private :class:`~memlane.store.InMemoryStore` by
            default.
        max_conversation_tokens: Budget of each conversation's history.
        summarize_threshold: Token total of retained turns above which, with a
            ``summarizer``, the oldest turns are folded into the rolling summary.
        working_scope_id: Scope of this manager's working memory.
        summarizer: ``summarizer(turns) -> str``; ``None``: never summarise.
        estimator: Counts tokens; exact ``o200k_base`` by default.
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        max_conversation_tokens: int = 128_000,
        summarize_threshold: int = 10,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
        estimator: TokenEstimator | None = None,
    ) -> None:
        self._store: MemoryStore = store if store is not None else InMemoryStore()
        self._conversation = ConversationMemory(
            max_tokens=max_conversation_tokens,
            summarize_threshold=summarize_threshold,
            estimator=estimator,
            summarizer=summarizer,
            store=self._store,
        )
        self._working = WorkingMemory(store=self._store, scope_id=working_scope_id)

    @classmethod
    def from_config(cls, settings: MemlaneSettings | None = None, **kwargs: Any) -> MemoryManager:
        """A manager on the store ``MEMLANE_*`` variables describe, connected and ready.

        A database store is initialised here (connected, schema migrated), on the private
        loop its sync methods use; see :mod:`memlane.config` for the variables.

        Args:
            settings: Use these instead of reading the environment.
            **kwargs: Passed to the constructor (``summarizer=``, ``working_scope_id=``,
                ...); they win over the settings.

        Raises:
            ValueError: A configuration problem; the message names the variable.
            StoreConnectionError: The database cannot be reached.
        """
        settings = settings if settings is not None else MemlaneSettings.from_env()
        store = create_store(settings)
        initialize_sync = getattr(store, "initialize_sync", None)
        if initialize_sync is not None:
            initialize_sync()
        options: dict[str, Any] = {
            "max_conversation_tokens": settings.max_conversation_tokens,
            "summarize_threshold": settings.summarize_threshold,
            **kwargs,
        }
        return cls(store=store, **options)

    @classmethod
    async def afrom_config(
        cls, settings: MemlaneSettings | None = None, **kwargs: Any
    ) -> MemoryManager:
        """Async :meth:`from_config`: a database store is initialised on the running loop."""
        settings = settings if settings is not None else MemlaneSettings.from_env()
        store = create_store(settings)
        initialize = getattr(store, "initialize", None)
        if initialize is not None:
            await initialize()
        options: dict[str, Any] = {
            "max_conversation_tokens": settings.max_conversation_tokens,
            "summarize_threshold": settings.summarize_threshold,
            **kwargs,
        }
        return cls(store=store, **options)

    @classmethod
    def _compose(cls, conversation: ConversationMemory, working: WorkingMemory) -> MemoryManager:
        manager = cls.__new__(cls)
        manager._store = conversation.store
        manager._conversation = conversation
        manager._working = working
        return manager

    @property
    def conversation(self) -> ConversationMemory:
        """The conversation memory."""
        return self._conversation

    @property
    def working(self) -> WorkingMemory:
        """This manager's working-memory scope."""
        return self._working

    @property
    def store(self) -> MemoryStore:
        """The store both memories use."""
        return self._store

    def fork(self, *, working_scope_id: str) -> MemoryManager:
        """A manager sharing conversations and store, with its own working-memory scope.

        Delegated agents get a fork: they see the conversation, but keep their own facts.
        """
        return self._compose(
            self._conversation, WorkingMemory(store=self._store, scope_id=working_scope_id)
        )

    # -------------------------------------------------------------- conversations

    def new_conversation(self) -> str:
        """Starts a conversation and returns its id."""
        return self._conversation.new_conversation()

    def add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """See :meth:`ConversationMemory.add_turn`."""
        return self._conversation.add_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata=metadata
        )

    async def async_add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ) -> ConversationTurn:
        """See :meth:`ConversationMemory.async_add_turn`."""
        return await self._conversation.async_add_turn(
            conversation_id, user_prompt, assistant_response, raw_messages, metadata=metadata
        )

    def get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """See :meth:`ConversationMemory.get_message_history`."""
        return self._conversation.get_message_history(conversation_id)

    async def async_get_message_history(self, conversation_id: str) -> list[ModelMessage]:
        """See :meth:`ConversationMemory.async_get_message_history`."""
        return await self._conversation.async_get_message_history(conversation_id)

    def clear_conversation(self, conversation_id: str) -> None:
        """Forgets one conversation."""
        self._conversation.clear(conversation_id)

    # -------------------------------------------------------------- working memory

    def set_fact(self, key: str, value: Any, **kwargs: Any) -> None:
        """Stores a fact in this manager's scope (``importance=``, ``ttl=`` accepted)."""
        self._working.set(key, value, **kwargs)

    def get_fact(self, key: str, default: Any = None) -> Any:
        """A fact of this manager's scope, or ``default``."""
        return self._working.get(key, default)

    def get_working_context(self) -> str:
        """The facts as prompt text (``""`` when there are none)."""
        return self._working.to_context_string()

    def clear_working(self) -> None:
        """Forgets this scope's facts."""
        self._working.clear()

    def clear_all(self) -> None:
        """Forgets every conversation and this scope's facts."""
        self._conversation.clear_all()
        self._working.clear()
