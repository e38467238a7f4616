"""The ``memlane`` command (also ``python -m memlane``): inspect and manage any memlane store.

One module per concern: :mod:`~memlane.cli.output` (tables, JSON, progress, errors),
:mod:`~memlane.cli.store` (``--store`` and the ``MEMLANE_*`` variables), and the commands in
:mod:`~memlane.cli.tokens`, :mod:`~memlane.cli.demo`, :mod:`~memlane.cli.conversations`,
:mod:`~memlane.cli.longterm`, :mod:`~memlane.cli.maintenance` and :mod:`~memlane.cli.serve`.

Exit status: 0 on success, 1 on an error the user can fix (one line on standard error, never
a traceback), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from memlane import BACKEND, __version__
from memlane.cli import conversations, demo, longterm, maintenance, reembed, serve, tokens
from memlane.cli.output import CliError, Output
from memlane.cli.store import STORE_HELP
from memlane.errors import MemlaneError

__all__ = ["CliError", "build_parser", "main"]

_DESCRIPTION = """\
Inspect and manage memlane memory: conversations, long-term facts, episodes, procedures,
users and working memory, on any store; serve them as a REST API and a web page.

The store comes from --store or the MEMLANE_* variables (MEMLANE_BACKEND, ...)."""

_EPILOG = """\
examples:
  memlane demo                                   an agent conversation with memory, offline
  memlane conversations --store sqlite:///.memlane/memory.sqlite3
  memlane show CONVERSATION_ID --json
  memlane export CONVERSATION_ID -o snapshot.json
  memlane facts --user u1
  memlane facts set timezone Europe/Lisbon --scope user --user telegram:12345
  memlane search "lisbon weather"                every scope; --user Ada narrows it
  memlane delete facts 'user:u1:timezone' --yes
  memlane forget-user telegram:12345 --dry-run   every record of one person
  memlane serve --port 8765                      REST API and /memories page
  memlane tokens README.md

Read-only commands (stats, conversations, show, export, facts, episodes, procedures,
users, working, search) open the store read-only: they never create, migrate or change it,
and refuse a file that is not a memlane store.

exit status: 0 success, 1 an error you can fix (the message names it), 2 a usage error."""


def _common() -> argparse.ArgumentParser:
    """Options every subcommand accepts after its name (``memlane facts --json``)."""
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's copy must not overwrite the value given before the subcommand.
    common.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help=STORE_HELP)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, for scripts"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="memlane",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"memlane {__version__} (backend: {BACKEND})"
    )
    parser.add_argument("--store", metavar="URL", default=None, help=STORE_HELP)
    parser.add_argument(
        "--json", action="store_true", default=False, help="print JSON, for scripts"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()
    for module in (tokens, demo, conversations, longterm, maintenance, reembed, serve):
        module.register(sub, common)
    return parser


class _AuditLine(logging.Handler):
    """Shows the audit line of a change on standard error, as the command's own remark.

    It looks ``sys.stderr`` up at each line, so it follows whatever standard error is now.
    """

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"memlane: audit: {record.getMessage()}\n")


_AUDIT_LINE = _AuditLine(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memlane`` command (and of ``python -m memlane``).

    Args:
        argv: The arguments; ``None`` reads ``sys.argv``.

    Returns:
        The exit status: 0 success, 1 an error the user can fix, 2 a usage error.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Output(as_json=args.json)
    audit = logging.getLogger("memlane.audit")
    if args.command != "serve" and _AUDIT_LINE not in audit.handlers:
        # Every change a command makes is logged before it is made; the person at the
        # terminal sees that line too (``serve`` logs it with timestamps instead).
        audit.addHandler(_AUDIT_LINE)
    try:
        status: int = args.func(args, out)
    except BrokenPipeError:
        # The reader went away (``memlane facts | head``): not an error, and nothing more to
        # write; stdout is pointed at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except CliError as exc:
        print(f"memlane: error: {exc}", file=sys.stderr)
        return 1
    except (MemlaneError, ConnectionError, OSError, ValueError, TypeError, KeyError) as exc:
        # The store's own errors already name what is wrong; keep them to one line.
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print(
            f"memlane: error: {message.splitlines()[0] if message else type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("memlane: interrupted", file=sys.stderr)
        return 130
    return status
