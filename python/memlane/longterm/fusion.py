"""Hybrid ranking: one list from a keyword (BM25) search and a semantic (cosine) search.

Reciprocal-rank fusion, the usual way to merge two rankings, fails on memory: a question asked
in other words shares only common words ("how", "her", "take") with the records, BM25 still
ranks something first on them, and RRF gives that noise the same weight as the semantic
ranking's first place. On the project's question set (``benches/recall_questions.py``) it takes
top-1 accuracy on paraphrases from semantic search's level down to a few percent.

:func:`fuse` trusts each list for what it is good at:

* The semantic score (cosine similarity) is the base of every record's score: meaning decides
  unless the words give real evidence.
* BM25 adds to it only through the query's content words (function words such as "how",
  "her", "the" are not evidence), and its weight falls as the evidence spreads: a word that
  picks out a few records (a name, a rare term) moves them up, a word half the candidates
  share moves nothing.
* An identifier in the query (a token holding a digit: ``INV-48213``, ``10.42.7.19``,
  ``#5521``, ``v2.14.3``) that a record holds exactly, as a whole token, puts that record
  above every record that does not: identifiers are looked up, not paraphrased, and BM25 alone
  cannot tell ``10.42.7.19`` from ``10.42.19.7`` (same terms).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from memlane._validate import check_positive_int, check_str, type_name
from memlane.stores.ranking import SearchHit, search_terms, search_text

__all__ = ["FUNCTION_WORDS", "fuse", "identifiers"]

# Written as text: a list literal of 150 words, one a line, would hide the module.
_FUNCTION_WORDS_TEXT = """a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each either few
for from further had has have having he her here hers herself him himself his how i if in
into is it its itself just me might more most must my myself neither no nor not now of off
on once only or other ought our ours out over own same shall she should so some such than
that the their theirs them themselves then there these they this those through to too
under until up very was we were what when where which while who whom whose why will with
would you your yours yourself s t d ll m re ve don doesn didn isn wasn aren weren won
tell me please know"""

FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())
"""Words that carry no content; a keyword match on them alone is no evidence."""

# A query token: what stays together between spaces and outer punctuation ("INV-48213",
# "10.42.7.19", "v2.14.3", "db-eu-west-3"); the trailing class keeps a sentence's last dot out.
_TOKEN = re.compile(r"[^\W_](?:[\w.:/#-]*[^\W_])?")

# The identifier bonus outranks any cosine (|cos| <= 1) plus keyword evidence (< 1).
_IDENTIFIER_BONUS = 3.0
# How much keyword evidence can add at most, in cosine units.
_KEYWORD_WEIGHT = 0.1


def identifiers(query: str) -> list[str]:
    """The identifier-like tokens of ``query``: those of three characters or more holding a
    digit, casefolded, in order.

    ``"what is INV-48213 and 10.42.7.19?"`` gives ``["inv-48213", "10.42.7.19"]``.
    """
    check_str(query, "query")
    found = (t.casefold() for t in _TOKEN.findall(query))
    # Two characters or fewer ("3", "v2") are numbers and versions too common to look up.
    return list(dict.fromkeys(t for t in found if len(t) > 2 and any(c.isdigit() for c in t)))


def _holds(text: str, identifier: str) -> bool:
    # A whole token: "10.42.7.1" must not match inside "10.42.7.19", nor "48213" inside
    # "148213" or "42.7.19" inside "10.42.7.19"; "#1552" and "ticket_1552" hold "1552", and
    # "INV-48213" holds "48213" (asked as "invoice 48213").
    pattern = r"(?<![^\W_])(?<![^\W_][.:/])" + re.escape(identifier) + r"(?![^\W_]|[.:/-][^\W_])"
    return re.search(pattern, text.casefold()) is not None


def fuse(
    keyword: Sequence[SearchHit],
    semantic: Sequence[SearchHit],
    query: str,
    *,
    limit: int,
) -> list[SearchHit]:
    """Merges a keyword and a semantic ranking of the same query into one, best first.

    Args:
        keyword: BM25 hits for ``query``, best first (fetch more than ``limit``).
        semantic: Cosine-similarity hits for ``query``, best first (fetch more than ``limit``).
        query: The query both lists answer.
        limit: At most this many results.

    Returns:
        Hits whose ``score`` is the fused score (> 0, higher is better); ties keep the
        semantic list's order, then the keyword list's.

    Raises:
        TypeError, ValueError: A bad argument, named in the message.
    """
    check_str(query, "query")
    limit = check_positive_int(limit, "limit")
    for name, hits in (("keyword", keyword), ("semantic", semantic)):
        if isinstance(hits, (str, bytes)) or not isinstance(hits, Sequence):
            raise TypeError(f"{name} must be a sequence of SearchHit, got {type_name(hits)}")
        for hit in hits:
            if not isinstance(hit, SearchHit):
                raise TypeError(f"{name} must hold SearchHit values, got {type_name(hit)}")

    entries: dict[str, SearchHit] = {}
    for hit in (*semantic, *keyword):
        entries.setdefault(hit.entry.entry_id, hit)
    if not entries:
        return []

    cosine = {h.entry.entry_id: h.score for h in semantic}
    # A record the semantic search did not return is at most as similar as its last hit.
    floor = min(cosine.values(), default=0.0)
    evidence = _keyword_evidence(keyword, query)
    wanted = identifiers(query)

    scored: list[tuple[float, int, SearchHit]] = []
    for order, (entry_id, hit) in enumerate(entries.items()):
        text = search_text(hit.entry) or ""
        exact = sum(1 for ident in wanted if _holds(text, ident))
        # Shifted by 2 so the worst cosine (-1) still gives a positive score.
        score = 2.0 + cosine.get(entry_id, floor) + evidence.get(entry_id, 0.0)
        score += _IDENTIFIER_BONUS * exact
        scored.append((score, order, SearchHit(hit.entry, score)))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [hit for _, _, hit in scored[:limit]]


def _keyword_evidence(keyword: Sequence[SearchHit], query: str) -> dict[str, float]:
    """What the keyword list says about each of its records, in cosine units (0 .. weight).

    Each content word of the query counts for the records holding it, weighted by how few of
    the keyword hits hold it (a word all of them hold tells nothing apart). A record's
    evidence is its share of the query's weighted content words. BM25's own score is not
    used: its length norm would reorder records holding the same words, which is the
    semantic score's job.
    """
    content = [t for t in dict.fromkeys(search_terms(query)) if t not in FUNCTION_WORDS]
    if not keyword or not content:
        return {}
    holders: dict[str, set[str]] = {t: set() for t in content}
    for hit in keyword:
        terms = set(search_terms(search_text(hit.entry) or ""))
        for t in content:
            if t in terms:
                holders[t].add(hit.entry.entry_id)
    pool = len(keyword)
    # A word held by one record of the pool weighs 1, by all of them 0; a word none holds
    # weighs 1 too, so a record matching one of two rare words gets half the evidence.
    weight = {
        t: 1.0 if pool == 1 else 1.0 - math.log(max(len(ids), 1)) / math.log(pool)
        for t, ids in holders.items()
    }
    total = sum(weight.values())
    if total == 0.0:
        return {}
    evidence: dict[str, float] = {}
    for hit in keyword:
        share = sum(w for t, w in weight.items() if hit.entry.entry_id in holders[t]) / total
        if share > 0.0:
            evidence[hit.entry.entry_id] = _KEYWORD_WEIGHT * share
    return evidence
