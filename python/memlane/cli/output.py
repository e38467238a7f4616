"""How the command speaks: rich tables on a terminal, plain lines when piped, JSON on request.

Errors a user can fix are raised as :class:`CliError` and printed by ``main`` as one line
(``memlane: error: ...``) with exit status 1; nothing the command expects ends in a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["CliError", "Output"]


class CliError(Exception):
    """An error the user can fix; its message is printed as the one line of output."""


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
