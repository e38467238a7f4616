"""Users recognised across channels: one person on Telegram and by email is one memory user.

A :class:`MemoryUser` has its own ``id`` and the channel identifiers it was seen under.
:meth:`Users.identify_user` finds the user of a channel identifier, creating them on
first sight; :meth:`Users.merge_users` makes two users one, and every later lookup of
the merged one follows ``merged_into_id`` to the user it now is.

Storage, and why it is safe with many processes:

* each user is one keyed entry of the users namespace (key: the user's id), changed only by
  compare-and-swap (``save_if`` against the version read, retried on a loss);
* an identifier index maps ``{channel}:{channel_user_id}`` to a user id, one keyed entry per
  identifier. A new identifier is claimed with ``save_if(..., None)``, which exactly one of
  any number of racing writers wins, so two processes identifying the same new person
  create one user: the loser deletes the record it wrote and returns the winner's user. The
  user record is written before its index entry, so an index entry always names a record.

A user's ``preferences`` are a cache of their ``user_preference`` facts in the ``user`` scope
(``scope_id`` the user's id). Every read through this module (``identify_user``,
``get_user``, ``user_context``) compares the cache with the facts and rewrites it when they
differ, so what it returns always equals the facts; the facts part calls
:meth:`Users.refresh_preferences_plan` after a preference changed, to refresh the stored copy
at once. (The data: :mod:`memlane.longterm.user_model`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memlane._runner import Delete, LoadByKey, Plan, SaveIf, async_method, sync_method
from memlane._validate import check_identifier, check_positive_int, type_name
from memlane.errors import CorruptStoreError, UserNotFoundError
from memlane.longterm.episode_model import Episode
from memlane.longterm.episodes import load_episodes_plan
from memlane.longterm.fact_model import Fact, FactScope, FactType
from memlane.longterm.facts import delete_fact_plan, remember_plan, scope_facts_plan
from memlane.longterm.namespaces import namespace
from memlane.longterm.procedures import update_record
from memlane.longterm.storage import StoragePart, async_writing_method, writing_method
from memlane.longterm.user_model import (
    IDENTIFIERS_NAMESPACE,
    USERS_NAMESPACE,
    MemoryUser,
    UserContext,
    absorbed,
    check_channel,
    check_channel_user_id,
    identifier,
    user_entry,
    user_from_content,
)
from memlane.types import MemoryEntry, MemoryScope, utc_now

if TYPE_CHECKING:
    pass

__all__ = [
    "IDENTIFIERS_NAMESPACE",
    "USERS_NAMESPACE",
    "MemoryUser",
    "UserContext",
    "UserNotFoundError",
    "Users",
    "load_user_plan",
    "require_user_plan",
    "resolve_user_plan",
    "user_from_content",
]

_MAX_MERGE_CHAIN = 64


class Users(StoragePart):
    """The users of one long-term memory; every operation has an ``async_`` twin.

    Reads the user's facts and episodes through the plans of :mod:`memlane.longterm.facts`
    and :mod:`memlane.longterm.episodes`, which need no state of their own.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    # ------------------------------------------------------------------ identity

    def _identify_user(
        self, channel: str, channel_user_id: str | int, *, display_name: str | None = None
    ) -> Plan[MemoryUser]:
        """The user seen on ``channel`` as ``channel_user_id``, created on first sight.

        Follows merges: an identifier of a user merged into another gives that other user.
        Of processes identifying the same new identifier at once, one creates the user and
        every one returns it.

        Args:
            channel: The channel's name, e.g. ``telegram`` or ``email`` (no ``:``; compared
                exactly, so use one spelling).
            channel_user_id: The user's id there (an ``int`` is taken as its decimal text).
            display_name: How to address the user; replaces the stored one when given.

        Returns:
            The user, with preferences equal to their ``user_preference`` facts.

        Raises:
            TypeError, ValueError: A bad argument, named in the message. Nothing is written.
        """
        key = identifier(check_channel(channel), check_channel_user_id(channel_user_id))
        if display_name is not None:
            check_identifier(display_name, "display_name")
        while True:
            held: MemoryEntry | None = yield LoadByKey(IDENTIFIERS_NAMESPACE, key)
            if held is None:
                created = yield from self._create_user_plan(channel, key, display_name)
                if created is None:
                    continue  # another process claimed the identifier first: use theirs
                return created
            user = yield from resolve_user_plan(held.content)
            if user is None:
                raise CorruptStoreError(
                    f"identifier {key!r} in {IDENTIFIERS_NAMESPACE} names user "
                    f"{held.content!r}, which {USERS_NAMESPACE} does not hold"
                )
            if display_name is not None and user.display_name != display_name:
                user = yield from update_live_user_plan(
                    user.id, lambda u: u.model_copy(update={"display_name": display_name})
                )
            return (yield from self._fresh_preferences_plan(user))

    identify_user = sync_method(_identify_user)
    async_identify_user = async_method(_identify_user)

    def _create_user_plan(
        self, channel: str, key: str, display_name: str | None
    ) -> Plan[MemoryUser | None]:
        """A new user claiming identifier ``key``, or ``None`` if another writer claimed it."""
        channel_user_id = key[len(channel) + 1 :]
        user = MemoryUser(
            canonical_id=key, identifiers={channel: [channel_user_id]}, display_name=display_name
        )
        record = user_entry(user)
        # The record first: whoever reads the index entry must find the user it names.
        yield SaveIf(USERS_NAMESPACE, record, None)
        claim = MemoryEntry(scope=MemoryScope.LONG_TERM, key=key, content=user.id)
        if (yield SaveIf(IDENTIFIERS_NAMESPACE, claim, None)):
            return (yield from self._fresh_preferences_plan(user))
        yield Delete(USERS_NAMESPACE, record.entry_id)
        return None

    def _get_user(self, user_id: str) -> Plan[MemoryUser | None]:
        """The user with ``user_id`` (following merges), or ``None``.

        Raises:
            TypeError, ValueError: ``user_id`` is not a non-empty ``str``.
        """
        user = yield from resolve_user_plan(check_identifier(user_id, "user_id"))
        if user is None:
            return None
        return (yield from self._fresh_preferences_plan(user))

    get_user = sync_method(_get_user)
    async_get_user = async_method(_get_user)

    def _merge_users(self, source_id: str, into_id: str) -> Plan[MemoryUser]:
        """Makes ``source_id``'s user part of ``into_id``'s: one person, seen on more channels.

        Moves the source's identifiers (each now finds the surviving user), its statistics
        (messages added, conversations joined, the later ``last_seen_at``) and its ``user``
        facts, merged by ``remember``'s rules: a key both hold keeps the value updated last
        (the other joins its history, as an update would), a key only the source holds is
        created. The source then has ``merged_into_id`` set, and every lookup of it gives the
        surviving user. Both ids are followed through earlier merges first; merging a user
        into itself (or into one it already became) changes nothing.

        Returns:
            The surviving user, as stored after the merge.

        Raises:
            UserNotFoundError: Either id names no user (a ``KeyError``); nothing is written.
            TypeError, ValueError: An id that is not a non-empty ``str``.
        """
        source = yield from require_user_plan(check_identifier(source_id, "source_id"))
        into = yield from require_user_plan(check_identifier(into_id, "into_id"))
        if source.id == into.id:
            return (yield from self._fresh_preferences_plan(into))
        target = into.id

        def retire(user: MemoryUser) -> MemoryUser:
            if user.merged_into_id is not None:
                raise _MergedMeanwhile
            return user.model_copy(update={"merged_into_id": target})

        try:
            source = yield from update_user_plan(source.id, retire)
        except _MergedMeanwhile:
            # Another merge of the source won: merge what it became instead.
            return (yield from self._merge_users(source.id, target))

        # Into whatever the target is by now: were it merged meanwhile, a retired record
        # would keep what the source brings, and no lookup would ever see it.
        into = yield from update_live_user_plan(target, lambda user: absorbed(user, source))
        for key in source.identifier_keys():
            yield from update_record(
                IDENTIFIERS_NAMESPACE, key, lambda held: into.id if held == source.id else held
            )
        yield from self._move_facts_plan(source.id, into.id)
        return (yield from self._fresh_preferences_plan(into))

    merge_users = writing_method(_merge_users)
    async_merge_users = async_writing_method(_merge_users)

    def _move_facts_plan(self, source_id: str, into_id: str) -> Plan[None]:
        moving = yield from scope_facts_plan(FactScope.USER, source_id)
        held = {f.key: f for f in (yield from scope_facts_plan(FactScope.USER, into_id))}
        for fact in moving:
            kept = held.get(fact.key)
            newer = kept is None or fact.updated_at > kept.updated_at
            yield from remember_plan(
                fact.key,
                fact.value,
                FactScope.USER,
                into_id,
                fact.fact_type,
                fact.confidence,
                newer,
            )
            gone = yield from delete_fact_plan(fact.key, FactScope.USER, source_id)
            if gone is not None and gone.fact_type is FactType.USER_PREFERENCE:
                # The retired record's cache follows its facts too, as ``forget`` keeps it.
                yield from self.refresh_preferences_plan(source_id)

    # ------------------------------------------------------------------ statistics and context

    def _record_user_activity(
        self,
        user_id: str,
        *,
        messages: int = 1,
        conversation_id: str | None = None,
    ) -> Plan[MemoryUser]:
        """Counts a user's activity: ``messages`` more, the conversation, seen now.

        Safe under concurrent writers in any number of processes: every call counts once.

        Args:
            user_id: The user (merges are followed).
            messages: How many messages to add (0 or more).
            conversation_id: The conversation they were in; counted once however often given.

        Returns:
            The user as stored after the call.

        Raises:
            UserNotFoundError: No user has ``user_id`` (a ``KeyError``).
            TypeError, ValueError: A bad argument, named in the message.
        """
        check_identifier(user_id, "user_id")
        if isinstance(messages, bool) or not isinstance(messages, int):
            raise TypeError(f"messages must be int, not {type_name(messages)}")
        if messages < 0:
            raise ValueError(f"messages must be >= 0, got {messages!r}")
        if conversation_id is not None:
            check_identifier(conversation_id, "conversation_id")
        now = utc_now()

        def count(held: MemoryUser) -> MemoryUser:
            conversations = held.conversation_ids
            if conversation_id is not None and conversation_id not in conversations:
                conversations = [*conversations, conversation_id]
            seen = now if held.last_seen_at is None else max(held.last_seen_at, now)
            return held.model_copy(
                update={
                    "message_count": held.message_count + messages,
                    "conversation_ids": conversations,
                    "last_seen_at": seen,
                }
            )

        updated = yield from update_live_user_plan(user_id, count)
        return (yield from self._fresh_preferences_plan(updated))

    record_user_activity = sync_method(_record_user_activity)
    async_record_user_activity = async_method(_record_user_activity)

    def _user_context(self, user_id: str, *, episodes: int = 5) -> Plan[UserContext]:
        """What memory knows about a user: their facts, preferences and latest episodes.

        Episodes count when recorded for the user or for a user merged into them.

        Args:
            user_id: The user (merges are followed).
            episodes: At most this many episodes, most recent first.

        Raises:
            UserNotFoundError: No user has ``user_id`` (a ``KeyError``).
            TypeError, ValueError: A bad argument, named in the message.
        """
        check_identifier(user_id, "user_id")
        check_positive_int(episodes, "episodes")
        user = yield from require_user_plan(user_id)
        facts = yield from scope_facts_plan(FactScope.USER, user.id)
        user = yield from self._fresh_preferences_plan(user, facts)
        ids = {user.id, *user.merged_ids}
        recent: list[Episode] = []
        for episode in (yield from load_episodes_plan()):
            if episode.user_id in ids:
                recent.append(episode)
                if len(recent) == episodes:
                    break
        return UserContext(
            user=user, facts=facts, preferences=user.preferences, recent_episodes=recent
        )

    user_context = sync_method(_user_context)
    async_user_context = async_method(_user_context)

    def _thread_id(self, user_id: str, chat_id: str | int, workflow_id: str) -> Plan[str]:
        """The conversation id of a user on a workflow, the same on every channel.

        Composed injectively from the user's id (after following merges, so a person whose
        two users were merged continues one conversation) and ``workflow_id``: different
        users or workflows never share an id. ``chat_id`` (where the message arrived: a
        Telegram chat, an email thread) is checked but not part of the id, on purpose: the
        same person on the same workflow continues one conversation wherever they write,
        and including the chat would split it per channel.

        Raises:
            UserNotFoundError: No user has ``user_id`` (a ``KeyError``).
            TypeError, ValueError: A bad argument, named in the message.
        """
        check_identifier(user_id, "user_id")
        check_channel_user_id(chat_id, "chat_id")
        check_identifier(workflow_id, "workflow_id")
        user = yield from require_user_plan(user_id)
        return namespace("thread", user.id, workflow_id)

    thread_id = sync_method(_thread_id)
    async_thread_id = async_method(_thread_id)

    # ------------------------------------------------------------------ records

    def refresh_preferences_plan(self, user_id: str) -> Plan[MemoryUser | None]:
        """Rewrites the stored preference cache of ``user_id`` from the facts, if it is stale.

        For the facts part, after a ``user_preference`` fact of the ``user`` scope changed;
        ``None`` (nothing written) when no user has that id.
        """
        user = yield from load_user_plan(user_id)
        if user is None:
            return None
        return (yield from self._fresh_preferences_plan(user))

    def _fresh_preferences_plan(
        self, user: MemoryUser, facts: list[Fact] | None = None
    ) -> Plan[MemoryUser]:
        """``user`` with preferences equal to their facts, stored if the cache was stale."""
        if facts is None:
            facts = yield from scope_facts_plan(FactScope.USER, user.id)
        preferences = {f.key: f.value for f in facts if f.fact_type is FactType.USER_PREFERENCE}
        if preferences == user.preferences:
            return user
        if getattr(self.store, "read_only", False) is True:
            # A read never writes to a store opened read-only: the copy returned is right,
            # and the stored cache is refreshed by the next writable read.
            return user.model_copy(update={"preferences": preferences})
        yield from update_user_plan(
            user.id, lambda held: held.model_copy(update={"preferences": preferences})
        )
        return user.model_copy(update={"preferences": preferences})


