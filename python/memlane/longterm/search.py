"""Old home of ranked search: :mod:`memlane.longterm.ranked_search` holds it now."""

from memlane.longterm.ranked_search import RankedSearch, search_call

# The records and conversation packages import the one-search operation under its old name.
_search_call = search_call

__all__ = ["RankedSearch", "search_call"]
