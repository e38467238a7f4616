"""What protects every response: security headers, the token check, a token-free access log.

Both middlewares are plain ASGI, so they see every response the application sends — a route's,
a 404, a redirect, the token check's own 401, the trusted-host check's 400 — and no route can
forget a header. :class:`SecurityHeaders` is the outermost layer: it also turns an exception
nothing else handled into a JSON 500 that carries the headers and no traceback.
"""

from __future__ import annotations

import copy
import logging
import re
import secrets
from typing import Any

from starlette.datastructures import MutableHeaders, QueryParams
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "COOKIE_NAME",
    "CSP",
    "LOOPBACK_HOSTS",
    "SECURITY_HEADERS",
    "LoopbackHosts",
    "RedactTokenFilter",
    "SecurityHeaders",
    "TokenCheck",
    "redact_access_log",
    "uvicorn_log_config",
]

COOKIE_NAME = "memlane_token"
"""The HTTP-only cookie that carries the token for the page."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
"""The page's Content-Security-Policy: its own script and style files only, no framing."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""Sent on every response of the application; memories are never kept in a browser's cache."""

PUBLIC_PATHS = frozenset(
    {"/memories-base.js", "/memories-views.js", "/memories.js", "/memories.css"}
)
"""Served without the token: the page's own code, which holds no data."""

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
"""The host names a request may give when reads need no token (``Host``, port aside)."""

_SIGN_IN = (
    "<!doctype html><title>memlane · sign in</title><p>{reason} Open the address "
    "<code>memlane serve</code> printed, <code>/memories?token=…</code>; the token is then kept "
    "in a cookie.</p>"
)
_LOG = logging.getLogger("memlane.server")


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response; an unhandled error becomes a JSON 500.

    Args:
        app: The application to wrap.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Runs the wrapped application, adding the headers to its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            # Every error a caller can cause is answered by the routes; this is a bug, logged
            # in full here, while the caller sees one line and no traceback.
            _LOG.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            response = JSONResponse(
                {"error": "internal error; the server's log has the details"}, status_code=500
            )
            await response(scope, receive, send_with_headers)


def _host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port or an IPv6 address's brackets."""
    if header.startswith("["):
        return header[1:].partition("]")[0].lower()
    return header.rpartition(":")[0].lower() if header.count(":") == 1 else header.lower()


class LoopbackHosts:
    """Answers 400 (JSON, like every refusal) to a request whose ``Host`` is not loopback.

    For an app whose reads need no token: a page elsewhere that rebinds its own host name
    to 127.0.0.1 still sends that name, and is refused before it can read anything.

    Args:
        app: The application to guard.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Runs the application for a loopback ``Host``, else answers 400."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = HTTPConnection(scope).headers.get("host", "")
        if _host_name(header) in LOOPBACK_HOSTS:
            await self.app(scope, receive, send)
            return
        response = JSONResponse(
            {
                "error": f"the Host header must name this machine (127.0.0.1, localhost or "
                f"[::1]) when reads need no token, got {header[:80]!r}"
            },
            status_code=400,
        )
        await response(scope, receive, send)


class TokenCheck:
    """Lets a request through with the token; without it only reads, and only when allowed.

    A missing token and a wrong one are told apart, both with ``WWW-Authenticate: Bearer``
    (RFC 6750), the wrong one with ``error="invalid_token"``.

    Args:
        app: The application to guard.
        token: The bearer token.
        auth: ``False`` lets reads through without the token.
    """

    def __init__(self, app: ASGIApp, *, token: str, auth: bool) -> None:
        self.app = app
        self._token = token.encode()
        self.auth = auth

    def _valid(self, given: str) -> bool:
        try:
            return secrets.compare_digest(given.encode(), self._token)
        except UnicodeEncodeError:  # a lone surrogate from a cookie: not the token
            return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answers 401 for a request without the right token, else runs the application."""
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        response = self._refusal(connection)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def _refusal(self, connection: HTTPConnection) -> Response | None:
        path = connection.url.path
        query = QueryParams(connection.scope.get("query_string", b""))
        if path == "/memories" and "token" in query:
            # The printed URL: the token is in it once; the page keeps it in a cookie the
            # page's scripts cannot read, and the address bar drops it.
            if not self._valid(query["token"]):
                return HTMLResponse(_SIGN_IN.format(reason="That token is wrong."), status_code=401)
            response = RedirectResponse("/memories", status_code=303)
            response.set_cookie(
                COOKIE_NAME, self._token.decode(), httponly=True, samesite="strict", path="/"
            )
            return response
        header = connection.headers.get("authorization")
        if header is not None:
            scheme, _, value = header.partition(" ")
            presented: str | None = value.strip() if scheme.lower() == "bearer" else None
            if presented is None or not presented:
                return _unauthorized(
                    path, "the Authorization header must be 'Bearer <token>'", wrong=False
                )
        else:
            presented = connection.cookies.get(COOKIE_NAME)
        if presented is not None and self._valid(presented):
            return None
        if presented is not None:
            return _unauthorized(path, "the bearer token is wrong", wrong=True)
        if not self.auth and connection.scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return None
        return _unauthorized(
            path,
            "a bearer token is required: Authorization: Bearer <token> (memlane serve prints it)",
            wrong=False,
        )


def _unauthorized(path: str, message: str, *, wrong: bool) -> Response:
    challenge = 'Bearer realm="memlane"' + (', error="invalid_token"' if wrong else "")
    headers = {"WWW-Authenticate": challenge}
    if path == "/memories":
        reason = "The token in your cookie is wrong." if wrong else "You are not signed in."
        return HTMLResponse(_SIGN_IN.format(reason=reason), status_code=401, headers=headers)
    return JSONResponse({"error": message}, status_code=401, headers=headers)


_TOKEN_IN_URL = re.compile(r"(?i)([?&;]token=)[^&;\s\"]*")


def _redact(value: object) -> object:
    return _TOKEN_IN_URL.sub(r"\1[redacted]", value) if isinstance(value, str) else value


class RedactTokenFilter(logging.Filter):
    """Replaces ``token=…`` in a logged URL with ``token=[redacted]``.

    uvicorn's access log writes each request's path with its query, and the page's sign-in
    URL carries the token there; with this filter on the ``uvicorn.access`` logger (or its
    handler) the token never reaches a log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redacts the record's message and arguments; never drops the record."""
        record.msg = _redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _redact(arg) for key, arg in record.args.items()}
        return True


def redact_access_log() -> None:
    """Puts a :class:`RedactTokenFilter` on the ``uvicorn.access`` logger, once."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokenFilter) for f in access.filters):
        access.addFilter(RedactTokenFilter())


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's default logging configuration with the token redacted from every line.

    Pass it as ``uvicorn.run(app, log_config=uvicorn_log_config())``.

    Returns:
        A :func:`logging.config.dictConfig` dictionary.
    """
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_token"] = {"()": RedactTokenFilter}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("redact_token")
    return config
