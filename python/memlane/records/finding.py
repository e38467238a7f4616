"""Search over every scope: what ``memlane search QUERY`` does when no id narrows it.

Long-term memory's own search sees the facts visible from the ids it is given (global ones
always); an operator looking for "lisbon weather" wants every user's, agent's and session's
facts too. Each kind is searched through the store's index (one search over every fact
namespace), and the kinds are merged by score, as long-term search merges them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memlane._runner import run_sync
from memlane._validate import check_positive_int, check_str
from memlane.longterm import Episode, Fact, Procedure
from memlane.longterm.episodes import EPISODES_NAMESPACE
from memlane.longterm.facts import MEMORY_TYPES
from memlane.longterm.model import namespace
from memlane.longterm.procedures import PROCEDURES_NAMESPACE

# The one way long-term memory searches a store, with its fallback for stores without an
# index: shared so both searches rank alike.
from memlane.longterm.ranked_search import search_plan
from memlane.stores import MemoryStore
from memlane.stores.protocol import SearchHit, search_terms

__all__ = ["is_fact_namespace", "search_everywhere"]

_FACTS = namespace("longterm", "facts")


def is_fact_namespace(name: str) -> bool:
    """Whether ``name`` holds long-term facts (of any scope)."""
    # namespace() escapes ":" inside a part, so the first two parts are "longterm" and
    # "facts" exactly when the name starts so: no parsing of every namespace per search.
    return name == _FACTS or name.startswith(_FACTS + ":")


def search_everywhere(
    store: MemoryStore, query: str, memory_type: str, limit: int
) -> list[Fact | Episode | Procedure]:
    """The records of every scope most relevant to ``query``, best first.

    Raises:
        TypeError, ValueError: A query without words, an unknown memory type or a bad
            limit, with long-term search's messages.
    """
    check_str(query, "query")
    if not search_terms(query):
        raise ValueError(f"query must hold at least one word, got {query!r}")
    if memory_type not in MEMORY_TYPES:
        allowed = ", ".join(repr(t) for t in MEMORY_TYPES)
        raise ValueError(f"memory_type must be one of {allowed}, got {memory_type!r}")
    limit = check_positive_int(limit, "limit")
    fact_names = [name for name in store.namespaces() if is_fact_namespace(name)]
    places: list[tuple[list[str], Callable[[Any], Fact | Episode | Procedure]]] = []
    if memory_type in ("facts", "all") and fact_names:
        places.append((fact_names, Fact.model_validate))
    if memory_type in ("procedures", "all"):
        places.append(([PROCEDURES_NAMESPACE], Procedure.model_validate))
    if memory_type in ("episodes", "all"):
        places.append(([EPISODES_NAMESPACE], Episode.model_validate))
    ranked: list[tuple[float, int, SearchHit, Callable[[Any], Fact | Episode | Procedure]]] = []
    for names, load in places:
        ranked.extend(
            (hit.score, len(ranked), hit, load) for hit in _hits(store, names, query, limit)
        )
    ranked.sort(key=lambda r: (-r[0], r[1]))
    # Only the hits kept are validated: each kind brought up to ``limit`` of its own.
    return [load(hit.entry.content) for _, _, hit, load in ranked[:limit]]


def _hits(store: MemoryStore, names: list[str], query: str, limit: int) -> list[SearchHit]:
    return run_sync(search_plan(store, names, query, limit, 0.0), store)
