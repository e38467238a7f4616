"""Facts: remembered key-value knowledge in four scopes, with confirmation and contradiction.

Each fact lives under its key in the namespace of its scope
(``namespace("longterm", "facts", scope, scope_id)``; the ``global`` scope has no id), as
one keyed entry whose content is the :class:`~memlane.longterm.model.Fact`. Every operation
is written once as a plan (see :mod:`memlane._runner`) and becomes a sync method and an
``async_`` twin of :class:`Facts`.

``remember`` and ``contradict`` read a fact, change it and write it back with the store's
``save_if`` against the version they read, retrying when another writer got there first: of
writers racing on one key, in one process or many, each change lands exactly once, so two
processes confirming a fact 20 times each leave one fact confirmed 39 times.

``remember_many`` remembers a batch under the same rules, one compare-and-swap per fact, and
hands the batch's texts to the embedder together. ``remember(..., dedupe=0.92)`` first looks
for a fact of the same scope whose value means the same, and confirms it instead of adding a
near-duplicate under a new key.

The plans other parts build on (``remember_plan``, ``delete_fact_plan``, ``find_fact_plan``,
``scope_facts_plan``, ``read_fact``) live in :mod:`memlane.longterm.fact_plans` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from memlane._runner import (
    Done,
    LoadByKey,
    Plan,
    SaveIf,
    Step,
    async_method,
    describe,
    sync_method,
)
from memlane._validate import check_fraction
from memlane.longterm.fact_model import Fact, FactScope, FactType, RememberResult
from memlane.longterm.fact_plans import (
    delete_fact_plan,
    fact_entry,
    find_fact_plan,
    listed_facts_plan,
    near_duplicate_plan,
    read_fact,
    remember_now,
    remember_plan,
    scope_facts_plan,
)
from memlane.longterm.fact_reads import FindFact, visible_fact
from memlane.longterm.fact_scopes import (
    MEMORY_TYPES,
    cached_settings,
    check_ids,
    check_key,
    check_pairs,
    check_scope,
    check_settings,
    fact_namespace,
    visible_namespaces,
)
from memlane.longterm.storage import (
    Storage,
    StoragePart,
    async_writing_method,
    run_written,
    writing_method,
)
from memlane.longterm.value_checks import check_enum, checked_copy
from memlane.stores.in_memory import InMemoryStore
from memlane.stores.protocol import next_version
from memlane.types import MemoryEntry, utc_now

if TYPE_CHECKING:
    from memlane.longterm.users import Users

__all__ = [
    "MEMORY_TYPES",
    "Facts",
    "check_ids",
    "check_key",
    "check_scope",
    "delete_fact_plan",
    "fact_entry",
    "fact_namespace",
    "find_fact_plan",
    "read_fact",
    "remember_plan",
    "scope_facts_plan",
]


class Facts(StoragePart):
    """The facts of one long-term memory; every operation has an ``async_`` twin.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
        users: The memory's users, whose cached preferences follow their
            ``user_preference`` facts; ``None`` for facts alone.
        contradiction_penalty: What one ``contradict`` takes away by default.
    """

    CONTRADICTION_PENALTY: ClassVar[float] = 0.2
    """How much confidence one ``contradict`` takes away by default (clamped at 0.0)."""

    def __init__(
        self,
        storage: Storage,
        *,
        users: Users | None = None,
        contradiction_penalty: float = CONTRADICTION_PENALTY,
    ) -> None:
        super().__init__(storage)
        self._users = users
        self._penalty = contradiction_penalty

    # ------------------------------------------------------------------ writing

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
    ) -> Step[RememberResult]:
        """Remembers that ``key`` is ``value`` in a scope; what happened, and the fact.

        * ``created``: the scope did not hold ``key``; a new fact with
          ``times_confirmed=0``.
        * ``confirmed``: it held the same value (JSON equality); ``times_confirmed`` + 1 and
          the confidence becomes the higher of the stored and the given one.
        * ``updated``: it held a different value and ``overwrite`` is true; the value is
          replaced, the old one joins ``history`` with when it was replaced,
          ``times_confirmed`` + 1 and the confidence becomes the given one.
        * ``skipped``: it held the key and ``overwrite`` is false; nothing is written.

        With ``dedupe`` (a cosine threshold, e.g. ``0.92``; off by default) and a scope that
        does not hold ``key``, a fact of the same scope whose value means the same (its
        value's embedding at least that close to ``value``'s) is ``confirmed`` instead, and
        returned: no near-duplicate is added under a new key. It needs an embedder.

        A fact keeps the ``fact_type`` and ``created_at`` it was created with. Safe under
        concurrent writers in any number of processes: each call lands exactly once.

        Args:
            key: The fact's name: a non-empty string without NUL.
            value: Any plain JSON value (tuples are stored as lists).
            scope: ``session``, ``user``, ``agent`` or ``global``.
            scope_id: The session, user or agent id; required for those scopes and refused
                for ``global``.
            fact_type: ``user_preference``, ``world_knowledge``, ``self_knowledge``,
                ``correction`` or ``relationship``.
            confidence: 0.0–1.0.
            overwrite: Whether a different value replaces a held one.
            dedupe: ``None`` (off), or above 0.0 up to 1.0: how close in meaning a held
                value must be to be confirmed instead.

        Returns:
            A :class:`~memlane.longterm.model.RememberResult`.

        Raises:
            TypeError: A wrongly typed argument, or ``value`` not plain JSON; the message
                names the argument. Nothing is written.
            ValueError: An unknown ``scope`` or ``fact_type``, ``confidence`` outside
                0.0–1.0, ``dedupe`` outside (0.0, 1.0], an empty key, a missing (or, for ``global``, given)
                ``scope_id``, or ``dedupe`` without an embedder (names ``embedder``).
                Nothing is written.
        """
        return self._remember_step(
            key, value, scope, scope_id, fact_type, confidence, overwrite, dedupe
        )

    def _remember_now(
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
        # _remember's step made and run here, its arguments passed on by position (as
        # get_fact): the plan method's keyword call was a thirtieth of an in-memory remember. A
        # test holds the defaults equal to _remember's.
        return run_written(
            self._remember_step(
                key, value, scope, scope_id, fact_type, confidence, overwrite, dedupe
            ),
            self._storage,
        )

    def _remember_step(
        self,
        key: str,
        value: Any,
        scope: FactScope | str,
        scope_id: str | None,
        fact_type: FactType | str,
        confidence: float,
        overwrite: bool,
        dedupe: float | None,
    ) -> Step[RememberResult]:
        """``remember``'s checks, then its write: done at once in process memory without an
        embedder (a :class:`~memlane._runner.Done`), else the plan."""
        if type(key) is not str or not key or "\x00" in key:  # check_key's pass, inlined
            key = check_key(key)
        value = checked_copy(value, "value")
        if (
            (type(scope) is str or type(scope) is FactScope)
            and (scope_id is None or type(scope_id) is str)
            and (type(fact_type) is str or type(fact_type) is FactType)
        ):
            checked_scope, checked_id, kind = cached_settings(scope, scope_id, fact_type)
        else:
            checked_scope, checked_id, kind = check_settings(scope, scope_id, fact_type)
        if type(confidence) is not float or not 0.0 <= confidence <= 1.0:  # its pass, inlined
            confidence = check_fraction(confidence, "confidence")
        if type(overwrite) is not bool:
            raise TypeError(f"overwrite must be bool, not {type(overwrite).__name__}")
        if dedupe is not None:
            dedupe = check_fraction(dedupe, "dedupe")
            if dedupe == 0.0:
                # Every cosine of unit vectors of texts is at least about 0, so a zero
                # threshold would confirm an unrelated fact and drop the value given.
                raise ValueError(
                    "dedupe must be above 0.0 (e.g. 0.92): 0.0 would take any fact of the "
                    "scope for the same one; pass None to turn it off"
                )
            if self._storage.embedder is None:
                raise ValueError("dedupe needs an embedder: pass embedder= to the memory")
            return self._deduped_plan(
                key, value, checked_scope, checked_id, kind, confidence, overwrite, dedupe
            )
        storage = self._storage
        store = storage.store
        if type(store) is InMemoryStore and storage.writer is None:
            # In process memory nothing can block and, without an embedder, nothing is
            # embedded: the plan's steps run here, without the runner (inline_store's test).
            result = remember_now(
                store, key, value, checked_scope, checked_id, kind, confidence, overwrite
            )
            if self._changes_preferences(result, checked_scope):
                return self._preferences_then(result, checked_scope, checked_id)
            return Done(result)
        plan = remember_plan(key, value, checked_scope, checked_id, kind, confidence, overwrite)
        return self._remember_then(plan, checked_scope, checked_id)

    def _deduped_plan(
        self,
        key: str,
        value: Any,
        scope: FactScope,
        scope_id: str | None,
        kind: FactType,
        confidence: float,
        overwrite: bool,
        dedupe: float,
    ) -> Plan[RememberResult]:
        same = yield from near_duplicate_plan(self._storage, key, value, scope, scope_id, dedupe)
        if same is not None:
            key, value = same.key, same.value
        plan = remember_plan(key, value, scope, scope_id, kind, confidence, overwrite)
        return (yield from self._remember_then(plan, scope, scope_id))

    def _remember_then(
        self, plan: Plan[RememberResult], scope: FactScope, scope_id: str | None
    ) -> Plan[RememberResult]:
        """``plan``, then the cached preferences kept in step if it changed one of them."""
        result = yield from plan
        if self._changes_preferences(result, scope):
            yield from self._preferences_changed_plan(scope, scope_id)
        return result

    def _preferences_then(
        self, result: RememberResult, scope: FactScope, scope_id: str | None
    ) -> Plan[RememberResult]:
        yield from self._preferences_changed_plan(scope, scope_id)
        return result

    def _changes_preferences(self, result: RememberResult, scope: FactScope) -> bool:
        return (
            result.status != "skipped"
            and result.fact.fact_type is FactType.USER_PREFERENCE
            and scope is FactScope.USER
            and self._users is not None
        )

    remember = describe(_remember_now, _remember, sync=True)
    del _remember_now
    async_remember = async_writing_method(_remember)

    def _remember_many(
        self,
        facts: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        scope: FactScope | str = "global",
        scope_id: str | None = None,
        fact_type: FactType | str = "world_knowledge",
        confidence: float = 0.8,
        overwrite: bool = True,
    ) -> Plan[list[RememberResult]]:
        """Remembers many facts of one scope, each as ``remember`` would; what happened to each.

        Every fact is checked before anything is written. Each is written with its own
        compare-and-swap (safe under concurrent writers, as ``remember`` is), and with an
        embedder their texts are embedded together, in batches, after the call returns.

        Args:
            facts: ``{key: value}``, or ``(key, value)`` pairs in order (a key given twice
                is remembered twice: created, then confirmed or updated).
            scope: As for ``remember``, for all of them.
            scope_id: As for ``remember``.
            fact_type: As for ``remember``.
            confidence: As for ``remember``.
            overwrite: As for ``remember``.

        Returns:
            One :class:`~memlane.longterm.model.RememberResult` per fact, in order.

        Raises:
            TypeError, ValueError: As ``remember``, for any fact or setting (the message
                names it), or ``facts`` is neither a mapping nor pairs. Nothing is written.
        """
        pairs = check_pairs(facts)
        checked_scope, checked_id = check_scope(scope, scope_id)
        kind = check_enum(fact_type, FactType, "fact_type")
        confidence = check_fraction(confidence, "confidence")
        if not isinstance(overwrite, bool):
            raise TypeError(f"overwrite must be bool, not {type(overwrite).__name__}")
        results: list[RememberResult] = []
        for key, value in pairs:
            result = yield from remember_plan(
                key, value, checked_scope, checked_id, kind, confidence, overwrite
            )
            results.append(result)
        if any(
            r.status != "skipped" and r.fact.fact_type is FactType.USER_PREFERENCE for r in results
        ):
            yield from self._preferences_changed_plan(checked_scope, checked_id)
        return results

    remember_many = writing_method(_remember_many, bulk=True)
    async_remember_many = async_writing_method(_remember_many, bulk=True)

    def _preferences_changed_plan(self, scope: FactScope, scope_id: str | None) -> Plan[None]:
        """Keeps a user's cached preferences in step when a preference fact of theirs changed."""
        if scope is FactScope.USER and scope_id is not None and self._users is not None:
            yield from self._users.refresh_preferences_plan(scope_id)

    def _contradict(
        self,
        key: str,
        *,
        scope: FactScope | str = "global",
        scope_id: str | None = None,
        penalty: float | None = None,
    ) -> Plan[Fact | None]:
        """Records evidence against a fact: ``times_contradicted`` + 1, confidence lowered.

        The confidence drops by ``penalty`` (:attr:`CONTRADICTION_PENALTY`, 0.2, by default)
        and never below 0.0: a fact remembered at the default 0.8 falls under ``recall``'s
        default ``min_confidence`` of 0.5 after two contradictions. Safe under concurrent
        writers, as ``remember`` is.

        Args:
            key: The fact's key.
            scope: The fact's scope.
            scope_id: Its id (as for ``remember``).
            penalty: 0.0–1.0 taken off the confidence.

        Returns:
            The fact as stored after the call, or ``None`` (nothing written) when the scope
            does not hold ``key``.

        Raises:
            TypeError, ValueError: As for ``remember``.
        """
        key = check_key(key)
        checked_scope, checked_id = check_scope(scope, scope_id)
        step = check_fraction(self._penalty if penalty is None else penalty, "penalty")
        where = fact_namespace(checked_scope, checked_id)
        while True:
            held: MemoryEntry | None = yield LoadByKey(where, key)
            if held is None:
                return None
            old = read_fact(held, where)
            fact = old.model_copy(
                update={
                    "times_contradicted": old.times_contradicted + 1,
                    "confidence": round(max(0.0, old.confidence - step), 9),
                    "updated_at": utc_now(),
                }
            )
            new = fact_entry(fact, held.entry_id, next_version(held.version))
            if (yield SaveIf(where, new, held.version)):
                return fact

    contradict = writing_method(_contradict)
    async_contradict = async_writing_method(_contradict)

    def _forget(
        self, key: str, *, scope: FactScope | str = "global", scope_id: str | None = None
    ) -> Plan[bool]:
        """Removes a fact from one scope; whether it was there.

        Raises:
            TypeError, ValueError: As for ``remember``.
        """
        key = check_key(key)
        checked_scope, checked_id = check_scope(scope, scope_id)
        deleted = yield from delete_fact_plan(key, checked_scope, checked_id)
        if deleted is not None and deleted.fact_type is FactType.USER_PREFERENCE:
            yield from self._preferences_changed_plan(checked_scope, checked_id)
        return deleted is not None

    forget = sync_method(_forget)
    async_forget = async_method(_forget)

    # ------------------------------------------------------------------ reading

    def _get_fact(
        self,
        key: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Step[Fact | None]:
        """The fact ``key`` as seen from these ids: session → user → agent → global.

        A scope is consulted only when its id is given, ``global`` always; the most specific
        scope holding ``key`` wins.

        Returns:
            The first fact found, or ``None``.

        Raises:
            TypeError, ValueError: A key or id that is not a non-empty ``str``.
        """
        if type(key) is not str or not key or "\x00" in key:  # check_key's pass, inlined
            key = check_key(key)
        return FindFact(visible_namespaces(session_id, user_id, agent_id), key)

    def _get_fact_now(
        self,
        key: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Fact | None:
        # _get_fact's operation run at once, without making it (see visible_fact).
        return visible_fact(self._storage.store, key, session_id, user_id, agent_id)

    get_fact = describe(_get_fact_now, _get_fact, sync=True)
    del _get_fact_now
    async_get_fact = async_method(_get_fact)

    def _facts(
        self, *, scope: FactScope | str | None = None, scope_id: str | None = None
    ) -> Plan[list[Fact]]:
        """Every stored fact, or those of one scope, or of one scope id.

        Args:
            scope: Only this scope (``None``: all).
            scope_id: Only this id of ``scope`` (``None``: every id of it).

        Returns:
            Facts ordered by scope (session, user, agent, global), then scope id, then the
            order they were created in.

        Raises:
            ValueError: An unknown scope, a ``scope_id`` without a ``scope``, or one for
                ``global``.
        """
        if scope is None:
            if scope_id is not None:
                raise ValueError(f"scope_id {scope_id!r} needs a scope")
            wanted = None
        else:
            checked = check_enum(scope, FactScope, "scope")
            if scope_id is not None or checked is FactScope.GLOBAL:
                checked, checked_id = check_scope(checked, scope_id)
                return (yield from scope_facts_plan(checked, checked_id))
            wanted = checked
        return (yield from listed_facts_plan(wanted))

    facts = sync_method(_facts)
    async_facts = async_method(_facts)
