"""Fact extraction from a conversation: turns that leave the history go to the extractor in
the background, and the facts it finds are merged into long-term memory."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from memlane._runner import Call, Plan, Spawn
from memlane.conversation.background_jobs import BackgroundJobs
from memlane.conversation.conversation_cache import check_cid
from memlane.conversation.conversation_state import ConversationState
from memlane.types import ConversationTurn

if TYPE_CHECKING:
    from memlane.conversation.conversation_memory import ConversationMemory

logger = logging.getLogger("memlane")


def check_extraction(fact_extractor: Any, long_term: Any) -> tuple[Any, Any]:
    """A fact extractor and the long-term memory it fills: both, or neither.

    Raises:
        TypeError: ``fact_extractor`` lacks ``apply`` or ``async_apply``.
        ValueError: A ``fact_extractor`` without ``long_term``.
    """
    if fact_extractor is None:
        return None, long_term
    for name in ("apply", "async_apply"):
        if not callable(getattr(fact_extractor, name, None)):
            raise TypeError(
                "fact_extractor must be made by FactExtractor.from_config "
                f"(a {type(fact_extractor).__name__} has no {name}())"
            )
    if long_term is None:
        raise ValueError("fact_extractor needs long_term: the LongTermMemory facts go to")
    return fact_extractor, long_term


class FactExtraction:
    """Hands a conversation's leaving turns to ``extractor``, whose facts go to ``long_term``
    (in ``scope``/``scope_id``) through its ``remember``."""

    __slots__ = ("extractor", "jobs", "long_term", "scope", "scope_id")

    def __init__(
        self, extractor: Any, long_term: Any, scope: Any, scope_id: str | None, jobs: BackgroundJobs
    ) -> None:
        self.extractor = extractor
        self.long_term = long_term
        self.scope = scope
        self.scope_id = scope_id
        self.jobs = jobs

    def extract_plan(self, cid: str, state: ConversationState, upto: int) -> Plan[None]:
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
        job = yield Spawn(lambda: self._job_plan(cid, turns))
        self.jobs.add_extraction(job)

    def _job_plan(self, cid: str, turns: list[ConversationTurn]) -> Plan[None]:
        extractor, long_term = self.extractor, self.long_term
        scope, scope_id = self.scope, self.scope_id
        try:
            yield Call(
                lambda: extractor.apply(long_term, turns, scope=scope, scope_id=scope_id),
                lambda: extractor.async_apply(long_term, turns, scope=scope, scope_id=scope_id),
            )
        except Exception:  # noqa: BLE001  # nobody awaits a background job: say what failed
            logger.warning("memlane: fact extraction from %r failed", cid, exc_info=True)


def extract_facts(memory: ConversationMemory, conversation_id: str) -> Plan[None]:
    """Hands every turn the fact extractor has not seen yet, those still in the history
    included, to a background job that merges what it finds into long-term memory.

    What the end of an episode calls (a :class:`~memlane.agents.MemoryAgent` recording
    episodes does, after each run), so facts stated in a run's last turns do not wait for
    those turns to leave the budget. A turn goes to the extractor once per process, by this
    or by leaving the history. Returns at once; :meth:`flush` waits for the job.

    Raises:
        ValueError: The memory has no ``fact_extractor``.
        ConversationNotFoundError: An unknown ``conversation_id``.
    """
    cid = check_cid(conversation_id)
    extraction = memory._summaries.extraction
    if extraction is None:
        raise ValueError("extract_facts needs a fact_extractor (see FactExtractor.from_config)")
    yield from memory._conversations.locked(cid)
    state = yield from memory._conversations.existing_plan(cid)
    yield from extraction.extract_plan(cid, state, state.next_turn_id)


# The public pair is named after the plan method it would be on ConversationMemory.
extract_facts.__qualname__ = "ConversationMemory._extract_facts"
extract_facts.__name__ = "_extract_facts"
