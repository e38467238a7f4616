"""``memlane serve``: a REST API under ``/api/v1/`` and a ``/memories`` page (``memlane[server]``).

:func:`create_app` builds the Starlette application over a
:class:`~memlane.MemoryManager`, so a host can mount it in its own ASGI app; the ``memlane
serve`` command runs it with uvicorn. :mod:`~memlane.server.app` holds the routes and the
token check, :mod:`~memlane.server.openapi` the schema, ``memories.html`` the page.
"""

from __future__ import annotations

from memlane.server.app import COOKIE_NAME, create_app

__all__ = ["COOKIE_NAME", "create_app"]
