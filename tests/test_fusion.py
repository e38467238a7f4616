"""Hybrid ranking (``memlane.longterm.fusion.fuse``) on hand-made hits: no model needed.

Each test builds the two lists a store would return for one query — BM25 hits and cosine hits,
best first — and holds the fused list to the rule it checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.longterm.fusion import FUNCTION_WORDS, fuse, identifiers
from memlane.stores.protocol import SEARCH_TEXT, SearchHit
from memlane.types import MemoryEntry


def record(entry_id: str, text: str) -> MemoryEntry:
    return MemoryEntry(entry_id=entry_id, content={"text": text}, metadata={SEARCH_TEXT: text})


def ids(hits: list[SearchHit]) -> list[str]:
    return [hit.entry.entry_id for hit in hits]


COFFEE = record("coffee", "ada_coffee Ada drinks her coffee black, no sugar.")
COCOA = record("cocoa", "ada_sister Her sister drinks chocolate.")
BUS = record("bus", "ben_job Ben takes the night bus home.")
TEA = record("tea", "iris_drink Iris takes her tea with milk.")
STAGING = record("staging", "staging_db The staging database listens on 10.42.7.19.")
PRODUCTION = record("production", "production_db The production database listens on 10.42.19.7.")
CACHE = record("cache", "cache_server The cache server listens on 10.42.7.191.")


class TestIdentifiers:
    """A query's identifiers are its tokens of three characters or more that hold a digit."""

    def test_tokens_with_digits(self) -> None:
        query = "what is INV-48213 and 10.42.7.19? see #1552, v2.14.3."
        assert identifiers(query) == ["inv-48213", "10.42.7.19", "1552", "v2.14.3"]

    def test_words_and_short_numbers_are_not_identifiers(self) -> None:
        assert identifiers("how does she take her coffee at 9 or v2") == []

    def test_each_once(self) -> None:
        assert identifiers("PAY-1093 pay-1093 PAY-1093") == ["pay-1093"]

    def test_query_must_be_a_string(self) -> None:
        with pytest.raises(TypeError, match="query"):
            identifiers(42)  # type: ignore[arg-type]  # the check under test


class TestExactIdentifierFirst:
    """A record holding the query's identifier as a whole token ranks above every other."""

    def test_reordered_digits_lose_though_bm25_ties_and_cosine_prefers_them(self) -> None:
        # Same terms for BM25 (10, 42, 7, 19); the cosine even prefers the wrong record.
        keyword = [SearchHit(PRODUCTION, 4.0), SearchHit(STAGING, 4.0), SearchHit(CACHE, 3.0)]
        semantic = [SearchHit(PRODUCTION, 0.9), SearchHit(CACHE, 0.8), SearchHit(STAGING, 0.2)]
        fused = fuse(keyword, semantic, "which host is 10.42.7.19", limit=3)
        assert ids(fused) == ["staging", "production", "cache"]

    def test_a_longer_identifier_does_not_hold_a_prefix_of_it(self) -> None:
        keyword = [SearchHit(CACHE, 2.0)]
        semantic = [SearchHit(CACHE, 0.9), SearchHit(STAGING, 0.1)]
        assert ids(fuse(keyword, semantic, "10.42.7.19", limit=2)) == ["staging", "cache"]

    def test_ticket_and_invoice_spellings(self) -> None:
        ticket = record("t", "Ticket #5521: the login page times out.")
        other = record("o", "Ticket #5512: the login page is blank.")
        invoice = record("i", "Invoice INV-48213 was paid.")
        semantic = [SearchHit(other, 0.9), SearchHit(ticket, 0.5), SearchHit(invoice, 0.1)]
        assert ids(fuse([], semantic, "ticket 5521", limit=1)) == ["t"]
        assert ids(fuse([], semantic, "#5521", limit=1)) == ["t"]
        assert ids(fuse([], semantic, "invoice 48213", limit=1)) == ["i"]
        assert ids(fuse([], semantic, "INV-48213", limit=1)) == ["i"]

    def test_a_record_only_bm25_found_still_comes_first(self) -> None:
        semantic = [SearchHit(PRODUCTION, 0.95), SearchHit(CACHE, 0.9)]
        fused = fuse([SearchHit(STAGING, 1.0)], semantic, "10.42.7.19", limit=3)
        assert ids(fused) == ["staging", "production", "cache"]


