"""The conversation logic, written once and free of I/O.

Every operation of :class:`~memlane.conversation.ConversationMemory` is a plan here: a
generator that yields the store calls it needs (see :mod:`memlane._runner`) and returns the
operation's result. The public sync methods run a plan with blocking store calls, the async
methods await the same plan's calls, and both hold the conversation's one
:class:`~memlane._locks.HybridLock` for the whole plan, so threads and tasks that mix on a
conversation are serialised by a single discipline.

On a persistent store other processes (hosts behind a load balancer) write the same
conversations. Every plan first brings its cached state up to date with what they committed
(:meth:`ConversationLogic._coherent_plan`: one indexed range read when nothing changed), and
every write is a conditional one: a turn or a summary takes the next log slot only if nobody
took it first (see :mod:`memlane.conversation.state`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from memlane._locks import HybridLock, LockTable
from memlane._runner import Call, Plan, Release, Spawn, StoreCall, Summarize, Summarizer
from memlane._validate import check_identifier
from memlane.conversation.snapshot import ParsedSnapshot
from memlane.conversation.state import (
    INDEX_NAMESPACE,
    LOG_PREFIX,
    LOG_STOP,
    TRANSCRIPT_PREFIX,
    TRANSCRIPT_STOP,
    ConversationState,
    apply_event,
    clear_entry,
    cleared_at,
    index_entry,
    log_key,
    namespace,
    new_ledger,
    restore,
    summary_entry,
    transcript_entry,
    transcript_namespace,
    turn_entry,
)
from memlane.errors import ConversationNotFoundError
from memlane.messages import SUMMARY_PREFIX, message_texts
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, MemoryEntry, new_turn, utc_now

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

logger = logging.getLogger("memlane")

T = TypeVar("T")

_SUMMARY_ROUNDS = 3
"""How often a host summarises again after other summaries made its result stale."""

_ELLIPSIS = " …"


DEFAULT_SUMMARIZE_THRESHOLD = 3072
"""The summarise-above threshold where the budget allows it (see :func:`default_threshold`)."""

MIN_SUMMARY_ROOM = 16
"""Fewest tokens a summary may be given: its prefix and a few words."""


def default_threshold(max_tokens: int) -> int:
    """``min(3072, max_tokens * 3 // 4)``: the rest of the budget is the summary's."""
    return max(1, min(DEFAULT_SUMMARIZE_THRESHOLD, max_tokens * 3 // 4))


def check_summary_room(max_tokens: int, threshold: int) -> None:
    """With a summarizer, the threshold must leave the summary room in the budget.

    Turns are kept up to the threshold and the summary gets the rest, so both are always
    sent: a threshold at (or near) the budget would leave turns neither sent nor summarised.

    Raises:
        ValueError: Fewer than :data:`MIN_SUMMARY_ROOM` tokens left; the message names both
            values and the default that would fit.
    """
    if max_tokens - threshold < MIN_SUMMARY_ROOM:
        raise ValueError(
            f"summarize_threshold={threshold} leaves the summary {max_tokens - threshold} of "
            f"max_tokens={max_tokens} tokens; with a summarizer it must be at most "
            f"max_tokens - {MIN_SUMMARY_ROOM} (the default, "
            f"min({DEFAULT_SUMMARIZE_THRESHOLD}, max_tokens * 3 // 4), would be "
            f"{default_threshold(max_tokens)})"
        )


def check_cid(conversation_id: object) -> str:
    """A conversation id: a non-empty ``str`` without NUL."""
    return check_identifier(conversation_id, "conversation_id")


class NewTurn(NamedTuple):
    """add_turn's validated arguments and the turn's token estimate."""

    cid: str
    user_prompt: str
    assistant_response: str
    messages: list[ModelMessage] | None
    metadata: dict[str, Any] | None
    tokens: int


def _generation(index: MemoryEntry) -> str | None:
    """The life of a conversation its index entry names (``None``: written before lives)."""
    content = index.content
    generation = content.get("generation") if isinstance(content, dict) else None
    return generation if isinstance(generation, str) else None


class ConversationLogic:
    """Per-conversation states and the plans that read and change them.

    Subclasses supply ``max_tokens``, ``summarize_threshold``, ``estimator``,
    ``summarizer``, whether the store outlives the process, whether summaries run in the
    background and how many conversations to keep cached.
    """

    max_tokens: int
    summarize_threshold: int
    estimator: TokenEstimator
    summarizer: Summarizer | None
    summarize_in_background: bool
    retain_transcript: bool
    conversation_ttl: float | None  # seconds a conversation may stay idle; None: forever
    long_term_strategy: Any  # a SummarizerStrategy or NeuralyzerStrategy, or None
    max_cached_conversations: int
    fact_extractor: Any  # a memlane.longterm.FactExtractor (apply / async_apply), or None
    long_term: Any  # the LongTermMemory extracted facts are remembered in
    fact_scope: Any
    fact_scope_id: str | None
    _extracting: set[Any]  # extraction jobs (Future or Task) not yet known to be done
    _jobs_guard: threading.Lock  # guards _extracting: jobs start and end in any thread
    _persistent: bool
    _states: OrderedDict[str, ConversationState]
    _locks: LockTable
    _pending: dict[str, Any]  # conversation id -> its background summary (Future or Task)
    _count_texts: Callable[[list[str]], list[int]]

    # ------------------------------------------------------------------ locking and caching

    def _locked(self, cid: str) -> Plan[HybridLock]:
        """Takes the conversation's lock: the one the table holds once it is taken.

        A bounded cache drops idle locks, so a caller can take a lock that was dropped (and
        replaced) while it queued; it then lets go and takes the current one.
        """
        lock = self._locks[cid]
        yield lock
        while self._locks.get(cid) is not lock:
            yield Release(lock)
            lock = self._locks[cid]
            yield lock
        return lock

    def _keep(self, cid: str, state: ConversationState) -> None:
        """Caches ``state``; on a persistent store, evicts the least recently used beyond
        ``max_cached_conversations`` (what is evicted is in the store already)."""
        states = self._states
        states[cid] = state
        if not self._persistent or len(states) <= self.max_cached_conversations:
            return
        while len(states) > self.max_cached_conversations:
            states.popitem(last=False)
        locks = self._locks
        if len(locks) > 2 * self.max_cached_conversations + 64:  # amortised: O(1) per load
            for key, lock in list(locks.items()):
                if key not in states and lock.idle() and key not in self._pending:
                    locks.pop(key, None)

    # ------------------------------------------------------------------ loading

    def _coherent_plan(self, cid: str, *, create: bool) -> Plan[ConversationState | None]:
        """The conversation as the store holds it now (created if asked; ``None`` if unknown).

        A cached state is caught up with what other hosts committed; on a store that is not
        persisted the cache is the store.
        """
        state = self._states.get(cid)
        if state is not None and state.expires_at is not None and state.expires_at <= time.time():
            state = yield from self._still_alive_plan(cid, state)
        if not self._persistent:
            if state is None and create:
                state = self._states[cid] = ConversationState(new_ledger(self.max_tokens))
                yield from self._touch_plan(cid, state)
            return state
        if state is None:
            return (yield from self._load_plan(cid, create=create))
        self._states.move_to_end(cid)
        return (yield from self._catch_up_plan(cid, state, create=create))

    def _still_alive_plan(
        self, cid: str, state: ConversationState
    ) -> Plan[ConversationState | None]:
        """``state`` if the conversation is not idle past its ttl after all, else ``None``.

        Another host may have kept it alive: its index entry, which every turn saves again,
        says. If that host found it expired and started it again, the entry names another
        generation: the cache is dropped and the new life read afresh. If nobody kept it
        alive, it is removed from the store.
        """
        if self._persistent:
            index: MemoryEntry | None = yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))
            if index is not None:
                if _generation(index) != state.generation:
                    self._states.pop(cid, None)
                    return None
                state.expires_at = (
                    None if index.expires_at is None else index.expires_at.timestamp()
                )
                return state
        yield from self._expire_plan(cid)
        return None

    def _expire_plan(self, cid: str) -> Plan[bool]:
        """Removes a conversation idle past its ttl: turns, summary, transcript, index entry.

        Returns whether there was a conversation to remove (not just what a clear left).
        A conversation cleared less than a ttl ago keeps its clear event: a host that cached
        it before the clear, and whose cache has not yet expired, learns of the clear only
        from that event.
        """
        self._states.pop(cid, None)
        if self.retain_transcript or self._persistent:
            yield StoreCall("clear", (transcript_namespace(cid),))
        if not self._persistent:
            return True
        entries: list[MemoryEntry] = yield StoreCall("load", (namespace(cid),))
        if not self._recently_cleared(entries):
            yield StoreCall("clear", (namespace(cid),))
        # An expired index entry is not loadable, but deletable by id.
        yield StoreCall("delete", (INDEX_NAMESPACE, index_entry(cid).entry_id))
        return cleared_at(entries) is None

    def _recently_cleared(self, entries: list[MemoryEntry]) -> bool:
        """Whether ``entries`` hold a conversation cleared less than a ttl ago, nothing since."""
        at = cleared_at(entries)
        if at is None:
            return False
        ttl = self.conversation_ttl
        return ttl is None or at.timestamp() + ttl > time.time()

    def _touch_plan(self, cid: str, state: ConversationState) -> Plan[None]:
        """Pushes the conversation's expiry a ttl past now (nothing without a ttl)."""
        if self.conversation_ttl is None:
            return
        now = time.time()
        state.expires_at = now + self.conversation_ttl
        if self._persistent:
            until = datetime.fromtimestamp(state.expires_at, UTC)
            if state.generation is None:
                state.generation = uuid.uuid4().hex
            entry = index_entry(cid, until, state.generation)
            yield StoreCall("save", (INDEX_NAMESPACE, entry))

    def _load_plan(self, cid: str, *, create: bool) -> Plan[ConversationState | None]:
        """Loads a conversation from the store and caches it (created if asked)."""
        ns = namespace(cid)
        entries: list[MemoryEntry] = yield StoreCall("load", (ns,))
        # Entries that end in a clear hold no conversation, but keep its log position.
        holds = bool(entries) and cleared_at(entries) is None
        index: MemoryEntry | None = None
        if self.conversation_ttl is not None or not holds:
            index = yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))
        if self.conversation_ttl is not None and holds and index is None:
            # Idle past its ttl (its index entry expired): what is left of it goes.
            yield from self._expire_plan(cid)
            entries, holds = [], False
        known = holds or index is not None
        state, leftovers = restore(entries, self.max_tokens)
        for entry_id in leftovers:
            yield StoreCall("delete", (ns, entry_id))
        if not known and not create:
            return None
        if index is not None:
            state.generation = _generation(index)
            if index.expires_at is not None:
                state.expires_at = index.expires_at.timestamp()
        if not known:
            yield StoreCall("save", (INDEX_NAMESPACE, index_entry(cid)))
            yield from self._touch_plan(cid, state)
        self._keep(cid, state)
        return state

    def _catch_up_plan(
        self, cid: str, state: ConversationState, *, create: bool
    ) -> Plan[ConversationState | None]:
        """``state`` with every event committed after it applied: one range read if none.

        ``None`` when another host cleared the conversation and ``create`` is false.
        """
        events: list[MemoryEntry] = yield StoreCall(
            "load_range", (namespace(cid), log_key(state.head), LOG_STOP)
        )
        for event in events:
            if not apply_event(state, event):
                # This host missed events that a summary has since compacted away, or the
                # conversation was cleared: what the store keeps is the conversation now.
                self._states.pop(cid, None)
                return (yield from self._load_plan(cid, create=create))
        return state

    def _read_plan(
        self, conversation_id: str, read: Callable[[ConversationState | None], T]
    ) -> Plan[T]:
        """``read(state)`` under the conversation's lock (``state`` is ``None`` if unknown)."""
        cid = check_cid(conversation_id)
        yield from self._locked(cid)
        state = yield from self._coherent_plan(cid, create=False)
        return read(state)

    def _existing_plan(self, cid: str) -> Plan[ConversationState]:
        """The state of a conversation that must exist."""
        state = yield from self._coherent_plan(cid, create=False)
        if state is None:
            raise ConversationNotFoundError(f"unknown conversation_id {cid!r}")
        return state

    # ------------------------------------------------------------------ adding turns

    def _count(
        self, user_prompt: str, assistant_response: str, messages: list[ModelMessage] | None
    ) -> int:
        """A turn's token estimate; pure, so it is counted before the lock is taken."""
        texts = [user_prompt, assistant_response] if messages is None else message_texts(messages)
        try:
            return sum(self._count_texts(texts))
        except UnicodeEncodeError:  # a lone surrogate: the estimator's own path repairs it
            return sum(self.estimator.estimate_many(texts))

    def _add_turn_plan(self, new: NewTurn) -> Plan[ConversationTurn]:
        cid = new.cid
        yield from self._locked(cid)
        state = yield from self._coherent_plan(cid, create=True)
        assert state is not None
        if self._persistent:
            ns = namespace(cid)
            entry_id = uuid.uuid4().hex
            while True:
                turn = self._next_turn(state, new)
                won = yield StoreCall("save_if", (ns, turn_entry(turn, entry_id, state.head), None))
                if won:
                    break
                # Another host took this slot: read what it wrote, then take the next one.
                caught_up = yield from self._catch_up_plan(cid, state, create=True)
                assert caught_up is not None
                state = caught_up
            state.head += 1
        else:
            turn = self._next_turn(state, new)
            entry_id = ""
        state.append(turn, entry_id, default_messages=new.messages is None)
        yield from self._touch_plan(cid, state)
        if self.fact_extractor is not None:
            yield from self._extract_plan(cid, state, state.first_in_history)
        if self._eviction_count(state):
            if self.summarize_in_background:
                if cid not in self._pending:  # at most one in flight per conversation
                    self._pending[cid] = yield Spawn(lambda: self._background_plan(cid))
            else:
                yield from self._summarize_plan(cid, background=False)
        return turn

    def _add_turn_now(self, new: NewTurn) -> ConversationTurn | None:
        """:meth:`_add_turn_plan` done at once, or ``None`` if that needs its runner.

        On a store that is not persisted, with no summarizer and the state in hand, adding a
        turn is pure bookkeeping: it needs no store call and, unless another caller holds the
        conversation, no waiting. Doing it here spares the plan machinery on the hot path
        of an in-memory host; the caller has checked the first two conditions.
        """
        lock = self._locks[new.cid]
        if not lock.try_acquire():
            return None
        try:
            state = self._states.get(new.cid)  # read under the lock: clear() may have dropped it
            if state is None:
                return None
            turn = self._next_turn(state, new)
            state.append(turn, "", default_messages=new.messages is None)
        finally:
            lock.release()
        return turn

    @staticmethod
    def _next_turn(state: ConversationState, new: NewTurn) -> ConversationTurn:
        """The turn that follows ``state``'s last one (not yet kept)."""
        at = utc_now()
        messages = new.messages
        if messages is None:  # the two messages of its strings, built when first read
            return new_turn(
                turn_id=state.next_turn_id,
                user_prompt=new.user_prompt,
                assistant_response=new.assistant_response,
                timestamp=at,
                token_estimate=new.tokens,
                metadata=dict(new.metadata) if new.metadata else {},
            )
        return new_turn(
            turn_id=state.next_turn_id,
            user_prompt=new.user_prompt,
            assistant_response=new.assistant_response,
            raw_messages=messages,
            timestamp=at,
            token_estimate=new.tokens,
            metadata=dict(new.metadata) if new.metadata else {},
        )

    # ------------------------------------------------------------------ summaries

    def _eviction_count(self, state: ConversationState) -> int:
        """How many of the oldest turns to fold into the summary (0: none).

        Those over the threshold (the newest stays on that account), and every turn the
        history no longer sends beside the summary, the newest included: with a summarizer,
        a turn is sent or summarised, never neither.
        """
        if self.long_term_strategy is not None:  # its triggers replace the threshold
            from memlane.conversation.strategies import fold_count

            return fold_count(self.long_term_strategy, state, self._count_messages)
        if self.summarizer is None:
            return 0
        records = state.records
        count = 0
        if state.ledger.total > self.summarize_threshold:
            excess = state.ledger.total - self.summarize_threshold
            freed = 0
            while freed < excess and count < len(records) - 1:
                freed += records[count][3]
                count += 1
        unsent = state.first_in_history - state.summarized_turns
        return max(count, unsent)

    def _summary_input(self, state: ConversationState, count: int) -> list[ConversationTurn]:
        turns: list[ConversationTurn] = []
        if state.summary is not None:
            turns.append(
                ConversationTurn(
                    turn_id=0,
                    user_prompt="",
                    assistant_response=state.summary,
                    raw_messages=[],
                    token_estimate=state.summary_tokens,
                    metadata={"summary": True},
                )
            )
        turns.extend(state.turn(i) for i in range(count))
        return turns

    def _background_plan(self, cid: str) -> Plan[None]:
        """The summaries of one conversation, after the turns that asked for them returned."""
        try:
            yield from self._summarize_plan(cid, background=True)
        except Exception:  # noqa: BLE001  # nobody awaits a background job: say what failed
            logger.warning("memlane: background summary of %r failed", cid, exc_info=True)
        finally:
            # Still under the conversation's lock when the plan ends normally: a turn added
            # after this sees no job in flight and starts one.
            self._pending.pop(cid, None)

    def _summarize_plan(self, cid: str, *, background: bool) -> Plan[None]:
        """Folds the oldest turns into the summary while the retained turns exceed the threshold.

        Inline, the caller holds the conversation's lock throughout. In the background the
        lock is held to read the turns and to commit, never while the summarizer runs, so
        turns keep being added meanwhile, and the job goes on until the turns kept are back
        under the threshold. A summary commits only if no other summary did
        since its turns were read (another host's, on a shared store); otherwise it is
        discarded and, if the conversation is still over its threshold, made again from the
        new state.
        """
        lock: HybridLock | None = None
        stale = 0
        while stale < _SUMMARY_ROUNDS:
            if background and lock is None:
                lock = yield from self._locked(cid)
            state = yield from self._coherent_plan(cid, create=False)
            count = 0 if state is None else self._eviction_count(state)
            if state is None or not count:
                return
            turns = self._summary_input(state, count)
            basis = (state, state.summarized_turns, tuple(state.entry_ids)[:count])
            if lock is not None:
                yield Release(lock)
                lock = None
            summary: str | None = None  # a neuralyzer erases: no summary
            if not self._erases:
                try:
                    summary = yield Summarize(turns)
                except Exception:  # noqa: BLE001  # a failing summarizer must never lose a turn
                    logger.warning(
                        "memlane: summarizer failed; turns kept unsummarised", exc_info=True
                    )
                    return
                if not isinstance(summary, str):
                    raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
            if background:
                lock = yield from self._locked(cid)
            if not (yield from self._commit_summary_plan(cid, basis, count, summary)):
                stale += 1
            # Again while anything is left to fold: a longer summary leaves the history less
            # room, and in the background turns added while the summarizer ran may exceed
            # the threshold. Each round folds at least one turn, so the loop ends.

    def _commit_summary_plan(
        self,
        cid: str,
        basis: tuple[ConversationState, int, tuple[str, ...]],
        count: int,
        summary: str | None,
        strategy: Any = None,
    ) -> Plan[bool]:
        """Commits a summary of the first ``count`` turns of ``basis``; whether it did.

        ``strategy`` is the long-term strategy that made it when not the memory's own (an
        agent's): its knowledge base receives the summary.

        ``False``: another summary committed since ``basis`` was read, and this one is stale.
        A turn appended meanwhile (by any host) does not make it stale: it summarises the
        oldest turns, which only a summary removes.
        """
        first_state, summarized, entry_ids = basis
        text, tokens = (None, 0) if summary is None else self._fit_summary(summary)
        while True:
            state = yield from self._coherent_plan(cid, create=False)
            if state is None or state.summarized_turns != summarized or len(state.records) < count:
                return False
            if self._persistent:
                if tuple(state.entry_ids)[:count] != entry_ids:
                    return False
            elif state is not first_state:  # cleared and started again meanwhile
                return False
            at = utc_now()
            if self.fact_extractor is not None:  # the turns leave the history now, if not before
                yield from self._extract_plan(cid, state, summarized + count)
            if self.retain_transcript:
                # Kept before the summary commits: a crash between leaves transcript turns
                # that are still retained too, which get_transcript tells apart by id.
                kept = [transcript_entry(state.turn(i)) for i in range(count)]
                yield StoreCall("save_many", (transcript_namespace(cid), kept))
            if not self._persistent:
                state.evict(count)
                state.summarized_turns += count
                state.set_summary(text, tokens, at)
                yield from self._knowledge_plan(cid, state.summarized_turns, text, at, strategy)
                return True
            ns = namespace(cid)
            entry = summary_entry(text, tokens, summarized + count, at, state.head)
            if (yield StoreCall("save_if", (ns, entry, None))):
                break
        # The summary (saying how many turns it covers) lands first: a crash before the
        # deletes leaves turns that a restart recognises as summarised, never a gap.
        replaced = state.evict(count)
        if state.summary_entry_id is not None:
            replaced.append(state.summary_entry_id)
        state.summarized_turns += count
        state.summary_entry_id = entry.entry_id
        state.set_summary(text, tokens, at)
        state.head += 1
        for entry_id in replaced:
            yield StoreCall("delete", (ns, entry_id))
        yield from self._knowledge_plan(cid, state.summarized_turns, text, at, strategy)
        return True

    def _knowledge_plan(
        self, cid: str, summarized: int, text: str | None, at: Any, strategy: Any = None
    ) -> Plan[None]:
        """Keeps a committed summary in the strategy's knowledge base, split (if it has one)."""
        from memlane.conversation.knowledge import knowledge_entries, knowledge_namespace
        from memlane.strategies import SummarizerStrategy

        if strategy is None:
            strategy = self.long_term_strategy
        if text is None or not isinstance(strategy, SummarizerStrategy):
            return
        if strategy.knowledge_base is None:
            return
        chunks = knowledge_entries(strategy, cid, summarized, text, at, self.estimator.estimate)
        where = knowledge_namespace(strategy.knowledge_base.collection_id)
        yield StoreCall("save_many", (where, chunks))

    # ------------------------------------------------------------------ fact extraction

    def _extract_plan(self, cid: str, state: ConversationState, upto: int) -> Plan[None]:
        """Hands the turns below id ``upto`` that the extractor has not seen to a background
        job, which merges the facts it finds into long-term memory through ``remember``.

        A turn goes once it leaves the history (its window, or into the summary), once per
        process: a restarted host, or another host of a fleet, may give it again, and
        ``remember`` then confirms the fact rather than duplicating it.
        """
        first = max(state.extracted_upto, state.summarized_turns)
        if upto <= first:
            return
        turns = [state.turn(i - state.summarized_turns) for i in range(first, upto)]
        state.extracted_upto = upto
        job = yield Spawn(lambda: self._extract_job(cid, turns))
        with self._jobs_guard:
            self._extracting = {j for j in self._extracting if not j.done()}
            self._extracting.add(job)

    def _extract_job(self, cid: str, turns: list[ConversationTurn]) -> Plan[None]:
        extractor, long_term = self.fact_extractor, self.long_term
        scope, scope_id = self.fact_scope, self.fact_scope_id
        try:
            yield Call(
                lambda: extractor.apply(long_term, turns, scope=scope, scope_id=scope_id),
                lambda: extractor.async_apply(long_term, turns, scope=scope, scope_id=scope_id),
            )
        except Exception:  # noqa: BLE001  # nobody awaits a background job: say what failed
            logger.warning("memlane: fact extraction from %r failed", cid, exc_info=True)

    @property
    def _erases(self) -> bool:
        """Whether folded turns are erased (a neuralyzer) rather than summarised."""
        from memlane.strategies import NeuralyzerStrategy

        return isinstance(self.long_term_strategy, NeuralyzerStrategy)

    def _count_messages(self, messages: Any) -> int:
        """Tokens of some messages, counted as a turn's are."""
        return sum(self._count_texts(message_texts(list(messages))))

    def _fit_summary(self, summary: str) -> tuple[str, int]:
        """The summary and its tokens (prefix included), cut to its room in the budget: with a
        summarizer ``max_tokens - summarize_threshold`` (the turns kept up to the threshold
        and the summary are sent together), else (an imported summary) half the budget when
        it would not fit at all. A summary left out of the history is a summary lost."""
        tokens = self.estimator.estimate(SUMMARY_PREFIX + summary)
        if self.summarizer is not None:
            room = limit = max(1, self.max_tokens - self.summarize_threshold)
        else:
            room, limit = self.max_tokens, self.max_tokens // 2
        if tokens <= room:
            return summary, tokens
        low, high = 0, len(summary)
        while low < high:  # the longest prefix that fits, by bisection
            mid = (low + high + 1) // 2
            if self.estimator.estimate(SUMMARY_PREFIX + summary[:mid] + _ELLIPSIS) <= limit:
                low = mid
            else:
                high = mid - 1
        cut = summary[:low] + _ELLIPSIS
        logger.warning(
            "memlane: summary of %d tokens exceeds its room of %d tokens (max_tokens=%d); "
            "cut to %d tokens",
            tokens,
            room,
            self.max_tokens,
            limit,
        )
        return cut, self.estimator.estimate(SUMMARY_PREFIX + cut)

    # ------------------------------------------------------------------ forgetting

    def _clear_plan(self, cid: str) -> Plan[None]:
        """Forgets a conversation; on a shared store, for every host that cached it too.

        A clear event is appended to the log (see :func:`clear_entry`) before anything is
        deleted: hosts that cached the conversation find it with their next read and start
        again from it, and turns other hosts add afterwards follow it in the log instead of
        reusing positions a cache still holds. The index entry goes first, so a turn added
        after the clear lists the conversation again.
        """
        if not self._persistent:
            self._states.pop(cid, None)
            if self.retain_transcript:
                yield StoreCall("clear", (transcript_namespace(cid),))
            return
        index: MemoryEntry | None = yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))
        if index is not None:
            yield StoreCall("delete", (INDEX_NAMESPACE, index.entry_id))
        state = yield from self._coherent_plan(cid, create=False)
        ns = namespace(cid)
        while state is not None:
            clear = clear_entry(state.head)
            if (yield StoreCall("save_if", (ns, clear, None))):
                # Only what precedes the clear: a turn another host appends after it stays.
                entries: list[MemoryEntry] = yield StoreCall("load", (ns,))
                assert clear.key is not None
                for entry in entries:
                    key = entry.key or ""
                    if not (key.startswith(LOG_PREFIX) and key >= clear.key):
                        yield StoreCall("delete", (ns, entry.entry_id))
                break
            state = yield from self._catch_up_plan(cid, state, create=False)
        self._states.pop(cid, None)
        yield StoreCall("clear", (transcript_namespace(cid),))

    def _cleanup_plan(self) -> Plan[int]:
        """Expires every conversation idle past the ttl, each under its own lock."""
        if self.conversation_ttl is None:
            return 0
        now = time.time()
        if not self._persistent:
            candidates = [
                cid
                for cid, state in self._states.items()
                if state.expires_at is not None and state.expires_at <= now
            ]
        else:
            names: list[str] = yield StoreCall("namespaces", ())
            alive = set((yield from self._ids_plan()))
            candidates = []
            for name in names:
                for prefix in (namespace(""), transcript_namespace("")):
                    if name.startswith(prefix) and name[len(prefix) :] not in alive:
                        candidates.append(name[len(prefix) :])
            candidates = list(dict.fromkeys(candidates))
        removed = 0
        for cid in candidates:
            lock = yield from self._locked(cid)
            state = self._states.get(cid)
            if self._persistent:
                index: MemoryEntry | None = yield StoreCall("load_by_key", (INDEX_NAMESPACE, cid))
                if index is None:
                    removed += bool((yield from self._expire_plan(cid)))
                elif state is not None and _generation(index) != state.generation:
                    self._states.pop(cid, None)  # a new life began elsewhere: read it afresh
            elif state is not None:
                yield from self._expire_plan(cid)
                removed += 1
            yield Release(lock)
        return removed

    def _transcript_plan(self, cid: str) -> Plan[list[ConversationTurn]]:
        """Every turn of a conversation ever added, oldest first (``[]``: unknown id)."""
        state = yield from self._coherent_plan(cid, create=False)
        if state is None:
            return []
        entries: list[MemoryEntry] = yield StoreCall(
            "load_range", (transcript_namespace(cid), TRANSCRIPT_PREFIX, TRANSCRIPT_STOP)
        )
        # Only the turns the conversation no longer keeps: the others come from the state.
        gone = [
            ConversationTurn.model_validate(e.content)
            for e in entries
            if int(e.key[len(TRANSCRIPT_PREFIX) :]) < state.summarized_turns  # type: ignore[index]
        ]
        return [*gone, *state.turns()]

    def _ids_plan(self) -> Plan[list[str]]:
        now = time.time()
        cached = [
            cid
            for cid, state in self._states.items()
            if state.expires_at is None or state.expires_at > now
        ]
        if not self._persistent:
            return cached
        entries: list[MemoryEntry] = yield StoreCall("load", (INDEX_NAMESPACE,))
        stored = [e.key for e in entries if e.key is not None]
        if self.conversation_ttl is not None:  # the store's index knows every host's activity
            return list(dict.fromkeys(stored))
        return list(dict.fromkeys([*stored, *cached]))

    # ------------------------------------------------------------------ import

    def _import_plan(self, cid: str, snapshot: ParsedSnapshot) -> Plan[str]:
        """Creates conversation ``cid`` from a parsed snapshot; nothing is overwritten."""
        exists = ValueError(
            f"conversation_id {cid!r} already exists; pass conversation_id= to import under a new id"
        )
        if (yield from self._coherent_plan(cid, create=False)) is not None:
            raise exists
        state = yield from self._coherent_plan(cid, create=True)
        assert state is not None
        state.summarized_turns = snapshot.summarized_turns
        head = state.head  # after a clear the log goes on from it
        events: list[MemoryEntry] = []
        if snapshot.summary is not None:
            at = snapshot.summary_created_at or state.summary_at
            text, tokens = self._fit_summary(snapshot.summary)
            state.set_summary(text, tokens, at)
            events.append(summary_entry(text, tokens, snapshot.summarized_turns, at, head))
            state.summary_entry_id = events[0].entry_id
        ids = [uuid.uuid4().hex for _ in snapshot.turns]
        first = len(events)
        events.extend(
            turn_entry(turn, entry_id, head + first + i)
            for i, ((turn, _), entry_id) in enumerate(zip(snapshot.turns, ids, strict=True))
        )
        if self._persistent and events:
            # The first event claims the conversation: if another host created it meanwhile,
            # nothing is written. The rest follow in one batch.
            if not (yield StoreCall("save_if", (namespace(cid), events[0], None))):
                self._states.pop(cid, None)
                raise exists
            if len(events) > 1:
                yield StoreCall("save_many", (namespace(cid), events[1:]))
            state.head = head + len(events)
        for (turn, given), entry_id in zip(snapshot.turns, ids, strict=True):
            state.append(turn, entry_id, default_messages=not given)
        yield from self._touch_plan(cid, state)
        return cid
