"""Every change an operator makes to a store: deletes, edits and forgetting a person.

Each change is logged on the ``memlane.audit`` logger at WARNING *before* it is made (who,
what kind, which ids), so a change interrupted halfway is still on record and an operator
running at ``--log-level warning`` keeps the trail. Tokens and values are never logged.

Deletes of plain entries (facts, episodes, procedures, working memory, users with their
identifier entries) go through the store's ``delete_many``: one transaction per namespace on
SQLite and PostgreSQL, so a batch is all or nothing there.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memlane._runner import LoadByKey, Plan, SaveIf, run_sync
from memlane._validate import check_fraction, check_identifier
from memlane.errors import NotFoundError, UserNotFoundError
from memlane.longterm import Fact, MemoryUser
from memlane.longterm.episodes import EPISODES_NAMESPACE
from memlane.longterm.facts import fact_namespace
from memlane.longterm.model import check_json_value
from memlane.longterm.procedures import PROCEDURES_NAMESPACE, update_record
from memlane.longterm.users import IDENTIFIERS_NAMESPACE, USERS_NAMESPACE
from memlane.records import people
from memlane.records.ids import KINDS, WORKING_PREFIX, check_ids, fact_id, parse_fact_id
from memlane.records.listing import count, to_json, working_row
from memlane.stores import ConditionalStore, MemoryStore
from memlane.working import WorkingMemory

if TYPE_CHECKING:
    from memlane.records.browse import Records

__all__ = [
    "AUDIT",
    "UNSET",
    "RecordNotFoundError",
    "delete",
    "delete_working",
    "forget_user",
    "set_fact",
    "update_fact",
    "update_user",
    "update_working",
]

AUDIT = logging.getLogger("memlane.audit")
"""Where every delete, edit and forget is recorded, at WARNING, before it happens."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""The default of an edit's ``value``: leave the value as it is (``None`` is a value)."""


class RecordNotFoundError(NotFoundError):
    """A fact or working-memory entry that an edit names does not exist."""


def _who(actor: str | None) -> str:
    return actor or "memlane"


def _one_line(value: object) -> object:
    """``value`` with every control or line-separating character escaped (``\\n``,
    ``\\x1b``, ``\\u2028``): ids come from callers, and one holding a line break must not
    write a second, forged line into the audit trail."""
    if not isinstance(value, str):
        return value
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp")
        else ch
        for ch in value
    )


def _audit(message: str, *args: object) -> None:
    """One WARNING line on :data:`AUDIT`, each argument kept to that one line."""
    AUDIT.warning(message, *(_one_line(arg) for arg in args))


def _delete_many(store: MemoryStore, where: str, entry_ids: list[str]) -> list[str]:
    if not entry_ids:
        return []
    if isinstance(store, ConditionalStore):
        deleted: list[str] = store.delete_many(where, entry_ids)
        return deleted
    # A store written to the base protocol alone has no batch delete: one by one, as the
    # conversation runner treats such stores.
    return [e for e in entry_ids if store.delete(where, e)]


