"""Recall: what long-term memory holds about a key or a query, by the fuzzy rule.

``recall`` reads across the kinds of record: the facts visible from a session, a user and an
agent (as ``get_fact`` sees them), then procedures and episodes, each matched by the rule of
:mod:`memlane.longterm.fuzzy` (every word occurs, in order). Ranked search by the store's own
index is :mod:`memlane.longterm.ranked_search`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memlane._runner import Load, Plan, async_method, sync_method
from memlane._validate import check_fraction, check_positive_int, check_str
from memlane.longterm.episodes import search_episodes_plan
from memlane.longterm.fact_model import Fact, render_value
from memlane.longterm.facts import (
    MEMORY_TYPES,
    check_ids,
    check_key,
    fact_namespace,
    find_fact_plan,
    read_fact,
)
from memlane.longterm.fuzzy import matches_words, query_words
from memlane.longterm.procedures import search_procedures_plan
from memlane.longterm.storage import StoragePart
from memlane.stores.protocol import SEARCH_TEXT

if TYPE_CHECKING:
    from memlane.types import MemoryEntry

__all__ = ["Recall", "visible_facts_plan"]


class Recall(StoragePart):
    """``recall`` of one long-term memory, with its ``async_`` twin.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def _recall(
        self,
        key: str | None = None,
        *,
        query: str | None = None,
        memory_type: str = "facts",
        limit: int = 10,
        min_confidence: float = 0.5,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Plan[list[Any]]:
        """What long-term memory holds about ``key`` or ``query``; always a list.

        * Neither: the facts visible from the ids (as :meth:`get_fact` sees them); other
          memories are only searched, so ``procedures`` or ``episodes`` give ``[]``.
        * ``key``: the fact ``get_fact`` finds; when there is none, the visible facts whose
          key matches ``key`` by the fuzzy rule (see :mod:`memlane.longterm.fuzzy`).
        * ``query``: the records of ``memory_type`` matching ``query`` by the fuzzy rule:
          a fact by its key and its value's text (``str`` as is, else JSON), procedures and
          episodes as their modules define.

        Facts are kept when their confidence is at least ``min_confidence`` and come highest
        confidence first. With ``memory_type="all"`` facts come first, then procedures,
        then episodes, ``limit`` in all.

        Args:
            key: A fact's key.
            query: Words to search for; not together with ``key``.
            memory_type: ``facts``, ``procedures``, ``episodes`` or ``all``.
            limit: At most this many results.
            min_confidence: 0.0–1.0.
            session_id: See the session scope.
            user_id: See the user scope.
            agent_id: See the agent scope.

        Raises:
            TypeError, ValueError: A bad argument, named in the message; both ``key`` and
                ``query``, or a query without words.
        """
        if key is not None:
            key = check_key(key)
        if query is not None:
            check_str(query, "query")
            if key is not None:
                raise ValueError("pass key or query, not both")
        if not isinstance(memory_type, str) or memory_type not in MEMORY_TYPES:
            allowed = ", ".join(repr(t) for t in MEMORY_TYPES)
            raise ValueError(f"memory_type must be one of {allowed}, got {memory_type!r}")
        limit = check_positive_int(limit, "limit")
        min_confidence = check_fraction(min_confidence, "min_confidence")
        check_ids(session_id, user_id, agent_id)
        words = query_words(key if key is not None else query or "")
        if query is not None and not words:
            raise ValueError(f"query must hold at least one word, got {query!r}")

        results: list[Any] = []
        if memory_type in ("facts", "all"):
            if key is not None:
                exact = yield from find_fact_plan(key, check_ids(session_id, user_id, agent_id))
                if exact is not None:
                    return _by_confidence([exact], min_confidence, limit)
            searching = key is not None or query is not None
            visible = yield from visible_facts_plan(
                session_id,
                user_id,
                agent_id,
                _fuzzy_candidate(words, by_key=key is not None) if searching else None,
            )
            if key is not None:
                visible = [f for f in visible if matches_words(words, f.key)]
            elif query is not None:
                visible = [
                    f for f in visible if matches_words(words, f"{f.key} {render_value(f.value)}")
                ]
            results.extend(_by_confidence(visible, min_confidence, limit))
        if key is None and query is None:
            return results
        for kind, search in (
            ("procedures", search_procedures_plan),
            ("episodes", search_episodes_plan),
        ):
            if memory_type in (kind, "all") and len(results) < limit:
                results.extend((yield from search(words, limit - len(results))))
        return results

    recall = sync_method(_recall)
    async_recall = async_method(_recall)


def visible_facts_plan(
    session_id: str | None,
    user_id: str | None,
    agent_id: str | None,
    wanted: Callable[[MemoryEntry], bool] | None = None,
) -> Plan[list[Fact]]:
    """The facts seen from these (already checked) ids, most specific scope first.

    A key held by several visible scopes appears once, from the most specific one, as
    ``get_fact`` would return it. ``wanted`` picks entries before their facts are read:
    reading (validating) a fact costs far more than a look at its stored key or search
    text, and a search over many facts keeps few.
    """
    seen: set[str] = set()
    visible: list[Fact] = []
    for scope, scope_id in check_ids(session_id, user_id, agent_id):
        where = fact_namespace(scope, scope_id)
        entries: list[MemoryEntry] = yield Load(where)
        for entry in entries:
            key = entry.key
            if key is None or key in seen:
                continue
            seen.add(key)  # a more specific scope's fact hides this key, wanted or not
            if wanted is None or wanted(entry):
                visible.append(read_fact(entry, where))
    return visible


def _fuzzy_candidate(words: list[str], *, by_key: bool) -> Callable[[MemoryEntry], bool]:
    """Whether a stored fact may match ``words``, from its entry alone: by its key, or by the
    search text memlane stores with every fact (its key and its value's text, what a query
    matches). An entry without that text is kept, for its fact to be matched."""

    def candidate(entry: MemoryEntry) -> bool:
        if by_key:
            return matches_words(words, entry.key or "")
        text = entry.metadata.get(SEARCH_TEXT) if isinstance(entry.metadata, dict) else None
        return not isinstance(text, str) or matches_words(words, text)

    return candidate


def _by_confidence(facts: list[Fact], min_confidence: float, limit: int) -> list[Fact]:
    kept = [f for f in facts if f.confidence >= min_confidence]
    kept.sort(key=lambda f: f.confidence, reverse=True)  # stable: ties keep scope order
    return kept[:limit]
