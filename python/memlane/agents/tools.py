"""The ``recall`` and ``remember`` tools: long-term memory an agent reads and writes itself.

:func:`memory_tools` returns a pydantic-ai :class:`~pydantic_ai.toolsets.FunctionToolset`
to pass as ``Agent(..., toolsets=[...])``. The tools answer in plain lines the model reads
back:

* ``recall`` — by ``key``, the fact (or facts whose key matches by recall's fuzzy rule); by
  ``query``, the records matching it by the fuzzy rule or, when the memory has an embedder,
  the records closest in meaning (its hybrid ``search``: a question in other words finds the
  fact, an identifier its own record). It answers one ``{key} = {value}`` line per fact found (e.g.
  ``timezone = Australia/Adelaide``), ``procedure {name} = {content}`` and
  ``episode {trigger} = {input} -> {output}`` lines for other memories, or
  ``Nothing remembered about {key or query}.`` (``Nothing remembered yet.`` for a plain
  listing) when there is nothing;
* ``remember`` — ``Remembered: {key} = {value} ({status})``, e.g.
  ``Remembered: color = blue (created)``; with ``overwrite=False`` a held key answers
  ``(skipped)`` with the value kept.

A ``str`` value reads as it is; any other value as compact JSON (``[1, 2]``, ``true``,
``{"a": 1}``). An argument the memory refuses (an empty key, a value that is not JSON, a
query without words) goes back to the model as a retry prompt naming the problem, so it can
correct the call.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ModelRetry
from pydantic_ai.toolsets import FunctionToolset

from memlane._validate import check_fraction, check_positive_int, type_name
from memlane.longterm import LongTermMemory
from memlane.longterm.episodes import Episode
from memlane.longterm.facts import MEMORY_TYPES, check_ids, check_scope
from memlane.longterm.model import FactScope, FactType, check_enum, render_value
from memlane.longterm.procedures import Procedure

__all__ = ["memory_tools", "render_record"]


def render_record(record: Any) -> str:
    """The line ``recall`` answers for one record it found."""
    if isinstance(record, Procedure):
        return f"procedure {record.name} = {render_value(record.content)}"
    if isinstance(record, Episode):
        outcome = record.outcome.output if record.success else record.outcome.error
        return f"episode {record.trigger} = {record.input} -> {render_value(outcome)}"
    return str(record)  # a Fact reads "{key} = {value}"


def memory_tools(
    long_term: LongTermMemory,
    *,
    memory_type: str = "facts",
    limit: int = 10,
    min_confidence: float = 0.5,
    fact_type: FactType | str = "world_knowledge",
    overwrite: bool = True,
    scope: FactScope | str = "global",
    scope_id: str | None = None,
    session_id: str | None = None,
    user_id: str | None = None,
    agent_id: str | None = None,
) -> FunctionToolset[Any]:
    """A toolset with ``recall(key=None, query=None)`` and ``remember(key, value)``.

    Every setting is checked here, so a misconfigured toolset fails when it is made, not in
    the middle of a run. The tools await the memory's ``async_`` methods.

    Args:
        long_term: The memory the tools read and write.
        memory_type: What ``recall`` searches: ``facts``, ``procedures``, ``episodes``, ``all``.
        limit: At most this many lines per ``recall``.
        min_confidence: Facts below this confidence are not recalled.
        fact_type: The type of facts ``remember`` creates.
        overwrite: Whether ``remember`` replaces a held value.
        scope: The scope ``remember`` writes to.
        scope_id: Its id (required for every scope but ``global``).
        session_id: A session whose facts ``recall`` sees (and prefers).
        user_id: A user whose facts ``recall`` sees.
        agent_id: An agent whose facts ``recall`` sees.

    Returns:
        A :class:`~pydantic_ai.toolsets.FunctionToolset` with the two tools.

    Raises:
        TypeError: ``long_term`` is not a :class:`~memlane.longterm.LongTermMemory`, or a
            setting has the wrong type.
        ValueError: A setting ``LongTermMemory.recall`` or ``remember`` would refuse.
    """
    if not isinstance(long_term, LongTermMemory):
        raise TypeError(f"long_term must be LongTermMemory, not {type_name(long_term)}")
    if not isinstance(memory_type, str) or memory_type not in MEMORY_TYPES:
        allowed = ", ".join(repr(t) for t in MEMORY_TYPES)
        raise ValueError(f"memory_type must be one of {allowed}, got {memory_type!r}")
    limit = check_positive_int(limit, "limit")
    min_confidence = check_fraction(min_confidence, "min_confidence")
    kind = check_enum(fact_type, FactType, "fact_type")
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be bool, not {type_name(overwrite)}")
    where, where_id = check_scope(scope, scope_id)
    check_ids(session_id, user_id, agent_id)

    async def recall(key: str | None = None, query: str | None = None) -> str:
        """Look up what long-term memory holds.

        Args:
            key: The exact name of a fact, e.g. ``user_timezone``; similar names are tried
                when there is no exact match.
            query: What to look for, e.g. ``local time`` or a question such as ``how does
                the user take their coffee``.

        Leave both out to list what is remembered.
        """
        key, query = key or None, query or None  # models send "" for "not given"
        try:
            if query is not None and key is None and long_term.embedder is not None:
                found = await long_term.async_search(
                    query,
                    memory_type=memory_type,
                    limit=limit,
                    min_confidence=min_confidence,
                    session_id=session_id,
                    user_id=user_id,
                    agent_id=agent_id,
                )
            else:
                found = await long_term.async_recall(
                    key,
                    query=query,
                    memory_type=memory_type,
                    limit=limit,
                    min_confidence=min_confidence,
                    session_id=session_id,
                    user_id=user_id,
                    agent_id=agent_id,
                )
        except (TypeError, ValueError) as exc:
            raise ModelRetry(str(exc)) from exc
        if not found:
            about = key if key is not None else query
            return (
                "Nothing remembered yet." if about is None else f"Nothing remembered about {about}."
            )
        return "\n".join(render_record(record) for record in found)

    async def remember(key: str, value: Any) -> str:
        """Remember a fact for later conversations.

        Args:
            key: A short name for the fact, e.g. ``user_timezone``.
            value: The fact's value, e.g. ``Australia/Adelaide``.
        """
        try:
            result = await long_term.async_remember(
                key,
                value,
                scope=where,
                scope_id=where_id,
                fact_type=kind,
                overwrite=overwrite,
            )
        except (TypeError, ValueError) as exc:
            raise ModelRetry(str(exc)) from exc
        return f"Remembered: {result}"

    return FunctionToolset([recall, remember])
