"""The REST API and the page, as one Starlette application.

Safety: every request needs the bearer token (``Authorization: Bearer …``, or the HTTP-only
same-site cookie the page gets from the URL ``memlane serve`` prints) unless ``auth=False``,
and even then a request that changes data needs it. A delete must be sent as JSON, which a
cross-site form cannot do without a preflight the app never grants. Every change is logged on
the ``memlane.server`` logger.

Errors are JSON ``{"error": "..."}``: 400 for a bad parameter, id or body, 401 without the
token, 404 for an unknown record, 415 for a body that is not JSON, 503 when the store cannot
be reached.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from memlane.errors import NotFoundError, StoreConnectionError, StoreError
from memlane.manager import MemoryManager
from memlane.records import Records
from memlane.server.openapi import openapi_schema

__all__ = ["COOKIE_NAME", "DEFAULT_LIMIT", "MAX_LIMIT", "create_app"]

COOKIE_NAME = "memlane_token"
"""The HTTP-only cookie that carries the token for the page."""

DEFAULT_LIMIT = 50
"""Records per page unless ``limit`` says otherwise."""
MAX_LIMIT = 500
"""The most records one page may hold."""

_MAX_BODY = 1 << 20
_LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
_SIGN_IN = (
    "<!doctype html><title>memlane · sign in</title><p>Open the address <code>memlane serve"
    "</code> printed, <code>/memories?token=…</code>; the token is then kept in a cookie.</p>"
)
_LOG = logging.getLogger("memlane.server")


class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _int(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _HTTPError(400, f"{name} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise _HTTPError(400, f"{name} must be {bound}, got {value}")
    return value


def _str(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value or None


def _bool(request: Request, name: str) -> bool | None:
    raw = _str(request, name)
    if raw is None:
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise _HTTPError(400, f"{name} must be true or false, got {raw!r}")


def _paging(request: Request) -> dict[str, Any]:
    return {
        "q": _str(request, "q"),
        "offset": _int(request, "offset", 0, 0),
        "limit": _int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
    }


async def _ids(request: Request) -> list[str]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _HTTPError(
            415, 'send the body as JSON: {"ids": [...]} with Content-Type: application/json'
        )
    body = await request.body()
    if len(body) > _MAX_BODY:
        raise _HTTPError(413, f"the body is over {_MAX_BODY} bytes")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _HTTPError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"ids"}:
        raise _HTTPError(400, 'the body must be {"ids": [...]}')
    ids = data["ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise _HTTPError(400, '"ids" must be a non-empty list of non-empty strings')
    return ids


def _handled(
    endpoint: Callable[[Request], Any],
) -> Callable[[Request], Any]:
    """Turns the errors a request can cause into JSON answers; nothing a caller sends is a 500."""

    @functools.wraps(endpoint)
    async def wrapper(request: Request) -> Response:
        try:
            result: Response = await endpoint(request)
        except _HTTPError as exc:
            return _error(exc.status, str(exc))
        except NotFoundError as exc:
            return _error(404, str(exc.args[0]) if exc.args else "not found")
        except StoreConnectionError as exc:
            return _error(503, f"the store cannot be reached: {exc}")
        except StoreError as exc:
            _LOG.exception("store error")
            return _error(500, f"store error: {exc}")
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        return result

    return wrapper


class _TokenCheck(BaseHTTPMiddleware):
    """Lets a request through with the token; without it only reads, and only when allowed."""

    def __init__(self, app: Any, *, token: str, auth: bool) -> None:
        super().__init__(app)
        self.token = token
        self.auth = auth

    def _presented(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            return value.strip()
        return request.cookies.get(COOKIE_NAME)

    def _valid(self, given: str | None) -> bool:
        return given is not None and secrets.compare_digest(given.encode(), self.token.encode())

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path == "/memories" and "token" in request.query_params:
            # The printed URL: the token is in it once; the page keeps it in a cookie the
            # page's scripts cannot read, and the address bar drops it.
            if not self._valid(request.query_params["token"]):
                return _error(401, "wrong token")
            response = RedirectResponse("/memories", status_code=303)
            response.set_cookie(COOKIE_NAME, self.token, httponly=True, samesite="strict", path="/")
            return response
        reading = request.method in ("GET", "HEAD", "OPTIONS")
        if not self._valid(self._presented(request)) and (self.auth or not reading):
            if request.url.path == "/memories":
                return HTMLResponse(_SIGN_IN, status_code=401)
            return _error(
                401,
                "a bearer token is required: Authorization: Bearer <token> (memlane serve prints it)",
            )
        return await call_next(request)


def create_app(manager: MemoryManager, *, token: str | None = None, auth: bool = True) -> Starlette:
    """The API and the page over ``manager``'s store, ready to serve or mount.

    Args:
        manager: Whose store to show; its long-term memory is used when it has one.
        token: The bearer token; a new random one when ``None`` (read it from
            ``app.state.token``).
        auth: ``False`` lets reads through without the token; changes still need it. Only
            for an app bound to loopback (``memlane serve`` enforces that); requests must
            then name a loopback host (``Host: 127.0.0.1``, ``localhost``, ``[::1]``).

    Returns:
        The Starlette application.
    """
    records = Records(manager)
    chosen = token if token is not None else secrets.token_urlsafe(24)
    # One request at a time reaches the store: the sync stores are shared by the thread
    # pool's workers, and an operator's page never needs parallel reads.
    lock = threading.Lock()

    def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with lock:
            return function(*args, **kwargs)

    async def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(call, function, *args, **kwargs)

    def listing(kind: str, extra: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            args = {**_paging(request), **extra(request)}
            return JSONResponse(await run(getattr(records, kind), **args))

        return _handled(endpoint)

    def batch_delete(kind: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            ids = await _ids(request)
            done = await run(records.delete, kind, ids)
            _LOG.info(
                "%s deleted %s %s (not found: %s)",
                request.client.host if request.client else "?",
                kind,
                done["deleted"],
                done["not_found"],
            )
            return JSONResponse(done)

        return _handled(endpoint)

    def fact_filters(request: Request) -> dict[str, Any]:
        scope, scope_id = _str(request, "scope"), _str(request, "scope_id")
        for name in ("session", "user", "agent"):
            given = _str(request, f"{name}_id")
            if given is not None:
                if scope is not None and (scope != name or scope_id not in (None, given)):
                    raise _HTTPError(400, f"{name}_id conflicts with scope={scope!r}")
                scope, scope_id = name, given
        return {"scope": scope, "scope_id": scope_id, "fact_type": _str(request, "type")}

    def episode_filters(request: Request) -> dict[str, Any]:
        return {
            "agent_id": _str(request, "agent_id"),
            "user_id": _str(request, "user_id"),
            "success": _bool(request, "success"),
        }

    @_handled
    async def episode(request: Request) -> Response:
        found = await run(records.episode, request.path_params["id"])
        if found is None:
            raise _HTTPError(404, f"no episode {request.path_params['id']!r}")
        return JSONResponse(found)

    @_handled
    async def conversation(request: Request) -> Response:
        return JSONResponse(await run(records.conversation, request.path_params["id"]))

    @_handled
    async def working_scopes(request: Request) -> Response:
        return JSONResponse({"items": await run(records.working_scopes)})

    @_handled
    async def working(request: Request) -> Response:
        return JSONResponse({"items": await run(records.working, request.path_params["scope"])})

    @_handled
    async def working_delete(request: Request) -> Response:
        scope = request.path_params["scope"]
        ids = await _ids(request)
        done = await run(records.delete_working, scope, ids)
        _LOG.info("deleted working memory %r keys %s", scope, done["deleted"])
        return JSONResponse(done)

    @_handled
    async def search(request: Request) -> Response:
        query = _str(request, "q")
        if query is None:
            raise _HTTPError(400, "q is required: the words to search for")
        hits = await run(
            records.search,
            query,
            memory_type=_str(request, "type") or "all",
            limit=_int(request, "limit", 20, 1, MAX_LIMIT),
            user_id=_str(request, "user_id"),
            agent_id=_str(request, "agent_id"),
            session_id=_str(request, "session_id"),
        )
        return JSONResponse({"items": hits})

    async def schema(request: Request) -> Response:
        return JSONResponse(openapi_schema())

    async def page(request: Request) -> Response:
        html = resources.files("memlane.server").joinpath("memories.html").read_text("utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-store"})

    async def root(request: Request) -> Response:
        return RedirectResponse("/memories", status_code=307)

    api = "/api/v1"
    routes = [
        Route("/", root),
        Route("/memories", page),
        Route(f"{api}/openapi.json", schema),
        Route(f"{api}/facts/", listing("facts", fact_filters)),
        Route(f"{api}/facts/batch-delete/", batch_delete("facts"), methods=["POST"]),
        Route(f"{api}/episodes/", listing("episodes", episode_filters)),
        Route(f"{api}/episodes/batch-delete/", batch_delete("episodes"), methods=["POST"]),
        Route(f"{api}/episodes/{{id}}", episode),
        Route(
            f"{api}/procedures/",
            listing("procedures", lambda r: {"procedure_type": _str(r, "type")}),
        ),
        Route(f"{api}/procedures/batch-delete/", batch_delete("procedures"), methods=["POST"]),
        Route(f"{api}/memory-users/", listing("users", lambda r: {})),
        Route(f"{api}/memory-users/batch-delete/", batch_delete("users"), methods=["POST"]),
        Route(f"{api}/checkpoints/", listing("conversations", lambda r: {})),
        Route(f"{api}/checkpoints/batch-delete/", batch_delete("conversations"), methods=["POST"]),
        Route(f"{api}/conversations/{{id:path}}", conversation),
        Route(f"{api}/working/", working_scopes),
        Route(f"{api}/working/{{scope:path}}/batch-delete/", working_delete, methods=["POST"]),
        Route(f"{api}/working/{{scope:path}}/", working),
        Route(f"{api}/search/", search),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, f"no such resource: {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error(405, f"{request.method} is not allowed on {request.url.path}")

    middleware = [Middleware(_TokenCheck, token=chosen, auth=auth)]
    if not auth:
        # Reads without a token are for this machine only: a page elsewhere that rebinds its
        # own host name to 127.0.0.1 still sends that name, and is refused.
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=_LOOPBACK_NAMES))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={404: not_found, 405: not_allowed},
    )
    app.state.token = chosen
    app.state.records = records
    return app
