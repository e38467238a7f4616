"""The search index: Rust against its twin, and ``InMemoryStore.search`` against the reference.

The Rust ``SearchIndex`` and its pure-Python twin are driven with the same operations and must
return the same payloads in the same order with equal scores, both equal to a model that reads
every document. On top, ``InMemoryStore.search`` must equal
:func:`~memlane.stores.protocol.rank_entries` over the store's live entries after any sequence
of writes, which is what "the index mirrors the table" means to a user.
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from conftest import require_rust_core
from memlane import _backend
from memlane._pure import search as pure
from memlane.errors import StoreClosedError
from memlane.stores import InMemoryStore, SearchableStore, SearchHit
from memlane.stores.protocol import (
    SEARCH_TEXT,
    bm25,
    next_version,
    rank_entries,
    search_terms,
    search_text,
)
from memlane.types import MemoryEntry, utc_now

SCORE_TOLERANCE = 1e-12

# Small pools so that operations collide: the same ids, namespaces and terms come up again.
NAMESPACES = ["a", "b", "\ud800"]  # a lone surrogate is a legal namespace in memory
ENTRY_IDS = ["e1", "e2", "e3", "e4", "e5", "e6"]
VOCABULARY = ["apple", "banana", "cherry", "date", "é", "x"]
IMPORTANCES = [0.0, 0.3, 0.5, 1.0]
# Expiry relative to the machine's clock; NaN never compares greater, so it is always expired.
EXPIRY_OFFSETS = [None, None, -5.0, 0.0, 1.0, 60.0, math.nan]


def close_scores(found: list[float], expected: list[float]) -> bool:
    return len(found) == len(expected) and all(
        abs(f - e) <= SCORE_TOLERANCE for f, e in zip(found, expected, strict=True)
    )


# ---------------------------------------------------------------------------- the index itself


@dataclass
class ModelDoc:
    namespace: str
    terms: list[str]
    importance: float
    expires_at: float | None
    payload: object


class IndexMachine(RuleBasedStateMachine):
    """Drives the Rust index, its twin and a read-everything model with the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.rust = require_rust_core().SearchIndex()
        self.py = pure.SearchIndex()
        # Entry id -> document, oldest first: the index's last tie-break.
        self.model: dict[str, ModelDoc] = {}
        self.now = 1_000.0
        self.serial = 0

    def expected(
        self, namespaces: list[str], terms: list[str], limit: int, min_importance: float
    ) -> list[tuple[object, float]]:
        """The search answer computed from every document, with the protocol's ``bm25``."""
        docs = list(self.model.values())
        if not docs:
            return []
        avg = sum(len(d.terms) for d in docs) / len(docs)
        distinct = list(dict.fromkeys(terms))
        df = {t: sum(1 for d in docs if t in d.terms) for t in distinct}
        ranked: list[tuple[float, float, int, object]] = []
        for age, d in enumerate(docs):
            live = d.expires_at is None or d.expires_at > self.now
            if d.namespace not in namespaces or not live or d.importance < min_importance:
                continue
            matched = [t for t in distinct if t in d.terms]
            if not matched:
                continue
            score = 0.0
            for t in matched:
                score += bm25(d.terms.count(t), df[t], len(docs), len(d.terms), avg)
            ranked.append((score, d.importance, age, d.payload))
        ranked.sort(key=lambda r: (-r[0], -r[1], r[2]))
        return [(payload, score) for score, _, _, payload in ranked[:limit]]

    @rule(
        entry_id=st.sampled_from(ENTRY_IDS),
        namespace=st.sampled_from(NAMESPACES),
        terms=st.lists(st.sampled_from(VOCABULARY), max_size=6),
        importance=st.sampled_from(IMPORTANCES),
        offset=st.sampled_from(EXPIRY_OFFSETS),
    )
    def upsert(
        self,
        entry_id: str,
        namespace: str,
        terms: list[str],
        importance: float,
        offset: float | None,
    ) -> None:
        self.serial += 1
        payload = ("payload", self.serial)  # one object, given to both: identity is compared
        expires_at = None if offset is None else self.now + offset
        args = (entry_id, namespace, terms, importance, expires_at, payload)
        assert self.rust.upsert(*args) is None
        self.py.upsert(*args)
        doc = ModelDoc(namespace, terms, importance, expires_at, payload)
        old = self.model.get(entry_id)
        if old is not None and old.namespace != namespace:
            del self.model[entry_id]  # a move makes it the newest
        self.model[entry_id] = doc

    @rule(
        entry_id=st.sampled_from(ENTRY_IDS),
        namespace=st.sampled_from(NAMESPACES),
        words=st.lists(st.sampled_from([*VOCABULARY, "Apple", "BANANA", "date42"]), max_size=6),
        separator=st.sampled_from([" ", "_", ", ", "/", " \t"]),
        importance=st.sampled_from(IMPORTANCES),
    )
    def upsert_text(
        self, entry_id: str, namespace: str, words: list[str], separator: str, importance: float
    ) -> None:
        """A text either index splits itself (ASCII) or leaves to the caller, as the store
        does: the same documents as ``upsert`` of its ``search_terms``."""
        self.serial += 1
        payload = ("payload", self.serial)
        text = separator.join(words)
        terms = search_terms(text)
        split = [
            index.upsert_text(entry_id, namespace, text, importance, None, payload)
            for index in (self.rust, self.py)
        ]
        assert split == [text.isascii()] * 2
        if not text.isascii():
            for index in (self.rust, self.py):
                index.upsert(entry_id, namespace, terms, importance, None, payload)
        old = self.model.get(entry_id)
        if old is not None and old.namespace != namespace:
            del self.model[entry_id]
        self.model[entry_id] = ModelDoc(namespace, terms, importance, None, payload)

    @rule(entry_id=st.sampled_from(ENTRY_IDS))
    def remove(self, entry_id: str) -> None:
        held = self.model.pop(entry_id, None) is not None
        assert self.rust.remove(entry_id) is held
        assert self.py.remove(entry_id) is held

    @rule(namespace=st.sampled_from(NAMESPACES))
    def clear(self, namespace: str) -> None:
        doomed = [i for i, d in self.model.items() if d.namespace == namespace]
        for entry_id in doomed:
            del self.model[entry_id]
        assert self.rust.clear(namespace) == self.py.clear(namespace) == len(doomed)

    @rule()
    def cleanup_expired(self) -> None:
        doomed = [
            i
            for i, d in self.model.items()
            if not (d.expires_at is None or d.expires_at > self.now)
        ]
        for entry_id in doomed:
            del self.model[entry_id]
        assert self.rust.cleanup_expired(self.now) == len(doomed)
        assert self.py.cleanup_expired(self.now) == len(doomed)

    @rule(step=st.sampled_from([0.0, 1.0, 5.0, 60.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @rule(
        namespaces=st.lists(st.sampled_from(NAMESPACES), max_size=3),
        terms=st.lists(st.sampled_from([*VOCABULARY, "absent"]), max_size=4),
        limit=st.integers(1, 8),
        min_importance=st.sampled_from(IMPORTANCES),
    )
    def search(
        self, namespaces: list[str], terms: list[str], limit: int, min_importance: float
    ) -> None:
        args = (namespaces, terms, limit, min_importance, self.now)
        rust, py = self.rust.search(*args), self.py.search(*args)
        expected = self.expected(namespaces, terms, limit, min_importance)
        assert len(rust) == len(py) == len(expected)
        assert all(r is p is e for (r, _), (p, _), (e, _) in zip(rust, py, expected, strict=True))
        assert close_scores([s for _, s in rust], [s for _, s in py])
        assert close_scores([s for _, s in py], [s for _, s in expected])

    @invariant()
    def same_size(self) -> None:
        assert len(self.rust) == len(self.py) == len(self.model)


class TestIndexesAgreeOnAnyOperationSequence(IndexMachine.TestCase):  # type: ignore[misc, valid-type]  # hypothesis builds TestCase at runtime
    """Rust index, twin and model give the same hits, order and scores, step by step."""


class TestAsciiTermsAreTheTokenizers:
    """The terms both indexes split an ASCII text into are ``search_terms``'; any other text
    is left to it."""

    @given(st.text() | st.text(alphabet=st.characters(max_codepoint=127)))
    def test_any_text(self, text: str) -> None:
        expected = search_terms(text) if text.isascii() else None
        assert require_rust_core().SearchIndex.ascii_terms(text) == expected
        assert pure.SearchIndex.ascii_terms(text) == expected

    @pytest.mark.parametrize(
        ("text", "terms"),
        [
            ("user_timezone: Australia/Adelaide", ["user", "timezone", "australia", "adelaide"]),
            ('k {"note": "Note 5", "score": 5}', ["k", "note", "note", "5", "score", "5"]),
            ("__--__", []),
            ("", []),
            ("café", None),
            ("a \ud800 b", None),  # no UTF-8 form: the caller's, as any non-ASCII text
        ],
    )
    def test_examples(self, text: str, terms: list[str] | None) -> None:
        assert require_rust_core().SearchIndex.ascii_terms(text) == terms
        assert pure.SearchIndex.ascii_terms(text) == terms


class TestBm25IsTheProtocols:
    """The twin's weight is the protocol's, bit for bit (the Rust one is held to the twin)."""

    @given(
        tf=st.integers(1, 50),
        df=st.integers(1, 1_000),
        extra=st.integers(0, 100_000),
        length=st.integers(0, 500),
        avg=st.one_of(st.just(0.0), st.floats(0.5, 500.0)),
    )
    def test_equal(self, tf: int, df: int, extra: int, length: int, avg: float) -> None:
        assert pure.bm25(tf, df, df + extra, length, avg) == bm25(tf, df, df + extra, length, avg)


class TestSearchReadsOnlyItsTermsPostings:
    """A search's cost is the postings of its terms, not the size of the corpus."""

    def test_index(self, impl: _backend.Implementation) -> None:
        index = impl.SearchIndex()
        for n in range(20_000):
            index.upsert(f"c{n}", "a", ["common", "filler", str(n % 7)], 0.5, None, n)
        for n in range(3):
            index.upsert(f"r{n}", "a", ["rare", "common"], 0.5, None, f"rare {n}")
        before = index.visited
        found = index.search(["a"], ["rare", "absent"], 10, 0.0, 0.0)
        assert sorted(payload for payload, _ in found) == ["rare 0", "rare 1", "rare 2"]
        assert index.visited - before == 3
        before = index.visited
        assert len(index.search(["a"], ["common"], 5, 0.0, 0.0)) == 5
        assert index.visited - before == 20_003

    def test_store(self, impl: _backend.Implementation) -> None:
        store = InMemoryStore()
        store.save_many("ns", [doc(f"common words {n}") for n in range(2_000)])
        store.save_many("ns", [doc("rare common"), doc("rare")])
        store.save_many("ns", [MemoryEntry(content=n) for n in range(1_000)])  # unsearchable
        index = store._index
        before = index.visited
        assert len(store.search(["ns"], "rare")) == 2
        assert index.visited - before == 2


# ---------------------------------------------------------------------------- the store


def doc(
    text: object,
    *,
    entry_id: str | None = None,
    key: str | None = None,
    importance: float = 0.5,
    **kw: Any,
) -> MemoryEntry:
    """An entry whose ``search_text`` is ``text`` (none at all when ``text`` is ``None``)."""
    metadata = {} if text is None else {SEARCH_TEXT: text}
    if entry_id is not None:
        kw["entry_id"] = entry_id
    return MemoryEntry(
        key=key, content={"text": text}, metadata=metadata, importance=importance, **kw
    )


def ids(hits: list[SearchHit]) -> list[str]:
    return [hit.entry.entry_id for hit in hits]


def reference(
    store: InMemoryStore, namespace: str, query: str, limit: int = 100, min_importance: float = 0.0
) -> list[SearchHit]:
    """What the search should answer, read from every live entry of one namespace."""
    return rank_entries(
        store.load(namespace), list(dict.fromkeys(search_terms(query))), limit, min_importance
    )


def as_scores(hits: list[SearchHit]) -> dict[str, float]:
    return {hit.entry.entry_id: hit.score for hit in hits}


def same_hits(found: list[SearchHit], expected: list[SearchHit]) -> bool:
    """The same entries with the same scores (in any order among equals)."""
    want = as_scores(expected)
    got = as_scores(found)
    return got.keys() == want.keys() and all(abs(got[i] - want[i]) <= SCORE_TOLERANCE for i in got)


STORE_TEXTS: list[object] = [
    None,
    "apple banana",
    "apple",
    "banana cherry cherry",
    "Cherry-date é",
    "-- %%",  # searchable, but without terms
    "apple apple apple date",
    3,  # not a str: not searchable
]
QUERIES = ["apple", "banana cherry", "date é apple", "cherry", "nothing", '"apple" OR date*']
NS = "ns"


class StoreSearchMachine(RuleBasedStateMachine):
    """Writes to one namespace of an ``InMemoryStore``; every search equals the reference.

    With every entry in one namespace and none expiring, the reference's statistics (over the
    live searchable entries it is given) are the index's (over everything indexed). The model
    knows only what the reference cannot: the table's order and keys (to check itself against
    ``load``) and the order in which entries became searchable (the index's last tie-break).
    """

    def __init__(self) -> None:
        super().__init__()
        self.store = InMemoryStore()
        self.keys: dict[str, str | None] = {}  # entry id -> key, in the table's order
        self.searchable: dict[str, None] = {}  # searchable entry ids, oldest first

    @staticmethod
    def entry(entry_id: str, key: str | None, text: object, importance: float) -> MemoryEntry:
        return doc(text, entry_id=entry_id, key=key, importance=importance)

    def saved(self, entry: MemoryEntry) -> None:
        """Applies the table's rules and the index's age rule to the model."""
        if entry.key is not None:
            holder = next(
                (i for i, k in self.keys.items() if k == entry.key and i != entry.entry_id), None
            )
            if holder is not None:
                del self.keys[holder]
                self.searchable.pop(holder, None)
        self.keys[entry.entry_id] = entry.key
        if search_text(entry) is None:
            self.searchable.pop(entry.entry_id, None)
        else:
            self.searchable.setdefault(entry.entry_id)

    entries = st.tuples(
        st.sampled_from(ENTRY_IDS),
        st.sampled_from([None, "k1", "k2"]),
        st.sampled_from(STORE_TEXTS),
        st.sampled_from(IMPORTANCES),
    )

    @rule(drawn=entries)
    def save(self, drawn: tuple[str, str | None, object, float]) -> None:
        entry = self.entry(*drawn)
        self.store.save(NS, entry)
        self.saved(entry)

    @rule(drawn=st.lists(entries, max_size=4))
    def save_many(self, drawn: list[tuple[str, str | None, object, float]]) -> None:
        batch = [self.entry(*d) for d in drawn]
        self.store.save_many(NS, batch)
        for entry in batch:
            self.saved(entry)

    @rule(drawn=entries, expected=st.sampled_from([None, 0, 1, 2]))
    def save_if(self, drawn: tuple[str, str | None, object, float], expected: int | None) -> None:
        entry_id, key, text, importance = drawn
        entry = self.entry(entry_id, key or "k1", text, importance)
        holder = self.store.load_by_key(NS, entry.key or "")
        won = self.store.save_if(NS, entry, expected)
        assert won == ((None if holder is None else holder.version) == expected)
        if won:
            self.saved(entry)
            stored = self.store.load_by_key(NS, entry.key or "")
            assert stored is not None
            assert stored.version == next_version(expected)

    @rule(entry_id=st.sampled_from(ENTRY_IDS), namespace=st.sampled_from([NS, "other"]))
    def delete(self, entry_id: str, namespace: str) -> None:
        held = namespace == NS and entry_id in self.keys
        assert self.store.delete(namespace, entry_id) is held
        if held:
            del self.keys[entry_id]
            self.searchable.pop(entry_id, None)

    @rule(namespace=st.sampled_from([NS, "other"]))
    def clear(self, namespace: str) -> None:
        assert self.store.clear(namespace) == (len(self.keys) if namespace == NS else 0)
        if namespace == NS:
            self.keys.clear()
            self.searchable.clear()

    @rule()
    def cleanup_expired(self) -> None:
        assert self.store.cleanup_expired() == 0

    @rule(
        query=st.sampled_from(QUERIES),
        limit=st.integers(1, 7),
        min_importance=st.sampled_from(IMPORTANCES),
    )
    def search(self, query: str, limit: int, min_importance: float) -> None:
        live = {e.entry_id: e for e in self.store.load(NS)}
        by_age = [live[i] for i in self.searchable]
        terms = list(dict.fromkeys(search_terms(query)))
        expected = rank_entries(by_age, terms, limit, min_importance)
        found = self.store.search([NS, "other"], query, limit=limit, min_importance=min_importance)
        assert ids(found) == ids(expected)
        assert all(hit.entry is live[hit.entry.entry_id] for hit in found)
        assert close_scores([h.score for h in found], [h.score for h in expected])

    @invariant()
    def model_matches_the_table(self) -> None:
        loaded = self.store.load(NS)
        assert [e.entry_id for e in loaded] == list(self.keys)
        assert [e.key for e in loaded] == list(self.keys.values())
        assert set(self.searchable) == {e.entry_id for e in loaded if search_text(e) is not None}


class TestStoreSearchEqualsTheReference:
    """After any writes, search answers what reading every live entry answers."""

    def test_any_write_sequence(self, impl: _backend.Implementation) -> None:
        assert isinstance(InMemoryStore()._index, pure.SearchIndex) is (impl.name == "python")
        run_state_machine_as_test(StoreSearchMachine)


@pytest.fixture
def store(impl: _backend.Implementation) -> InMemoryStore:
    """A fresh store built by the test's implementation."""
    return InMemoryStore()


class TestBadArguments:
    """Bad arguments raise at once, sync and async, naming the argument."""

    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "name"),
        [
            (("ns", "q"), {}, TypeError, "namespaces"),
            (({"ns"}, "q"), {}, TypeError, "namespaces"),
            ((None, "q"), {}, TypeError, "namespaces"),
            (([3], "q"), {}, TypeError, "namespace"),
            (([""], "q"), {}, ValueError, "namespace"),
            ((["a\x00b"], "q"), {}, ValueError, "namespace"),
            ((["ns"], None), {}, TypeError, "query"),
            ((["ns"], b"q"), {}, TypeError, "query"),
            ((["ns"], "q"), {"limit": 0}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": -1}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": 2.0}, TypeError, "limit"),
            ((["ns"], "q"), {"limit": True}, TypeError, "limit"),
            ((["ns"], "q"), {"min_importance": 1.5}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": -0.1}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": math.nan}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": "0.5"}, TypeError, "min_importance"),
            ((["ns"], "q"), {"min_importance": False}, TypeError, "min_importance"),
        ],
    )
    def test_named(
        self,
        store: InMemoryStore,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        name: str,
    ) -> None:
        store.save("ns", doc("q"))
        with pytest.raises(error, match=name):
            store.search(*args, **kwargs)
        with pytest.raises(error, match=name):
            asyncio.run(store.async_search(*args, **kwargs))

    def test_good_variants(self, store: InMemoryStore) -> None:
        store.save("ns", doc("q"))
        assert len(store.search(("ns", "ns"), "q", limit=1, min_importance=0)) == 1
        assert len(store.search(["ns"], "q", min_importance=1)) == 0

    def test_closed_store(self, store: InMemoryStore) -> None:
        store.save("ns", doc("q"))
        store.close()
        with pytest.raises(StoreClosedError):
            store.search(["ns"], "q")


