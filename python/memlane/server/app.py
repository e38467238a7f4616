"""The REST API and the page, as one Starlette application.

Safety: every request needs the bearer token (``Authorization: Bearer …``, or the HTTP-only
same-site cookie the page gets from the URL ``memlane serve`` prints) unless ``auth=False``,
and even then a request that changes data needs it. A change must be sent as JSON (or be a
``DELETE``), which a cross-site form cannot do without a preflight the app never grants.
Every change is logged at warning on the ``memlane.audit`` logger before it happens, naming
the client, and its result on ``memlane.server``. Every response carries the security
headers of :mod:`memlane.server.security`.

Errors are JSON ``{"error": "..."}``: 400 for a bad parameter, id or body, 401 without the
token (or with a wrong one), 404 for an unknown record, 409 for a change on a read-only
store, 413 for a body over 1 MiB, 415 for a body that is not JSON, 503 when the store cannot
be reached.

Reads run concurrently in worker threads (every store is safe to share between threads),
a few at a time (see ``read_threads``); changes run one at a time, so a batch never
interleaves with another.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from memlane import errors
from memlane.manager import MemoryManager
from memlane.records import AmbiguousUserError, Records
from memlane.server.inputs import (
    HTTPError,
    error,
    json_body,
    path_param,
    path_tail,
    query_bool,
    query_datetime,
    query_int,
    query_str,
)
from memlane.server.openapi import openapi_schema
from memlane.server.security import (
    COOKIE_NAME,
    LoopbackHosts,
    SecurityHeaders,
    TokenCheck,
    redact_access_log,
)
from memlane.stores._network import NetworkStore

__all__ = ["COOKIE_NAME", "DEFAULT_LIMIT", "MAX_LIMIT", "NETWORK_READ_THREADS", "create_app"]

DEFAULT_LIMIT = 50
"""Records per page unless ``limit`` says otherwise."""
MAX_LIMIT = 500
"""The most records one page may hold."""
NETWORK_READ_THREADS = 8
"""Reads at once on a database server's store: they wait on the network, not the GIL."""

_STATIC = {
    "memories.html": "text/html; charset=utf-8",
    "memories-base.js": "text/javascript; charset=utf-8",
    "memories-views.js": "text/javascript; charset=utf-8",
    "memories.js": "text/javascript; charset=utf-8",
    "memories.css": "text/css; charset=utf-8",
}
_LOG = logging.getLogger("memlane.server")

Endpoint = Callable[[Request], Awaitable[Response]]


def _handled(endpoint: Endpoint) -> Endpoint:
    """Turns the errors a request can cause into JSON answers; nothing a caller sends is a 500."""

    @functools.wraps(endpoint)
    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HTTPError as exc:
            return error(exc.status, str(exc))
        except errors.NotFoundError as exc:
            return error(404, str(exc.args[0]) if exc.args else "not found")
        except errors.StoreConnectionError as exc:
            return error(503, f"the store cannot be reached: {exc}")
        except errors.ReadOnlyStoreError as exc:
            return error(409, str(exc))
        except errors.StoreError as exc:
            _LOG.exception("store error")
            return error(500, f"store error: {exc}")
        except AmbiguousUserError as exc:
            return JSONResponse({"error": str(exc), "candidates": exc.candidates}, status_code=400)
        except (ValueError, TypeError, RecursionError) as exc:
            return error(400, str(exc) or type(exc).__name__)

    return wrapper


