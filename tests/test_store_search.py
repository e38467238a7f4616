"""The search contract every store keeps, on all five stores and both implementations.

``search`` ranks the entries carrying a ``metadata["search_text"]`` by the words of a query,
from each store's own index (see :class:`memlane.stores.SearchableStore`). Scores differ
between stores (BM25 in memory and in SQLite, PostgreSQL's own weighting); what every store
shares, and what these tests hold it to, is which entries are found and how they rank.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import _backend
from memlane.stores import SearchableStore, SearchHit
from memlane.stores.protocol import SEARCH_TEXT, rank_entries, search_terms
from memlane.types import MemoryEntry, utc_now
from store_kinds import STORES, open_store


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Any]:
    """Each store kind, built by ``impl``."""
    async for made in open_store(request.param, request, tmp_path):
        yield made.store


def doc(
    text: str | None, *, key: str | None = None, importance: float = 0.5, **kw: Any
) -> MemoryEntry:
    metadata = {} if text is None else {SEARCH_TEXT: text}
    return MemoryEntry(
        key=key, content={"text": text}, metadata=metadata, importance=importance, **kw
    )


def texts(hits: list[SearchHit]) -> list[str]:
    return [hit.entry.metadata[SEARCH_TEXT] for hit in hits]


async def save(store: Any, namespace: str, *entries: MemoryEntry) -> None:
    for entry in entries:
        await store.async_save(namespace, entry)


class TestEveryStoreIsSearchable:
    """Every store memlane ships implements the search protocol, sync and async."""

    async def test_protocol(self, store: Any) -> None:
        assert isinstance(store, SearchableStore)
        await save(store, "ns", doc("alpha beta"))
        assert texts(store.search(["ns"], "alpha")) == ["alpha beta"]
        assert texts(await store.async_search(["ns"], "beta")) == ["alpha beta"]


class TestWhatIsFound:
    """An entry is found when its search text shares a term with the query; nothing else is."""

    async def test_any_term_suffices(self, store: Any) -> None:
        await save(store, "ns", doc("red apple"), doc("green pear"), doc("blue sky"))
        found = texts(await store.async_search(["ns"], "apple pear banana"))
        assert sorted(found) == ["green pear", "red apple"]

    async def test_terms_split_like_the_tokenizer(self, store: Any) -> None:
        await save(store, "ns", doc("user_timezone = Australia/Adelaide"), doc("get-local-time"))
        assert texts(await store.async_search(["ns"], "timezone")) == [
            "user_timezone = Australia/Adelaide"
        ]
        assert texts(await store.async_search(["ns"], "ADELAIDE")) == [
            "user_timezone = Australia/Adelaide"
        ]
        assert texts(await store.async_search(["ns"], "local")) == ["get-local-time"]

    async def test_entries_without_search_text_are_never_found(self, store: Any) -> None:
        await save(store, "ns", doc(None), MemoryEntry(content="alpha", metadata={SEARCH_TEXT: 3}))
        assert await store.async_search(["ns"], "alpha") == []

    async def test_a_query_without_terms_finds_nothing(self, store: Any) -> None:
        await save(store, "ns", doc("alpha"))
        assert await store.async_search(["ns"], "  -- %% !! ") == []

    async def test_only_the_searched_namespaces(self, store: Any) -> None:
        await save(store, "a", doc("alpha in a"))
        await save(store, "b", doc("alpha in b"))
        await save(store, "c", doc("alpha in c"))
        assert sorted(texts(await store.async_search(["a", "c"], "alpha"))) == [
            "alpha in a",
            "alpha in c",
        ]
        assert await store.async_search(["missing"], "alpha") == []
        assert await store.async_search([], "alpha") == []

    async def test_expired_entries_are_not_found(self, store: Any) -> None:
        past = utc_now() - timedelta(seconds=5)
        await save(store, "ns", doc("alpha old", expires_at=past), doc("alpha new"))
        assert texts(await store.async_search(["ns"], "alpha")) == ["alpha new"]

    async def test_min_importance(self, store: Any) -> None:
        await save(store, "ns", doc("alpha low", importance=0.2), doc("alpha high", importance=0.9))
        assert texts(await store.async_search(["ns"], "alpha", min_importance=0.5)) == [
            "alpha high"
        ]

    async def test_hits_are_entries_with_positive_scores(self, store: Any) -> None:
        saved = doc("alpha", key="k1")
        await save(store, "ns", saved)
        [hit] = await store.async_search(["ns"], "alpha")
        assert hit.entry.entry_id == saved.entry_id
        assert hit.entry.key == "k1"
        assert hit.entry.content == {"text": "alpha"}
        assert hit.score > 0


class TestRanking:
    """More of the query's terms, and rarer ones, rank higher; ties go to importance."""

    async def test_rarer_terms_weigh_more(self, store: Any) -> None:
        common = [doc(f"common filler {i}") for i in range(12)]
        await save(store, "ns", *common, doc("rare common"), doc("rare thing"))
        found = texts(await store.async_search(["ns"], "common rare", limit=3))
        assert found[0] == "rare common"
        assert found[1] == "rare thing"

    async def test_more_matched_terms_rank_higher(self, store: Any) -> None:
        await save(
            store,
            "ns",
            doc("apple only"),
            doc("apple banana cherry"),
            doc("apple banana"),
            *[doc(f"noise {i}") for i in range(5)],
        )
        found = texts(await store.async_search(["ns"], "apple banana cherry"))
        assert found == ["apple banana cherry", "apple banana", "apple only"]

    async def test_ties_go_to_importance(self, store: Any) -> None:
        await save(
            store,
            "ns",
            doc("same words", importance=0.3),
            doc("same words", importance=0.9),
            doc("same words", importance=0.6),
        )
        hits = await store.async_search(["ns"], "words")
        assert [h.entry.importance for h in hits] == [0.9, 0.6, 0.3]

    async def test_limit_keeps_the_best(self, store: Any) -> None:
        await save(store, "ns", *[doc(f"alpha {i}", importance=i / 10) for i in range(10)])
        hits = await store.async_search(["ns"], "alpha", limit=3)
        assert [h.entry.importance for h in hits] == [0.9, 0.8, 0.7]

    async def test_order_matches_the_reference(self, store: Any) -> None:
        corpus = [
            "the quick brown fox",
            "quick thinking saves the day",
            "a brown dog sleeps",
            "foxes and dogs",
            "the the the",
            "brown brown brown fox",
            "nothing relevant here",
        ]
        entries = [doc(text, importance=0.5) for text in corpus]
        await save(store, "ns", *entries)
        for query in ["brown fox", "quick", "the dog", "fox quick brown"]:
            terms = list(dict.fromkeys(search_terms(query)))
            expected = texts(rank_entries(entries, terms, 10, 0.0))
            found = texts(await store.async_search(["ns"], query))
            assert sorted(found) == sorted(expected), query
            assert found[0] == expected[0], query


