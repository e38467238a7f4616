"""The API names users and working-memory keys however they are spelled.

``user_id`` on the facts and episodes listings takes every name of a user (id, merged id,
``channel:id``, display name), and a working-memory key holding ``/``, ``%``, ``?``, ``#``,
spaces or any script can be edited through its percent-encoded path segment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from memlane import MemoryManager, SQLiteStore, WorkingMemory
from memlane.server import create_app
from operator_data import Filled, fill
from test_server_editing import TOKEN, Client

ODD_KEYS = ["a/b", "100%", "what?", "#tag", "two words", "Grüße/東京", "%2F", "end/"]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Client, Filled, MemoryManager]]:
    """The app over a filled SQLite store."""
    store = SQLiteStore(str(tmp_path / "filters.sqlite3"))
    manager = MemoryManager(store=store, long_term=True)
    filled = fill(manager)
    try:
        with TestClient(create_app(manager, token=TOKEN)) as client:
            yield Client(client), filled, manager
    finally:
        store.close()


class TestUserFilters:
    """``user_id`` on facts and episodes resolves as ``--user`` does; ambiguity is a 400."""

    @pytest.mark.parametrize("form", ["id", "telegram:1001", "Ada", "ada"])
    def test_every_form(self, api: tuple[Client, Filled, MemoryManager], form: str) -> None:
        client, filled, _ = api
        text = filled.user_id if form == "id" else form
        facts = client.get("facts/", user_id=text)["items"]
        assert {(f["key"], f["scope_id"]) for f in facts} == {
            ("timezone", filled.user_id),
            ("diet", filled.user_id),
        }
        assert client.ids("episodes/", user_id=text) == [filled.episode_id]

    def test_a_merged_id(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client, filled, manager = api
        assert manager.long_term is not None
        manager.long_term.merge_users(filled.other_user_id, filled.user_id)
        facts = client.get("facts/", user_id=filled.other_user_id)["items"]
        assert {f["scope_id"] for f in facts} == {filled.user_id}
        assert client.ids("episodes/", user_id="email:bob@example.com") == [filled.episode_id]

    def test_a_shared_name_is_a_400_with_the_candidates(
        self, api: tuple[Client, Filled, MemoryManager]
    ) -> None:
        client, filled, manager = api
        assert manager.long_term is not None
        other = manager.long_term.identify_user("slack", "U9", display_name="ADA")
        for path in ("facts/", "episodes/"):
            answer = client.get(path, status=400, user_id="Ada")
            assert "'Ada' names 2 users" in answer["error"]
            assert {c["id"] for c in answer["candidates"]} == {filled.user_id, other.id}

    def test_conflicts_and_unknown_ids(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client = api[0]
        assert client.get("facts/", user_id="nobody")["total"] == 0
        assert client.get("facts/", scope="user", user_id="Ada")["total"] == 2
        assert (
            "conflicts" in client.get("facts/", status=400, scope="agent", user_id="Ada")["error"]
        )
        error = client.get("facts/", status=400, agent_id="travel", user_id="Ada")["error"]
        assert "conflicts" in error


class TestWorkingKeys:
    """Any working-memory key can be edited through its percent-encoded last segment."""

    @pytest.mark.parametrize("key", ODD_KEYS)
    def test_odd_keys(self, api: tuple[Client, Filled, MemoryManager], key: str) -> None:
        client, _, manager = api
        working = WorkingMemory(store=manager.store, scope_id="agent:travel")
        working.set(key, "before")
        working.set("a", "a neighbour that must not change")
        path = f"working/{quote('agent:travel', safe='')}/{quote(key, safe='')}"
        row = client.call("PATCH", path, json={"value": "after"})
        assert (row["key"], row["value"]) == (key, "after")
        assert working.get(key) == "after"
        assert working.get("a") == "a neighbour that must not change"

    def test_a_scope_with_a_slash(self, api: tuple[Client, Filled, MemoryManager]) -> None:
        client, _, manager = api
        working = WorkingMemory(store=manager.store, scope_id="team/a")
        working.set("k/1", 1)
        assert client.call("PATCH", "working/team/a/k%2F1", json={"value": 2})["value"] == 2
        assert working.get("k/1") == 2

    @pytest.mark.parametrize(
        ("path", "message"),
        [
            ("working/agent%3Atravel/", "key must not be empty"),
            ("working//k", "scope must not be empty"),
            ("working/agent%3Atravel/%FF", "key is not percent-encoded UTF-8"),
            ("working/agent%3Atravel/%ED%A0%80", "key is not percent-encoded UTF-8"),
            ("working/agent%3Atravel/a%00b", "key holds a NUL"),
            ("working/agent%3Atravel/missing%2Fkey", "missing/key"),
        ],
    )
    def test_bad_paths(
        self, api: tuple[Client, Filled, MemoryManager], path: str, message: str
    ) -> None:
        status = 404 if "missing" in path else 400
        answer = api[0].call("PATCH", path, status, json={"value": 1})
        assert message in answer["error"]
