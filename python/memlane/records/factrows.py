"""The rows of the facts listing, built from the stored entries without validating each fact.

A page of 50 facts must still filter, sort and count every fact of the store, and validating
each with pydantic and dumping it back was most of what a facts request cost under load
(benches/bench_server.py). A stored fact's content already is the JSON its model dumps, so
the rows that are filtered, sorted and counted are that content, and only the facts on the
page shown are validated (:func:`shown_facts`): a corrupt one there still fails, naming where
it lies, and what a caller receives is exactly what the model dumps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from memlane.errors import CorruptStoreError
from memlane.longterm import Fact, FactScope
from memlane.longterm.facts import check_scope, fact_namespace
from memlane.longterm.model import check_enum, namespace, parse_namespace
from memlane.records.listing import to_json
from memlane.stores import MemoryStore

__all__ = ["FactRows", "fact_namespaces"]

_PREFIX = namespace("longterm", "facts") + ":"
# Long-term memory lists facts from the most specific scope to global; the listing keeps it.
_ORDER = {FactScope.SESSION: 0, FactScope.USER: 1, FactScope.AGENT: 2, FactScope.GLOBAL: 3}
# What namespace() does to each part, applied to a key alone (the id's last part).
_ESCAPES = str.maketrans({"%": "%25", ":": "%3A"})


def fact_namespaces(
    store: MemoryStore, scope: object = None, scope_id: object = None
) -> list[tuple[str, str]]:
    """``(namespace, id prefix)`` of every namespace holding the facts wanted, in the order
    ``LongTermMemory.facts`` reads them; a fact's id is its prefix and its escaped key.

    Raises:
        ValueError: An unknown scope, a ``scope_id`` without a scope or with ``global``.
    """
    if scope is None:
        if scope_id is not None:
            raise ValueError(f"scope_id {scope_id!r} needs a scope")
        wanted = None
    else:
        checked = check_enum(scope, FactScope, "scope")
        if scope_id is not None or checked is FactScope.GLOBAL:
            name = fact_namespace(*check_scope(checked, scope_id))
            return [(name, name[len(_PREFIX) :] + ":")]
        wanted = checked
    found: list[tuple[int, str, str]] = []
    for name in store.namespaces():
        if not name.startswith(_PREFIX):
            continue
        parts = parse_namespace(name)
        if len(parts) not in (3, 4):
            continue
        try:
            kind = FactScope(parts[2])
        except ValueError:
            continue
        if wanted is None or kind is wanted:
            found.append((_ORDER[kind], parts[3] if len(parts) == 4 else "", name))
    return [(name, name[len(_PREFIX) :] + ":") for _, _, name in sorted(found)]


class FactRows:
    """The facts of a scope as listing rows, and the validated rows of the page shown.

    Args:
        store: Where the facts are.
        names: Called at most once, when a user's fact is met: user id → display name.
    """

    def __init__(self, store: MemoryStore, names: Callable[[], dict[str, str | None]]) -> None:
        self._store = store
        self._names = names
        self._held: dict[str, tuple[str, dict[str, Any]]] = {}

    def rows(
        self, *, scope: object = None, scope_id: object = None, fact_type: str | None = None
    ) -> list[dict[str, Any]]:
        """``{"id", **stored content, "scope_name"?}`` for every fact wanted.

        Raises:
            ValueError: A bad scope (see :func:`fact_namespaces`).
            CorruptStoreError: A fact entry whose content is not a JSON object.
        """
        names: dict[str, str | None] | None = None
        rows: list[dict[str, Any]] = []
        for name, prefix in fact_namespaces(self._store, scope, scope_id):
            for entry in self._store.load(name):
                if entry.key is None:
                    continue
                content = entry.content
                if not isinstance(content, dict):
                    raise CorruptStoreError(f"corrupt fact {entry.key!r} in {name}: not an object")
                if fact_type is not None and content.get("fact_type") != fact_type:
                    continue
                fid = prefix + entry.key.translate(_ESCAPES)
                # The id leads, as in a validated row, even if the content holds an "id".
                row = {"id": fid, **content}
                row["id"] = fid
                owner = content.get("scope_id")
                if content.get("scope") == FactScope.USER.value and isinstance(owner, str):
                    if names is None:
                        names = self._names()
                    row["scope_name"] = names.get(owner)
                self._held[fid] = (name, content)
                rows.append(row)
        return rows

    def shown(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows of one page, each validated as a :class:`~memlane.longterm.Fact`.

        Raises:
            CorruptStoreError: A fact that is not a valid fact, naming its key and namespace.
        """
        shown = []
        for row in rows:
            name, content = self._held[row["id"]]
            try:
                fact = Fact.model_validate(content)
            except ValidationError as exc:
                key = content.get("key")
                raise CorruptStoreError(f"corrupt fact {key!r} in {name}: {exc}") from exc
            checked = {"id": row["id"], **to_json(fact)}
            if "scope_name" in row:
                checked["scope_name"] = row["scope_name"]
            shown.append(checked)
        return shown
