"""Rolling summaries and fact extraction: the turns that leave a conversation's budget.

The part of :class:`~memlane.conversation.plan.ConversationLogic` that folds the oldest
turns into a summary (inline or in the background), commits it to the log so that no turn
is lost or kept twice whichever host summarises, and hands leaving turns to the fact
extractor.
"""

from __future__ import annotations

import logging
from typing import Any

from memlane._locks import HybridLock
from memlane._runner import Call, Plan, Release, Spawn, StoreCall, Summarize
from memlane.conversation.lifecycle import ConversationLifecycle
from memlane.conversation.state import (
    ConversationState,
    namespace,
    summary_entry,
    transcript_entry,
    transcript_namespace,
)
from memlane.messages import SUMMARY_PREFIX, message_texts
from memlane.types import ConversationTurn, utc_now

logger = logging.getLogger("memlane")

_SUMMARY_ROUNDS = 3
"""How often a host summarises again after other summaries made its result stale."""

_ELLIPSIS = " …"


class SummaryLogic(ConversationLifecycle):
    """The summary and extraction plans of a conversation."""

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
        # The conversation's own threshold, kept with it since it was created.
        threshold = self._budget_of(state).summarize_threshold or self.summarize_threshold
        if state.ledger.total > threshold:
            excess = state.ledger.total - threshold
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
