"""The data long-term memory keeps, and the helpers every ``memlane.longterm`` module shares.

* :class:`Fact` (with :class:`FactType`, :class:`FactScope` and its :class:`FactRevision`
  history) and :class:`RememberResult`, pydantic v2 models as stored and as returned.
* :func:`namespace` builds the store namespace of any long-term record from its parts,
  injectively: scope ids are arbitrary user strings, and no id may name another scope's
  namespace (``user`` ``"a:b"`` is not ``user`` ``"a"`` with a suffix ``"b"``).
* :func:`check_json_value` applies the stores' value rule to an argument, naming it.
"""

from __future__ import annotations

import enum
import json
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, field_validator

from memlane._validate import type_name
from memlane.errors import UnstorableValueError
from memlane.stores.protocol import find_unstorable
from memlane.types import as_utc, utc_now

__all__ = [
    "Fact",
    "FactRevision",
    "FactScope",
    "FactType",
    "RememberResult",
    "check_enum",
    "check_json_value",
    "namespace",
    "parse_namespace",
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
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


# ---------------------------------------------------------------------------- namespaces

# Only these two characters are escaped, so namespaces stay readable: ':' separates parts and
# '%' introduces an escape. Every other character stands for itself, which makes the mapping
# injective for any number of parts.
_ESCAPES = str.maketrans({"%": "%25", ":": "%3A"})


def namespace(*parts: str) -> str:
    """The store namespace of ``parts``, e.g. ``namespace("longterm", "facts", "user", id)``.

    Injective: two different tuples of parts never give the same namespace, whatever
    characters the parts hold, so no scope id can reach into another scope's namespace.
    """
    return ":".join(part.translate(_ESCAPES) for part in parts)


def parse_namespace(name: str) -> list[str]:
    """The parts :func:`namespace` joined into ``name``."""
    return [part.replace("%3A", ":").replace("%25", "%") for part in name.split(":")]


# ---------------------------------------------------------------------------- arguments


def check_json_value(value: Any, name: str) -> Any:
    """``value`` if it is plain JSON, the rule every store applies (see ``check_storable``).

    Raises:
        UnstorableValueError: Not plain JSON (a ``TypeError``); the message names the
            argument and where in it the offending value is, e.g. ``value['a'][2]``.
    """
    found = find_unstorable(value, name)
    if found is None:
        return value
    raise UnstorableValueError(f"{name} must be plain JSON: {found} is not JSON-serialisable")


E = TypeVar("E", bound=enum.Enum)


def check_enum(value: object, kind: type[E], name: str) -> E:
    """A member of ``kind``, given as the member or its ``str`` value.

    Raises:
        TypeError: Neither a member nor a ``str``.
        ValueError: A ``str`` that is no member's value; the message lists the allowed ones.
    """
    if isinstance(value, kind):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, not {type_name(value)}")
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}") from None
