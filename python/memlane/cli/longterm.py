"""``facts``, ``episodes``, ``procedures``, ``users``, ``working`` and ``search``.

Listings open the store read-only. Three of them also edit, with a leading word, so the
listing keeps its options (``memlane facts --user u1`` lists): ``facts set KEY VALUE``,
``working set SCOPE KEY VALUE`` and ``users rename USER NAME``.
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any

from memlane.cli.output import CliError, Output, add_sorting, fraction, positive_int, sorting
from memlane.cli.store import open_manager
from memlane.records import SORTS, TIMESTAMPS, Records

__all__ = ["actor", "parse_value", "register"]

_SCOPE_OPTIONS = ("user", "agent", "session")


def actor() -> str:
    """Who runs the command, for the audit line of a change."""
    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME: a bare container
        who = "unknown user"
    return f"{who} (memlane command)"


def parse_value(text: str) -> Any:
    """A value given on the command line: JSON when it parses (``12``, ``true``,
    ``{"a": 1}``, ``"quoted"``), else the text itself (``Lisbon``)."""
    try:
        value: Any = json.loads(text)
    except ValueError:
        return text
    return value


def _paging(parser: argparse.ArgumentParser, kind: str | None = None) -> None:
    if kind is not None:
        add_sorting(parser, SORTS[kind], f"only {kind} whose {TIMESTAMPS[kind]} is")
    parser.add_argument("--limit", type=positive_int, default=None, help="show at most this many")
    parser.add_argument("--filter", dest="q", metavar="TEXT", help="only records containing TEXT")


def _words(parser: argparse.ArgumentParser, metavar: str, help_text: str) -> None:
    parser.add_argument("words", nargs="*", metavar=metavar, help=help_text)


def _fact_scope(args: argparse.Namespace) -> tuple[str | None, str | None]:
    scope, scope_id = args.scope, None
    given = [name for name in _SCOPE_OPTIONS if getattr(args, name) is not None]
    if len(given) > 1:
        raise CliError(f"give one of --user, --agent, --session, not {len(given)}")
    if given:
        name = given[0]
        if scope not in (None, name):
            raise CliError(f"--scope {scope} does not go with --{name}")
        scope, scope_id = name, getattr(args, name)
    return scope, scope_id


def facts(args: argparse.Namespace, out: Output) -> int:
    """Lists facts (filtered by scope, scope id and type), or sets one (``facts set``)."""
    if args.words:
        return _set_fact(args, out)
    if args.confidence is not None:
        raise CliError("--confidence goes with facts set KEY VALUE")
    scope, scope_id = _fact_scope(args)
    with open_manager(args, read_only=True) as manager:
        records = Records(manager)
        if scope == "user" and scope_id is not None:
            scope_id = _one_user(records, scope_id)
        page = records.facts(
            scope=scope,
            scope_id=scope_id,
            fact_type=args.type,
            q=args.q,
            limit=args.limit,
            **sorting(args),
        )
    rows = [
        (
            f["id"],
            f["key"],
            f["value"],
            f["fact_type"],
            f["confidence"],
            f["updated_at"],
        )
        for f in page["items"]
    ]
    out.table("facts", ["id", "key", "value", "type", "confidence", "updated"], rows, page["items"])
    return 0


def _one_user(records: Records, text: str) -> str:
    """The id of the one user ``text`` names; a raw id nobody holds passes as it is (facts
    may be scoped to an id no user record has)."""
    found = records.resolve_user(text)
    if len(found) > 1:
        names = ", ".join(f"{u['id']} ({u['display_name'] or 'no name'})" for u in found)
        raise CliError(f"--user {text!r} names {len(found)} users: {names}; pass one id")
    return str(found[0]["id"]) if found else text


def _set_fact(args: argparse.Namespace, out: Output) -> int:
    if len(args.words) != 3 or args.words[0] != "set":
        raise CliError(
            "facts takes no arguments to list, or: facts set KEY VALUE --scope SCOPE "
            "[--user/--agent/--session ID]"
        )
    _, key, text = args.words
    scope, scope_id = _fact_scope(args)
    if scope is None:
        raise CliError("facts set needs --scope (global, user, agent or session)")
    if scope != "global" and scope_id is None:
        raise CliError(f"facts set --scope {scope} needs --{scope} ID")
    with open_manager(args) as manager:
        records = Records(manager)
        if scope == "user" and scope_id is not None:
            scope_id = _one_user(records, scope_id)
        row = records.set_fact(
            key,
            parse_value(text),
            scope=scope,
            scope_id=scope_id,
            confidence=args.confidence,
            actor=actor(),
        )
    if out.as_json:
        out.json(row)
    else:
        out.text(
            f"{row['status']} fact {row['id']} = {json.dumps(row['value'], ensure_ascii=False)}"
        )
    return 0


def episodes(args: argparse.Namespace, out: Output) -> int:
    """Lists episodes, most recent first."""
    success = None if args.outcome is None else args.outcome == "success"
    with open_manager(args, read_only=True) as manager:
        records = Records(manager)
        user = None if args.user is None else _one_user(records, args.user)
        page = records.episodes(
            agent_id=args.agent,
            user_id=user,
            success=success,
            q=args.q,
            limit=args.limit,
            **sorting(args),
        )
    rows = [
        (
            e["id"],
            e["agent_id"],
            e["user_name"] or e["user_id"],
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
    with open_manager(args, read_only=True) as manager:
        page = Records(manager).procedures(
            procedure_type=args.type, q=args.q, limit=args.limit, **sorting(args)
        )
    rows = [
        (p["id"], p["name"], p["procedure_type"], p["times_used"], p["success_rate"])
        for p in page["items"]
    ]
    out.table("procedures", ["id", "name", "type", "uses", "success rate"], rows, page["items"])
    return 0


def users(args: argparse.Namespace, out: Output) -> int:
    """Lists memory users, or renames one (``users rename USER NAME``)."""
    if args.words:
        return _rename_user(args, out)
    with open_manager(args, read_only=True) as manager:
        page = Records(manager).users(q=args.q, limit=args.limit, **sorting(args))
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


def _rename_user(args: argparse.Namespace, out: Output) -> int:
    if len(args.words) != 3 or args.words[0] != "rename":
        raise CliError("users takes no arguments to list, or: users rename USER NAME")
    _, who, name = args.words
    with open_manager(args) as manager:
        records = Records(manager)
        user = _one_user(records, who)
        row = records.update_user(user, display_name=name, actor=actor())
    if out.as_json:
        out.json(row)
    else:
        out.text(f"renamed user {row['id']} to {row['display_name']}")
    return 0


def working(args: argparse.Namespace, out: Output) -> int:
    """Lists one working-memory scope's facts, or the scopes; ``working set`` sets one."""
    if len(args.words) > 1:
        return _set_working(args, out)
    if args.importance is not None:
        raise CliError("--importance goes with working set SCOPE KEY VALUE")
    with open_manager(args, read_only=True) as manager:
        records = Records(manager)
        if not args.words:
            scopes = records.working_scopes()
            out.table(
                "working-memory scopes",
                ["scope", "entries"],
                [(s["scope"], s["entries"]) for s in scopes],
                scopes,
            )
            return 0
        [scope] = args.words
        items = records.working(scope)
    rows = [(i["key"], i["value"], i["importance"], i["expires_at"]) for i in items]
    out.table(f"working memory {scope}", ["key", "value", "importance", "expires"], rows, items)
    return 0


