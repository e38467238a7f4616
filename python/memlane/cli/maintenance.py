"""``stats``, ``purge-expired``, ``delete`` and ``forget-user``: keeping a store tidy."""

from __future__ import annotations

import argparse
import json
from typing import Any

from memlane.cli.longterm import actor
from memlane.cli.output import CliError, Output, confirm
from memlane.cli.store import open_manager
from memlane.records import KINDS, NOUNS, Records, count, plural

__all__ = ["register"]

_TOTALS = ("facts", "episodes", "procedures", "users", "conversations", "turns", "working")

_OPTIONS = {"q": "--filter", "user": "--user", "agent": "--agent", "scope": "--scope"}
# The filters each kind's listing applies. Another one would be ignored by the listing, and
# a delete by filter would then take every record of the kind.
_FILTERS = {
    "facts": {"q", "user", "agent", "scope"},
    "episodes": {"q", "user", "agent"},
    "procedures": {"q"},
    "users": {"q"},
    "conversations": {"q"},
    "working": {"q", "scope"},
}


def _filter_text(text: str) -> str:
    """An ``argparse`` type: the text ``delete --filter`` looks for, never empty (an empty
    text is in every record, so it would delete them all)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (use --all for every record)")
    return text


def stats(args: argparse.Namespace, out: Output) -> int:
    """Totals per kind of record, or counts and sizes per namespace (``--namespaces``)."""
    with open_manager(args, read_only=True) as manager:
        records = Records(manager)
        if not args.namespaces:
            totals = records.totals()
            if out.as_json:
                out.json(totals)
                return 0
            out.table(
                "totals",
                ["kind", "records"],
                [*((k, totals[k]) for k in _TOTALS), ("bytes", totals["bytes"])],
                totals,
            )
            return 0
        rows = records.stats()
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
        f"total: {plural(total['entries'], 'entry', 'entries')}, {total['bytes']} bytes in "
        f"{plural(total['namespaces'], 'namespace')}"
    )
    return 0


def purge_expired(args: argparse.Namespace, out: Output) -> int:
    """Removes every expired entry."""
    with open_manager(args) as manager, out.progress("purging expired entries", None):
        removed = manager.store.cleanup_expired()
    if out.as_json:
        out.json({"removed": removed})
    else:
        out.text(f"removed {plural(removed, 'expired entry', 'expired entries')}")
    return 0


def _describe(kind: str, row: dict[str, Any]) -> str:
    """One line saying what a record is, for the list shown before a delete."""
    if kind == "facts":
        return f"{row['key']} = {json.dumps(row['value'], ensure_ascii=False)}"
    if kind == "episodes":
        return f"{row['agent_id']} {row['trigger']}: {row['input']}"
    if kind == "procedures":
        return str(row["name"])
    if kind == "users":
        return f"{row['display_name'] or 'no name'} ({row['canonical_id']})"
    if kind == "conversations":
        return f"{count(row['turns'], 'turns')}, last activity {row['last_activity']}"
    return f"{row['key']} = {json.dumps(row['value'], ensure_ascii=False)}"


def _rows(records: Records, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The records a filter (or ``--all``) names."""
    kind = args.kind
    page: dict[str, Any]
    if kind == "working":
        return records.working(args.scope)
    if kind == "facts":
        scope, scope_id = args.scope, None
        if args.agent is not None:
            scope, scope_id = "agent", args.agent
        # --user takes any name of a user; with --agent or another --scope it is refused.
        page = records.facts(scope=scope, scope_id=scope_id, user_id=args.user, q=args.q)
    elif kind == "episodes":
        page = records.episodes(agent_id=args.agent, user_id=args.user, q=args.q)
    elif kind == "procedures":
        page = records.procedures(q=args.q)
    elif kind == "users":
        page = records.users(q=args.q)
    else:
        page = records.conversations(q=args.q)
    rows: list[dict[str, Any]] = page["items"]
    return rows


