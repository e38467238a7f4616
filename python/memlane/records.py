"""What an operator browses and deletes: every kind of record on a store, as plain JSON.

The ``memlane`` command and ``memlane serve`` both read and delete through :class:`Records`,
so the terminal and the web page always agree on what a store holds and on what an id names.

Every record has a string id that names it within its own kind only:

* a fact: ``global:KEY`` or ``SCOPE:SCOPE_ID:KEY`` (the parts escaped as long-term
  namespaces escape them, so any key or scope id round-trips and no id can name another
  scope's fact);
* an episode, a procedure, a user: their own ``id``;
* a conversation (a "checkpoint" on the web page): its conversation id;
* a working-memory fact: its key, within the scope given beside it.

A delete reads only the namespace of its kind, so a malformed or foreign id is either
refused (:class:`ValueError`) or reported as not found, never deleted elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from memlane._validate import check_identifier
from memlane.errors import ConversationNotFoundError
from memlane.longterm import Episode, Fact, FactScope, LongTermMemory, MemoryUser, Procedure
from memlane.longterm.episodes import EPISODES_NAMESPACE
from memlane.longterm.model import namespace, parse_namespace
from memlane.longterm.procedures import PROCEDURES_NAMESPACE
from memlane.longterm.users import IDENTIFIERS_NAMESPACE, USERS_NAMESPACE
from memlane.manager import MemoryManager
from memlane.types import MemoryEntry

__all__ = ["KINDS", "WORKING_PREFIX", "Kind", "Page", "Records", "fact_id", "parse_fact_id"]

Kind = Literal["facts", "episodes", "procedures", "users", "conversations"]
KINDS: tuple[Kind, ...] = ("facts", "episodes", "procedures", "users", "conversations")
"""The kinds of record with an id of their own (working memory is listed per scope)."""

WORKING_PREFIX = "working:"
"""Working-memory scopes live in namespaces ``working:{scope_id}``."""

Page = dict[str, Any]
"""``{"items": [...], "total": n, "offset": o, "limit": l}``: one page of a listing."""


def fact_id(fact: Fact) -> str:
    """The id of a fact: its scope, scope id (none for ``global``) and key."""
    if fact.scope is FactScope.GLOBAL:
        return namespace(fact.scope.value, fact.key)
    assert fact.scope_id is not None  # every scope but global has one
    return namespace(fact.scope.value, fact.scope_id, fact.key)


def parse_fact_id(value: object) -> tuple[FactScope, str | None, str]:
    """(scope, scope id, key) of a fact id.

    Raises:
        TypeError: Not a ``str``.
        ValueError: Not a fact id.
    """
    text = check_identifier(value, "fact id")
    parts = parse_namespace(text)
    try:
        scope = FactScope(parts[0])
    except ValueError:
        raise ValueError(
            f"not a fact id: {text!r} (expected global:KEY or SCOPE:SCOPE_ID:KEY)"
        ) from None
    if scope is FactScope.GLOBAL and len(parts) == 2 and parts[1]:
        return scope, None, parts[1]
    if scope is not FactScope.GLOBAL and len(parts) == 3 and parts[1] and parts[2]:
        return scope, parts[1], parts[2]
    raise ValueError(f"not a fact id: {text!r} (expected global:KEY or SCOPE:SCOPE_ID:KEY)")


def _json(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json")
    return data


def _text(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False).casefold()


def _page(items: list[dict[str, Any]], q: str | None, offset: int, limit: int | None) -> Page:
    if q:
        wanted = q.casefold()
        items = [item for item in items if wanted in _text(item)]
    end = None if limit is None else offset + limit
    return {"items": items[offset:end], "total": len(items), "offset": offset, "limit": limit}


def _check_page(offset: object, limit: object) -> tuple[int, int | None]:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    return offset, limit


def check_ids(ids: object) -> list[str]:
    """The ids of a batch delete: a non-empty list of non-empty strings.

    Raises:
        TypeError: Not a list of ``str``.
        ValueError: Empty, or an empty id.
    """
    if not isinstance(ids, list):
        raise TypeError(f"ids must be a list of strings, not {type(ids).__name__}")
    if not ids:
        raise ValueError("ids must name at least one record")
    return [check_identifier(i, f"ids[{n}]") for n, i in enumerate(ids)]


class Records:
    """Lists, shows and deletes the records of one manager's store.

    Args:
        manager: Whose store to read; its long-term memory is used when it has one, else one
            is made over the same store.
    """

    def __init__(self, manager: MemoryManager) -> None:
        self.manager = manager
        self.long_term = manager.long_term or LongTermMemory(manager.store)

    # ------------------------------------------------------------------ listing

    def facts(
        self,
        *,
        scope: str | None = None,
        scope_id: str | None = None,
        fact_type: str | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> Page:
        """Facts (each with its ``id``), filtered by scope, scope id, type and a substring."""
        offset, limit = _check_page(offset, limit)
        if scope_id is not None and scope is None:
            raise ValueError("scope_id needs a scope (session, user or agent)")
        found = self.long_term.facts(scope=scope, scope_id=scope_id)
        items = [
            {"id": fact_id(f), **_json(f)}
            for f in found
            if fact_type is None or f.fact_type.value == fact_type
        ]
        return _page(items, q, offset, limit)

    def episodes(
        self,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        success: bool | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> Page:
        """Episodes, most recent first, without their messages (see :meth:`episode`)."""
        offset, limit = _check_page(offset, limit)
        found = self.long_term.episodes(agent_id=agent_id, user_id=user_id, success=success)
        items = [_episode_summary(e) for e in found]
        return _page(items, q, offset, limit)

    def episode(self, episode_id: str) -> dict[str, Any] | None:
        """One episode in full, or ``None``."""
        entry = self.manager.store.load_by_key(
            EPISODES_NAMESPACE, check_identifier(episode_id, "episode id")
        )
        return None if entry is None else _json(Episode.model_validate(entry.content))

    def procedures(
        self,
        *,
        procedure_type: str | None = None,
        q: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> Page:
        """Procedures, filtered by type and a substring."""
        offset, limit = _check_page(offset, limit)
        items = [
            _json(p)
            for p in self.long_term.procedures()
            if procedure_type is None or p.procedure_type.value == procedure_type
        ]
        return _page(items, q, offset, limit)

    def users(self, *, q: str | None = None, offset: int = 0, limit: int | None = None) -> Page:
        """Memory users (merged ones included, with ``merged_into_id`` set)."""
        offset, limit = _check_page(offset, limit)
        entries = self.manager.store.load(USERS_NAMESPACE)
        users = sorted(
            (MemoryUser.model_validate(e.content) for e in entries), key=lambda u: u.created_at
        )
        return _page([_json(u) for u in users], q, offset, limit)

    def conversations(
        self, *, q: str | None = None, offset: int = 0, limit: int | None = None
    ) -> Page:
        """Conversations with their turns, tokens, budget use and last activity."""
        offset, limit = _check_page(offset, limit)
        items = [self._conversation_row(cid) for cid in self.manager.conversation.conversation_ids]
        items.sort(key=lambda row: row["last_activity"] or "", reverse=True)
        return _page(items, q, offset, limit)

    def _conversation_row(self, cid: str) -> dict[str, Any]:
        memory = self.manager.conversation
        turns = memory.get_turns(cid)
        history = memory.get_history_tokens(cid)
        return {
            "id": cid,
            "turns": len(turns),
            "history_tokens": history,
            "total_tokens": memory.get_total_tokens(cid),
            "budget": memory.max_tokens,
            "budget_used": history / memory.max_tokens,
            "has_summary": memory.get_summary(cid) is not None,
            "last_activity": turns[-1].timestamp.isoformat() if turns else None,
        }

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        """A conversation as the model receives it: summary, turns with tokens, budget.

        Raises:
            ConversationNotFoundError: The id is unknown.
        """
        memory = self.manager.conversation
        cid = check_identifier(conversation_id, "conversation id")
        if cid not in memory.conversation_ids:
            raise ConversationNotFoundError(f"no conversation {cid!r}")
        from pydantic_ai.messages import ModelRequest, UserPromptPart  # what a history holds

        row = self._conversation_row(cid)
        history = memory.get_message_history(cid)
        # The newest turns that fit the budget are sent whole; older kept ones wait for the
        # summary. Each sent turn opens with the request holding its user prompt.
        row["sent_turns"] = sum(
            any(isinstance(part, UserPromptPart) for part in message.parts)
            for message in history
            if isinstance(message, ModelRequest)
        )
        row["summary"] = memory.get_summary(cid)
        row["summary_tokens"] = memory.estimator.estimate(row["summary"] or "")
        turns = memory.get_turns(cid)
        first_sent = len(turns) - row["sent_turns"]
        row["messages"] = [
            {
                "turn_id": t.turn_id,
                "user": t.user_prompt,
                "assistant": t.assistant_response,
                "tokens": t.token_estimate,
                "timestamp": t.timestamp.isoformat(),
                "sent": n >= first_sent,
            }
            for n, t in enumerate(turns)
        ]
        return row

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
        return [_working_item(e) for e in self.manager.store.load(name) if e.key is not None]

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
        """Ranked long-term search; each hit as ``{"type": ..., "id": ..., "record": ...}``."""
        hits = self.long_term.search(
            query,
            memory_type=memory_type,
            limit=limit,
            min_confidence=0.0,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
        )
        found: list[dict[str, Any]] = []
        for hit in hits:
            if isinstance(hit, Fact):
                found.append({"type": "fact", "id": fact_id(hit), "record": _json(hit)})
            elif isinstance(hit, Episode):
                found.append({"type": "episode", "id": hit.id, "record": _episode_summary(hit)})
            else:
                assert isinstance(hit, Procedure)
                found.append({"type": "procedure", "id": hit.id, "record": _json(hit)})
        return found

    # ------------------------------------------------------------------ deleting

    def delete(
        self, kind: str, ids: Sequence[str], *, progress: Callable[[int], None] | None = None
    ) -> dict[str, list[str]]:
        """Deletes records of one kind by id; every id is checked before anything is deleted.

        Args:
            kind: One of :data:`KINDS`.
            ids: The records' ids.
            progress: Called with 1 after each id.

        Returns:
            ``{"deleted": [...], "not_found": [...]}``.

        Raises:
            ValueError: An unknown kind or a malformed id (nothing deleted).
        """
        deleters: dict[str, Callable[[str], bool]] = {
            "facts": self._delete_fact,
            "episodes": lambda i: self._delete_keyed(EPISODES_NAMESPACE, i),
            "procedures": lambda i: self._delete_keyed(PROCEDURES_NAMESPACE, i),
            "users": self._delete_user,
            "conversations": self._delete_conversation,
        }
        if kind not in deleters:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
        checked = check_ids(list(ids))
        if kind == "facts":
            for i in checked:
                parse_fact_id(i)
        return self._run(deleters[kind], checked, progress)

    def delete_working(
        self, scope: str, keys: Sequence[str], *, progress: Callable[[int], None] | None = None
    ) -> dict[str, list[str]]:
        """Deletes facts of one working-memory scope by key."""
        name = WORKING_PREFIX + check_identifier(scope, "scope")
        return self._run(lambda key: self._delete_keyed(name, key), check_ids(list(keys)), progress)

    @staticmethod
    def _run(
        delete: Callable[[str], bool],
        ids: Iterable[str],
        progress: Callable[[int], None] | None,
    ) -> dict[str, list[str]]:
        done: dict[str, list[str]] = {"deleted": [], "not_found": []}
        for i in dict.fromkeys(ids):  # an id given twice is deleted once
            done["deleted" if delete(i) else "not_found"].append(i)
            if progress is not None:
                progress(1)
        return done

    def _delete_fact(self, value: str) -> bool:
        scope, scope_id, key = parse_fact_id(value)
        return self.long_term.forget(key, scope=scope, scope_id=scope_id)

    def _delete_keyed(self, where: str, key: str) -> bool:
        store = self.manager.store
        entry = store.load_by_key(where, key)
        return entry is not None and store.delete(where, entry.entry_id)

    def _delete_user(self, user_id: str) -> bool:
        store = self.manager.store
        entry = store.load_by_key(USERS_NAMESPACE, user_id)
        if entry is None:
            return False
        user = MemoryUser.model_validate(entry.content)
        # The index entries go first: an index entry must always name a stored user.
        for identifier in user.identifier_keys():
            indexed = store.load_by_key(IDENTIFIERS_NAMESPACE, identifier)
            if indexed is not None and indexed.content == user.id:
                store.delete(IDENTIFIERS_NAMESPACE, indexed.entry_id)
        return store.delete(USERS_NAMESPACE, entry.entry_id)

    def _delete_conversation(self, cid: str) -> bool:
        memory = self.manager.conversation
        if cid not in memory.conversation_ids:
            return False
        memory.clear(cid)
        return True

    # ------------------------------------------------------------------ statistics

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
                    "bytes": sum(_size(e) for e in entries),
                    "with_ttl": sum(e.expires_at is not None for e in entries),
                }
            )
        return rows


def _size(entry: MemoryEntry) -> int:
    return len(json.dumps(entry.content, ensure_ascii=False).encode("utf-8"))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _episode_summary(episode: Episode) -> dict[str, Any]:
    return {
        "id": episode.id,
        "agent_id": episode.agent_id,
        "user_id": episode.user_id,
        "conversation_id": episode.conversation_id,
        "trigger": episode.trigger,
        "input": episode.input,
        "success": episode.success,
        "output": episode.outcome.output,
        "error": episode.outcome.error,
        "actions": len(episode.actions),
        "messages": len(episode.messages),
        "started_at": _iso(episode.started_at),
        "ended_at": _iso(episode.ended_at),
        "duration": episode.duration,
        "rating": episode.rating,
    }


def _working_item(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "id": entry.key,
        "key": entry.key,
        "value": entry.content,
        "importance": entry.importance,
        "created_at": _iso(entry.created_at),
        "expires_at": _iso(entry.expires_at),
    }
