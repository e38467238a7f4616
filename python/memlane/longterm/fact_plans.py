"""The plans of facts the parts of long-term memory build on, with arguments already checked.

Module functions: they need no state. :class:`~memlane.longterm.facts.Facts` publishes them as
methods after checking the arguments; users (merging two people's facts) and forgetting a
person call them directly.

* :func:`remember_plan` — ``remember`` without the argument checks; :func:`remember_now`, the
  same steps (:func:`remember_attempt`) run at once on a store in process memory.
* :func:`delete_fact_plan` — ``forget`` without them.
* :func:`find_fact_plan` — ``get_fact`` from the visible scopes.
* :func:`scope_facts_plan` — every fact of one scope id; :func:`listed_facts_plan`, of a scope.
* :func:`near_duplicate_plan` — ``remember(..., dedupe=...)``'s look for a fact of the same
  scope whose value means the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import TypeAdapter

from memlane._runner import (
    Call,
    Delete,
    Load,
    LoadByKey,
    Namespaces,
    Plan,
    SaveIf,
    VectorSearch,
)
from memlane.longterm.fact_model import (
    Fact,
    FactRevision,
    FactScope,
    FactType,
    RememberResult,
    render_plain,
    render_value,
)
from memlane.longterm.fact_reads import FindFact, HeldFact, LoadFact, read_fact, read_held
from memlane.longterm.fact_scopes import FACTS_PREFIX, SCOPE_ORDER, fact_namespace
from memlane.longterm.namespaces import parse_namespace
from memlane.longterm.value_checks import plain_copy
from memlane.stores.protocol import SEARCH_TEXT, next_version
from memlane.types import (
    CheckedJson,
    MemoryEntry,
    MemoryScope,
    construct_unchecked,
)

if TYPE_CHECKING:
    from memlane.longterm.storage import Storage
    from memlane.stores.in_memory import InMemoryStore

__all__ = [
    "DEDUPE_CANDIDATES",
    "delete_fact_plan",
    "fact_entry",
    "fact_json",
    "find_fact_plan",
    "listed_facts_plan",
    "near_duplicate_plan",
    "new_entry_id",
    "plain_copy",
    "read_fact",
    "remember_attempt",
    "remember_now",
    "remember_plan",
    "scope_facts_plan",
]

DEDUPE_CANDIDATES = 5
"""Facts of the scope closest in meaning whose values ``dedupe`` compares with the new one."""

_SCALARS = (str, int, float)


def _same_value(a: Any, b: Any) -> bool:
    """JSON equality: ``1`` and ``True`` differ, key order does not matter."""
    if type(a) is type(b) and type(a) in _SCALARS:  # the common case, without two dumps
        return bool(a == b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def new_entry_id() -> str:
    """A fresh entry id: 32 hex digits of a random (version 4) UUID, as ``uuid4().hex``.

    Built from the random bytes directly, read from the OS for a batch of ids at a time:
    ``uuid.uuid4()`` spent most of its time in the ``UUID`` constructor's checks, and one
    ``os.urandom`` call per id was half of what was left. A forked child starts a batch of its
    own (never one its parent hands out too), and threads taking ids at once take different
    ones: each comes off a list iterator, one ``next`` under the interpreter lock.
    """
    global _ids  # one batch per process, replaced when used up
    try:
        return next(_ids)
    except StopIteration:
        _ids = _id_batch()
        return next(_ids)


_BATCH = 256
"""Entry ids made per read of the OS's random bytes."""

# Byte 6's high nibble is the version (4); byte 8's two high bits the RFC 4122 variant (10).
_VERSION_4 = bytes((b & 0x0F) | 0x40 for b in range(256))
_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))


def _id_batch() -> Iterator[str]:
    raw = bytearray(os.urandom(16 * _BATCH))
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    text = raw.hex()
    return iter([text[start : start + 32] for start in range(0, 32 * _BATCH, 32)])


def _forget_batch() -> None:
    global _ids  # the parent's batch: the child must never hand out the same ids
    _ids = iter(())


_ids: Iterator[str] = iter(())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_batch)


def fact_entry(fact: Fact, entry_id: str | None = None, version: int = 0) -> MemoryEntry:
    """The entry holding ``fact`` (a new id unless ``entry_id``), at ``version``, created at
    the fact's ``updated_at`` (the moment its writer changed it).

    Built without validation, and its content marked as checked JSON: every field comes from
    a validated Fact whose value passed the value rule, so a store need not walk it again. A
    caller that knows the version ``save_if`` will store passes it, so the store keeps this
    entry rather than a copy carrying that version.
    """
    # The confidence is the entry's importance, so a store's search filters and ranks by it.
    # new_entry's body, with the values in a literal rather than passed by keyword: every
    # remember builds one.
    values = fact.__dict__
    key = values["key"]
    return construct_unchecked(
        MemoryEntry,
        {
            "entry_id": new_entry_id() if entry_id is None else entry_id,
            "scope": MemoryScope.LONG_TERM,
            "key": key,
            "content": fact_json(fact),
            # Checked JSON (one string), so a store's save does not walk it again.
            "metadata": CheckedJson({SEARCH_TEXT: f"{key} {render_plain(values['value'])}"}),
            # Every writer stamps the fact's updated_at with the moment it writes it, which is
            # the entry's creation: one clock reading, not two.
            "created_at": values["updated_at"],
            "expires_at": None,
            "importance": values["confidence"],
            "version": version,
        },
        _ENTRY_FIELDS,
    )