def delete(args: argparse.Namespace, out: Output) -> int:
    """Deletes records by id or by filter, after listing them and asking."""
    given = [name for name in _OPTIONS if getattr(args, name, None) is not None]
    ignored = [_OPTIONS[name] for name in given if name not in _FILTERS[args.kind]]
    if ignored:
        raise CliError(
            f"delete {args.kind} cannot be filtered by {', '.join(ignored)}; it takes "
            f"{', '.join(_OPTIONS[name] for name in _OPTIONS if name in _FILTERS[args.kind])}"
        )
    filtered = bool(given)
    if args.kind == "working":
        if args.scope is None or (not args.ids and not args.all and args.q is None):
            raise CliError("delete working needs --scope SCOPE and the KEYs (or --all)")
    elif not args.ids and not filtered and not args.all:
        raise CliError(f"delete {args.kind} needs ids, a filter (--filter, --user, ...) or --all")
    with open_manager(args) as manager:
        records = Records(manager)
        # The records are read to pick them by filter, or to show them before asking.
        rows = _rows(records, args) if not (args.ids and args.yes) else []
        if args.kind == "working" and args.q:
            wanted = args.q.casefold()
            rows = [r for r in rows if wanted in json.dumps(r, ensure_ascii=False).casefold()]
        by_id = {str(r["id"]): r for r in rows}
        ids = list(dict.fromkeys(args.ids)) or list(by_id)
        if not ids:
            out.text(f"no {NOUNS[args.kind][1]} match")
            return 0
        if not args.yes:
            what = count(len(ids), args.kind)

            def listing() -> None:
                out.note(f"about to delete {what}:")
                for i in ids:
                    row = by_id.get(i)
                    out.note(f"  {i}  {_describe(args.kind, row) if row else '(not found)'}")

            if not confirm(
                f"delete {what}?",
                refusal=f"refusing to delete {what} without --yes",
                listing=listing,
            ):
                out.text("nothing deleted")
                return 0
        with out.progress(f"deleting {NOUNS[args.kind][1]}", len(ids)) as advance:
            try:
                if args.kind == "working":
                    done = records.delete_working(args.scope, ids, progress=advance, actor=actor())
                else:
                    done = records.delete(args.kind, ids, progress=advance, actor=actor())
            except (ValueError, TypeError) as exc:
                raise CliError(str(exc)) from None
    if out.as_json:
        out.json(done)
    else:
        out.text(f"deleted {count(len(done['deleted']), args.kind)}")
        for missing in done["not_found"]:
            out.note(f"not found: {missing}")
        if args.kind == "users" and done["deleted"]:
            out.note(
                "their facts, episodes and conversations are kept; "
                "memlane forget-user USER deletes a person entirely"
            )
    return 1 if done["not_found"] else 0


_FORGOTTEN = ("facts", "episodes", "identifiers", "conversations")


def forget_user(args: argparse.Namespace, out: Output) -> int:
    """Deletes every record of one person, after listing them and asking once."""
    with open_manager(args, read_only=args.dry_run) as manager:
        records = Records(manager)
        plan = records.forget_user(args.user, dry_run=True)
        if args.dry_run:
            return _report(out, plan, "would delete")
        who = ", ".join(plan["user_ids"])
        if not args.yes and not confirm(
            f"forget user {who} and delete all of the above?",
            refusal=f"refusing to forget user {who} without --yes",
            listing=lambda: _list_plan(out, plan),
        ):
            out.text("nothing deleted")
            return 0
        done = records.forget_user(args.user, actor=actor())
    return _report(out, done, "deleted")


def _list_plan(out: Output, plan: dict[str, Any]) -> None:
    out.note(f"about to delete user {', '.join(plan['user_ids'])} and:")
    for kind in _FORGOTTEN:
        for record_id in plan[kind]:
            out.note(f"  {NOUNS[kind][0]}: {record_id}")


def _report(out: Output, report: dict[str, Any], verb: str) -> int:
    if out.as_json:
        out.json(report)
        return 0
    users = count(len(report["user_ids"]), "users")
    parts = ", ".join(count(len(report[kind]), kind) for kind in _FORGOTTEN)
    out.text(f"{verb} {users} ({', '.join(report['user_ids'])}), {parts}")
    for kind in _FORGOTTEN:
        for record_id in report[kind]:
            out.text(f"  {NOUNS[kind][0]}: {record_id}")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds the maintenance commands to the command line."""
    parser = sub.add_parser(
        "stats",
        parents=[common],
        help="how many records of each kind, and their size",
        description=(
            "Totals per kind: facts, episodes, procedures, users, conversations, turns, "
            "working-memory entries and bytes. --namespaces: entries, JSON size and TTLs "
            "per namespace instead."
        ),
    )
    parser.add_argument("--namespaces", action="store_true", help="one line per namespace")
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
            "Delete records of one kind by id, or every record a filter matches. Lists them "
            "and asks for confirmation unless --yes; exits 1 when an id was not found."
        ),
    )
    parser.add_argument(
        "kind",
        choices=[*KINDS, "working"],
        metavar="KIND",
        help=f"one of {', '.join([*KINDS, 'working'])}",
    )
    parser.add_argument("ids", nargs="*", metavar="ID", help="the records' ids (working: keys)")
    parser.add_argument(
        "--filter", dest="q", type=_filter_text, metavar="TEXT", help="every record containing TEXT"
    )
    parser.add_argument(
        "--user",
        metavar="USER",
        help="facts or episodes of this user (an id, a merged id, channel:id or display name)",
    )
    parser.add_argument("--agent", metavar="AGENT_ID", help="facts or episodes of this agent")
    parser.add_argument("--scope", help="facts: this scope; working: the scope to delete from")
    parser.add_argument("--all", action="store_true", help="every record of KIND")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(func=delete)

    parser = sub.add_parser(
        "forget-user",
        parents=[common],
        help="delete every record of one person (facts, episodes, conversations, user)",
        description=(
            "Delete every record of one person: their user record (and those merged into "
            "it), channel identifiers, user-scoped facts, episodes and recorded "
            "conversations. Lists them and asks once unless --yes; --dry-run only lists. "
            "USER: an id, a merged id, channel:id (telegram:12345) or a display name."
        ),
    )
    parser.add_argument("user", metavar="USER")
    parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(func=forget_user)
