"""``memlane serve``: the REST API and the ``/memories`` page (extra ``memlane[server]``).

The port is bound before anything is printed, so a port in use is one error line (exit 1)
and never a URL that nothing answers; the bound socket is handed to uvicorn. A generated
token is printed once, on standard error, in the page's URL; when standard error is not a
terminal (a service, a log file) a line says so, since the token lives only there.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import socket
import sys
from urllib.parse import quote

from memlane.cli.output import CliError, Output
from memlane.cli.store import open_manager

__all__ = ["TOKEN_VARIABLE", "is_loopback", "port_number", "register"]

TOKEN_VARIABLE = "MEMLANE_SERVER_TOKEN"  # noqa: S105  # the variable's name, not a token


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_number(text: str) -> int:
    """An ``argparse`` type: a TCP port, 1 to 65535 (``--port 99999`` is a usage error)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {port}")
    return port


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or a one-line error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise CliError(f"cannot listen on {host}:{port}: unknown host ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    # As uvicorn does: a port in TIME_WAIT from a previous run is reusable, one in use is not.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno is not None and exc.errno == getattr(socket, "EADDRINUSE", None):
            reason = "the port is in use (another server is listening there)"
        raise CliError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def _log_to_stderr(name: str, level: str) -> None:
    log = logging.getLogger(name)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(level)


def serve(args: argparse.Namespace, out: Output) -> int:
    """Serves the API and the page until interrupted."""
    try:
        import uvicorn

        from memlane.server import create_app, uvicorn_log_config
    except ImportError as exc:
        raise CliError(
            f"memlane serve needs the server extra: pip install 'memlane[server]' ({exc})"
        ) from None
    if args.no_auth and not is_loopback(args.host):
        raise CliError(f"--no-auth is only allowed on a loopback address, not {args.host}")
    given = args.token or os.environ.get(TOKEN_VARIABLE)
    token = given or secrets.token_urlsafe(24)
    with open_manager(args, create=args.create) as manager:
        app = create_app(manager, token=token, auth=not args.no_auth)
        sock = _bind(args.host, args.port)
        # Changes are logged there; uvicorn configures only its own loggers. The audit trail
        # is kept at WARNING whatever --log-level says, so it survives a quiet server.
        _log_to_stderr("memlane.server", args.log_level.upper())
        _log_to_stderr("memlane.audit", "WARNING")
        shown = f"[{args.host}]" if ":" in args.host else args.host
        url = f"http://{shown}:{args.port}"
        # Quoted: a chosen token may hold "&", "#", "+" or spaces, which the URL would cut.
        out.note(f"memlane serve: {url}/memories?token={quote(token, safe='')}")
        out.note(
            f"  API: {url}/api/v1/ (Authorization: Bearer {token}); schema: {url}/api/v1/openapi.json"
        )
        if given is None and not sys.stderr.isatty():
            out.note(
                "  the token was generated for this run and is printed only here, on "
                f"standard error; pass --token or set ${TOKEN_VARIABLE} to choose it"
            )
        if args.no_auth:
            out.note("  --no-auth: reading needs no token; deleting still does")
        # The server's own redacting filter on every uvicorn handler: no log line, access
        # or error, carries the token.
        config = uvicorn.Config(app, log_level=args.log_level, log_config=uvicorn_log_config())
        server = uvicorn.Server(config)
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
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
            "Serve a REST API under /api/v1/ and a page at /memories to browse, search, edit "
            "and delete memories. Every request needs the bearer token (printed at start, on "
            "standard error) unless --no-auth, which is allowed on loopback only; changes need "
            "it even then. A missing store is refused unless --create."
        ),
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument(
        "--port", type=port_number, default=8765, help="port, 1-65535 (default: %(default)s)"
    )
    parser.add_argument(
        "--create", action="store_true", help="create the store (SQLite file, directory) if missing"
    )
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument(
        "--token", help=f"the bearer token (default: ${TOKEN_VARIABLE}, or a new one)"
    )
    auth.add_argument("--no-auth", action="store_true", help="reads need no token (loopback only)")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.set_defaults(func=serve)