_ENTRY_FIELDS = frozenset(MemoryEntry.model_fields)
"""Every field of an entry: :func:`fact_entry` gives them all (as ``new_entry`` marks them)."""


def fact_json(fact: Fact) -> CheckedJson:
    """``fact.model_dump(mode="json")``, built field by field (a test holds the two equal,
    key order included): pydantic's serialiser took a sixth of an in-memory ``remember``.
    The value and the history's values are copies, so the stored content shares nothing with
    the fact a caller is handed."""
    values = fact.__dict__
    history = values["history"]
    created, updated = values["created_at"], values["updated_at"]
    created_text = _iso(created)
    return CheckedJson(  # by keyword: the object is built once, not from a dict copied into it
        key=values["key"],
        value=plain_copy(values["value"]),
        # The members' own _value_: Enum.value is a Python-level descriptor, ~0.2 us a read.
        fact_type=values["fact_type"]._value_,
        scope=values["scope"]._value_,
        scope_id=values["scope_id"],
        confidence=values["confidence"],
        times_confirmed=values["times_confirmed"],
        times_contradicted=values["times_contradicted"],
        created_at=created_text,
        updated_at=created_text if updated is created else _iso(updated),  # a new fact's
        history=[
            {"value": plain_copy(r.value), "replaced_at": _iso(r.replaced_at)} for r in history
        ]
        if history
        else [],
    )


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


def _iso(moment: datetime) -> str:
    """pydantic's JSON form of an aware datetime: ISO 8601, ``Z`` for UTC.

    A moment in UTC within the second the last one was in reuses that second's text:
    ``isoformat`` was a twentieth of an in-memory ``remember``, and the facts written within
    one second (every writer stamps them with the clock) share all but the microseconds.
    """
    global _last_second  # one tuple, replaced whole: threads never mix two seconds' parts
    start, end, prefix = _last_second
    if moment.tzinfo is UTC and start <= moment < end:
        micro = moment.microsecond
        # isoformat's rule: no fraction at all for a whole second.
        return f"{prefix}.{micro:06d}Z" if micro else f"{prefix}Z"
    text = moment.isoformat()
    if text.endswith("+00:00"):
        if moment.tzinfo is UTC and moment.year < _LAST_YEAR:  # its second's end exists
            start = moment.replace(microsecond=0)
            # "YYYY-MM-DDTHH:MM:SS": isoformat pads every field, the year to four digits.
            _last_second = (start, start + _SECOND, text[:19])
        return text[:-6] + "Z"
    encoded: str = _DATETIME.dump_python(moment, mode="json")
    return encoded


_SECOND = timedelta(seconds=1)
_LATEST = datetime.max.replace(tzinfo=UTC)
_LAST_YEAR = _LATEST.year
_last_second: tuple[datetime, datetime, str] = (_LATEST, _LATEST, "")
"""The second (UTC) of the last moment :func:`_iso` wrote, its end, and the text up to it;
at first an empty range."""


def _updated(old: Fact, changes: dict[str, Any]) -> Fact:
    """``old.model_copy(update=changes)`` without pydantic's copy machinery: ``old`` is the
    caller's own copy and every change a checked value."""
    return construct_unchecked(
        Fact, {**old.__dict__, **changes}, old.__pydantic_fields_set__ | changes.keys()
    )


_now = datetime.now
_FIRST_VERSION = next_version(None)
"""The version a new fact's entry is stored at."""

