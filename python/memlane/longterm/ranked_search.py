"""Ranked search over facts, procedures and episodes: by words, by meaning, or both.

(Formerly ``memlane.longterm.search``, which still re-exports it.)

``recall(query=...)`` is a pattern match: every word must occur, in order. :meth:`search`
ranks instead. By words (``mode="keyword"``): a record is found when it shares any word with
the query, and records are ordered by relevance (more of the query's words, and rarer ones,
score higher), then by confidence. Each record is written with its searchable text in the
entry's ``metadata["search_text"]`` (a fact: its key and value; a procedure: its name, content
and trigger phrases; an episode: its trigger, input, output, error and actions), so the store
indexes it as it is saved and a search reads only the index's postings of the query's words —
SQLite FTS5, PostgreSQL ``tsvector`` and ``pg_trgm``, an inverted index in memory (see
:class:`~memlane.stores.SearchableStore`). A custom store without ``search`` is searched by
reading the namespaces.

With an embedder the same text is embedded too, and ``mode="semantic"`` ranks by the cosine
similarity of the query's vector to each record's (the store's ``vector_search``), while
``mode="hybrid"``, the default then, fuses both rankings (:mod:`memlane.longterm.fusion`).
Both search every namespace asked for at once, so one ranking orders all kinds of record; the
scope rules (a more specific scope hides the same key) and ``min_confidence`` apply after.
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeGuard

from memlane._runner import (
    Call,
    Load,
    LoadByKey,
    Plan,
    Search,
    VectorSearch,
    async_method,
    run_async,
    run_sync,
    sync_method,
)
from memlane._validate import check_fraction, check_positive_int, check_str
from memlane.embeddings.resolve import async_embed_query, embed_query
from memlane.longterm.episode_model import EPISODES_NAMESPACE, Episode
from memlane.longterm.fact_model import Fact, FactScope
from memlane.longterm.fact_scopes import MEMORY_TYPES, check_ids, fact_namespace
from memlane.longterm.fusion import FUNCTION_WORDS, fuse
from memlane.longterm.procedures import PROCEDURES_NAMESPACE, Procedure
from memlane.longterm.storage import StoragePart
from memlane.stores import MemoryStore, SearchableStore, SearchHit
from memlane.stores.protocol import rank_entries, search_terms
from memlane.types import MemoryEntry

__all__ = ["MIN_FETCH", "MODES", "RankedSearch", "search_call", "search_plan"]

Record = Fact | Procedure | Episode

MODES = ("hybrid", "semantic", "keyword")
"""The ways ``search`` judges relevance."""

MIN_FETCH = 20
"""Hits asked of each list (keyword, semantic) at least, before fusing and filtering: fusion
needs candidates beyond the first ``limit`` to reorder. Each hit is a row read and an entry
built (the larger share of a hybrid search's time after the vector pass); 20 gives the same
recall@1 and @5 in every mode as 50 did on ``benches/recall_questions.py``, alone and among
1,000 distractors."""


def search_plan(
    store: MemoryStore, namespaces: list[str], query: str, limit: int, floor: float
) -> Plan[list[SearchHit]]:
    """One ranked search of ``namespaces``: the store's own, or, for a store without
    ``search``, a read of the namespaces ranked here the same way."""
    if _searchable(store):
        hits: list[SearchHit] = yield Search(namespaces, query, limit=limit, min_importance=floor)
        return hits
    entries: list[MemoryEntry] = []
    for name in namespaces:
        entries.extend((yield Load(name)))
    return _ranked(entries, query, limit, floor)


def search_call(
    store: MemoryStore, namespaces: list[str], query: str, limit: int, floor: float
) -> Call:
    """:func:`search_plan` as one operation, for a plan that yields rather than delegates."""
    return Call(
        lambda: run_sync(search_plan(store, namespaces, query, limit, floor), store),
        lambda: run_async(search_plan(store, namespaces, query, limit, floor), store),
    )


def _searchable(store: MemoryStore) -> TypeGuard[SearchableStore]:
    # A store written against the protocol before it had search is still searched (by reading).
    return callable(getattr(store, "search", None))


def _ranked(entries: list[MemoryEntry], query: str, limit: int, floor: float) -> list[SearchHit]:
    return rank_entries(entries, list(dict.fromkeys(search_terms(query))), limit, floor)


class RankedSearch(StoragePart):
    """``search`` of one long-term memory, with its ``async_`` twin.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def _search(
        self,
        query: str,
        *,
        memory_type: str = "all",
        limit: int = 10,
        min_confidence: float = 0.5,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        mode: str | None = None,
    ) -> Plan[list[Any]]:
        """The records most relevant to ``query``, best first; always a list.

        ``mode`` says how relevance is judged:

        * ``"keyword"`` (the default without an embedder): by the query's words, below.
        * ``"semantic"``: by meaning, the cosine similarity of the query's embedding to each
          record's (records not embedded yet are not found this way; see ``flush``).
        * ``"hybrid"`` (the default with an embedder): both, fused by
          :func:`~memlane.longterm.fusion.fuse`: meaning decides, selective words add to it,
          and a record holding an identifier of the query (``INV-48213``, an IP address)
          comes first.

        A record is found when its text shares at least one word with the query (words as
        :func:`~memlane.stores.protocol.search_terms` splits them: letters and digits, any
        case; everything else separates, so quotes, ``%``, FTS and ``$`` operators and regex
        metacharacters are never syntax). Results are ordered by relevance (more of the
        query's words, rarer words weighing more), then by confidence.

        Facts are those visible from the ids (as :meth:`get_fact` sees them: a key held by a
        more specific visible scope hides the less specific one) with a confidence of at
        least ``min_confidence``; procedures and episodes have no confidence and are not
        filtered by it. With ``memory_type="all"`` the three kinds are merged by relevance.

        Args:
            query: The words to search for; at least one.
            memory_type: ``facts``, ``procedures``, ``episodes`` or ``all``.
            limit: At most this many results.
            min_confidence: 0.0–1.0, for facts.
            session_id: See the session scope.
            user_id: See the user scope.
            agent_id: See the agent scope.
            mode: ``hybrid``, ``semantic``, ``keyword``, or ``None`` for the default.

        Returns:
            :class:`~memlane.longterm.Fact`, :class:`~memlane.longterm.Procedure` and
            :class:`~memlane.longterm.Episode` objects.

        Raises:
            TypeError, ValueError: A bad argument, named in the message, or a query without
                words; ``semantic`` or ``hybrid`` without an embedder (names ``embedder``:
                there is no silent fallback to keywords). Nothing is read.
        """
        check_str(query, "query")
        if not search_terms(query):
            raise ValueError(f"query must hold at least one word, got {query!r}")
        if not isinstance(memory_type, str) or memory_type not in MEMORY_TYPES:
            allowed = ", ".join(repr(t) for t in MEMORY_TYPES)
            raise ValueError(f"memory_type must be one of {allowed}, got {memory_type!r}")
        limit = check_positive_int(limit, "limit")
        min_confidence = check_fraction(min_confidence, "min_confidence")
        visible = check_ids(session_id, user_id, agent_id)
        how = self._mode(mode)
        if how != "keyword":
            return (
                yield from self._meaning_plan(
                    how, visible, query, memory_type, limit, min_confidence
                )
            )

        ranked: list[tuple[float, float, int, Record]] = []
        if memory_type in ("facts", "all"):
            found = yield from self._search_facts_plan(visible, query, limit, min_confidence)
            ranked.extend((score, fact.confidence, len(ranked), fact) for score, fact in found)
        for kind, where, load in (
            ("procedures", PROCEDURES_NAMESPACE, Procedure.model_validate),
            ("episodes", EPISODES_NAMESPACE, Episode.model_validate),
        ):
            if memory_type in (kind, "all"):
                hits = yield from search_plan(self.store, [where], query, limit, 0.0)
                ranked.extend((h.score, 0.0, len(ranked), load(h.entry.content)) for h in hits)
        ranked.sort(key=lambda r: (-r[0], -r[1], r[2]))
        return [record for _, _, _, record in ranked[:limit]]

    search = sync_method(_search)
    async_search = async_method(_search)

    def _mode(self, mode: object) -> str:
        """The search mode asked for, or the default: hybrid with an embedder, else keyword."""
        if mode is None:
            return "keyword" if self._storage.embedder is None else "hybrid"
        if not isinstance(mode, str) or mode not in MODES:
            allowed = ", ".join(repr(m) for m in MODES)
            raise ValueError(f"mode must be one of {allowed} or None, got {mode!r}")
        if mode != "keyword" and self._storage.embedder is None:
            raise ValueError(
                f"mode={mode!r} needs an embedder: pass embedder= to the memory "
                "(e.g. embedder='local'), or search with mode='keyword'"
            )
        return mode

    def _meaning_plan(
        self,
        mode: str,
        visible: list[tuple[FactScope, str | None]],
        query: str,
        memory_type: str,
        limit: int,
        min_confidence: float,
    ) -> Plan[list[Any]]:
        """``search`` by meaning (``semantic``) or by meaning and words (``hybrid``).

        One vector search (and one keyword search) over every namespace asked for, so one
        ranking orders all kinds of record. Facts below ``min_confidence`` and facts hidden by
        a more specific scope are dropped after ranking, as by keyword; both lists ask for
        more than ``limit`` so the gaps fill, and for twice as many again when they do not.
        """
        embedder, model = self._storage.embedder, self._storage.model
        assert embedder is not None  # checked by _mode
        assert model is not None
        facts = [fact_namespace(scope, scope_id) for scope, scope_id in visible]
        names = list(facts) if memory_type in ("facts", "all") else []
        if memory_type in ("procedures", "all"):
            names.append(PROCEDURES_NAMESPACE)
        if memory_type in ("episodes", "all"):
            names.append(EPISODES_NAMESPACE)
        rank = {name: i for i, name in enumerate(facts)}
        # Fusion takes no evidence from function words ("how", "the", "her"), so the keyword
        # search is not asked for them: their postings are the longest of the index, and the
        # measured ranking is the same without them (recall@1 110 -> 109 of 160 questions,
        # recall@5 131 -> 132, on benches/recall_questions.py with 1,000 distractors).
        words = " ".join(t for t in dict.fromkeys(search_terms(query)) if t not in FUNCTION_WORDS)
        vector: list[float] = yield Call(
            partial(embed_query, embedder, query), partial(async_embed_query, embedder, query)
        )
        fetch = max(limit * 4, MIN_FETCH)
        while True:
            semantic: list[SearchHit] = yield VectorSearch(names, vector, model, limit=fetch)
            hits, exhausted = semantic, len(semantic) < fetch
            if mode == "hybrid":
                keyword: list[SearchHit] = []
                if words:
                    keyword = yield from search_plan(self.store, names, words, fetch, 0.0)
                hits = fuse(keyword, semantic, query, limit=fetch)
                exhausted = exhausted and len(keyword) < fetch
            found: list[Record] = []
            for hit in hits:
                record = _record(hit.entry.content)
                if isinstance(record, Fact):
                    if record.confidence < min_confidence:
                        continue
                    level = rank[fact_namespace(record.scope, record.scope_id)]
                    if (yield from _hidden_plan(facts[:level], record.key)):
                        continue
                found.append(record)
                if len(found) == limit:
                    return found
            if exhausted:
                return found
            fetch *= 2

    def _search_facts_plan(
        self,
        visible: list[tuple[FactScope, str | None]],
        query: str,
        limit: int,
        min_confidence: float,
    ) -> Plan[list[tuple[float, Fact]]]:
        """The visible facts most relevant to ``query``, with their scores, best first.

        A hit from a less specific scope whose key a more specific visible scope also holds
        is hidden (``get_fact`` would return the other); one ``load_by_key`` per such hit
        tells, so hidden hits cost their count, never a read of the scopes.
        """
        names = [fact_namespace(scope, scope_id) for scope, scope_id in visible]
        rank = {name: i for i, name in enumerate(names)}
        # Hidden hits leave gaps; asking for more than ``limit`` fills them, and in the rare
        # case it does not, the next round asks for twice as many.
        wanted = limit * len(names)
        while True:
            hits = yield from search_plan(self.store, names, query, wanted, min_confidence)
            found: list[tuple[float, Fact]] = []
            for hit in hits:
                fact = Fact.model_validate(hit.entry.content)
                level = rank[fact_namespace(fact.scope, fact.scope_id)]
                hidden = False
                for name in names[:level]:
                    if (yield LoadByKey(name, fact.key)) is not None:
                        hidden = True
                        break
                if not hidden:
                    found.append((hit.score, fact))
                if len(found) == limit:
                    return found
            if len(hits) < wanted:
                return found
            wanted *= 2


def _record(content: Any) -> Record:
    # One search spans the three kinds; each has a field the others lack.
    if "fact_type" in content:
        return Fact.model_validate(content)
    if "procedure_type" in content:
        return Procedure.model_validate(content)
    return Episode.model_validate(content)


def _hidden_plan(more_specific: list[str], key: str) -> Plan[bool]:
    """Whether one of the more specific visible scopes holds ``key`` (and so hides it)."""
    for name in more_specific:
        if (yield LoadByKey(name, key)) is not None:
            return True
    return False