class TestQueriesAreData:
    """Quotes, operators, wildcards and metacharacters are separators or words, never syntax."""

    @pytest.mark.parametrize(
        ("query", "found"),
        [
            ('"x" OR y*', {"x marks", "y axis", "or else"}),
            ("%", set()),
            ("%x%", {"x marks"}),
            ("$where", {"where clause"}),
            ('{"$where": "1"}', {"where clause", "1 one"}),
            (".*", set()),
            ("x|y", {"x marks", "y axis"}),
            ("^(x)+$ [y]{2} \\d", {"x marks", "y axis", "d drive"}),
            ("x'; DROP TABLE entries; --", {"x marks"}),
            ("NEAR(x y)", {"x marks", "y axis"}),
        ],
    )
    def test_query(self, store: InMemoryStore, query: str, found: set[str]) -> None:
        texts = ["x marks", "y axis", "or else", "where clause", "1 one", "d drive", "% literal"]
        store.save_many("ns", [doc(t) for t in texts])
        hits = store.search(["ns"], query)
        assert {hit.entry.metadata[SEARCH_TEXT] for hit in hits} == found
        assert same_hits(hits, reference(store, "ns", query))
        assert len(store.load("ns")) == len(texts)


class TestAnyText:
    """Any ``str`` is a namespace, id or text: casefolding applies, lone surrogates are kept."""

    def test_unicode(self, store: InMemoryStore) -> None:
        entry = doc("Café \ud800x ǅungla Straße", entry_id="\udcff")
        store.save("\ud800", entry)
        hits = store.search(["\ud800"], "CAFÉ X strasse dž")
        assert ids(hits) == ["\udcff"]
        assert same_hits(hits, reference(store, "\ud800", "CAFÉ X strasse dž"))
        assert store.search(["\udbff"], "café") == []


