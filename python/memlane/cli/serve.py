"""``memlane serve``: the REST API and the ``/memories`` page (extra ``memlane[server]``)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets

from memlane.cli.output import CliError, Output
from memlane.cli.store import open_manager

__all__ = ["TOKEN_VARIABLE", "is_loopback", "register"]

TOKEN_VARIABLE = "MEMLANE_SERVER_TOKEN"  # noqa: S105  # the variable's name, not a token


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(args: argparse.Namespace, out: Output) -> int:
    """Serves the API and the page until interrupted."""
    try:
        import uvicorn

        from memlane.server import create_app
    except ImportError as exc:
        raise CliError(
            f"memlane serve needs the server extra: pip install 'memlane[server]' ({exc})"
        ) from None
    if args.no_auth and not is_loopback(args.host):
        raise CliError(f"--no-auth is only allowed on a loopback address, not {args.host}")
    token = args.token or os.environ.get(TOKEN_VARIABLE) or secrets.token_urlsafe(24)
    # Every change the API makes is logged there; uvicorn configures only its own loggers.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    server_log = logging.getLogger("memlane.server")
    server_log.addHandler(handler)
    server_log.setLevel(args.log_level.upper())
    with open_manager(args, create=True) as manager:
        app = create_app(manager, token=token, auth=not args.no_auth)
        shown = f"[{args.host}]" if ":" in args.host else args.host
        url = f"http://{shown}:{args.port}"
        out.note(f"memlane serve: {url}/memories?token={token}")
        out.note(
            f"  API: {url}/api/v1/ (Authorization: Bearer {token}); schema: {url}/api/v1/openapi.json"
        )
        if args.no_auth:
            out.note("  --no-auth: reading needs no token; deleting still does")
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds ``serve`` to the command line."""
    parser = sub.add_parser(
        "serve",
        parents=[common],
        help="REST API and /memories web page (needs memlane[server])",
        description=(
            "Serve a REST API under /api/v1/ and a page at /memories to browse, search and "
            "delete memories. Every request needs the bearer token (printed at start) unless "
            "--no-auth, which is allowed on loopback only; deletes need it even then."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=8765, help="port (default: %(default)s)")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument(
        "--token", help=f"the bearer token (default: ${TOKEN_VARIABLE}, or a new one)"
    )
    auth.add_argument("--no-auth", action="store_true", help="reads need no token (loopback only)")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(func=serve)
