"""``stats``, ``purge-expired`` and ``delete``: keeping a store tidy."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memlane.cli.output import CliError, Output
from memlane.cli.store import open_manager
from memlane.records import KINDS, Records

__all__ = ["register"]


def stats(args: argparse.Namespace, out: Output) -> int:
    """Counts and sizes per namespace."""
    with open_manager(args) as manager:
        rows = Records(manager).stats()
    total = {
        "namespaces": len(rows),
        "entries": sum(r["entries"] for r in rows),
        "bytes": sum(r["bytes"] for r in rows),
    }
    if out.as_json:
        out.json({"namespaces": rows, "total": total})
        return 0
    out.table(
        "namespaces",
        ["namespace", "entries", "bytes", "with ttl"],
        [(r["namespace"], r["entries"], r["bytes"], r["with_ttl"]) for r in rows],
        rows,
    )
    out.note(
        f"total: {total['entries']} entries, {total['bytes']} bytes in {total['namespaces']} namespaces"
    )
    return 0


def purge_expired(args: argparse.Namespace, out: Output) -> int:
    """Removes every expired entry."""
    with open_manager(args) as manager, out.progress("purging expired entries", None):
        removed = manager.store.cleanup_expired()
    if out.as_json:
        out.json({"removed": removed})
    else:
        out.text(f"removed {removed} expired entries")
    return 0


def _matching_ids(records: Records, args: argparse.Namespace) -> list[str]:
    kind = args.kind
    page: dict[str, Any]
    if kind == "facts":
        scope, scope_id = args.scope, None
        for name in ("user", "agent"):
            if getattr(args, name) is not None:
                scope, scope_id = name, getattr(args, name)
        page = records.facts(scope=scope, scope_id=scope_id, q=args.q)
    elif kind == "episodes":
        page = records.episodes(agent_id=args.agent, user_id=args.user, q=args.q)
    elif kind == "procedures":
        page = records.procedures(q=args.q)
    elif kind == "users":
        page = records.users(q=args.q)
    else:
        page = records.conversations(q=args.q)
    return [item["id"] for item in page["items"]]


def _confirm(count: int, what: str) -> None:
    if not sys.stdin.isatty():
        raise CliError(
            f"refusing to delete {count} {what} without --yes (standard input is not a terminal)"
        )
    answer = input(f"delete {count} {what}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("nothing deleted")


def delete(args: argparse.Namespace, out: Output) -> int:
    """Deletes records by id or by filter, after confirmation."""
    filtered = any(
        getattr(args, name, None) is not None for name in ("q", "user", "agent", "scope")
    )
    if args.kind == "working":
        if args.scope is None or not args.ids:
            raise CliError("delete working needs --scope SCOPE and the KEYs to delete")
    elif not args.ids and not filtered and not args.all:
        raise CliError(f"delete {args.kind} needs ids, a filter (--filter, --user, ...) or --all")
    with open_manager(args) as manager:
        records = Records(manager)
        ids = list(args.ids) or _matching_ids(records, args)
        if not ids:
            out.text(f"no {args.kind} match")
            return 0
        if not args.yes:
            _confirm(len(ids), args.kind)
        with out.progress(f"deleting {args.kind}", len(ids)) as advance:
            try:
                if args.kind == "working":
                    done = records.delete_working(args.scope, ids, progress=advance)
                else:
                    done = records.delete(args.kind, ids, progress=advance)
            except (ValueError, TypeError) as exc:
                raise CliError(str(exc)) from None
    if out.as_json:
        out.json(done)
    else:
        out.text(f"deleted {len(done['deleted'])} {args.kind}")
        for missing in done["not_found"]:
            out.note(f"not found: {missing}")
    return 1 if done["not_found"] else 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds the maintenance commands to the command line."""
    parser = sub.add_parser(
        "stats",
        parents=[common],
        help="counts and sizes per namespace",
        description="Entries, their JSON size and how many carry a TTL, per namespace.",
    )
    parser.set_defaults(func=stats)

    parser = sub.add_parser(
        "purge-expired",
        parents=[common],
        help="remove expired entries",
        description="Remove every entry whose TTL has passed.",
    )
    parser.set_defaults(func=purge_expired)

    parser = sub.add_parser(
        "delete",
        parents=[common],
        help="delete records by id or filter",
        description=(
            "Delete records of one kind by id, or every record a filter matches. Asks for "
            "confirmation unless --yes; exits 1 when an id was not found."
        ),
    )
    parser.add_argument(
        "kind",
        choices=[*KINDS, "working"],
        metavar="KIND",
        help=f"one of {', '.join([*KINDS, 'working'])}",
    )
    parser.add_argument("ids", nargs="*", metavar="ID", help="the records' ids (working: keys)")
    parser.add_argument("--filter", dest="q", metavar="TEXT", help="every record containing TEXT")
    parser.add_argument("--user", metavar="USER_ID", help="facts or episodes of this user")
    parser.add_argument("--agent", metavar="AGENT_ID", help="facts or episodes of this agent")
    parser.add_argument("--scope", help="facts: this scope; working: the scope to delete from")
    parser.add_argument("--all", action="store_true", help="every record of KIND")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(func=delete)
