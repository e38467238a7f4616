"""``memlane serve`` as an attacker meets it: headers, hostile requests, limits, logs, load.

Every route answers with the security headers; every malformed request is a 4xx JSON error
and the server keeps answering; bodies are limited while they are read; the token never
reaches a log; deletes are logged at warning before they happen; reads run side by side.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from memlane import InMemoryStore, MemoryManager, SQLiteStore
from memlane.server import SECURITY_HEADERS, RedactTokenFilter, create_app, uvicorn_log_config
from memlane.server.inputs import MAX_BODY, MAX_DEPTH
from memlane.server.security import SecurityHeaders
from operator_data import Filled, fill
from serve_process import Served

TOKEN = "hardening-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/api/v1/"
JSON = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture
def app_client() -> Iterator[tuple[TestClient, Filled]]:
    """The app over a filled in-memory store, with the token."""
    manager = MemoryManager(long_term=True)
    filled = fill(manager)
    with TestClient(create_app(manager, token=TOKEN)) as client:
        yield client, filled


def _assert_headers(headers: Mapping[str, str]) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, name


def _concrete(path: str, filled: Filled) -> str:
    return (
        path.replace("{id:path}", filled.conversation_id)
        .replace("{id}", filled.user_id)
        .replace("{scope:path}", "agent:travel")
        .replace("{key}", "city")
    )


class TestHeaders:
    """The security headers are on every response: routes, errors, redirects, 401s, 404s."""

    def test_every_route_and_method(self, app_client: tuple[TestClient, Filled]) -> None:
        client, filled = app_client
        seen = 0
        for route in client.app.routes:  # type: ignore[attr-defined]
            assert isinstance(route, Route)
            path = _concrete(route.path, filled)
            for method in sorted(route.methods or {"GET"}):
                for headers in (AUTH, {}, {"Authorization": "Bearer wrong"}):
                    response = client.request(
                        method, path, headers=headers, content=b"[", follow_redirects=False
                    )
                    _assert_headers(response.headers)
                    assert response.status_code < 500, (method, path, response.text)
                    seen += 1
        assert seen > 60

    def test_errors_redirects_and_sign_in(self, app_client: tuple[TestClient, Filled]) -> None:
        client = app_client[0]
        answers = [
            client.get("/nowhere", headers=AUTH),
            client.get("/", headers=AUTH, follow_redirects=False),
            client.get(f"/memories?token={TOKEN}", follow_redirects=False),
            client.get("/memories?token=wrong", follow_redirects=False),
            client.delete(API + "facts/", headers=AUTH),
            client.post(API + "facts/batch-delete/", content=b"x" * (MAX_BODY + 1), headers=JSON),
        ]
        assert [a.status_code for a in answers] == [404, 307, 303, 401, 405, 413]
        for answer in answers:
            _assert_headers(answer.headers)
        page = client.get("/memories")
        assert page.status_code == 200
        _assert_headers(page.headers)
        assert "<script>" not in page.text
        assert " style=" not in page.text
        assert " on" not in page.text.replace(" one", "")  # no inline event handler
        scripts = re.findall(r'<script src="(/[\w.-]+\.js)" defer></script>', page.text)
        assert scripts == ["/memories-base.js", "/memories-views.js", "/memories.js"]
        for path in scripts:
            script = client.get(path)
            assert script.headers["content-type"].startswith("text/javascript")
            for parser in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
                assert parser not in script.text, (path, parser)
        assert client.get("/memories.css").headers["content-type"].startswith("text/css")

    def test_an_unexpected_error_is_a_json_500_with_the_headers(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def broken(request: Request) -> Response:
            raise RuntimeError("a bug")

        from starlette.middleware import Middleware

        app = Starlette(routes=[Route("/", broken)], middleware=[Middleware(SecurityHeaders)])
        with caplog.at_level(logging.ERROR, "memlane.server"), TestClient(app) as client:
            response = client.get("/")
        assert response.status_code == 500
        assert response.json() == {"error": "internal error; the server's log has the details"}
        assert "a bug" not in response.text
        _assert_headers(response.headers)
        assert "a bug" in caplog.text


DEEP = b'{"ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HOSTILE_BODIES = [
    pytest.param(DEEP, 400, "nests deeper", id="100000-deep"),
    pytest.param(
        b'{"ids": ' + b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5) + b"}",
        400,
        "nests deeper",
        id="just-too-deep",
    ),
    pytest.param(b'{"ids": ["\\ud800"]}', 400, "lone surrogate", id="surrogate-value"),
    pytest.param(b'{"\\udfff": ["x"]}', 400, "lone surrogate", id="surrogate-key"),
    pytest.param(b'{"ids": ["a\\u0000b"]}', 400, "NUL", id="nul"),
    pytest.param(b'{"ids": ["\xff\xfe"]}', 400, "not UTF-8", id="invalid-utf8"),
    pytest.param(b'{"ids": [' + b"9" * 5000 + b"]}", 400, "digits", id="huge-integer"),
    pytest.param(b'{"ids": [1e999]}', 400, "too large", id="huge-float"),
    pytest.param(b'{"ids": [NaN]}', 400, "not a JSON number", id="nan"),
    pytest.param(b"[]", 400, '{"ids"', id="list"),
    pytest.param(b'"ids"', 400, '{"ids"', id="string"),
    pytest.param(b"null", 400, '{"ids"', id="null"),
    pytest.param(b"17", 400, '{"ids"', id="number"),
    pytest.param(b"", 400, "not JSON", id="empty"),
]


class TestHostileRequests:
    """Whatever a caller sends is a 4xx JSON error, and the next request is served."""

    @pytest.mark.parametrize(("body", "status", "message"), HOSTILE_BODIES)
    def test_bodies(
        self, app_client: tuple[TestClient, Filled], body: bytes, status: int, message: str
    ) -> None:
        client = app_client[0]
        for path in ("facts/batch-delete/", "working/agent:travel/batch-delete/"):
            response = client.post(API + path, content=body, headers=JSON)
            assert response.status_code == status, response.text
            assert message in response.json()["error"]
        assert client.get(API + "facts/", headers=AUTH).json()["total"] == 6

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            (b"[1]", "JSON object"),
            (b'{"value": 1, "owner": "x"}', "unknown fields ['owner']"),
            (b"{}", "must give"),
            (b'{"confidence": 1e999}', "too large"),
            (b'{"value": "\\udc80"}', "lone surrogate"),
            (b'{"confidence": "high"}', "confidence"),
        ],
    )
    def test_edit_bodies(
        self, app_client: tuple[TestClient, Filled], body: bytes, message: str
    ) -> None:
        client = app_client[0]
        response = client.patch(API + "facts/global:timezone", content=body, headers=JSON)
        assert response.status_code == 400, response.text
        assert message in response.json()["error"]

    @pytest.mark.parametrize(
        "path",
        [
            "conversations/%ED%A0%80",
            "conversations/%FF",
            "episodes/%ED%A0%80",
            "working/%ED%A0%80/",
            "facts/?q=%ED%A0%80",
            "facts/?scope=user&scope_id=%ED%A0%80",
            "facts/?limit=99999999999999999999999999",
            "facts/?offset=1e9",
            "facts/?since=yesterday",
            "facts/?sort=%FF",
            "facts/?sort=password",
            "search/?q=%ED%A0%80",
            "search/?q=x&limit=-1",
        ],
    )
    def test_paths_and_queries(self, app_client: tuple[TestClient, Filled], path: str) -> None:
        client = app_client[0]
        response = client.get(API + path, headers=AUTH)
        assert response.status_code < 500
        if response.status_code != 200:
            assert 400 <= response.status_code < 500
            assert response.json()["error"]
        assert client.get(API + "facts/", headers=AUTH).status_code == 200

    def test_media_types_match_case_insensitively(
        self, app_client: tuple[TestClient, Filled]
    ) -> None:
        client = app_client[0]
        for media in ("Application/JSON; charset=utf-8", "APPLICATION/JSON", "application/json;"):
            response = client.post(
                API + "facts/batch-delete/",
                content=b'{"ids": ["global:nope"]}',
                headers={**AUTH, "Content-Type": media},
            )
            assert response.json() == {"deleted": [], "not_found": ["global:nope"]}
        refused = client.post(
            API + "facts/batch-delete/",
            content=b'{"ids": ["global:nope"]}',
            headers={**AUTH, "Content-Type": "text/plain"},
        )
        assert refused.status_code == 415

    def test_a_streamed_body_is_stopped_at_the_limit(
        self, app_client: tuple[TestClient, Filled]
    ) -> None:
        client = app_client[0]
        sent = 0

        def chunks() -> Iterator[bytes]:
            nonlocal sent
            for _ in range(64):  # 4 MiB offered in 64 KiB pieces, with no Content-Length
                sent += 1
                yield b" " * 65536

        response = client.post(API + "facts/batch-delete/", content=chunks(), headers=JSON)
        assert response.status_code == 413
        assert f"over {MAX_BODY} bytes" in response.json()["error"]
        declared = client.post(
            API + "facts/batch-delete/",
            content=b"x" * (MAX_BODY + 1),
            headers=JSON,
        )
        assert declared.status_code == 413
        assert "declared" in declared.json()["error"]


class TestAudit:
    """Every change is logged at warning before it happens, naming the client."""

    def test_deletes_and_edits_are_logged_at_warning(
        self, app_client: tuple[TestClient, Filled], caplog: pytest.LogCaptureFixture
    ) -> None:
        client = app_client[0]
        caplog.set_level(logging.WARNING)
        client.post(API + "facts/batch-delete/", json={"ids": ["global:timezone"]}, headers=AUTH)
        client.patch(API + "facts/global:capital_of_portugal", json={"value": "x"}, headers=AUTH)
        audit = [r for r in caplog.records if r.name == "memlane.audit"]
        assert len(audit) == 2
        assert all(r.levelno == logging.WARNING for r in audit)
        assert "global:timezone" in audit[0].getMessage()
        assert "api client testclient" in audit[0].getMessage()
        done = [r.getMessage() for r in caplog.records if r.name == "memlane.server"]
        assert any("deleted facts ['global:timezone']" in line for line in done)
        assert TOKEN not in caplog.text

    def test_the_token_filter_redacts_uvicorn_access_lines(self) -> None:
        record = logging.LogRecord(
            "uvicorn.access",
            logging.INFO,
            __file__,
            1,
            '%s - "%s %s HTTP/%s" %d',
            ("127.0.0.1:5", "GET", f"/memories?token={TOKEN}&x=1", "1.1", 303),
            None,
        )
        assert RedactTokenFilter().filter(record)
        assert TOKEN not in record.getMessage()
        assert "/memories?token=[redacted]&x=1" in record.getMessage()
        config = uvicorn_log_config()
        assert config["filters"]["redact_token"] == {"()": RedactTokenFilter}
        assert all("redact_token" in h["filters"] for h in config["handlers"].values())
        assert config["loggers"]["uvicorn.access"]["handlers"] == ["access"]


class TestConcurrency:
    """Reads run side by side; the store is shared by the thread pool's workers."""

    def test_two_reads_overlap(self) -> None:
        arrived = threading.Barrier(2, timeout=30)

        class Meeting(InMemoryStore):
            """A store whose working-memory reads wait until two are in flight at once."""

            def load(self, namespace: str, *args: Any, **kwargs: Any) -> Any:
                if namespace.startswith("working:"):
                    arrived.wait()  # two serialised reads would break the barrier
                return super().load(namespace, *args, **kwargs)

        manager = MemoryManager(store=Meeting(), long_term=True)
        fill(manager)
        with TestClient(create_app(manager, token=TOKEN)) as client:

            def read(_: int) -> int:
                response = client.get(API + "working/agent:travel/", headers=AUTH)
                return len(response.json()["items"])

            with ThreadPoolExecutor(2) as pool:
                assert list(pool.map(read, range(2))) == [2, 2]
        assert not arrived.broken

    def test_the_list_lives_at_both_addresses(self, app_client: tuple[TestClient, Filled]) -> None:
        client, filled = app_client
        both = [
            client.get(API + path, headers=AUTH).json()
            for path in ("conversations/", "checkpoints/")
        ]
        assert both[0] == both[1]
        assert {c["id"] for c in both[0]["items"]} == {
            filled.conversation_id,
            filled.other_conversation_id,
        }
        deleted = client.post(
            API + "conversations/batch-delete/",
            json={"ids": [filled.other_conversation_id]},
            headers=AUTH,
        )
        assert deleted.json()["deleted"] == [filled.other_conversation_id]


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        return sock.recv(65536)


