"""How the command speaks: rich tables on a terminal, plain lines when piped, JSON on request.

Errors a user can fix are raised as :class:`CliError` and printed by ``main`` as one line
(``memlane: error: ...``) with exit status 1; nothing the command expects ends in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, time
from typing import Any, TextIO

__all__ = [
    "CliError",
    "Output",
    "add_sorting",
    "confirm",
    "fraction",
    "positive_int",
    "since",
    "sorting",
    "until",
]


class CliError(Exception):
    """An error the user can fix; its message is printed as the one line of output."""


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number >= 1 (``--limit 0`` is a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def fraction(text: str) -> float:
    """An ``argparse`` type: a number from 0 to 1 (a confidence, an importance)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _moment(text: str, *, end_of_day: bool) -> datetime:
    try:
        if len(text) == 10:  # a date alone: since its start, until its end
            day = date.fromisoformat(text)
            moment = datetime.combine(day, time.max if end_of_day else time.min)
        else:
            moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date or time: {text!r} (e.g. 2026-05-01 or 2026-05-01T09:30)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def since(text: str) -> datetime:
    """An ``argparse`` type: an ISO date (from its start) or time; UTC unless it says."""
    return _moment(text, end_of_day=False)


def until(text: str) -> datetime:
    """An ``argparse`` type: an ISO date (to its end) or time; UTC unless it says."""
    return _moment(text, end_of_day=True)


def add_sorting(parser: argparse.ArgumentParser, fields: Sequence[str], dated: str) -> None:
    """``--sort FIELD``, ``--desc``, ``--since`` and ``--until`` on a listing."""
    parser.add_argument(
        "--sort", choices=fields, metavar="FIELD", help=f"one of {', '.join(fields)}"
    )
    parser.add_argument("--desc", action="store_true", help="sort from the highest value")
    parser.add_argument("--since", type=since, metavar="DATE", help=f"{dated} at or after DATE")
    parser.add_argument("--until", type=until, metavar="DATE", help=f"{dated} at or before DATE")


def sorting(args: argparse.Namespace) -> dict[str, Any]:
    """The listing arguments ``add_sorting`` parsed, as ``Records`` takes them."""
    return {
        "sort": args.sort,
        "descending": args.desc,
        "since": args.since,
        "until": args.until,
    }


def confirm(question: str, *, refusal: str, listing: Callable[[], None] | None = None) -> bool:
    """Shows ``listing`` then asks ``question [y/N]`` on the terminal; whether it was yes.

    Raises:
        CliError: Standard input is not a terminal (``refusal`` says what was not done and
            that ``--yes`` does it), so a script never blocks on, or guesses, an answer.
    """
    if not sys.stdin.isatty():
        raise CliError(f"{refusal} (standard input is not a terminal)")
    if listing is not None:
        listing()
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, bool | int):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _one_line(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Output:
    """Writes results in the form the caller asked for.

    Args:
        as_json: Print JSON (for scripts) instead of tables.
        stream: Where results go (standard output by default).
        err: Where progress and notes go (standard error by default).
    """

    def __init__(
        self, *, as_json: bool = False, stream: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.as_json = as_json
        self.stream = stream if stream is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.rich = not as_json and self.stream.isatty()

    def json(self, data: Any) -> None:
        """Prints ``data`` as indented JSON."""
        self.stream.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    def table(
        self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], data: Any
    ) -> None:
        """A table of ``rows`` under ``columns``; ``data`` is what ``--json`` prints instead.

        Piped, each row is one tab-separated line after a header line, for ``cut`` and
        ``awk``; long cells are cut to one line of at most 80 characters.
        """
        if self.as_json:
            self.json(data)
            return
        cells = [[_one_line(_cell(v)) for v in row] for row in rows]
        if not self.rich:
            self.stream.write("\t".join(columns) + "\n")
            for row in cells:
                self.stream.write("\t".join(row) + "\n")
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{title} ({len(rows)})", title_justify="left")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in cells:
            table.add_row(*row)
        Console(file=self.stream).print(table)

    def text(self, line: str = "", *, style: str | None = None) -> None:
        """One line of text (coloured on a terminal when ``style`` is given)."""
        if self.rich and style:
            from rich.console import Console

            Console(file=self.stream, highlight=False).print(line, style=style, markup=False)
        else:
            self.stream.write(line + "\n")

    def note(self, line: str) -> None:
        """A remark for the person at the terminal, on standard error."""
        self.err.write(line + "\n")

    @contextmanager
    def progress(self, what: str, total: int | None) -> Iterator[Any]:
        """A progress bar on standard error when it is a terminal; yields ``advance(n)``.

        Off a terminal nothing is drawn, so piped output and logs stay clean.
        """
        if not self.err.isatty():
            yield lambda n=1: None
            return
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(file=self.err), transient=True) as bar:
            task = bar.add_task(what, total=total)
            yield lambda n=1: bar.advance(task, n)