def delete(
    records: Records,
    kind: str,
    ids: Sequence[str],
    *,
    progress: Callable[[int], None] | None = None,
    actor: str | None = None,
) -> dict[str, list[str]]:
    """See :meth:`memlane.records.Records.delete`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    checked = list(dict.fromkeys(check_ids(list(ids))))  # an id given twice is deleted once
    if kind == "facts":
        for i in checked:
            parse_fact_id(i)
    _audit("%s deletes %s: %s", _who(actor), count(len(checked), kind), ", ".join(checked))
    store = records.manager.store
    gone: set[str]
    if kind == "conversations":
        memory = records.manager.conversation
        known = set(memory.conversation_ids)
        gone = set()
        for cid in checked:
            if cid in known:
                memory.clear(cid)
                gone.add(cid)
            if progress is not None:
                progress(1)
        return _done(checked, gone)
    if kind == "users":
        gone = _delete_users(store, checked)
    else:
        # record id -> (namespace, key within it)
        places: dict[str, tuple[str, str]] = {}
        for i in checked:
            if kind == "facts":
                scope, scope_id, key = parse_fact_id(i)
                places[i] = (fact_namespace(scope, scope_id), key)
            else:
                places[i] = (EPISODES_NAMESPACE if kind == "episodes" else PROCEDURES_NAMESPACE, i)
        gone = _delete_keyed(store, places)
    if progress is not None:
        progress(len(checked))
    return _done(checked, gone)


def delete_working(
    records: Records,
    scope: str,
    keys: Sequence[str],
    *,
    progress: Callable[[int], None] | None = None,
    actor: str | None = None,
) -> dict[str, list[str]]:
    """See :meth:`memlane.records.Records.delete_working`."""
    name = WORKING_PREFIX + check_identifier(scope, "scope")
    checked = list(dict.fromkeys(check_ids(list(keys))))
    _audit(
        "%s deletes %s of %s: %s",
        _who(actor),
        count(len(checked), "working"),
        scope,
        ", ".join(checked),
    )
    gone = _delete_keyed(records.manager.store, {k: (name, k) for k in checked})
    if progress is not None:
        progress(len(checked))
    return _done(checked, gone)


def _done(ids: list[str], gone: set[str]) -> dict[str, list[str]]:
    return {
        "deleted": [i for i in ids if i in gone],
        "not_found": [i for i in ids if i not in gone],
    }


def _delete_keyed(store: MemoryStore, places: dict[str, tuple[str, str]]) -> set[str]:
    """Deletes the entry under each (namespace, key); the record ids that were there."""
    by_namespace: dict[str, dict[str, str]] = {}  # namespace -> entry id -> record id
    for record_id, (where, key) in places.items():
        held = store.load_by_key(where, key)
        if held is not None:
            by_namespace.setdefault(where, {})[held.entry_id] = record_id
    gone: set[str] = set()
    for where, entries in by_namespace.items():
        for entry_id in _delete_many(store, where, list(entries)):
            gone.add(entries[entry_id])
    return gone


def _delete_users(store: MemoryStore, user_ids: list[str]) -> set[str]:
    entries: dict[str, str] = {}  # user entry id -> user id
    indexed: list[str] = []
    for user_id in user_ids:
        held = store.load_by_key(USERS_NAMESPACE, user_id)
        if held is None:
            continue
        entries[held.entry_id] = user_id
        user = MemoryUser.model_validate(held.content)
        for identifier in user.identifier_keys():
            index = store.load_by_key(IDENTIFIERS_NAMESPACE, identifier)
            if index is not None and index.content == user.id:
                indexed.append(index.entry_id)
    # The index entries go first: an index entry must always name a stored user.
    _delete_many(store, IDENTIFIERS_NAMESPACE, indexed)
    return {entries[e] for e in _delete_many(store, USERS_NAMESPACE, list(entries))}


# ---------------------------------------------------------------------- edits


def _load_fact(records: Records, record_id: str) -> tuple[str, Fact]:
    scope, scope_id, key = parse_fact_id(record_id)
    where = fact_namespace(scope, scope_id)
    held = records.manager.store.load_by_key(where, key)
    if held is None:
        raise RecordNotFoundError(f"no fact {record_id!r}")
    return where, Fact.model_validate(held.content)


def _fact_row(records: Records, fact: Fact) -> dict[str, Any]:
    row = {"id": fact_id(fact), **to_json(fact)}
    if fact.scope.value == "user" and fact.scope_id is not None:
        user = people.follow(records.manager.store, fact.scope_id)
        row["scope_name"] = None if user is None else user.display_name
    return row


def update_fact(
    records: Records,
    record_id: str,
    *,
    value: Any = UNSET,
    confidence: float | None = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """See :meth:`memlane.records.Records.update_fact`."""
    if value is not UNSET:
        value = check_json_value(value, "value")
    if confidence is not None:
        confidence = check_fraction(confidence, "confidence")
    if value is UNSET and confidence is None:
        raise ValueError("an edit of a fact needs a value or a confidence")
    where, old = _load_fact(records, record_id)
    changed = ["value"] * (value is not UNSET) + ["confidence"] * (confidence is not None)
    _audit("%s edits fact %s: %s", _who(actor), record_id, ", ".join(changed))
    long_term = records.long_term
    if value is not UNSET and not _same_json(value, old.value):
        # Through remember: the old value joins the history, the search text and a user's
        # cached preferences follow the new one.
        result = long_term.remember(
            old.key,
            value,
            scope=old.scope,
            scope_id=old.scope_id,
            fact_type=old.fact_type,
            confidence=old.confidence if confidence is None else confidence,
        )
        return _fact_row(records, result.fact)
    if confidence is not None:
        wanted = confidence

        def change(content: Any) -> Any:
            fact = Fact.model_validate(content)
            return fact.model_copy(update={"confidence": wanted}).model_dump(mode="json")

        stored = run_sync(_with_importance(where, old.key, change, wanted), records.manager.store)
        if stored is None:
            raise RecordNotFoundError(f"no fact {record_id!r}")
        return _fact_row(records, Fact.model_validate(stored))
    return _fact_row(records, old)


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality, as ``remember`` compares values: ``1`` and ``true`` differ."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _with_importance(
    where: str, key: str, change: Callable[[Any], Any], importance: float
) -> Plan[Any]:
    """``update_record``, also setting the entry's importance (a fact's confidence is its
    entry's importance, which store searches filter and rank by)."""
    while True:
        held = yield LoadByKey(where, key)
        if held is None:
            return None
        content = change(held.content)
        new = held.model_copy(update={"content": content, "importance": importance})
        if (yield SaveIf(where, new, held.version)):
            return content


