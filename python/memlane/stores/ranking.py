"""Search by words without an index: the terms of a text, BM25 weights, ranking entries.

What every :class:`~memlane.stores.protocol.SearchableStore` shares: how a text splits into
terms, which metadata field is searched, and :func:`rank_entries`, the reference ranking the
stores without a full-text index use and the indexed ones are tested against.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from memlane.types import MemoryEntry

SEARCH_TEXT = "search_text"
"""The metadata field a :class:`SearchableStore` indexes: an entry is searchable when
``entry.metadata["search_text"]`` is a ``str``, and only by that text."""


class SearchHit(NamedTuple):
    """One result of :meth:`SearchableStore.search`: the entry and its relevance (> 0)."""

    entry: MemoryEntry
    score: float


# Letters and digits of any script; everything else (underscore, hyphen, punctuation, quotes,
# operators, whitespace) only separates terms.
_TERM = re.compile(r"[^\W_]+")


def search_terms(text: str) -> list[str]:
    """The terms ``text`` is indexed and searched by: casefolded runs of letters and digits.

    ``"user_timezone: Australia/Adelaide"`` gives ``user, timezone, australia, adelaide``;
    ``'"a" OR b*'`` gives ``a, or, b`` (operators are words or separators, never syntax).
    """
    return _TERM.findall(text.casefold())


def search_text(entry: MemoryEntry) -> str | None:
    """The text an entry is searched by, or ``None`` when it is not searchable."""
    text = entry.metadata.get(SEARCH_TEXT)
    return text if isinstance(text, str) else None


BM25_K1 = 1.2
BM25_B = 0.75


def bm25(tf: int, df: int, docs: int, length: int, avg_length: float) -> float:
    """One term's BM25 weight in one document (Robertson–Spärck Jones idf, always > 0).

    Args:
        tf: The term's occurrences in the document.
        df: How many documents of the corpus hold the term.
        docs: How many documents the corpus has.
        length: The document's length in terms.
        avg_length: The corpus's mean document length in terms.
    """
    idf = math.log(1.0 + (docs - df + 0.5) / (df + 0.5))
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg_length) if avg_length else BM25_K1
    return idf * tf * (BM25_K1 + 1.0) / (tf + norm)


def rank_entries(
    entries: Iterable[MemoryEntry], terms: Sequence[str], limit: int, min_importance: float
) -> list[SearchHit]:
    """:meth:`SearchableStore.search` by reading every entry: the fallback of stores without
    an index (a file store, a MongoDB server without text indexes), and the reference the
    indexed ones are tested against.

    The corpus is the searchable entries given (already limited to the searched namespaces
    and unexpired); ``terms`` are the query's distinct terms (:func:`check_search`).
    """
    docs: list[tuple[MemoryEntry, dict[str, int], int]] = []
    for entry in entries:
        text = search_text(entry)
        if text is None:
            continue
        counts: dict[str, int] = {}
        words = search_terms(text)
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        docs.append((entry, counts, len(words)))
    if not docs or not terms:
        return []
    avg = sum(length for _, _, length in docs) / len(docs)
    df = {t: sum(1 for _, counts, _ in docs if t in counts) for t in terms}
    hits: list[tuple[float, int, SearchHit]] = []
    for order, (entry, counts, length) in enumerate(docs):
        if entry.importance < min_importance:
            continue
        score = 0.0
        for t in terms:
            if t in counts:
                score += bm25(counts[t], df[t], len(docs), length, avg)
        if score > 0.0:
            hits.append((score, order, SearchHit(entry, score)))
    hits.sort(key=lambda h: (-h[0], -h[2].entry.importance, h[1]))
    return [hit for _, _, hit in hits[:limit]]
