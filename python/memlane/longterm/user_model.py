"""Users as data: one person recognised across channels, and what memory knows about them.

:class:`MemoryUser` has its own ``id`` and the channel identifiers it was seen under;
:class:`UserContext` is what an agent's instructions say about a user. Each user is one keyed
entry of :data:`USERS_NAMESPACE`; :data:`IDENTIFIERS_NAMESPACE` maps every
``{channel}:{channel_user_id}`` to the user it names (the operations:
:mod:`memlane.longterm.users`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError, computed_field, field_validator

from memlane._validate import check_identifier, type_name
from memlane.errors import CorruptStoreError
from memlane.longterm.episode_model import Episode
from memlane.longterm.fact_model import Fact, render_value
from memlane.longterm.namespaces import namespace
from memlane.types import MemoryEntry, MemoryScope, as_utc, utc_now

__all__ = [
    "IDENTIFIERS_NAMESPACE",
    "USERS_NAMESPACE",
    "MemoryUser",
    "UserContext",
    "absorbed",
    "check_channel",
    "check_channel_user_id",
    "identifier",
    "user_entry",
    "user_from_content",
]

USERS_NAMESPACE = namespace("longterm", "users")
"""The namespace of user records, keyed by :attr:`MemoryUser.id`."""

IDENTIFIERS_NAMESPACE = namespace("longterm", "user-identifiers")
"""The identifier index: ``{channel}:{channel_user_id}`` → the id of the user it names."""


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
        return [identifier(c, i) for c, ids in self.identifiers.items() for i in ids]


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


def absorbed(into: MemoryUser, source: MemoryUser) -> MemoryUser:
    """``into`` after a merge of ``source``: its identifiers, statistics and merged ids too."""
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


def identifier(channel: str, channel_user_id: str) -> str:
    """The index key of a channel identifier: ``{channel}:{channel_user_id}``."""
    # Injective because a channel holds no ':': the first one ends it.
    return f"{channel}:{channel_user_id}"


def check_channel(channel: object) -> str:
    """A channel's name: a non-empty ``str`` without NUL or ``:``."""
    checked = check_identifier(channel, "channel")
    if ":" in checked:
        raise ValueError(f"channel must not contain ':', got {checked!r}")
    return checked


def check_channel_user_id(value: object, name: str = "channel_user_id") -> str:
    """An id on a channel as text: a non-empty ``str``, or an ``int`` as its decimal text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str or int, not {type_name(value)}")
    return check_identifier(value, name)


def user_entry(user: MemoryUser) -> MemoryEntry:
    """The entry storing ``user`` in :data:`USERS_NAMESPACE`."""
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
