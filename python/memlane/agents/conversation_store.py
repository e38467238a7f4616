"""pydantic-ai's own conversation store on any memlane store."""

from __future__ import annotations

import asyncio
import threading
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from memlane.conversation import ConversationMemory
from memlane.manager import MemoryManager
from memlane.stores import MemoryStore
from memlane.types import MemoryEntry, MemoryScope, utc_now

__all__ = ["MemlaneConversationStore"]

_RECORD_ADAPTER: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)
_ENTRY_ADAPTER: TypeAdapter[ConversationEntry] = TypeAdapter(ConversationEntry)

# One lock per memlane store, shared by every MemlaneConversationStore over it, makes the
# revision check and the write one step for all writers in this process.
_write_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_write_locks_guard = threading.Lock()


def _write_lock(store: MemoryStore) -> threading.Lock:
    with _write_locks_guard:
        lock = _write_locks.get(store)
        if lock is None:
            lock = _write_locks[store] = threading.Lock()
        return lock


class MemlaneConversationStore(ConversationStore):
    """pydantic-ai's :class:`~pydantic_ai.conversation_store.ConversationStore` on a memlane store.

    Conversations saved through pydantic-ai (``conversation = await store.load(cid)``,
    ``await agent.run(prompt, conversation=conversation)``, ``await store.save(result)``) live
    in any memlane store: in memory, SQLite, files or a database server. Records go in the
    namespace ``pydantic-ai:conversations`` (keyed by conversation id), entries in
    ``pydantic-ai:entries`` (keyed by entry id), both as JSON.

    Revisions are checked and written as one step under a lock shared by every instance over
    the same store object in this process, so conflicting writers there get
    :class:`~pydantic_ai.conversation_store.ConversationConflict`. Writers in other processes
    sharing a store file are checked too, but the check and the write are two store
    operations, since memlane's store protocol has no compare-and-swap.

    ``delete`` removes the entries no remaining conversation reaches (it reads every entry to
    find them, so it is O(entries stored)).

    Args:
        memory: A :class:`~memlane.MemoryManager` or :class:`~memlane.ConversationMemory`
            (its store is used) or a :class:`~memlane.stores.MemoryStore`.

    Raises:
        TypeError: ``memory`` is none of these.
    """

    RECORDS = "pydantic-ai:conversations"
    ENTRIES = "pydantic-ai:entries"

    def __init__(self, memory: MemoryManager | ConversationMemory | MemoryStore) -> None:
        store = memory.store if isinstance(memory, MemoryManager | ConversationMemory) else memory
        if not isinstance(store, MemoryStore):
            raise TypeError(
                "memory must be a MemoryManager, ConversationMemory or MemoryStore, "
                f"not {type(memory).__name__}"
            )
        self.store: MemoryStore = store
        self._lock = _write_lock(store)

    # ---------------------------------------------------------------- encoding

    @staticmethod
    def _record_id(conversation_id: str) -> str:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:pydantic-ai:{conversation_id}").hex

    def _record_entry(self, record: ConversationRecord) -> MemoryEntry:
        return MemoryEntry.model_construct(
            entry_id=self._record_id(record.conversation_id),
            scope=MemoryScope.CONVERSATION,
            key=record.conversation_id,
            content=_RECORD_ADAPTER.dump_python(record, mode="json"),
            metadata={"kind": "pydantic-ai-record"},
            created_at=utc_now(),
            expires_at=None,
            importance=0.5,
        )

    @staticmethod
    def _entry_entry(entry: ConversationEntry) -> MemoryEntry:
        return MemoryEntry.model_construct(
            entry_id=uuid.uuid5(uuid.NAMESPACE_URL, f"memlane:pydantic-ai-entry:{entry.id}").hex,
            scope=MemoryScope.CONVERSATION,
            key=entry.id,
            content=_ENTRY_ADAPTER.dump_python(entry, mode="json"),
            metadata={"kind": "pydantic-ai-entry", "parent_id": entry.parent_id},
            created_at=utc_now(),
            expires_at=None,
            importance=0.5,
        )

    @staticmethod
    def _record(stored: MemoryEntry | None) -> ConversationRecord | None:
        return None if stored is None else _RECORD_ADAPTER.validate_python(stored.content)

    # ---------------------------------------------------------------- primitives

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of a conversation.

        Args:
            conversation_id: The conversation.

        Returns:
            Its record, or ``None`` when none is stored.
        """
        return self._record(await self.store.async_load_by_key(self.RECORDS, conversation_id))

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The stored records, most recently saved first.

        Args:
            scope: Only the records of this scope; ``None`` for all.
            limit: At most this many; ``None`` for all.

        Returns:
            The records.
        """
        records = [
            _RECORD_ADAPTER.validate_python(e.content)
            for e in await self.store.async_load(self.RECORDS)
        ]
        records = [r for r in records if scope is None or r.scope == scope]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Stores ``new_entries`` and ``record`` if the stored revision is ``expected_revision``.

        Args:
            record: The record to store.
            new_entries: Entries the record's history adds.
            expected_revision: The revision the writer loaded; ``None`` for a new conversation.

        Raises:
            ConversationConflict: The stored revision differs, or ``record.head_id`` names an
                entry that neither the store nor ``new_entries`` has.
        """
        await asyncio.to_thread(self._write_record, record, list(new_entries), expected_revision)

    def _write_record(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        with self._lock:
            stored = self._record(self.store.load_by_key(self.RECORDS, record.conversation_id))
            if (stored.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(record.conversation_id)
            head = record.head_id
            if (
                head is not None
                and head not in {e.id for e in new_entries}
                and self.store.load_by_key(self.ENTRIES, head) is None
            ):
                raise ConversationConflict(record.conversation_id)
            # Entries first, the record last: a crash in between leaves only unreachable
            # entries, which the next delete collects, never a record pointing at nothing.
            self.store.save_many(self.ENTRIES, [self._entry_entry(e) for e in new_entries])
            self.store.save(self.RECORDS, self._record_entry(record))

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Deletes a record and the entries no remaining record's history reaches.

        Args:
            conversation_id: The conversation.
            expected_revision: The revision the caller loaded.

        Raises:
            ConversationConflict: No record with ``expected_revision`` is stored.
        """
        await asyncio.to_thread(self._delete_record, conversation_id, expected_revision)

    def _delete_record(self, conversation_id: str, expected_revision: str) -> None:
        with self._lock:
            stored_entry = self.store.load_by_key(self.RECORDS, conversation_id)
            stored = self._record(stored_entry)
            if stored_entry is None or stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            self.store.delete(self.RECORDS, stored_entry.entry_id)
            entries = self.store.load(self.ENTRIES)
            parents = {e.key: e.metadata.get("parent_id") for e in entries}
            reachable: set[str] = set()
            for rest in self.store.load(self.RECORDS):
                other = _RECORD_ADAPTER.validate_python(rest.content)
                for tip in [other.head_id, *other.branches]:
                    while tip is not None and tip not in reachable:
                        reachable.add(tip)
                        tip = parents.get(tip)
            for e in entries:
                if e.key not in reachable:
                    self.store.delete(self.ENTRIES, e.entry_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry with this id.

        Args:
            entry_id: The entry.

        Returns:
            The entry.

        Raises:
            KeyError: No such entry.
        """
        stored = await self.store.async_load_by_key(self.ENTRIES, entry_id)
        if stored is None:
            raise KeyError(entry_id)
        return _ENTRY_ADAPTER.validate_python(stored.content)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The history that ends at ``head_id``, read in one worker-thread call.

        Args:
            head_id: The newest entry; ``None`` for an empty history.
            limit: At most this many of the newest entries; ``None`` for all.

        Returns:
            The entries, oldest first.

        Raises:
            KeyError: An entry of the history is missing.
        """
        return await asyncio.to_thread(self._read_history, head_id, limit)

    def _read_history(self, head_id: str | None, limit: int | None) -> list[ConversationEntry]:
        entries: list[ConversationEntry] = []
        entry_id = head_id
        while entry_id is not None and (limit is None or len(entries) < limit):
            stored = self.store.load_by_key(self.ENTRIES, entry_id)
            if stored is None:
                raise KeyError(entry_id)
            entry = _ENTRY_ADAPTER.validate_python(stored.content)
            entries.append(entry)
            entry_id = entry.parent_id
        entries.reverse()
        return entries