_NEW_FACT_FIELDS = frozenset(
    ("key", "value", "fact_type", "scope", "scope_id", "confidence", "created_at", "updated_at")
)
"""The fields a new fact is given (its ``model_fields_set``, as ``Fact(...)`` marks them)."""


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
    refreshes them (users do, after merging facts). The compare-and-swap retry loop is here;
    each turn of it is :func:`remember_attempt`, which :func:`remember_now` runs too.
    """
    where = fact_namespace(scope, scope_id)
    while True:
        held: HeldFact | None = yield LoadFact(where, key)
        result, entry = remember_attempt(
            held, key, value, scope, scope_id, fact_type, confidence, overwrite
        )
        if entry is None or (yield SaveIf(where, entry, None if held is None else held.version)):
            return result


def remember_now(
    store: InMemoryStore,
    key: str,
    value: Any,
    scope: FactScope,
    scope_id: str | None,
    fact_type: FactType,
    confidence: float,
    overwrite: bool,
) -> RememberResult:
    """:func:`remember_plan` run at once on a store in process memory, whose calls cannot
    block: its loop with ``LoadFact``'s read and ``SaveIf``'s write called directly, each
    turn the same :func:`remember_attempt`. No generator, no operation objects: they were
    an eighth of an in-memory ``remember``."""
    where = fact_namespace(scope, scope_id)
    while True:
        held = read_held(store, where, key)
        result, entry = remember_attempt(
            held, key, value, scope, scope_id, fact_type, confidence, overwrite
        )
        if entry is None or store.save_if(where, entry, None if held is None else held.version):
            return result


def remember_attempt(
    held: HeldFact | None,
    key: str,
    value: Any,
    scope: FactScope,
    scope_id: str | None,
    fact_type: FactType,
    confidence: float,
    overwrite: bool,
) -> tuple[RememberResult, MemoryEntry | None]:
    """One turn of ``remember``'s compare-and-swap, given what the key holds (``held``,
    read just before): the result if the write wins, and the entry to write against
    ``held``'s version (``None``: nothing to write, the result stands — ``skipped``)."""
    now = _now(UTC)  # utc_now, inlined
    if held is None:
        # Built without validation: the caller checked every argument, and utc_now is
        # aware UTC (a test holds this equal to Fact(...)).
        fact = construct_unchecked(
            Fact,
            {
                "key": key,
                "value": value,
                "fact_type": fact_type,
                "scope": scope,
                "scope_id": scope_id,
                "confidence": confidence,
                "times_confirmed": 0,
                "times_contradicted": 0,
                "created_at": now,
                "updated_at": now,
                "history": [],
            },
            _NEW_FACT_FIELDS,
        )
        return _result("created", fact), fact_entry(fact, version=_FIRST_VERSION)
    old = held.fact
    status: Literal["confirmed", "updated"]
    if _same_value(old.value, value):
        status = "confirmed"
        fact = _updated(
            old,
            {
                "times_confirmed": old.times_confirmed + 1,
                "confidence": max(old.confidence, confidence),
                "updated_at": now,
            },
        )
    elif not overwrite:
        return _result("skipped", old), None
    else:
        status = "updated"
        revision = FactRevision(value=old.value, replaced_at=now)
        fact = _updated(
            old,
            {
                "value": value,
                "times_confirmed": old.times_confirmed + 1,
                "confidence": confidence,
                "updated_at": now,
                "history": [*old.history, revision],
            },
        )
    return _result(status, fact), fact_entry(fact, held.entry_id, next_version(held.version))


def _result(
    status: Literal["created", "confirmed", "updated", "skipped"], fact: Fact
) -> RememberResult:
    # Both fields are already what validation would make of them (a test holds it equal).
    return construct_unchecked(RememberResult, {"status": status, "fact": fact}, _RESULT_FIELDS)


_RESULT_FIELDS = frozenset(("status", "fact"))


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
    found: Fact | None = yield FindFact(tuple(fact_namespace(s, i) for s, i in visible), key)
    return found


def scope_facts_plan(scope: FactScope, scope_id: str | None) -> Plan[list[Fact]]:
    """Every fact of one scope id, in creation order (arguments already checked)."""
    where = fact_namespace(scope, scope_id)
    entries: list[MemoryEntry] = yield Load(where)
    return [read_fact(e, where) for e in entries if e.key is not None]


def listed_facts_plan(wanted: FactScope | None) -> Plan[list[Fact]]:
    """Every fact of every id of the scope ``wanted`` (``None``: of every scope), ordered by
    scope (session, user, agent, global), then scope id, then creation."""
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


def near_duplicate_plan(
    storage: Storage, key: str, value: Any, scope: FactScope, scope_id: str | None, threshold: float
) -> Plan[Fact | None]:
    """The fact of this scope (under another key) whose value means what ``value`` means, or
    ``None``; ``None`` too when the scope holds ``key`` itself (``remember``'s own rules
    apply to it).

    The scope's facts closest to the new fact's text (its key and value, as every fact is
    embedded) are the candidates; the first whose value's embedding has a cosine of at least
    ``threshold`` with the new value's is the duplicate. The memory's pending vectors are
    flushed first, so a fact written a moment ago is a candidate too.
    """
    from memlane.embeddings.resolve import async_embed_documents, embed_documents

    where = fact_namespace(scope, scope_id)
    if (yield LoadByKey(where, key)) is not None:
        return None
    embedder, writer = storage.embedder, storage.writer
    assert embedder is not None  # the caller checked
    assert writer is not None
    yield Call(writer.flush, writer.async_flush)
    new_text = render_value(value)
    (near,) = yield Call(
        partial(embed_documents, embedder, [f"{key} {new_text}"]),
        partial(async_embed_documents, embedder, [f"{key} {new_text}"]),
    )
    if near is None:
        return None
    hits = yield VectorSearch([where], near, writer.model, limit=DEDUPE_CANDIDATES)
    candidates = [read_fact(hit.entry, where) for hit in hits]
    texts = [new_text, *(render_value(fact.value) for fact in candidates)]
    vectors = yield Call(
        partial(embed_documents, embedder, texts), partial(async_embed_documents, embedder, texts)
    )
    mine = vectors[0]
    if mine is None:
        return None
    for fact, theirs in zip(candidates, vectors[1:], strict=True):
        if (
            theirs is not None
            and sum(a * b for a, b in zip(mine, theirs, strict=True)) >= threshold
        ):
            return fact
    return None
