"""Procedures: learned how-tos, matched to a goal by their trigger conditions, with a track record.

A procedure has a name, a type (:class:`ProcedureType`), content (a prompt template, a code
snippet, a tool sequence or a workflow graph: any plain JSON value) and trigger conditions
saying which goals it serves. Conditions are a dict from a kind to the phrases it checks,
all case-insensitive substrings of the goal:

* ``goal_contains``: at least one of the phrases occurs in the goal.
* ``goal_contains_all``: every phrase occurs in the goal.
* ``goal_excludes``: none of the phrases occurs in the goal.

A procedure matches a goal when every condition it has holds (one without conditions
matches every goal). A phrase is one ``str`` or a list of them, never empty.

Each procedure is one keyed entry of one namespace. :meth:`Procedures.record_procedure_use`
changes it with the store's ``save_if`` against the version it read, retrying when another
writer got there first, so uses recorded at once by any number of processes all count.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError, computed_field, field_validator

from memlane._runner import Load, LoadByKey, Plan, SaveIf, Step, Then, async_method, sync_method
from memlane._validate import check_identifier, check_str, type_name
from memlane.errors import CorruptStoreError, ProcedureNotFoundError
from memlane.longterm.fact_model import render_value
from memlane.longterm.fuzzy import matches_words
from memlane.longterm.namespaces import namespace
from memlane.longterm.storage import StoragePart, async_writing_method, writing_method
from memlane.longterm.value_checks import check_enum, check_json_value
from memlane.stores.protocol import SEARCH_TEXT
from memlane.types import MemoryEntry, MemoryScope, as_utc, utc_now

__all__ = [
    "CONDITION_KINDS",
    "PROCEDURES_NAMESPACE",
    "Procedure",
    "ProcedureNotFoundError",
    "ProcedureType",
    "Procedures",
    "search_procedures_plan",
    "update_record",
]

PROCEDURES_NAMESPACE = namespace("longterm", "procedures")
"""The namespace every procedure is stored in, keyed by :attr:`Procedure.id`."""

CONDITION_KINDS = ("goal_contains", "goal_contains_all", "goal_excludes")
"""The trigger-condition kinds :meth:`Procedures.add_procedure` accepts."""


class ProcedureType(str, enum.Enum):
    """What a procedure's content is."""

    WORKFLOW_GRAPH = "workflow_graph"
    PROMPT_TEMPLATE = "prompt_template"
    CODE_SNIPPET = "code_snippet"
    TOOL_SEQUENCE = "tool_sequence"