class TestMeaningDecidesWithoutEvidence:
    """Keyword hits on function words, or on a word every hit shares, do not move the semantic
    order: that is what sinks reciprocal-rank fusion on paraphrased questions."""

    def test_function_word_noise_is_ignored(self) -> None:
        query = "how does she take her hot drink"
        assert {"how", "does", "she", "her"} <= FUNCTION_WORDS
        # BM25 ranks records on "her" alone ("take", "hot", "drink" are in none of them).
        keyword = [SearchHit(TEA, 5.0), SearchHit(COCOA, 4.0), SearchHit(COFFEE, 1.0)]
        semantic = [SearchHit(COFFEE, 0.46), SearchHit(COCOA, 0.44), SearchHit(TEA, 0.30)]
        assert ids(fuse(keyword, semantic, "how does she take her", limit=3)) == [
            "coffee",
            "cocoa",
            "tea",
        ]
        assert ids(fuse(keyword, semantic, query, limit=1)) == ["coffee"]

    def test_a_word_every_hit_holds_weighs_nothing(self) -> None:
        a = record("a", "the server listens on port one")
        b = record("b", "the server restarts nightly")
        keyword = [SearchHit(b, 9.0), SearchHit(a, 1.0)]
        semantic = [SearchHit(a, 0.50), SearchHit(b, 0.49)]
        assert ids(fuse(keyword, semantic, "which server", limit=2)) == ["a", "b"]

    def test_bm25_length_norm_does_not_reorder_equal_evidence(self) -> None:
        short = record("short", "Jack codes")
        long = record("long", "Jack plays tennis every Saturday morning at the club")
        keyword = [SearchHit(short, 3.0), SearchHit(long, 1.5)]
        semantic = [SearchHit(long, 0.61), SearchHit(short, 0.60)]
        fused = fuse(keyword, semantic, "which racket game does Jack enjoy", limit=2)
        assert ids(fused) == ["long", "short"]


class TestSelectiveWordsCount:
    """A content word few candidates hold lifts them over a close semantic neighbour, never
    over a clear semantic winner."""

    def _lists(self, gap: float) -> tuple[list[SearchHit], list[SearchHit]]:
        murakami = record("m", "Quinn is reading a novel by Haruki Murakami.")
        others = [record(f"o{i}", f"note {i} about the office kitchen") for i in range(9)]
        keyword = [SearchHit(murakami, 7.0)]
        semantic = [SearchHit(others[0], 0.5 + gap), SearchHit(murakami, 0.5)]
        semantic += [SearchHit(o, 0.1) for o in others[1:]]
        return keyword, semantic

    def test_close_neighbour_is_passed(self) -> None:
        keyword, semantic = self._lists(0.02)
        assert ids(fuse(keyword, semantic, "murakami novels", limit=1)) == ["m"]

    def test_clear_winner_stays(self) -> None:
        keyword, semantic = self._lists(0.4)
        assert ids(fuse(keyword, semantic, "murakami novels", limit=1)) == ["o0"]


