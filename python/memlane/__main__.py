"""Command line: ``python -m memlane tokens FILE`` and ``python -m memlane demo``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from memlane import BACKEND
from memlane.demo import DEFAULT_DEMO_DB, run_demo
from memlane.tokens import TokenEstimator


def _tokens(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        with open(args.file, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    estimator = TokenEstimator(encoding_name=args.encoding, mode=args.mode)
    estimator.estimate("warm up")  # keep the one-off rank-file load out of the throughput
    start = time.perf_counter()
    count = estimator.estimate(text)
    elapsed = time.perf_counter() - start
    size = len(text.encode("utf-8", "surrogatepass"))
    rate = size / elapsed / 1e6 if elapsed > 0 else float("inf")
    print(f"tokens:     {count}")
    print(f"encoding:   {args.encoding} ({args.mode})")
    print(f"backend:    {BACKEND}")
    print(f"bytes:      {size}")
    print(f"throughput: {rate:.2f} MB/s ({elapsed * 1e3:.2f} ms)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    return run_demo(db=args.db, model=args.model, resume=args.resume, turns=args.turns)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memlane`` command (and of ``python -m memlane``).

    Args:
        argv: The arguments; ``None`` reads ``sys.argv``.

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(prog="memlane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    tokens = sub.add_parser("tokens", help="count the tokens of a file ('-' for stdin)")
    tokens.add_argument("file")
    tokens.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"])
    tokens.add_argument("--mode", default="exact", choices=["exact", "heuristic"])
    tokens.set_defaults(func=_tokens)
    demo = sub.add_parser("demo", help="a pydantic-ai agent conversation with memory")
    demo.add_argument("--db", default=DEFAULT_DEMO_DB, help="SQLite file (default: %(default)s)")
    demo.add_argument("--model", help="a pydantic-ai model string, e.g. openai:gpt-4o-mini")
    demo.add_argument("--resume", metavar="CONVERSATION_ID", help="continue a stored conversation")
    demo.add_argument("--turns", type=int, default=8, help="turns to run (default: %(default)s)")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
