"""Old home of :class:`LongTermMemory`: :mod:`memlane.longterm.long_term_memory` holds it now."""

from memlane.longterm.long_term_memory import LongTermMemory

__all__ = ["LongTermMemory"]
