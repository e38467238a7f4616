"""The REST API of ``memlane serve``: every store, the token, bad input, and namespaces.

Most tests drive :func:`memlane.server.create_app` through Starlette's TestClient; one starts
the real ``memlane serve`` (uvicorn on loopback) to check the command's own behaviour.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from conftest import drop_server_place
from memlane import FileStore, InMemoryStore, MemoryManager, SQLiteStore
from memlane.server import COOKIE_NAME, create_app
from memlane.stores import MemoryStore, MongoDBStore, PostgreSQLStore
from operator_data import Filled, fill
from serve_process import Served

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/api/v1/"


class Api:
    """A client of the app with the token, returning decoded JSON."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def get(self, path: str, status: int = 200, **params: Any) -> Any:
        response = self.client.get(API + path, params=params or None, headers=AUTH)
        assert response.status_code == status, response.text
        return response.json()

    def delete(self, path: str, ids: list[str], status: int = 200) -> Any:
        response = self.client.post(API + path, json={"ids": ids}, headers=AUTH)
        assert response.status_code == status, response.text
        return response.json()

    def ids(self, path: str, **params: Any) -> list[str]:
        return [item["id"] for item in self.get(path, **params)["items"]]


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[MemoryStore, Any]:
    """A fresh store of ``kind`` and what to drop afterwards on a shared server."""
    place = f"api_{os.getpid()}_{kind}"
    if kind == "memory":
        return InMemoryStore(), None
    if kind == "sqlite":
        return SQLiteStore(str(tmp_path / "api.sqlite3")), None
    if kind == "file":
        return FileStore(str(tmp_path / "files")), None
    if kind == "postgres":
        url = request.getfixturevalue("postgres_server").url
        return PostgreSQLStore(url, schema_name=place), ("postgres", url, place)
    url = request.getfixturevalue("mongodb_server").url
    return MongoDBStore(url, collection=place), ("mongodb", url, place)


STORES = [
    "memory",
    "sqlite",
    "file",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param(
        "mongodb",
        marks=[
            pytest.mark.mongodb,
            pytest.mark.filterwarnings("ignore::memlane.stores.IndexFallbackWarning"),
        ],
    ),
]


@pytest.fixture
def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Api, Filled, MemoryManager]]:
    """The app over a filled store (InMemoryStore unless the test is parametrized by store)."""
    kind = getattr(request, "param", "memory")
    store, place = _store(kind, tmp_path, request)
    store.initialize()
    manager = MemoryManager(store=store, long_term=True)
    try:
        filled = fill(manager)
        with TestClient(create_app(manager, token=TOKEN)) as client:
            yield Api(client), filled, manager
    finally:
        store.close()
        if place is not None:
            asyncio.run(drop_server_place(*place))


