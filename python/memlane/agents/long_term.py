"""Old home of :class:`LongTermBinding`: :mod:`memlane.agents.long_term_binding` holds it now."""

from memlane.agents.long_term_binding import CONTEXT_FACTS, LongTermBinding, context_text

__all__ = ["CONTEXT_FACTS", "LongTermBinding", "context_text"]
