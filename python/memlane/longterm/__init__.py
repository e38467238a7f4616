"""Long-term memory: what agents keep across conversations.

* :class:`LongTermMemory` (``long_term_memory.py``) holds one part per kind of record, all
  sharing one store and one embedder with the writer that embeds what they write
  (``storage.py``).
* Facts (``facts.py``, their plans in ``fact_plans.py``; models in ``fact_model.py``, their
  namespaces and scope checks in ``fact_scopes.py``): key-value knowledge in the scopes
  session, user, agent and global, confirmed, updated with history, contradicted.
* Episodes (``episodes.py``, data in ``episode_model.py``), procedures (``procedures.py``),
  users (``users.py``, data in ``user_model.py``).
* Finding: ``recall.py`` (the fuzzy rule of ``fuzzy.py``, through the scope hierarchy) and
  ``ranked_search.py`` (by the store's word index, by meaning, or both fused by
  ``fusion.py``); ``vector_upkeep.py`` (``flush``, ``reembed``).
* :meth:`LongTermMemory.forget_user` (``forget_user.py``): every record of one person, at once.
* :func:`create_fact_extractor` (``fact_extraction.py``): facts a model finds in conversation
  turns, merged through ``remember``.
* Shared by all: record namespaces (``namespaces.py``) and argument checks
  (``value_checks.py``). ``memory.py``, ``model.py``, ``search.py``, ``forget.py`` and
  ``extraction.py`` are the old module paths, re-exporting from these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memlane.errors import ProcedureNotFoundError, UserNotFoundError
from memlane.longterm.episodes import Episode, EpisodeOutcome
from memlane.longterm.fact_model import Fact, FactRevision, FactScope, FactType, RememberResult
from memlane.longterm.forget_user import ForgetReport
from memlane.longterm.fuzzy import fuzzy_match, query_words
from memlane.longterm.long_term_memory import LongTermMemory
from memlane.longterm.procedures import Procedure, ProcedureType
from memlane.longterm.users import MemoryUser, UserContext

if TYPE_CHECKING:
    from memlane.longterm.fact_extraction import (
        ExtractedFact,
        FactExtractor,
        create_fact_extractor,
    )

_EXTRACTION = frozenset({"ExtractedFact", "FactExtractor", "create_fact_extractor"})


def __getattr__(name: str) -> Any:
    """Fact extraction is imported when first named (PEP 562), not by every long-term memory."""
    if name not in _EXTRACTION:
        raise AttributeError(f"module 'memlane.longterm' has no attribute {name!r}")
    from memlane.longterm import fact_extraction

    value = getattr(fact_extraction, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Episode",
    "EpisodeOutcome",
    "ExtractedFact",
    "Fact",
    "FactExtractor",
    "FactRevision",
    "FactScope",
    "FactType",
    "ForgetReport",
    "LongTermMemory",
    "MemoryUser",
    "Procedure",
    "ProcedureNotFoundError",
    "ProcedureType",
    "RememberResult",
    "UserContext",
    "UserNotFoundError",
    "create_fact_extractor",
    "fuzzy_match",
    "query_words",
]
