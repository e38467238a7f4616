"""``facts``, ``episodes``, ``procedures``, ``users``, ``working`` and ``search``."""

from __future__ import annotations

import argparse
from typing import Any

from memlane.cli.output import Output
from memlane.cli.store import open_manager
from memlane.records import Records

__all__ = ["register"]


def _paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=None, help="show at most this many")
    parser.add_argument("--filter", dest="q", metavar="TEXT", help="only records containing TEXT")


def facts(args: argparse.Namespace, out: Output) -> int:
    """Lists facts, filtered by scope, scope id and type."""
    scope, scope_id = args.scope, None
    for name in ("user", "agent", "session"):
        given = getattr(args, name)
        if given is not None:
            scope, scope_id = name, given
    with open_manager(args) as manager:
        page = Records(manager).facts(
            scope=scope, scope_id=scope_id, fact_type=args.type, q=args.q, limit=args.limit
        )
    rows = [
        (f["id"], f["key"], f["value"], f["fact_type"], f["confidence"], f["updated_at"])
        for f in page["items"]
    ]
    out.table("facts", ["id", "key", "value", "type", "confidence", "updated"], rows, page["items"])
    return 0


def episodes(args: argparse.Namespace, out: Output) -> int:
    """Lists episodes, most recent first."""
    success = None if args.outcome is None else args.outcome == "success"
    with open_manager(args) as manager:
        page = Records(manager).episodes(
            agent_id=args.agent, user_id=args.user, success=success, q=args.q, limit=args.limit
        )
    rows = [
        (
            e["id"],
            e["agent_id"],
            e["user_id"],
            e["trigger"],
            e["input"],
            e["success"],
            e["ended_at"],
        )
        for e in page["items"]
    ]
    out.table(
        "episodes",
        ["id", "agent", "user", "trigger", "input", "success", "ended"],
        rows,
        page["items"],
    )
    return 0


def procedures(args: argparse.Namespace, out: Output) -> int:
    """Lists procedures and their track record."""
    with open_manager(args) as manager:
        page = Records(manager).procedures(procedure_type=args.type, q=args.q, limit=args.limit)
    rows = [
        (p["id"], p["name"], p["procedure_type"], p["times_used"], p["success_rate"])
        for p in page["items"]
    ]
    out.table("procedures", ["id", "name", "type", "uses", "success rate"], rows, page["items"])
    return 0


def users(args: argparse.Namespace, out: Output) -> int:
    """Lists memory users and the channels they were seen on."""
    with open_manager(args) as manager:
        page = Records(manager).users(q=args.q, limit=args.limit)
    rows = [
        (
            u["id"],
            u["display_name"],
            u["canonical_id"],
            u["message_count"],
            u["conversation_count"],
            u["merged_into_id"],
        )
        for u in page["items"]
    ]
    out.table(
        "users",
        ["id", "name", "first seen as", "messages", "conversations", "merged into"],
        rows,
        page["items"],
    )
    return 0


def working(args: argparse.Namespace, out: Output) -> int:
    """Lists one working-memory scope's facts, or the scopes when given none."""
    with open_manager(args) as manager:
        records = Records(manager)
        if args.scope is None:
            scopes = records.working_scopes()
            out.table(
                "working-memory scopes",
                ["scope", "entries"],
                [(s["scope"], s["entries"]) for s in scopes],
                scopes,
            )
            return 0
        items = records.working(args.scope)
    rows = [(i["key"], i["value"], i["importance"], i["expires_at"]) for i in items]
    out.table(
        f"working memory {args.scope}", ["key", "value", "importance", "expires"], rows, items
    )
    return 0


def search(args: argparse.Namespace, out: Output) -> int:
    """Ranked search over facts, procedures and episodes."""
    with open_manager(args) as manager:
        hits = Records(manager).search(
            args.query,
            memory_type=args.type,
            limit=args.limit,
            user_id=args.user,
            agent_id=args.agent,
            session_id=args.session,
        )
    rows: list[tuple[Any, ...]] = []
    for hit in hits:
        record = hit["record"]
        if hit["type"] == "fact":
            what = f"{record['key']} = {record['value']}"
        elif hit["type"] == "procedure":
            what = record["name"]
        else:
            what = f"{record['trigger']}: {record['input']}"
        rows.append((hit["type"], hit["id"], what))
    out.table(f"search {args.query!r}", ["type", "id", "record"], rows, hits)
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds the long-term and working-memory commands to the command line."""
    parser = sub.add_parser(
        "facts", parents=[common], help="list long-term facts", description="List long-term facts."
    )
    parser.add_argument("--scope", choices=["session", "user", "agent", "global"])
    parser.add_argument("--user", metavar="USER_ID", help="only this user's facts")
    parser.add_argument("--agent", metavar="AGENT_ID", help="only this agent's facts")
    parser.add_argument("--session", metavar="SESSION_ID", help="only this session's facts")
    parser.add_argument("--type", help="only this fact type, e.g. user_preference")
    _paging(parser)
    parser.set_defaults(func=facts)

    parser = sub.add_parser(
        "episodes",
        parents=[common],
        help="list episodes (past agent runs)",
        description="List episodes, the past agent runs long-term memory keeps, most recent first.",
    )
    parser.add_argument("--user", metavar="USER_ID")
    parser.add_argument("--agent", metavar="AGENT_ID")
    parser.add_argument("--outcome", choices=["success", "failure"])
    _paging(parser)
    parser.set_defaults(func=episodes)

    parser = sub.add_parser(
        "procedures",
        parents=[common],
        help="list learned procedures",
        description="List learned procedures and their track record.",
    )
    parser.add_argument("--type", help="only this procedure type, e.g. prompt_template")
    _paging(parser)
    parser.set_defaults(func=procedures)

    parser = sub.add_parser(
        "users",
        parents=[common],
        help="list memory users",
        description="List memory users and the channels they were seen on.",
    )
    _paging(parser)
    parser.set_defaults(func=users)

    parser = sub.add_parser(
        "working",
        parents=[common],
        help="a working-memory scope's facts",
        description="The facts of one working-memory scope; without SCOPE, every scope.",
    )
    parser.add_argument("scope", metavar="SCOPE", nargs="?")
    parser.set_defaults(func=working)

    parser = sub.add_parser(
        "search",
        parents=[common],
        help="ranked search over facts, procedures and episodes",
        description=(
            "Ranked search over long-term memory. Facts are those visible from the ids given "
            "(global facts always)."
        ),
    )
    parser.add_argument("query", metavar="QUERY")
    parser.add_argument("--type", default="all", choices=["all", "facts", "procedures", "episodes"])
    parser.add_argument("--user", metavar="USER_ID")
    parser.add_argument("--agent", metavar="AGENT_ID")
    parser.add_argument("--session", metavar="SESSION_ID")
    parser.add_argument("--limit", type=int, default=20)
    parser.set_defaults(func=search)
