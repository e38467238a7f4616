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

Plans the other parts of long-term memory build on (module functions: they need no state, and
take arguments already checked):

* :func:`remember_plan` — ``remember`` without the argument checks.
* :func:`delete_fact_plan` — ``forget`` without them.
* :func:`find_fact_plan` — ``get_fact`` from the visible scopes.
* :func:`scope_facts_plan` — every fact of one scope id.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ValidationError

from memlane._runner import (
    Delete,
    Load,
    LoadByKey,
    Namespaces,
    Plan,
    SaveIf,
    Step,
    async_method,
    sync_method,
)
from memlane._validate import check_fraction
from memlane.errors import CorruptStoreError
from memlane.longterm.fact_model import (
    Fact,
    FactRevision,
    FactScope,
    FactType,
    RememberResult,
    render_value,
)
from memlane.longterm.fact_scopes import (
    FACTS_PREFIX,
    MEMORY_TYPES,
    SCOPE_ORDER,
    check_ids,
    check_key,
    check_scope,
    fact_namespace,
)
from memlane.longterm.namespaces import parse_namespace
from memlane.longterm.storage import Storage, StoragePart
from memlane.longterm.value_checks import check_enum, check_json_value
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry, MemoryScope, new_entry, utc_now

if TYPE_CHECKING:
    from memlane.longterm.users import Users

__all__ = [
    "MEMORY_TYPES",
    "Facts",
    "check_ids",
    "check_key",
    "check_scope",
    "delete_fact_plan",
    "fact_namespace",
    "find_fact_plan",
    "read_fact",
    "remember_plan",
    "scope_facts_plan",
]


_SCALARS = (str, int, float)
_PLAIN_SCALARS = (str, int, float, bool)


