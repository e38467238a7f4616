"""MongoDBStore's conditional write: ``save_if`` as inserts and filtered updates every server keeps.

A compare-and-swap on MongoDB cannot be one statement on every server the store supports
(FerretDB applies a filtered update as a read, then a write), so it is built from the two
operations that are atomic everywhere: an insert under a unique ``_id`` and a single-document
update. Kept apart from the store so the protocol reads in one place.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from memlane.stores.protocol import next_version

__all__ = ["CAS_HOLDER", "HOLDER", "Mongo", "MongoCas", "is_live", "seq_clock"]


class SeqClock:
    """Strictly increasing ``time_ns``-based sequence numbers for MongoDB insertion order.

    Counters cannot be used: some MongoDB-compatible servers lose concurrent ``$inc``
    updates. Wall-clock nanoseconds agree across processes of a host (and across hosts as
    far as their clocks do); ties between processes are broken by ``_id`` when sorting.
    """

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last


seq_clock = SeqClock()


class Mongo:
    """One event loop's view of MongoDB: a client, its collections, and whether we own it."""

    def __init__(self, client: Any, database: str, collection: str, owned: bool) -> None:
        self.client = client
        self.collection = client[database][collection]
        # save_if's claims (see MongoCas._claim), apart from the entries so that they never
        # show up in load, namespaces or the entry_id index.
        self.claims = client[database][f"{collection}.claims"]
        self.owned = owned


HOLDER = {"_id": 1, "entry_id": 1, "namespace": 1, "seq": 1}
CAS_HOLDER = {**HOLDER, "expires_at": 1, "version": 1, "content": 1, "metadata": 1}


def is_live(doc: dict[str, Any], now: float) -> bool:
    return doc.get("expires_at") is None or doc["expires_at"] > now


