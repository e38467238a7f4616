"""What PostgreSQLStore sends as JSONB: the scan for numbers JSONB would print back
differently finds exactly what the full pattern finds, on any JSON text."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from memlane.stores._pg_sql import has_exponent_number, jsonb_text

# The scan before the hint was added: every number token with an exponent, or a lone number.
FULL_PATTERN = re.compile(r"[:,\[]-?[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]")


def full_scan(text: str) -> bool:
    return bool(FULL_PATTERN.search(text)) or (text[0] in "-0123456789" and "e" in text.lower())


# Strings that look like exponents inside JSON strings (hex ids, prose) are the near misses.
_TRICKY = st.sampled_from(
    ["4e8a", "1e5", "e-mail", "2E+3", "x9e", "0e", "e9", "1.5e-7", ":1e5", "[2e3", ",3E-1"]
)
_TEXT = st.one_of(_TRICKY, st.text(max_size=12), st.text("0123456789eE+-.:,[ ", max_size=12))
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e16, -1.5e300, 5e-324, 1.5e-7, 2.0**70, 1e-5]),
    _TEXT,
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=12,
)


class TestExponentScan:
    """The hinted scan agrees with the full pattern, so JSONB keeps every float a float."""

    @given(_JSON)
    def test_agrees_on_json_written_by_json_dumps(self, value: Any) -> None:
        for text in (
            json.dumps(value, ensure_ascii=False, separators=(",", ":")),
            json.dumps(value),
        ):
            assert has_exponent_number(text) == full_scan(text), text

    @given(st.text(min_size=1), st.text(min_size=1))
    def test_agrees_on_any_text_around_an_exponent(self, before: str, after: str) -> None:
        for text in (before, f"{before}:1e+16{after}", f"[{before},2E5]", f"{before}9e{after}"):
            assert has_exponent_number(text) == full_scan(text), text

    def test_floats_with_exponents_are_written_positionally(self) -> None:
        value = {"big": 1e16, "tiny": 1.5e-7, "id": "4e8a", "n": 3}
        text = json.dumps(value, separators=(",", ":"))
        sent = jsonb_text(value, text, entry_id="e", field="content")
        assert "e" not in sent.replace('"4e8a"', "")
        assert json.loads(sent) == value

    def test_a_text_with_only_lookalikes_is_sent_as_it_is(self) -> None:
        value = {"id": "4e8a9e-1", "note": "re-enter 2e"}
        text = json.dumps(value, separators=(",", ":"))
        assert jsonb_text(value, text, entry_id="e", field="content") is text
