"""The conversations of a memory and their life on the store: the cache of their states,
their locks, loading and catching up, expiry, clearing.

:class:`ConversationCache` keeps the cached state of each conversation equal to what the
store holds, whichever host wrote it: every plan starts with
:meth:`ConversationCache.coherent_plan` (one indexed range read when nothing changed). A
conversation idle past its ttl is removed; one cleared by any host is cleared for all (see
:func:`~memlane.conversation.conversation_log.clear_entry`).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from memlane._locks import HybridLock, LockTable
from memlane._ops import Clear, Delete, Load, LoadByKey, LoadRange, Namespaces, Save, SaveIf
from memlane._runner import Plan, Release
from memlane._validate import check_identifier
from memlane.conversation.background_jobs import BackgroundJobs
from memlane.conversation.conversation_budget import BUDGET_KEY, ConversationBudget, entry_budget
from memlane.conversation.conversation_log import (
    INDEX_NAMESPACE,
    LOG_PREFIX,
    LOG_STOP,
    apply_event,
    budget_entry,
    clear_entry,
    cleared_at,
    index_entry,
    last_clear,
    log_key,
    namespace,
    restore,
    transcript_namespace,
)
from memlane.conversation.conversation_state import ConversationState, new_ledger
from memlane.errors import ConversationNotFoundError
from memlane.stores._base import read_only_error
from memlane.types import MemoryEntry

T = TypeVar("T")


def check_cid(conversation_id: object) -> str:
    """A conversation id: a non-empty ``str`` without NUL."""
    return check_identifier(conversation_id, "conversation_id")


def _generation(index: MemoryEntry) -> str | None:
    """The life of a conversation its index entry names (``None``: written before lives)."""
    content = index.content
    generation = content.get("generation") if isinstance(content, dict) else None
    return generation if isinstance(generation, str) else None


class ConversationCache:
    """The conversations of one memory: each one's cached state and lock, and the plans that
    load, catch up, expire and clear them.

    Args:
        store: The memory's store (named in the error a read-only store raises).
        own_budget: The budget a conversation this memory creates keeps.
        conversation_ttl: Seconds a conversation may stay idle (``None``: forever).
        retain_transcript: Whether summarised turns are kept in the store's transcript.
        max_cached_conversations: How many states a persistent store's cache keeps.
        jobs: The memory's background jobs (a conversation with a summary in flight keeps
            its lock).
    """

    __slots__ = (
        "_max_cached",
        "_retain_transcript",
        "_store",
        "_ttl",
        "expires",
        "is_the_store",
        "jobs",
        "locks",
        "own_budget",
        "persistent",
        "read_only",
        "states",
    )

    def __init__(
        self,
        store: Any,
        own_budget: ConversationBudget,
        *,
        conversation_ttl: float | None,
        retain_transcript: bool,
        max_cached_conversations: int,
        jobs: BackgroundJobs,
    ) -> None:
        self._store = store
        self.own_budget = own_budget
        self._ttl = conversation_ttl
        self._retain_transcript = retain_transcript
        self._max_cached = max_cached_conversations
        self.jobs = jobs
        # Turns are mirrored into the store only where they outlive the process; an in-memory
        # store would just hold a second copy of what the cached state already has.
        self.persistent = bool(getattr(store, "persistent", True))
        # A store opened read-only: reads must not try to tidy it up.
        self.read_only = getattr(store, "read_only", False) is True
        # Whether the cached states are the conversations themselves: on a store that is not
        # persisted, without a ttl, no plan loads, catches up or expires anything, and an
        # operation may run on a state at once (add_turn_now, HistoryReads.now).
        self.is_the_store = not self.persistent and conversation_ttl is None
        # Whether conversations expire: every turn then pushes the conversation's expiry.
        self.expires = conversation_ttl is not None
        self.states: OrderedDict[str, ConversationState] = OrderedDict()
        self.locks = LockTable()

    # ------------------------------------------------------------------ locking and caching

    def locked(self, cid: str) -> Plan[HybridLock]:
        """Takes the conversation's lock: the one the table holds once it is taken.

        A bounded cache drops idle locks, so a caller can take a lock that was dropped (and
        replaced) while it queued; it then lets go and takes the current one.
        """
        lock = self.locks[cid]
        yield lock
        while self.locks.get(cid) is not lock:
            yield Release(lock)
            lock = self.locks[cid]
            yield lock
        return lock

    def budget_of(self, state: ConversationState) -> ConversationBudget:
        """The budget ``state`` keeps, or this memory's for a conversation without one."""
        return self.own_budget if state.budget is None else state.budget

    def keep(self, cid: str, state: ConversationState) -> None:
        """Caches ``state``; on a persistent store, evicts the least recently used beyond
        ``max_cached_conversations`` (what is evicted is in the store already)."""
        states = self.states
        states[cid] = state
        if not self.persistent or len(states) <= self._max_cached:
            return
        while len(states) > self._max_cached:
            states.popitem(last=False)
        locks = self.locks
        if len(locks) > 2 * self._max_cached + 64:  # amortised: O(1) per load
            for key, lock in list(locks.items()):
                if key not in states and lock.idle() and not self.jobs.busy(key):
                    locks.pop(key, None)

    # ------------------------------------------------------------------ loading

    def coherent_plan(
        self,
        cid: str,
        *,
        create: bool,
        budget: ConversationBudget | None = None,
        catch_up: bool = True,
    ) -> Plan[ConversationState | None]:
        """The conversation as the store holds it now (created if asked, keeping ``budget``,
        by default this memory's; ``None`` if unknown).

        A cached state is caught up with what other hosts committed; on a store that is not
        persisted the cache is the store. ``catch_up=False`` leaves a cached state as it is,
        for a caller whose next step is a write at the state's head: that write only lands
        if nobody wrote there first, and when it does not, what it returns is the catch-up
        (:meth:`apply_plan`).

        Raises:
            ReadOnlyStoreError: ``create`` on a store opened read-only (before the cache
                changes).
        """
        if create and self.read_only:
            raise read_only_error(self._store)
        state = self.states.get(cid)
        if state is not None and state.expires_at is not None and state.expires_at <= time.time():
            state = yield from self._still_alive_plan(cid, state)
        if not self.persistent:
            if state is None and create:
                kept = budget or self.own_budget
                state = ConversationState(new_ledger(kept.max_tokens), kept)
                self.states[cid] = state
                yield from self.touch_plan(cid, state)
            return state
        if state is None:
            return (yield from self._load_plan(cid, create=create, budget=budget))
        self.states.move_to_end(cid)
        if not catch_up:
            return state
        return (yield from self.catch_up_plan(cid, state, create=create))

    def _still_alive_plan(
        self, cid: str, state: ConversationState
    ) -> Plan[ConversationState | None]:
        """``state`` if the conversation is not idle past its ttl after all, else ``None``.

        Another host may have kept it alive: its index entry, which every turn saves again,
        says. If that host found it expired and started it again, the entry names another
        generation: the cache is dropped and the new life read afresh. If nobody kept it
        alive, it is removed from the store.
        """
        if self.persistent:
            index: MemoryEntry | None = yield LoadByKey(INDEX_NAMESPACE, cid)
            if index is not None:
                if _generation(index) != state.generation:
                    self.states.pop(cid, None)
                    return None
                state.expires_at = (
                    None if index.expires_at is None else index.expires_at.timestamp()
                )
                return state
        yield from self.expire_plan(cid)
        return None

    def expire_plan(self, cid: str) -> Plan[bool]:
        """Removes a conversation idle past its ttl: turns, summary, transcript, index entry.

        Returns whether there was a conversation to remove (not just what a clear left).
        A conversation cleared less than a ttl ago keeps its clear event: a host that cached
        it before the clear, and whose cache has not yet expired, learns of the clear only
        from that event.
        """
        self.states.pop(cid, None)
        if self.read_only:
            # Reads as gone, as on any store; removing it is left to a writable open.
            return False
        if self._retain_transcript or self.persistent:
            yield Clear(transcript_namespace(cid))
        if not self.persistent:
            return True
        entries: list[MemoryEntry] = yield Load(namespace(cid))
        if not self._recently_cleared(entries):
            yield Clear(namespace(cid))
        # An expired index entry is not loadable, but deletable by id.
        yield Delete(INDEX_NAMESPACE, index_entry(cid).entry_id)
        return cleared_at(entries) is None

    def _recently_cleared(self, entries: list[MemoryEntry]) -> bool:
        """Whether ``entries`` hold a conversation cleared less than a ttl ago, nothing since."""
        at = cleared_at(entries)
        if at is None:
            return False
        ttl = self._ttl
        return ttl is None or at.timestamp() + ttl > time.time()

    def touch_plan(self, cid: str, state: ConversationState) -> Plan[None]:
        """Pushes the conversation's expiry a ttl past now (nothing without a ttl)."""
        if self._ttl is None:
            return
        now = time.time()
        state.expires_at = now + self._ttl
        if self.persistent:
            until = datetime.fromtimestamp(state.expires_at, UTC)
            if state.generation is None:
                state.generation = uuid.uuid4().hex
            entry = index_entry(cid, until, state.generation)
            yield Save(INDEX_NAMESPACE, entry)

    def _load_plan(
        self, cid: str, *, create: bool, budget: ConversationBudget | None = None
    ) -> Plan[ConversationState | None]:
        """Loads a conversation from the store and caches it (created if asked, keeping
        ``budget``, by default this memory's)."""
        ns = namespace(cid)
        entries: list[MemoryEntry] = yield Load(ns)
        # Entries that end in a clear hold no conversation, but keep its log position.
        holds = bool(entries) and cleared_at(entries) is None
        index: MemoryEntry | None = None
        if self._ttl is not None or not holds:
            index = yield LoadByKey(INDEX_NAMESPACE, cid)
        if self._ttl is not None and holds and index is None:
            # Idle past its ttl (its index entry expired): what is left of it goes.
            yield from self.expire_plan(cid)
            entries, holds = [], False
        known = holds or index is not None
        kept, stale = self._stored_budget(entries)
        state, leftovers = restore(
            entries, self.own_budget.max_tokens if kept is None else kept.max_tokens
        )
        state.budget = kept
        if stale is not None:
            leftovers.append(stale.entry_id)
        # What an interrupted clear or summary left; a read-only store keeps it, and the
        # state read is the same either way.
        for entry_id in [] if self.read_only else leftovers:
            yield Delete(ns, entry_id)
        if not known and not create:
            return None
        if index is not None:
            state.generation = _generation(index)
            if index.expires_at is not None:
                state.expires_at = index.expires_at.timestamp()
        if not known:
            yield from self._keep_budget_plan(cid, state, budget or self.own_budget)
            yield Save(INDEX_NAMESPACE, index_entry(cid))
            yield from self.touch_plan(cid, state)
        self.keep(cid, state)
        return state

    @staticmethod
    def _stored_budget(
        entries: list[MemoryEntry],
    ) -> tuple[ConversationBudget | None, MemoryEntry | None]:
        """The budget the conversation's entries keep for its current life, and a budget
        entry a clear voided (an interrupted clear left it; the caller deletes it)."""
        for entry in entries:
            if entry.key == BUDGET_KEY:
                budget, head = entry_budget(entry)
                if head <= last_clear(entries):
                    return None, entry
                return budget, None
        return None, None

    def _keep_budget_plan(
        self, cid: str, state: ConversationState, budget: ConversationBudget
    ) -> Plan[None]:
        """Stores the budget of a conversation being created, unless another host creating
        it at the same time stored its own first: the first holds for every host."""
        ns = namespace(cid)
        if not (yield SaveIf(ns, budget_entry(budget, state.head), None)):
            found: MemoryEntry | None = yield LoadByKey(ns, BUDGET_KEY)
            if found is not None:
                budget = entry_budget(found)[0]
        # A conversation being created holds no turn yet: its ledger can start over.
        state.ledger = new_ledger(budget.max_tokens)
        state.budget = budget

    def catch_up_plan(
        self, cid: str, state: ConversationState, *, create: bool
    ) -> Plan[ConversationState | None]:
        """``state`` with every event committed after it applied: one range read if none.

        ``None`` when another host cleared the conversation and ``create`` is false.
        """
        events: list[MemoryEntry] = yield LoadRange(namespace(cid), log_key(state.head), LOG_STOP)
        if not events:  # nothing committed since: every history read's case on a lone host
            return state
        return (yield from self.apply_plan(cid, state, events, create=create))

    def apply_plan(
        self, cid: str, state: ConversationState, events: list[MemoryEntry], *, create: bool
    ) -> Plan[ConversationState | None]:
        """``state`` with ``events``, the log from its head on, applied (see
        :meth:`catch_up_plan`)."""
        for event in events:
            if not apply_event(state, event):
                # This host missed events that a summary has since compacted away, or the
                # conversation was cleared: what the store keeps is the conversation now.
                self.states.pop(cid, None)
                return (yield from self._load_plan(cid, create=create))
        return state

    def read_plan(
        self, conversation_id: str, read: Callable[[ConversationState | None], T]
    ) -> Plan[T]:
        """``read(state)`` under the conversation's lock (``state`` is ``None`` if unknown)."""
        cid = check_cid(conversation_id)
        yield from self.locked(cid)
        state = yield from self.coherent_plan(cid, create=False)
        return read(state)

    def existing_plan(self, cid: str) -> Plan[ConversationState]:
        """The state of a conversation that must exist."""
        state = yield from self.coherent_plan(cid, create=False)
        if state is None:
            raise ConversationNotFoundError(f"unknown conversation_id {cid!r}")
        return state

    # ------------------------------------------------------------------ forgetting

    def clear_plan(self, cid: str) -> Plan[None]:
        """Forgets a conversation; on a shared store, for every host that cached it too.

        A clear event is appended to the log (see :func:`clear_entry`) before anything is
        deleted: hosts that cached the conversation find it with their next read and start
        again from it, and turns other hosts add afterwards follow it in the log instead of
        reusing positions a cache still holds. The index entry goes first, so a turn added
        after the clear lists the conversation again.
        """
        if self.read_only:
            raise read_only_error(self._store)
        if not self.persistent:
            self.states.pop(cid, None)
            if self._retain_transcript:
                yield Clear(transcript_namespace(cid))
            return
        index: MemoryEntry | None = yield LoadByKey(INDEX_NAMESPACE, cid)
        if index is not None:
            yield Delete(INDEX_NAMESPACE, index.entry_id)
        state = yield from self.coherent_plan(cid, create=False)
        ns = namespace(cid)
        while state is not None:
            clear = clear_entry(state.head)
            if (yield SaveIf(ns, clear, None)):
                # Only what precedes the clear: a turn another host appends after it stays.
                entries: list[MemoryEntry] = yield Load(ns)
                assert clear.key is not None
                for entry in entries:
                    key = entry.key or ""
                    if not (key.startswith(LOG_PREFIX) and key >= clear.key):
                        yield Delete(ns, entry.entry_id)
                break
            state = yield from self.catch_up_plan(cid, state, create=False)
        self.states.pop(cid, None)
        yield Clear(transcript_namespace(cid))

    def cleanup_plan(self) -> Plan[int]:
        """Expires every conversation idle past the ttl, each under its own lock."""
        if self.read_only:
            raise read_only_error(self._store)
        if self._ttl is None:
            return 0
        now = time.time()
        if not self.persistent:
            candidates = [
                cid
                for cid, state in self.states.items()
                if state.expires_at is not None and state.expires_at <= now
            ]
        else:
            names: list[str] = yield Namespaces()
            alive = set((yield from self.ids_plan()))
            candidates = []
            for name in names:
                for prefix in (namespace(""), transcript_namespace("")):
                    if name.startswith(prefix) and name[len(prefix) :] not in alive:
                        candidates.append(name[len(prefix) :])
            candidates = list(dict.fromkeys(candidates))
        removed = 0
        for cid in candidates:
            lock = yield from self.locked(cid)
            state = self.states.get(cid)
            if self.persistent:
                index: MemoryEntry | None = yield LoadByKey(INDEX_NAMESPACE, cid)
                if index is None:
                    removed += bool((yield from self.expire_plan(cid)))
                elif state is not None and _generation(index) != state.generation:
                    self.states.pop(cid, None)  # a new life began elsewhere: read it afresh
            elif state is not None:
                yield from self.expire_plan(cid)
                removed += 1
            yield Release(lock)
        return removed

    def ids_plan(self) -> Plan[list[str]]:
        now = time.time()
        cached = [
            cid
            for cid, state in self.states.items()
            if state.expires_at is None or state.expires_at > now
        ]
        if not self.persistent:
            return cached
        entries: list[MemoryEntry] = yield Load(INDEX_NAMESPACE)
        stored = [e.key for e in entries if e.key is not None]
        if self._ttl is not None:  # the store's index knows every host's activity
            return list(dict.fromkeys(stored))
        return list(dict.fromkeys([*stored, *cached]))
