"""Long-term memory: what agents keep across conversations.

* :class:`LongTermMemory` (``memory.py``) composes the kinds of record over one store.
* Facts (``facts.py``, models in ``model.py``): key-value knowledge in the scopes session,
  user, agent and global, confirmed, updated with history, contradicted, recalled through the
  scope hierarchy or by the fuzzy rule of ``fuzzy.py``.
* :func:`create_fact_extractor` (``extraction.py``): facts a model finds in conversation
  turns, merged through ``remember``.
"""

from __future__ import annotations

from memlane.longterm.extraction import ExtractedFact, FactExtractor, create_fact_extractor
from memlane.longterm.fuzzy import fuzzy_match, query_words
from memlane.longterm.memory import LongTermMemory
from memlane.longterm.model import Fact, FactRevision, FactScope, FactType, RememberResult

__all__ = [
    "ExtractedFact",
    "Fact",
    "FactExtractor",
    "FactRevision",
    "FactScope",
    "FactType",
    "LongTermMemory",
    "RememberResult",
    "create_fact_extractor",
    "fuzzy_match",
    "query_words",
]
