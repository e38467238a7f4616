"""Long-term facts on every store and both implementations: remember, contradict, the scope
hierarchy, recall (exact, fuzzy, listing), forget, bad input, scope isolation, and writers
racing in real processes.

The fuzzy rule is tested on its own, exhaustively on examples and with hypothesis against a
regular-expression oracle.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane import (
    InMemoryStore,
    MemoryManager,
    SQLiteStore,
    UnstorableValueError,
    _backend,
)
from memlane.longterm import (
    Fact,
    FactScope,
    FactType,
    LongTermMemory,
    RememberResult,
    fuzzy_match,
    query_words,
)
from memlane.longterm.model import namespace, parse_namespace
from memlane.longterm.users import USERS_NAMESPACE
from store_kinds import SHARED_STORES, STORES, Made, open_store

STEP_TIMEOUT = 120.0


@pytest.fixture(params=STORES)
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind, built by ``impl``."""
    async for one in open_store(request.param, request, tmp_path, "lt"):
        yield one


@pytest.fixture(params=SHARED_STORES)
async def shared(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each store kind other processes can open too, built by ``impl``."""
    async for one in open_store(request.param, request, tmp_path, "lt"):
        yield one


@pytest.fixture
def memory(made: Made) -> LongTermMemory:
    return LongTermMemory(made.store)


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> str:
    """Whether a test calls the blocking methods or their ``async_`` twins."""
    return str(request.param)


async def call(way: str, memory: LongTermMemory, name: str, *args: Any, **kwargs: Any) -> Any:
    if way == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, "async_" + name)(*args, **kwargs)


def summary(facts: list[Fact]) -> list[tuple[str, Any, str, str | None]]:
    return [(f.key, f.value, f.scope.value, f.scope_id) for f in facts]


# ============================================================================ the fuzzy rule


class TestFuzzyRule:
    """Words match as case-insensitive substrings, in order; _ - and spaces only separate."""

    @pytest.mark.parametrize(
        "text", ["lesson_local_time_command", "local_time_zone", "get-local-time", "LOCAL TIME"]
    )
    def test_the_issue_examples_match(self, text: str) -> None:
        assert fuzzy_match("local time", text)
        assert fuzzy_match("Local_Time", text)
        assert fuzzy_match("local-time", text)

    @pytest.mark.parametrize("text", ["time_local", "local", "time", "lo cal time", ""])
    def test_order_and_presence_matter(self, text: str) -> None:
        assert not fuzzy_match("local time", text)

    def test_words_are_substrings(self) -> None:
        assert fuzzy_match("oca im", "local_time")
        assert fuzzy_match("timezone", "user_timezone")
        assert not fuzzy_match("localtime", "local_time")

    @pytest.mark.parametrize(
        ("query", "hit", "miss"),
        [
            ("100%", "grew 100%", "grew 1000"),
            ("a%b", "xa%by", "axxb"),
            ("it's", "it's here", "its here"),
            ('"q"', 'say "q"', "say q"),
            ("$gt", "price $gt", "price gt"),
            ("a.c", "a.c", "abc"),
            ("a*", "a*", "aaa"),
            ("[ab]", "x[ab]", "a"),
            ("(x|y)", "(x|y)", "x"),
            ("^a$", "^a$", "a"),
            ("\\d", "\\d", "1"),
        ],
    )
    def test_metacharacters_match_literally(self, query: str, hit: str, miss: str) -> None:
        assert fuzzy_match(query, hit)
        assert not fuzzy_match(query, miss)

    def test_query_words(self) -> None:
        assert query_words("  Local_TIME--zone\tX ") == ["local", "time", "zone", "x"]
        assert query_words("_ - ") == []

    def test_a_query_without_words_matches_everything(self) -> None:
        assert fuzzy_match("", "anything")
        assert fuzzy_match(" _-", "")

    def test_a_word_never_spans_a_separator(self) -> None:
        assert not fuzzy_match("ab", "a_b")
        assert fuzzy_match("a b", "a_b")


ALPHABET = st.sampled_from(list("abAB_- %$.*'\"é\\"))


def oracle(query: str, text: str) -> bool:
    """ILIKE '%w1%w2%...%' as a regular expression over the normalised text."""
    words = query.lower().replace("_", " ").replace("-", " ").split()
    pattern = ".*".join(re.escape(w) for w in words)
    haystack = text.lower().replace("_", " ").replace("-", " ")
    return re.search(pattern, haystack, re.DOTALL) is not None


class TestFuzzyRuleProperties:
    """The rule agrees with a regular-expression oracle and with its own symmetries."""

    @given(st.text(ALPHABET, max_size=8), st.text(ALPHABET, max_size=16))
    def test_matches_the_oracle(self, query: str, text: str) -> None:
        assert fuzzy_match(query, text) == oracle(query, text)

    @given(st.text(max_size=8), st.text(max_size=16))
    def test_matches_the_oracle_on_any_text(self, query: str, text: str) -> None:
        assert fuzzy_match(query, text) == oracle(query, text)

    @given(
        st.lists(st.text("abcXYZ%$.", min_size=1, max_size=4), max_size=4),
        st.lists(st.sampled_from(["_", "-", " ", "_x_", "--", "q"]), min_size=5, max_size=5),
    )
    def test_the_words_joined_by_anything_match(self, words: list[str], glue: list[str]) -> None:
        text = glue[0] + "".join(w + g for w, g in zip(words, glue[1:] + glue, strict=False))
        assert fuzzy_match(" ".join(words), text)

    @given(st.text(ALPHABET, max_size=8), st.text(ALPHABET, max_size=16), st.data())
    def test_separators_are_interchangeable(
        self, query: str, text: str, data: st.DataObject
    ) -> None:
        swap = data.draw(st.sampled_from(["_", "-", " "]))
        other = re.sub(r"[_\- ]", swap, text)
        assert fuzzy_match(query, text) == fuzzy_match(query, other)

    @given(st.text("abcAB_ %", max_size=8), st.text("abcAB_ %", max_size=16))
    def test_case_does_not_matter(self, query: str, text: str) -> None:
        assert fuzzy_match(query.upper(), text.lower()) == fuzzy_match(query.lower(), text)


# ============================================================================ namespaces


class TestNamespacesAreInjective:
    """No two scope ids, however chosen, share a namespace; parts read back as given."""

    @given(st.lists(st.text(":%ab3A2", max_size=4), min_size=1, max_size=4))
    def test_round_trip(self, parts: list[str]) -> None:
        assert parse_namespace(namespace(*parts)) == parts

    @given(
        st.lists(st.text(":%ab", max_size=3), min_size=1, max_size=4),
        st.lists(st.text(":%ab", max_size=3), min_size=1, max_size=4),
    )
    def test_different_parts_differ(self, a: list[str], b: list[str]) -> None:
        assert (namespace(*a) == namespace(*b)) == (a == b)


# ============================================================================ on every store


class TestRemember:
    """remember creates, confirms, updates (keeping history) or skips, as the issue says."""

    async def test_the_four_statuses(self, memory: LongTermMemory, way: str) -> None:
        created = await call(way, memory, "remember", "color", "blue")
        assert isinstance(created, RememberResult)
        assert str(created) == "color = blue (created)"
        assert (created.status, created.key, created.value) == ("created", "color", "blue")
        fact = created.fact
        assert (fact.times_confirmed, fact.times_contradicted, fact.history) == (0, 0, [])
        assert (fact.scope, fact.scope_id, fact.fact_type) == (
            FactScope.GLOBAL,
            None,
            FactType.WORLD_KNOWLEDGE,
        )
        assert fact.confidence == 0.8

        confirmed = await call(way, memory, "remember", "color", "blue", confidence=0.9)
        assert (confirmed.status, confirmed.fact.times_confirmed) == ("confirmed", 1)
        assert confirmed.fact.confidence == 0.9
        lower = await call(way, memory, "remember", "color", "blue", confidence=0.1)
        assert lower.fact.confidence == 0.9  # a confirmation never lowers confidence

        skipped = await call(way, memory, "remember", "color", "red", overwrite=False)
        assert (skipped.status, skipped.fact.value, skipped.fact.times_confirmed) == (
            "skipped",
            "blue",
            2,
        )

        updated = await call(way, memory, "remember", "color", "red", confidence=0.6)
        assert str(updated) == "color = red (updated)"
        assert (updated.fact.times_confirmed, updated.fact.confidence) == (3, 0.6)
        assert [r.value for r in updated.fact.history] == ["blue"]
        assert updated.fact.history[0].replaced_at == updated.fact.updated_at
        assert updated.fact.created_at == created.fact.created_at

        again = await call(way, memory, "remember", "color", "green", fact_type="correction")
        assert [r.value for r in again.fact.history] == ["blue", "red"]
        assert again.fact.fact_type == FactType.WORLD_KNOWLEDGE  # fixed at creation

        stored = await call(way, memory, "get_fact", "color")
        assert stored == again.fact
        assert len(await call(way, memory, "facts")) == 1

    async def test_json_values_round_trip(self, memory: LongTermMemory, way: str) -> None:
        values: list[Any] = [
            {"b": [1, 2.5, None], "a": {"x": True}},
            (1, "two"),
            7,
            1.5,
            False,
            None,
            "",
            "ünï ☃",
        ]
        for n, value in enumerate(values):
            result = await call(way, memory, "remember", f"k{n}", value)
            expected = list(value) if isinstance(value, tuple) else value
            assert result.fact.value == expected
            found = await call(way, memory, "get_fact", f"k{n}")
            assert found.value == expected
            assert type(found.value) is type(expected)
        # 1 and True, 1 and 1.0 are different JSON values; key order is not a difference.
        assert (await call(way, memory, "remember", "k2", value=True)).status == "updated"
        assert (await call(way, memory, "remember", "k3", 1.5)).status == "confirmed"
        swapped = {"a": {"x": True}, "b": [1, 2.5, None]}
        assert (await call(way, memory, "remember", "k0", swapped)).status == "confirmed"


class TestContradict:
    """contradict counts evidence against a fact and lowers its confidence by a step."""

    async def test_counts_and_lowers(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "sky", "green", scope="user", scope_id="u")
        first = await call(way, memory, "contradict", "sky", scope="user", scope_id="u")
        assert (first.times_contradicted, first.confidence) == (1, 0.6)
        second = await call(
            way, memory, "contradict", "sky", scope="user", scope_id="u", penalty=0.5
        )
        assert (second.times_contradicted, second.confidence) == (2, 0.1)
        third = await call(way, memory, "contradict", "sky", scope="user", scope_id="u")
        assert third.confidence == 0.0
        assert await call(way, memory, "get_fact", "sky", user_id="u") == third

    async def test_a_missing_fact_is_none(self, memory: LongTermMemory, way: str) -> None:
        assert await call(way, memory, "contradict", "nothing") is None
        assert await call(way, memory, "facts") == []


class TestScopeHierarchy:
    """get_fact looks in session, user, agent, global; the most specific scope wins."""

    async def test_most_specific_wins(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "tz", "UTC")
        await call(way, memory, "remember", "tz", "agent-tz", scope="agent", scope_id="a")
        await call(way, memory, "remember", "tz", "user-tz", scope="user", scope_id="u")
        await call(way, memory, "remember", "tz", "session-tz", scope="session", scope_id="s")
        ids = {"session_id": "s", "user_id": "u", "agent_id": "a"}

        async def seen(**kw: Any) -> Any:
            fact = await call(way, memory, "get_fact", "tz", **kw)
            return None if fact is None else fact.value

        assert await seen(**ids) == "session-tz"
        assert await seen(user_id="u", agent_id="a") == "user-tz"
        assert await seen(agent_id="a") == "agent-tz"
        assert await seen() == "UTC"
        assert await seen(session_id="other", user_id="other") == "UTC"
        assert await call(way, memory, "get_fact", "nope", **ids) is None

        visible = await call(way, memory, "recall", **ids)
        assert summary(visible) == [("tz", "session-tz", "session", "s")]
        assert await call(way, memory, "forget", "tz", scope="session", scope_id="s")
        assert await seen(**ids) == "user-tz"

    async def test_scope_ids_never_reach_another_scope(
        self, memory: LongTermMemory, way: str
    ) -> None:
        # Ids chosen to collide under a naive f"{scope}:{scope_id}" namespace.
        await call(way, memory, "remember", "k", "a:b", scope="user", scope_id="a:b")
        await call(way, memory, "remember", "k", "a", scope="user", scope_id="a")
        await call(way, memory, "remember", "k", "a%3Ab", scope="user", scope_id="a%3Ab")
        await call(way, memory, "remember", "k", "agent u", scope="agent", scope_id="user:a")
        for scope_id in ("a:b", "a", "a%3Ab"):
            fact = await call(way, memory, "get_fact", "k", user_id=scope_id)
            assert fact.value == scope_id
        assert await call(way, memory, "get_fact", "k", user_id="user:a") is None
        assert await call(way, memory, "get_fact", "k", user_id="b") is None
        users = await call(way, memory, "facts", scope="user")
        assert sorted(f.scope_id for f in users) == ["a", "a%3Ab", "a:b"]
        one = await call(way, memory, "facts", scope="user", scope_id="a:b")
        assert summary(one) == [("k", "a:b", "user", "a:b")]
        assert summary(await call(way, memory, "facts", scope="agent")) == [
            ("k", "agent u", "agent", "user:a")
        ]
        assert await call(way, memory, "facts", scope="global") == []
        assert len(await call(way, memory, "facts")) == 4


class TestForgetAndList:
    """forget removes one scope's fact; facts lists by scope, then id, then creation."""

    async def test_forget(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "k", 1)
        await call(way, memory, "remember", "k", 2, scope="agent", scope_id="a")
        assert await call(way, memory, "forget", "missing") is False
        assert await call(way, memory, "forget", "k", scope="agent", scope_id="b") is False
        assert await call(way, memory, "forget", "k", scope="agent", scope_id="a") is True
        assert await call(way, memory, "forget", "k", scope="agent", scope_id="a") is False
        assert summary(await call(way, memory, "facts")) == [("k", 1, "global", None)]
        remembered = await call(way, memory, "remember", "k", 3, scope="agent", scope_id="a")
        assert remembered.status == "created"  # a forgotten fact starts over

    async def test_listing_order(self, memory: LongTermMemory, way: str) -> None:
        await call(way, memory, "remember", "g2", 0)
        await call(way, memory, "remember", "g1", 0)
        await call(way, memory, "remember", "a", 0, scope="agent", scope_id="x")
        await call(way, memory, "remember", "u", 0, scope="user", scope_id="z")
        await call(way, memory, "remember", "u", 0, scope="user", scope_id="y")
        await call(way, memory, "remember", "s", 0, scope="session", scope_id="s")
        assert [(f.key, f.scope_id) for f in await call(way, memory, "facts")] == [
            ("s", "s"),
            ("u", "y"),
            ("u", "z"),
            ("a", "x"),
            ("g2", None),
            ("g1", None),
        ]
        assert [f.key for f in await call(way, memory, "facts", scope="global")] == ["g2", "g1"]
        assert await call(way, memory, "facts", scope="session", scope_id="other") == []


class TestRecall:
    """recall lists, looks up exactly, falls back to fuzzy keys, searches; by confidence."""

    async def _fill(self, way: str, memory: LongTermMemory) -> None:
        await call(way, memory, "remember", "local_time_zone", "Australia/Adelaide")
        await call(way, memory, "remember", "favourite_colour", "blue", confidence=0.95)
        await call(way, memory, "remember", "doubt", "maybe", confidence=0.3)
        await call(way, memory, "remember", "time_local", {"offset": 9.5}, confidence=0.6)
        await call(
            way, memory, "remember", "lesson_local_time_command", "date", scope="user",
            scope_id="u", confidence=0.7,
        )  # fmt: skip

    async def test_listing(self, memory: LongTermMemory, way: str) -> None:
        await self._fill(way, memory)
        listed = await call(way, memory, "recall")
        assert [f.key for f in listed] == [
            "favourite_colour",
            "local_time_zone",
            "time_local",
        ]
        with_user = await call(way, memory, "recall", user_id="u", min_confidence=0.0, limit=4)
        assert [f.key for f in with_user] == [
            "favourite_colour",
            "local_time_zone",
            "lesson_local_time_command",
            "time_local",
        ]

    async def test_exact_then_fuzzy_keys(self, memory: LongTermMemory, way: str) -> None:
        await self._fill(way, memory)
        exact = await call(way, memory, "recall", "time_local")
        assert [f.value for f in exact] == [{"offset": 9.5}]
        fuzzy = await call(way, memory, "recall", "local time", user_id="u")
        assert [f.key for f in fuzzy] == ["local_time_zone", "lesson_local_time_command"]
        assert await call(way, memory, "recall", "doubt") == []  # below min_confidence
        assert len(await call(way, memory, "recall", "doubt", min_confidence=0.2)) == 1
        assert await call(way, memory, "recall", "adelaide") == []  # keys only

    async def test_query(self, memory: LongTermMemory, way: str) -> None:
        await self._fill(way, memory)
        by_value = await call(way, memory, "recall", query="ADELAIDE")
        assert [f.key for f in by_value] == ["local_time_zone"]
        across = await call(way, memory, "recall", query="zone australia")
        assert [f.key for f in across] == ["local_time_zone"]
        assert [f.key for f in await call(way, memory, "recall", query="offset 9.5")] == [
            "time_local"
        ]
        assert await call(way, memory, "recall", query="colour", limit=1, min_confidence=0.99) == []
        one = await call(way, memory, "recall", query="o", limit=1)
        assert [f.key for f in one] == ["favourite_colour"]
        assert await call(way, memory, "recall", query="100%") == []

    async def test_a_specific_scope_hides_a_matching_general_fact(
        self, memory: LongTermMemory, way: str
    ) -> None:
        await call(way, memory, "remember", "city", "Adelaide")
        await call(way, memory, "remember", "city", "Perth", scope="user", scope_id="u")
        assert [f.value for f in await call(way, memory, "recall", query="adelaide")] == [
            "Adelaide"
        ]
        # Seen from user u, "city" is Perth: the global Adelaide is hidden, not found.
        assert await call(way, memory, "recall", query="adelaide", user_id="u") == []
        seen = await call(way, memory, "recall", "cty", user_id="u")
        assert seen == []
        found = await call(way, memory, "recall", "ci", user_id="u")
        assert [f.value for f in found] == ["Perth"]

    async def test_reads_only_the_facts_that_may_match(
        self, memory: LongTermMemory, way: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A search over many facts validates the few whose stored key or search text
        matches, not every visible fact."""
        # Recall reads visible facts through recall.read_fact (facts._fact before the parts).
        from memlane.longterm import facts as facts_mod
        from memlane.longterm import recall as recall_mod

        for i in range(40):
            await call(way, memory, "remember", f"note_{i}", f"text {i}")
        await call(way, memory, "remember", "local_time_zone", "Australia/Adelaide")
        read: list[str | None] = []
        real = facts_mod.read_fact

        def counted(entry: Any, where: str) -> Any:
            read.append(entry.key)
            return real(entry, where)

        monkeypatch.setattr(recall_mod, "read_fact", counted)
        by_query = await call(way, memory, "recall", query="local time")
        assert [f.key for f in by_query] == ["local_time_zone"]
        assert read == ["local_time_zone"]
        read.clear()
        by_key = await call(way, memory, "recall", "note 3", limit=40)
        matching = sorted(f"note_{i}" for i in range(40) if "3" in str(i))  # note_3, note_13…
        assert sorted(f.key for f in by_key) == matching
        assert sorted(k or "" for k in read) == matching

    async def test_a_fact_stored_without_search_text_is_still_found(
        self, made: Made, way: str
    ) -> None:
        memory = LongTermMemory(made.store)
        await call(way, memory, "remember", "local_time_zone", "Australia/Adelaide")
        where = namespace("longterm", "facts", "global")
        entry = made.store.load_by_key(where, "local_time_zone")
        assert entry is not None
        made.store.save(where, entry.model_copy(update={"metadata": {}}))
        found = await call(way, memory, "recall", query="adelaide")
        assert [f.key for f in found] == ["local_time_zone"]


class TestRecallOtherMemories:
    """recall(query=...) reaches procedures and episodes through their modules' search."""

    async def test_memory_types(self, memory: LongTermMemory, way: str) -> None:
        await call(
            way, memory, "add_procedure", "weather lookup",
            trigger_conditions={"goal_contains": ["weather"]},
            procedure_type="tool_sequence", content=["get_weather"],
        )  # fmt: skip
        await call(
            way, memory, "record_episode", agent_id="a", trigger="chat",
            input="what is the weather", success=True, output="sunny",
        )  # fmt: skip
        await call(way, memory, "remember", "weather_source", "bom.gov.au")

        async def kinds(**kw: Any) -> list[str]:
            found = await call(way, memory, "recall", **kw)
            return [type(r).__name__ for r in found]

        assert await kinds(query="weather") == ["Fact"]
        assert await kinds(query="weather", memory_type="procedures") == ["Procedure"]
        assert await kinds(query="weather", memory_type="episodes") == ["Episode"]
        assert await kinds(query="weather", memory_type="all") == ["Fact", "Procedure", "Episode"]
        assert await kinds(query="weather", memory_type="all", limit=2) == ["Fact", "Procedure"]
        assert await kinds(query="sunny", memory_type="all") == ["Episode"]
        assert await kinds(query="nothing like it", memory_type="all") == []
        assert await kinds(key="weather", memory_type="all") == ["Fact", "Procedure", "Episode"]
        assert await kinds(key="weather_source", memory_type="all") == ["Fact"]


class TestUserPreferencesFollowFacts:
    """A user's cached preferences change as soon as a preference fact of theirs does."""

    async def test_remember_and_forget(self, memory: LongTermMemory, way: str) -> None:
        user = await call(way, memory, "identify_user", "telegram", "42")
        await call(
            way, memory, "remember", "lang", "fr", scope="user", scope_id=user.id,
            fact_type="user_preference",
        )  # fmt: skip
        await call(way, memory, "remember", "city", "Adelaide", scope="user", scope_id=user.id)

        def cached() -> Any:
            held = memory.store.load_by_key(USERS_NAMESPACE, user.id)
            assert held is not None
            return held.content["preferences"]

        assert cached() == {"lang": "fr"}
        await call(way, memory, "remember", "lang", "de", scope="user", scope_id=user.id)
        assert cached() == {"lang": "de"}
        assert await call(way, memory, "forget", "lang", scope="user", scope_id=user.id)
        assert cached() == {}


# ============================================================================ bad input


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], type[Exception], str]] = [
    ("remember", ("", 1), {}, ValueError, "key"),
    ("remember", (3, 1), {}, TypeError, "key must be str"),
    ("remember", ("k\x00", 1), {}, ValueError, "key"),
    ("remember", ("k", {1, 2}), {}, UnstorableValueError, r"value \(type set\)"),
    ("remember", ("k", {"a": float("nan")}), {}, TypeError, r"value\['a'\]"),
    ("remember", ("k", {1: "a"}), {}, TypeError, "dict key 1"),
    ("remember", ("k", 1), {"scope": "planet"}, ValueError, "scope must be one of"),
    ("remember", ("k", 1), {"scope": 3}, TypeError, "scope must be str"),
    ("remember", ("k", 1), {"scope": "user"}, ValueError, "scope 'user' needs a scope_id"),
    ("remember", ("k", 1), {"scope": "user", "scope_id": ""}, ValueError, "scope_id"),
    ("remember", ("k", 1), {"scope": "agent", "scope_id": 5}, TypeError, "scope_id"),
    ("remember", ("k", 1), {"scope_id": "u"}, ValueError, "global scope"),
    ("remember", ("k", 1), {"fact_type": "opinion"}, ValueError, "fact_type must be one of"),
    ("remember", ("k", 1), {"confidence": 1.5}, ValueError, "confidence.*1.5"),
    ("remember", ("k", 1), {"confidence": -0.1}, ValueError, "confidence"),
    ("remember", ("k", 1), {"confidence": float("nan")}, ValueError, "confidence"),
    ("remember", ("k", 1), {"confidence": True}, TypeError, "confidence must be a number"),
    ("remember", ("k", 1), {"confidence": "high"}, TypeError, "confidence"),
    ("remember", ("k", 1), {"overwrite": "no"}, TypeError, "overwrite must be bool"),
    ("contradict", ("k",), {"scope": "user"}, ValueError, "scope_id"),
    ("contradict", ("k",), {"penalty": 2}, ValueError, "penalty"),
    ("forget", ("k",), {"scope": "bad"}, ValueError, "scope"),
    ("get_fact", ("k",), {"user_id": ""}, ValueError, "user_id"),
    ("get_fact", (None,), {}, TypeError, "key"),
    ("facts", (), {"scope_id": "u"}, ValueError, "needs a scope"),
    ("facts", (), {"scope": "global", "scope_id": "u"}, ValueError, "global"),
    ("recall", (), {"memory_type": "dreams"}, ValueError, "memory_type must be one of"),
    ("recall", ("k",), {"query": "q"}, ValueError, "key or query"),
    ("recall", (), {"query": " _ "}, ValueError, "query"),
    ("recall", (), {"query": 5}, TypeError, "query"),
    ("recall", (), {"limit": 0}, ValueError, "limit"),
    ("recall", (), {"min_confidence": 2}, ValueError, "min_confidence"),
    ("recall", (), {"agent_id": 1}, TypeError, "agent_id"),
]


