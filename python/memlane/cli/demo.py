"""``memlane demo``: the pydantic-ai travel assistant with memory (see :mod:`memlane.demo`)."""

from __future__ import annotations

import argparse

from memlane.cli.output import CliError, Output

__all__ = ["register"]

DEFAULT_DB = ".memlane/memory.sqlite3"
"""``memlane.demo.DEFAULT_DEMO_DB``, named without importing the demo: it loads pydantic-ai
and the agents, which only ``memlane demo`` needs (a test holds the two equal)."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def run(args: argparse.Namespace, out: Output) -> int:
    """Runs the demo conversation."""
    del out  # the demo prints its own turn-by-turn story
    from memlane.demo import DemoError, run_demo

    try:
        return run_demo(db=args.db, model=args.model, resume=args.resume, turns=args.turns)
    except DemoError as exc:
        raise CliError(str(exc)) from None


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds ``demo`` to the command line."""
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="a pydantic-ai agent conversation with memory",
        description=(
            "A travel assistant with tools and memory on SQLite, shown turn by turn: turns leave "
            "the token budget and roll into a summary, facts persist, and --resume continues "
            "the conversation in a new process. Offline by default (a scripted model)."
        ),
    )
    demo.add_argument("--db", default=DEFAULT_DB, help="SQLite file (default: %(default)s)")
    demo.add_argument(
        "--model",
        help="a pydantic-ai model string, e.g. openai:gpt-4o-mini (needs memlane[llm] and its API key)",
    )
    demo.add_argument("--resume", metavar="CONVERSATION_ID", help="continue a stored conversation")
    demo.add_argument(
        "--turns", type=_positive, default=8, help="turns to run (default: %(default)s)"
    )
    demo.set_defaults(func=run)
