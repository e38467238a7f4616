"""What an operator browses, edits and deletes: every kind of record on a store, as JSON.

The ``memlane`` command and ``memlane serve`` both go through :class:`Records`, so the
terminal and the web page always agree on what a store holds and on what an id names.

Every record has a string id that names it within its own kind only:

* a fact: ``global:KEY`` or ``SCOPE:SCOPE_ID:KEY`` (the parts escaped as long-term
  namespaces escape them, so any key or scope id round-trips and no id can name another
  scope's fact);
* an episode, a procedure, a user: their own ``id``;
* a conversation (a "checkpoint" on the web page): its conversation id;
* a working-memory fact: its key, within the scope given beside it.

A delete reads only the namespace of its kind, so a malformed or foreign id is either
refused (:class:`ValueError`) or reported as not found, never deleted elsewhere. Every
change is logged on the ``memlane.audit`` logger at WARNING before it is made.

Modules: :mod:`~memlane.records.ids` (kinds and fact ids), :mod:`~memlane.records.listing`
(pages, sorting, date filters, rows), :mod:`~memlane.records.people` (which users a
``--user`` names), :mod:`~memlane.records.conversations` (conversation rows and the full view),
:mod:`~memlane.records.finding` (search over every scope), :mod:`~memlane.records.browse`
(:class:`Records`) and :mod:`~memlane.records.changes` (deletes, edits, forgetting a person).
"""

from __future__ import annotations

from memlane.records.browse import Records
from memlane.records.changes import AUDIT, UNSET, RecordNotFoundError
from memlane.records.ids import (
    KINDS,
    WORKING_PREFIX,
    Kind,
    Page,
    check_ids,
    fact_id,
    parse_fact_id,
)
from memlane.records.listing import NOUNS, SORTS, TIMESTAMPS, count, plural
from memlane.records.people import AmbiguousUserError

__all__ = [
    "AUDIT",
    "KINDS",
    "NOUNS",
    "SORTS",
    "TIMESTAMPS",
    "UNSET",
    "WORKING_PREFIX",
    "AmbiguousUserError",
    "Kind",
    "Page",
    "RecordNotFoundError",
    "Records",
    "check_ids",
    "count",
    "fact_id",
    "parse_fact_id",
    "plural",
]
