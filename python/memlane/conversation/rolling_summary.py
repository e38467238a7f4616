"""Rolling summaries: the oldest turns of a conversation folded into one summary, inline or
in the background, committed to the log so that no turn is lost or kept twice whichever host
summarises; and the room the summary gets in the budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from memlane._locks import HybridLock
from memlane._ops import Delete, SaveIf, SaveMany
from memlane._runner import (
    Call,
    Plan,
    Release,
    Spawn,
    Summarize,
    Summarizer,
    run_async,
    run_sync,
)
from memlane.conversation.background_jobs import BackgroundJobs
from memlane.conversation.conversation_cache import ConversationCache
from memlane.conversation.conversation_log import (
    namespace,
    summary_entry,
    transcript_entry,
    transcript_namespace,
)
from memlane.conversation.conversation_state import ConversationState, is_pinned
from memlane.conversation.extraction_jobs import FactExtraction
from memlane.conversation.summary_backoff import SummaryBackoff, SummaryStatus
from memlane.messages import SUMMARY_PREFIX
from memlane.tokens import TokenEstimator
from memlane.types import ConversationTurn, utc_now

logger = logging.getLogger("memlane")

DEFAULT_SUMMARIZE_THRESHOLD = 3072
"""The summarise-above threshold where the budget allows it (see :func:`default_threshold`)."""

MIN_SUMMARY_ROOM = 16
"""Fewest tokens a summary may be given: its prefix and a few words."""

_SUMMARY_ROUNDS = 3
"""How often a host summarises again after other summaries made its result stale."""

_ELLIPSIS = " …"


def summary_room(max_tokens: int) -> int:
    """The fewest tokens a summary must be left in a budget of ``max_tokens``:
    :data:`MIN_SUMMARY_ROOM`, or all but one token of a budget too small for that (none of a
    one-token budget, whose only token the kept turns need: its default stays valid)."""
    return max(0, min(MIN_SUMMARY_ROOM, max_tokens - 1))


def default_threshold(max_tokens: int) -> int:
    """``min(3072, max_tokens * 3 // 4)``, clamped so that the summary keeps its room
    (:func:`summary_room`): the default is valid for every budget."""
    return max(
        1,
        min(
            DEFAULT_SUMMARIZE_THRESHOLD, max_tokens * 3 // 4, max_tokens - summary_room(max_tokens)
        ),
    )


def check_summary_room(max_tokens: int, threshold: int) -> None:
    """With a summarizer, the threshold must leave the summary room in the budget.

    Turns are kept up to the threshold and the summary gets the rest, so both are always
    sent: a threshold at (or near) the budget would leave turns neither sent nor summarised.

    Raises:
        ValueError: Fewer than :func:`summary_room` tokens left; the message names both
            values and a threshold that works (the default).
    """
    room = summary_room(max_tokens)
    if max_tokens - threshold < room:
        raise ValueError(
            f"summarize_threshold={threshold} leaves the summary {max_tokens - threshold} of "
            f"max_tokens={max_tokens} tokens; with a summarizer it must be at most "
            f"{max_tokens - room} (max_tokens - {room}), e.g. "
            f"summarize_threshold={default_threshold(max_tokens)}, the default"
        )


class RollingSummaries:
    """When and how a memory's conversations fold their oldest turns away.

    With a summarizer, turns beyond the threshold are folded into the rolling summary; a
    long-term strategy's triggers replace the threshold (a neuralyzer erases instead). Turns
    leaving the history also go to the fact extraction, if there is one.

    Args:
        conversations: The memory's conversations.
        summarizer: The memory's summarizer, or ``None``: the runner summarises with it.
        strategy: The memory's long-term strategy, or ``None``.
        max_tokens: The memory's budget.
        threshold: The memory's ``summarize_threshold``.
        estimator: Counts a summary's tokens.
        count_messages: Counts messages as a turn's are counted.
        retain_transcript: Keep summarised turns in the transcript.
        background: Summarise after ``add_turn`` returns.
        jobs: Where background summaries are tracked.
        extraction: The fact extraction, or ``None``.
    """

    __slots__ = (
        "_background",
        "_conversations",
        "_count_messages",
        "_estimator",
        "_jobs",
        "_max_tokens",
        "_retain_transcript",
        "_threshold",
        "backoff",
        "extraction",
        "follows_turn",
        "strategy",
        "summarizer",
    )

    def __init__(
        self,
        conversations: ConversationCache,
        *,
        summarizer: Summarizer | None,
        strategy: Any,
        max_tokens: int,
        threshold: int,
        estimator: TokenEstimator,
        count_messages: Callable[[Any], int],
        retain_transcript: bool,
        background: bool,
        jobs: BackgroundJobs,
        extraction: FactExtraction | None,
    ) -> None:
        self._conversations = conversations
        self.summarizer = summarizer
        self.strategy = strategy
        self._max_tokens = max_tokens
        self._threshold = threshold
        self._estimator = estimator
        self._count_messages = count_messages
        self._retain_transcript = retain_transcript
        self._background = background
        self._jobs = jobs
        self.extraction = extraction
        self.backoff = SummaryBackoff()
        # Whether anything follows a new turn: without, adding one is pure bookkeeping.
        self.follows_turn = summarizer is not None or strategy is not None or extraction is not None

    def after_turn_plan(self, cid: str, state: ConversationState) -> Plan[None]:
        """What follows a new turn: the turns it pushed out of the history go to the fact
        extraction, and the oldest are summarised (in the background, if asked) when over
        the threshold."""
        if self.extraction is not None:
            yield from self.extraction.extract_plan(cid, state, state.first_in_history)
        if self.eviction_count(state):
            if self._calls_summarizer and not self.backoff.ready(cid, state.summarized_turns):
                return  # backed off: the history keeps the budget by leaving the oldest out
            if self._background:
                jobs = self._jobs.summaries
                if cid not in jobs:  # at most one in flight per conversation
                    jobs[cid] = yield Spawn(lambda: self._background_plan(cid))
            else:
                yield from self.summarize_plan(cid, background=False)

    # ------------------------------------------------------------------ summaries

    def eviction_count(self, state: ConversationState) -> int:
        """How many of the oldest turns to fold into the summary (0: none).

        Those over the threshold (the newest stays on that account), and every turn the
        history no longer sends beside the summary, the newest included: with a summarizer,
        a turn is sent or summarised, never neither.
        """
        if self.strategy is not None:  # its triggers replace the threshold
            from memlane.conversation.applied_strategies import fold_count

            return fold_count(self.strategy, state, self._count_messages)
        if self.summarizer is None:
            return 0
        records = state.records
        count = 0
        threshold = self.threshold_of(state)
        total = state.total_tokens
        if total > threshold:
            excess = total - threshold
            freed = 0
            while freed < excess and count < len(records) - 1:
                if not is_pinned(records[count]):  # a pin is passed over, not freed
                    freed += records[count][3]
                count += 1
        unsent = state.first_in_history - state.summarized_turns
        return max(count, unsent)

    def threshold_of(self, state: ConversationState) -> int:
        """The conversation's own threshold, kept with it since it was created."""
        return self._conversations.budget_of(state).summarize_threshold or self._threshold

    def pin_room(self, state: ConversationState) -> int:
        """The most tokens the pinned turns of a conversation may take: with a summarizer
        its threshold (the summary keeps the rest of the budget), else its whole budget."""
        if self.summarizer is None and self.strategy is None:
            return self._conversations.budget_of(state).max_tokens
        return self.threshold_of(state)

    def budget_text(self, state: ConversationState) -> str:
        """The budget the pins' room comes from, as an error names it."""
        budget = self._conversations.budget_of(state)
        if self.summarizer is None and self.strategy is None:
            return f"max_tokens={budget.max_tokens}"
        return (
            f"max_tokens={budget.max_tokens} less the summary's room above "
            f"summarize_threshold={self.threshold_of(state)}"
        )

    def fold_all_count(self, state: ConversationState) -> int:
        """How many of the oldest turns :meth:`summarize_now_plan` folds: all but the
        interactions a summarizer strategy keeps (``interaction_keep``)."""
        keep = getattr(self.strategy, "interaction_keep", 0)
        return max(0, len(state.records) - keep)

    @property
    def _calls_summarizer(self) -> bool:
        return self.summarizer is not None and not self._erases

    def summary_input(
        self, state: ConversationState, count: int, focus: str | None = None
    ) -> list[ConversationTurn]:
        """What the summarizer is given to fold the ``count`` oldest turns: the previous
        summary (a leading turn marked ``{"summary": True}``), the focus line (a turn marked
        ``{"focus": True}`` whose ``user_prompt`` it is), then those turns, pins left out."""
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
        if focus:
            turns.append(
                ConversationTurn(
                    turn_id=0, user_prompt=focus, assistant_response="", metadata={"focus": True}
                )
            )
        records = state.records
        turns.extend(state.turn(i) for i in range(count) if not is_pinned(records[i]))
        return turns

    def _background_plan(self, cid: str) -> Plan[None]:
        """The summaries of one conversation, after the turns that asked for them returned."""
        try:
            yield from self.summarize_plan(cid, background=True)
        except Exception:  # noqa: BLE001  # nobody awaits a background job: say what failed
            logger.warning("memlane: background summary of %r failed", cid, exc_info=True)
        finally:
            # Still under the conversation's lock when the plan ends normally: a turn added
            # after this sees no job in flight and starts one.
            self._jobs.summaries.pop(cid, None)

    def summarize_plan(
        self, cid: str, *, background: bool, now: bool = False, focus: str | None = None
    ) -> Plan[str | None]:
        """Folds the oldest turns into the summary while the retained turns exceed the threshold.

        Inline, the caller holds the conversation's lock throughout. In the background the
        lock is held to read the turns and to commit, never while the summarizer runs, so
        turns keep being added meanwhile, and the job goes on until the turns kept are back
        under the threshold. A summary commits only if no other summary did
        since its turns were read (another host's, on a shared store); otherwise it is
        discarded and, if the conversation is still over its threshold, made again from the
        new state.

        A summarizer that fails (raises, or answers an empty text) loses no turn: it is
        reported in one line and the conversation is backed off (see
        :class:`~memlane.conversation.summary_backoff.SummaryBackoff`). ``now``: fold every
        turn but those kept (:meth:`fold_all_count`) once, with ``focus``, and raise a
        failure instead. Returns the summary committed last (``None``: none).
        """
        lock: HybridLock | None = None
        stale = 0
        committed: str | None = None
        while stale < _SUMMARY_ROUNDS:
            if background and lock is None:
                lock = yield from self._conversations.locked(cid)
            state = yield from self._conversations.coherent_plan(cid, create=False)
            if state is None:
                return committed
            count = self.fold_all_count(state) if now else self.eviction_count(state)
            if not count:
                return committed
            turns = self.summary_input(state, count, focus)
            folds = any(not is_pinned(state.records[i]) for i in range(count))
            basis = (state, state.summarized_turns, tuple(state.entry_ids)[:count])
            if lock is not None:
                yield Release(lock)
                lock = None
            summary: str | None = None  # a neuralyzer erases: no summary
            if not self._erases:
                # Only pins to pass over: nothing to summarise, the summary stays.
                summary = state.summary
            if self._calls_summarizer and folds:
                try:
                    summary = yield self._summarize_op(cid, basis[1], turns, count)
                    if not isinstance(summary, str):
                        raise TypeError(f"summarizer must return str, not {type(summary).__name__}")
                    if not summary.strip():
                        raise ValueError("the summarizer returned an empty summary")
                except Exception as exc:
                    # A failing summarizer must never lose a turn, nor be retried every turn.
                    waiting = state.first_in_history - state.summarized_turns
                    self.backoff.failed(cid, basis[1], exc, self.summarizer, max(count, waiting))
                    if now:
                        raise
                    return committed
            if background:
                lock = yield from self._conversations.locked(cid)
            if (yield from self.commit_plan(cid, basis, count, summary)):
                self.backoff.succeeded(cid)
                committed = summary
                if now:
                    return committed
            else:
                stale += 1
            # Again while anything is left to fold: a longer summary leaves the history less
            # room, and in the background turns added while the summarizer ran may exceed
            # the threshold. Each round folds at least one turn, so the loop ends.
        return committed

    def _summarize_op(
        self, cid: str, summarized: int, turns: list[ConversationTurn], count: int
    ) -> Call:
        """The summarizer's call on ``turns``, as the runner makes a :class:`Summarize`.

        Awaited, a caller that gives up on a summarizer that hangs (``asyncio.timeout``)
        cancels it: that is a failure too, or every turn would wait for it again. The runner
        does not hand a cancellation to the plan, so it is recorded here.
        """
        summarizer = self.summarizer

        def one() -> Plan[str]:
            summary: str = yield Summarize(turns)
            return summary

        async def awaiting() -> str:
            try:
                return await run_async(one(), None, summarizer)
            except asyncio.CancelledError:
                self.backoff.failed(
                    cid, summarized, "cancelled while summarising", summarizer, count
                )
                raise

        return Call(lambda: run_sync(one(), None, summarizer), awaiting)

    def status_plan(self, cid: str) -> Plan[SummaryStatus]:
        """How the summary of ``cid`` stands on this host (see :class:`SummaryStatus`)."""
        state = yield from self._conversations.existing_plan(cid)
        pending = self.eviction_count(state)
        running = cid in self._jobs.summaries
        return self.backoff.status(cid, state.summarized_turns, pending, running)

    def commit_plan(
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
        text, tokens = (None, 0) if summary is None else self.fit_summary(summary)
        while True:
            state = yield from self._conversations.coherent_plan(cid, create=False)
            if state is None or state.summarized_turns != summarized or len(state.records) < count:
                return False
            if self._conversations.persistent:
                if tuple(state.entry_ids)[:count] != entry_ids:
                    return False
            elif state is not first_state:  # cleared and started again meanwhile
                return False
            at = utc_now()
            if self.extraction is not None:  # the turns leave the history now, if not before
                yield from self.extraction.extract_plan(cid, state, summarized + count)
            if self._retain_transcript:
                # Kept before the summary commits: a crash between leaves transcript turns
                # that are still retained too, which get_transcript tells apart by id.
                kept = [transcript_entry(state.turn(i)) for i in range(count)]
                yield SaveMany(transcript_namespace(cid), kept)
            if not self._conversations.persistent:
                state.evict(count)
                state.summarized_turns += count
                state.set_summary(text, tokens, at)
                yield from self._knowledge_plan(cid, state.summarized_turns, text, at, strategy)
                return True
            ns = namespace(cid)
            entry = summary_entry(text, tokens, summarized + count, at, state.head)
            if (yield SaveIf(ns, entry, None)):
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
            yield Delete(ns, entry_id)
        yield from self._knowledge_plan(cid, state.summarized_turns, text, at, strategy)
        return True

    def _knowledge_plan(
        self, cid: str, summarized: int, text: str | None, at: Any, strategy: Any = None
    ) -> Plan[None]:
        """Keeps a committed summary in the strategy's knowledge base, split (if it has one)."""
        from memlane.conversation.knowledge import knowledge_entries, knowledge_namespace
        from memlane.strategies import SummarizerStrategy

        if strategy is None:
            strategy = self.strategy
        if text is None or not isinstance(strategy, SummarizerStrategy):
            return
        if strategy.knowledge_base is None:
            return
        chunks = knowledge_entries(strategy, cid, summarized, text, at, self._estimator.estimate)
        where = knowledge_namespace(strategy.knowledge_base.collection_id)
        yield SaveMany(where, chunks)

    @property
    def _erases(self) -> bool:
        """Whether folded turns are erased (a neuralyzer) rather than summarised."""
        from memlane.strategies import NeuralyzerStrategy

        return isinstance(self.strategy, NeuralyzerStrategy)

    def fit_summary(self, summary: str) -> tuple[str, int]:
        """The summary and its tokens (prefix included), cut to its room in the budget: with a
        summarizer ``max_tokens - summarize_threshold`` (the turns kept up to the threshold
        and the summary are sent together), else (an imported summary) half the budget when
        it would not fit at all. A summary left out of the history is a summary lost."""
        tokens = self._estimator.estimate(SUMMARY_PREFIX + summary)
        if self.summarizer is not None:
            room = limit = max(1, self._max_tokens - self._threshold)
        else:
            room, limit = self._max_tokens, self._max_tokens // 2
        if tokens <= room:
            return summary, tokens
        low, high = 0, len(summary)
        while low < high:  # the longest prefix that fits, by bisection
            mid = (low + high + 1) // 2
            if self._estimator.estimate(SUMMARY_PREFIX + summary[:mid] + _ELLIPSIS) <= limit:
                low = mid
            else:
                high = mid - 1
        cut = summary[:low] + _ELLIPSIS
        logger.warning(
            "memlane: summary of %d tokens exceeds its room of %d tokens (max_tokens=%d); "
            "cut to %d tokens",
            tokens,
            room,
            self._max_tokens,
            limit,
        )
        return cut, self._estimator.estimate(SUMMARY_PREFIX + cut)