class Procedure(BaseModel):
    """A learned how-to and its track record.

    Attributes:
        id: Unique id (uuid4 hex).
        name: What it is called.
        trigger_conditions: Condition kind → phrases (see the module docs).
        procedure_type: What ``content`` is.
        content: The procedure itself (plain JSON).
        times_used: How many uses were recorded.
        successes: How many of them succeeded.
        durations_recorded: How many uses came with a duration.
        total_duration: The sum of those durations, in seconds.
        created_at: When it was added, aware UTC.
        last_used_at: When a use was last recorded, or ``None``.
    """

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    name: str
    trigger_conditions: dict[str, list[str]] = Field(default_factory=dict)
    procedure_type: ProcedureType
    content: Any = None
    times_used: int = Field(default=0, ge=0)
    successes: int = Field(default=0, ge=0)
    durations_recorded: int = Field(default=0, ge=0)
    total_duration: float = Field(default=0.0, ge=0.0)
    created_at: datetime = Field(default_factory=utc_now)
    last_used_at: datetime | None = None

    @field_validator("created_at", "last_used_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented pattern
    @property
    def success_rate(self) -> float:
        """Successes / uses; 0.0 before the first use."""
        return self.successes / self.times_used if self.times_used else 0.0

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented pattern
    @property
    def avg_duration(self) -> float | None:
        """The mean of the recorded durations in seconds; ``None`` when none was recorded."""
        if not self.durations_recorded:
            return None
        return self.total_duration / self.durations_recorded

    def matches(self, goal: str) -> bool:
        """Whether every trigger condition holds for ``goal`` (case-insensitively)."""
        text = goal.casefold()
        for kind, phrases in self.trigger_conditions.items():
            found = [phrase.casefold() in text for phrase in phrases]
            if kind == "goal_contains" and not any(found):
                return False
            if kind == "goal_contains_all" and not all(found):
                return False
            if kind == "goal_excludes" and any(found):
                return False
        return True

    def search_text(self) -> str:
        """What recall's fuzzy search matches: the name, the content and the trigger phrases."""
        phrases = [phrase for kind in self.trigger_conditions.values() for phrase in kind]
        return "\n".join([self.name, render_value(self.content), *phrases])


class Procedures(StoragePart):
    """The procedures of one long-term memory; every operation has an ``async_`` twin.

    Args:
        storage: The store (and embedder slot) the memory's parts share.
    """

    def _add_procedure(
        self,
        name: str,
        *,
        trigger_conditions: dict[str, str | list[str]],
        procedure_type: ProcedureType | str,
        content: Any,
    ) -> Step[Procedure]:
        """Stores a new procedure and returns it, with its ``id``.

        Args:
            name: What it is called.
            trigger_conditions: Condition kind → a phrase or a list of phrases, e.g.
                ``{"goal_contains": ["weather", "forecast"]}`` (kinds in the module docs).
            procedure_type: ``workflow_graph``, ``prompt_template``, ``code_snippet`` or
                ``tool_sequence``.
            content: The procedure itself (plain JSON).

        Raises:
            TypeError: An argument of the wrong type, or ``content`` not plain JSON.
            ValueError: An empty name, an unknown condition kind or procedure type, an empty
                phrase or list of phrases. Nothing is written.
        """
        procedure = Procedure(
            name=check_identifier(name, "name"),
            trigger_conditions=check_conditions(trigger_conditions),
            procedure_type=check_enum(procedure_type, ProcedureType, "procedure_type"),
            content=check_json_value(content, "content"),
        )
        entry = _entry(procedure)
        # Returned as it will be read back (tuples become lists), so the two compare equal.
        stored = _procedure(entry.content)
        return Then(SaveIf(PROCEDURES_NAMESPACE, entry, None), lambda _: stored)

    add_procedure = writing_method(_add_procedure)
    async_add_procedure = async_writing_method(_add_procedure)

    def _record_procedure_use(
        self,
        id: str,
        *,
        success: bool,
        duration: float | None = None,  # issue's name
    ) -> Plan[Procedure]:
        """Records one use of a procedure: ``times_used`` + 1, and its success and duration.

        Safe under concurrent writers in any number of processes: every use counts once.

        Args:
            id: The procedure's id.
            success: Whether the use succeeded.
            duration: How long it took in seconds (finite, not negative); ``None`` leaves
                ``avg_duration`` as it was.

        Returns:
            The procedure as stored after the use.

        Raises:
            ProcedureNotFoundError: No procedure has ``id`` (a ``KeyError``).
            TypeError, ValueError: A bad argument, named in the message.
        """
        check_identifier(id, "id")
        if not isinstance(success, bool):
            raise TypeError(f"success must be bool, not {type_name(success)}")
        seconds = _check_duration(duration)
        now = utc_now()

        def use(content: Any) -> Any:
            old = _procedure(content)
            timed = seconds is not None
            return old.model_copy(
                update={
                    "times_used": old.times_used + 1,
                    "successes": old.successes + success,
                    "durations_recorded": old.durations_recorded + timed,
                    "total_duration": old.total_duration + (seconds or 0.0),
                    "last_used_at": now,
                }
            ).model_dump(mode="json")

        stored = yield from update_record(PROCEDURES_NAMESPACE, id, use)
        if stored is None:
            raise ProcedureNotFoundError(f"no procedure with id {id!r}")
        return _procedure(stored)

    record_procedure_use = writing_method(_record_procedure_use)
    async_record_procedure_use = async_writing_method(_record_procedure_use)

    def _get_procedure(self, id: str) -> Step[Procedure | None]:  # issue's name
        """The procedure with ``id``, or ``None``.

        Raises:
            TypeError, ValueError: ``id`` is not a non-empty ``str``.
        """
        check_identifier(id, "id")
        return Then(
            LoadByKey(PROCEDURES_NAMESPACE, id),
            lambda entry: None if entry is None else _procedure(entry.content),
        )

    get_procedure = sync_method(_get_procedure)
    async_get_procedure = async_method(_get_procedure)

    def _procedures(self) -> Step[list[Procedure]]:
        """Every procedure, in the order they were added."""
        return Then(Load(PROCEDURES_NAMESPACE), _loaded)

    procedures = sync_method(_procedures)
    async_procedures = async_method(_procedures)

    def _match_procedures(self, goal: str) -> Step[list[Procedure]]:
        """The procedures whose trigger conditions all hold for ``goal``.

        Best track record first: by ``success_rate``, then ``times_used``, then the order
        they were added.

        Raises:
            TypeError: ``goal`` is not a ``str``.
        """
        check_str(goal, "goal")

        def pick(entries: list[MemoryEntry]) -> list[Procedure]:
            found = [p for p in _loaded(entries) if p.matches(goal)]
            found.sort(key=lambda p: (p.success_rate, p.times_used), reverse=True)
            return found

        return Then(Load(PROCEDURES_NAMESPACE), pick)

    match_procedures = sync_method(_match_procedures)
    async_match_procedures = async_method(_match_procedures)


# ---------------------------------------------------------------------------- records


def search_procedures_plan(words: list[str], limit: int) -> Plan[list[Procedure]]:
    """Procedures whose name, content or trigger phrases match ``words`` by the fuzzy rule.

    Recall's search for ``memory_type="procedures"``: in the order added, at most ``limit``.
    """
    entries: list[MemoryEntry] = yield Load(PROCEDURES_NAMESPACE)
    found = [p for p in _loaded(entries) if matches_words(words, p.search_text())]
    return found[:limit]


def update_record(where: str, key: str, change: Callable[[Any], Any]) -> Plan[Any | None]:
    """Replaces the content of the record under ``key`` by ``change(content)``, atomically.

    A compare-and-swap loop: read the record, compute the new content, ``save_if`` it against
    the version read; on a loss another writer changed it first, so read again. Some writer
    wins every round, so the loop ends; ``change`` may run more than once and must not have
    side effects. The record keeps its ``entry_id``.

    Returns:
        The new content, or ``None`` (nothing written) when no record holds ``key``.
    """
    while True:
        held: MemoryEntry | None = yield LoadByKey(where, key)
        if held is None:
            return None
        content = change(held.content)
        new = held.model_copy(update={"content": content})
        if (yield SaveIf(where, new, held.version)):
            return content


def check_conditions(conditions: object) -> dict[str, list[str]]:
    """Trigger conditions as kind → list of phrases.

    Raises:
        TypeError: Not a dict, a kind that is not a ``str``, or a phrase that is not a ``str``.
        ValueError: An unknown kind, an empty list, or an empty phrase.
    """
    if not isinstance(conditions, dict):
        raise TypeError(f"trigger_conditions must be dict, not {type_name(conditions)}")
    checked: dict[str, list[str]] = {}
    for kind, phrases in conditions.items():
        check_str(kind, "trigger_conditions key")
        if kind not in CONDITION_KINDS:
            allowed = ", ".join(repr(k) for k in CONDITION_KINDS)
            raise ValueError(f"trigger_conditions kind must be one of {allowed}, got {kind!r}")
        where = f"trigger_conditions[{kind!r}]"
        listed = [phrases] if isinstance(phrases, str) else phrases
        if not isinstance(listed, list | tuple):
            raise TypeError(f"{where} must be str or list of str, not {type_name(phrases)}")
        if not listed:
            raise ValueError(f"{where} must hold at least one phrase, got {phrases!r}")
        checked[kind] = [check_identifier(p, f"{where}[{i}]") for i, p in enumerate(listed)]
    return checked


def _check_duration(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"duration must be a number of seconds or None, not {type_name(value)}")
    if not 0 <= value < math.inf:  # NaN fails both comparisons
        raise ValueError(f"duration must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _entry(procedure: Procedure) -> MemoryEntry:
    return MemoryEntry(
        scope=MemoryScope.LONG_TERM,
        key=procedure.id,
        content=procedure.model_dump(mode="json"),
        metadata={SEARCH_TEXT: procedure.search_text()},
        created_at=procedure.created_at,
    )


def _procedure(content: Any) -> Procedure:
    try:
        return Procedure.model_validate(content)
    except ValidationError as exc:
        raise CorruptStoreError(f"corrupt procedure in {PROCEDURES_NAMESPACE}: {exc}") from exc


def _loaded(entries: list[MemoryEntry]) -> list[Procedure]:
    return [_procedure(e.content) for e in entries if e.key is not None]
