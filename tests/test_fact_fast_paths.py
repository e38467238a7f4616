"""The fact layer's shortcuts give what the long way gave: copies of values, enum members,
results built without validation."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.longterm import LongTermMemory
from memlane.longterm.fact_model import FactScope, FactType, RememberResult
from memlane.longterm.fact_plans import plain_copy
from memlane.longterm.value_checks import check_enum
from memlane.stores import InMemoryStore

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