class TestFusedList:
    """The output: each record once, at most ``limit``, positive scores, best first."""

    def test_union_once_each_sorted_and_limited(self) -> None:
        keyword = [SearchHit(TEA, 2.0), SearchHit(BUS, 1.0)]
        semantic = [SearchHit(COFFEE, 0.9), SearchHit(TEA, 0.2)]
        fused = fuse(keyword, semantic, "tea with milk", limit=10)
        assert sorted(ids(fused)) == ["bus", "coffee", "tea"]
        scores = [hit.score for hit in fused]
        assert scores == sorted(scores, reverse=True)
        assert ids(fuse(keyword, semantic, "tea with milk", limit=2)) == ids(fused)[:2]

    def test_scores_are_positive_even_for_opposite_vectors(self) -> None:
        semantic = [SearchHit(COFFEE, -0.5), SearchHit(TEA, -1.0)]
        fused = fuse([], semantic, "anything", limit=5)
        assert ids(fused) == ["coffee", "tea"]
        assert all(hit.score > 0 for hit in fused)

    def test_ties_keep_the_semantic_order(self) -> None:
        semantic = [SearchHit(BUS, 0.3), SearchHit(TEA, 0.3), SearchHit(COFFEE, 0.3)]
        assert ids(fuse([], semantic, "zzz", limit=3)) == ["bus", "tea", "coffee"]

    def test_nothing_found(self) -> None:
        assert fuse([], [], "INV-1", limit=3) == []

    def test_keyword_only(self) -> None:
        keyword = [SearchHit(TEA, 2.0), SearchHit(BUS, 1.0)]
        assert ids(fuse(keyword, [], "milk tea", limit=2)) == ["tea", "bus"]

    def test_entries_are_those_given(self) -> None:
        fused = fuse([SearchHit(TEA, 1.0)], [SearchHit(TEA, 0.4)], "tea", limit=1)
        assert fused[0].entry is TEA


class TestBadArguments:
    """Bad arguments raise TypeError/ValueError naming the parameter."""

    @pytest.mark.parametrize(
        ("kwargs", "error", "name"),
        [
            ({"limit": 0}, ValueError, "limit"),
            ({"limit": "3"}, TypeError, "limit"),
            ({"query": None}, TypeError, "query"),
            ({"keyword": "abc"}, TypeError, "keyword"),
            ({"semantic": [("x", 1.0)]}, TypeError, "semantic"),
            ({"keyword": None}, TypeError, "keyword"),
        ],
    )
    def test_named(self, kwargs: dict[str, Any], error: type[Exception], name: str) -> None:
        args: dict[str, Any] = {"keyword": [], "semantic": [], "query": "q", "limit": 3}
        args.update(kwargs)
        with pytest.raises(error, match=name):
            fuse(args["keyword"], args["semantic"], args["query"], limit=args["limit"])


_WORDS = ["coffee", "black", "her", "the", "ticket", "INV-48213", "10.42.7.19", "v2.14", "tea"]
_texts = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join)


@st.composite
def two_lists(draw: st.DrawFn) -> tuple[list[SearchHit], list[SearchHit], str]:
    """A keyword list and a semantic list over some records (some in both), and a query."""
    texts = draw(st.lists(_texts, min_size=0, max_size=12))
    records = [record(f"r{i}", text) for i, text in enumerate(texts)]
    in_keyword = draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    bm25 = draw(st.lists(st.floats(0.01, 20), min_size=len(records), max_size=len(records)))
    cos = draw(st.lists(st.floats(-1, 1), min_size=len(records), max_size=len(records)))
    in_semantic = draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records)))
    keyword = sorted(
        (SearchHit(r, s) for r, s, k in zip(records, bm25, in_keyword, strict=True) if k),
        key=lambda h: -h.score,
    )
    semantic = sorted(
        (SearchHit(r, c) for r, c, k in zip(records, cos, in_semantic, strict=True) if k),
        key=lambda h: -h.score,
    )
    return keyword, semantic, draw(_texts)


class TestFusionProperties:
    """On any two lists: each given record at most once, best first, positive, within
    ``limit``; a record holding the query's identifier above every record that does not."""

    @given(two_lists(), st.integers(1, 15))
    def test_invariants(
        self, lists: tuple[list[SearchHit], list[SearchHit], str], limit: int
    ) -> None:
        keyword, semantic, query = lists
        fused = fuse(keyword, semantic, query, limit=limit)
        given_ids = {h.entry.entry_id for h in (*keyword, *semantic)}
        assert len(fused) == min(limit, len(given_ids))
        assert len(set(ids(fused))) == len(fused)
        assert set(ids(fused)) <= given_ids
        scores = [h.score for h in fused]
        assert scores == sorted(scores, reverse=True)
        assert all(s > 0 for s in scores)
        wanted = identifiers(query)
        if wanted:
            holds = [
                any(w in h.entry.metadata[SEARCH_TEXT].casefold().split() for w in wanted)
                for h in fused
            ]
            assert holds == sorted(holds, reverse=True)  # every holder before every other
