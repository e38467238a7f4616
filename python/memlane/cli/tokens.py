"""``memlane tokens FILE``: how many tokens a file is, and how fast they were counted."""

from __future__ import annotations

import argparse
import sys
import time

from memlane import BACKEND
from memlane.cli.output import CliError, Output
from memlane.tokens import TokenEstimator

__all__ = ["register"]


def _read(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    try:
        with open(name, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        raise CliError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{name}: is a directory, not a file") from None
    except OSError as exc:
        raise CliError(f"{name}: cannot be read ({exc.strerror})") from None


def run(args: argparse.Namespace, out: Output) -> int:
    """Counts the tokens of ``args.file`` and prints the count, size and throughput."""
    raw = _read(args.file)
    # Bytes that are not UTF-8 are kept as lone surrogates, so they still count as text;
    # the size reported is that of the file, not of a re-encoding of it.
    text = raw.decode("utf-8", "surrogateescape")
    estimator = TokenEstimator(encoding_name=args.encoding, mode=args.mode)
    estimator.estimate("warm up")  # keep the one-off rank-file load out of the throughput
    start = time.perf_counter()
    count = estimator.estimate(text)
    elapsed = time.perf_counter() - start
    rate = len(raw) / elapsed / 1e6 if elapsed > 0 else float("inf")
    if out.as_json:
        out.json(
            {
                "tokens": count,
                "encoding": args.encoding,
                "mode": args.mode,
                "backend": BACKEND,
                "bytes": len(raw),
                "seconds": elapsed,
            }
        )
        return 0
    out.text(f"tokens:     {count}")
    out.text(f"encoding:   {args.encoding} ({args.mode})")
    out.text(f"backend:    {BACKEND}")
    out.text(f"bytes:      {len(raw)}")
    out.text(f"throughput: {rate:.2f} MB/s ({elapsed * 1e3:.2f} ms)")
    return 0


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Adds ``tokens`` to the command line."""
    tokens = sub.add_parser(
        "tokens",
        parents=[common],
        help="count the tokens of a file",
        description="Count the tokens a model would see in a file, and how fast memlane counts them.",
    )
    tokens.add_argument("file", metavar="FILE", help="the file to count ('-' reads standard input)")
    tokens.add_argument(
        "--encoding",
        default="o200k_base",
        choices=["o200k_base", "cl100k_base"],
        help="the tokenizer: o200k_base (GPT-4o and later) or cl100k_base (GPT-4, GPT-3.5); default: %(default)s",
    )
    tokens.add_argument(
        "--mode",
        default="exact",
        choices=["exact", "heuristic"],
        help="exact: real BPE tokens; heuristic: a fast estimate without the tokenizer; default: %(default)s",
    )
    tokens.set_defaults(func=run)
