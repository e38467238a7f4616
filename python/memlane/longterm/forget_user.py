"""Forgetting a person: every long-term record of one user, in one call, listed first.

What an operator runs when someone asks to be forgotten. The user is found by id, by the id
of a user merged into them, or by a channel identifier (``telegram:12345``), and every id
merged into them counts as theirs. Their records go in an order that never leaves a
dangling reference for a concurrent reader: the identifier index entries first (a lookup then
finds nobody, rather than an index entry naming a user record that is gone), then their
``user`` facts and their episodes, and the user records last. Conversations are listed, not
deleted: they belong to conversation memory, which the caller clears.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from memlane._runner import (
    Clear,
    DeleteMany,
    Load,
    LoadByKey,
    LoadRange,
    Plan,
    async_method,
    sync_method,
)
from memlane._validate import check_identifier, type_name
from memlane.errors import UserNotFoundError
from memlane.longterm.episode_model import EPISODES_NAMESPACE
from memlane.longterm.fact_model import FactScope
from memlane.longterm.fact_scopes import fact_namespace
from memlane.longterm.facts import scope_facts_plan
from memlane.longterm.namespaces import namespace
from memlane.longterm.storage import StoragePart
from memlane.longterm.user_model import (
    IDENTIFIERS_NAMESPACE,
    USERS_NAMESPACE,
    MemoryUser,
    user_from_content,
)
from memlane.longterm.users import resolve_user_plan

if TYPE_CHECKING:
    from memlane.types import MemoryEntry

__all__ = ["ForgetReport", "UserEraser"]

# The namespace listing every conversation (memlane.conversation.state.INDEX_NAMESPACE):
# named here so that long-term memory does not import conversation memory for one string.
_CONVERSATIONS = "conversations"


class ForgetReport(BaseModel):
    """What :meth:`UserEraser.forget_user` removed, or would remove with ``dry_run``.

    Attributes:
        user_ids: The user's id first, then the ids merged into them.
        facts: Their ``user`` facts, as fact ids (``user:<user id>:<key>``).
        episodes: Their episodes' ids.
        identifiers: Their ``{channel}:{channel_user_id}`` identifiers.
        conversations: Conversation ids recorded on them or made for them by ``thread_id``;
            not deleted by long-term memory (clear them with conversation memory).
        dry_run: Whether this only lists (nothing was deleted).
    """

    user_ids: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    episodes: list[str] = Field(default_factory=list)
    identifiers: list[str] = Field(default_factory=list)
    conversations: list[str] = Field(default_factory=list)
    dry_run: bool = False


class UserEraser(StoragePart):
    """``forget_user`` of one long-term memory, with its ``async_`` twin.

    Reads users and facts through the plans of :mod:`memlane.longterm.users` and
    :mod:`memlane.longterm.facts`.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def _forget_user(self, user_id: str, *, dry_run: bool = False) -> Plan[ForgetReport]:
        """Deletes every long-term record of a person: their ``user`` facts, their episodes,
        their identifier index entries and their user records, merged ones included.

        Args:
            user_id: The user's id, the id of a user merged into them, or one of their
                channel identifiers (``telegram:12345``).
            dry_run: Only list what would be deleted.

        Returns:
            What was deleted (or would be), with the conversations recorded for them, which
            the caller clears with conversation memory.

        Raises:
            UserNotFoundError: Nobody is known by ``user_id`` (a ``KeyError``); nothing is
                deleted.
            TypeError, ValueError: ``user_id`` is not a non-empty ``str``, or ``dry_run``
                not a ``bool``.
        """
        text = check_identifier(user_id, "user_id")
        if not isinstance(dry_run, bool):
            raise TypeError(f"dry_run must be bool, not {type_name(dry_run)}")
        user = yield from self._person_plan(text)
        ids = list(dict.fromkeys([user.id, *user.merged_ids]))
        records: list[MemoryEntry] = []
        users: list[MemoryUser] = []
        for uid in ids:
            held: MemoryEntry | None = yield LoadByKey(USERS_NAMESPACE, uid)
            if held is not None:
                records.append(held)
                users.append(user_from_content(held.content))
        keys = list(dict.fromkeys(k for u in users for k in u.identifier_keys()))
        index: list[MemoryEntry] = []
        for key in keys:
            claim: MemoryEntry | None = yield LoadByKey(IDENTIFIERS_NAMESPACE, key)
            # An identifier since claimed by someone else is theirs, not this person's.
            if claim is not None and claim.content in ids:
                index.append(claim)
        facts: list[str] = []
        for uid in ids:
            held_facts = yield from scope_facts_plan(FactScope.USER, uid)
            facts.extend(namespace(FactScope.USER.value, uid, fact.key) for fact in held_facts)
        all_episodes: list[MemoryEntry] = yield Load(EPISODES_NAMESPACE)
        episodes = [e for e in all_episodes if _episode_user(e) in ids and e.key is not None]
        conversations = [c for u in users for c in u.conversation_ids]
        conversations.extend((yield from self._threads_plan(ids)))
        report = ForgetReport(
            user_ids=ids,
            facts=facts,
            episodes=[e.key for e in episodes if e.key is not None],
            identifiers=[e.key for e in index if e.key is not None],
            conversations=list(dict.fromkeys(conversations)),
            dry_run=dry_run,
        )
        if dry_run:
            return report
        if index:
            yield DeleteMany(IDENTIFIERS_NAMESPACE, [e.entry_id for e in index])
        for uid in ids:
            yield Clear(fact_namespace(FactScope.USER, uid))
        if episodes:
            yield DeleteMany(EPISODES_NAMESPACE, [e.entry_id for e in episodes])
        yield DeleteMany(USERS_NAMESPACE, [e.entry_id for e in records])
        return report

    forget_user = sync_method(_forget_user)
    async_forget_user = async_method(_forget_user)

    def _person_plan(self, text: str) -> Plan[MemoryUser]:
        """The user ``text`` names: an id or merged id, else a channel identifier."""
        user = yield from resolve_user_plan(text)
        if user is None and ":" in text:
            claim: MemoryEntry | None = yield LoadByKey(IDENTIFIERS_NAMESPACE, text)
            if claim is not None and isinstance(claim.content, str):
                user = yield from resolve_user_plan(claim.content)
        if user is None:
            raise UserNotFoundError(
                f"no user {text!r} (looked up as a user id, a merged id and a channel:id)"
            )
        return user

    def _threads_plan(self, ids: list[str]) -> Plan[list[str]]:
        """The conversations ``thread_id`` made for these users that the store lists: one
        indexed range read per user where the store has ``load_range``."""
        found: list[str] = []
        ranged = callable(getattr(self.store, "load_range", None))
        listed: list[MemoryEntry] = []
        if not ranged:
            listed = yield Load(_CONVERSATIONS)
        for uid in ids:
            # thread_id is namespace("thread", user id, workflow): these keys share this
            # prefix, and ";" is the character after ":".
            prefix = namespace("thread", uid) + ":"
            stop = prefix[:-1] + ";"
            if ranged:
                entries: list[MemoryEntry] = yield LoadRange(_CONVERSATIONS, prefix, stop)
            else:
                entries = [e for e in listed if e.key is not None and e.key.startswith(prefix)]
            found.extend(e.key for e in entries if e.key is not None)
        return found


def _episode_user(entry: MemoryEntry) -> Any:
    content = entry.content
    return content.get("user_id") if isinstance(content, dict) else None
