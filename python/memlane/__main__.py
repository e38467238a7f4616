"""``python -m memlane``: the ``memlane`` command (see :mod:`memlane.cli`)."""

from __future__ import annotations

import sys

from memlane.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