def _same_value(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` and ``True`` differ, key order does not matter."""
    if type(a) is type(b) and type(a) in _SCALARS:  # the common case, without two dumps
        return bool(a == b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _plain_copy(value: Any) -> Any:
    """A checked JSON value as stored: its own copy, tuples as lists (scalars as they are)."""
    if type(value) in _PLAIN_SCALARS or value is None:
        return value
    return json.loads(json.dumps(value))


def read_fact(entry: MemoryEntry, where: str) -> Fact:
    """The fact an entry of namespace ``where`` holds.

    Raises:
        CorruptStoreError: It holds none; names the key and the namespace.
    """
    try:
        return Fact.model_validate(entry.content)
    except ValidationError as exc:
        raise CorruptStoreError(f"corrupt fact {entry.key!r} in {where}: {exc}") from exc


def _entry(fact: Fact, entry_id: str | None = None) -> MemoryEntry:
    # The confidence is the entry's importance, so a store's search filters and ranks by it.
    # Built without validation: every field comes from a validated Fact.
    return new_entry(
        entry_id=uuid.uuid4().hex if entry_id is None else entry_id,
        scope=MemoryScope.LONG_TERM,
        key=fact.key,
        content=fact.model_dump(mode="json"),
        metadata={SEARCH_TEXT: f"{fact.key} {render_value(fact.value)}"},
        created_at=utc_now(),
        expires_at=None,
        importance=fact.confidence,
        version=0,
    )


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
    ) -> Plan[RememberResult]:
        """Remembers that ``key`` is ``value`` in a scope; what happened, and the fact.

        * ``created``: the scope did not hold ``key``; a new fact with
          ``times_confirmed=0``.
        * ``confirmed``: it held the same value (JSON equality); ``times_confirmed`` + 1 and
          the confidence becomes the higher of the stored and the given one.
        * ``updated``: it held a different value and ``overwrite`` is true; the value is
          replaced, the old one joins ``history`` with when it was replaced,
          ``times_confirmed`` + 1 and the confidence becomes the given one.
        * ``skipped``: it held the key and ``overwrite`` is false; nothing is written.

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

        Returns:
            A :class:`~memlane.longterm.model.RememberResult`.

        Raises:
            TypeError: A wrongly typed argument, or ``value`` not plain JSON; the message
                names the argument. Nothing is written.
            ValueError: An unknown ``scope`` or ``fact_type``, ``confidence`` outside
                0.0–1.0, an empty key, or a missing (or, for ``global``, given)
                ``scope_id``. Nothing is written.
        """
        key = check_key(key)
        value = _plain_copy(check_json_value(value, "value"))
        checked_scope, checked_id = check_scope(scope, scope_id)
        kind = check_enum(fact_type, FactType, "fact_type")
        confidence = check_fraction(confidence, "confidence")
        if not isinstance(overwrite, bool):
            raise TypeError(f"overwrite must be bool, not {type(overwrite).__name__}")
        result = yield from remember_plan(
            key, value, checked_scope, checked_id, kind, confidence, overwrite
        )
        if result.status != "skipped" and result.fact.fact_type is FactType.USER_PREFERENCE:
            yield from self._preferences_changed_plan(checked_scope, checked_id)
        return result

    remember = sync_method(_remember)
    async_remember = async_method(_remember)

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
            if (yield SaveIf(where, _entry(fact, held.entry_id), held.version)):
                return fact

    contradict = sync_method(_contradict)
    async_contradict = async_method(_contradict)

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
        key = check_key(key)
        return find_fact_plan(key, check_ids(session_id, user_id, agent_id))

    get_fact = sync_method(_get_fact)
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
        names: list[str] = yield Namespaces()
        found: list[tuple[int, str, str]] = []
        for name in names:
            parts = parse_namespace(name)
            if tuple(parts[:2]) != FACTS_PREFIX or len(parts) not in (3, 4):
                continue
            try:
                kind = FactScope(parts[2])
            except ValueError:
                continue
            if wanted is None or kind is wanted:
                found.append((SCOPE_ORDER.index(kind), parts[3] if len(parts) == 4 else "", name))
        facts: list[Fact] = []
        for _, _, name in sorted(found):
            entries: list[MemoryEntry] = yield Load(name)
            facts.extend(read_fact(e, name) for e in entries if e.key is not None)
        return facts

    facts = sync_method(_facts)
    async_facts = async_method(_facts)


def remember_plan(
    key: str,
    value: Any,
    scope: FactScope,
    scope_id: str | None,
    fact_type: FactType,
    confidence: float,
    overwrite: bool,
) -> Plan[RememberResult]:
    """``remember`` with arguments already checked (``value`` plain JSON, lists not tuples).

    Keeps no cached preferences in step: a caller that changes a ``user_preference`` fact
    refreshes them (users do, after merging facts). The compare-and-swap retry loop is here.
    """
    where = fact_namespace(scope, scope_id)
    while True:
        held: MemoryEntry | None = yield LoadByKey(where, key)
        now = utc_now()
        if held is None:
            fact = Fact(
                key=key,
                value=value,
                fact_type=fact_type,
                scope=scope,
                scope_id=scope_id,
                confidence=confidence,
                created_at=now,
                updated_at=now,
            )
            if (yield SaveIf(where, _entry(fact), None)):
                return RememberResult(status="created", fact=fact)
            continue
        old = read_fact(held, where)
        status: Literal["confirmed", "updated"]
        if _same_value(old.value, value):
            status = "confirmed"
            fact = old.model_copy(
                update={
                    "times_confirmed": old.times_confirmed + 1,
                    "confidence": max(old.confidence, confidence),
                    "updated_at": now,
                }
            )
        elif not overwrite:
            return RememberResult(status="skipped", fact=old)
        else:
            status = "updated"
            revision = FactRevision(value=old.value, replaced_at=now)
            fact = old.model_copy(
                update={
                    "value": value,
                    "times_confirmed": old.times_confirmed + 1,
                    "confidence": confidence,
                    "updated_at": now,
                    "history": [*old.history, revision],
                }
            )
        new = _entry(fact, held.entry_id)
        if (yield SaveIf(where, new, held.version)):
            return RememberResult(status=status, fact=fact)


def delete_fact_plan(key: str, scope: FactScope, scope_id: str | None) -> Plan[Fact | None]:
    """Deletes the fact ``key`` of one scope id (arguments checked); the fact, if it was there.

    Keeps no cached preferences in step (see :func:`remember_plan`).
    """
    where = fact_namespace(scope, scope_id)
    held: MemoryEntry | None = yield LoadByKey(where, key)
    if held is None:
        return None
    deleted: bool = yield Delete(where, held.entry_id)
    return read_fact(held, where) if deleted else None


def find_fact_plan(key: str, visible: list[tuple[FactScope, str | None]]) -> Plan[Fact | None]:
    """The fact ``key`` of the first of the ``visible`` scopes (most specific first) holding it."""
    for scope, scope_id in visible:
        where = fact_namespace(scope, scope_id)
        held: MemoryEntry | None = yield LoadByKey(where, key)
        if held is not None:
            return read_fact(held, where)
    return None


def scope_facts_plan(scope: FactScope, scope_id: str | None) -> Plan[list[Fact]]:
    """Every fact of one scope id, in creation order (arguments already checked)."""
    where = fact_namespace(scope, scope_id)
    entries: list[MemoryEntry] = yield Load(where)
    return [read_fact(e, where) for e in entries if e.key is not None]