def _listing_args(request: Request) -> dict[str, Any]:
    return {
        "q": query_str(request, "q"),
        "offset": query_int(request, "offset", 0, 0),
        "limit": query_int(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
        "sort": query_str(request, "sort"),
        "descending": bool(query_bool(request, "descending")),
        "since": query_datetime(request, "since"),
        "until": query_datetime(request, "until", end_of_day=True),
    }


def _fact_filters(request: Request) -> dict[str, Any]:
    scope, scope_id = query_str(request, "scope"), query_str(request, "scope_id")
    user_id = None
    for name in ("session", "user", "agent"):
        given = query_str(request, f"{name}_id")
        if given is not None:
            if scope is not None and (scope != name or scope_id not in (None, given)):
                raise HTTPError(400, f"{name}_id conflicts with scope={scope!r}")
            scope, scope_id = name, given
            if name == "user":
                # Any name of the user (resolved where reads run): scope and id come from it.
                scope, scope_id, user_id = None, None, given
    return {
        "scope": scope,
        "scope_id": scope_id,
        "user_id": user_id,
        "fact_type": query_str(request, "type"),
    }


def _episode_filters(request: Request) -> dict[str, Any]:
    return {
        "agent_id": query_str(request, "agent_id"),
        "user_id": query_str(request, "user_id"),
        "success": query_bool(request, "success"),
    }


async def _ids(request: Request) -> list[str]:
    data = await json_body(request)
    if not isinstance(data, dict) or set(data) != {"ids"}:
        raise HTTPError(400, 'the body must be {"ids": [...]}')
    ids = data["ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise HTTPError(400, '"ids" must be a non-empty list of non-empty strings')
    return ids


async def _fields(request: Request, allowed: set[str], required: set[str]) -> dict[str, Any]:
    data = await json_body(request)
    if not isinstance(data, dict):
        raise HTTPError(400, f"the body must be a JSON object with {', '.join(sorted(allowed))}")
    unknown = set(data) - allowed
    if unknown:
        raise HTTPError(
            400, f"unknown fields {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    missing = required - set(data)
    if missing or not data:
        raise HTTPError(400, f"the body must give {' or '.join(sorted(required or allowed))}")
    return data


def _actor(request: Request) -> str:
    return f"api client {request.client.host}" if request.client else "api client"


def _asset(name: str) -> str:
    return resources.files("memlane.server").joinpath(name).read_text("utf-8")


def create_app(
    manager: MemoryManager,
    *,
    token: str | None = None,
    auth: bool = True,
    read_threads: int | None = None,
) -> Starlette:
    """The API and the page over ``manager``'s store, ready to serve or mount.

    Also puts a filter on the ``uvicorn.access`` logger that redacts ``token=…`` from logged
    URLs (:class:`~memlane.server.security.RedactTokenFilter`).

    Args:
        manager: Whose store to show; its long-term memory is used when it has one.
        token: The bearer token; a new random one when ``None`` (read it from
            ``app.state.token``).
        auth: ``False`` lets reads through without the token; changes still need it. Only
            for an app bound to loopback (``memlane serve`` enforces that); requests must
            then name a loopback host (``Host: 127.0.0.1``, ``localhost``, ``[::1]``).
        read_threads: How many reads may run at once; ``None``: 2 on a store in this
            process (SQLite, files, memory), whose reads hold the GIL, so more threads only
            take turns with the event loop (benches/bench_server.py measured 20 against 2:
            p99 3x worse); :data:`NETWORK_READ_THREADS` on PostgreSQL and MongoDB, whose
            reads mostly wait on the network. Changes always run one at a time.

    Returns:
        The Starlette application.

    Raises:
        ValueError: ``read_threads`` is not an integer >= 1.
    """
    records = Records(manager)
    chosen = token if token is not None else secrets.token_urlsafe(24)
    writing = threading.Lock()
    redact_access_log()

    if read_threads is None:
        read_threads = NETWORK_READ_THREADS if isinstance(manager.store, NetworkStore) else 2
    if isinstance(read_threads, bool) or not isinstance(read_threads, int) or read_threads < 1:
        raise ValueError(f"read_threads must be an integer >= 1, got {read_threads!r}")
    readers = anyio.CapacityLimiter(read_threads)

    async def read(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(function, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=readers)

    def locked(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with writing:
            return function(*args, **kwargs)

    async def write(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(locked, function, *args, **kwargs)

    def listing(kind: str, extra: Callable[[Request], dict[str, Any]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            args = {**_listing_args(request), **extra(request)}
            return JSONResponse(await read(getattr(records, kind), **args))

        return _handled(endpoint)

    def batch_delete(kind: str) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            ids = await _ids(request)
            done = await write(records.delete, kind, ids, actor=_actor(request))
            _LOG.warning(
                "%s deleted %s %s (not found: %s)",
                _actor(request),
                kind,
                done["deleted"],
                done["not_found"],
            )
            return JSONResponse(done)

        return _handled(endpoint)

    @_handled
    async def episode(request: Request) -> Response:
        episode_id = path_param(request, "id")
        found = await read(records.episode, episode_id)
        if found is None:
            raise HTTPError(404, f"no episode {episode_id!r}")
        return JSONResponse(found)

    @_handled
    async def conversation(request: Request) -> Response:
        return JSONResponse(await read(records.conversation, path_param(request, "id")))

    @_handled
    async def edit_fact(request: Request) -> Response:
        fact = path_param(request, "id")
        data = await _fields(request, {"value", "confidence"}, set())
        row = await write(records.update_fact, fact, **data, actor=_actor(request))
        _LOG.warning("%s edited fact %r: %s", _actor(request), fact, sorted(data))
        return JSONResponse(row)

    @_handled
    async def working_scopes(request: Request) -> Response:
        return JSONResponse({"items": await read(records.working_scopes)})

    @_handled
    async def working(request: Request) -> Response:
        return JSONResponse({"items": await read(records.working, path_param(request, "scope"))})

    @_handled
    async def edit_working(request: Request) -> Response:
        scope, key = path_tail(request, f"{api}/working/", "scope", "key")
        data = await _fields(request, {"value", "importance"}, {"value"})
        row = await write(records.update_working, scope, key, **data, actor=_actor(request))
        _LOG.warning("%s edited working memory %r key %r", _actor(request), scope, key)
        return JSONResponse(row)

    @_handled
    async def working_delete(request: Request) -> Response:
        scope = path_param(request, "scope")
        ids = await _ids(request)
        done = await write(records.delete_working, scope, ids, actor=_actor(request))
        _LOG.warning(
            "%s deleted working memory %r keys %s", _actor(request), scope, done["deleted"]
        )
        return JSONResponse(done)

    @_handled
    async def user(request: Request) -> Response:
        user_id = path_param(request, "id")
        if request.method == "PATCH":
            data = await _fields(request, {"display_name"}, {"display_name"})
            name = data["display_name"]
            if name is not None and not isinstance(name, str):
                raise HTTPError(400, f"display_name must be a string or null, got {name!r}")
            row = await write(
                records.update_user, user_id, display_name=name, actor=_actor(request)
            )
            _LOG.warning("%s renamed user %r", _actor(request), user_id)
            return JSONResponse(row)
        dry_run = bool(query_bool(request, "dry_run"))
        if not (query_bool(request, "cascade") or dry_run):
            done = await write(records.delete, "users", [user_id], actor=_actor(request))
            if not done["deleted"]:
                raise HTTPError(404, f"no user {user_id!r}")
            _LOG.warning("%s deleted user %r", _actor(request), user_id)
            return JSONResponse(done)
        report = await write(records.forget_user, user_id, dry_run=dry_run, actor=_actor(request))
        if not dry_run:
            _LOG.warning("%s forgot user %r: %s", _actor(request), user_id, report["user_ids"])
        return JSONResponse(report)

    @_handled
    async def search(request: Request) -> Response:
        query = query_str(request, "q")
        if query is None:
            raise HTTPError(400, "q is required: the words to search for")
        hits = await read(
            records.search,
            query,
            memory_type=query_str(request, "type") or "all",
            limit=query_int(request, "limit", 20, 1, MAX_LIMIT),
            user_id=query_str(request, "user_id"),
            agent_id=query_str(request, "agent_id"),
            session_id=query_str(request, "session_id"),
        )
        return JSONResponse({"items": hits})

    @_handled
    async def totals(request: Request) -> Response:
        return JSONResponse(await read(records.totals))

    async def schema(request: Request) -> Response:
        return JSONResponse(openapi_schema())

    def asset(name: str) -> Endpoint:
        text = _asset(name)  # read once: the files ship with the package

        async def endpoint(request: Request) -> Response:
            return Response(text, media_type=_STATIC[name])

        return endpoint

    async def root(request: Request) -> Response:
        return RedirectResponse("/memories", status_code=307)

    api = "/api/v1"
    conversations = listing("conversations", lambda r: {})
    routes = [
        Route("/", root),
        Route("/memories", asset("memories.html")),
        *(Route(f"/{name}", asset(name)) for name in _STATIC if name != "memories.html"),
        Route(f"{api}/openapi.json", schema),
        Route(f"{api}/totals/", totals),
        Route(f"{api}/facts/", listing("facts", _fact_filters)),
        Route(f"{api}/facts/batch-delete/", batch_delete("facts"), methods=["POST"]),
        Route(f"{api}/facts/{{id:path}}", edit_fact, methods=["PATCH"]),
        Route(f"{api}/episodes/", listing("episodes", _episode_filters)),
        Route(f"{api}/episodes/batch-delete/", batch_delete("episodes"), methods=["POST"]),
        Route(f"{api}/episodes/{{id}}", episode),
        Route(
            f"{api}/procedures/",
            listing("procedures", lambda r: {"procedure_type": query_str(r, "type")}),
        ),
        Route(f"{api}/procedures/batch-delete/", batch_delete("procedures"), methods=["POST"]),
        Route(f"{api}/memory-users/", listing("users", lambda r: {})),
        Route(f"{api}/memory-users/batch-delete/", batch_delete("users"), methods=["POST"]),
        Route(f"{api}/memory-users/{{id}}", user, methods=["PATCH", "DELETE"]),
        Route(f"{api}/checkpoints/", conversations),
        Route(f"{api}/checkpoints/batch-delete/", batch_delete("conversations"), methods=["POST"]),
        Route(f"{api}/conversations/", conversations),
        Route(
            f"{api}/conversations/batch-delete/", batch_delete("conversations"), methods=["POST"]
        ),
        Route(f"{api}/conversations/{{id:path}}", conversation),
        Route(f"{api}/working/", working_scopes),
        Route(f"{api}/working/{{scope:path}}/batch-delete/", working_delete, methods=["POST"]),
        Route(f"{api}/working/{{scope:path}}/", working),
        # Scope and key are read from the raw path (path_tail): the key may hold "%2F".
        Route(f"{api}/working/{{scope:path}}/{{key:path}}", edit_working, methods=["PATCH"]),
        Route(f"{api}/search/", search),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no such resource: {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error(405, f"{request.method} is not allowed on {request.url.path}")

    middleware = [
        Middleware(SecurityHeaders),
        Middleware(TokenCheck, token=chosen, auth=auth),
    ]
    if not auth:
        # Reads without a token are for this machine only: a page elsewhere that rebinds its
        # own host name to 127.0.0.1 still sends that name, and is refused.
        middleware.insert(1, Middleware(LoopbackHosts))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={404: not_found, 405: not_allowed},
    )
    app.state.token = chosen
    app.state.records = records
    return app
