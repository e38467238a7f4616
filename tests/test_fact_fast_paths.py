"""The fact layer's shortcuts give what the long way gave: copies of values, enum members,
results built without validation."""

from __future__ import annotations

import enum
import json
import multiprocessing
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.errors import UnstorableValueError
from memlane.longterm import LongTermMemory
from memlane.longterm.fact_model import (
    Fact,
    FactScope,
    FactType,
    RememberResult,
    render_plain,
    render_value,
)
from memlane.longterm.fact_plans import fact_entry, new_entry_id, plain_copy
from memlane.longterm.fact_scopes import check_scope
from memlane.longterm.value_checks import check_enum, check_json_value, checked_copy
from memlane.stores import InMemoryStore
from memlane.types import CheckedJson, MemoryEntry

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


class _Level(enum.IntEnum):
    HIGH = 3


class _Name(str):
    pass


class TestPlainCopy:
    """plain_copy is a JSON round trip, done directly for the exact built-in types."""

    @given(_JSON)
    def test_same_as_a_round_trip(self, value: Any) -> None:
        copied = plain_copy(value)
        expected = json.loads(json.dumps(value))
        assert json.dumps(copied) == json.dumps(expected)
        assert copied == expected

    def test_nothing_is_shared(self) -> None:
        value = {"a": [1, {"b": 2}], "c": (3, 4)}
        copied = plain_copy(value)
        assert copied == {"a": [1, {"b": 2}], "c": [3, 4]}
        assert copied is not value
        assert copied["a"] is not value["a"]
        assert copied["a"][1] is not value["a"][1]

    def test_subclasses_become_plain(self) -> None:
        copied = plain_copy({"level": _Level.HIGH, "name": [_Name("ada")]})
        assert copied == {"level": 3, "name": ["ada"]}
        assert type(copied["level"]) is int
        assert type(copied["name"][0]) is str


_ANY_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included: not JSON
    | st.text()
    | st.sampled_from([_Level.HIGH, _Name("ada"), b"raw", {1, 2}]),
    lambda inner: st.lists(inner, max_size=4)
    | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5) | st.integers() | st.just(_Name("k")), inner, max_size=4),
    max_leaves=20,
)


class TestCheckedCopy:
    """checked_copy is check_json_value then plain_copy, in one walk: the same copy, or the
    same error naming the same place."""

    @given(_ANY_JSONISH)
    def test_same_as_check_then_copy(self, value: Any) -> None:
        refused: str | None = None
        try:
            expected = plain_copy(check_json_value(value, "value"))
        except UnstorableValueError as exc:
            refused = str(exc)
        if refused is not None:
            with pytest.raises(UnstorableValueError) as got:
                checked_copy(value, "value")
            assert str(got.value) == refused
            return
        copied = checked_copy(value, "value")
        assert json.dumps(copied) == json.dumps(expected)
        assert copied == expected

    @pytest.mark.parametrize(
        ("value", "where"),
        [
            ({"a": [1, float("nan")]}, "value['a'][1]"),
            ([float("inf")], "value[0]"),
            ({"a": {2: "x"}}, "value['a']"),
            ({"s": {1, 2}}, "value['s']"),
        ],
    )
    def test_errors_name_the_place(self, value: Any, where: str) -> None:
        with pytest.raises(UnstorableValueError) as got:
            checked_copy(value, "value")
        assert str(got.value).startswith(f"value must be plain JSON: {where} (")

    def test_nothing_is_shared(self) -> None:
        value = {"a": [1.5, {"b": 2}], "c": (3, 4)}
        copied = checked_copy(value, "value")
        assert copied == {"a": [1.5, {"b": 2}], "c": [3, 4]}
        assert copied["a"] is not value["a"]
        assert copied["a"][1] is not value["a"][1]


class TestRenderPlain:
    """render_plain gives render_value's text for every plain JSON value (the search text of
    every fact written), from one encoder shared by every call."""

    @given(_JSON | st.floats())  # NaN and infinities too: render_value writes them
    def test_same_as_render_value(self, value: Any) -> None:
        assert render_plain(value) == render_value(value)

    def test_a_failed_encode_leaves_nothing_behind(self) -> None:
        with pytest.raises(TypeError, match="not JSON serializable"):
            render_plain({"a": [b"raw"]})
        value = {"a": [1, {"b": "é"}]}
        assert render_plain(value) == render_value(value) == '{"a": [1, {"b": "é"}]}'

    def test_the_written_search_text(self) -> None:
        memory = LongTermMemory(InMemoryStore())
        memory.remember(
            "tz", {"zone": "Australia/Adelaide", "dst": True}, scope="user", scope_id="u"
        )
        (entry,) = memory.store.load("longterm:facts:user:u")
        assert entry.metadata["search_text"] == 'tz {"zone": "Australia/Adelaide", "dst": true}'