def test_the_real_server_survives_hostile_requests(tmp_path: Path) -> None:
    """Under uvicorn: hostile bodies, an announced 50 MB body, then normal service; no token
    in any log line."""
    path = tmp_path / "store.sqlite3"
    store = SQLiteStore(str(path))
    fill(MemoryManager(store=store, long_term=True))
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        url = served.base + API
        for body in (DEEP, b'{"ids": ["\\ud800"]}', b"\xff", b"[]"):
            response = httpx.post(url + "facts/batch-delete/", content=body, headers=JSON)
            assert response.status_code == 400
            _assert_headers(response.headers)
        # Only the headers are sent: the 413 comes back before any of the 50 MB would be read.
        answer = _raw(
            served.port,
            b"POST /api/v1/facts/batch-delete/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 50000000\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 413")
        assert httpx.get(url + "facts/", headers=AUTH).json()["total"] == 6
        with httpx.Client(follow_redirects=True) as browser:
            assert browser.get(served.page_url).status_code == 200  # the cookie, then the page
        facts = json.loads(httpx.get(url + "facts/?limit=1", headers=AUTH).text)
        assert facts["total"] == 6
    access = [line for line in served.log().splitlines() if '"GET /memories?token=' in line]
    assert len(access) == 1
    assert TOKEN not in access[0]


def test_read_threads_must_be_a_positive_integer() -> None:
    """A bad ``read_threads`` is refused when the app is made, naming the value."""
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match=f"read_threads must be an integer >= 1, got {bad!r}"):
            create_app(MemoryManager(), read_threads=bad)  # type: ignore[arg-type]  # wrong on purpose