class TestFilters:
    """Expiry, importance, limit and namespaces filter hits; statistics count what is indexed."""

    def test_expired_entries_are_not_found_until_cleaned_up(self, store: InMemoryStore) -> None:
        past, future = utc_now() - timedelta(seconds=5), utc_now() + timedelta(hours=1)
        store.save("ns", doc("alpha old", expires_at=past))
        soon = doc("alpha soon", expires_at=future)
        store.save("ns", soon)
        assert ids(store.search(["ns"], "alpha old")) == [soon.entry_id]
        # The expired entry still counts in the corpus until cleanup removes it from both.
        assert not same_hits(store.search(["ns"], "alpha"), reference(store, "ns", "alpha"))
        assert store.cleanup_expired() == 1
        assert same_hits(store.search(["ns"], "alpha"), reference(store, "ns", "alpha"))

    def test_min_importance_is_inclusive(self, store: InMemoryStore) -> None:
        low, mid, high = (
            doc("w", importance=0.2),
            doc("w", importance=0.5),
            doc("w", importance=1.0),
        )
        store.save_many("ns", [low, mid, high])
        assert ids(store.search(["ns"], "w", min_importance=0.5)) == [high.entry_id, mid.entry_id]
        assert ids(store.search(["ns"], "w", min_importance=1.0)) == [high.entry_id]
        assert ids(store.search(["ns"], "w")) == [high.entry_id, mid.entry_id, low.entry_id]

    def test_limit_keeps_the_best(self, store: InMemoryStore) -> None:
        entries = [doc("w", importance=n / 10) for n in range(10)]
        store.save_many("ns", [*entries, doc("w w w w w other words")])
        hits = store.search(["ns"], "w", limit=3)
        assert ids(hits) == ids(reference(store, "ns", "w", limit=3))
        assert len(store.search(["ns"], "w", limit=1)) == 1
        assert len(store.search(["ns"], "w", limit=1_000)) == 11

    def test_equal_hits_keep_their_age(self, store: InMemoryStore) -> None:
        first, second, third = doc("same"), doc("same"), doc("same")
        store.save_many("ns", [first, second, third])
        store.save("ns", first)  # replaced in place: still the oldest
        assert ids(store.search(["ns"], "same")) == [
            first.entry_id,
            second.entry_id,
            third.entry_id,
        ]

    def test_namespaces_are_isolated(self, store: InMemoryStore) -> None:
        a, b = doc("alpha in a"), doc("alpha in b")
        store.save("a", a)
        store.save("b", b)
        assert ids(store.search(["a"], "alpha")) == [a.entry_id]
        assert ids(store.search(["b", "b"], "alpha")) == [b.entry_id]
        assert set(ids(store.search(["a", "b", "c"], "alpha"))) == {a.entry_id, b.entry_id}
        assert store.search([], "alpha") == []
        assert store.search(["A"], "alpha") == []
        assert store.clear("a") == 1
        assert ids(store.search(["a", "b"], "alpha")) == [b.entry_id]

    def test_scores_do_not_depend_on_the_namespaces_searched(self, store: InMemoryStore) -> None:
        store.save_many("a", [doc("alpha beta"), doc("gamma")])
        store.save_many("b", [doc("alpha"), doc("alpha delta")])
        alone = as_scores(store.search(["a"], "alpha"))
        together = as_scores(store.search(["a", "b"], "alpha"))
        assert all(together[i] == score for i, score in alone.items())


