"""``conversations``, ``show``, ``export`` and ``import``: conversations as operators see them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memlane.cli.output import CliError, Output
from memlane.cli.store import open_manager
from memlane.errors import NotFoundError
from memlane.records import Records

__all__ = ["register"]


def _bar(used: float, width: int = 10) -> str:
    filled = min(width, round(width * used))
    return "█" * filled + "░" * (width - filled)


def list_conversations(args: argparse.Namespace, out: Output) -> int:
    """Lists conversations with turns, tokens, budget use and last activity."""
    with open_manager(args) as manager:
        page = Records(manager).conversations(limit=args.limit)
    rows = [
        (
            c["id"],
            c["turns"],
            c["history_tokens"],
            f"{_bar(c['budget_used'])} {c['budget_used']:.0%} of {c['budget']}",
            "yes" if c["has_summary"] else "",
            c["last_activity"],
        )
        for c in page["items"]
    ]
    out.table(
        "conversations",
        ["id", "turns", "history tokens", "budget", "summary", "last activity"],
        rows,
        page["items"],
    )
    return 0


def show(args: argparse.Namespace, out: Output) -> int:
    """Shows a conversation as the model would receive it."""
    with open_manager(args) as manager:
        try:
            data = Records(manager).conversation(args.conversation_id)
        except NotFoundError:
            raise CliError(f"no conversation {args.conversation_id!r}") from None
    if out.as_json:
        out.json(data)
        return 0
    out.text(f"conversation {data['id']}", style="bold")
    out.text(
        f"history {_bar(data['budget_used'], 24)} {data['history_tokens']}/{data['budget']} "
        f"tokens, {data['turns']} turns kept"
    )
    if data["summary"]:
        out.text(f"summary ({data['summary_tokens']} tokens):", style="yellow")
        for line in data["summary"].splitlines():
            out.text(f"  {line}")
    for turn in data["messages"]:
        sent = "" if turn["sent"] else "  (kept, not sent: over the budget until summarised)"
        out.text(
            f"[turn {turn['turn_id']}] {turn['tokens']} tokens  {turn['timestamp']}{sent}",
            style="dim",
        )
        out.text(f"  user:      {turn['user']}", style="cyan")
        out.text(f"  assistant: {turn['assistant']}", style="green")
    return 0


def export(args: argparse.Namespace, out: Output) -> int:
    """Writes a conversation's JSON snapshot to standard output or ``-o FILE``."""
    with open_manager(args) as manager:
        ids = args.conversation_id
        snapshots: list[dict[str, Any]] = []
        with out.progress("exporting", len(ids)) as advance:
            for cid in ids:
                try:
                    snapshots.append(manager.conversation.export_conversation(cid))
                except NotFoundError:
                    raise CliError(f"no conversation {cid!r}") from None
                advance(1)
    data: Any = snapshots[0] if len(snapshots) == 1 else snapshots
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{args.output}: cannot be written ({exc.strerror})") from None
    out.note(f"exported {len(snapshots)} conversation(s) to {args.output}")
    return 0


def _load_snapshots(name: str) -> list[dict[str, Any]]:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{name}: is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{name}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{name}: not JSON ({exc})") from None
    found = data if isinstance(data, list) else [data]
    if not found or not all(isinstance(s, dict) for s in found):
        raise CliError(f"{name}: not a conversation snapshot (memlane export writes them)")
    return found


def import_(args: argparse.Namespace, out: Output) -> int:
    """Loads snapshots written by ``export``, keeping their ids unless ``--as NEW_ID``."""
    snapshots = _load_snapshots(args.file)
    if args.as_id is not None and len(snapshots) != 1:
        raise CliError(f"--as names one conversation, but {args.file} holds {len(snapshots)}")
    imported = []
    with (
        open_manager(args, create=True) as manager,
        out.progress("importing", len(snapshots)) as advance,
    ):
        for snapshot in snapshots:
            try:
                cid = manager.conversation.import_conversation(snapshot, conversation_id=args.as_id)
            except (ValueError, TypeError) as exc:
                raise CliError(f"{args.file}: {str(exc).splitlines()[0]}") from None
            imported.append(cid)
            advance(1)
    if out.as_json:
        out.json({"imported": imported})
    else:
        for cid in imported:
            out.text(f"imported conversation {cid}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds the conversation commands to the command line."""
    listing = sub.add_parser(
        "conversations",
        parents=[common],
        help="list conversations: turns, tokens, budget use, last activity",
        description="List every conversation with its turns, tokens, budget use and last activity.",
    )
    listing.add_argument("--limit", type=int, default=None, help="show at most this many")
    listing.set_defaults(func=list_conversations)

    shown = sub.add_parser(
        "show",
        parents=[common],
        help="a conversation as the model receives it",
        description="A conversation's summary and kept turns, with each turn's tokens and the budget.",
    )
    shown.add_argument("conversation_id", metavar="CONVERSATION_ID")
    shown.set_defaults(func=show)

    exported = sub.add_parser(
        "export",
        parents=[common],
        help="a conversation's JSON snapshot",
        description="Write a conversation's JSON snapshot (several ids: a JSON list of them).",
    )
    exported.add_argument("conversation_id", metavar="CONVERSATION_ID", nargs="+")
    exported.add_argument(
        "-o", "--output", metavar="FILE", help="write here, not to standard output"
    )
    exported.set_defaults(func=export)

    imported = sub.add_parser(
        "import",
        parents=[common],
        help="load a snapshot written by export",
        description=(
            "Load a snapshot written by export (or a list of them). The conversation keeps the "
            "id recorded in the snapshot unless --as gives a new one; an id already held is "
            "never overwritten."
        ),
    )
    imported.add_argument("file", metavar="FILE", help="the snapshot ('-' reads standard input)")
    imported.add_argument("--as", dest="as_id", metavar="NEW_ID", help="import under this id")
    imported.set_defaults(func=import_)
