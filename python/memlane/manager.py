"""MemoryManager: conversation memory and working memory composed over one store."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from memlane.conversation.memory import ConversationMemory
from memlane.longterm.memory import LongTermMemory
from memlane.stores.in_memory import InMemoryStore
from memlane.tokens import TokenEstimator
from memlane.working import WorkingMemory

if TYPE_CHECKING:
    from memlane._runner import Summarizer
    from memlane.config import MemlaneSettings
    from memlane.longterm.extraction import FactExtractor
    from memlane.longterm.storage import EmbedderLike
    from memlane.stores.protocol import MemoryStore
    from memlane.strategies import LongTermStrategy

# The settings (pydantic-settings and every store they can name), strategies and fact
# extraction (pydantic-ai) are imported by the managers that use them.

P = ParamSpec("P")
R = TypeVar("R")


def _delegate(
    attribute: str, method: Callable[Concatenate[Any, P], R]
) -> Callable[Concatenate[MemoryManager, P], R]:
    """A manager method that calls ``method`` on the memory in ``attribute``.

    It carries ``method``'s name, signature and docstring, so the facade never restates a
    signature that could drift from the memory's.
    """
    name = method.__name__
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(method):

        async def wrapper(self: MemoryManager, /, *args: Any, **kwargs: Any) -> Any:
            return await getattr(getattr(self, attribute), name)(*args, **kwargs)

    else:

        def wrapper(self: MemoryManager, /, *args: Any, **kwargs: Any) -> Any:
            return getattr(getattr(self, attribute), name)(*args, **kwargs)

    functools.update_wrapper(wrapper, method)
    wrapper.__qualname__ = f"MemoryManager.{name}"
    return cast("Callable[Concatenate[MemoryManager, P], R]", wrapper)


_STORE_METHODS = ("save", "load", "load_by_key", "delete", "clear", "async_save", "async_load")


def _check_store(store: object) -> MemoryStore:
    """Rejects a store that is not one, at construction rather than at first use."""
    missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
    if missing:
        raise TypeError(
            f"store must be a MemoryStore (InMemoryStore, SQLiteStore, FileStore, PostgreSQLStore, "
            f"MongoDBStore, ...), not {type(store).__name__} {store!r}: it has no {', '.join(missing)}"
        )
    # Only the methods every plan calls are checked: a MemoryStore is a Protocol too wide to
    # verify member by member at each construction, and a missing rarer method still fails,
    # naming itself, on first use.
    return cast("MemoryStore", store)


class MemoryManager:
    """The facade an agent host uses: conversations plus a working-memory scope, one store.

    Args:
        store: Shared by both memories; a private :class:`~memlane.store.InMemoryStore` by
            default.
        max_conversation_tokens: Budget of each conversation's history.
        summarize_threshold: Token total of retained turns above which, with a
            ``summarizer``, the oldest turns are folded into the rolling summary; ``None``:
            ``min(3072, max_conversation_tokens * 3 // 4)``, as on
            :class:`~memlane.ConversationMemory`.
        working_scope_id: Scope of this manager's working memory.
        summarizer: ``summarizer(turns) -> str``; ``None``: never summarise.
        estimator: Counts tokens; exact ``o200k_base`` by default.
        summarize_in_background: Summarise after ``add_turn`` returns (see
            :class:`~memlane.ConversationMemory`); :meth:`flush` waits for it.
        max_cached_conversations: Conversations kept in memory over a persistent store.
        long_term: ``True``: a :class:`~memlane.longterm.LongTermMemory` on this store, as
            :attr:`long_term`; a ``LongTermMemory``: that one; ``False``: none (unless a
            ``fact_extractor`` is given, which needs one).
        fact_extractor: Facts found in turns that leave the history go to :attr:`long_term`
            in the background (see :class:`~memlane.ConversationMemory`).
        fact_scope: The scope extracted facts are remembered in (``global`` by default).
        fact_scope_id: Its id (required for every scope but ``global``).
        retain_transcript: Keep summarised turns in the store for :meth:`get_transcript`
            (see :class:`~memlane.ConversationMemory`).
        conversation_ttl: Seconds (or a ``timedelta``) a conversation may stay idle before
            it is gone as a whole, on every store (see :class:`~memlane.ConversationMemory`).
        short_term: Short-term strategies of every conversation (see
            :class:`~memlane.ConversationMemory`).
        long_term_strategy: A summarizer or neuralyzer strategy (see
            :class:`~memlane.ConversationMemory`); also accepted as ``long_term``.
        embedder: Search long-term memory by meaning: a pydantic-ai ``Embedder`` or
            ``EmbeddingModel``, a model name, or ``"local"`` (see
            :class:`~memlane.longterm.LongTermMemory`). It turns long-term memory on (as
            ``long_term=True``) and makes past conversations searchable by meaning
            (:meth:`search_transcripts`). A ``LongTermMemory`` given as ``long_term`` keeps
            its own embedder (``LongTermMemory(store, embedder=...)``); this one then serves
            the conversations only. :meth:`flush` also waits for the vectors.

    Raises:
        TypeError: ``embedder`` is not one (names it).
        ValueError: ``embedder`` is an unknown name (names it).
    """

    def __init__(
        self,
        *,
        store: MemoryStore | None = None,
        max_conversation_tokens: int = 128_000,
        summarize_threshold: int | None = None,
        working_scope_id: str = "default",
        summarizer: Summarizer | None = None,
        estimator: TokenEstimator | None = None,
        summarize_in_background: bool = False,
        max_cached_conversations: int = 10_000,
        long_term: bool | LongTermMemory | LongTermStrategy | dict[str, Any] | str = False,
        fact_extractor: FactExtractor | None = None,
        fact_scope: str = "global",
        fact_scope_id: str | None = None,
        retain_transcript: bool = True,
        conversation_ttl: float | timedelta | None = None,
        short_term: Any = None,
        long_term_strategy: Any = None,
        embedder: EmbedderLike | None = None,
    ) -> None:
        self._store: MemoryStore = _check_store(store) if store is not None else InMemoryStore()
        self._owns_store = store is None
        if not isinstance(long_term, bool | LongTermMemory):
            # A long-term strategy (or its JSON) given as long_term, as platforms name it.
            if long_term_strategy is not None:
                raise TypeError("pass the long-term strategy as long_term or long_term_strategy")
            long_term_strategy, long_term = long_term, False
        if isinstance(long_term, LongTermMemory):
            self._long_term: LongTermMemory | None = long_term
        elif isinstance(long_term, bool):
            # An extractor's facts have to go somewhere, and an embedder is for long-term
            # memory: either turns it on.
            wanted = long_term or fact_extractor is not None or embedder is not None
            self._long_term = LongTermMemory(self._store, embedder=embedder) if wanted else None
        else:
            raise TypeError(  # pragma: no cover  # every other value is a strategy above
                f"long_term must be bool or LongTermMemory, not {type(long_term).__name__}"
            )
        self._conversation = ConversationMemory(
            max_tokens=max_conversation_tokens,
            summarize_threshold=summarize_threshold,
            estimator=estimator,
            summarizer=summarizer,
            store=self._store,
            summarize_in_background=summarize_in_background,
            max_cached_conversations=max_cached_conversations,
            fact_extractor=fact_extractor,
            retain_transcript=retain_transcript,
            conversation_ttl=conversation_ttl,
            short_term=short_term,
            long_term_strategy=long_term_strategy,
            long_term=self._long_term,
            fact_scope=fact_scope,
            fact_scope_id=fact_scope_id,
            embedder=embedder,
        )
        self._working = WorkingMemory(store=self._store, scope_id=working_scope_id)

    @classmethod
    def from_config(
        cls, settings: MemlaneSettings | None = None, *, read_only: bool = False, **kwargs: Any
    ) -> MemoryManager:
        """A manager on the store ``MEMLANE_*`` variables describe, connected and ready.

        A database store is initialised here (connected, schema migrated), on the private
        loop its sync methods use; see :mod:`memlane.config` for the variables.

        Args:
            settings: Use these instead of reading the environment.
            read_only: Open the existing store for reading only (what a command that only
                reads wants): nothing is created, migrated or written, and every write
                raises :class:`~memlane.errors.ReadOnlyStoreError`.
            **kwargs: Passed to the constructor (``summarizer=``, ``working_scope_id=``,
                ...); they win over the settings.

        Raises:
            ValueError: A configuration problem; the message names the variable.
            StoreConnectionError: The database cannot be reached.
            NotAStoreError: ``read_only`` and the store does not exist (names it).
        """
        from memlane.config import MemlaneSettings, create_store

        settings = settings if settings is not None else MemlaneSettings.from_env()
        store = create_store(settings, read_only=read_only)
        try:
            store.initialize()
            manager = cls(store=store, **cls._options(settings, kwargs))
        except BaseException:
            store.close()
            raise
        manager._owns_store = True
        return manager

    @classmethod
    async def async_from_config(
        cls, settings: MemlaneSettings | None = None, *, read_only: bool = False, **kwargs: Any
    ) -> MemoryManager:
        """Async :meth:`from_config`: a database store is initialised on the running loop."""
        from memlane.config import MemlaneSettings, create_store

        settings = settings if settings is not None else MemlaneSettings.from_env()
        store = create_store(settings, read_only=read_only)
        try:
            await store.async_initialize()
            manager = cls(store=store, **cls._options(settings, kwargs))
        except BaseException:
            await store.async_close()
            raise
        manager._owns_store = True
        return manager

    afrom_config = async_from_config
    """The earlier name of :meth:`async_from_config`, kept so existing code runs."""

    @staticmethod
    def _options(settings: MemlaneSettings, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {
            "max_conversation_tokens": settings.max_conversation_tokens,
            "summarize_threshold": settings.summarize_threshold,
            "summarize_in_background": settings.summarize_in_background,
            "max_cached_conversations": settings.max_cached_conversations,
            "retain_transcript": settings.retain_transcript,
            "conversation_ttl": settings.conversation_ttl,
            "short_term": settings.short_term_strategy,
            "long_term_strategy": settings.long_term_strategy,
            **({"embedder": settings.embedder} if settings.embedder is not None else {}),
            **kwargs,
        }

    @classmethod
    def _compose(cls, conversation: ConversationMemory, working: WorkingMemory) -> MemoryManager:
        manager = cls.__new__(cls)
        manager._store = conversation.store
        manager._owns_store = False  # the manager it was forked from closes it
        manager._conversation = conversation
        manager._working = working
        manager._long_term = None
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
    def long_term(self) -> LongTermMemory | None:
        """The long-term memory (facts, episodes, procedures, users), or ``None``."""
        return self._long_term

    @property
    def store(self) -> MemoryStore:
        """The store both memories use."""
        return self._store

    def fork(self, *, working_scope_id: str) -> MemoryManager:
        """A manager sharing conversations and store, with its own working-memory scope.

        Delegated agents get a fork: they see the conversation and the long-term memory, but
        keep their own working-memory facts.
        """
        fork = self._compose(
            self._conversation, WorkingMemory(store=self._store, scope_id=working_scope_id)
        )
        fork._long_term = self._long_term
        return fork

    # -------------------------------------------------------------- conversations

    new_conversation = _delegate("_conversation", ConversationMemory.new_conversation)
    async_new_conversation = _delegate("_conversation", ConversationMemory.async_new_conversation)
    add_turn = _delegate("_conversation", ConversationMemory.add_turn)
    async_add_turn = _delegate("_conversation", ConversationMemory.async_add_turn)
    get_message_history = _delegate("_conversation", ConversationMemory.get_message_history)
    async_get_message_history = _delegate(
        "_conversation", ConversationMemory.async_get_message_history
    )
    get_turns = _delegate("_conversation", ConversationMemory.get_turns)
    get_transcript = _delegate("_conversation", ConversationMemory.get_transcript)
    async_get_transcript = _delegate("_conversation", ConversationMemory.async_get_transcript)
    async_get_turns = _delegate("_conversation", ConversationMemory.async_get_turns)
    get_history_tokens = _delegate("_conversation", ConversationMemory.get_history_tokens)
    async_get_history_tokens = _delegate(
        "_conversation", ConversationMemory.async_get_history_tokens
    )
    get_total_tokens = _delegate("_conversation", ConversationMemory.get_total_tokens)
    async_get_total_tokens = _delegate("_conversation", ConversationMemory.async_get_total_tokens)
    get_summary = _delegate("_conversation", ConversationMemory.get_summary)
    async_get_summary = _delegate("_conversation", ConversationMemory.async_get_summary)
    pin_turn = _delegate("_conversation", ConversationMemory.pin_turn)
    async_pin_turn = _delegate("_conversation", ConversationMemory.async_pin_turn)
    summarize_now = _delegate("_conversation", ConversationMemory.summarize_now)
    async_summarize_now = _delegate("_conversation", ConversationMemory.async_summarize_now)
    summary_status = _delegate("_conversation", ConversationMemory.summary_status)
    async_summary_status = _delegate("_conversation", ConversationMemory.async_summary_status)
    export_conversation = _delegate("_conversation", ConversationMemory.export_conversation)
    async_export_conversation = _delegate(
        "_conversation", ConversationMemory.async_export_conversation
    )
    import_conversation = _delegate("_conversation", ConversationMemory.import_conversation)
    async_import_conversation = _delegate(
        "_conversation", ConversationMemory.async_import_conversation
    )
    cleanup_expired_conversations = _delegate(
        "_conversation", ConversationMemory.cleanup_expired_conversations
    )
    async_cleanup_expired_conversations = _delegate(
        "_conversation", ConversationMemory.async_cleanup_expired_conversations
    )
    search_transcripts = _delegate("_conversation", ConversationMemory.search_transcripts)
    async_search_transcripts = _delegate(
        "_conversation", ConversationMemory.async_search_transcripts
    )
    extract_facts = _delegate("_conversation", ConversationMemory.extract_facts)
    async_extract_facts = _delegate("_conversation", ConversationMemory.async_extract_facts)

    def flush(self) -> None:
        """Waits for the conversations' background work (summaries, fact extraction), then
        for the long-term memory's vectors (with an embedder)."""
        self._conversation.flush()
        if self._long_term is not None:
            self._long_term.flush()

    async def async_flush(self) -> None:
        """Async :meth:`flush`."""
        await self._conversation.async_flush()
        if self._long_term is not None:
            await self._long_term.async_flush()

    def clear_conversation(self, conversation_id: str) -> None:
        """Forgets one conversation."""
        self._conversation.clear(conversation_id)

    async def async_clear_conversation(self, conversation_id: str) -> None:
        """Async :meth:`clear_conversation`."""
        await self._conversation.async_clear(conversation_id)

    # -------------------------------------------------------------- working memory

    def set_fact(self, key: str, value: Any, **kwargs: Any) -> None:
        """Stores a fact in this manager's scope (``importance=``, ``ttl=`` accepted)."""
        self._working.set(key, value, **kwargs)

    async def async_set_fact(self, key: str, value: Any, **kwargs: Any) -> None:
        """Async :meth:`set_fact`."""
        await self._working.async_set(key, value, **kwargs)

    def get_fact(self, key: str, default: Any = None) -> Any:
        """A fact of this manager's scope, or ``default``."""
        return self._working.get(key, default)

    async def async_get_fact(self, key: str, default: Any = None) -> Any:
        """Async :meth:`get_fact`."""
        return await self._working.async_get(key, default)

    def get_working_context(self) -> str:
        """The facts as prompt text (``""`` when there are none)."""
        return self._working.to_context_string()

    async def async_get_working_context(self) -> str:
        """Async :meth:`get_working_context`."""
        return await self._working.async_to_context_string()

    def clear_working(self) -> None:
        """Forgets this scope's facts."""
        self._working.clear()

    async def async_clear_working(self) -> None:
        """Async :meth:`clear_working`."""
        await self._working.async_clear()

    def clear_all(self) -> None:
        """Forgets every conversation and this scope's facts."""
        self._conversation.clear_all()
        self._working.clear()

    async def async_clear_all(self) -> None:
        """Async :meth:`clear_all`."""
        await self._conversation.async_clear_all()
        await self._working.async_clear()

    # -------------------------------------------------------------- closing

    def close(self) -> None:
        """Waits for background summaries (and long-term vectors), then closes the store if
        this manager made it (``from_config``, or the default in-memory store); a store passed
        in stays open."""
        self._conversation.close()
        if self._long_term is not None:
            self._long_term.flush()
        if self._owns_store:
            self._store.close()

    async def async_close(self) -> None:
        """Async :meth:`close`."""
        await self._conversation.async_close()
        if self._long_term is not None:
            await self._long_term.async_flush()
        if self._owns_store:
            await self._store.async_close()
