"""The options of a :class:`~memlane.ConversationMemory` that need more than a type check
(strategies, the summarizer, the fact scope), and the parts a memory builds from them.

Strategies (:mod:`memlane.strategies`, pydantic-ai) and long-term memory are imported here
only when a memory is given them, not by every memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlane._runner import Summarizer
from memlane.conversation.background_jobs import BackgroundJobs
from memlane.conversation.conversation_budget import ConversationBudget
from memlane.conversation.conversation_cache import ConversationCache
from memlane.conversation.extraction_jobs import FactExtraction
from memlane.conversation.history_reads import HistoryReads
from memlane.conversation.rolling_summary import RollingSummaries, check_summary_room
from memlane.conversation.turn_plans import TurnCounter
from memlane.tokens import TokenEstimator

if TYPE_CHECKING:
    from memlane.conversation.conversation_memory import ConversationMemory
    from memlane.strategies import LongTermStrategy, ShortTermStrategy


def check_flag(value: object, name: str) -> bool:
    """A ``bool`` option.

    Raises:
        TypeError: Not a ``bool``; names the option.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be bool, not {type(value).__name__}")
    return value


def check_short_term_option(value: object) -> list[ShortTermStrategy]:
    """``short_term=``: its strategies (``[]`` for ``None``)."""
    if value is None:
        return []
    from memlane.conversation.applied_strategies import check_short_term

    return check_short_term(value)


def split_long_term(long_term: Any, long_term_strategy: Any) -> tuple[LongTermStrategy | None, Any]:
    """The long-term strategy and the long-term memory, from ``long_term=`` (either one) and
    ``long_term_strategy=``.

    Raises:
        TypeError: A strategy given both ways, or not a long-term strategy.
    """
    if long_term is not None and not callable(getattr(long_term, "remember", None)):
        if long_term_strategy is not None:
            raise TypeError("pass the long-term strategy as long_term or long_term_strategy")
        long_term_strategy, long_term = long_term, None
    if long_term_strategy is None:
        return None, long_term
    from memlane.conversation.applied_strategies import check_long_term

    return check_long_term(long_term_strategy), long_term


def summarizer_strategy(strategy: Any) -> Any:
    """``strategy`` if it is a ``SummarizerStrategy``, else ``None``."""
    if strategy is None:
        return None
    from memlane.strategies import SummarizerStrategy

    return strategy if isinstance(strategy, SummarizerStrategy) else None


def resolve_summarizer(
    summarizer: object,
    strategy: LongTermStrategy | None,
    max_tokens: int,
    threshold: int,
    estimator: TokenEstimator,
) -> Summarizer | None:
    """The summarizer a memory uses: a summarizer strategy's own chain of density when it
    names a model, else ``summarizer``; bound to ``estimator`` if it counts tokens.

    Raises:
        TypeError: ``summarizer`` is not callable.
        ValueError: The threshold leaves a summary no room, or a summarizer strategy has no
            model anywhere.
    """
    if summarizer is not None and not callable(summarizer):
        hint = (
            "; pass a summarizer strategy as long_term_strategy= (it summarises with its model)"
            if summarizer_strategy(summarizer) is not None
            else ""
        )
        raise TypeError(f"summarizer must be callable, not {type(summarizer).__name__}{hint}")
    if summarizer is not None:
        check_summary_room(max_tokens, threshold)
    found: Summarizer | None = summarizer
    if (density := summarizer_strategy(strategy)) is not None:
        if density.model is not None:
            from memlane.conversation.applied_strategies import DensitySummarizer

            found = DensitySummarizer(density, None)
        elif found is None:
            raise ValueError(
                "a SummarizerStrategy needs a model: set its model, or pass summarizer="
            )
    bind_estimator = getattr(found, "bind_estimator", None)
    if callable(bind_estimator):
        bind_estimator(estimator)
    return found


def check_fact_scope(fact_extractor: Any, scope: Any, scope_id: str | None) -> tuple[Any, Any]:
    """The scope extracted facts go to, checked when there is an extractor."""
    if fact_extractor is None:
        return scope, scope_id
    from memlane.longterm.facts import check_scope  # only a host that extracts needs it

    return check_scope(scope, scope_id)


def build_parts(
    memory: ConversationMemory,
) -> tuple[ConversationCache, RollingSummaries, HistoryReads]:
    """The parts a memory holds, made from its checked options: its conversations, its
    summaries (with the fact extraction and the background jobs both share) and its reads."""
    jobs = BackgroundJobs()
    conversations = ConversationCache(
        memory.store,
        ConversationBudget(memory.max_tokens, memory.summarize_threshold),
        conversation_ttl=memory.conversation_ttl,
        retain_transcript=memory.retain_transcript,
        max_cached_conversations=memory.max_cached_conversations,
        jobs=jobs,
    )
    counter = TurnCounter(memory.estimator)
    extraction = None
    if memory.fact_extractor is not None:
        extraction = FactExtraction(
            memory.fact_extractor, memory.long_term, memory.fact_scope, memory.fact_scope_id, jobs
        )
    summaries = RollingSummaries(
        conversations,
        summarizer=memory.summarizer,
        strategy=memory.long_term_strategy,
        max_tokens=memory.max_tokens,
        threshold=memory.summarize_threshold,
        estimator=memory.estimator,
        count_messages=counter.count_messages,
        retain_transcript=memory.retain_transcript,
        background=memory.summarize_in_background,
        jobs=jobs,
        extraction=extraction,
    )
    return conversations, summaries, HistoryReads(conversations, memory.short_term, counter)
