"""pydantic-ai's own conversation store on any memlane store."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence

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

_RECORD_KIND = "pydantic-ai-record"
_TOMBSTONE_KIND = "pydantic-ai-tombstone"

ConditionalWrite = Callable[[str, MemoryEntry, int | None], Awaitable[bool]]


class MemlaneConversationStore(ConversationStore):
    """pydantic-ai's :class:`~pydantic_ai.conversation_store.ConversationStore` on a memlane store.

    Conversations saved through pydantic-ai (``conversation = await store.load(cid)``,
    ``await agent.run(prompt, conversation=conversation)``, ``await store.save(result)``) live
    in any memlane store: in memory, SQLite, files or a database server. Records go in the
    namespace ``pydantic-ai:conversations`` (keyed by conversation id), entries in
    ``pydantic-ai:entries`` (keyed by entry id), both as JSON.

    Every change of a record (a save, a delete, a new conversation under the id of a deleted
    one) is one conditional write (the store's ``save_if``) expecting the version of the record
    entry the writer read. A key's version only grows, since a delete leaves a tombstone rather
    than freeing the key, so a version is won at most once: of any number of writers (threads,
    tasks or processes sharing the store) that save or delete over the same loaded revision,
    exactly one wins and the others get
    :class:`~pydantic_ai.conversation_store.ConversationConflict`. Had a delete freed the key,
    a conversation created again under the id would restart at version 1, and a writer still
    holding the old conversation's version 1 could overwrite it.

    A tombstone reads as no conversation, and a new conversation replaces it by its version.
    After replacing the record with one, ``delete`` removes the entries of the deleted
    conversation's history and branches that no remaining conversation reaches (it reads every
    entry to find them, so it is O(entries stored)); only those, because any other entry may
    belong to a save whose record is not written yet. A writer that loses removes the entries
    it wrote. What is left: the entries of a writer that died between writing them and its
    record, and, should a fork be saved while the conversation it forks from is being
    deleted, a fork whose history points at removed entries.

    A store without ``save_if`` (one written for memlane's protocol before it) can still be
    read; saving or deleting through it raises ``TypeError``.

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

    # ---------------------------------------------------------------- encoding

    @staticmethod
    def _record_entry(conversation_id: str, content: object, kind: str) -> MemoryEntry:
        return MemoryEntry.model_construct(
            # A new entry_id per write: racing writers then share only the key, which is what
            # save_if judges (on PostgreSQL, racers sharing an entry_id could all win a free key).
            entry_id=uuid.uuid4().hex,
            scope=MemoryScope.CONVERSATION,
            key=conversation_id,
            content=content,
            metadata={"kind": kind},
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
        if stored is None or stored.metadata.get("kind") == _TOMBSTONE_KIND:
            return None
        return _RECORD_ADAPTER.validate_python(stored.content)

    def _save_if(self) -> ConditionalWrite:
        """The store's ``async_save_if``, which every write of a record needs.

        Raises:
            TypeError: The store has no ``save_if``/``async_save_if``.
        """
        save_if: ConditionalWrite | None = getattr(self.store, "async_save_if", None)
        if save_if is None or getattr(self.store, "save_if", None) is None:
            raise TypeError(
                f"{type(self.store).__name__} has no save_if: conditional writes "
                "(save_if and async_save_if) are needed for MemlaneConversationStore.save"
            )
        return save_if

    # ---------------------------------------------------------------- primitives

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of a conversation.

        Args:
            conversation_id: The conversation.

        Returns:
            Its record, or ``None`` when none is stored (or it was deleted).
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
        found = [self._record(e) for e in await self.store.async_load(self.RECORDS)]
        records = [r for r in found if r is not None and (scope is None or r.scope == scope)]
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
            new_entries: Entries the record's history adds (new ones, as pydantic-ai's ``save``
                makes them: a losing writer removes them again).
            expected_revision: The revision the writer loaded; ``None`` for a new conversation.

        Raises:
            ConversationConflict: The stored revision differs, another writer saved or deleted
                the conversation first, or ``record.head_id`` names an entry that neither the
                store nor ``new_entries`` has.
            TypeError: The store has no conditional write (``save_if``).
        """
        save_if = self._save_if()
        conversation_id = record.conversation_id
        stored = await self.store.async_load_by_key(self.RECORDS, conversation_id)
        current = self._record(stored)
        if (current.revision if current is not None else None) != expected_revision:
            raise ConversationConflict(conversation_id)
        head = record.head_id
        if (
            head is not None
            and head not in {e.id for e in new_entries}
            and await self.store.async_load_by_key(self.ENTRIES, head) is None
        ):
            raise ConversationConflict(conversation_id)
        written = [self._entry_entry(e) for e in new_entries]
        # Entries first, the record last: a crash in between leaves only entries no record
        # reaches, never a record pointing at nothing.
        if written:
            await self.store.async_save_many(self.ENTRIES, written)
        content = _RECORD_ADAPTER.dump_python(record, mode="json")
        # The record entry's version, not the revision inside it, is what the store compares:
        # a tombstone holds the key too, so a new conversation replaces it by its version.
        won = await save_if(
            self.RECORDS,
            self._record_entry(conversation_id, content, _RECORD_KIND),
            None if stored is None else stored.version,
        )
        if not won:
            # Fresh entry ids that only the lost record would have reached: nothing else can
            # use them, and no delete would ever collect them.
            await self._delete_entries(e.entry_id for e in written)
            raise ConversationConflict(conversation_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Deletes a record and the entries of its history no remaining record reaches.

        The record is replaced by a tombstone in one conditional write, so of writers and
        deleters racing over one revision exactly one wins.

        Args:
            conversation_id: The conversation.
            expected_revision: The revision the caller loaded.

        Raises:
            ConversationConflict: No record with ``expected_revision`` is stored, or another
                writer saved or deleted it first.
            TypeError: The store has no conditional write (``save_if``).
        """
        save_if = self._save_if()
        stored = await self.store.async_load_by_key(self.RECORDS, conversation_id)
        record = self._record(stored)
        if stored is None or record is None or record.revision != expected_revision:
            raise ConversationConflict(conversation_id)
        tombstone = self._record_entry(conversation_id, {"deleted": True}, _TOMBSTONE_KIND)
        if not await save_if(self.RECORDS, tombstone, stored.version):
            raise ConversationConflict(conversation_id)
        await self._collect(record)

    async def _collect(self, deleted: ConversationRecord) -> None:
        """Removes the entries of ``deleted``'s history and branches no live record reaches.

        Only those: an entry outside them may belong to a save whose record is not written
        yet, and removing it would leave that record pointing at nothing. Two conversations
        sharing entries deleted at once both tombstone before they look, so the later look
        finds neither and removes the shared entries.
        """
        entries = await self.store.async_load(self.ENTRIES)
        parents = {e.key: e.metadata.get("parent_id") for e in entries if e.key is not None}
        live = [self._record(e) for e in await self.store.async_load(self.RECORDS)]
        reachable = _reached(parents, (r for r in live if r is not None))
        released = _reached(parents, [deleted]) - reachable
        await self._delete_entries(e.entry_id for e in entries if e.key in released)

    async def _delete_entries(self, entry_ids: Iterable[str]) -> None:
        for entry_id in entry_ids:
            await self.store.async_delete(self.ENTRIES, entry_id)

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


def _reached(parents: dict[str, str | None], records: Iterable[ConversationRecord]) -> set[str]:
    """The entry ids the histories and branches of ``records`` pass through."""
    reached: set[str] = set()
    for record in records:
        for tip in [record.head_id, *record.branches]:
            while tip is not None and tip not in reached:
                reached.add(tip)
                tip = parents.get(tip)
    return reached
