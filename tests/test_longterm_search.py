"""LongTermMemory.search on every store and both implementations: ranked, scoped, typed.

``search`` finds a record sharing any word with the query and orders by relevance, then by
confidence, from the store's own index; these tests hold every store to the same answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from memlane import InMemoryStore, _backend
from memlane.longterm import Episode, Fact, LongTermMemory, Procedure
from memlane.types import MemoryEntry
from store_kinds import STORES, open_store


@pytest.fixture(params=STORES)
async def memory(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[LongTermMemory]:
    """Long-term memory on each store kind, built by ``impl``."""
    async for made in open_store(request.param, request, tmp_path, "lt"):
        yield LongTermMemory(made.store)


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> str:
    """Whether a test calls the blocking methods or their ``async_`` twins."""
    return str(request.param)


async def call(way: str, memory: LongTermMemory, name: str, *args: Any, **kwargs: Any) -> Any:
    if way == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, "async_" + name)(*args, **kwargs)


def keys(found: list[Any]) -> list[str]:
    return [f.key for f in found]


class TestRanksFacts:
    """Facts sharing any word are found, the most relevant first, then the most confident."""

    async def test_any_word_and_rarer_words_first(self, memory: LongTermMemory, way: str) -> None:
        for i in range(10):
            memory.remember(f"note_{i}", f"the city has weather number {i}")
        memory.remember("home_city", "Adelaide")
        memory.remember("user_timezone", "Australia/Adelaide")
        found = await call(way, memory, "search", "adelaide weather", memory_type="facts")
        assert keys(found[:2]) == ["home_city", "user_timezone"] or keys(found[:2]) == [
            "user_timezone",
            "home_city",
        ]
        assert len(found) == 10  # limit
        assert all(isinstance(f, Fact) for f in found)

    async def test_keys_split_on_underscores_and_hyphens(self, memory: LongTermMemory) -> None:
        memory.remember("user_timezone", "UTC")
        memory.remember("get-local-time", "a command")
        assert keys(memory.search("timezone")) == ["user_timezone"]
        assert keys(memory.search("LOCAL")) == ["get-local-time"]
        assert keys(memory.search("utc")) == ["user_timezone"]

    async def test_ties_go_to_confidence(self, memory: LongTermMemory) -> None:
        memory.remember("a", "same text", confidence=0.6)
        memory.remember("b", "same text", confidence=0.9)
        memory.remember("c", "same text", confidence=0.7)
        assert keys(memory.search("text")) == ["b", "c", "a"]

    async def test_min_confidence_and_limit(self, memory: LongTermMemory) -> None:
        memory.remember("low", "alpha", confidence=0.3)
        memory.remember("high", "alpha", confidence=0.9)
        assert keys(memory.search("alpha")) == ["high"]
        assert keys(memory.search("alpha", min_confidence=0.0)) == ["high", "low"]
        assert keys(memory.search("alpha", min_confidence=0.0, limit=1)) == ["high"]

    async def test_an_updated_value_is_found_by_its_new_words(self, memory: LongTermMemory) -> None:
        memory.remember("city", "Adelaide")
        memory.remember("city", "Darwin")
        assert memory.search("adelaide") == []
        [fact] = memory.search("darwin")
        assert fact.value == "Darwin"
        assert memory.forget("city")
        assert memory.search("darwin") == []

    async def test_contradicted_below_the_minimum_leaves(self, memory: LongTermMemory) -> None:
        memory.remember("claim", "the moon is cheese")
        memory.contradict("claim")
        memory.contradict("claim")
        assert memory.search("cheese") == []
        assert keys(memory.search("cheese", min_confidence=0.0)) == ["claim"]


class TestScopes:
    """Search sees the facts get_fact sees: the given ids' scopes and global, most specific winning."""

    async def test_visible_scopes_only(self, memory: LongTermMemory, way: str) -> None:
        memory.remember("pet", "a cat named Rex", scope="user", scope_id="u1")
        memory.remember("pet", "a dog named Rex", scope="user", scope_id="u2")
        memory.remember("mascot", "Rex the robot")
        found = await call(way, memory, "search", "rex", user_id="u1")
        assert sorted((f.key, f.value) for f in found) == [
            ("mascot", "Rex the robot"),
            ("pet", "a cat named Rex"),
        ]
        assert [(f.key, f.value) for f in memory.search("rex")] == [("mascot", "Rex the robot")]

    async def test_a_more_specific_scope_hides_the_key(self, memory: LongTermMemory) -> None:
        memory.remember("timezone", "Europe/Paris timezone")
        memory.remember("timezone", "Australia/Adelaide", scope="session", scope_id="s1")
        # The session's value does not match "paris", and it hides the global one.
        assert memory.search("paris", session_id="s1") == []
        assert [f.value for f in memory.search("paris")] == ["Europe/Paris timezone"]
        assert [f.value for f in memory.search("timezone", session_id="s1")] == [
            "Australia/Adelaide"
        ]

    async def test_many_hidden_hits_still_fill_the_limit(self, memory: LongTermMemory) -> None:
        for i in range(6):
            memory.remember(f"k{i}", f"shared word {i}")
            memory.remember(f"k{i}", "overridden", scope="agent", scope_id="a1")
        memory.remember("visible", "shared among many other words written here")
        found = memory.search("shared", agent_id="a1", limit=1)
        assert keys(found) == ["visible"]


