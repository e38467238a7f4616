"""Facts as data: what a fact is, its scope and type, its history, what ``remember`` did.

:class:`Fact` (with :class:`FactType`, :class:`FactScope` and its :class:`FactRevision`
history) and :class:`RememberResult` are pydantic v2 models, as stored and as returned;
:func:`render_value` is how any stored value reads as text.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from memlane.types import as_utc, utc_now

__all__ = [
    "Fact",
    "FactRevision",
    "FactScope",
    "FactType",
    "RememberResult",
    "render_plain",
    "render_value",
]


class FactType(str, enum.Enum):
    """What kind of knowledge a fact is."""

    USER_PREFERENCE = "user_preference"
    WORLD_KNOWLEDGE = "world_knowledge"
    SELF_KNOWLEDGE = "self_knowledge"
    CORRECTION = "correction"
    RELATIONSHIP = "relationship"


class FactScope(str, enum.Enum):
    """Whom a fact belongs to; every scope but ``global`` needs a ``scope_id``."""

    SESSION = "session"
    USER = "user"
    AGENT = "agent"
    GLOBAL = "global"


class FactRevision(BaseModel):
    """An earlier value of a fact and when a different value replaced it.

    Attributes:
        value: The value that was replaced.
        replaced_at: When it was replaced, aware UTC.
    """

    value: Any = None
    replaced_at: datetime = Field(default_factory=utc_now)

    @field_validator("replaced_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)


class Fact(BaseModel):
    """One remembered fact.

    Attributes:
        key: Human-readable name, e.g. ``user_timezone``; unique within its scope.
        value: Any plain JSON value.
        fact_type: What kind of knowledge it is; set when the fact is created.
        scope: Whom it belongs to.
        scope_id: The session, user or agent id; ``None`` for the ``global`` scope.
        confidence: 0.0–1.0.
        times_confirmed: How often it was remembered again (same or changed value).
        times_contradicted: How often :meth:`~memlane.longterm.LongTermMemory.contradict`
            recorded evidence against it.
        created_at: When it was first remembered, aware UTC.
        updated_at: When it last changed, aware UTC.
        history: Earlier values, oldest first, each with when it was replaced.
    """

    key: str
    value: Any = None
    fact_type: FactType = FactType.WORLD_KNOWLEDGE
    scope: FactScope = FactScope.GLOBAL
    scope_id: str | None = None
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    times_confirmed: int = Field(default=0, ge=0)
    times_contradicted: int = Field(default=0, ge=0)
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    history: list[FactRevision] = Field(default_factory=list)

    @field_validator("created_at", "updated_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        return as_utc(value)

    def __str__(self) -> str:
        return f"{self.key} = {render_value(self.value)}"


class RememberResult(BaseModel):
    """What :meth:`~memlane.longterm.LongTermMemory.remember` did, and the fact it left.

    ``str(result)`` is ``"{key} = {value} ({status})"``, e.g. ``"color = blue (created)"``.

    Attributes:
        status: ``created`` (a new fact), ``confirmed`` (the same value again),
            ``updated`` (a different value replaced the old one, which joined the history) or
            ``skipped`` (``overwrite=False`` and the key was held: nothing written).
        fact: The fact as stored after the call (as found, when skipped).
    """

    status: Literal["created", "confirmed", "updated", "skipped"]
    fact: Fact

    @property
    def key(self) -> str:
        """The fact's key."""
        return self.fact.key

    @property
    def value(self) -> Any:
        """The fact's value after the call."""
        return self.fact.value

    def __str__(self) -> str:
        return f"{self.fact} ({self.status})"


def render_value(value: Any) -> str:
    """How a value reads in text: a ``str`` as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return _ENCODER.encode(value)


def render_plain(value: Any) -> str:
    """:func:`render_value` of a plain JSON value (one that passed the value rule, or was
    decoded from JSON: a tree, no cycles), in half its time: the text of every fact written.
    """
    if isinstance(value, str):
        return value
    return "".join(_PLAIN(value, 0))


# What json.dumps(value, ensure_ascii=False, separators=(", ", ": ")) builds on every call:
# made once, it costs half as much (every remember renders its value for the search text).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "))

# _ENCODER's own C encoder, made once rather than on each encode, and without the cycle
# check's table of the containers being encoded, which a shared encoder could not keep
# per call: a plain JSON value has no cycles (were one given, the encoder's recursion limit
# would stop it with a RecursionError).
# typeshed does not declare the C accelerator; CPython has had it since 2.6.
_C_MAKE_ENCODER: Callable[..., Callable[[Any, int], Iterable[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)
_PLAIN: Callable[[Any, int], Iterable[str]] = (
    _C_MAKE_ENCODER(
        None,  # no cycle check
        _ENCODER.default,
        json.encoder.encode_basestring,  # what ensure_ascii=False picks
        _ENCODER.indent,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        _ENCODER.sort_keys,
        _ENCODER.skipkeys,
        _ENCODER.allow_nan,
    )
    if _C_MAKE_ENCODER is not None
    else lambda value, _: (_ENCODER.encode(value),)
)
