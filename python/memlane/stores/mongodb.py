"""MongoDBStore: a collection shared by every process that points at it (PyMongo's async API).

It follows the rules of every memlane store (see :mod:`memlane.stores.protocol`), across
processes: a key is unique because it is the document's ``_id``, and every save is one
insert or single-document updates, never a read-then-write that another process could
interleave. The driver is an optional extra (``pip install 'memlane[mongodb]'``), imported
only when a store is created.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
import warnings
from datetime import datetime
from typing import Any

from memlane._validate import check_positive_int, check_str
from memlane.errors import InvalidValueError
from memlane.stores._network import NetworkStore, require, utf8_problem
from memlane.stores.protocol import entry_to_row, row_to_entry
from memlane.types import MemoryEntry

__all__ = ["IndexFallbackWarning", "MongoDBStore", "check_mongo_name"]


class IndexFallbackWarning(UserWarning):
    """A MongoDB-compatible server rejected an index option; the plain index is used instead."""


class _SeqClock:
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


_seq_clock = _SeqClock()


class _Mongo:
    """One event loop's view of MongoDB: a client, its collection, and whether we own it."""

    def __init__(self, client: Any, collection: Any, owned: bool) -> None:
        self.client = client
        self.collection = collection
        self.owned = owned


_PROJECTION = {
    "_id": 0,
    "entry_id": 1,
    "scope": 1,
    "key": 1,
    "content": 1,
    "metadata": 1,
    "created_at": 1,
    "expires_at": 1,
    "importance": 1,
}
_HOLDER = {"_id": 1, "entry_id": 1, "namespace": 1, "seq": 1}
_ORDER = [("seq", 1), ("_id", 1)]


def _live(now: float) -> dict[str, Any]:
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


def _doc_id(namespace: str, key: str | None, entry_id: str) -> str:
    """The ``_id`` of an entry's document: ``["namespace","key"]`` if keyed, else ``[null,"id"]``.

    A keyed entry's ``_id`` is its (namespace, key), so the primary key itself makes a key
    unique within a namespace (no partial index needed, which not every MongoDB-compatible
    server has), and key lookups and overwrites address one document by ``_id``, which every
    server indexes (FerretDB's SQLite backend pushes down no other filter). The JSON forms of
    the two kinds can never be equal.
    """
    return json.dumps(
        [namespace, key] if key is not None else [None, entry_id], separators=(",", ":")
    )


async def _to_list(cursor: Any) -> list[Any]:
    if inspect.isawaitable(cursor):  # PyMongo's async aggregate() is a coroutine; Motor's is not
        cursor = await cursor
    return list(await cursor.to_list(None))


def check_mongo_name(name: object, what: str) -> str:
    """A MongoDB database or collection name: non-empty, without NUL or ``$``.

    Raises:
        TypeError: Not a ``str``.
        InvalidValueError: Empty, or containing NUL or ``$`` (a ``ValueError``).
    """
    check_str(name, what)
    assert isinstance(name, str)
    if not name or "\x00" in name or "$" in name:
        raise InvalidValueError(f"{what} must be a non-empty name without NUL or '$', got {name!r}")
    return name