class TestInMemorySaveIfChecks:
    """InMemoryStore.save_if passes an entry of checked JSON without walking it, and still
    checks every other entry as before."""

    def test_a_fact_entry_lands_at_the_stored_version(self) -> None:
        store = InMemoryStore()
        fact = Fact(key="k", value={"a": [1, 2]}, scope=FactScope.USER, scope_id="u")
        entry = fact_entry(fact, version=7)
        assert type(entry.content) is CheckedJson
        assert store.save_if("ns", entry, None)
        held = store.load_by_key("ns", "k")
        assert held is not None
        assert held.version == 1
        assert held.content == fact.model_dump(mode="json")
        assert not store.save_if("ns", fact_entry(fact, held.entry_id, 2), None)
        assert store.save_if("ns", fact_entry(fact, held.entry_id, 2), 1)

    def test_other_entries_are_checked(self) -> None:
        store = InMemoryStore()
        with pytest.raises(UnstorableValueError, match=r"content\['x'\]"):
            store.save_if("ns", MemoryEntry(key="k", content={"x": float("nan")}), None)
        with pytest.raises(UnstorableValueError, match="metadata"):
            store.save_if(
                "ns",
                MemoryEntry(key="k", content=CheckedJson(a=1), metadata={"s": {1}}),
                None,
            )
        with pytest.raises(TypeError, match="keyed entry"):
            store.save_if("ns", MemoryEntry(content=CheckedJson(a=1)), None)
        with pytest.raises(TypeError, match="entry must be MemoryEntry, not dict"):
            store.save_if("ns", {"key": "k"}, None)  # type: ignore[arg-type]  # the check under test
        assert store.load("ns") == []


def _ids_in_child(count: int) -> list[str]:
    return [new_entry_id() for _ in range(count)]


class TestBatchedEntryIds:
    """Entry ids come from batches of random bytes, and no two processes or threads ever
    hand out the same one."""

    def test_form_across_batches(self) -> None:
        ids = [new_entry_id() for _ in range(3 * 256 + 5)]
        assert len(set(ids)) == len(ids)
        for made in ids:
            parsed = uuid.UUID(hex=made)
            assert parsed.hex == made
            assert parsed.version == 4
            assert parsed.variant == uuid.RFC_4122

    def test_forked_children_start_their_own_batch(self) -> None:
        new_entry_id()  # the parent holds a batch with ids left in it when it forks
        with multiprocessing.get_context("fork").Pool(3) as pool:
            children = pool.map(_ids_in_child, [300, 300, 300])
        mine = [new_entry_id() for _ in range(300)]
        every = [*mine, *(i for ids in children for i in ids)]
        assert len(every) == 1200
        assert len(set(every)) == len(every)

    def test_threads_take_different_ids(self) -> None:
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda _: _ids_in_child(500), range(8)))
        every = [i for ids in made for i in ids]
        assert len(set(every)) == len(every) == 4000


class TestCheckScopeCache:
    """A scope and id seen before answer from a cache; a bad one is refused every time."""

    def test_answers_are_the_checked_ones(self) -> None:
        for _ in range(2):
            assert check_scope("user", "u1") == (FactScope.USER, "u1")
            assert check_scope(FactScope.USER, "u1") == (FactScope.USER, "u1")
            assert check_scope("global", None) == (FactScope.GLOBAL, None)
            assert check_scope(_Name("agent"), _Name("a1")) == (FactScope.AGENT, "a1")
            assert check_scope("user", "u1")[0] is FactScope.USER

    @pytest.mark.parametrize(
        ("scope", "scope_id", "error", "text"),
        [
            ("user", None, ValueError, "scope 'user' needs a scope_id"),
            ("global", "u1", ValueError, "scope_id must be None for the global scope"),
            ("planet", "u1", ValueError, "scope must be one of"),
            ("user", "", ValueError, "scope_id must be a non-empty string"),
            ("user", 3, TypeError, "scope_id must be str, not int"),
            (3, "u1", TypeError, "scope must be str, not int"),
        ],
    )
    def test_bad_ones_are_refused_every_time(
        self, scope: object, scope_id: object, error: type[Exception], text: str
    ) -> None:
        for _ in range(2):
            with pytest.raises(error, match=text):
                check_scope(scope, scope_id)


class TestCheckEnum:
    """A member, or its value as a str, or a clear error."""

    def test_values_and_members(self) -> None:
        assert check_enum("user", FactScope, "scope") is FactScope.USER
        assert check_enum(FactType.CORRECTION, FactType, "fact_type") is FactType.CORRECTION

    @pytest.mark.parametrize(("value", "error"), [("planet", ValueError), (3, TypeError)])
    def test_bad_values_are_named(self, value: object, error: type[Exception]) -> None:
        with pytest.raises(error, match="scope"):
            check_enum(value, FactScope, "scope")


class TestRememberResults:
    """Each status's result is what validating it would give."""

    def test_every_status(self) -> None:
        memory = LongTermMemory(InMemoryStore())
        results = [
            memory.remember("k", "v"),
            memory.remember("k", "v"),
            memory.remember("k", "w"),
            memory.remember("k", "x", overwrite=False),
        ]
        assert [r.status for r in results] == ["created", "confirmed", "updated", "skipped"]
        for result in results:
            validated = RememberResult(status=result.status, fact=result.fact)
            assert result == validated
            assert result.model_fields_set == validated.model_fields_set
            assert str(result) == str(validated)