class TestEveryStore:
    """Browsing and batch deletes give the same answers on every store."""

    @pytest.mark.parametrize("served", STORES, indirect=True)
    def test_browse_search_and_batch_delete(
        self, served: tuple[Api, Filled, MemoryManager]
    ) -> None:
        api, filled, manager = served
        ada_tz = f"user:{filled.user_id}:timezone"
        facts = api.get("facts/")
        assert facts["total"] == 6
        assert ada_tz in {f["id"] for f in facts["items"]}
        assert api.ids("episodes/") == [filled.episode_id]
        assert api.ids("procedures/") == [filled.procedure_id]
        assert set(api.ids("memory-users/")) == {filled.user_id, filled.other_user_id}
        assert set(api.ids("checkpoints/")) == {
            filled.conversation_id,
            filled.other_conversation_id,
        }
        conversation = api.get(f"conversations/{filled.conversation_id}")
        assert [m["assistant"] for m in conversation["messages"]] == [
            "Lovely! Noted.",
            "Sunny, 22°C.",
        ]
        assert api.get("working/")["items"] == [{"scope": "agent:travel", "entries": 2}]
        hits = api.get("search/", q="Sintra")["items"]
        assert [(h["type"], h["id"]) for h in hits] == [("episode", filled.episode_id)]

        assert api.delete("facts/batch-delete/", [ada_tz, "global:capital_of_portugal"]) == {
            "deleted": [ada_tz, "global:capital_of_portugal"],
            "not_found": [],
        }
        assert api.get("facts/")["total"] == 4
        assert manager.long_term is not None
        assert manager.long_term.get_fact("timezone", user_id=filled.user_id) is not None
        assert manager.long_term.get_fact("timezone", user_id=filled.user_id).value == "UTC"  # type: ignore[union-attr]
        for path, record_id in (
            ("episodes/", filled.episode_id),
            ("procedures/", filled.procedure_id),
            ("memory-users/", filled.other_user_id),
            ("checkpoints/", filled.other_conversation_id),
        ):
            assert api.delete(path + "batch-delete/", [record_id])["deleted"] == [record_id]
            assert record_id not in api.ids(path)
        assert api.ids("memory-users/") == [filled.user_id]
        assert manager.long_term.get_user(filled.other_user_id) is None
        # The deleted user's channel id is free again: identifying it makes a new user.
        again = manager.long_term.identify_user("email", "bob@example.com")
        assert again.id != filled.other_user_id
        assert api.delete("working/agent:travel/batch-delete/", ["city", "nope"]) == {
            "deleted": ["city"],
            "not_found": ["nope"],
        }
        assert [i["key"] for i in api.get("working/agent:travel/")["items"]] == ["budget"]

    @pytest.mark.parametrize("served", STORES, indirect=True)
    def test_edits_and_hostile_ids(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api, filled, manager = served
        client = api.client
        fact = f"user:{filled.user_id}:diet"
        edited = client.patch(API + f"facts/{fact}", json={"value": {"v": 1}}, headers=AUTH)
        assert edited.json()["value"] == {"v": 1}
        working = client.patch(API + "working/agent:travel/city", json={"value": 2}, headers=AUTH)
        assert working.json()["value"] == 2
        named = client.patch(
            API + f"memory-users/{filled.user_id}", json={"display_name": "A"}, headers=AUTH
        )
        assert named.json()["display_name"] == "A"
        assert manager.long_term is not None
        assert manager.long_term.get_user(filled.user_id).display_name == "A"  # type: ignore[union-attr]
        for body in (b'{"ids": ["global:\\ud800"]}', b'{"ids": ["user:\\u0000:x"]}'):
            for path in ("facts/", "episodes/", "memory-users/", "checkpoints/"):
                response = client.post(
                    API + path + "batch-delete/",
                    content=body,
                    headers={**AUTH, "Content-Type": "application/json"},
                )
                assert response.status_code == 400, response.text
        for path in ("conversations/%ED%A0%80", "episodes/%ED%A0%80", "facts/?q=%ED%A0%80"):
            assert client.get(API + path, headers=AUTH).status_code in (200, 404)
        assert api.get("facts/")["total"] == 6


class TestListing:
    """Listings page, filter and search as the query says."""

    def test_pagination(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api = served[0]
        every = api.ids("facts/")
        first = api.get("facts/", limit=4)
        assert first["total"] == 6
        assert [f["id"] for f in first["items"]] == every[:4]
        rest = api.get("facts/", limit=4, offset=4)
        assert [f["id"] for f in rest["items"]] == every[4:]
        assert api.get("facts/", offset=10)["items"] == []

    def test_filters(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api, filled, _ = served
        assert set(api.ids("facts/", user_id=filled.user_id)) == {
            f"user:{filled.user_id}:timezone",
            f"user:{filled.user_id}:diet",
        }
        assert api.ids("facts/", agent_id="travel") == ["agent:travel:style"]
        assert api.ids("facts/", scope="global", q="lisbon") == ["global:capital_of_portugal"]
        assert api.ids("facts/", type="user_preference") == [f"user:{filled.user_id}:diet"]
        assert api.ids("episodes/", user_id=filled.user_id, success="true") == [filled.episode_id]
        assert api.ids("episodes/", success="false") == []
        assert api.ids("episodes/", agent_id="someone-else") == []
        assert api.ids("procedures/", type="tool_sequence") == [filled.procedure_id]
        assert api.ids("procedures/", type="code_snippet") == []
        assert api.ids("memory-users/", q="bob@example") == [filled.other_user_id]
        assert api.ids("checkpoints/", q="from bob") == []  # rows hold counts, not text
        episode = api.get(f"episodes/{filled.episode_id}")
        assert episode["outcome"]["output"] == "Pena Palace, then Quinta da Regaleira"

    def test_search(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api, filled, _ = served
        hits = api.get("search/", q="timezone", user_id=filled.user_id, type="facts")["items"]
        assert [h["record"]["value"] for h in hits] == ["Europe/Lisbon"]
        hits = api.get("search/", q="weather")["items"]
        assert [(h["type"], h["id"]) for h in hits] == [("procedure", filled.procedure_id)]

    def test_turns_over_the_budget_are_marked_not_sent(self) -> None:
        manager = MemoryManager(max_conversation_tokens=40)  # no summarizer: turns wait
        for n in range(6):
            manager.add_turn("c1", f"question number {n} about the trip", f"answer number {n}")
        with TestClient(create_app(manager, token=TOKEN)) as client:
            detail = Api(client).get("conversations/c1")
        sent = [m["sent"] for m in detail["messages"]]
        assert len(sent) == 6
        assert sent == sorted(sent)  # the oldest wait, the newest are sent
        assert 0 < detail["sent_turns"] == sum(sent) < 6
        assert detail["history_tokens"] <= detail["budget"] == 40

    def test_openapi_lists_every_route(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api = served[0]
        schema = api.get("openapi.json")
        assert schema["openapi"].startswith("3.")
        app = api.client.app
        routes = {
            r.path.replace("{id:path}", "{id}")
            .replace("{scope:path}", "{scope}")
            .replace("{key:path}", "{key}")
            for r in app.routes  # type: ignore[attr-defined]
            if isinstance(r, Route) and r.path.startswith(API) and not r.path.endswith(".json")
        }
        assert routes == set(schema["paths"])


class TestToken:
    """Without the bearer token the API answers 401; --no-auth opens reads, never deletes."""

    def test_every_request_needs_the_token(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        client = served[0].client
        cases = [
            ({}, "bearer token is required", 'Bearer realm="memlane"'),
            ({"Authorization": TOKEN}, "must be 'Bearer <token>'", 'Bearer realm="memlane"'),
            (
                {"Authorization": "Bearer wrong"},
                "the bearer token is wrong",
                'Bearer realm="memlane", error="invalid_token"',
            ),
        ]
        for method, path in (
            ("GET", "facts/"),
            ("GET", "openapi.json"),
            ("POST", "facts/batch-delete/"),
        ):
            for headers, message, challenge in cases:
                response = client.request(method, API + path, headers=headers, json={"ids": ["x"]})
                assert response.status_code == 401
                assert message in response.json()["error"]
                assert response.headers["www-authenticate"] == challenge
        refused = client.get("/memories")
        assert refused.status_code == 401
        assert "/memories?token=" in refused.text  # a person is told where the token is
        client.cookies.set(COOKIE_NAME, "stale")
        wrong_cookie = client.get(API + "facts/")
        assert wrong_cookie.json()["error"] == "the bearer token is wrong"
        assert "invalid_token" in wrong_cookie.headers["www-authenticate"]
        client.cookies.clear()
        assert served[0].get("facts/")["total"] == 6

    def test_the_page_url_sets_an_http_only_cookie(
        self, served: tuple[Api, Filled, MemoryManager]
    ) -> None:
        client = served[0].client
        assert client.get("/memories?token=wrong", follow_redirects=False).status_code == 401
        response = client.get(f"/memories?token={TOKEN}", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == "/memories"
        cookie = response.headers["set-cookie"].lower()
        assert cookie.startswith(f"{COOKIE_NAME}={TOKEN}".lower())
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        page = client.get("/memories")  # the client keeps the cookie
        assert page.status_code == 200
        assert "<title>memlane · memories</title>" in page.text
        assert "http://" not in page.text.replace('"http://www.w3.org', "")  # nothing from outside
        assert client.get(API + "facts/").status_code == 200

    def test_no_auth_reads_but_never_deletes(self) -> None:
        manager = MemoryManager(long_term=True)
        fill(manager)
        app = create_app(manager, token=TOKEN, auth=False)
        with TestClient(app, base_url="http://127.0.0.1:8765") as client:
            assert client.get(API + "facts/").json()["total"] == 6
            # A page elsewhere rebinding its name to 127.0.0.1 still sends that name.
            for host in ("evil.example", "evil.example:8765", "localhost.evil.example"):
                rebound = client.get(API + "facts/", headers={"Host": host})
                assert rebound.status_code == 400
                assert host in rebound.json()["error"]  # JSON, like every other refusal
                assert rebound.headers["X-Frame-Options"] == "DENY"
            for host in ("localhost:8765", "[::1]:8765", "[::1]", "LOCALHOST"):
                assert client.get(API + "facts/", headers={"Host": host}).status_code == 200
            body = {"ids": ["global:timezone"]}
            assert client.post(API + "facts/batch-delete/", json=body).status_code == 401
            response = client.post(API + "facts/batch-delete/", json=body, headers=AUTH)
            assert response.json()["deleted"] == ["global:timezone"]

    def test_a_generated_token(self) -> None:
        app = create_app(MemoryManager())
        assert len(app.state.token) >= 24
        assert create_app(MemoryManager()).state.token != app.state.token


class TestBadInput:
    """Bad ids, parameters and bodies get a 4xx with a JSON error, never a 500."""

    @pytest.mark.parametrize(
        ("query", "message"),
        [
            ("facts/?limit=0", "limit must be between 1 and 500"),
            ("facts/?limit=abc", "limit must be an integer"),
            ("facts/?limit=%C2%B2", "limit must be an integer"),
            ("facts/?offset=--5", "offset must be an integer"),
            ("facts/?offset=%D9%A3", "offset must be an integer"),
            ("facts/?limit=501", "limit must be between 1 and 500"),
            ("facts/?offset=-1", "offset must be >= 0"),
            ("facts/?scope=planet", "scope"),
            ("facts/?scope_id=u1", "scope_id needs a scope"),
            ("facts/?scope=agent&user_id=u1", "user_id conflicts with scope='agent'"),
            ("episodes/?success=maybe", "success must be true or false"),
            ("search/", "q is required"),
            ("search/?q=%21%21%21", "query must hold at least one word"),
            ("search/?q=x&type=planets", "memory_type must be one of"),
        ],
    )
    def test_bad_parameters(
        self, served: tuple[Api, Filled, MemoryManager], query: str, message: str
    ) -> None:
        assert message in served[0].get(query, status=400)["error"]

    @pytest.mark.parametrize(
        ("body", "content_type", "status", "message"),
        [
            (b"{not json", "application/json", 400, "not JSON"),
            (b'{"ids": "global:timezone"}', "application/json", 400, "non-empty list"),
            (b'{"ids": []}', "application/json", 400, "non-empty list"),
            (b'{"ids": [1]}', "application/json", 400, "non-empty list"),
            (b'{"ids": [""]}', "application/json", 400, "non-empty list"),
            (b'["global:timezone"]', "application/json", 400, '{"ids": [...]}'),
            (b'{"ids": ["global:timezone"], "all": true}', "application/json", 400, "{"),
            (b"ids=global:timezone", "application/x-www-form-urlencoded", 415, "as JSON"),
            (b"\xff\xfe", "application/json", 400, "not JSON"),
        ],
    )
    def test_bad_bodies(
        self,
        served: tuple[Api, Filled, MemoryManager],
        body: bytes,
        content_type: str,
        status: int,
        message: str,
    ) -> None:
        client = served[0].client
        response = client.post(
            API + "facts/batch-delete/",
            content=body,
            headers={**AUTH, "Content-Type": content_type},
        )
        assert response.status_code == status
        assert message in response.json()["error"]
        assert served[0].get("facts/")["total"] == 6

    def test_unknown_records_and_routes(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api = served[0]
        assert "no conversation 'nope'" in api.get("conversations/nope", status=404)["error"]
        assert "no episode 'nope'" in api.get("episodes/nope", status=404)["error"]
        assert api.get("nothing/", status=404)["error"] == "no such resource: /api/v1/nothing/"
        assert "GET is not allowed" in api.get("facts/batch-delete/", status=405)["error"]
        assert api.get("working/nobody/")["items"] == []


class TestNamespaces:
    """An id names a record of its own kind only: nothing else can be reached through it."""

    def test_a_fact_id_names_one_scope(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api, filled, _ = served
        assert api.delete("facts/batch-delete/", ["global:timezone"])["deleted"] == [
            "global:timezone"
        ]
        left = api.ids("facts/")
        assert f"user:{filled.user_id}:timezone" in left
        assert f"user:{filled.other_user_id}:timezone" in left

    @pytest.mark.parametrize(
        "bad",
        ["timezone", "global:", "planet:x:timezone", "user:timezone", "longterm:episodes:x"],
    )
    def test_malformed_fact_ids_delete_nothing(
        self, served: tuple[Api, Filled, MemoryManager], bad: str
    ) -> None:
        api = served[0]
        response = api.delete("facts/batch-delete/", ["global:timezone", bad], status=400)
        assert "not a fact id" in response["error"]
        assert api.get("facts/")["total"] == 6

    def test_ids_of_other_kinds_are_not_found(
        self, served: tuple[Api, Filled, MemoryManager]
    ) -> None:
        api, filled, _ = served
        foreign = [
            filled.user_id,
            filled.conversation_id,
            "telegram:1001",
            "../" + filled.episode_id,
            "summary",
        ]
        for path in ("episodes/", "procedures/", "memory-users/", "checkpoints/"):
            response = api.delete(path + "batch-delete/", foreign)
            mine = {"memory-users/": filled.user_id, "checkpoints/": filled.conversation_id}
            assert response["deleted"] == ([mine[path]] if path in mine else [])
        assert api.ids("episodes/") == [filled.episode_id]
        assert api.ids("procedures/") == [filled.procedure_id]
        # "telegram:1001" is an identifier-index key, not a user id: the index is intact.
        assert api.get("working/agent:travel/")["items"]

    def test_working_scopes_do_not_overlap(self, served: tuple[Api, Filled, MemoryManager]) -> None:
        api = served[0]
        # "agent" is a prefix of the scope "agent:travel", and "travel" its tail.
        for scope in ("agent", "travel", "agent:travel:city"):
            assert api.delete(f"working/{scope}/batch-delete/", ["city"])["deleted"] == []
        assert len(api.get("working/agent:travel/")["items"]) == 2


def test_memlane_serve(tmp_path: Path) -> None:
    """The real command: uvicorn on loopback, the token it was given, deletes in its log."""
    store = f"sqlite:///{tmp_path / 'served.sqlite3'}"
    env = {"MEMLANE_SERVER_TOKEN": TOKEN}
    with Served("--store", store, "--create", log=tmp_path / "serve.log", env=env) as server:
        assert server.page_url == f"{server.base}/memories?token={TOKEN}"
        assert httpx.get(f"{server.base}{API}facts/").status_code == 401
        assert httpx.get(f"{server.base}{API}facts/", headers=AUTH).json()["total"] == 0
        response = httpx.post(
            f"{server.base}{API}checkpoints/batch-delete/", json={"ids": ["c1"]}, headers=AUTH
        )
        assert response.json() == {"deleted": [], "not_found": ["c1"]}
    assert "deleted conversations [] (not found: ['c1'])" in server.log()
    refused = subprocess.run(
        [sys.executable, "-m", "memlane", "serve", "--no-auth", "--host", "0.0.0.0"],  # noqa: S104
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert refused.returncode == 1
    assert "--no-auth is only allowed on a loopback address" in refused.stderr