def load_user_plan(user_id: str) -> Plan[MemoryUser | None]:
    """The user stored under ``user_id`` (merges not followed), or ``None``."""
    held: MemoryEntry | None = yield LoadByKey(USERS_NAMESPACE, user_id)
    return None if held is None else user_from_content(held.content)


def resolve_user_plan(user_id: str) -> Plan[MemoryUser | None]:
    """The user ``user_id`` names, following merges; ``None`` if there is none."""
    user = yield from load_user_plan(user_id)
    for _ in range(_MAX_MERGE_CHAIN):
        if user is None or user.merged_into_id is None:
            return user
        user = yield from load_user_plan(user.merged_into_id)
    raise CorruptStoreError(f"user {user_id!r} is merged in a chain longer than allowed")


def require_user_plan(user_id: str) -> Plan[MemoryUser]:
    """The user ``user_id`` names, following merges.

    Raises:
        UserNotFoundError: There is none.
    """
    user = yield from resolve_user_plan(user_id)
    if user is None:
        raise UserNotFoundError(f"no user with id {user_id!r}")
    return user


def update_user_plan(user_id: str, change: Callable[[MemoryUser], MemoryUser]) -> Plan[MemoryUser]:
    """Applies ``change`` (``MemoryUser`` → ``MemoryUser``) by compare-and-swap."""

    def apply(content: Any) -> Any:
        return change(user_from_content(content)).model_dump(mode="json")

    stored = yield from update_record(USERS_NAMESPACE, user_id, apply)
    if stored is None:
        raise UserNotFoundError(f"no user with id {user_id!r}")
    return user_from_content(stored)


def update_live_user_plan(
    user_id: str, change: Callable[[MemoryUser], MemoryUser]
) -> Plan[MemoryUser]:
    """Applies ``change`` to the user ``user_id`` is now, following merges.

    A merge that retires the user between the lookup and the write makes the write lose
    (the record's version moved on) and see ``merged_into_id``: the change is then
    applied to the user it was merged into, so nothing lands on a retired record.
    """

    def live(user: MemoryUser) -> MemoryUser:
        if user.merged_into_id is not None:
            raise _MergedMeanwhile
        return change(user)

    while True:
        user = yield from require_user_plan(user_id)
        try:
            return (yield from update_user_plan(user.id, live))
        except _MergedMeanwhile:
            continue


class _MergedMeanwhile(Exception):
    """The user being changed was merged by another writer since it was looked up."""
