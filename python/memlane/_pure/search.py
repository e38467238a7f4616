"""Pure-Python twin of the Rust search index: searchable entries ranked by BM25.

Reads line for line like ``rust/src/store/search.rs``, whose module documentation states the
invariants both keep, and does the same float operations in the same order, so both give
equal scores. Tokenizing is not done here: the caller splits texts and queries into terms
(:func:`memlane.stores.protocol.search_terms`, the one tokenizer).

In short: a document is identified by its entry id (``upsert`` replaces it, whatever its
namespace); corpus statistics (document count, mean length, document frequency) are kept
incrementally and cover every document in the index, expired ones and other namespaces'
included; a search reads only the postings of the query's terms; ties go to importance, then
to the oldest document (a document replaced within its namespace keeps its age).

The one exception to tokenizing elsewhere is :func:`ascii_terms`, what that tokenizer gives for
an ASCII text (a test holds the two equal): ``upsert_text`` indexes a saved entry's text by it.
"""

from __future__ import annotations

import heapq
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memlane._pure.store import _live

BM25_K1 = 1.2
BM25_B = 0.75


def bm25(tf: int, df: int, docs: int, length: int, avg_length: float) -> float:
    """One term's BM25 weight in one document (Robertson–Spärck Jones idf, always > 0).

    The operations of :func:`memlane.stores.protocol.bm25`, in its order (a test holds the two
    equal); ``df <= docs`` always holds, the document being scored is in the corpus.
    """
    idf = math.log(1.0 + ((docs - df) + 0.5) / (df + 0.5))
    # Only a corpus whose every document is empty has a mean length of 0, and then no term
    # matches; the guard keeps the formula total, as the reference's does.
    norm = BM25_K1 if avg_length == 0.0 else BM25_K1 * (1.0 - BM25_B + BM25_B * length / avg_length)
    return idf * tf * (BM25_K1 + 1.0) / (tf + norm)


_ASCII_RUN = re.compile(r"[a-z0-9]+")


def ascii_terms(text: str) -> list[str] | None:
    """The terms of ``text`` if it is ASCII, else ``None`` (the caller splits it).

    Over ASCII the tokenizer's ``[^\\W_]+`` of the casefolded text is the runs of ASCII letters
    and digits, lowercased.
    """
    if not text.isascii():
        return None
    return _ASCII_RUN.findall(text.lower())


@dataclass(slots=True)
class _Doc:
    entry_id: str
    namespace: str
    terms: list[str]  # each distinct term once: the postings _take removes the document from
    length: int
    importance: float
    expires_at: float | None
    payload: Any


def _best_first(hit: tuple[float, float, int]) -> tuple[float, float, int]:
    """Sort key: score, then importance, both highest first, then the oldest document."""
    score, importance, seq = hit
    return (-score, -importance, seq)


