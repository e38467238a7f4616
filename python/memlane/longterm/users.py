"""Users recognised across channels: one person on Telegram and by email is one memory user.

A :class:`MemoryUser` has its own ``id`` and the channel identifiers it was seen under.
:meth:`UsersMixin.identify_user` finds the user of a channel identifier, creating them on
first sight; :meth:`UsersMixin.merge_users` makes two users one, and every later lookup of
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
differ, so what it returns always equals the facts; the facts module may call
:meth:`UsersMixin._refresh_preferences_plan` after remembering a preference to refresh the
stored copy at once.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, computed_field, field_validator

from memlane._runner import Plan, StoreCall, async_method, sync_method
from memlane._validate import check_identifier, check_positive_int, type_name
from memlane.errors import CorruptStoreError, UserNotFoundError
from memlane.longterm.episodes import Episode
from memlane.longterm.model import Fact, FactScope, FactType, namespace, render_value
from memlane.longterm.procedures import update_record
from memlane.stores import MemoryStore
from memlane.types import MemoryEntry, MemoryScope, as_utc, utc_now

if TYPE_CHECKING:
    from memlane.longterm.model import RememberResult

__all__ = [
    "IDENTIFIERS_NAMESPACE",
    "USERS_NAMESPACE",
    "MemoryUser",
    "UserContext",
    "UserNotFoundError",
    "UsersMixin",
]

USERS_NAMESPACE = namespace("longterm", "users")
"""The namespace of user records, keyed by :attr:`MemoryUser.id`."""

IDENTIFIERS_NAMESPACE = namespace("longterm", "user-identifiers")
"""The identifier index: ``{channel}:{channel_user_id}`` → the id of the user it names."""

_MAX_MERGE_CHAIN = 64


class MemoryUser(BaseModel):
    """One person, recognised on every channel they were seen on.

    Attributes:
        id: Unique id (uuid4 hex); facts and episodes about the user use it as ``user_id``.
        canonical_id: ``{channel}:{channel_user_id}`` of the channel first seen on, e.g.
            ``telegram:12345``; a merge keeps the surviving user's.
        identifiers: Channel → the ids the user has there, in the order first seen.
        display_name: How to address the user, if known.
        preferences: Key → value of the user's ``user_preference`` facts (a cache of them).
        conversation_ids: The conversations recorded by ``record_user_activity``.
        message_count: Messages recorded by ``record_user_activity``.
        created_at: When first seen, aware UTC.
        last_seen_at: When activity was last recorded, or ``None``.
        merged_into_id: The user this one was merged into, or ``None``.
        merged_ids: The users merged into this one.
    """

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    canonical_id: str
    identifiers: dict[str, list[str]] = Field(default_factory=dict)
    display_name: str | None = None
    preferences: dict[str, Any] = Field(default_factory=dict)
    conversation_ids: list[str] = Field(default_factory=list)
    message_count: int = Field(default=0, ge=0)
    created_at: datetime = Field(default_factory=utc_now)
    last_seen_at: datetime | None = None
    merged_into_id: str | None = None
    merged_ids: list[str] = Field(default_factory=list)

    @field_validator("created_at", "last_seen_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented pattern
    @property
    def conversation_count(self) -> int:
        """How many conversations were recorded."""
        return len(self.conversation_ids)

    @property
    def telegram_id(self) -> str | None:
        """The first Telegram id, or ``None``."""
        return self.channel_id("telegram")

    @property
    def email(self) -> str | None:
        """The first email address, or ``None``."""
        return self.channel_id("email")

    def channel_id(self, channel: str) -> str | None:
        """The first id the user has on ``channel``, or ``None``."""
        ids = self.identifiers.get(channel)
        return ids[0] if ids else None

    def identifier_keys(self) -> list[str]:
        """Every ``{channel}:{channel_user_id}`` naming the user."""
        return [_identifier(c, i) for c, ids in self.identifiers.items() for i in ids]


class UserContext(BaseModel):
    """What memory knows about a user, for an agent's instructions.

    Attributes:
        user: The user.
        facts: The user's facts (scope ``user``).
        preferences: Key → value of the ``user_preference`` ones.
        recent_episodes: The user's latest episodes, most recent first.
    """

    user: MemoryUser
    facts: list[Fact] = Field(default_factory=list)
    preferences: dict[str, Any] = Field(default_factory=dict)
    recent_episodes: list[Episode] = Field(default_factory=list)

    def to_context_string(self) -> str:
        """The context as prompt text, one ``- ...`` line per fact and episode."""
        name = self.user.display_name or self.user.canonical_id
        lines = [f"User: {name}"]
        if self.facts:
            lines.append("Known facts:")
            lines.extend(f"- {fact}" for fact in self.facts)
        if self.recent_episodes:
            lines.append("Recent episodes:")
            for episode in self.recent_episodes:
                status = "succeeded" if episode.outcome.success else "failed"
                lines.append(f"- {episode.trigger}: {render_value(episode.input)} ({status})")
        return "\n".join(lines)


class UsersMixin:
    """User operations of :class:`~memlane.longterm.LongTermMemory`; each has an ``async_`` twin.

    Needs the facts and episodes mixins beside it in the class (for preferences, merges and
    context).
    """

    store: MemoryStore

    if TYPE_CHECKING:
        # Provided by FactsMixin and EpisodesMixin in LongTermMemory's bases.

        def _scope_facts_plan(self, scope: FactScope, scope_id: str | None) -> Plan[list[Fact]]:
            pass

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
            pass

        def _forget(
            self, key: str, *, scope: FactScope | str = "global", scope_id: str | None = None
        ) -> Plan[bool]:
            pass

        def _episodes(
            self,
            *,
            agent_id: str | None = None,
            user_id: str | None = None,
            success: bool | None = None,
            limit: int | None = None,
        ) -> Any:
            pass

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
        key = _identifier(_check_channel(channel), _check_channel_user_id(channel_user_id))
        if display_name is not None:
            check_identifier(display_name, "display_name")
        while True:
            held: MemoryEntry | None = yield StoreCall("load_by_key", (IDENTIFIERS_NAMESPACE, key))
            if held is None:
                created = yield from self._create_user_plan(channel, key, display_name)
                if created is None:
                    continue  # another process claimed the identifier first: use theirs
                return created
            user = yield from self._resolve_plan(held.content)
            if user is None:
                raise CorruptStoreError(
                    f"identifier {key!r} in {IDENTIFIERS_NAMESPACE} names user "
                    f"{held.content!r}, which {USERS_NAMESPACE} does not hold"
                )
            if display_name is not None and user.display_name != display_name:
                user = yield from self._update_live_plan(
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
        record = _entry(user)
        # The record first: whoever reads the index entry must find the user it names.
        yield StoreCall("save_if", (USERS_NAMESPACE, record, None))
        claim = MemoryEntry(scope=MemoryScope.LONG_TERM, key=key, content=user.id)
        if (yield StoreCall("save_if", (IDENTIFIERS_NAMESPACE, claim, None))):
            return (yield from self._fresh_preferences_plan(user))
        yield StoreCall("delete", (USERS_NAMESPACE, record.entry_id))
        return None

    def _get_user(self, user_id: str) -> Plan[MemoryUser | None]:
        """The user with ``user_id`` (following merges), or ``None``.

        Raises:
            TypeError, ValueError: ``user_id`` is not a non-empty ``str``.
        """
        user = yield from self._resolve_plan(check_identifier(user_id, "user_id"))
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
        source = yield from self._require_plan(check_identifier(source_id, "source_id"))
        into = yield from self._require_plan(check_identifier(into_id, "into_id"))
        if source.id == into.id:
            return (yield from self._fresh_preferences_plan(into))
        target = into.id

        def retire(user: MemoryUser) -> MemoryUser:
            if user.merged_into_id is not None:
                raise _MergedMeanwhile
            return user.model_copy(update={"merged_into_id": target})

        try:
            source = yield from self._update_user_plan(source.id, retire)
        except _MergedMeanwhile:
            # Another merge of the source won: merge what it became instead.
            return (yield from self._merge_users(source.id, target))

        # Into whatever the target is by now: were it merged meanwhile, a retired record
        # would keep what the source brings, and no lookup would ever see it.
        into = yield from self._update_live_plan(target, lambda user: _absorbed(user, source))
        for key in source.identifier_keys():
            yield from update_record(
                IDENTIFIERS_NAMESPACE, key, lambda held: into.id if held == source.id else held
            )
        yield from self._move_facts_plan(source.id, into.id)
        return (yield from self._fresh_preferences_plan(into))

    merge_users = sync_method(_merge_users)
    async_merge_users = async_method(_merge_users)

    def _move_facts_plan(self, source_id: str, into_id: str) -> Plan[None]:
        moving = yield from self._scope_facts_plan(FactScope.USER, source_id)
        held = {f.key: f for f in (yield from self._scope_facts_plan(FactScope.USER, into_id))}
        for fact in moving:
            kept = held.get(fact.key)
            newer = kept is None or fact.updated_at > kept.updated_at
            yield from self._remember_plan(
                fact.key,
                fact.value,
                FactScope.USER,
                into_id,
                fact.fact_type,
                fact.confidence,
                newer,
            )
            yield from self._forget(fact.key, scope=FactScope.USER, scope_id=source_id)

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

        updated = yield from self._update_live_plan(user_id, count)
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
        user = yield from self._require_plan(user_id)
        facts = yield from self._scope_facts_plan(FactScope.USER, user.id)
        user = yield from self._fresh_preferences_plan(user, facts)
        ids = {user.id, *user.merged_ids}
        recent: list[Episode] = []
        for episode in (yield from _as_plan(self._episodes())):
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
        _check_channel_user_id(chat_id, "chat_id")
        check_identifier(workflow_id, "workflow_id")
        user = yield from self._require_plan(user_id)
        return namespace("thread", user.id, workflow_id)

    thread_id = sync_method(_thread_id)
    async_thread_id = async_method(_thread_id)

    # ------------------------------------------------------------------ records

    def _refresh_preferences_plan(self, user_id: str) -> Plan[MemoryUser | None]:
        """Rewrites the stored preference cache of ``user_id`` from the facts, if it is stale.

        For the facts module, after a ``user_preference`` fact of the ``user`` scope changed;
        ``None`` (nothing written) when no user has that id.
        """
        user = yield from self._load_plan(user_id)
        if user is None:
            return None
        return (yield from self._fresh_preferences_plan(user))

    def _fresh_preferences_plan(
        self, user: MemoryUser, facts: list[Fact] | None = None
    ) -> Plan[MemoryUser]:
        """``user`` with preferences equal to their facts, stored if the cache was stale."""
        if facts is None:
            facts = yield from self._scope_facts_plan(FactScope.USER, user.id)
        preferences = {f.key: f.value for f in facts if f.fact_type is FactType.USER_PREFERENCE}
        if preferences == user.preferences:
            return user
        if getattr(self.store, "read_only", False) is True:
            # A read never writes to a store opened read-only: the copy returned is right,
            # and the stored cache is refreshed by the next writable read.
            return user.model_copy(update={"preferences": preferences})
        yield from self._update_user_plan(
            user.id, lambda held: held.model_copy(update={"preferences": preferences})
        )
        return user.model_copy(update={"preferences": preferences})

    def _load_plan(self, user_id: str) -> Plan[MemoryUser | None]:
        held: MemoryEntry | None = yield StoreCall("load_by_key", (USERS_NAMESPACE, user_id))
        return None if held is None else user_from_content(held.content)

    def _resolve_plan(self, user_id: str) -> Plan[MemoryUser | None]:
        """The user ``user_id`` names, following merges; ``None`` if there is none."""
        user = yield from self._load_plan(user_id)
        for _ in range(_MAX_MERGE_CHAIN):
            if user is None or user.merged_into_id is None:
                return user
            user = yield from self._load_plan(user.merged_into_id)
        raise CorruptStoreError(f"user {user_id!r} is merged in a chain longer than allowed")

    def _require_plan(self, user_id: str) -> Plan[MemoryUser]:
        user = yield from self._resolve_plan(user_id)
        if user is None:
            raise UserNotFoundError(f"no user with id {user_id!r}")
        return user

    def _update_user_plan(self, user_id: str, change: Any) -> Plan[MemoryUser]:
        """Applies ``change`` (``MemoryUser`` → ``MemoryUser``) by compare-and-swap."""

        def apply(content: Any) -> Any:
            return change(user_from_content(content)).model_dump(mode="json")

        stored = yield from update_record(USERS_NAMESPACE, user_id, apply)
        if stored is None:
            raise UserNotFoundError(f"no user with id {user_id!r}")
        return user_from_content(stored)

    def _update_live_plan(self, user_id: str, change: Any) -> Plan[MemoryUser]:
        """Applies ``change`` to the user ``user_id`` is now, following merges.

        A merge that retires the user between the lookup and the write makes the write lose
        (the record's version moved on) and see ``merged_into_id``: the change is then
        applied to the user it was merged into, so nothing lands on a retired record.
        """

        def live(user: MemoryUser) -> MemoryUser:
            if user.merged_into_id is not None:
                raise _MergedMeanwhile
            return change(user)  # type: ignore[no-any-return]

        while True:
            user = yield from self._require_plan(user_id)
            try:
                return (yield from self._update_user_plan(user.id, live))
            except _MergedMeanwhile:
                continue


class _MergedMeanwhile(Exception):
    """The user being changed was merged by another writer since it was looked up."""


def _absorbed(into: MemoryUser, source: MemoryUser) -> MemoryUser:
    identifiers = {channel: list(ids) for channel, ids in into.identifiers.items()}
    for channel, ids in source.identifiers.items():
        kept = identifiers.setdefault(channel, [])
        kept.extend(i for i in ids if i not in kept)
    conversations = [*into.conversation_ids]
    conversations.extend(c for c in source.conversation_ids if c not in conversations)
    seen = [t for t in (into.last_seen_at, source.last_seen_at) if t is not None]
    merged = [*into.merged_ids, *(i for i in (source.id, *source.merged_ids) if i != into.id)]
    return into.model_copy(
        update={
            "identifiers": identifiers,
            "display_name": into.display_name or source.display_name,
            "conversation_ids": conversations,
            "message_count": into.message_count + source.message_count,
            "last_seen_at": max(seen) if seen else None,
            "created_at": min(into.created_at, source.created_at),
            "merged_ids": list(dict.fromkeys(merged)),
        }
    )


def _as_plan(step: Any) -> Plan[Any]:
    """A plan from whatever a plan method returned (a plan, or a single store call)."""
    if isinstance(step, StoreCall):
        result = yield step
        return result if step.then is None else step.then(result)
    return (yield from step)


def _identifier(channel: str, channel_user_id: str) -> str:
    # Injective because a channel holds no ':': the first one ends it.
    return f"{channel}:{channel_user_id}"


def _check_channel(channel: object) -> str:
    checked = check_identifier(channel, "channel")
    if ":" in checked:
        raise ValueError(f"channel must not contain ':', got {checked!r}")
    return checked


def _check_channel_user_id(value: object, name: str = "channel_user_id") -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str or int, not {type_name(value)}")
    return check_identifier(value, name)


def _entry(user: MemoryUser) -> MemoryEntry:
    return MemoryEntry(
        scope=MemoryScope.LONG_TERM,
        key=user.id,
        content=user.model_dump(mode="json"),
        created_at=user.created_at,
    )


def user_from_content(content: Any) -> MemoryUser:
    """The user a record of :data:`USERS_NAMESPACE` holds.

    Raises:
        CorruptStoreError: It does not hold one; names the namespace.
    """
    try:
        return MemoryUser.model_validate(content)
    except ValidationError as exc:
        raise CorruptStoreError(f"corrupt user in {USERS_NAMESPACE}: {exc}") from exc