def _set_working(args: argparse.Namespace, out: Output) -> int:
    if len(args.words) != 4 or args.words[0] != "set":
        raise CliError("working takes [SCOPE] to list, or: working set SCOPE KEY VALUE")
    _, scope, key, text = args.words
    with open_manager(args) as manager:
        row = Records(manager).update_working(
            scope, key, parse_value(text), importance=args.importance, create=True, actor=actor()
        )
    if out.as_json:
        out.json(row)
    else:
        out.text(
            f"set {key} = {json.dumps(row['value'], ensure_ascii=False)} in working memory {scope}"
        )
    return 0


def search(args: argparse.Namespace, out: Output) -> int:
    """Ranked search over facts of every scope, procedures and episodes."""
    with open_manager(args, read_only=True) as manager:
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
            scope = record["scope"]
            if record.get("scope_id") is not None:
                scope += f" {record.get('scope_name') or record['scope_id']}"
            what = f"{record['key']} = {json.dumps(record['value'], ensure_ascii=False)}"
        elif hit["type"] == "procedure":
            scope, what = "", record["name"]
        else:
            scope = f"user {record['user_name'] or record['user_id']}" if record["user_id"] else ""
            what = f"{record['trigger']}: {record['input']}"
        rows.append((hit["type"], scope, hit["id"], what))
    out.table(f"search {args.query!r}", ["type", "scope", "id", "record"], rows, hits)
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds the long-term and working-memory commands to the command line."""
    parser = sub.add_parser(
        "facts",
        parents=[common],
        help="list long-term facts, or set one (facts set KEY VALUE --scope ...)",
        description=(
            "List long-term facts; or set one: facts set KEY VALUE --scope SCOPE "
            "[--user/--agent/--session ID] [--confidence X]. VALUE is read as JSON when it "
            "parses (12, true, [1, 2], '\"12\"'), else as text."
        ),
    )
    _words(parser, "set KEY VALUE", "set KEY to VALUE (without them: list)")
    parser.add_argument("--scope", choices=["session", "user", "agent", "global"])
    parser.add_argument(
        "--user", metavar="USER", help="this user's facts (an id, channel:id or display name)"
    )
    parser.add_argument("--agent", metavar="AGENT_ID", help="this agent's facts")
    parser.add_argument("--session", metavar="SESSION_ID", help="this session's facts")
    parser.add_argument("--type", help="only this fact type, e.g. user_preference")
    parser.add_argument("--confidence", type=fraction, help="facts set: 0 to 1 (default 0.8)")
    _paging(parser, "facts")
    parser.set_defaults(func=facts)

    parser = sub.add_parser(
        "episodes",
        parents=[common],
        help="list episodes (past agent runs)",
        description="List episodes, the past agent runs long-term memory keeps, most recent first.",
    )
    parser.add_argument("--user", metavar="USER", help="an id, channel:id or display name")
    parser.add_argument("--agent", metavar="AGENT_ID")
    parser.add_argument("--outcome", choices=["success", "failure"])
    _paging(parser, "episodes")
    parser.set_defaults(func=episodes)

    parser = sub.add_parser(
        "procedures",
        parents=[common],
        help="list learned procedures",
        description="List learned procedures and their track record.",
    )
    parser.add_argument("--type", help="only this procedure type, e.g. prompt_template")
    _paging(parser, "procedures")
    parser.set_defaults(func=procedures)

    parser = sub.add_parser(
        "users",
        parents=[common],
        help="list memory users, or rename one (users rename USER NAME)",
        description=(
            "List memory users and the channels they were seen on; or give one a display "
            "name: users rename USER NAME (USER: an id, channel:id or display name)."
        ),
    )
    _words(parser, "rename USER NAME", "rename USER (without them: list)")
    _paging(parser, "users")
    parser.set_defaults(func=users)

    parser = sub.add_parser(
        "working",
        parents=[common],
        help="working-memory scopes and facts, or set one (working set SCOPE KEY VALUE)",
        description=(
            "The facts of one working-memory scope; without SCOPE, every scope. working set "
            "SCOPE KEY VALUE sets one (VALUE read as JSON when it parses, else as text)."
        ),
    )
    _words(parser, "SCOPE | set SCOPE KEY VALUE", "a scope to list, or set SCOPE KEY VALUE")
    parser.add_argument("--importance", type=fraction, help="working set: 0 to 1")
    parser.set_defaults(func=working)

    parser = sub.add_parser(
        "search",
        parents=[common],
        help="ranked search over facts, procedures and episodes",
        description=(
            "Ranked search over long-term memory: facts of every scope (the scope is shown), "
            "procedures and episodes. With --user, --agent or --session: the facts visible "
            "from them (global facts always)."
        ),
    )
    parser.add_argument("query", metavar="QUERY")
    parser.add_argument("--type", default="all", choices=["all", "facts", "procedures", "episodes"])
    parser.add_argument(
        "--user", metavar="USER", help="an id, a merged id, channel:id or a display name"
    )
    parser.add_argument("--agent", metavar="AGENT_ID")
    parser.add_argument("--session", metavar="SESSION_ID")
    parser.add_argument("--limit", type=positive_int, default=20)
    parser.set_defaults(func=search)
