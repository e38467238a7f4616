"""Long-term memory: what agents keep across conversations.

* :class:`LongTermMemory` (``memory.py``) composes the kinds of record over one store.
* Facts (``facts.py``, models in ``model.py``): key-value knowledge in the scopes session,
  user, agent and global, confirmed, updated with history, contradicted, recalled through the
  scope hierarchy or by the fuzzy rule of ``fuzzy.py``.
"""

from __future__ import annotations

from memlane.longterm.fuzzy import fuzzy_match, query_words
from memlane.longterm.memory import LongTermMemory
from memlane.longterm.model import Fact, FactRevision, FactScope, FactType, RememberResult

__all__ = [
    "Fact",
    "FactRevision",
    "FactScope",
    "FactType",
    "LongTermMemory",
    "RememberResult",
    "fuzzy_match",
    "query_words",
]