class TestBadInputWritesNothing:
    """Each bad argument raises the built-in a caller catches, naming it; nothing is written."""

    @pytest.mark.parametrize(
        ("name", "args", "kwargs", "error", "message"),
        BAD_CALLS,
        ids=[f"{c[0]}-{n}" for n, c in enumerate(BAD_CALLS)],
    )
    async def test_rejected(
        self,
        way: str,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        message: str,
    ) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        memory.remember("k", 1, scope="user", scope_id="u")
        before = {ns: store.load(ns) for ns in store.namespaces()}
        with pytest.raises(error, match=message):
            await call(way, memory, name, *args, **kwargs)
        assert {ns: store.load(ns) for ns in store.namespaces()} == before

    async def test_on_every_store(self, memory: LongTermMemory, way: str) -> None:
        with pytest.raises(TypeError, match="value"):
            await call(way, memory, "remember", "k", object(), scope="user", scope_id="u")
        with pytest.raises(ValueError, match="confidence"):
            await call(way, memory, "remember", "k", 1, confidence=2.0)
        assert await call(way, memory, "facts") == []


# ============================================================================ concurrency


class TestConcurrentWriters:
    """Writers racing on one key, in tasks, threads and processes: each call lands once."""

    async def test_tasks_and_threads(self, memory: LongTermMemory) -> None:
        async def task() -> list[str]:
            return [(await memory.async_remember("k", "v")).status for _ in range(5)]

        def thread() -> list[str]:
            return [memory.remember("k", "v").status for _ in range(5)]

        results = await asyncio.gather(
            task(), task(), asyncio.to_thread(thread), asyncio.to_thread(thread)
        )
        statuses = [s for r in results for s in r]
        assert statuses.count("created") == 1
        assert statuses.count("confirmed") == 19
        fact = await memory.async_get_fact("k")
        assert fact is not None
        assert fact.times_confirmed == 19
        assert len(await memory.async_facts()) == 1

    async def test_processes(self, shared: Made, impl: _backend.Implementation) -> None:
        memory = LongTermMemory(shared.store)
        await memory.async_remember("warm", 0)  # the schema exists before the race starts
        cfg = {"kind": shared.kind, **shared.cfg, "rounds": 20}
        outputs = await asyncio.to_thread(_race, cfg, impl, 2)
        statuses = [s for out in outputs for s in out]
        assert statuses.count("created") == 1
        assert statuses.count("confirmed") == 39
        fact = await memory.async_get_fact("shared", user_id="a:b")
        assert fact is not None
        assert (fact.times_confirmed, fact.times_contradicted) == (39, 40)
        assert len(await memory.async_facts(scope="user")) == 1


