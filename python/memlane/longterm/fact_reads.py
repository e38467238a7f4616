"""Reading one stored fact: decoded once per stored version, handed out as a fresh copy.

A ``get_fact`` spent ~40% of its time validating the stored dict into a
:class:`~memlane.longterm.model.Fact`, the same dict every time. :class:`LoadFact` reads the
fact of one key and decodes it through a cache keyed by what makes the decoded fact valid:

* in process memory (:class:`~memlane.stores.InMemoryStore`), the stored entry object and
  its content object themselves: a save replaces the entry, so a new version is a new
  object (changing a saved entry's content in place is as invisible here as it is to the
  store's search index, which also reads what was saved);
* on a store that can hand over the stored JSON text of a key (``load_content_by_key``, one
  ``SELECT`` on SQLite), that text: any writer, in any process, that changes the fact
  changes the text;
* anywhere else, nothing: the entry is validated as before.

A cached fact is never handed out: every reader gets its own copy (:func:`copy_fact`), so a
caller changing ``fact.value`` or ``fact.history`` changes nothing stored or cached. A stored
value that is not a fact raises the same :class:`~memlane.errors.CorruptStoreError` as ever:
text that does not decode is read again through ``load_by_key``, whose errors are today's.

:func:`~memlane._runner.run_now` runs a plan of store operations to its end on a store whose
operations cannot block, without the runner: the same plan, so the two ways cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from memlane._runner import StoreOp
from memlane.errors import CorruptStoreError
from memlane.longterm.fact_model import Fact, FactRevision
from memlane.longterm.fact_scopes import check_key, visible_namespaces
from memlane.longterm.value_checks import plain_copy
from memlane.stores.in_memory import InMemoryStore
from memlane.types import construct_unchecked

if TYPE_CHECKING:
    from memlane.stores.protocol import MemoryStore
    from memlane.types import MemoryEntry

__all__ = [
    "CACHED_FACTS",
    "FindFact",
    "HeldFact",
    "LoadFact",
    "copy_fact",
    "decoded_fact",
    "find_fact",
    "inline_store",
    "read_fact",
    "read_held",
    "visible_fact",
]

T = TypeVar("T")

CACHED_FACTS = 8192
"""The most decoded facts each cache keeps; a full cache starts again empty."""


class HeldFact(NamedTuple):
    """A stored fact and what a conditional write of its key needs: its entry id and version."""

    entry_id: str
    version: int
    fact: Fact


def read_fact(entry: MemoryEntry, where: str) -> Fact:
    """The fact an entry of namespace ``where`` holds (validated; not cached), sharing nothing
    with the entry: a store that keeps its entries (a file store's cache) hands out the
    objects it holds, and validation keeps the value as it is.

    Raises:
        CorruptStoreError: It holds none; names the key and the namespace.
    """
    return _Decoded(_validated(entry, where)).fresh()


def _validated(entry: MemoryEntry, where: str) -> Fact:
    try:
        return Fact.model_validate(entry.content)
    except ValidationError as exc:
        raise CorruptStoreError(f"corrupt fact {entry.key!r} in {where}: {exc}") from exc


def copy_fact(fact: Fact) -> Fact:
    """A fact equal to ``fact`` sharing nothing a caller can change: the value and the
    history (its revisions and their values) are copies; the rest is immutable.

    Built without validation: ``fact`` was validated (or built from checked values) already.
    """
    return _Decoded(fact).fresh()


_SCALARS = (str, int, float, bool)


def _copier(value: Any) -> Callable[[Any], Any] | None:
    """How to copy ``value`` (a plain JSON value): ``None`` for an immutable scalar, a
    shallow copy for a list or object of scalars, else :func:`plain_copy`."""
    kind = type(value)
    if kind in _SCALARS or value is None:
        return None
    items = value.values() if kind is dict else value
    if (kind is dict or kind is list) and all(type(v) in _SCALARS or v is None for v in items):
        return dict.copy if kind is dict else list.copy
    return plain_copy


class _Decoded:
    """A decoded fact, never handed out, and how to make each reader's copy of it quickly."""

    __slots__ = ("copy_value", "fact", "fields")

    def __init__(self, fact: Fact) -> None:
        self.fact = fact
        self.copy_value = _copier(fact.value)
        self.fields = fact.__pydantic_fields_set__

    def fresh(self) -> Fact:
        """A copy of the fact (see :func:`copy_fact`)."""
        values = self.fact.__dict__.copy()
        if self.copy_value is not None:
            values["value"] = self.copy_value(values["value"])
        history = values["history"]
        values["history"] = [_copy_revision(r) for r in history] if history else []
        # construct_unchecked, inlined, setting the slots through their descriptors (a third
        # less than object.__setattr__, which looks each one up): every read's own cost.
        fact = _new(Fact)
        _set_dict(fact, values)
        _set_fields(fact, set(self.fields))
        _set_extra(fact, None)
        _set_private(fact, None)
        return fact


_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _copy_revision(revision: FactRevision) -> FactRevision:
    values = dict(revision.__dict__)
    values["value"] = plain_copy(values["value"])
    return construct_unchecked(FactRevision, values, revision.__pydantic_fields_set__)


# Entry identity -> (entry, its content, the fact): the entry is kept, so its id cannot be
# reused by another object while it is here.
_by_entry: dict[int, tuple[MemoryEntry, Any, _Decoded]] = {}
# Stored JSON text -> the fact it decodes to.
_by_text: dict[str, _Decoded] = {}


def decoded_fact(entry: MemoryEntry, where: str) -> Fact:
    """The fact an in-memory store's ``entry`` holds, as a fresh copy; decoded once per entry.

    Raises:
        CorruptStoreError: As :func:`read_fact`.
    """
    hit = _by_entry.get(id(entry))
    if hit is not None and hit[0] is entry and hit[1] is entry.content:
        return hit[2].fresh()
    decoded = _Decoded(_validated(entry, where))
    if len(_by_entry) >= CACHED_FACTS:
        _by_entry.clear()
    _by_entry[id(entry)] = (entry, entry.content, decoded)
    return decoded.fresh()


def inline_store(store: object) -> bool:
    """Whether ``store``'s operations run inline and cannot block: a plan of store operations
    may then run without the runner (:func:`~memlane._runner.run_now`)."""
    return type(store) is InMemoryStore


def read_held(store: MemoryStore, where: str, key: str) -> HeldFact | None:
    """:class:`LoadFact` with the store's blocking methods (its ``run``)."""
    if type(store) is InMemoryStore:
        entry = store.load_by_key(where, key)
        return None if entry is None else _held(entry, where, in_memory=True)
    load_content = getattr(store, "load_content_by_key", None)
    if load_content is not None:
        found = load_content(where, key)
        if found is None:
            return None
        held = _from_text(found)
        if held is not None:
            return held
    entry = store.load_by_key(where, key)
    return None if entry is None else _held(entry, where, in_memory=False)


async def _read_async(store: MemoryStore, where: str, key: str) -> HeldFact | None:
    """:class:`LoadFact` with the store's ``async_`` methods."""
    if type(store) is InMemoryStore:
        entry = await store.async_load_by_key(where, key)
        return None if entry is None else _held(entry, where, in_memory=True)
    load_content = getattr(store, "async_load_content_by_key", None)
    if load_content is not None:
        found = await load_content(where, key)
        if found is None:
            return None
        held = _from_text(found)
        if held is not None:
            return held
    entry = await store.async_load_by_key(where, key)
    return None if entry is None else _held(entry, where, in_memory=False)


def _held(entry: MemoryEntry, where: str, *, in_memory: bool) -> HeldFact:
    fact = decoded_fact(entry, where) if in_memory else read_fact(entry, where)
    return HeldFact(entry.entry_id, entry.version, fact)


def _from_text(found: tuple[str, int, Any]) -> HeldFact | None:
    """The fact of a stored row's text, or ``None`` when the text is not one (the caller then
    reads the entry the long way, which raises today's error)."""
    entry_id, version, text = found
    decoded = _by_text.get(text) if type(text) is str else None
    if decoded is None:
        if type(text) is not str:
            return None
        try:
            decoded = _Decoded(Fact.model_validate(json.loads(text)))
        except (ValueError, TypeError):  # a JSONDecodeError, a ValidationError: not a fact
            return None
        if len(_by_text) >= CACHED_FACTS:
            _by_text.clear()
        _by_text[text] = decoded
    return HeldFact(entry_id, version, decoded.fresh())


def visible_fact(
    store: MemoryStore,
    key: object,
    session_id: str | None,
    user_id: str | None,
    agent_id: str | None,
) -> Fact | None:
    """``get_fact`` with the store's blocking methods: the fact ``key`` as seen from the ids
    (their scopes, most specific first, then ``global``), or ``None``; what the async
    ``FindFact`` plan does, without making the operation (every blocking ``get_fact`` is a
    few microseconds, and calls, keyword arguments and an operation object were a third).

    Raises:
        TypeError, ValueError: A key or id that is not a non-empty ``str`` (names it).
    """
    if type(key) is not str or not key or "\x00" in key:  # check_key's pass, inlined
        key = check_key(key)
    return find_fact(store, visible_namespaces(session_id, user_id, agent_id), key)


def find_fact(store: MemoryStore, namespaces: tuple[str, ...], key: str) -> Fact | None:
    """The fact ``key`` of the first of ``namespaces`` holding it, or ``None``, read with the
    store's blocking methods (:class:`FindFact`'s ``run``)."""
    if type(store) is InMemoryStore:
        # read_held's in-memory branch and decoded_fact's hit, inlined: every get_fact in
        # process memory runs them.
        for where in namespaces:
            entry = store.load_by_key(where, key)
            if entry is not None:
                hit = _by_entry.get(id(entry))
                if hit is not None and hit[0] is entry and hit[1] is entry.content:
                    return hit[2].fresh()
                return decoded_fact(entry, where)
        return None
    load_content = getattr(store, "load_content_by_key", None)
    for where in namespaces:
        if load_content is not None:
            found = load_content(where, key)
            if found is None:
                continue
            text = found[2]
            # _from_text's hit, inlined: every get_fact on SQLite takes it.
            decoded = _by_text.get(text) if type(text) is str else None
            if decoded is not None:
                return decoded.fresh()
            held = _from_text(found)
            if held is not None:
                return held.fact
            # Not a fact's text: the long way, whose errors are today's (as read_held).
            entry = store.load_by_key(where, key)
            if entry is not None:
                return read_fact(entry, where)
            continue
        held = read_held(store, where, key)
        if held is not None:
            return held.fact
    return None


# Not frozen: a frozen dataclass sets each field through object.__setattr__, a third of the
# op's cost on the in-memory path; nothing assigns to an op after it is made.
@dataclass(slots=True)
class LoadFact(StoreOp["HeldFact | None"]):
    """The fact stored under ``key`` in ``namespace`` with its entry id and version, or
    ``None``; decoded through the caches above."""

    namespace: str
    key: str

    def run(self, store: MemoryStore) -> HeldFact | None:
        """Reads with the store's blocking methods."""
        return read_held(store, self.namespace, self.key)

    async def run_async(self, store: MemoryStore) -> HeldFact | None:
        """Reads with the store's ``async_`` methods."""
        return await _read_async(store, self.namespace, self.key)


@dataclass(slots=True)
class FindFact(StoreOp["Fact | None"]):
    """The fact ``key`` of the first of ``namespaces`` holding it, or ``None``: a fact seen
    through its scopes, most specific first, in one operation (no plan to run)."""

    namespaces: tuple[str, ...]
    key: str

    def run(self, store: MemoryStore) -> Fact | None:
        """Reads with the store's blocking methods, one namespace after the other."""
        return find_fact(store, self.namespaces, self.key)

    async def run_async(self, store: MemoryStore) -> Fact | None:
        """Reads with the store's ``async_`` methods, one namespace after the other."""
        for where in self.namespaces:
            held = await _read_async(store, where, self.key)
            if held is not None:
                return held.fact
        return None
