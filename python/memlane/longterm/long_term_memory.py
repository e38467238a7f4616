"""LongTermMemory: facts, episodes, procedures and users over one store.

The class holds its parts, each in its own module, all sharing one
:class:`~memlane.longterm.storage.Storage` (the store, and the embedder with the writer that
embeds what the parts write):

* :class:`~memlane.longterm.facts.Facts` — ``remember``, ``remember_many``, ``contradict``,
  ``forget``, ``get_fact``, ``facts``;
* :class:`~memlane.longterm.episodes.Episodes` — ``record_episode``, ``episode_from_run``,
  ``episodes``;
* :class:`~memlane.longterm.procedures.Procedures` — ``add_procedure``,
  ``record_procedure_use``, ``get_procedure``, ``procedures``, ``match_procedures``;
* :class:`~memlane.longterm.users.Users` — ``identify_user``, ``get_user``, ``merge_users``,
  ``record_user_activity``, ``user_context``, ``thread_id`` (facts hold it, to keep a user's
  cached preferences in step with their preference facts);
* :class:`~memlane.longterm.recall.Recall` and
  :class:`~memlane.longterm.ranked_search.RankedSearch` — ``recall`` and ``search`` across
  the kinds of record;
* :class:`~memlane.longterm.forget_user.UserEraser` — ``forget_user``;
* :class:`~memlane.longterm.vector_upkeep.VectorUpkeep` — ``flush``, ``reembed``.

Each public method here forwards to its part's method of the same name (same signature and
docstring), and every sync method has an ``async_`` twin running the same plan. Several
``LongTermMemory`` objects, in any number of processes, may share a store.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from memlane.longterm.episodes import Episodes
from memlane.longterm.fact_reads import visible_fact
from memlane.longterm.facts import Facts
from memlane.longterm.forget_user import UserEraser
from memlane.longterm.procedures import Procedures
from memlane.longterm.ranked_search import RankedSearch
from memlane.longterm.recall import Recall
from memlane.longterm.storage import make_storage, run_written
from memlane.longterm.users import Users
from memlane.longterm.vector_upkeep import VectorUpkeep
from memlane.stores import InMemoryStore, MemoryStore

if TYPE_CHECKING:
    from pydantic_ai.embeddings import Embedder

    from memlane.longterm.fact_model import Fact, FactScope, FactType, RememberResult
    from memlane.longterm.storage import EmbedderLike

__all__ = ["LongTermMemory"]

P = ParamSpec("P")
T = TypeVar("T")
Part = TypeVar("Part")


def _forward(
    part: Callable[[LongTermMemory], Part], method: Callable[Concatenate[Part, P], T]
) -> Callable[Concatenate[LongTermMemory, P], T]:
    """``method`` of a part as a method of the memory: same name, signature and docstring."""

    def forwarded(self: LongTermMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(part(self), *args, **kwargs)

    return _named(forwarded, method)


def _forward_async(
    part: Callable[[LongTermMemory], Part],
    method: Callable[Concatenate[Part, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[LongTermMemory, P], Coroutine[Any, Any, T]]:
    """:func:`_forward` for an ``async_`` method, itself a coroutine function."""

    async def forwarded(self: LongTermMemory, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await method(part(self), *args, **kwargs)

    return _named(forwarded, method)


F = TypeVar("F", bound=Callable[..., Any])


def _named(forwarded: F, method: Callable[..., Any]) -> F:
    # The part's name, docstring and signature (``__signature__``, set by the runner's
    # describe(), is in the method's __dict__): help() and IDEs show the memory's method.
    functools.update_wrapper(forwarded, method)
    forwarded.__qualname__ = f"LongTermMemory.{method.__name__}"
    return forwarded


# The parts, read in C: each call of a forwarded method reads one.
_FACTS = operator.attrgetter("_facts")
_RECALL = operator.attrgetter("_recall")
_SEARCH = operator.attrgetter("_search")
_EPISODES = operator.attrgetter("_episodes")
_PROCEDURES = operator.attrgetter("_procedures")
_USERS = operator.attrgetter("_users")
_ERASER = operator.attrgetter("_eraser")
_UPKEEP = operator.attrgetter("_upkeep")


class LongTermMemory:
    """Memory that outlives conversations: facts in a scope hierarchy, and more.

    Every method has an ``async_`` twin running the same plan.

    Args:
        store: Where records live; a private :class:`~memlane.stores.InMemoryStore` by
            default. Share a persistent store between processes to share what they learn.
        embedder: What turns records and queries into vectors, for search by meaning: a
            pydantic-ai :class:`~pydantic_ai.embeddings.Embedder` or
            :class:`~pydantic_ai.embeddings.EmbeddingModel`, a model name pydantic-ai infers
            (``"openai:text-embedding-3-small"``), or ``"local"`` (WordLlama, offline:
            ``pip install memlane[embed]``). With one, facts, episodes and procedures are
            embedded in the background as they are written (``flush`` waits), and
            ``search`` is hybrid by default. The store must keep vectors (every memlane
            store does).

    Raises:
        TypeError: ``embedder`` is none of those (the message names it), or the store keeps
            no vectors.
        ValueError: ``embedder`` is an empty or unknown name.
        ImportError: ``"local"`` without WordLlama (the message names ``memlane[embed]``).

    Example:
        >>> memory = LongTermMemory()
        >>> str(memory.remember("timezone", "Australia/Adelaide", scope="user", scope_id="u1"))
        'timezone = Australia/Adelaide (created)'
        >>> memory.get_fact("timezone", user_id="u1").value
        'Australia/Adelaide'
    """

    CONTRADICTION_PENALTY: ClassVar[float] = Facts.CONTRADICTION_PENALTY
    """How much confidence one ``contradict`` takes away by default (clamped at 0.0)."""

    def __init__(
        self, store: MemoryStore | None = None, *, embedder: EmbedderLike | None = None
    ) -> None:
        storage = make_storage(store if store is not None else InMemoryStore(), embedder)
        self._storage = storage
        self._users = Users(storage)
        self._facts = Facts(
            storage, users=self._users, contradiction_penalty=self.CONTRADICTION_PENALTY
        )
        self._episodes = Episodes(storage)
        self._procedures = Procedures(storage)
        self._recall = Recall(storage)
        self._search = RankedSearch(storage)
        self._eraser = UserEraser(storage)
        self._upkeep = VectorUpkeep(storage)

    @property
    def store(self) -> MemoryStore:
        """Where the records live (shared by every part of this memory)."""
        return self._storage.store

    @property
    def embedder(self) -> Embedder | None:
        """The embedder, as a pydantic-ai ``Embedder`` (the one given, or one made from the
        model or name given), or ``None``."""
        return self._storage.embedder

    @property
    def embedding_model(self) -> str | None:
        """The embedder's id kept beside each vector (``"wordllama:l2_supercat"``), or ``None``."""
        return self._storage.model

    def __dir__(self) -> list[str]:
        # The parts are held privately: what an instance lists is the public API.
        return [name for name in super().__dir__() if not name.startswith("_") or name[1] == "_"]

    # ------------------------------------------------------------------ facts

    def _remember(
        self,
        key: str,
        value: Any,
        *,
        scope: FactScope | str = "global",
        scope_id: str | None = None,
        fact_type: FactType | str = "world_knowledge",
        confidence: float = 0.8,
        overwrite: bool = True,
        dedupe: float | None = None,
    ) -> RememberResult:
        # Facts.remember's body, not a call of it (as get_fact): a forwarding call with keyword
        # arguments was a thirtieth of an in-memory remember. A test holds the defaults equal.
        return run_written(
            self._facts._remember_step(
                key, value, scope, scope_id, fact_type, confidence, overwrite, dedupe
            ),
            self._storage,
        )

    remember = _named(_remember, Facts.remember)
    del _remember
    async_remember = _forward_async(_FACTS, Facts.async_remember)
    remember_many = _forward(_FACTS, Facts.remember_many)
    async_remember_many = _forward_async(_FACTS, Facts.async_remember_many)
    contradict = _forward(_FACTS, Facts.contradict)
    async_contradict = _forward_async(_FACTS, Facts.async_contradict)
    forget = _forward(_FACTS, Facts.forget)
    async_forget = _forward_async(_FACTS, Facts.async_forget)

    def _get_fact(
        self,
        key: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Fact | None:
        # Facts.get_fact's body, not a call of it: every read is a few microseconds, and a
        # forwarding call with keyword arguments was a fifth of one.
        return visible_fact(self._storage.store, key, session_id, user_id, agent_id)

    get_fact = _named(_get_fact, Facts.get_fact)
    del _get_fact
    async_get_fact = _forward_async(_FACTS, Facts.async_get_fact)
    facts = _forward(_FACTS, Facts.facts)
    async_facts = _forward_async(_FACTS, Facts.async_facts)

    # ------------------------------------------------------------------ finding

    recall = _forward(_RECALL, Recall.recall)
    async_recall = _forward_async(_RECALL, Recall.async_recall)
    search = _forward(_SEARCH, RankedSearch.search)
    async_search = _forward_async(_SEARCH, RankedSearch.async_search)

    # ------------------------------------------------------------------ episodes

    record_episode = _forward(_EPISODES, Episodes.record_episode)
    async_record_episode = _forward_async(_EPISODES, Episodes.async_record_episode)
    episode_from_run = _forward(_EPISODES, Episodes.episode_from_run)
    async_episode_from_run = _forward_async(_EPISODES, Episodes.async_episode_from_run)
    episodes = _forward(_EPISODES, Episodes.episodes)
    async_episodes = _forward_async(_EPISODES, Episodes.async_episodes)

    # ------------------------------------------------------------------ procedures

    add_procedure = _forward(_PROCEDURES, Procedures.add_procedure)
    async_add_procedure = _forward_async(_PROCEDURES, Procedures.async_add_procedure)
    record_procedure_use = _forward(_PROCEDURES, Procedures.record_procedure_use)
    async_record_procedure_use = _forward_async(_PROCEDURES, Procedures.async_record_procedure_use)
    get_procedure = _forward(_PROCEDURES, Procedures.get_procedure)
    async_get_procedure = _forward_async(_PROCEDURES, Procedures.async_get_procedure)
    procedures = _forward(_PROCEDURES, Procedures.procedures)
    async_procedures = _forward_async(_PROCEDURES, Procedures.async_procedures)
    match_procedures = _forward(_PROCEDURES, Procedures.match_procedures)
    async_match_procedures = _forward_async(_PROCEDURES, Procedures.async_match_procedures)

    # ------------------------------------------------------------------ users

    identify_user = _forward(_USERS, Users.identify_user)
    async_identify_user = _forward_async(_USERS, Users.async_identify_user)
    get_user = _forward(_USERS, Users.get_user)
    async_get_user = _forward_async(_USERS, Users.async_get_user)
    merge_users = _forward(_USERS, Users.merge_users)
    async_merge_users = _forward_async(_USERS, Users.async_merge_users)
    record_user_activity = _forward(_USERS, Users.record_user_activity)
    async_record_user_activity = _forward_async(_USERS, Users.async_record_user_activity)
    user_context = _forward(_USERS, Users.user_context)
    async_user_context = _forward_async(_USERS, Users.async_user_context)
    thread_id = _forward(_USERS, Users.thread_id)
    async_thread_id = _forward_async(_USERS, Users.async_thread_id)
    forget_user = _forward(_ERASER, UserEraser.forget_user)
    async_forget_user = _forward_async(_ERASER, UserEraser.async_forget_user)

    # ------------------------------------------------------------------ vectors

    flush = _forward(_UPKEEP, VectorUpkeep.flush)
    async_flush = _forward_async(_UPKEEP, VectorUpkeep.async_flush)
    reembed = _forward(_UPKEEP, VectorUpkeep.reembed)
    async_reembed = _forward_async(_UPKEEP, VectorUpkeep.async_reembed)