class TestOtherKinds:
    """Procedures and episodes are searched too, alone or merged with facts."""

    async def test_memory_types(self, memory: LongTermMemory, way: str) -> None:
        memory.remember("weather_city", "Adelaide")
        procedure = memory.add_procedure(
            "weather report",
            trigger_conditions={"goal_contains": ["forecast"]},
            procedure_type="tool_sequence",
            content=["get_weather", "summarise"],
        )
        memory.record_episode(
            agent_id="a1", trigger="user asked for the weather", input="weather?", success=True
        )
        procedures = await call(way, memory, "search", "weather", memory_type="procedures")
        assert [p.id for p in procedures] == [procedure.id]
        assert isinstance(procedures[0], Procedure)
        episodes = await call(way, memory, "search", "weather", memory_type="episodes")
        assert [type(e) for e in episodes] == [Episode]
        facts = await call(way, memory, "search", "weather", memory_type="facts")
        assert keys(facts) == ["weather_city"]
        everything = await call(way, memory, "search", "weather")
        assert sorted(type(r).__name__ for r in everything) == ["Episode", "Fact", "Procedure"]
        assert await call(way, memory, "search", "forecast", memory_type="procedures") != []
        assert len(memory.search("weather", limit=2)) == 2


class TestQueriesAreData:
    """Operators and metacharacters in a query are separators, never syntax."""

    @pytest.mark.parametrize(
        "query",
        [
            '"cat" OR dog*',
            "cat AND -dog",
            "cat & !dog",
            "%cat%",
            "cat'; DROP TABLE x; --",
            '{"$where": 1} cat',
            "cat.*",
            "cat(",
            "key:cat",
        ],
    )
    async def test_hostile(self, memory: LongTermMemory, query: str) -> None:
        memory.remember("pet", "cat")
        memory.remember("other", "dog")
        memory.remember("third", "bird")
        found = {f.value for f in memory.search(query)}
        assert "cat" in found
        assert "bird" not in found
        assert len(memory.facts()) == 3


class TestBadArguments:
    """Bad arguments raise naming the argument; nothing is read or written."""

    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "name"),
        [
            ((3,), {}, TypeError, "query"),
            (("",), {}, ValueError, "query"),
            (("--- %%",), {}, ValueError, "query"),
            (("x",), {"memory_type": "notes"}, ValueError, "memory_type"),
            (("x",), {"limit": 0}, ValueError, "limit"),
            (("x",), {"limit": 1.5}, TypeError, "limit"),
            (("x",), {"min_confidence": 1.5}, ValueError, "min_confidence"),
            (("x",), {"user_id": ""}, ValueError, "user_id"),
            (("x",), {"session_id": 5}, TypeError, "session_id"),
        ],
    )
    async def test_named(
        self,
        memory: LongTermMemory,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        name: str,
    ) -> None:
        with pytest.raises(error, match=name):
            memory.search(*args, **kwargs)
        with pytest.raises(error, match=name):
            await memory.async_search(*args, **kwargs)


class _PlainStore:
    """A custom store with only the core protocol methods: no search of its own."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        self.inner.save(namespace, entry)

    def load(self, namespace: str) -> list[MemoryEntry]:
        return self.inner.load(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.inner.load_by_key(namespace, key)

    def save_if(self, namespace: str, entry: MemoryEntry, expected: int | None) -> bool:
        return self.inner.save_if(namespace, entry, expected)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        return self.inner.load(namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.inner.load_by_key(namespace, key)


class TestStoreWithoutSearch:
    """A custom store without ``search`` is searched by reading the namespaces."""

    async def test_fallback(self, impl: _backend.Implementation) -> None:
        memory = LongTermMemory(_PlainStore())  # type: ignore[arg-type]  # the point of the test
        memory.remember("home_city", "Adelaide")
        memory.remember("pet", "cat")
        assert keys(memory.search("adelaide city")) == ["home_city"]
        assert keys(await memory.async_search("cat")) == ["pet"]