class MongoCas:
    """``save_if`` for :class:`~memlane.stores.mongodb.MongoDBStore`, which supplies these."""

    _errors: Any  # pymongo.errors, imported when the store opens
    timeout: float
    _is_duplicate: Callable[[BaseException], bool]  # a duplicate-key error on any server

    async def _do_save_if(
        self,
        mongo: Mongo,
        namespace: str,
        doc: dict[str, Any],
        expected: int | None,
        retry: bool,
    ) -> bool:
        coll = mongo.collection
        version = next_version(expected)
        if retry and await self._holds(coll, doc, version):
            return True
        for _ in range(100):
            if expected is None:
                try:
                    # The key is free (the usual case): one insert, which the unique _id makes
                    # the arbiter between writers racing for the key.
                    await coll.insert_one({**doc, "seq": seq_clock.next(), "version": version})
                    return True
                except self._errors.OperationFailure as exc:
                    if not self._is_duplicate(exc):
                        raise
            holder = await coll.find_one({"_id": doc["_id"]}, CAS_HOLDER)
            now = time.time()
            if holder is None:
                if expected is not None:
                    return False
                # The key is free and the insert met this entry_id under another key.
                won = await self._move_onto_free_key(coll, doc, version)
            elif is_live(holder, now) and holder.get("version", 0) != expected:
                return False  # None never equals a version: a live holder beats "absent"
            elif not is_live(holder, now) and expected is not None:
                return False
            else:
                won = await self._replace_holder(mongo, doc, holder, version)
            if won is not None:
                return won
            # The holder changed hands while we worked (an expired one cleaned up, a plain
            # save): "absent" is judged again.
            if expected is not None:
                return False
        raise RuntimeError(f"could not save entry {doc['entry_id']!r}: the key kept changing hands")

    async def _holds(self, coll: Any, doc: dict[str, Any], version: int) -> bool:
        """Whether the key already holds exactly ``doc`` at ``version`` (a retried win)."""
        held = await coll.find_one({"_id": doc["_id"]}, CAS_HOLDER)
        return held is not None and all(
            held.get(f) == v
            for f, v in (
                ("entry_id", doc["entry_id"]),
                ("version", version),
                ("content", doc["content"]),
                ("metadata", doc["metadata"]),
            )
        )

    async def _claim(self, claims: Any, claim_id: str, token: str) -> bool:
        """Takes the one right to replace a key's holder at one version.

        FerretDB applies a filtered update as a read, then a write that does not check the
        filter again, so two writers filtering on the same version would both win; an insert
        under a unique ``_id`` is atomic on every server, so the claim decides instead. A
        claim older than ``timeout`` was left by a writer that died before releasing it, and
        is taken over.
        """
        document = {"_id": claim_id, "token": token, "at": time.time()}
        try:
            await claims.insert_one(document)
            return True
        except self._errors.OperationFailure as exc:
            if not self._is_duplicate(exc):
                raise
        held = await claims.find_one({"_id": claim_id})
        if held is None or held["at"] > time.time() - self.timeout:
            return False
        await claims.delete_one({"_id": claim_id, "token": held["token"]})
        try:
            await claims.insert_one({**document, "at": time.time()})
            return True
        except self._errors.OperationFailure as exc:
            if not self._is_duplicate(exc):
                raise
        return False

    async def _replace_holder(
        self, mongo: Mongo, doc: dict[str, Any], holder: dict[str, Any], version: int
    ) -> bool | None:
        """Replaces the key's ``holder`` (as read) by ``doc``: won, lost, or ``None`` (changed)."""
        coll, entry_id = mongo.collection, doc["entry_id"]
        claim_id = json.dumps([doc["namespace"], doc["key"], holder.get("version", 0)])
        token = uuid.uuid4().hex
        if not await self._claim(mongo.claims, claim_id, token):
            return False
        try:
            old = None
            if holder["entry_id"] == entry_id:
                seq = holder["seq"]
            else:
                # The entry may live on under another key or namespace: save's rules move it
                # here (keeping its place in this namespace), which the unique entry_id
                # index allows only once the old document is gone.
                old = await coll.find_one({"entry_id": entry_id})
                if old is not None and old["_id"] == doc["_id"]:
                    # A racer sharing this entry_id replaced the holder since it was read:
                    # removing "the old place" would remove that win.
                    return None
                same = old is not None and old["namespace"] == doc["namespace"]
                seq = old["seq"] if same and old is not None else seq_clock.next()
                if old is not None:
                    await coll.delete_one({"_id": old["_id"], "entry_id": entry_id})
            # The filter repeats what was judged: a plain save in between makes this a loss.
            state = {
                "_id": holder["_id"],
                "entry_id": holder["entry_id"],
                "version": holder.get("version"),
                "expires_at": holder.get("expires_at"),
            }
            replaced = await coll.update_one(
                state, {"$set": {**doc, "seq": seq, "version": version}}
            )
            if replaced.matched_count:
                return True
            if old is not None:
                await self._restore(coll, old)
            return None
        finally:
            await mongo.claims.delete_one({"_id": claim_id, "token": token})

    async def _move_onto_free_key(
        self, coll: Any, doc: dict[str, Any], version: int
    ) -> bool | None:
        """Moves an entry that lives under another ``_id`` onto the free key of ``doc``."""
        old = await coll.find_one({"entry_id": doc["entry_id"]})
        if old is None or old["_id"] == doc["_id"]:
            # Gone meanwhile, or already on this key (a racer sharing the entry_id won it, and
            # removing it as "the old place" would let a second win in): judged again.
            return None
        seq = old["seq"] if old["namespace"] == doc["namespace"] else seq_clock.next()
        await coll.delete_one({"_id": old["_id"], "entry_id": doc["entry_id"]})
        try:
            await coll.insert_one({**doc, "seq": seq, "version": version})
            return True
        except self._errors.OperationFailure as exc:
            if not self._is_duplicate(exc):
                raise
        # Another writer took the key in between: this one lost, and its entry goes back.
        await self._restore(coll, old)
        return None

    async def _restore(self, coll: Any, old: dict[str, Any]) -> None:
        """Puts back a document a lost ``save_if`` removed (unless its place was taken)."""
        try:
            await coll.insert_one(old)
        except self._errors.OperationFailure as exc:
            if not self._is_duplicate(exc):
                raise
