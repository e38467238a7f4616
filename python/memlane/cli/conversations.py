"""``conversations``, ``show``, ``export`` and ``import``: conversations as operators see them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memlane.cli.output import CliError, Output, add_sorting, positive_int, sorting
from memlane.cli.store import open_manager
from memlane.conversation.snapshot import parse_snapshot
from memlane.errors import NotFoundError
from memlane.records import SORTS, TIMESTAMPS, Records, plural
from memlane.tokens import TokenEstimator

__all__ = ["register"]


def _bar(used: float, width: int = 10) -> str:
    filled = min(width, round(width * used))
    return "█" * filled + "░" * (width - filled)


def _budget(out: Output, used: float, budget: int, width: int = 10) -> str:
    # The bar is drawn on a terminal only: piped lines stay plain text for cut and awk.
    share = f"{used:.0%} of {budget}"
    return f"{_bar(used, width)} {share}" if out.rich else share


def list_conversations(args: argparse.Namespace, out: Output) -> int:
    """Lists conversations with turns, tokens, budget use and last activity."""
    with open_manager(args, read_only=True) as manager:
        page = Records(manager).conversations(limit=args.limit, **sorting(args))
    rows = [
        (
            c["id"],
            c["turns"],
            c["history_tokens"],
            _budget(out, c["budget_used"], c["budget"]),
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
    """Shows a conversation as the model would receive it, and the turns summarised away."""
    with open_manager(args, read_only=True) as manager:
        try:
            data = Records(manager).conversation(args.conversation_id)
        except NotFoundError:
            raise CliError(f"no conversation {args.conversation_id!r}") from None
    if out.as_json:
        out.json(data)
        return 0
    out.text(f"conversation {data['id']}", style="bold")
    shown = _bar(data["budget_used"], 24) + " " if out.rich else ""
    out.text(
        f"history {shown}{data['history_tokens']}/{data['budget']} tokens, "
        f"{plural(data['turns'], 'turn')} kept"
    )
    if data["summary"]:
        out.text(f"summary ({data['summary_tokens']} tokens):", style="yellow")
        for line in data["summary"].splitlines():
            out.text(f"  {line}")
    for turn in data["transcript"]:
        if turn["summarised"]:
            sent = "  (summarised: in the summary, not sent)"
        elif turn["sent"]:
            sent = ""
        else:
            sent = "  (kept, not sent: over the budget until summarised)"
        out.text(
            f"[turn {turn['turn_id']}] {turn['tokens']} tokens  {turn['timestamp']}{sent}",
            style="dim",
        )
        faded = turn["summarised"]
        out.text(f"  user:      {turn['user']}", style="dim" if faded else "cyan")
        out.text(f"  assistant: {turn['assistant']}", style="dim" if faded else "green")
    return 0


def export(args: argparse.Namespace, out: Output) -> int:
    """Writes a conversation's JSON snapshot to standard output or ``-o FILE``."""
    with open_manager(args, read_only=True) as manager:
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
    out.note(f"exported {plural(len(snapshots), 'conversation')} to {args.output}")
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
    if not found:
        raise CliError(f"{name}: an empty list, not a conversation snapshot")
    estimator = TokenEstimator(mode="heuristic")  # checks the shape; counts are redone on import
    for n, snapshot in enumerate(found):
        where = name if len(found) == 1 else f"{name}: item {n}"
        _check_snapshot(where, snapshot, estimator)
    return found


def _check_snapshot(where: str, snapshot: object, estimator: TokenEstimator) -> None:
    """Refuses what ``memlane export`` never writes, before the store is opened or created."""
    hint = "memlane export writes them"
    if not isinstance(snapshot, dict):
        raise CliError(
            f"{where}: not a conversation snapshot (a JSON {type(snapshot).__name__}; {hint})"
        )
    if not isinstance(snapshot.get("turns"), list):
        keys = ", ".join(repr(k) for k in list(snapshot)[:5]) or "none"
        raise CliError(
            f"{where}: not a conversation snapshot: no 'turns' list (keys found: {keys}; {hint})"
        )
    cid = snapshot.get("conversation_id")
    if cid is not None and (not isinstance(cid, str) or not cid):
        raise CliError(f"{where}: 'conversation_id' must be a non-empty string, got {cid!r}")
    if not snapshot["turns"] and snapshot.get("summary") is None:
        raise CliError(f"{where}: the snapshot holds no turns and no summary: nothing to import")
    try:
        parse_snapshot(snapshot, estimator)
    except (TypeError, ValueError) as exc:
        raise CliError(f"{where}: {str(exc).splitlines()[0]}") from None


def _new_id(text: str) -> str:
    """An ``argparse`` type: the id ``import --as`` gives, never empty (an empty one would
    be dropped and the snapshot's own id used)."""
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"must be a non-empty id without NUL, got {text!r}")
    return text


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
                message = str(exc).splitlines()[0]
                # The library's advice names its own argument; here it is --as.
                message = message.replace("pass conversation_id=", "pass --as NEW_ID")
                raise CliError(f"{args.file}: {message}") from None
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
    listing.add_argument("--limit", type=positive_int, default=None, help="show at most this many")
    add_sorting(
        listing,
        SORTS["conversations"],
        f"only conversations whose {TIMESTAMPS['conversations']} is",
    )
    listing.set_defaults(func=list_conversations)

    shown = sub.add_parser(
        "show",
        parents=[common],
        help="a conversation as the model receives it",
        description=(
            "A conversation's summary and every turn (those summarised away dimmed), with each "
            "turn's tokens, which turns are sent now, and the conversation's own budget."
        ),
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
    imported.add_argument(
        "--as", dest="as_id", type=_new_id, metavar="NEW_ID", help="import under this id"
    )
    imported.set_defaults(func=import_)
