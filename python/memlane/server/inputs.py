"""What a request may carry, checked once: query parameters, path parameters, JSON bodies.

Every check raises :class:`HTTPError` with the status and a message naming the value, so a
route never sees text it cannot store (a lone surrogate), a body past the size limit, or JSON
nested deeper than a record can be.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, time
from typing import Any
from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = [
    "MAX_BODY",
    "MAX_DEPTH",
    "HTTPError",
    "error",
    "json_body",
    "path_param",
    "path_tail",
    "query_bool",
    "query_datetime",
    "query_int",
    "query_str",
]

MAX_BODY = 1 << 20
"""The largest request body, in bytes; a larger one is refused while it is read (413)."""
MAX_DEPTH = 64
"""How deeply a JSON body may nest; far more than any record needs."""


class HTTPError(Exception):
    """An answer to a bad request: its status and a message for the caller.

    Args:
        status: The HTTP status (4xx).
        message: What was wrong, naming the value.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    """The JSON error answer ``{"error": message}``."""
    return JSONResponse({"error": message}, status_code=status)


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def checked_text(value: str, name: str) -> str:
    """``value`` if it is text a store can hold (no lone surrogate, no NUL).

    Raises:
        HTTPError: 400, naming the parameter.
    """
    if "\x00" in value or _has_surrogate(value):
        raise HTTPError(400, f"{name} holds a NUL or a lone surrogate: {value!r}")
    return value


def query_str(request: Request, name: str) -> str | None:
    """The query parameter ``name``; ``None`` when absent or empty."""
    value = request.query_params.get(name)
    return checked_text(value, name) if value else None


def path_param(request: Request, name: str) -> str:
    """The path parameter ``name``, checked like a query parameter."""
    value: str = request.path_params[name]
    if not value:
        raise HTTPError(400, f"{name} must not be empty")
    return checked_text(value, name)


def path_tail(request: Request, prefix: str, head: str, tail: str) -> tuple[str, str]:
    """The path after ``prefix``, split at its last ``/``: two parts, each percent-decoded
    once from the path as sent (``head`` and ``tail`` name them in errors).

    A server decodes a path before routing, so a ``/`` sent as ``%2F`` would move the split;
    read from the raw path, the last segment may hold any character (``/``, ``%``, ``?``,
    ``#``, spaces, any script) as long as it is percent-encoded, and the part before it may
    hold a ``/`` sent plain or encoded.

    Raises:
        HTTPError: 400 for an empty part, a part that is not percent-encoded UTF-8, or text a
            store cannot hold.
    """
    raw = request.scope.get("raw_path")
    sent = raw.decode("latin-1") if isinstance(raw, bytes) else ""
    start = sent.find(prefix)
    if start < 0:  # a server that keeps no raw path: the decoded one, split at its last "/"
        sent = quote(request.url.path, safe="/")
        start = sent.find(prefix)
    first, _, last = sent[start + len(prefix) :].rpartition("/")
    parts = []
    for name, text in ((tail, last), (head, first)):
        try:
            value = unquote(text, errors="strict")
        except UnicodeDecodeError:
            raise HTTPError(400, f"{name} is not percent-encoded UTF-8: {text[:80]!r}") from None
        if not value:
            raise HTTPError(400, f"{name} must not be empty")
        parts.append(checked_text(value, name))
    return parts[1], parts[0]


def query_int(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
    """An integer query parameter within ``[low, high]``."""
    raw = query_str(request, name)
    if raw is None:
        return default
    # ASCII digits only: str.isdigit() also takes "²" and "٣", which int() refuses or reads.
    if len(raw) > 20 or not raw.removeprefix("-").isascii() or not raw.removeprefix("-").isdigit():
        raise HTTPError(400, f"{name} must be an integer, got {raw[:40]!r}")
    value = int(raw)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise HTTPError(400, f"{name} must be {bound}, got {value}")
    return value


def query_bool(request: Request, name: str) -> bool | None:
    """``true``/``false`` (or ``1``/``0``, ``yes``/``no``); ``None`` when absent."""
    raw = query_str(request, name)
    if raw is None:
        return None
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise HTTPError(400, f"{name} must be true or false, got {raw!r}")


def query_datetime(request: Request, name: str, *, end_of_day: bool = False) -> datetime | None:
    """An ISO 8601 date or time; a time without a zone is taken as UTC.

    A bare date means the start of that day, or its end with ``end_of_day`` (so
    ``until=2026-05-01`` includes the whole of May 1st).
    """
    raw = query_str(request, name)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise HTTPError(400, f"{name} must be an ISO 8601 date or time, got {raw!r}") from None
    if end_of_day and len(raw) == len("2026-05-01"):
        value = datetime.combine(value.date(), time.max)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def _read(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPError(400, f"Content-Length must be a number of bytes, got {declared!r}")
        if int(declared) > limit:
            raise HTTPError(413, f"the body is over {limit} bytes ({declared} declared)")
    chunks: list[bytes] = []
    size = 0
    # Counted as it arrives: a client that lies about its length, or sends none, is stopped
    # at the limit instead of being buffered whole.
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPError(413, f"the body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_tree(data: Any) -> None:
    # Iterative, so a deep body cannot exhaust the stack here either.
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels")
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(value, str):
            checked_text(value, "a string in the body")
        elif isinstance(value, float) and not math.isfinite(value):
            raise HTTPError(400, "a number in the body is too large")


async def json_body(request: Request, limit: int = MAX_BODY) -> Any:
    """The request's JSON body, read up to ``limit`` bytes.

    Raises:
        HTTPError: 415 when not sent as ``application/json`` (any case, any parameters);
            413 past the limit; 400 for invalid UTF-8 or JSON, NaN or infinite numbers,
            integers of more than 4300 digits, a lone surrogate or NUL in a string, or
            nesting deeper than :data:`MAX_DEPTH`.
    """
    if _media_type(request) != "application/json":
        raise HTTPError(415, "send the body as JSON, with Content-Type: application/json")
    body = await _read(request, limit)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPError(400, f"the body is not JSON: it is not UTF-8 ({exc.reason})") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise HTTPError(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise HTTPError(400, f"the body is not JSON: {exc}") from None
    _check_tree(data)
    return data
