"""``memlane.records``: what the command and the web API read, edit and delete through.

Each behaviour runs on a real SQLite store filled with one of every kind of record
(:func:`operator_data.fill`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import MemoryManager, SQLiteStore
from memlane.errors import NotFoundError, UserNotFoundError
from memlane.longterm import LongTermMemory
from memlane.records import AmbiguousUserError, RecordNotFoundError, Records
from operator_data import Filled, fill


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[tuple[Records, Filled]]:
    """Records over a SQLite store holding one of every record."""
    store = SQLiteStore(str(tmp_path / "records.sqlite3"))
    manager = MemoryManager(store=store, long_term=True)
    data = fill(manager)
    try:
        yield Records(manager), data
    finally:
        store.close()


def _long_term(records: Records) -> LongTermMemory:
    return records.long_term


class TestSortingAndDates:
    """Every listing sorts by a named field and filters by its kind's date; total counts all."""

    def test_sort_facts_both_ways(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        keys = [f["key"] for f in records.facts(sort="key")["items"]]
        assert keys == sorted(keys, key=str.casefold)
        assert [f["key"] for f in records.facts(sort="key", descending=True)["items"]] == list(
            reversed(keys)
        )

    def test_a_page_keeps_the_total(self, filled: tuple[Records, Filled]) -> None:
        page = filled[0].facts(sort="key", offset=1, limit=2)
        assert page["total"] == 6
        assert len(page["items"]) == 2
        assert (page["offset"], page["limit"]) == (1, 2)

    @pytest.mark.parametrize("kind", ["facts", "episodes", "procedures", "users", "conversations"])
    def test_unknown_sort_field_names_the_allowed_ones(
        self, filled: tuple[Records, Filled], kind: str
    ) -> None:
        with pytest.raises(ValueError, match=r"cannot sort .* by 'nope'; sort by one of id"):
            getattr(filled[0], kind)(sort="nope")

    def test_dates(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        may = datetime(2026, 5, 1, 9, 0, 3, tzinfo=UTC)  # the episode's end
        assert records.episodes(since=may)["total"] == 1
        assert records.episodes(until=may - timedelta(seconds=1))["total"] == 0
        future = datetime.now(UTC) + timedelta(days=1)
        assert records.facts(since=future)["total"] == 0
        assert records.users(until=future)["total"] == 2
        assert records.conversations(until=future)["total"] == 2
        assert records.procedures(since=future)["total"] == 0
        with pytest.raises(TypeError, match="since must be a datetime"):
            records.facts(since="yesterday")  # type: ignore[arg-type]  # the check under test

    def test_users_and_conversations_sort(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        names = [u["display_name"] for u in records.users(sort="display_name")["items"]]
        assert names == ["Ada", "Bob"]
        turns = [c["turns"] for c in records.conversations(sort="turns")["items"]]
        assert turns == [1, 2]


class TestDisplayNames:
    """Rows naming a user carry the user's display name beside the id."""

    def test_fact_and_episode_rows(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        user_facts = records.facts(scope="user")["items"]
        assert {(f["scope_id"], f["scope_name"]) for f in user_facts} == {
            (data.user_id, "Ada"),
            (data.other_user_id, "Bob"),
        }
        assert "scope_name" not in records.facts(scope="global")["items"][0]
        [episode] = records.episodes()["items"]
        assert episode["user_name"] == "Ada"


class TestResolveUser:
    """A ``--user`` may be an id, a merged id, ``channel:id`` or a display name."""

    def test_every_form(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        for text in (data.user_id, "telegram:1001", "Ada", "ada", "ADA"):
            assert [u["id"] for u in records.resolve_user(text)] == [data.user_id]
        assert records.resolve_user("nobody") == []

    def test_a_merged_id_names_the_survivor(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        _long_term(records).merge_users(data.other_user_id, data.user_id)
        assert [u["id"] for u in records.resolve_user(data.other_user_id)] == [data.user_id]
        assert [u["id"] for u in records.resolve_user("email:bob@example.com")] == [data.user_id]

    def test_a_shared_name_is_ambiguous(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        other = _long_term(records).identify_user("slack", "U9", display_name="ada")
        assert {u["id"] for u in records.resolve_user("Ada")} == {data.user_id, other.id}
        with pytest.raises(AmbiguousUserError) as raised:
            records.search("timezone", user_id="Ada")
        assert {c["id"] for c in raised.value.candidates} == {data.user_id, other.id}
        assert isinstance(raised.value, ValueError)


class TestSearch:
    """Search covers every scope unless ids narrow it; each fact hit names its scope."""

    def test_every_scope_by_default(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        hits = records.search("timezone", memory_type="facts")
        assert {(h["record"]["scope"], h["record"]["scope_id"]) for h in hits} == {
            ("user", data.user_id),
            ("user", data.other_user_id),
            ("global", None),
        }
        assert {h["record"].get("scope_name") for h in hits} == {"Ada", "Bob", None}

    def test_the_readme_example_finds_user_facts(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        hits = records.search("lisbon weather")
        assert {h["type"] for h in hits} == {"fact", "procedure"}
        assert "Europe/Lisbon" in {h["record"].get("value") for h in hits}

    def test_a_user_by_channel_id(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        hits = records.search("timezone", user_id="telegram:1001", memory_type="facts")
        assert hits[0]["record"]["value"] == "Europe/Lisbon"

    def test_an_unknown_user_is_an_error(self, filled: tuple[Records, Filled]) -> None:
        with pytest.raises(UserNotFoundError, match="no user 'nobody'"):
            filled[0].search("timezone", user_id="nobody")

    def test_bad_arguments(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        with pytest.raises(ValueError, match="at least one word"):
            records.search("!!")
        with pytest.raises(ValueError, match="memory_type must be one of"):
            records.search("x", memory_type="everything")


class TestEdits:
    """Edits change one record, keep what they do not touch, and name what is missing."""

    def test_a_fact_value_joins_the_history(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        fid = f"user:{data.user_id}:timezone"
        row = records.update_fact(fid, value={"tz": "Europe/Porto"})
        assert row["id"] == fid
        assert row["value"] == {"tz": "Europe/Porto"}
        assert [h["value"] for h in row["history"]] == ["Europe/Lisbon"]
        assert row["scope_name"] == "Ada"
        assert records.search("porto", memory_type="facts")[0]["id"] == fid

    def test_a_fact_confidence_alone(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        row = records.update_fact("global:timezone", confidence=0.1)
        assert row["confidence"] == 0.1
        assert row["value"] == "UTC"
        assert row["history"] == []
        again = records.update_fact("global:timezone", value=None, confidence=0.3)
        assert (again["value"], again["confidence"]) == (None, 0.3)
        assert [h["value"] for h in again["history"]] == ["UTC"]
        # JSON equality: true is a new value for a fact holding 1.
        records.update_fact("global:timezone", value=1)
        assert records.update_fact("global:timezone", value=True)["value"] is True

    def test_bad_fact_edits(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        with pytest.raises(RecordNotFoundError, match="no fact 'global:nope'"):
            records.update_fact("global:nope", value=1)
        assert issubclass(RecordNotFoundError, NotFoundError)
        with pytest.raises(ValueError, match="confidence"):
            records.update_fact("global:timezone", confidence=1.5)
        with pytest.raises(TypeError, match="value must be plain JSON"):
            records.update_fact("global:timezone", value=object())
        with pytest.raises(ValueError, match="needs a value or a confidence"):
            records.update_fact("global:timezone")
        with pytest.raises(ValueError, match="not a fact id"):
            records.update_fact("planet:x:y", value=1)

    def test_working_memory(self, filled: tuple[Records, Filled]) -> None:
        records = filled[0]
        row = records.update_working("agent:travel", "city", "Porto", importance=0.9)
        assert (row["key"], row["value"], row["importance"]) == ("city", "Porto", 0.9)
        kept = records.update_working("agent:travel", "budget", [1, 2])
        assert kept["importance"] == 0.5
        with pytest.raises(RecordNotFoundError, match="no working-memory entry 'nope'"):
            records.update_working("agent:travel", "nope", 1)
        made = records.update_working("agent:travel", "nope", 1, create=True)
        assert made["value"] == 1
        assert {i["key"] for i in records.working("agent:travel")} == {"city", "budget", "nope"}

    def test_user_display_name(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        assert records.update_user(data.user_id, display_name="Ada L.")["display_name"] == "Ada L."
        assert [u["id"] for u in records.resolve_user("ada l.")] == [data.user_id]
        assert records.update_user(data.user_id, display_name=None)["display_name"] is None
        with pytest.raises(UserNotFoundError, match="no user with id 'nope'"):
            records.update_user("nope", display_name="X")
        with pytest.raises(ValueError, match="must not be empty"):
            records.update_user(data.user_id, display_name="  ")


class TestAudit:
    """Every change is logged at WARNING on ``memlane.audit`` before it happens."""

    def test_one_line_before_a_delete(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        seen: list[tuple[str, int]] = []

        class Before(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                # Logged while the records are still there.
                seen.append((record.getMessage(), records.episodes()["total"]))

        handler = Before(logging.WARNING)
        audit = logging.getLogger("memlane.audit")
        audit.addHandler(handler)
        try:
            done = records.delete("episodes", [data.episode_id, "nope"], actor="ops@example")
        finally:
            audit.removeHandler(handler)
        assert done == {"deleted": [data.episode_id], "not_found": ["nope"]}
        assert seen == [(f"ops@example deletes 2 episodes: {data.episode_id}, nope", 1)]
        assert records.episodes()["total"] == 0

    def test_edits_are_logged_without_values(
        self, filled: tuple[Records, Filled], caplog: pytest.LogCaptureFixture
    ) -> None:
        records, data = filled
        with caplog.at_level(logging.WARNING, logger="memlane.audit"):
            records.update_fact("global:timezone", value="secret-value")
            records.update_working("agent:travel", "city", "Porto")
            records.update_user(data.user_id, display_name="Ada L.")
            records.delete_working("agent:travel", ["budget"])
        lines = [r.getMessage() for r in caplog.records if r.name == "memlane.audit"]
        assert lines == [
            "memlane edits fact global:timezone: value",
            "memlane edits working-memory entry city of agent:travel",
            f"memlane renames user {data.user_id}",
            "memlane deletes 1 working-memory entry of agent:travel: budget",
        ]
        assert all(r.levelno == logging.WARNING for r in caplog.records)

    def test_an_id_cannot_forge_a_line(
        self, filled: tuple[Records, Filled], caplog: pytest.LogCaptureFixture
    ) -> None:
        records, _ = filled
        forged = "x\nmemlane deletes 0 facts: nothing\u2028\x1b[2K"
        with caplog.at_level(logging.WARNING, logger="memlane.audit"):
            records.delete("episodes", [forged], actor="api client\r\n1.2.3.4")
            records.delete("facts", ["global:a\nb"])
            records.delete_working("agent:travel\n", ["k\u0085"])
        lines = [r.getMessage() for r in caplog.records if r.name == "memlane.audit"]
        assert lines == [
            "api client\\r\\n1.2.3.4 deletes 1 episode: "
            "x\\nmemlane deletes 0 facts: nothing\\u2028\\x1b[2K",
            "memlane deletes 1 fact: global:a\\nb",
            "memlane deletes 1 working-memory entry of agent:travel\\n: k\\x85",
        ]


class TestDeleteEveryKind:
    """A batch delete removes exactly the records named, of one kind."""

    def test_users_go_with_their_identifiers(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        assert records.delete("users", [data.other_user_id])["deleted"] == [data.other_user_id]
        assert records.resolve_user("email:bob@example.com") == []
        # The identifier is free again: the same address is a new person now.
        again = _long_term(records).identify_user("email", "bob@example.com")
        assert again.id != data.other_user_id

    def test_facts_in_several_scopes(self, filled: tuple[Records, Filled]) -> None:
        records, data = filled
        ids = [f"user:{data.user_id}:timezone", "global:timezone", "agent:travel:style"]
        assert records.delete("facts", [*ids, ids[0]])["deleted"] == ids
        assert records.facts()["total"] == 3


class TestTotals:
    """``totals`` counts each kind once for the whole store."""

    def test_counts(self, filled: tuple[Records, Filled]) -> None:
        totals = filled[0].totals()
        assert {k: v for k, v in totals.items() if k != "bytes"} == {
            "facts": 6,
            "episodes": 1,
            "procedures": 1,
            "users": 2,
            "conversations": 2,
            "turns": 3,
            "working": 2,
        }
        assert totals["bytes"] > 0


class TestConversationView:
    """A conversation shows its own budget and every turn, the summarised ones marked."""

    def test_transcript_with_summarised_turns(self, tmp_path: Path) -> None:
        store = SQLiteStore(str(tmp_path / "summary.sqlite3"))
        try:
            manager = MemoryManager(
                store=store,
                max_conversation_tokens=300,
                summarize_threshold=120,
                summarizer=lambda turns: "the earlier turns, briefly",
            )
            cid = manager.new_conversation()
            for n in range(8):
                manager.add_turn(cid, f"question {n} " + "word " * 20, f"answer {n} " + "ok " * 10)
            view = Records(manager).conversation(cid)
        finally:
            store.close()
        assert view["budget"] == 300
        assert view["summarize_threshold"] == 120
        assert view["summary"] == "the earlier turns, briefly"
        transcript: list[dict[str, Any]] = view["transcript"]
        assert [t["turn_id"] for t in transcript] == list(range(8))
        summarised = [t for t in transcript if t["summarised"]]
        assert summarised
        assert transcript[0]["summarised"]
        assert not any(t["sent"] for t in summarised)
        assert [t["turn_id"] for t in view["messages"]] == [
            t["turn_id"] for t in transcript if not t["summarised"]
        ]
        assert all(t["user"].startswith("question") for t in transcript)


class TestForgetUser:
    """``forget_user`` removes every record of one person, conversations included."""

    @pytest.fixture
    def active(self, filled: tuple[Records, Filled]) -> tuple[Records, Filled]:
        records, data = filled
        _long_term(records).record_user_activity(data.user_id, conversation_id=data.conversation_id)
        return records, data

    def test_dry_run_then_forget(
        self, active: tuple[Records, Filled], caplog: pytest.LogCaptureFixture
    ) -> None:
        records, data = active
        with caplog.at_level(logging.WARNING, logger="memlane.audit"):
            plan = records.forget_user("ada", dry_run=True)
        assert not [r for r in caplog.records if r.name == "memlane.audit"]
        assert plan["dry_run"] is True
        assert plan["user_ids"] == [data.user_id]
        assert plan["conversations"] == [data.conversation_id]
        assert records.totals()["users"] == 2
        with caplog.at_level(logging.WARNING, logger="memlane.audit"):
            done = records.forget_user("telegram:1001", actor="dpo")
        assert [r.getMessage() for r in caplog.records if r.name == "memlane.audit"] == [
            f"dpo forgets user {data.user_id} (Ada) and every record of theirs"
        ]
        assert {k: v for k, v in done.items() if k != "dry_run"} == {
            k: v for k, v in plan.items() if k != "dry_run"
        }
        assert done["dry_run"] is False
        assert [u["display_name"] for u in records.users()["items"]] == ["Bob"]
        assert {f["scope_id"] for f in records.facts(scope="user")["items"]} == {data.other_user_id}
        assert records.episodes()["total"] == 0
        assert [c["id"] for c in records.conversations()["items"]] == [data.other_conversation_id]

    def test_a_merged_user_goes_with_the_survivor(self, active: tuple[Records, Filled]) -> None:
        records, data = active
        _long_term(records).merge_users(data.other_user_id, data.user_id)
        done = records.forget_user(data.other_user_id)
        assert sorted(done["user_ids"]) == sorted([data.user_id, data.other_user_id])
        assert records.users()["total"] == 0
        assert records.facts(scope="user")["total"] == 0

    def test_unknown_and_ambiguous(self, active: tuple[Records, Filled]) -> None:
        records = active[0]
        with pytest.raises(UserNotFoundError, match="no user 'zed'"):
            records.forget_user("zed")
        _long_term(records).identify_user("slack", "U1", display_name="Ada")
        with pytest.raises(AmbiguousUserError, match="'Ada' names 2 users"):
            records.forget_user("Ada")
        assert records.users()["total"] == 3