def set_fact(
    records: Records,
    key: str,
    value: Any,
    *,
    scope: str = "global",
    scope_id: str | None = None,
    confidence: float | None = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """See :meth:`memlane.records.Records.set_fact`."""
    check_identifier(key, "key")
    value = check_json_value(value, "value")
    _audit("%s sets fact %s in scope %s %s", _who(actor), key, scope, scope_id or "")
    result = records.long_term.remember(
        key,
        value,
        scope=scope,
        scope_id=scope_id,
        confidence=0.8 if confidence is None else confidence,
    )
    return {"status": result.status, **_fact_row(records, result.fact)}


def update_working(
    records: Records,
    scope: str,
    key: str,
    value: Any,
    *,
    importance: float | None = None,
    create: bool = False,
    actor: str | None = None,
) -> dict[str, Any]:
    """See :meth:`memlane.records.Records.update_working`."""
    name = WORKING_PREFIX + check_identifier(scope, "scope")
    check_identifier(key, "key")
    value = check_json_value(value, "value")
    if importance is not None:
        importance = check_fraction(importance, "importance")
    store = records.manager.store
    if store.load_by_key(name, key) is None:
        if not create:
            raise RecordNotFoundError(f"no working-memory entry {key!r} in scope {scope!r}")
        _audit("%s sets working-memory entry %s of %s", _who(actor), key, scope)
        working = WorkingMemory(store=store, scope_id=scope)
        working.set(key, value, importance=0.5 if importance is None else importance)
    else:
        _audit("%s edits working-memory entry %s of %s", _who(actor), key, scope)
        wanted = importance

        def change(content: Any) -> Any:
            return value

        plan = update_record(name, key, change)
        if wanted is not None:
            plan = _with_importance(name, key, change, wanted)
        run_sync(plan, store)
    held = store.load_by_key(name, key)
    if held is None:  # deleted by another writer meanwhile
        raise RecordNotFoundError(f"no working-memory entry {key!r} in scope {scope!r}")
    return working_row(held)


def update_user(
    records: Records, user_id: str, *, display_name: str | None, actor: str | None = None
) -> dict[str, Any]:
    """See :meth:`memlane.records.Records.update_user`."""
    wanted = check_identifier(user_id, "user id")
    if display_name is not None:
        if not isinstance(display_name, str):
            raise TypeError(f"display_name must be str or None, not {type(display_name).__name__}")
        display_name = display_name.strip()
        if not display_name:
            raise ValueError("display_name must not be empty (pass None to clear it)")
    store = records.manager.store
    user = people.follow(store, wanted)
    if user is None:
        raise UserNotFoundError(f"no user with id {wanted!r}")
    _audit("%s renames user %s", _who(actor), user.id)
    name = display_name

    def change(content: Any) -> Any:
        held = MemoryUser.model_validate(content)
        return held.model_copy(update={"display_name": name}).model_dump(mode="json")

    stored = run_sync(update_record(USERS_NAMESPACE, user.id, change), store)
    if stored is None:
        raise UserNotFoundError(f"no user with id {wanted!r}")
    return to_json(MemoryUser.model_validate(stored))


# ---------------------------------------------------------------------- forgetting


def forget_user(
    records: Records, user: str, *, dry_run: bool = False, actor: str | None = None
) -> dict[str, Any]:
    """See :meth:`memlane.records.Records.forget_user`."""
    if not isinstance(dry_run, bool):
        raise TypeError(f"dry_run must be bool, not {type(dry_run).__name__}")
    person = people.resolve_one(records.manager.store, user)
    if not dry_run:
        _audit(
            "%s forgets user %s (%s) and every record of theirs",
            _who(actor),
            person.id,
            person.display_name or "no name",
        )
    report = records.long_term.forget_user(person.id, dry_run=dry_run)
    data: dict[str, Any] = report.model_dump(mode="json")
    memory = records.manager.conversation
    known = set(memory.conversation_ids)
    held = [cid for cid in data["conversations"] if cid in known]
    if not dry_run:
        for cid in held:
            memory.clear(cid)
    data["conversations"] = held
    data["dry_run"] = dry_run
    return data
