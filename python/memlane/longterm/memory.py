"""LongTermMemory: facts, episodes, procedures and users over one store.

Each kind of record has its own module and mixin; this class only composes them over a
store. Several ``LongTermMemory`` objects, in any number of processes, may share a store.
"""

from __future__ import annotations

from memlane.longterm.episodes import EpisodesMixin
from memlane.longterm.facts import FactsMixin
from memlane.longterm.forget import ForgetMixin
from memlane.longterm.procedures import ProceduresMixin
from memlane.longterm.search import SearchMixin
from memlane.longterm.users import UsersMixin
from memlane.stores import InMemoryStore, MemoryStore


class LongTermMemory(
    FactsMixin, EpisodesMixin, ProceduresMixin, UsersMixin, SearchMixin, ForgetMixin
):
    """Memory that outlives conversations: facts in a scope hierarchy, and more.

    Every method has an ``async_`` twin running the same plan.

    Args:
        store: Where records live; a private :class:`~memlane.stores.InMemoryStore` by
            default. Share a persistent store between processes to share what they learn.

    Example:
        >>> memory = LongTermMemory()
        >>> str(memory.remember("timezone", "Australia/Adelaide", scope="user", scope_id="u1"))
        'timezone = Australia/Adelaide (created)'
        >>> memory.get_fact("timezone", user_id="u1").value
        'Australia/Adelaide'
    """

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store: MemoryStore = store if store is not None else InMemoryStore()