class TestIndexFollowsWrites:
    """Replacing, deleting and clearing entries changes what search finds at once."""

    async def test_replace_by_id_and_by_key(self, store: Any) -> None:
        first = doc("alpha", key="k")
        await save(store, "ns", first)
        first.metadata = {SEARCH_TEXT: "beta"}
        await save(store, "ns", first)
        assert await store.async_search(["ns"], "alpha") == []
        assert texts(await store.async_search(["ns"], "beta")) == ["beta"]
        await save(store, "ns", doc("gamma", key="k"))  # a new id takes the key over
        assert await store.async_search(["ns"], "beta") == []
        assert texts(await store.async_search(["ns"], "gamma")) == ["gamma"]

    async def test_save_if(self, store: Any) -> None:
        assert await store.async_save_if("ns", doc("alpha", key="k"), None)
        held = await store.async_load_by_key("ns", "k")
        assert await store.async_save_if("ns", doc("beta", key="k"), held.version)
        assert not await store.async_save_if("ns", doc("gamma", key="k"), held.version)
        assert await store.async_search(["ns"], "alpha gamma") == []
        assert texts(await store.async_search(["ns"], "beta")) == ["beta"]

    async def test_delete_and_clear(self, store: Any) -> None:
        one, two = doc("alpha one"), doc("alpha two")
        await save(store, "ns", one, two)
        await save(store, "other", doc("alpha other"))
        assert await store.async_delete("ns", one.entry_id)
        assert texts(await store.async_search(["ns"], "alpha")) == ["alpha two"]
        await store.async_clear("ns")
        assert await store.async_search(["ns"], "alpha") == []
        assert texts(await store.async_search(["ns", "other"], "alpha")) == ["alpha other"]

    async def test_save_many(self, store: Any) -> None:
        await store.async_save_many("ns", [doc("alpha one"), doc("alpha two")])
        assert sorted(texts(await store.async_search(["ns"], "alpha"))) == [
            "alpha one",
            "alpha two",
        ]


HOSTILE = [
    '"alpha" OR beta*',
    "NEAR(alpha beta)",
    "alpha AND -beta",
    "alpha & !beta | gamma:*",
    "%alpha%",
    "alpha'; DROP TABLE entries; --",
    '{"$where": "1"} alpha',
    "$regex alpha.*",
    "alpha(",
    "col:alpha",
    "\\alpha\\",
]


class TestQueriesAreData:
    """No query text acts as syntax: operators and metacharacters are words or separators."""

    @pytest.mark.parametrize("query", HOSTILE)
    async def test_hostile_queries_search_their_words(self, store: Any, query: str) -> None:
        await save(store, "ns", doc("alpha here"), doc("beta there"), doc("drop table entries"))
        found = set(texts(await store.async_search(["ns"], query)))
        wanted = set(search_terms(query))
        for text in ["alpha here", "beta there", "drop table entries"]:
            assert (text in found) == bool(wanted & set(search_terms(text))), (query, text)
        assert len(await store.async_load("ns")) == 3


class TestBadArguments:
    """Bad arguments raise at once, naming the argument."""

    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "name"),
        [
            (("ns", "q"), {}, TypeError, "namespaces"),
            ((["ns"], 3), {}, TypeError, "query"),
            (([""], "q"), {}, ValueError, "namespace"),
            (([3], "q"), {}, TypeError, "namespace"),
            ((["ns"], "q"), {"limit": 0}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": "3"}, TypeError, "limit"),
            ((["ns"], "q"), {"min_importance": 1.5}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": "x"}, TypeError, "min_importance"),
        ],
    )
    async def test_named(
        self,
        store: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        name: str,
    ) -> None:
        with pytest.raises(error, match=name):
            await store.async_search(*args, **kwargs)
        with pytest.raises(error, match=name):
            store.search(*args, **kwargs)
