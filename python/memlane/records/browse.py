"""The :class:`Records` of one store: listings, single records, search and totals.

Changes (deletes, edits, forgetting a person) are written in :mod:`memlane.records.changes`
and offered here as methods, so a caller holds one object for everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from memlane._validate import check_identifier
from memlane.longterm import Episode, Fact, LongTermMemory, Procedure
from memlane.longterm.episodes import EPISODES_NAMESPACE
from memlane.longterm.procedures import PROCEDURES_NAMESPACE
from memlane.manager import MemoryManager
from memlane.records import changes, people
from memlane.records.conversations import conversation_row, conversation_view, turn_count
from memlane.records.factrows import FactRows
from memlane.records.finding import is_fact_namespace, search_everywhere
from memlane.records.ids import WORKING_PREFIX, Page, fact_id
from memlane.records.listing import entry_size, episode_row, page, to_json, working_row

__all__ = ["Records"]


class Records:
    """Lists, shows, edits and deletes the records of one manager's store.

    Reading methods never write, so they serve a store opened read-only.

    Args:
        manager: Whose store to read; its long-term memory is used when it has one, else one
            is made over the same store.
    """

    def __init__(self, manager: MemoryManager) -> None:
        self.manager = manager
        self.long_term = manager.long_term or LongTermMemory(manager.store)

    # ------------------------------------------------------------------ listing

    def _names(self) -> dict[str, str | None]:
        return people.names_held(self.manager.store)

    def facts(
        self,
        *,
        scope: str | None = None,
        scope_id: str | None = None,
        user_id: str | None = None,
        fact_type: str | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        sort: str | None = None,
        descending: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Facts (each with its ``id``; a user's with ``scope_name``), filtered and sorted.

        Args:
            scope: Only this scope.
            scope_id: Only this id of ``scope``.
            user_id: Only this user's facts: anything :meth:`resolve_user` accepts, or an id
                no user record holds (the same as ``scope="user", scope_id=...``).
            fact_type: Only this type.
            q: Only facts whose JSON holds this text.
            offset: Facts to skip.
            limit: At most this many.
            sort: A field to sort by (see :data:`memlane.records.listing.SORTS`).
            descending: Highest first.
            since: Only facts updated at or after this.
            until: Only facts updated at or before this.

        Raises:
            ValueError: A bad page, sort field or scope, or ``user_id`` with another scope.
            AmbiguousUserError: ``user_id`` is a display name several users share.
        """
        if user_id is not None:
            if scope not in (None, "user") or scope_id is not None:
                raise ValueError(f"user_id {user_id!r} conflicts with scope={scope!r}")
            scope, scope_id = "user", people.user_filter(self.manager.store, user_id)
        if scope_id is not None and scope is None:
            raise ValueError("scope_id needs a scope (session, user or agent)")
        facts = FactRows(self.manager.store, self._names)
        return page(
            "facts", facts.rows(scope=scope, scope_id=scope_id, fact_type=fact_type), q=q,
            offset=offset, limit=limit, sort=sort, descending=descending, since=since,
            until=until, show=facts.shown,
        )  # fmt: skip

    def episodes(
        self,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        success: bool | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        sort: str | None = None,
        descending: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Episodes, most recent first, without their messages (see :meth:`episode`).

        ``user_id`` may be anything :meth:`resolve_user` accepts, or an id no user record
        holds; a display name several users share raises :class:`AmbiguousUserError`. Dates
        filter on ``ended_at``; the other arguments as for :meth:`facts`.
        """
        if user_id is not None:
            user_id = people.user_filter(self.manager.store, user_id)
        found = self.long_term.episodes(agent_id=agent_id, user_id=user_id, success=success)
        names = self._names()
        return page(
            "episodes", [episode_row(e, names) for e in found], q=q, offset=offset,
            limit=limit, sort=sort, descending=descending, since=since, until=until,
        )  # fmt: skip

    def episode(self, episode_id: str) -> dict[str, Any] | None:
        """One episode in full, or ``None``."""
        entry = self.manager.store.load_by_key(
            EPISODES_NAMESPACE, check_identifier(episode_id, "episode id")
        )
        return None if entry is None else to_json(Episode.model_validate(entry.content))

    def procedures(
        self,
        *,
        procedure_type: str | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        sort: str | None = None,
        descending: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Procedures, filtered by type; dates filter on ``created_at``."""
        items = [
            to_json(p)
            for p in self.long_term.procedures()
            if procedure_type is None or p.procedure_type.value == procedure_type
        ]
        return page(
            "procedures", items, q=q, offset=offset, limit=limit, sort=sort,
            descending=descending, since=since, until=until,
        )  # fmt: skip

    def users(
        self,
        *,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        sort: str | None = None,
        descending: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Memory users (merged ones included, with ``merged_into_id`` set), oldest first."""
        items = [to_json(u) for u in people.all_users(self.manager.store)]
        return page(
            "users", items, q=q, offset=offset, limit=limit, sort=sort,
            descending=descending, since=since, until=until,
        )  # fmt: skip

    def resolve_user(self, text: str) -> list[dict[str, Any]]:
        """The users ``text`` may name: an id, a merged id, ``channel:id`` or a display name.

        Merged users are followed to the user they became; a display name is matched
        case-insensitively and may name several users (or none: ``[]``).
        """
        return [to_json(u) for u in people.resolve(self.manager.store, text)]

    def conversations(
        self,
        *,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
        sort: str | None = None,
        descending: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Page:
        """Conversations with their turns, tokens, own budget use and last activity.

        Most recent first unless sorted; dates filter on ``last_activity``.
        """
        memory = self.manager.conversation
        items = [conversation_row(memory, cid) for cid in memory.conversation_ids]
        items.sort(key=lambda row: row["last_activity"] or "", reverse=True)
        return page(
            "conversations", items, q=q, offset=offset, limit=limit, sort=sort,
            descending=descending, since=since, until=until,
        )  # fmt: skip

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        """A conversation as the model receives it, and its whole transcript.

        ``messages`` are the kept turns (``sent`` when in the history the model gets now);
        ``transcript`` is every turn ever kept, the summarised ones included
        (``summarised: true``); ``budget`` and ``summarize_threshold`` are the
        conversation's own.

        Raises:
            ConversationNotFoundError: The id is unknown.
        """
        return conversation_view(self.manager.conversation, conversation_id)

    def working_scopes(self) -> list[dict[str, Any]]:
        """Every working-memory scope with how many facts it holds."""
        store = self.manager.store
        return [
            {"scope": name[len(WORKING_PREFIX) :], "entries": len(store.load(name))}
            for name in sorted(store.namespaces())
            if name.startswith(WORKING_PREFIX) and len(name) > len(WORKING_PREFIX)
        ]

    def working(self, scope: str) -> list[dict[str, Any]]:
        """The facts of one working-memory scope (``key``, ``value``, importance, expiry)."""
        name = WORKING_PREFIX + check_identifier(scope, "scope")
        return [working_row(e) for e in self.manager.store.load(name) if e.key is not None]

    # ------------------------------------------------------------------ search

    def search(
        self,
        query: str,
        *,
        memory_type: str = "all",
        limit: int = 20,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Ranked long-term search; each hit as ``{"type", "id", "record"}``.

        With no user, agent or session, facts of every scope are searched (each fact's
        record carries its ``scope`` and ``scope_id``); with one, the facts visible from it
        (global ones always). ``user_id`` may be anything :meth:`resolve_user` accepts.

        Raises:
            UserNotFoundError: ``user_id`` names nobody.
            AmbiguousUserError: ``user_id`` is a display name several users share.
            ValueError: A query without words, an unknown memory type or a bad limit.
        """
        if user_id is not None:
            user_id = people.resolve_one(self.manager.store, user_id).id
        if user_id is not None or agent_id is not None or session_id is not None:
            hits: list[Any] = self.long_term.search(
                query, memory_type=memory_type, limit=limit, min_confidence=0.0,
                user_id=user_id, agent_id=agent_id, session_id=session_id,
            )  # fmt: skip
        else:
            hits = search_everywhere(self.manager.store, query, memory_type, limit)
        # Users' names are read only when a hit shows a user.
        shows_user = any(
            (isinstance(hit, Fact) and hit.scope.value == "user")
            or (isinstance(hit, Episode) and hit.user_id is not None)
            for hit in hits
        )
        names = self._names() if shows_user else {}
        found: list[dict[str, Any]] = []
        for hit in hits:
            if isinstance(hit, Fact):
                record = to_json(hit)
                if hit.scope.value == "user" and hit.scope_id is not None:
                    record["scope_name"] = names.get(hit.scope_id)
                found.append({"type": "fact", "id": fact_id(hit), "record": record})
            elif isinstance(hit, Episode):
                found.append({"type": "episode", "id": hit.id, "record": episode_row(hit, names)})
            else:
                assert isinstance(hit, Procedure)
                found.append({"type": "procedure", "id": hit.id, "record": to_json(hit)})
        return found

    # ------------------------------------------------------------------ totals

    def totals(self) -> dict[str, int]:
        """How many records of each kind the store holds, and their JSON size in bytes.

        ``turns`` counts every turn of every conversation, summarised ones included;
        ``working`` every working-memory entry of every scope; ``bytes`` the JSON size of
        every entry in the store.
        """
        store = self.manager.store
        memory = self.manager.conversation
        names = store.namespaces()
        counts = {"facts": 0, "working": 0, "bytes": 0}
        for name in names:
            entries = store.load(name)
            counts["bytes"] += sum(entry_size(e) for e in entries)
            if is_fact_namespace(name):
                counts["facts"] += sum(e.key is not None for e in entries)
            elif name.startswith(WORKING_PREFIX):
                counts["working"] += sum(e.key is not None for e in entries)
        cids = memory.conversation_ids
        return {
            "facts": counts["facts"],
            "episodes": len(store.load(EPISODES_NAMESPACE)),
            "procedures": len(store.load(PROCEDURES_NAMESPACE)),
            "users": len(people.all_users(store)),
            "conversations": len(cids),
            "turns": sum(turn_count(memory, cid) for cid in cids),
            "working": counts["working"],
            "bytes": counts["bytes"],
        }

    def stats(self) -> list[dict[str, Any]]:
        """Per namespace: entries, their JSON size in bytes, and how many have a TTL."""
        store = self.manager.store
        rows = []
        for name in sorted(store.namespaces()):
            entries = store.load(name)
            rows.append(
                {
                    "namespace": name,
                    "entries": len(entries),
                    "bytes": sum(entry_size(e) for e in entries),
                    "with_ttl": sum(e.expires_at is not None for e in entries),
                }
            )
        return rows

    # ------------------------------------------------------------------ changes

    def delete(
        self,
        kind: str,
        ids: Sequence[str],
        *,
        progress: Callable[[int], None] | None = None,
        actor: str | None = None,
    ) -> dict[str, list[str]]:
        """Deletes records of one kind by id; every id is checked before anything is deleted.

        One warning on the ``memlane.audit`` logger names who, the kind and the ids before
        anything is deleted; plain entries go in one ``delete_many`` per namespace (one
        transaction on SQLite and PostgreSQL), conversations through ``clear``.

        Args:
            kind: One of :data:`~memlane.records.KINDS`.
            ids: The records' ids (an id given twice is deleted once).
            progress: Called with how many ids were handled.
            actor: Who deletes, for the audit line (default ``memlane``).

        Returns:
            ``{"deleted": [...], "not_found": [...]}``.

        Raises:
            ValueError: An unknown kind or a malformed id (nothing deleted).
        """
        return changes.delete(self, kind, ids, progress=progress, actor=actor)

    def delete_working(
        self,
        scope: str,
        keys: Sequence[str],
        *,
        progress: Callable[[int], None] | None = None,
        actor: str | None = None,
    ) -> dict[str, list[str]]:
        """Deletes entries of one working-memory scope by key, as :meth:`delete` does."""
        return changes.delete_working(self, scope, keys, progress=progress, actor=actor)

    def update_fact(
        self,
        fact_id: str,
        *,
        value: Any = changes.UNSET,
        confidence: float | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Changes a fact's value and/or confidence; the new row (with ``id``).

        A new value is remembered as an update (the old one joins the fact's history).

        Raises:
            RecordNotFoundError: No such fact (a ``KeyError``).
            ValueError: A malformed id, a confidence outside 0-1, or nothing to change.
            TypeError: A value that is not plain JSON.
        """
        return changes.update_fact(self, fact_id, value=value, confidence=confidence, actor=actor)

    def set_fact(
        self,
        key: str,
        value: Any,
        *,
        scope: str = "global",
        scope_id: str | None = None,
        confidence: float | None = None,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Remembers ``key = value`` in a scope (creating or updating it); the row and status.

        Raises:
            ValueError, TypeError: As ``LongTermMemory.remember`` raises them.
        """
        return changes.set_fact(
            self, key, value, scope=scope, scope_id=scope_id, confidence=confidence, actor=actor
        )

    def update_working(
        self,
        scope: str,
        key: str,
        value: Any,
        *,
        importance: float | None = None,
        create: bool = False,
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Changes a working-memory entry's value (and importance), keeping its expiry.

        Args:
            scope: The working-memory scope.
            key: The entry's key.
            value: The new value (plain JSON).
            importance: The new importance (0-1); ``None`` keeps it.
            create: Create a missing entry instead of refusing.
            actor: Who edits, for the audit line.

        Raises:
            RecordNotFoundError: No such entry and not ``create``.
        """
        return changes.update_working(
            self, scope, key, value, importance=importance, create=create, actor=actor
        )

    def update_user(
        self, user_id: str, *, display_name: str | None, actor: str | None = None
    ) -> dict[str, Any]:
        """Sets (or, with ``None``, clears) a user's display name; the user as stored.

        Raises:
            UserNotFoundError: No such user (a ``KeyError``).
            ValueError: An empty name.
        """
        return changes.update_user(self, user_id, display_name=display_name, actor=actor)

    def forget_user(
        self, user: str, *, dry_run: bool = False, actor: str | None = None
    ) -> dict[str, Any]:
        """Deletes every record of one person: facts, episodes, user records, conversations.

        Args:
            user: An id, a merged id, ``channel:id`` or an unambiguous display name.
            dry_run: List what would go, deleting nothing.
            actor: Who forgets, for the audit line.

        Returns:
            ``{"user_ids", "facts", "episodes", "identifiers", "conversations", "dry_run"}``.

        Raises:
            UserNotFoundError: ``user`` names nobody.
            AmbiguousUserError: ``user`` is a display name several users share.
        """
        return changes.forget_user(self, user, dry_run=dry_run, actor=actor)
