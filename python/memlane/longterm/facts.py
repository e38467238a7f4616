"""Facts: remembered key-value knowledge in four scopes, with confirmation and contradiction.

Each fact lives under its key in the namespace of its scope
(``namespace("longterm", "facts", scope, scope_id)``; the ``global`` scope has no id), as
one keyed entry whose content is the :class:`~memlane.longterm.model.Fact`. Every operation
is written once as a plan (see :mod:`memlane._runner`) and becomes a sync method and an
``async_`` twin.

``remember`` and ``contradict`` read a fact, change it and write it back with the store's
``save_if`` against the version they read, retrying when another writer got there first: of
writers racing on one key, in one process or many, each change lands exactly once, so two
processes confirming a fact 20 times each leave one fact confirmed 39 times.

Plans other long-term modules build on (each a generator for the runners, arguments already
checked):

* :meth:`FactsMixin._remember_plan` — ``remember`` without the argument checks.
* :meth:`FactsMixin._visible_facts_plan` — the facts seen from a session, user and agent.
* :meth:`FactsMixin._scope_facts_plan` — every fact of one scope id.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import ValidationError

from memlane._runner import Plan, StoreCall, async_method, sync_method
from memlane._validate import check_fraction, check_identifier, check_positive_int, check_str
from memlane.errors import CorruptStoreError
from memlane.longterm.fuzzy import matches_words, query_words
from memlane.longterm.model import (
    Fact,
    FactRevision,
    FactScope,
    FactType,
    RememberResult,
    check_enum,
    check_json_value,
    namespace,
    parse_namespace,
    render_value,
)
from memlane.stores import MemoryStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry, MemoryScope, new_entry, utc_now

__all__ = ["MEMORY_TYPES", "FactsMixin", "check_ids", "check_scope", "fact_namespace"]

MEMORY_TYPES = ("facts", "procedures", "episodes", "all")
"""What ``recall(query=...)`` searches."""

_PREFIX = ("longterm", "facts")
_HIERARCHY = (FactScope.SESSION, FactScope.USER, FactScope.AGENT, FactScope.GLOBAL)


@functools.lru_cache(maxsize=4096)
def fact_namespace(scope: FactScope, scope_id: str | None) -> str:
    """The namespace holding the facts of one scope id (``global``: no id).

    Cached: every read and write of a fact builds it, and escaping the parts costs more than
    the store's lookup of the key.
    """
    if scope is FactScope.GLOBAL:
        return namespace(*_PREFIX, scope.value)
    assert scope_id is not None
    return namespace(*_PREFIX, scope.value, scope_id)


def check_scope(scope: object, scope_id: object) -> tuple[FactScope, str | None]:
    """A scope and its id: required for every scope but ``global``, refused for ``global``.

    Refusing an id for ``global`` catches ``remember(k, v, scope_id="u1")`` with the scope
    forgotten, which would otherwise write a fact every user sees.
    """
    checked = check_enum(scope, FactScope, "scope")
    if checked is FactScope.GLOBAL:
        if scope_id is not None:
            raise ValueError(
                f"scope_id must be None for the global scope, got {scope_id!r} "
                "(pass scope='session', 'user' or 'agent' to scope a fact)"
            )
        return checked, None
    if scope_id is None:
        raise ValueError(f"scope {checked.value!r} needs a scope_id")
    return checked, check_identifier(scope_id, "scope_id")


def check_ids(
    session_id: object, user_id: object, agent_id: object
) -> list[tuple[FactScope, str | None]]:
    """The scopes visible from these ids, most specific first; ``global`` always."""
    visible: list[tuple[FactScope, str | None]] = []
    for scope, given, name in (
        (FactScope.SESSION, session_id, "session_id"),
        (FactScope.USER, user_id, "user_id"),
        (FactScope.AGENT, agent_id, "agent_id"),
    ):
        if given is not None:
            visible.append((scope, check_identifier(given, name)))
    visible.append((FactScope.GLOBAL, None))
    return visible


def _check_key(key: object) -> str:
    return check_identifier(key, "key")


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


def _fact(entry: MemoryEntry, where: str) -> Fact:
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


def _fuzzy_candidate(words: list[str], *, by_key: bool) -> Callable[[MemoryEntry], bool]:
    """Whether a stored fact may match ``words``, from its entry alone: by its key, or by the
    search text memlane stores with every fact (its key and its value's text, what a query
    matches). An entry without that text is kept, for its fact to be matched."""

    def candidate(entry: MemoryEntry) -> bool:
        if by_key:
            return matches_words(words, entry.key or "")
        text = entry.metadata.get(SEARCH_TEXT) if isinstance(entry.metadata, dict) else None
        return not isinstance(text, str) or matches_words(words, text)

    return candidate


def _by_confidence(facts: list[Fact], min_confidence: float, limit: int) -> list[Fact]:
    kept = [f for f in facts if f.confidence >= min_confidence]
    kept.sort(key=lambda f: f.confidence, reverse=True)  # stable: ties keep scope order
    return kept[:limit]


class FactsMixin:
    """The facts half of :class:`~memlane.longterm.LongTermMemory` (needs ``self.store``)."""

    store: MemoryStore

    CONTRADICTION_PENALTY: ClassVar[float] = 0.2
    """How much confidence one ``contradict`` takes away by default (clamped at 0.0)."""

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
        key = _check_key(key)
        value = _plain_copy(check_json_value(value, "value"))
        checked_scope, checked_id = check_scope(scope, scope_id)
        kind = check_enum(fact_type, FactType, "fact_type")
        confidence = check_fraction(confidence, "confidence")
        if not isinstance(overwrite, bool):
            raise TypeError(f"overwrite must be bool, not {type(overwrite).__name__}")
        result = yield from self._remember_plan(
            key, value, checked_scope, checked_id, kind, confidence, overwrite
        )
        if result.status != "skipped" and result.fact.fact_type is FactType.USER_PREFERENCE:
            yield from self._preferences_changed_plan(checked_scope, checked_id)
        return result

    remember = sync_method(_remember)
    async_remember = async_method(_remember)

    def _remember_plan(
        self,
        key: str,
        value: Any,
        scope: FactScope,
        scope_id: str | None,
        fact_type: FactType,
        confidence: float,
        overwrite: bool,
    ) -> Plan[RememberResult]:
        """``remember`` with arguments already checked (``value`` plain JSON, lists not tuples).

        For other long-term modules (users keep their cached preferences in step through
        it); the compare-and-swap retry loop is here.
        """
        where = fact_namespace(scope, scope_id)
        while True:
            held: MemoryEntry | None = yield StoreCall("load_by_key", (where, key))
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
                if (yield StoreCall("save_if", (where, _entry(fact), None))):
                    return RememberResult(status="created", fact=fact)
                continue
            old = _fact(held, where)
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
            if (yield StoreCall("save_if", (where, new, held.version))):
                return RememberResult(status=status, fact=fact)  # type: ignore[arg-type]

    def _preferences_changed_plan(self, scope: FactScope, scope_id: str | None) -> Plan[None]:
        """Keeps a user's cached preferences in step when a preference fact of theirs changed.

        The hook is the users mixin's; a class without it (facts alone) has no cache to keep.
        """
        refresh = getattr(self, "_refresh_preferences_plan", None)
        if scope is FactScope.USER and refresh is not None:
            yield from refresh(scope_id)

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
        key = _check_key(key)
        checked_scope, checked_id = check_scope(scope, scope_id)
        step = check_fraction(self.CONTRADICTION_PENALTY if penalty is None else penalty, "penalty")
        where = fact_namespace(checked_scope, checked_id)
        while True:
            held: MemoryEntry | None = yield StoreCall("load_by_key", (where, key))
            if held is None:
                return None
            old = _fact(held, where)
            fact = old.model_copy(
                update={
                    "times_contradicted": old.times_contradicted + 1,
                    "confidence": round(max(0.0, old.confidence - step), 9),
                    "updated_at": utc_now(),
                }
            )
            if (yield StoreCall("save_if", (where, _entry(fact, held.entry_id), held.version))):
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
        key = _check_key(key)
        where = fact_namespace(*check_scope(scope, scope_id))
        held: MemoryEntry | None = yield StoreCall("load_by_key", (where, key))
        if held is None:
            return False
        deleted: bool = yield StoreCall("delete", (where, held.entry_id))
        if deleted and _fact(held, where).fact_type is FactType.USER_PREFERENCE:
            yield from self._preferences_changed_plan(*check_scope(scope, scope_id))
        return deleted

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
    ) -> Plan[Fact | None]:
        """The fact ``key`` as seen from these ids: session → user → agent → global.

        A scope is consulted only when its id is given, ``global`` always; the most specific
        scope holding ``key`` wins.

        Returns:
            The first fact found, or ``None``.

        Raises:
            TypeError, ValueError: A key or id that is not a non-empty ``str``.
        """
        key = _check_key(key)
        for scope, scope_id in check_ids(session_id, user_id, agent_id):
            where = fact_namespace(scope, scope_id)
            held: MemoryEntry | None = yield StoreCall("load_by_key", (where, key))
            if held is not None:
                return _fact(held, where)
        return None

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
                return (yield from self._scope_facts_plan(checked, checked_id))
            wanted = checked
        names: list[str] = yield StoreCall("namespaces", ())
        found: list[tuple[int, str, str]] = []
        for name in names:
            parts = parse_namespace(name)
            if tuple(parts[:2]) != _PREFIX or len(parts) not in (3, 4):
                continue
            try:
                kind = FactScope(parts[2])
            except ValueError:
                continue
            if wanted is None or kind is wanted:
                found.append((_HIERARCHY.index(kind), parts[3] if len(parts) == 4 else "", name))
        facts: list[Fact] = []
        for _, _, name in sorted(found):
            entries: list[MemoryEntry] = yield StoreCall("load", (name,))
            facts.extend(_fact(e, name) for e in entries if e.key is not None)
        return facts

    facts = sync_method(_facts)
    async_facts = async_method(_facts)

    def _scope_facts_plan(self, scope: FactScope, scope_id: str | None) -> Plan[list[Fact]]:
        """Every fact of one scope id, in creation order (arguments already checked)."""
        where = fact_namespace(scope, scope_id)
        entries: list[MemoryEntry] = yield StoreCall("load", (where,))
        return [_fact(e, where) for e in entries if e.key is not None]

    def _visible_facts_plan(
        self,
        session_id: str | None,
        user_id: str | None,
        agent_id: str | None,
        wanted: Callable[[MemoryEntry], bool] | None = None,
    ) -> Plan[list[Fact]]:
        """The facts seen from these (already checked) ids, most specific scope first.

        A key held by several visible scopes appears once, from the most specific one, as
        ``get_fact`` would return it. ``wanted`` picks entries before their facts are read:
        reading (validating) a fact costs far more than a look at its stored key or search
        text, and a search over many facts keeps few.
        """
        seen: set[str] = set()
        visible: list[Fact] = []
        for scope, scope_id in check_ids(session_id, user_id, agent_id):
            where = fact_namespace(scope, scope_id)
            entries: list[MemoryEntry] = yield StoreCall("load", (where,))
            for entry in entries:
                key = entry.key
                if key is None or key in seen:
                    continue
                seen.add(key)  # a more specific scope's fact hides this key, wanted or not
                if wanted is None or wanted(entry):
                    visible.append(_fact(entry, where))
        return visible

    def _recall(
        self,
        key: str | None = None,
        *,
        query: str | None = None,
        memory_type: str = "facts",
        limit: int = 10,
        min_confidence: float = 0.5,
        session_id: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> Plan[list[Any]]:
        """What long-term memory holds about ``key`` or ``query``; always a list.

        * Neither: the facts visible from the ids (as :meth:`get_fact` sees them); other
          memories are only searched, so ``procedures`` or ``episodes`` give ``[]``.
        * ``key``: the fact ``get_fact`` finds; when there is none, the visible facts whose
          key matches ``key`` by the fuzzy rule (see :mod:`memlane.longterm.fuzzy`).
        * ``query``: the records of ``memory_type`` matching ``query`` by the fuzzy rule:
          a fact by its key and its value's text (``str`` as is, else JSON), procedures and
          episodes as their modules define.

        Facts are kept when their confidence is at least ``min_confidence`` and come highest
        confidence first. With ``memory_type="all"`` facts come first, then procedures,
        then episodes, ``limit`` in all.

        Args:
            key: A fact's key.
            query: Words to search for; not together with ``key``.
            memory_type: ``facts``, ``procedures``, ``episodes`` or ``all``.
            limit: At most this many results.
            min_confidence: 0.0–1.0.
            session_id: See the session scope.
            user_id: See the user scope.
            agent_id: See the agent scope.

        Raises:
            TypeError, ValueError: A bad argument, named in the message; both ``key`` and
                ``query``, or a query without words.
        """
        if key is not None:
            key = _check_key(key)
        if query is not None:
            check_str(query, "query")
            if key is not None:
                raise ValueError("pass key or query, not both")
        if not isinstance(memory_type, str) or memory_type not in MEMORY_TYPES:
            allowed = ", ".join(repr(t) for t in MEMORY_TYPES)
            raise ValueError(f"memory_type must be one of {allowed}, got {memory_type!r}")
        limit = check_positive_int(limit, "limit")
        min_confidence = check_fraction(min_confidence, "min_confidence")
        check_ids(session_id, user_id, agent_id)
        words = query_words(key if key is not None else query or "")
        if query is not None and not words:
            raise ValueError(f"query must hold at least one word, got {query!r}")

        results: list[Any] = []
        if memory_type in ("facts", "all"):
            if key is not None:
                exact = yield from self._get_fact(
                    key, session_id=session_id, user_id=user_id, agent_id=agent_id
                )
                if exact is not None:
                    return _by_confidence([exact], min_confidence, limit)
            searching = key is not None or query is not None
            visible = yield from self._visible_facts_plan(
                session_id,
                user_id,
                agent_id,
                _fuzzy_candidate(words, by_key=key is not None) if searching else None,
            )
            if key is not None:
                visible = [f for f in visible if matches_words(words, f.key)]
            elif query is not None:
                visible = [
                    f for f in visible if matches_words(words, f"{f.key} {render_value(f.value)}")
                ]
            results.extend(_by_confidence(visible, min_confidence, limit))
        if key is None and query is None:
            return results
        for kind, hook in (
            ("procedures", "_search_procedures_plan"),
            ("episodes", "_search_episodes_plan"),
        ):
            if memory_type in (kind, "all") and len(results) < limit:
                # The hooks are the episodes and procedures mixins'; facts alone have neither.
                search = getattr(self, hook, None)
                if search is not None:
                    results.extend((yield from search(words, limit - len(results))))
        return results

    recall = sync_method(_recall)
    async_recall = async_method(_recall)