class SearchIndex:
    """Searchable documents with term postings: a search costs the postings of its terms."""

    def __init__(self) -> None:
        self._docs: dict[int, _Doc] = {}  # sequence number -> document
        self._ids: dict[str, int] = {}  # entry id -> sequence number
        self._namespaces: dict[str, set[int]] = {}  # namespace -> its documents
        self._postings: dict[str, dict[int, int]] = {}  # term -> (seq -> occurrences)
        self._total_length = 0
        self._next_seq = 0
        self._visited = 0  # postings read by every search so far
        # Searches run outside the store's write lock; this keeps them off half-made updates.
        self._lock = threading.Lock()

    def _take(self, seq: int) -> _Doc:
        doc = self._docs.pop(seq)
        del self._ids[doc.entry_id]
        members = self._namespaces[doc.namespace]
        members.discard(seq)
        if not members:
            del self._namespaces[doc.namespace]
        for term in doc.terms:
            posting = self._postings[term]
            del posting[seq]
            if not posting:
                del self._postings[term]
        self._total_length -= doc.length
        return doc

    def upsert(
        self,
        entry_id: str,
        namespace: str,
        terms: list[str],
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> None:
        """Indexes a document, replacing the one with the same ``entry_id``.

        ``terms`` are the document's terms in text order, repeats included (its term counts
        and its length); an empty list is a document no query finds, which still counts in
        the corpus.
        """
        with self._lock:
            seq = self._ids.get(entry_id)
            if seq is not None and self._docs[seq].namespace == namespace:
                self._take(seq)
            elif seq is not None:
                self._take(seq)
                self._next_seq += 1
                seq = self._next_seq
            else:
                self._next_seq += 1
                seq = self._next_seq
            length = len(terms)
            counts: dict[str, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            distinct = []
            for term, count in counts.items():
                self._postings.setdefault(term, {})[seq] = count
                distinct.append(term)
            self._total_length += length
            self._ids[entry_id] = seq
            self._namespaces.setdefault(namespace, set()).add(seq)
            self._docs[seq] = _Doc(
                entry_id, namespace, distinct, length, importance, expires_at, payload
            )

    def upsert_text(
        self,
        entry_id: str,
        namespace: str,
        text: str,
        importance: float,
        expires_at: float | None,
        payload: Any,
    ) -> bool:
        """:meth:`upsert` of ``text``'s terms when the index splits it itself (an ASCII text:
        see :func:`ascii_terms`); whether it did. ``False`` changes nothing: the caller splits
        the text and calls :meth:`upsert`."""
        terms = ascii_terms(text)
        if terms is None:
            return False
        self.upsert(entry_id, namespace, terms, importance, expires_at, payload)
        return True

    ascii_terms = staticmethod(ascii_terms)

    def remove(self, entry_id: str) -> bool:
        """Removes the document of ``entry_id``; whether there was one."""
        with self._lock:
            seq = self._ids.get(entry_id)
            if seq is None:
                return False
            self._take(seq)
            return True

    def clear(self, namespace: str) -> int:
        """Removes every document of a namespace (expired ones too); how many there were."""
        with self._lock:
            doomed = list(self._namespaces.get(namespace, ()))
            for seq in doomed:
                self._take(seq)
            return len(doomed)

    def cleanup_expired(self, now: float) -> int:
        """Removes documents expired at ``now`` everywhere; how many."""
        with self._lock:
            doomed = [seq for seq, doc in self._docs.items() if not _live(doc.expires_at, now)]
            for seq in doomed:
                self._take(seq)
            return len(doomed)

    def search(
        self,
        namespaces: Sequence[str],
        terms: Sequence[str],
        limit: int,
        min_importance: float,
        now: float,
    ) -> list[tuple[Any, float]]:
        """The best ``limit`` payloads for ``terms``, with their scores, best first.

        A candidate lies in one of ``namespaces``, is unexpired at ``now``, has ``importance
        >= min_importance`` and holds at least one of ``terms``. Its score is the sum, over the
        distinct ``terms`` in the order given, of each one's BM25 weight in it; the sum runs in
        that order so that it rounds as the reference's does.
        """
        with self._lock:
            if not self._docs or limit == 0:
                return []
            wanted = set(namespaces)
            docs = len(self._docs)
            avg_length = self._total_length / docs
            seen: set[str] = set()
            scores: dict[int, float] = {}
            for term in terms:
                if term in seen:
                    continue
                seen.add(term)
                posting = self._postings.get(term)
                if posting is None:
                    continue
                df = len(posting)
                self._visited += len(posting)
                for seq, tf in posting.items():
                    doc = self._docs[seq]
                    if (
                        doc.namespace not in wanted
                        or not _live(doc.expires_at, now)
                        or doc.importance < min_importance
                    ):
                        continue
                    scores[seq] = scores.get(seq, 0.0) + bm25(tf, df, docs, doc.length, avg_length)
            ranked = [(score, self._docs[seq].importance, seq) for seq, score in scores.items()]
            # Only the best `limit` are ordered: a common term can match most of the corpus.
            best = heapq.nsmallest(limit, ranked, key=_best_first)
            return [(self._docs[seq].payload, score) for score, _, seq in best]

    @property
    def visited(self) -> int:
        """Postings read by every search so far (a search's cost, for tests)."""
        return self._visited

    def __len__(self) -> int:
        """Number of documents, expired ones included."""
        return len(self._docs)
