"""``ConversationMemory``: chat histories kept inside a token budget.

Turns are evicted FIFO, whole: the history is the longest run of most recent turns whose token
estimates fit ``max_tokens`` (after the rolling summary, when there is one), so a tool call
always travels with its return. Running totals and a moving window (the budget ledger, Rust
when the extension is active) make ``add_turn`` and ``get_message_history`` O(1) amortised in
the length of the conversation.

The memory holds its collaborators: its conversations' states and locks
(:class:`~memlane.conversation.conversation_cache.ConversationCache`), its summaries
(:class:`~memlane.conversation.rolling_summary.RollingSummaries`, with the fact extraction
and the background jobs) and its reads
(:class:`~memlane.conversation.history_reads.HistoryReads`). Each public operation is written
once, as a plan method ``_name`` that validates its arguments, takes the conversation's lock
and runs the plans of those parts and of :mod:`memlane.conversation.turn_plans`; ``name`` and
``async_name`` are generated from it, and the plan method is not kept on the class.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from memlane._deprecation import deprecated_twins
from memlane._runner import (
    Done,
    Plan,
    Release,
    Step,
    Summarizer,
    async_method,
    describe,
    run_sync,
    sync_method,
)
from memlane._validate import check_positive_int, check_str, check_ttl
from memlane.conversation import extraction_jobs as extraction_plans
from memlane.conversation import history_reads as reads
from memlane.conversation import snapshot_plans
from memlane.conversation import summary_controls as controls
from memlane.conversation.conversation_budget import ConversationBudget
from memlane.conversation.conversation_cache import check_cid
from memlane.conversation.conversation_log import namespace
from memlane.conversation.extraction_jobs import check_extraction
from memlane.conversation.history_reads import reader_methods
from memlane.conversation.memory_options import (
    build_parts,
    check_fact_scope,
    check_flag,
    check_short_term_option,
    resolve_summarizer,
    split_long_term,
    summarizer_strategy,
)
from memlane.conversation.rolling_summary import default_threshold
from memlane.conversation.transcript_methods import forget_copies, transcript_methods
from memlane.conversation.transcript_search import TranscriptSearch, expired_copies_plan
from memlane.conversation.turn_plans import (
    NewTurn,
    add_turn_now,
    add_turn_plan,
    checked_turn,
    transcript_plan,
)
from memlane.stores._base import read_only_error
from memlane.stores.memory import InMemoryStore
from memlane.stores.protocol import MemoryStore
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage


def _summarizer_of(memory: ConversationMemory) -> Summarizer | None:
    """The summarizer the runner gives the plans of ``memory`` that summarise."""
    return memory._summaries.summarizer


class ConversationMemory:
    """Chat histories kept inside a token budget, with optional rolling summaries.

    Every method has an ``async_`` twin generated from the same plan, with awaited store
    calls.
    Sync callers in threads and async callers on event loops may mix freely on one
    conversation: each operation holds the conversation's lock, so turn ids are unique and
    in commit order.

    Args:
        max_tokens: Budget of the history returned by :meth:`get_message_history`.
        summarize_threshold: When the retained turns of a conversation total more tokens than
            this and a ``summarizer`` is set, the oldest turns are folded into the summary
            until the total is back under it. ``None`` (the default):
            ``min(3072, max_tokens * 3 // 4)``, the documented 3072 where the budget allows
            it, and at most ``max_tokens - 16`` so that it is valid with any budget. While
            a failing summarizer is backed off the oldest turns wait outside the history
            (see :meth:`summary_status`). With a summarizer the summary gets the rest of the budget
            (``max_tokens - summarize_threshold`` tokens; a longer one is cut), so every
            turn is either in the history sent or folded into the summary: a turn that no
            longer fits the history beside the summary is folded in too. It must then be
            below ``max_tokens``.
        estimator: Counts tokens; exact ``o200k_base`` by default.
        summarizer: ``summarizer(turns) -> str`` (or an awaitable of it); ``None``: never
            summarise. It receives the previous summary (if any) as a leading turn with an
            empty ``user_prompt`` and ``metadata={"summary": True}``, then the evicted turns.
        store: Where turns and summaries persist; a private in-memory store by default. On a
            persistent store a new instance after a restart returns the identical history,
            and instances in other processes sharing the store (a fleet of hosts) see every
            turn any of them committed, in one order with the same turn ids: each read
            checks the store for news with one indexed read, and turns and summaries are
            written with conditional writes.
        summarize_in_background: Return from ``add_turn`` as soon as the turn is stored and
            summarise afterwards: an async summarizer as a task on the caller's event loop,
            a blocking one in a worker thread (also for async callers); at most one summary
            per conversation is in flight in this process. :meth:`flush` waits for them;
            meanwhile the history still fits ``max_tokens``.
        max_cached_conversations: With a persistent store, how many conversations to keep
            in memory (least recently used evicted; reloading one is correct and reads only
            what is kept). An in-memory store keeps every conversation: it is the store.
        fact_extractor: A :meth:`~memlane.longterm.FactExtractor.from_config` extractor: turns
            that leave the history (its budget window, or into the summary) are given to it
            in the background, and the facts it finds are merged into ``long_term`` through
            ``remember`` (a fact found again is confirmed, not duplicated). :meth:`flush`
            waits for it too.
        long_term: The :class:`~memlane.longterm.LongTermMemory` extracted facts go to
            (required with ``fact_extractor``), or a long-term strategy (below).
        short_term: Short-term strategies (:mod:`memlane.strategies`), one or a list applied
            in order, or their JSON: which interactions each read of the history sends, and
            how (e.g. ``[ToolResultClearing(keep_last=3), MemoryMaxTokensStrategy(...)]``).
            ``None``: the ``max_tokens`` window.
        long_term_strategy: A :class:`~memlane.strategies.SummarizerStrategy` or
            :class:`~memlane.strategies.NeuralyzerStrategy` (or its JSON; also accepted as
            ``long_term``): its triggers, checked after every turn, replace
            ``summarize_threshold``. A summarizer strategy folds the interactions beyond
            ``interaction_keep`` into the summary by chain of density with its ``model``
            (else with ``summarizer``); a neuralyzer erases them and the summary.
        fact_scope: The scope extracted facts are remembered in (``global`` by default).
        fact_scope_id: Its id (required for every scope but ``global``).
        retain_transcript: Keep the turns folded into the summary in the store (their own
            namespace, read only by :meth:`get_transcript`): turns leave the prompt, not the
            store. ``False`` deletes them once summarised.
        embedder: ``"local"``, a model name, a pydantic-ai ``Embedder`` or ``EmbeddingModel``
            (see :func:`~memlane.embeddings.resolve_embedder`): every committed turn is also
            kept searchable by meaning (:meth:`search_transcripts`), off the turn's path, and
            the knowledge base of a summarizer strategy is searched by meaning. The store
            must keep vectors (every store memlane ships does). The copies are what
            :meth:`search_transcripts` reads, so they stay whatever ``retain_transcript``
            says; clearing or forgetting a conversation removes them.
        conversation_ttl: Seconds (or a ``timedelta``) a conversation may stay idle: one
            without a new turn for that long is gone as a whole — turns, summary, transcript
            — on every store, for every host sharing it; reading it afterwards is reading an
            unknown id, and a new turn starts it afresh. ``None`` (the default): forever.
            :meth:`cleanup_expired_conversations` reclaims the space of those unread.

    Raises:
        TypeError: A budget that is not an ``int``, or a summarizer that is not callable.
        ValueError: A budget that is not positive, or, with a summarizer, a threshold that
            leaves the summary no room in the budget.
    """

    def __init__(
        self,
        *,
        max_tokens: int = 4096,
        summarize_threshold: int | None = None,
        estimator: TokenEstimator | None = None,
        summarizer: Summarizer | None = None,
        store: MemoryStore | None = None,
        summarize_in_background: bool = False,
        max_cached_conversations: int = 10_000,
        fact_extractor: Any = None,
        long_term: Any = None,
        fact_scope: str = "global",
        fact_scope_id: str | None = None,
        retain_transcript: bool = True,
        conversation_ttl: float | timedelta | None = None,
        short_term: Any = None,
        long_term_strategy: Any = None,
        embedder: Any = None,
    ) -> None:
        self.max_tokens = check_positive_int(max_tokens, "max_tokens")
        self.short_term = check_short_term_option(short_term)
        self.long_term_strategy, long_term = split_long_term(long_term, long_term_strategy)
        ttl = check_ttl(conversation_ttl, "conversation_ttl")
        self.conversation_ttl = None if ttl is None else ttl.total_seconds()
        self.retain_transcript = check_flag(retain_transcript, "retain_transcript")
        self.fact_extractor, self.long_term = check_extraction(fact_extractor, long_term)
        self.fact_scope, self.fact_scope_id = check_fact_scope(
            fact_extractor, fact_scope, fact_scope_id
        )
        self.summarize_in_background = check_flag(
            summarize_in_background, "summarize_in_background"
        )
        self.max_cached_conversations = check_positive_int(
            max_cached_conversations, "max_cached_conversations"
        )
        self.summarize_threshold = (
            default_threshold(self.max_tokens)
            if summarize_threshold is None
            else check_positive_int(summarize_threshold, "summarize_threshold")
        )
        self.estimator = estimator if estimator is not None else TokenEstimator()
        self.summarizer = resolve_summarizer(
            summarizer,
            self.long_term_strategy,
            self.max_tokens,
            self.summarize_threshold,
            self.estimator,
        )
        self.store: MemoryStore = store if store is not None else InMemoryStore()
        from memlane.embeddings import resolve_embedder

        self.embedder = resolve_embedder(embedder)
        self._transcripts = (
            None if self.embedder is None else TranscriptSearch(self.store, self.embedder)
        )
        self._conversations, self._summaries, self._reads = build_parts(self)

    @staticmethod
    def namespace(conversation_id: str) -> str:
        """The store namespace of a conversation."""
        return namespace(conversation_id)

    # ------------------------------------------------------------------ starting and adding

    def _new_conversation(self) -> Plan[str]:
        """Starts a conversation and returns its id."""
        cid = uuid.uuid4().hex
        yield from self._conversations.locked(cid)
        yield from self._conversations.coherent_plan(cid, create=True)
        return cid

    new_conversation = sync_method(_new_conversation)
    async_new_conversation = async_method(_new_conversation)
    del _new_conversation

    def _add_turn(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        pinned: bool = False,
    ) -> Step[ConversationTurn]:
        """Appends a turn (creating the conversation if needed) and keeps the budget.

        Args:
            conversation_id: The conversation; an unknown id starts a new one.
            user_prompt: What the user said.
            assistant_response: What the assistant answered.
            raw_messages: The turn's pydantic-ai messages (tool calls included); built from
                the two strings when omitted or empty.
            metadata: Free-form annotations stored with the turn.
            pinned: Never summarise the turn away nor trim it from the history (see
                :meth:`pin_turn`); kept as ``metadata["pinned"] = True``.

        Returns:
            The stored turn, with its ``turn_id`` and ``token_estimate``.

        Raises:
            TypeError: An argument of the wrong type (nothing is stored).
            ValueError: A pinned turn the pins could not hold within the budget.
            UnstorableValueError: ``metadata`` cannot be persisted (nothing is stored).
        """
        new = checked_turn(
            self, conversation_id, user_prompt, assistant_response, raw_messages, metadata, pinned
        )
        return _turn_step(self, new, None)

    def _add_turn_blocking(
        self,
        conversation_id: str,
        user_prompt: str,
        assistant_response: str,
        raw_messages: list[ModelMessage] | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        pinned: bool = False,
    ) -> ConversationTurn:
        # The plan's, run with blocking store calls: where nothing follows the turn, its one
        # write runs at once (add_turn_now), which only a blocking caller may do.
        new = checked_turn(
            self, conversation_id, user_prompt, assistant_response, raw_messages, metadata, pinned
        )
        store = self.store
        return run_sync(_turn_step(self, new, store), store, self._summaries.summarizer)

    # A turn may be summarised before add_turn returns, or in a job it starts.
    add_turn = describe(_add_turn_blocking, _add_turn, sync=True)
    async_add_turn = async_method(_add_turn, summarizer=_summarizer_of)
    del _add_turn, _add_turn_blocking

    # ------------------------------------------------------------------ summaries and pins

    pin_turn = sync_method(controls.pin_turn)
    async_pin_turn = async_method(controls.pin_turn)
    summarize_now = sync_method(controls.summarize_now, summarizer=_summarizer_of)
    async_summarize_now = async_method(controls.summarize_now, summarizer=_summarizer_of)
    summary_status = sync_method(controls.summary_status)
    async_summary_status = async_method(controls.summary_status)

    # ------------------------------------------------------------------ reading

    # Each reader is read(state) of one conversation under its lock (None: an unknown id).
    get_message_history, async_get_message_history = reader_methods(reads.get_message_history)
    get_history_tokens, async_get_history_tokens = reader_methods(reads.get_history_tokens)
    get_turns, async_get_turns = reader_methods(reads.get_turns)
    get_total_tokens, async_get_total_tokens = reader_methods(reads.get_total_tokens)
    get_summary, async_get_summary = reader_methods(reads.get_summary)

    def _knowledge_for(self, conversation_id: str, prompt: str) -> Plan[str | None]:
        """What the long-term strategy's knowledge base holds relevant to ``prompt``.

        With a :class:`~memlane.strategies.SummarizerStrategy` whose ``knowledge_base`` has
        ``search_mode="always"``: its ``top_k`` stored summary chunks most relevant to the
        prompt (from any conversation of the collection, ranked by the store's search), as
        one block of text for a run's instructions. ``None`` otherwise, or when nothing is
        relevant.

        Raises:
            TypeError: ``prompt`` is not a ``str``.
        """
        from memlane.conversation.knowledge import knowledge_plan

        check_cid(conversation_id)
        strategy = summarizer_strategy(self.long_term_strategy)
        return knowledge_plan(self.store, strategy, check_str(prompt, "prompt"), self.embedder)

    knowledge_for = sync_method(_knowledge_for)
    search_transcripts, async_search_transcripts = transcript_methods("ConversationMemory")
    async_knowledge_for = async_method(_knowledge_for)
    del _knowledge_for

    def _cleanup_expired_conversations(self) -> Plan[int]:
        """Removes every conversation idle past ``conversation_ttl``; how many.

        Reads already treat such a conversation as gone; this reclaims the store's space for
        those nobody asked about since (their turns, summary and transcript), and the
        searchable copies of their turns.
        """
        removed = yield from self._conversations.cleanup_plan()
        if self.conversation_ttl is not None:
            forget = partial(forget_copies, self._transcripts)
            yield from expired_copies_plan(self._conversations.ids_plan(), forget)
        return removed

    cleanup_expired_conversations = sync_method(_cleanup_expired_conversations)
    async_cleanup_expired_conversations = async_method(_cleanup_expired_conversations)
    del _cleanup_expired_conversations
    # The old names read like the store's cleanup_expired, which removes entries.
    cleanup_expired, async_cleanup_expired = deprecated_twins(
        "cleanup_expired", cleanup_expired_conversations, async_cleanup_expired_conversations
    )

    def _get_transcript(self, conversation_id: str) -> Plan[list[ConversationTurn]]:
        """Every turn ever added to a conversation, oldest first: those folded into the summary
        (kept with ``retain_transcript=True``, the default) and those still kept. ``[]`` for
        an unknown id, as :meth:`get_turns`."""
        cid = check_cid(conversation_id)
        yield from self._conversations.locked(cid)
        return (yield from transcript_plan(self._conversations, cid))

    get_transcript = sync_method(_get_transcript)
    async_get_transcript = async_method(_get_transcript)
    del _get_transcript

    def _conversation_ids(self) -> Plan[list[str]]:
        """Ids of every known conversation (in this process and in the store)."""
        return (yield from self._conversations.ids_plan())

    @property
    def conversation_ids(self) -> list[str]:
        """Ids of every known conversation (in this process and in the store)."""
        return run_sync(self._conversations.ids_plan(), self.store)

    async_conversation_ids = async_method(_conversation_ids)
    del _conversation_ids

    def _conversation_budget(self, conversation_id: str) -> Plan[ConversationBudget]:
        """The conversation's own budget: ``max_tokens`` and ``summarize_threshold`` as they
        were when it was created, kept in the store with it (this memory's values for a
        conversation stored before budgets were kept).

        Raises:
            ConversationNotFoundError: (a ``KeyError``) the id is unknown.
        """
        cid = check_cid(conversation_id)
        yield from self._conversations.locked(cid)
        state = yield from self._conversations.existing_plan(cid)
        return self._conversations.budget_of(state)

    conversation_budget = sync_method(_conversation_budget)
    async_conversation_budget = async_method(_conversation_budget)
    del _conversation_budget

    # ------------------------------------------------------------------ forgetting

    def _clear(self, conversation_id: str) -> Plan[None]:
        """Forgets a conversation, in memory and in the store, for every host.

        On a store other hosts share, one small entry records the clear: a host that had
        the conversation cached learns of it from there at its next read, and turns added
        afterwards, by any host, start a new conversation numbered from 0. With a
        ``conversation_ttl``, :meth:`cleanup_expired_conversations` removes that entry a ttl
        after the clear; without one it stays (a cache may hold the conversation for as long
        as the host runs).
        """
        cid = check_cid(conversation_id)
        yield from self._conversations.locked(cid)
        yield from self._conversations.clear_plan(cid)
        self._summaries.backoff.forget(cid)
        yield from forget_copies(self._transcripts, cid)

    clear = sync_method(_clear)
    async_clear = async_method(_clear)
    del _clear

    def _clear_all(self) -> Plan[None]:
        """Forgets every conversation."""
        if self._conversations.read_only:
            raise read_only_error(self.store)
        for cid in (yield from self._conversations.ids_plan()):
            # One conversation's lock at a time: holding them all could deadlock with a
            # caller that holds one of them.
            lock = yield from self._conversations.locked(cid)
            yield from self._conversations.clear_plan(cid)
            yield Release(lock)
            yield from forget_copies(self._transcripts, cid)

    clear_all = sync_method(_clear_all)
    async_clear_all = async_method(_clear_all)
    del _clear_all

    # ------------------------------------------------------------------ export / import

    export_conversation = sync_method(snapshot_plans.export_conversation)
    async_export_conversation = async_method(snapshot_plans.export_conversation)
    import_conversation = sync_method(snapshot_plans.import_conversation)
    async_import_conversation = async_method(snapshot_plans.import_conversation)

    extract_facts = sync_method(extraction_plans.extract_facts)
    async_extract_facts = async_method(extraction_plans.extract_facts)

    # ------------------------------------------------------------------ background jobs

    def flush(self) -> None:
        """Waits until the summaries and fact extractions running in the background in this
        process are done.

        Raises:
            RuntimeError: Called on an event loop's thread while a summary runs as a task of
                that loop (waiting would stop it): use :meth:`async_flush` there.
        """
        self._conversations.jobs.flush()
        if self._transcripts is not None:
            self._transcripts.flush()

    async def async_flush(self) -> None:
        """Async :meth:`flush`: awaits the summaries and extractions running in the background,
        and the searchable copies of the turns."""
        await self._conversations.jobs.async_flush()
        if self._transcripts is not None:
            await self._transcripts.async_flush()

    def close(self) -> None:
        """Waits for the background summaries (:meth:`flush`) and stops the transcripts'
        embedding writer; the store stays open."""
        self.flush()
        if self._transcripts is not None:
            self._transcripts.close()

    async def async_close(self) -> None:
        """Async :meth:`close`."""
        await self.async_flush()


def _turn_step(memory: ConversationMemory, new: NewTurn, store: Any) -> Step[ConversationTurn]:
    """The turn added at once if it can be (``store``: blocking calls of it allowed), else
    the plan that adds it; recorded for transcript search either way."""
    summaries, transcripts = memory._summaries, memory._transcripts
    pinned = new.metadata is not None and new.metadata.get("pinned") is True
    step: Step[ConversationTurn] | None = None
    if not summaries.follows_turn and not pinned:
        turn = add_turn_now(memory._conversations, summaries, new, store)
        if turn is not None:
            step = Done(turn)
    if step is None:
        step = add_turn_plan(memory._conversations, summaries, new)
    # Only once the turn is committed does it get a searchable copy (off the turn's path).
    return step if transcripts is None else transcripts.recorded(new.cid, step)