class TestIndexFollowsEveryWrite:
    """Whatever a write does to the table, it does to the index in the same step."""

    def test_entry_moving_namespaces(self, store: InMemoryStore) -> None:
        moving = doc("alpha", entry_id="m")
        store.save("a", moving)
        store.save("b", doc("alpha", entry_id="m"))
        assert store.search(["a"], "alpha") == []
        assert ids(store.search(["b"], "alpha")) == ["m"]
        assert store.delete("a", "m") is False
        assert ids(store.search(["b"], "alpha")) == ["m"]
        assert store.delete("b", "m") is True
        assert store.search(["a", "b"], "alpha") == []

    def test_losing_the_search_text(self, store: InMemoryStore) -> None:
        store.save("ns", doc("alpha", entry_id="e"))
        store.save("ns", doc(None, entry_id="e"))
        assert store.search(["ns"], "alpha") == []
        store.save("ns", doc(7, entry_id="e"))
        assert store.search(["ns"], "alpha") == []
        store.save("ns", doc("alpha beta", entry_id="e"))
        assert ids(store.search(["ns"], "beta")) == ["e"]

    def test_key_taken_over_by_another_entry(self, store: InMemoryStore) -> None:
        store.save("ns", doc("alpha", entry_id="old", key="k"))
        store.save("ns", doc(None, entry_id="new", key="k"))
        assert store.search(["ns"], "alpha") == []
        store.save("ns", doc("beta", entry_id="newer", key="k"))
        assert ids(store.search(["ns"], "beta")) == ["newer"]
        store.save_many("ns", [doc("gamma", entry_id="x", key="j"), doc("delta", key="j")])
        assert store.search(["ns"], "gamma") == []

    def test_key_taken_over_from_an_expired_holder(self, store: InMemoryStore) -> None:
        past = utc_now() - timedelta(seconds=5)
        store.save("ns", doc("alpha stale", key="k", expires_at=past))
        store.save("ns", doc("alpha fresh", key="k"))
        # The expired holder left the index with the table: it no longer counts in the corpus.
        assert same_hits(store.search(["ns"], "alpha"), reference(store, "ns", "alpha"))
        assert store.cleanup_expired() == 0

    def test_save_if(self, store: InMemoryStore) -> None:
        assert store.save_if("ns", doc("alpha", key="k"), None)
        assert not store.save_if("ns", doc("beta", key="k"), None)
        assert store.search(["ns"], "beta") == []
        assert store.save_if("ns", doc("gamma", key="k"), 1)
        assert store.search(["ns"], "alpha") == []
        assert len(store.search(["ns"], "gamma")) == 1

    def test_close_drops_the_index(self, store: InMemoryStore) -> None:
        store.save("ns", doc("alpha"))
        store.close()
        assert len(store._index) == 0

    def test_async_search_is_search(self, store: InMemoryStore) -> None:
        store.save_many("ns", [doc("alpha beta"), doc("alpha"), doc("beta")])
        assert isinstance(store, SearchableStore)
        found = asyncio.run(store.async_search(["ns"], "alpha beta", limit=2))
        assert found == store.search(["ns"], "alpha beta", limit=2)

    def test_concurrent_writers(self, store: InMemoryStore) -> None:
        texts: list[object] = [None, "alpha", "alpha beta", "beta gamma", 3]
        errors: list[BaseException] = []

        def writer(seed: int) -> None:
            try:
                for n in range(300):
                    pick = (seed * 7 + n * 13) % 997
                    entry_id, key = f"e{pick % 6}", [None, "k1", "k2"][pick % 3]
                    text = texts[pick % len(texts)]
                    if pick % 11 == 0:
                        store.delete("ns", entry_id)
                    elif pick % 5 == 0:
                        store.save_many("ns", [doc(text, entry_id=entry_id), doc("alpha")])
                    elif pick % 4 == 0 and key is not None:
                        held = store.load_by_key("ns", key)
                        version = None if held is None else held.version
                        store.save_if("ns", doc(text, key=key), version)
                    else:
                        store.save("ns", doc(text, entry_id=entry_id, key=key))
                    store.search(["ns"], "alpha beta gamma")
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads take turns between any two bytecodes
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(interval)
        assert errors == []
        searchable = [e for e in store.load("ns") if search_text(e) is not None]
        assert len(store._index) == len(searchable)
        for query in ["alpha", "beta", "gamma", "alpha gamma"]:
            expected = reference(store, "ns", query, limit=1_000)
            assert len(expected) < 1_000
            assert same_hits(store.search(["ns"], query, limit=1_000), expected)
