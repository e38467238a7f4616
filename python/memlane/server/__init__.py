"""``memlane serve``: a REST API under ``/api/v1/`` and a ``/memories`` page (``memlane[server]``).

:func:`create_app` builds the Starlette application over a
:class:`~memlane.MemoryManager`, so a host can mount it in its own ASGI app; the ``memlane
serve`` command runs it with uvicorn (pass ``log_config=uvicorn_log_config()`` when running
it yourself, so no log line carries the token). :mod:`~memlane.server.app` holds the routes,
:mod:`~memlane.server.security` the headers, the token check and the log filter,
:mod:`~memlane.server.inputs` the checks of what a request carries,
:mod:`~memlane.server.openapi` the schema, and ``memories.html``, ``memories*.js`` and
``memories.css`` the page.
"""

from __future__ import annotations

from memlane.server.app import create_app
from memlane.server.security import (
    COOKIE_NAME,
    SECURITY_HEADERS,
    RedactTokenFilter,
    uvicorn_log_config,
)

__all__ = [
    "COOKIE_NAME",
    "SECURITY_HEADERS",
    "RedactTokenFilter",
    "create_app",
    "uvicorn_log_config",
]