def _race(cfg: dict[str, Any], impl: _backend.Implementation, n: int) -> list[list[str]]:
    """Starts ``n`` worker processes on one store, lets them race, returns their statuses."""
    env = dict(os.environ)
    env.pop("MEMLANE_PURE_PYTHON", None)
    if impl.name == "python":
        env["MEMLANE_PURE_PYTHON"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                pytest.fail(_failure(proc))
        for proc in procs:  # all are ready: start them together
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=STEP_TIMEOUT)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
        return outputs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _failure(proc: subprocess.Popen[str]) -> str:
    proc.wait(timeout=STEP_TIMEOUT)
    assert proc.stderr is not None
    return f"worker exited with {proc.returncode}:\n{proc.stderr.read()}"


WORKER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")  # e.g. the partial-index fallback notice of FerretDB
cfg = json.loads(sys.argv[1])
from memlane.longterm import LongTermMemory
from memlane.stores import FileStore, MongoDBStore, PostgreSQLStore, SQLiteStore

kind = cfg["kind"]
if kind == "postgres":
    store = PostgreSQLStore(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
elif kind == "mongodb":
    store = MongoDBStore(cfg["url"], collection=cfg["name"], pool_size=2)
elif kind == "sqlite":
    store = SQLiteStore(cfg["path"])
else:
    store = FileStore(cfg["path"])
memory = LongTermMemory(store)
memory.get_fact("warm")  # connected before the race starts
print("ready", flush=True)
sys.stdin.readline()
statuses = []
for _ in range(cfg["rounds"]):
    statuses.append(memory.remember("shared", "v", scope="user", scope_id="a:b").status)
    memory.contradict("shared", scope="user", scope_id="a:b")
print(json.dumps(statuses), flush=True)
store.close()
"""


# ============================================================================ the manager


class TestManagerLongTerm:
    """MemoryManager(long_term=...) exposes a long-term memory on its store; forks share it."""

    def test_true_false_and_an_instance(self, tmp_path: Path) -> None:
        assert MemoryManager().long_term is None
        with SQLiteStore(tmp_path / "m.sqlite3") as store:
            manager = MemoryManager(store=store, long_term=True)
            assert manager.long_term is not None
            assert manager.long_term.store is store
            manager.long_term.remember("k", "v")
            fork = manager.fork(working_scope_id="helper")
            assert fork.long_term is manager.long_term
        own = LongTermMemory()
        assert MemoryManager(long_term=own).long_term is own
        with pytest.raises(TypeError, match="long_term must be bool or LongTermMemory"):
            MemoryManager(long_term="yes")
