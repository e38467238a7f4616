"""Which users a ``--user`` argument names: an id, a merged id, ``channel:id`` or a name.

Reads only: the users and the identifier index are read as stored, never through
``LongTermMemory.get_user`` (which refreshes a user's cached preferences, a write), so a
read-only store can answer.
"""

from __future__ import annotations

from typing import Any

from memlane._validate import check_identifier
from memlane.errors import CorruptStoreError, UserNotFoundError
from memlane.longterm import MemoryUser
from memlane.longterm.users import IDENTIFIERS_NAMESPACE, USERS_NAMESPACE
from memlane.stores import MemoryStore

__all__ = [
    "AmbiguousUserError",
    "all_users",
    "follow",
    "names_held",
    "resolve",
    "resolve_one",
    "user_filter",
]

_MAX_MERGE_CHAIN = 64


class AmbiguousUserError(ValueError):
    """A display name that several users share; ``candidates`` lists them (as JSON rows).

    Args:
        text: What was asked for.
        candidates: The users it may name.
    """

    def __init__(self, text: str, candidates: list[dict[str, Any]]) -> None:
        self.candidates = candidates
        named = ", ".join(f"{c['id']} ({c.get('display_name') or 'no name'})" for c in candidates)
        super().__init__(f"{text!r} names {len(candidates)} users: {named}; pass one id")


def all_users(store: MemoryStore) -> list[MemoryUser]:
    """Every stored user (merged ones included), oldest first."""
    users = [MemoryUser.model_validate(e.content) for e in store.load(USERS_NAMESPACE)]
    return sorted(users, key=lambda u: u.created_at)


def names_held(store: MemoryStore) -> dict[str, str | None]:
    """User id → the display name to show (a merged id shows its survivor's name).

    Every listing row that shows a user needs this map, so the users are not validated
    (as :func:`all_users` does for a listing of users): only ``id``, ``display_name`` and
    ``merged_into_id`` are read, and a user entry without a string ``id`` is left out.

    Raises:
        CorruptStoreError: A merge chain longer than allowed (a cycle).
    """
    held: dict[str, dict[str, Any]] = {}
    for entry in store.load(USERS_NAMESPACE):
        content = entry.content
        if isinstance(content, dict) and isinstance(content.get("id"), str):
            held[content["id"]] = content
    names: dict[str, str | None] = {}
    for user_id, content in held.items():
        live = content
        for _ in range(_MAX_MERGE_CHAIN):
            into = live.get("merged_into_id")
            if not isinstance(into, str) or into not in held:
                break
            live = held[into]
        else:
            raise CorruptStoreError(f"user {user_id!r} is merged in a chain longer than allowed")
        name = live.get("display_name") or content.get("display_name")
        names[user_id] = name if isinstance(name, str) else None
    return names


def _follow_in(by_id: dict[str, MemoryUser], user: MemoryUser) -> MemoryUser:
    for _ in range(_MAX_MERGE_CHAIN):
        if user.merged_into_id is None or user.merged_into_id not in by_id:
            return user
        user = by_id[user.merged_into_id]
    raise CorruptStoreError(f"user {user.id!r} is merged in a chain longer than allowed")


def follow(store: MemoryStore, user_id: str) -> MemoryUser | None:
    """The user ``user_id`` names now (merges followed), or ``None``."""
    held = store.load_by_key(USERS_NAMESPACE, user_id)
    for _ in range(_MAX_MERGE_CHAIN):
        if held is None:
            return None
        user = MemoryUser.model_validate(held.content)
        if user.merged_into_id is None:
            return user
        held = store.load_by_key(USERS_NAMESPACE, user.merged_into_id)
    raise CorruptStoreError(f"user {user_id!r} is merged in a chain longer than allowed")


def resolve(store: MemoryStore, text: str) -> list[MemoryUser]:
    """The users ``text`` may name, merges followed, each once.

    An id or merged id, then ``channel:channel_user_id`` (the identifier index), name one
    user; otherwise every user whose display name equals ``text`` case-insensitively.

    Raises:
        TypeError, ValueError: ``text`` is not a non-empty ``str``.
    """
    wanted = check_identifier(text, "user")
    found = follow(store, wanted)
    if found is not None:
        return [found]
    indexed = store.load_by_key(IDENTIFIERS_NAMESPACE, wanted)
    if indexed is not None and isinstance(indexed.content, str):
        found = follow(store, indexed.content)
        if found is not None:
            return [found]
    folded = wanted.casefold()
    users = all_users(store)
    by_id = {u.id: u for u in users}
    matches: dict[str, MemoryUser] = {}
    for user in users:
        if user.display_name is not None and user.display_name.casefold() == folded:
            live = _follow_in(by_id, user)
            matches.setdefault(live.id, live)
    return list(matches.values())


def resolve_one(store: MemoryStore, text: str) -> MemoryUser:
    """The one user ``text`` names.

    Raises:
        UserNotFoundError: It names nobody (a ``KeyError``).
        AmbiguousUserError: It is a display name several users share (a ``ValueError``).
    """
    found = resolve(store, text)
    if not found:
        raise UserNotFoundError(
            f"no user {text!r} (not an id, a merged id, a channel:id or a display name)"
        )
    if len(found) > 1:
        raise AmbiguousUserError(text, [u.model_dump(mode="json") for u in found])
    return found[0]


def user_filter(store: MemoryStore, text: str) -> str:
    """The user id a listing's user filter means: the one user ``text`` names (an id, a
    merged id, ``channel:id`` or a display name), else ``text`` itself, since facts and
    episodes may carry an id that no user record holds.

    Raises:
        TypeError, ValueError: ``text`` is not a non-empty ``str``.
        AmbiguousUserError: ``text`` is a display name several users share.
    """
    found = resolve(store, text)
    if len(found) > 1:
        raise AmbiguousUserError(text, [u.model_dump(mode="json") for u in found])
    return found[0].id if found else text