class MongoDBStore(NetworkStore[_Mongo]):
    """A MongoDB collection shared by every process that points at it.

    Driver: PyMongo's own async API (``AsyncMongoClient``). A client you pass as ``client=``
    (an ``AsyncMongoClient`` or a Motor ``AsyncIOMotorClient``) is used on the event loop it
    is first used on (drivers bind a client to one loop) and is never closed by the store;
    other loops, and the private loop of the sync methods, get clients made from ``url``.

    One document per entry: ``entry_id``, ``namespace``, ``scope``, ``key``, ``content`` and
    ``metadata`` as JSON text (so any dict key, ``$`` and dots included, and integers beyond
    64 bits round-trip exactly), ``created_at`` as ISO text (microseconds kept),
    ``expires_at`` as Unix seconds, ``importance`` and ``seq`` (insertion order); a keyed
    entry's ``_id`` is its (namespace, key), so two entries can never hold one key. Without
    multi-document transactions, a save is one insert for a new entry and otherwise a few
    single-document operations, each atomic; overwriting a key is one document update, so
    readers never see it missing (only re-keying an existing entry onto a held key, or
    moving a keyed entry between namespaces, briefly removes it).
    :meth:`save_many` writes a batch in one round trip but, unlike PostgreSQL, is not all
    or nothing.

    Args:
        url: ``mongodb://host:port/``.
        database: Database name.
        collection: Collection name.
        pool_size: Most connections per client.
        client: An async client to use instead of making one.
        timeout: Seconds allowed to select a server, connect and wait on a socket.

    Raises:
        ImportError: PyMongo is not installed (``pip install 'memlane[mongodb]'``).
    """

    _kind = "MongoDB"
    _default_port = 27017

    def __init__(
        self,
        url: str,
        *,
        database: str = "memlane",
        collection: str = "entries",
        pool_size: int = 10,
        client: Any = None,
        timeout: float = 30.0,
    ) -> None:
        self._errors = require("pymongo.errors", "mongodb")
        super().__init__(url, timeout)
        self.database = check_mongo_name(database, "database")
        self.collection = check_mongo_name(collection, "collection")
        self.pool_size = check_positive_int(pool_size, "pool_size")
        self._client = client
        self._client_loop: asyncio.AbstractEventLoop | None = None

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Mongo:
        if self._client is not None and loop is not self._runner.loop:
            with self._lock:
                if self._client_loop is None or self._client_loop.is_closed():
                    self._client_loop = loop
            if self._client_loop is loop:
                mongo = _Mongo(
                    self._client, self._client[self.database][self.collection], owned=False
                )
                await self._ping(mongo)
                return mongo
        pymongo = require("pymongo", "mongodb")
        ms = int(self.timeout * 1000)
        client = pymongo.AsyncMongoClient(
            self._url,
            maxPoolSize=self.pool_size,
            serverSelectionTimeoutMS=ms,
            connectTimeoutMS=ms,
            socketTimeoutMS=ms,
        )
        mongo = _Mongo(client, client[self.database][self.collection], owned=True)
        try:
            await self._ping(mongo)
        except BaseException:
            await client.close()
            raise
        return mongo

    async def _ping(self, mongo: _Mongo) -> None:
        try:
            await mongo.client.admin.command("ping")
        except self._errors.ConnectionFailure as exc:
            raise self._unreachable(exc, "connect to") from exc

    async def _migrate(self, mongo: _Mongo) -> None:
        pymongo = require("pymongo", "mongodb")
        asc = pymongo.ASCENDING
        coll = mongo.collection
        await self._ensure_index(coll, [("entry_id", asc)], "entry_id_unique", unique=True)
        await self._ensure_index(coll, [("namespace", asc), ("seq", asc)], "namespace_seq")
        fallbacks = []
        for keys, name, partial in (
            ([("namespace", asc), ("key", asc)], "namespace_key", {"key": {"$type": "string"}}),
            ([("expires_at", asc)], "expires_at", {"expires_at": {"$type": "number"}}),
        ):
            try:
                await self._ensure_index(coll, keys, name, partialFilterExpression=partial)
            except self._errors.OperationFailure as exc:
                if self._is_connection_error(exc):
                    raise
                await self._ensure_index(coll, keys, name)
                fallbacks.append(
                    f"{name} ({exc.details.get('errmsg', exc) if exc.details else exc})"
                )
        if fallbacks:
            warnings.warn(
                f"MongoDB server at {self.address} rejected partial indexes; using plain "
                f"indexes instead: {'; '.join(fallbacks)}",
                IndexFallbackWarning,
                stacklevel=2,
            )

    async def _ensure_index(
        self, coll: Any, keys: list[tuple[str, int]], name: str, **options: Any
    ) -> None:
        try:
            await coll.create_index(keys, name=name, **options)
        except self._errors.OperationFailure:
            # Another process may have created it (possibly in its fallback form) meanwhile.
            if name not in await coll.index_information():
                raise

    async def _close_resource(self, mongo: _Mongo) -> None:
        if mongo.owned:
            await mongo.client.close()

    def _is_connection_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._errors.ConnectionFailure)

    def _name_problem(self, text: str) -> str | None:
        return utf8_problem(text)

    @staticmethod
    def _is_duplicate_code(code: object, message: str) -> bool:
        # FerretDB reports a unique-index violation by an update as InternalError (code 1).
        return code in (11000, 11001) or "UNIQUE constraint failed" in message

    def _is_duplicate(self, exc: BaseException) -> bool:
        """A unique-index violation."""
        if isinstance(exc, self._errors.DuplicateKeyError):
            return True
        return isinstance(exc, self._errors.OperationFailure) and self._is_duplicate_code(
            exc.code, str(exc)
        )

    # ---- conversions

    def _document(self, namespace: str, entry: MemoryEntry) -> dict[str, Any]:
        entry_id, scope, key, content, metadata, created_at, expires_at, importance = entry_to_row(
            entry
        )
        for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
            problem = None if value is None else utf8_problem(value)
            if problem is not None:
                raise InvalidValueError(
                    f"cannot store entry {entry_id!r} in MongoDB: {field} contains {problem}, "
                    "and MongoDB strings must be valid UTF-8"
                )
        # JSON text with escaped surrogates is the same JSON, and valid UTF-8.
        if utf8_problem(content) is not None:
            content = json.dumps(entry.content, separators=(",", ":"))
        if utf8_problem(metadata) is not None:
            metadata = json.dumps(entry.metadata, separators=(",", ":"))
        doc = {
            "entry_id": entry_id,
            "namespace": namespace,
            "scope": scope,
            "key": key,
            "content": content,
            "metadata": metadata,
            "created_at": created_at,
            "expires_at": expires_at,
            "importance": importance,
        }
        doc["_id"] = _doc_id(namespace, key, entry_id)
        return doc

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        return [self._document(namespace, e) for e in entries]

    def _entry(self, doc: dict[str, Any]) -> MemoryEntry:
        row = tuple(
            doc.get(f)
            for f in (
                "entry_id",
                "scope",
                "key",
                "content",
                "metadata",
                "created_at",
                "expires_at",
                "importance",
            )
        )
        return row_to_entry(row, f"MongoDB collection {self.database}.{self.collection}")

    # ---- operations

    async def _save_one(self, coll: Any, doc: dict[str, Any]) -> None:
        failure = self._errors.OperationFailure
        doc_id, entry_id, namespace = doc["_id"], doc["entry_id"], doc["namespace"]
        for _ in range(100):
            try:
                # A new entry whose key is free (every conversation turn, most facts): one
                # insert, which the unique _id and entry_id indexes refuse in every other case.
                await coll.insert_one({**doc, "seq": _seq_clock.next()})
                return
            except failure as exc:
                if not self._is_duplicate(exc):
                    raise
            holder = await coll.find_one({"_id": doc_id}, _HOLDER)
            try:
                if holder is None:
                    # The entry exists under another _id (re-keyed, or keyed and moving
                    # namespace): re-insert it, keeping its place if it stays in this namespace.
                    old = await coll.find_one({"entry_id": entry_id}, _HOLDER)
                    if old is None:
                        continue
                    same = old["namespace"] == namespace
                    seq = old["seq"] if same else _seq_clock.next()
                    await coll.delete_one({"_id": old["_id"], "entry_id": entry_id})
                    await coll.insert_one({**doc, "seq": seq})
                    return
                if holder["entry_id"] == entry_id:
                    # The entry itself: replaced in place, or moved to the end of this namespace.
                    same = holder["namespace"] == namespace
                    seq = holder["seq"] if same else _seq_clock.next()
                else:
                    seq = _seq_clock.next()  # another entry holds the key: this one replaces it
                claim = {"_id": doc_id, "entry_id": holder["entry_id"]}
                # One atomic document update: the key never reads as missing.
                replaced = await coll.update_one(claim, {"$set": {**doc, "seq": seq}})
                if replaced.matched_count:
                    return
            except failure as exc:
                if not self._is_duplicate(exc):
                    raise
                if holder is not None:
                    # This entry_id lives on under another key of this namespace: the holder
                    # of the key goes, and the next round re-keys the entry in its place.
                    await coll.delete_one({"_id": doc_id, "entry_id": holder["entry_id"]})
        raise RuntimeError(f"could not save entry {entry_id!r}: the key kept changing hands")

    async def _do_save_many(
        self, mongo: _Mongo, namespace: str, docs: list[dict[str, Any]]
    ) -> None:
        coll = mongo.collection
        if len(docs) == 1:
            await self._save_one(coll, docs[0])
            return
        # New entries (the common batch: a conversation's turns) go in with one insert_many.
        # The first that collides (an entry_id saved before, a key already held) and all
        # after it go through the full save, which resolves the collision.
        fresh = [{**d, "seq": _seq_clock.next()} for d in docs]
        try:
            await coll.insert_many(fresh, ordered=True)
        except self._errors.BulkWriteError as exc:
            write_errors = exc.details.get("writeErrors") or [{"index": 0}]
            if not all(
                self._is_duplicate_code(e.get("code"), e.get("errmsg", "")) for e in write_errors
            ):
                raise
            for doc in docs[min(e["index"] for e in write_errors) :]:
                await self._save_one(coll, doc)

    async def _do_load(self, mongo: _Mongo, namespace: str, now: datetime) -> list[MemoryEntry]:
        cursor = mongo.collection.find(
            {"namespace": namespace, **_live(now.timestamp())}, _PROJECTION
        )
        return [self._entry(d) for d in await _to_list(cursor.sort(_ORDER))]

    async def _do_load_by_key(
        self, mongo: _Mongo, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        # Filtered by _id alone, expiry checked here: some servers (FerretDB) use the _id
        # index only for a filter that is exactly {_id: ...} and scan the collection otherwise.
        doc = await mongo.collection.find_one({"_id": _doc_id(namespace, key, "")}, _PROJECTION)
        if doc is None or (doc["expires_at"] is not None and doc["expires_at"] <= now.timestamp()):
            return None
        return self._entry(doc)

    async def _do_delete(self, mongo: _Mongo, namespace: str, entry_id: str) -> bool:
        result = await mongo.collection.delete_one({"namespace": namespace, "entry_id": entry_id})
        return bool(result.deleted_count)

    async def _do_clear(self, mongo: _Mongo, namespace: str) -> int:
        return int((await mongo.collection.delete_many({"namespace": namespace})).deleted_count)

    async def _do_cleanup(self, mongo: _Mongo, now: datetime) -> int:
        result = await mongo.collection.delete_many({"expires_at": {"$lte": now.timestamp()}})
        return int(result.deleted_count)

    async def _do_namespaces(self, mongo: _Mongo) -> list[str]:
        pipeline = [
            {"$group": {"_id": "$namespace", "first": {"$min": "$seq"}}},
            {"$sort": {"first": 1, "_id": 1}},
        ]
        try:
            return [d["_id"] for d in await _to_list(mongo.collection.aggregate(pipeline))]
        except self._errors.OperationFailure as exc:
            if self._is_connection_error(exc):
                raise
        # A server without the $min accumulator: scan the namespace column in order.
        cursor = mongo.collection.find({}, {"_id": 0, "namespace": 1}).sort(_ORDER)
        return list(dict.fromkeys(d["namespace"] for d in await _to_list(cursor)))
