"""The facts listing reads rows from the stored entries and validates only the page shown.

What a caller receives must be exactly what validating every fact gave (the listing's old
way), ``q`` must stay a case-insensitive substring match on a row's JSON (the documented
filter, which ``memlane delete --filter`` relies on), and a corrupt fact must still fail
when it is shown, naming where it lies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memlane import MemoryManager, SQLiteStore
from memlane.errors import CorruptStoreError
from memlane.longterm import Fact
from memlane.longterm.facts import fact_namespace
from memlane.longterm.model import FactScope
from memlane.records import AmbiguousUserError, Records, fact_id
from memlane.records.finding import is_fact_namespace
from memlane.records.listing import to_json
from memlane.types import MemoryEntry
from operator_data import Filled, fill


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[tuple[Records, Filled]]:
    """Records over a SQLite store holding one of every record, and odd scope ids."""
    store = SQLiteStore(str(tmp_path / "listing.sqlite3"))
    manager = MemoryManager(store=store, long_term=True)
    data = fill(manager)
    records = Records(manager)
    records.long_term.remember("odd key:100%", "Grüße", scope="session", scope_id="s:1%/x")
    records.long_term.remember("note", {"text": "Ünïcode", "n": 3}, scope="agent", scope_id="a:b")
    try:
        yield records, data
    finally:
        store.close()


def _validated(records: Records) -> list[dict[str, Any]]:
    """Every fact as the listing showed it by validating each one."""
    names = {u["id"]: u["display_name"] for u in records.users()["items"]}
    rows = []
    for fact in records.long_term.facts():
        row = {"id": fact_id(fact), **to_json(fact)}
        if fact.scope is FactScope.USER and fact.scope_id is not None:
            row["scope_name"] = names.get(fact.scope_id)
        rows.append(row)
    return rows


def _corrupt(records: Records, key: str) -> str:
    """Stores a fact whose confidence is not a number, in the global scope; its id."""
    entry = MemoryEntry(key=key, content={"key": key, "value": "x", "confidence": "very"})
    records.manager.store.save(fact_namespace(FactScope.GLOBAL, None), entry)
    return f"global:{key}"


class TestRowsAsValidated:
    """Rows built from the entries are what validating every fact gives, in the same order."""

    def test_every_fact(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        assert records.facts()["items"] == _validated(records)

    @pytest.mark.parametrize(
        ("scope", "scope_id"),
        [("user", None), ("session", "s:1%/x"), ("agent", "a:b"), ("global", None)],
    )
    def test_one_scope(
        self, filled: tuple[Records, Filled], scope: str, scope_id: str | None
    ) -> None:
        records = filled[0]
        wanted = [
            row
            for row in _validated(records)
            if row["scope"] == scope and scope_id in (None, row["scope_id"])
        ]
        assert records.facts(scope=scope, scope_id=scope_id)["items"] == wanted

    def test_ids_name_their_fact(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        ids = [row["id"] for row in records.facts()["items"]]
        assert "session:s%3A1%25/x:odd key%3A100%25" in ids
        deleted = records.delete("facts", ["session:s%3A1%25/x:odd key%3A100%25"])
        assert deleted["deleted"] == ["session:s%3A1%25/x:odd key%3A100%25"]

    def test_bad_scopes_are_refused(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        with pytest.raises(ValueError, match="scope"):
            records.facts(scope="planet")
        with pytest.raises(ValueError, match="scope_id"):
            records.facts(scope="global", scope_id="x")


class TestSubstringFilter:
    """``q`` matches any part of a row's JSON, case-insensitively, as documented."""

    @pytest.mark.parametrize(
        ("q", "keys"),
        [
            ("LISB", {"timezone", "capital_of_portugal"}),  # part of a word, any case
            ("GRÜSSE", {"odd key:100%"}),  # "ß" casefolds to "ss" on both sides
            ("ünïc", {"note"}),  # inside a structured value
            ("s:1%/", {"odd key:100%"}),  # the scope id, not the searched text
            ("%3a100%25", {"odd key:100%"}),  # the escaped id
            ('"confidence": 0.8', None),  # across fields of the JSON
        ],
    )
    def test_matches(self, filled: tuple[Records, Filled], q: str, keys: set[str] | None) -> None:
        records = filled[0]
        found = {row["key"] for row in records.facts(q=q)["items"]}
        if keys is None:  # every fact remembered with the default confidence
            keys = {row["key"] for row in _validated(records) if row["confidence"] == 0.8}
            assert keys
        assert found == keys

    def test_user_names_match(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        found = records.facts(q="ada")["items"]
        assert {row["scope_id"] for row in found} == {data.user_id}


class TestOnlyThePageIsValidated:
    """A fact that does not validate fails when shown, and only then."""

    def test_outside_the_page(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        total = len(_validated(records))
        corrupt = _corrupt(records, "zzz_broken")
        page = records.facts(sort="key", limit=3)
        assert page["total"] == total + 1
        assert corrupt not in [row["id"] for row in page["items"]]

    def test_on_the_page(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        _corrupt(records, "aaa_broken")
        with pytest.raises(CorruptStoreError, match=r"corrupt fact 'aaa_broken' in longterm:facts"):
            records.facts(sort="key", limit=3)

    def test_validations_counted(
        self, filled: tuple[Records, Filled], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        records = filled[0]
        validated: list[object] = []
        real = Fact.model_validate

        def counting(data: Any, **kwargs: Any) -> Fact:
            validated.append(data)
            return real(data, **kwargs)

        monkeypatch.setattr(Fact, "model_validate", counting)
        page = records.facts(q="e", sort="key", limit=2)
        assert page["total"] > 2
        assert len(validated) == 2


class TestFactNamespaces:
    """Fact namespaces are told by their first two parts, whatever the scope id holds."""

    @pytest.mark.parametrize(
        ("name", "facts"),
        [
            ("longterm:facts", True),
            ("longterm:facts:global", True),
            ("longterm:facts:user:a%3Ab", True),
            ("longterm:factsheet", False),
            ("longterm:episodes", False),
            ("working:longterm:facts", False),
            ("longterm%3Afacts:global", False),
        ],
    )
    def test_names(self, name: str, facts: bool) -> None:
        assert is_fact_namespace(name) is facts


class TestUserFilter:
    """A facts or episodes filter by user takes every name of the user, as ``--user`` does."""

    @pytest.mark.parametrize("form", ["id", "telegram:1001", "Ada", "aDA"])
    def test_every_form(self, filled: tuple[Records, Filled], form: str) -> None:
        records, data = filled
        text = data.user_id if form == "id" else form
        facts = records.facts(user_id=text)["items"]
        assert {f["key"] for f in facts} == {"timezone", "diet"}
        assert {f["scope_id"] for f in facts} == {data.user_id}
        assert [e["id"] for e in records.episodes(user_id=text)["items"]] == [data.episode_id]

    def test_a_merged_id_lists_the_survivor(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        records.long_term.merge_users(data.other_user_id, data.user_id)
        facts = records.facts(user_id=data.other_user_id)["items"]
        assert {f["scope_id"] for f in facts} == {data.user_id}
        assert [e["id"] for e in records.episodes(user_id="Bob")["items"]] == [data.episode_id]

    def test_an_id_no_user_holds_is_taken_as_it_is(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        records.long_term.remember("plan", "rail", scope="user", scope_id="u-no-record")
        assert [f["key"] for f in records.facts(user_id="u-no-record")["items"]] == ["plan"]
        assert records.episodes(user_id="nobody")["items"] == []

    def test_a_shared_name_lists_the_candidates(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        other = records.long_term.identify_user("slack", "U9", display_name="ADA")
        for listing in (records.facts, records.episodes):
            with pytest.raises(AmbiguousUserError, match="'ada' names 2 users") as raised:
                listing(user_id="ada")
            assert {c["id"] for c in raised.value.candidates} == {data.user_id, other.id}

    def test_another_scope_conflicts(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        assert records.facts(scope="user", user_id="Ada")["total"] == 2
        with pytest.raises(ValueError, match="user_id 'Ada' conflicts with scope='agent'"):
            records.facts(scope="agent", user_id="Ada")
        with pytest.raises(ValueError, match="conflicts"):
            records.facts(scope="user", scope_id="x", user_id="Ada")
