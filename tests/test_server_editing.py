"""The API's operator features: sorting, filters, paging past one page, edits, forgetting a
person, a conversation's own budget and whole transcript, totals, search in every scope."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memlane import MemoryManager, SQLiteStore
from memlane.server import create_app
from operator_data import Filled, fill

TOKEN = "editing-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/api/v1/"


class Client:
    """The app with the token; each call checks the status and returns the JSON."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def call(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = self.client.request(method, API + path, headers=AUTH, **kwargs)
        assert response.status_code == status, response.text
        return response.json()

    def get(self, path: str, status: int = 200, **params: Any) -> Any:
        return self.call("GET", path, status, params=params or None)

    def ids(self, path: str, **params: Any) -> list[str]:
        return [item["id"] for item in self.get(path, **params)["items"]]


@pytest.fixture
def api() -> Iterator[tuple[Client, Filled, MemoryManager]]:
    """The app over a filled in-memory store."""
    manager = MemoryManager(long_term=True)
    filled = fill(manager)
    with TestClient(create_app(manager, token=TOKEN)) as client:
        yield Client(client), filled, manager


class TestListings:
    """Sorting and date filters run on the server; ``total`` counts every match."""

    def test_sorting(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client = api[0]
        keys = [f["key"] for f in client.get("facts/", sort="key")["items"]]
        assert keys == sorted(keys)
        down = [f["key"] for f in client.get("facts/", sort="key", descending="true")["items"]]
        assert down == sorted(keys, reverse=True)
        refused = client.get("facts/", status=400, sort="password")["error"]
        assert "'password'" in refused
        assert "confidence" in refused

    def test_dates_and_paging_past_one_page(self) -> None:
        manager = MemoryManager(long_term=True)
        assert manager.long_term is not None
        for n in range(621):
            manager.long_term.remember(f"k{n:03}", n)
        with TestClient(create_app(manager, token=TOKEN)) as raw:
            client = Client(raw)
            seen: list[str] = []
            offset = 0
            while True:
                page = client.get("facts/", limit=500, offset=offset, sort="key")
                assert page["total"] == 621
                seen += [f["key"] for f in page["items"]]
                offset += 500
                if offset >= page["total"]:
                    break
            assert seen == [f"k{n:03}" for n in range(621)]
            tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
            assert client.get("facts/", since=tomorrow)["total"] == 0
            assert client.get("facts/", until=tomorrow)["total"] == 621
            written = client.get("facts/", limit=1)["items"][0]["updated_at"][:10]
            assert client.get("facts/", until=written)["total"] == 621  # the whole day
            assert client.get("facts/", since=written)["total"] == 621
            assert "ISO 8601" in client.get("facts/", status=400, since="soon")["error"]

    def test_display_names_on_rows(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client, filled, _ = api
        facts = client.get("facts/", user_id=filled.user_id)["items"]
        assert {f["scope_name"] for f in facts} == {"Ada"}
        assert client.get("episodes/")["items"][0]["user_name"] == "Ada"

    def test_totals_and_search_in_every_scope(
        self, api: tuple[Client, Filled, MemoryManager]
    ) -> None:
        client, filled, _ = api
        totals = client.get("totals/")
        assert {k: totals[k] for k in ("facts", "episodes", "procedures", "users")} == {
            "facts": 6,
            "episodes": 1,
            "procedures": 1,
            "users": 2,
        }
        assert totals["conversations"] == 2
        hits = client.get("search/", q="vegetarian")["items"]
        assert [(h["type"], h["record"]["scope_id"]) for h in hits] == [("fact", filled.user_id)]
        by_channel = client.get("search/", q="timezone", user_id="telegram:1001", type="facts")
        assert {h["record"]["value"] for h in by_channel["items"]} >= {"Europe/Lisbon"}


class TestEditing:
    """PATCH changes one record, logs it before it happens, and answers with the new row."""

    def test_a_fact(
        self, api: tuple[Client, Filled, MemoryManager], caplog: pytest.LogCaptureFixture
    ) -> None:
        client, filled, manager = api
        caplog.set_level(logging.WARNING)
        fact = f"user:{filled.user_id}:timezone"
        row = client.call("PATCH", f"facts/{fact}", json={"value": {"tz": "Lisbon"}})
        assert row["id"] == fact
        assert row["value"] == {"tz": "Lisbon"}
        row = client.call("PATCH", f"facts/{fact}", json={"confidence": 0.25})
        assert (row["value"], row["confidence"]) == ({"tz": "Lisbon"}, 0.25)
        assert manager.long_term is not None
        stored = manager.long_term.get_fact("timezone", user_id=filled.user_id)
        assert stored is not None
        assert stored.value == {"tz": "Lisbon"}
        audit = [r.getMessage() for r in caplog.records if r.name == "memlane.audit"]
        assert len(audit) == 2
        assert all(fact in line and "api client" in line for line in audit)
        assert (
            "no fact" in client.call("PATCH", "facts/global:nope", 404, json={"value": 1})["error"]
        )
        bad = client.call("PATCH", f"facts/{fact}", 400, json={"confidence": 7})
        assert "confidence" in bad["error"]
        assert client.call("PATCH", "facts/nonsense", 400, json={"value": 1})["error"]

    def test_working_memory_and_a_user(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client, filled, manager = api
        row = client.call("PATCH", "working/agent:travel/city", json={"value": ["Porto", 2]})
        assert row["value"] == ["Porto", 2]
        items = {i["key"]: i["value"] for i in client.get("working/agent:travel/")["items"]}
        assert items == {"city": ["Porto", 2], "budget": 1200}
        missing = client.call("PATCH", "working/agent:travel/nope", 404, json={"value": 1})
        assert "nope" in missing["error"]
        body = {"display_name": "Ada Lovelace"}
        assert client.call("PATCH", f"memory-users/{filled.user_id}", json=body)[
            "display_name"
        ] == ("Ada Lovelace")
        assert manager.long_term is not None
        user = manager.long_term.get_user(filled.user_id)
        assert user is not None
        assert user.display_name == "Ada Lovelace"
        bad = client.call("PATCH", f"memory-users/{filled.user_id}", 400, json={"display_name": 3})
        assert "display_name" in bad["error"]
        unknown = client.call("PATCH", "memory-users/nobody", 404, json={"display_name": "x"})
        assert "nobody" in unknown["error"]

    def test_changes_need_the_token(self) -> None:
        manager = MemoryManager(long_term=True)
        fill(manager)
        app = create_app(manager, token=TOKEN, auth=False)
        with TestClient(app, base_url="http://127.0.0.1:8765") as client:
            assert client.get(API + "facts/").status_code == 200
            patched = client.patch(API + "facts/global:timezone", json={"value": "x"})
            assert patched.status_code == 401
            assert client.delete(API + "memory-users/x?cascade=true").status_code == 401


class TestConversation:
    """A conversation shows its own budget, its summary and every turn it ever kept."""

    def test_budget_summary_and_transcript(self) -> None:
        manager = MemoryManager(
            max_conversation_tokens=120,
            summarize_threshold=80,
            summarizer=lambda turns: f"they talked about {len(turns)} trips",
        )
        cid = manager.new_conversation()
        for n in range(12):
            manager.add_turn(cid, f"question {n} about trains and buses", f"answer {n}")
        with TestClient(create_app(manager, token=TOKEN)) as raw:
            detail = Client(raw).get(f"conversations/{cid}")
        assert (detail["budget"], detail["summarize_threshold"]) == (120, 80)
        assert detail["summary"].startswith("they talked about")
        transcript = detail["transcript"]
        assert [t["user"] for t in transcript] == [
            f"question {n} about trains and buses" for n in range(12)
        ]
        summarised = [t for t in transcript if t["summarised"]]
        assert summarised
        assert all(not t["sent"] for t in summarised)
        assert sum(t["sent"] for t in transcript) == detail["sent_turns"]
        assert all(t["tokens"] > 0 for t in transcript)


class TestForgetUser:
    """DELETE /memory-users/{id}?cascade=true forgets every record of one person."""

    def test_dry_run_then_cascade(
        self, api: tuple[Client, Filled, MemoryManager], caplog: pytest.LogCaptureFixture
    ) -> None:
        client, filled, _ = api
        caplog.set_level(logging.WARNING)
        ada_facts = {f"user:{filled.user_id}:timezone", f"user:{filled.user_id}:diet"}
        plan = client.call("DELETE", f"memory-users/{filled.user_id}", params={"dry_run": "true"})
        assert plan["dry_run"] is True
        assert set(plan["facts"]) == ada_facts
        assert plan["episodes"] == [filled.episode_id]
        assert plan["user_ids"] == [filled.user_id]
        assert client.get("facts/")["total"] == 6  # a dry run deletes nothing
        done = client.call("DELETE", f"memory-users/{filled.user_id}", params={"cascade": "true"})
        assert done["dry_run"] is False
        assert set(done["facts"]) == ada_facts
        left = set(client.ids("facts/"))
        assert not ada_facts & left
        assert f"user:{filled.other_user_id}:timezone" in left
        assert client.ids("episodes/") == []
        assert client.ids("memory-users/") == [filled.other_user_id]
        assert any(r.name == "memlane.audit" for r in caplog.records)
        again = client.call(
            "DELETE", f"memory-users/{filled.user_id}", 404, params={"cascade": "1"}
        )
        assert filled.user_id in again["error"]

    def test_without_cascade_only_the_user_goes(
        self, api: tuple[Client, Filled, MemoryManager]
    ) -> None:
        client, filled, _ = api
        done = client.call("DELETE", f"memory-users/{filled.other_user_id}")
        assert done["deleted"] == [filled.other_user_id]
        assert client.get("facts/")["total"] == 6
        assert "no user" in client.call("DELETE", "memory-users/nobody", 404)["error"]


def test_changes_on_a_read_only_store_are_409(tmp_path: Path) -> None:
    """A store opened read-only answers every change with 409, naming the store; reads work."""
    path = tmp_path / "ro.sqlite3"
    writable = SQLiteStore(str(path))
    filled = fill(MemoryManager(store=writable, long_term=True))
    writable.close()
    store = SQLiteStore(str(path), read_only=True)
    before = path.read_bytes()
    try:
        with TestClient(create_app(MemoryManager(store=store, long_term=True), token=TOKEN)) as raw:
            client = Client(raw)
            assert client.get("facts/")["total"] == 6
            for method, route, body in (
                ("PATCH", "facts/global:timezone", {"value": "x"}),
                ("PATCH", "working/agent:travel/city", {"value": "x"}),
                ("PATCH", f"memory-users/{filled.user_id}", {"display_name": "x"}),
                ("POST", "facts/batch-delete/", {"ids": ["global:timezone"]}),
            ):
                refused = client.call(method, route, 409, json=body)
                assert "read-only" in refused["error"]
            assert client.get("facts/")["total"] == 6
    finally:
        store.close()
    assert path.read_bytes() == before
