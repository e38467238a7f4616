"""Which store a command works on: ``--store URL``, or the ``MEMLANE_*`` variables.

URLs: ``sqlite:///relative.db`` and ``sqlite:////absolute.db`` (SQLAlchemy's spelling),
``file:///absolute/dir`` or ``file://relative/dir``, ``memory://``, ``postgresql://…`` (also
``postgres://…``) and ``mongodb://…``. Every other ``MEMLANE_*`` setting (budgets, pool sizes,
schema) still applies.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memlane.cli.output import CliError
from memlane.config import MemlaneSettings
from memlane.errors import NotAStoreError, StoreConnectionError
from memlane.manager import MemoryManager

__all__ = ["STORE_HELP", "describe_store", "open_manager", "settings_for"]

STORE_HELP = (
    "sqlite:///file.db, file:///dir, postgresql://..., mongodb://... or memory:// "
    "(default: the MEMLANE_* variables)"
)


def settings_for(url: str | None) -> MemlaneSettings:
    """The settings of ``url`` over the environment's (the environment's alone for ``None``).

    Raises:
        CliError: An unknown URL scheme or an invalid configuration.
    """
    overrides: dict[str, Any] = {}
    if url is not None:
        scheme, sep, rest = url.partition("://")
        scheme = scheme.lower()
        if not sep:
            raise CliError(f"--store {url!r} is not a URL: {STORE_HELP}")
        if scheme == "sqlite":
            overrides = {"backend": "sqlite", "sqlite_path": rest.removeprefix("/")}
        elif scheme == "file":
            overrides = {"backend": "file", "file_dir": rest}
        elif scheme == "memory":
            overrides = {"backend": "in_memory"}
        elif scheme in ("postgresql", "postgres"):
            overrides = {"backend": "postgres", "postgres_url": url}
        elif scheme in ("mongodb", "mongodb+srv"):
            overrides = {"backend": "mongodb", "mongodb_url": url}
        else:
            raise CliError(f"--store: unknown kind of store {scheme!r}: {STORE_HELP}")
        if scheme in ("sqlite", "file") and not rest.removeprefix("/"):
            raise CliError(f"--store {url!r} names no path")
    try:
        return MemlaneSettings.from_env(**overrides)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def describe_store(settings: MemlaneSettings) -> str:
    """A short, password-free description of the store for messages."""
    if settings.backend == "sqlite":
        return f"SQLite {settings.sqlite_path}"
    if settings.backend == "file":
        return f"file store {settings.file_dir}"
    if settings.backend == "postgres":
        return "PostgreSQL"
    if settings.backend == "mongodb":
        return "MongoDB"
    return "in-memory store"


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def open_manager(
    args: argparse.Namespace, *, create: bool = False, read_only: bool = False
) -> Iterator[MemoryManager]:
    """The manager on the store the command line names, connected, with long-term memory.

    Closed (with its store) when the block ends.

    Args:
        args: The parsed command line (its ``store``).
        create: Create a missing SQLite file or store directory (``import``, ``serve
            --create``), or a store in an empty SQLite file; otherwise a missing one (or an
            empty file) is an error, so a typo never inspects or serves a new empty store.
        read_only: Open the store read-only: nothing is created, migrated or written, and
            a file or database that is not a memlane store is refused, left as it was.

    Raises:
        CliError: The store is missing, unusable or unreachable.
    """
    url = getattr(args, "store", None)
    if url is None and not any(name.upper() == "MEMLANE_BACKEND" for name in os.environ):
        # memlane's own default, a fresh in-memory store, holds nothing worth inspecting.
        raise CliError(
            "no store given: pass --store URL, such as --store sqlite:///memory.sqlite3, "
            "or set MEMLANE_BACKEND; memlane --help lists the kinds of store"
        )
    settings = settings_for(url)
    where = describe_store(settings)
    path = {"sqlite": settings.sqlite_path, "file": settings.file_dir}.get(settings.backend)
    if path is not None:
        target = Path(path)
        if settings.backend == "sqlite" and target.is_dir():
            raise CliError(f"{where}: is a directory, not a database file")
        if settings.backend == "file" and target.exists() and not target.is_dir():
            raise CliError(f"{where}: is a file, not a directory")
        if (
            settings.backend == "sqlite"
            and not (create or read_only)
            and target.is_file()
            and target.stat().st_size == 0
        ):
            # SQLite would take an empty file as an empty database and write memlane's
            # tables into it: an empty file is a store that does not exist yet.
            raise CliError(f"{where}: an empty file, not a memlane store; nothing was written")
        if not target.exists():
            if not create:
                raise CliError(
                    f"{where}: no such {'file' if settings.backend == 'sqlite' else 'directory'}"
                )
            target.absolute().parent.mkdir(parents=True, exist_ok=True)
    try:
        manager = MemoryManager.from_config(settings, long_term=True, read_only=read_only)
    except ImportError as exc:
        raise CliError(f"{where}: {str(exc).splitlines()[0]}") from None
    except StoreConnectionError as exc:
        # It names the kind of store and its host:port already.
        raise CliError(_first_line(exc)) from None
    except NotAStoreError as exc:
        # Its message names the file or database already, and what it holds instead.
        raise CliError(_first_line(exc)) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"{where} cannot be used: {_first_line(exc)}") from None
    try:
        yield manager
    finally:
        manager.close()
