"""MongoDBStore: a collection shared by every process that points at it (PyMongo's async API).

It follows the rules of every memlane store (see :mod:`memlane.stores.protocol`), across
processes: a key is unique because it is the document's ``_id``, and every save is one
insert or single-document updates, never a read-then-write that another process could
interleave. The driver is an optional extra (``pip install 'memlane[mongodb]'``), imported
only when a store is created.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from datetime import datetime
from typing import Any

from memlane._validate import check_positive_int, check_seconds
from memlane.errors import InvalidValueError, NotAStoreError, StoreConnectionError
from memlane.stores import _mongo_search
from memlane.stores._connect import IndexFallbackWarning, require, utf8_problem
from memlane.stores._mongo_cas import HOLDER, Mongo, MongoCas, seq_clock
from memlane.stores._mongo_documents import (
    _FIELDS,
    _ORDER,
    _PROJECTION,
    _SELECTION_NOISE,
    _doc_id,
    _live,
    _to_list,
    _url_options,
    check_mongo_name,
)
from memlane.stores._mongo_vectors import MongoVectorStore
from memlane.stores.protocol import (
    SearchHit,
    entry_to_row,
    rank_entries,
    row_to_entry,
)
from memlane.types import MemoryEntry

__all__ = ["IndexFallbackWarning", "MongoDBStore", "check_mongo_name"]


class MongoDBStore(MongoCas, MongoVectorStore):
    """A MongoDB collection shared by every process that points at it.

    Driver: PyMongo's own async API (``AsyncMongoClient``). A client you pass as ``client=``
    (an ``AsyncMongoClient`` or a Motor ``AsyncIOMotorClient``) is used on the event loop it
    is first used on (drivers bind a client to one loop) and is never closed by the store;
    other loops, and the private loop of the sync methods, get clients made from ``url``.

    One document per entry: ``entry_id``, ``namespace``, ``scope``, ``key``, ``content`` and
    ``metadata`` as JSON text (so any dict key, ``$`` and dots included, and integers beyond
    64 bits round-trip exactly), ``created_at`` as ISO text (microseconds kept),
    ``expires_at`` as Unix seconds, ``importance``, ``version`` and ``seq`` (insertion
    order; a document written before versions existed reads as version 0); a keyed
    entry's ``_id`` is its (namespace, key), so two entries can never hold one key. Without
    multi-document transactions, a save is one insert for a new entry and otherwise a few
    single-document operations, each atomic; overwriting a key is one document update, so
    readers never see it missing (only re-keying an existing entry onto a held key, or
    moving a keyed entry between namespaces, briefly removes it).
    :meth:`save_many` writes a batch in one round trip but, unlike PostgreSQL, is not all
    or nothing.

    :meth:`save_if` does not trust a filtered update to be atomic (FerretDB's is not: two
    writers filtering on one version both win): a free key is taken by one insert, and a
    held key is replaced only by the writer whose insert of a claim on (namespace, key,
    version) into the ``{collection}.claims`` collection succeeded; the claim is removed
    once the write is done. A writer that dies holding a claim blocks that key's
    compare-and-swap for ``timeout`` seconds, after which the claim is taken over. A plain
    :meth:`save` takes no claim: racing a ``save_if`` on one key, it may be overwritten.
    Moving an entry that lives under another key as part of a ``save_if`` removes its old
    document first and puts it back if the write then loses.

    :meth:`search` (see :class:`~memlane.stores.SearchableStore`) reads a ``search_terms``
    field, the metadata's ``search_text`` split as
    :func:`~memlane.stores.protocol.search_terms` splits it and joined by spaces. Where the
    server has text indexes, a text index on it (no stemming, no stop words) finds the
    candidates with ``$text``; elsewhere (FerretDB, with an
    :class:`IndexFallbackWarning`) a whole-word pattern per term does, over the searched
    namespaces. Candidates are ranked by BM25 among themselves, then by importance.
    Documents written before search existed are given the field on first use; an older
    release still writing afterwards writes documents search does not find.

    Args:
        url: ``mongodb://host:port/``; options written in it (``serverSelectionTimeoutMS``,
            ``maxPoolSize``, ...; any case) win over ``timeout`` and ``pool_size``.
        database: Database name.
        collection: Collection name.
        pool_size: Most connections per client.
        client: An async client to use instead of making one.
        timeout: Seconds allowed to connect and wait on a socket; also how old a
            ``save_if`` claim must be to count as abandoned.
        server_selection_timeout: Seconds allowed to find a usable server (PyMongo's
            ``serverSelectionTimeoutMS``, at most ``timeout``): an unreachable server
            raises :class:`~memlane.errors.StoreConnectionError` after this long. Raise it
            for a replica set whose elections take longer.
        read_only: Open an existing collection for reading only: no index is created and
            nothing back-filled, every write raises
            :class:`~memlane.errors.ReadOnlyStoreError` before reaching the server, and a
            missing collection raises :class:`~memlane.errors.NotAStoreError` on first use.

    :meth:`delete_many` removes the entries one by one (not all or nothing).

    The store is a :class:`~memlane.stores.protocol.VectorStore`: an entry's vector lives in
    its document (see :mod:`memlane.stores._mongo_vectors`) and counts only while the
    entry's search text is the one it was made from. Servers without ``$vectorSearch``
    (FerretDB, a plain ``mongod``) leave the ranking to memlane, with one
    :class:`~memlane.stores.VectorFallbackWarning` per store.

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
        server_selection_timeout: float = 3.0,
        read_only: bool = False,
    ) -> None:
        self._errors = require("pymongo.errors", "mongodb")
        self._bson_errors = require("bson.errors", "mongodb")
        super().__init__(url, timeout, read_only)
        self.server_selection_timeout = min(
            check_seconds(server_selection_timeout, "server_selection_timeout"), self.timeout
        )
        self.database = check_mongo_name(database, "database")
        self.collection = check_mongo_name(collection, "collection")
        self.pool_size = check_positive_int(pool_size, "pool_size")
        self._client = client
        self._client_loop: asyncio.AbstractEventLoop | None = None
        # Whether the server gave the search field a text index (known once migrated).
        self._text_search = False

    async def _open(self, loop: asyncio.AbstractEventLoop) -> Mongo:
        if self._client is not None and loop is not self._runner.loop:
            with self._lock:
                if self._client_loop is None or self._client_loop.is_closed():
                    self._client_loop = loop
            if self._client_loop is loop:
                mongo = Mongo(self._client, self.database, self.collection, owned=False)
                await self._ping(mongo)
                return mongo
        pymongo = require("pymongo", "mongodb")
        ms = int(self.timeout * 1000)
        defaults = {
            "maxPoolSize": self.pool_size,
            "serverSelectionTimeoutMS": int(self.server_selection_timeout * 1000),
            "connectTimeoutMS": ms,
            "socketTimeoutMS": ms,
        }
        # PyMongo lets keyword arguments override the URL; an option written in the URL is
        # the more specific wish, so the store's defaults only fill in what it leaves out.
        in_url = _url_options(self._url)
        options = {k: v for k, v in defaults.items() if k.lower() not in in_url}
        client = pymongo.AsyncMongoClient(self._url, **options)
        mongo = Mongo(client, self.database, self.collection, owned=True)
        try:
            await self._ping(mongo)
        except BaseException:
            await client.close()
            raise
        return mongo

    async def _ping(self, mongo: Mongo) -> None:
        try:
            await mongo.client.admin.command("ping")
        except self._errors.ConnectionFailure as exc:
            raise self._unreachable(exc, "connect to") from exc

    def _unreachable(self, exc: BaseException, doing: str) -> StoreConnectionError:
        reason = _SELECTION_NOISE.sub("", str(exc)).strip()
        reason = reason.splitlines()[0] if reason else type(exc).__name__
        return StoreConnectionError(
            f"cannot {doing} MongoDB at {self.address} (no usable server within "
            f"{self.server_selection_timeout:g}s): {reason}"
        )

    async def _check_store(self, mongo: Mongo) -> None:
        """What a read-only store does instead of migrating: finds the collection and its
        search index, writing nothing.

        Raises:
            NotAStoreError: The database holds no such collection.
        """
        coll = mongo.collection
        names = await coll.database.list_collection_names(filter={"name": self.collection})
        if self.collection not in names:
            raise NotAStoreError(
                f"MongoDB at {self.address}: {self.database}.{self.collection}: not a memlane "
                "store: no such collection"
            )
        info = await coll.index_information()
        self._text_search = self._is_text_index(info.get(_mongo_search.INDEX))

    async def _migrate(self, mongo: Mongo) -> None:
        if self.read_only:
            await self._check_store(mongo)
            return
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
        search = await self._ensure_search_index(pymongo, coll)
        if search is not None:
            fallbacks.append(search)
        if fallbacks:
            warnings.warn(
                f"MongoDB server at {self.address} rejected index options; using plain "
                f"indexes instead: {'; '.join(fallbacks)}",
                IndexFallbackWarning,
                stacklevel=2,
            )

    async def _ensure_search_index(self, pymongo: Any, coll: Any) -> str | None:
        """Back-fills ``search_terms`` once, then indexes it: a text index, or (on a server
        without text indexes) a plain one that marks the back-fill done. Says why the text
        index was refused, or ``None``."""
        info = await coll.index_information()
        if _mongo_search.INDEX not in info:
            await _mongo_search.backfill(coll, pymongo.UpdateOne)
        refused = None
        if not self._is_text_index(info.get(_mongo_search.INDEX)):
            try:
                await self._ensure_index(
                    coll,
                    [(_mongo_search.FIELD, pymongo.TEXT)],
                    _mongo_search.INDEX,
                    default_language="none",
                )
            except self._errors.OperationFailure as exc:
                if self._is_connection_error(exc):
                    raise
                await self._ensure_index(coll, [(_mongo_search.FIELD, 1)], _mongo_search.INDEX)
                why = exc.details.get("errmsg", exc) if exc.details else exc
                refused = (
                    f"{_mongo_search.INDEX} (no text index: {why}; search matches each "
                    "term by a regular expression)"
                )
            info = await coll.index_information()
        self._text_search = self._is_text_index(info.get(_mongo_search.INDEX))
        return refused

    @staticmethod
    def _is_text_index(info: dict[str, Any] | None) -> bool:
        return info is not None and any(kind == "text" for _, kind in info.get("key", []))

    async def _ensure_index(
        self, coll: Any, keys: list[tuple[str, int]], name: str, **options: Any
    ) -> None:
        try:
            await coll.create_index(keys, name=name, **options)
        except self._errors.OperationFailure:
            # Another process may have created it (possibly in its fallback form) meanwhile.
            if name not in await coll.index_information():
                raise

    async def _close_resource(self, mongo: Mongo) -> None:
        if mongo.owned:
            await mongo.client.close()

    def _is_connection_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._errors.ConnectionFailure)

    def _is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._errors.PyMongoError | self._bson_errors.BSONError)

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
        entry_id, scope, key, content, metadata, created_at, expires_at, importance, version = (
            entry_to_row(entry)
        )
        for field, value in (("namespace", namespace), ("entry_id", entry_id), ("key", key)):
            problem = None if value is None else utf8_problem(value)
            if problem is not None:
                raise InvalidValueError(
                    f"cannot store entry {entry_id!r} in MongoDB: {field} {value!r} contains "
                    f"{problem}, "
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
            "version": version,
            _mongo_search.FIELD: _mongo_search.entry_terms(entry),
        }
        doc["_id"] = _doc_id(namespace, key, entry_id)
        return doc

    def _prepare(self, namespace: str, entries: list[MemoryEntry]) -> Any:
        return [self._document(namespace, e) for e in entries]

    def _entry(self, doc: dict[str, Any]) -> MemoryEntry:
        # A document written before versions existed has none: version 0, as after a save.
        row = (*(doc.get(f) for f in _FIELDS), doc.get("version", 0))
        return row_to_entry(row, f"MongoDB collection {self.database}.{self.collection}")

    # ---- operations

    async def _save_one(self, coll: Any, doc: dict[str, Any]) -> None:
        failure = self._errors.OperationFailure
        doc_id, entry_id, namespace = doc["_id"], doc["entry_id"], doc["namespace"]
        for _ in range(100):
            try:
                # A new entry whose key is free (every conversation turn, most facts): one
                # insert, which the unique _id and entry_id indexes refuse in every other case.
                await coll.insert_one({**doc, "seq": seq_clock.next()})
                return
            except failure as exc:
                if not self._is_duplicate(exc):
                    raise
            holder = await coll.find_one({"_id": doc_id}, HOLDER)
            try:
                if holder is None:
                    # The entry exists under another _id (re-keyed, or keyed and moving
                    # namespace): re-insert it, keeping its place if it stays in this namespace.
                    old = await coll.find_one({"entry_id": entry_id}, HOLDER)
                    if old is None:
                        continue
                    same = old["namespace"] == namespace
                    seq = old["seq"] if same else seq_clock.next()
                    await coll.delete_one({"_id": old["_id"], "entry_id": entry_id})
                    await coll.insert_one({**doc, "seq": seq})
                    return
                if holder["entry_id"] == entry_id:
                    # The entry itself: replaced in place, or moved to the end of this namespace.
                    same = holder["namespace"] == namespace
                    seq = holder["seq"] if same else seq_clock.next()
                else:
                    seq = seq_clock.next()  # another entry holds the key: this one replaces it
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

    async def _do_save_many(self, mongo: Mongo, namespace: str, docs: list[dict[str, Any]]) -> None:
        coll = mongo.collection
        if len(docs) == 1:
            await self._save_one(coll, docs[0])
            return
        # New entries (the common batch: a conversation's turns) go in with one insert_many.
        # The first that collides (an entry_id saved before, a key already held) and all
        # after it go through the full save, which resolves the collision.
        fresh = [{**d, "seq": seq_clock.next()} for d in docs]
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

    async def _do_load_range(
        self, mongo: Mongo, namespace: str, start: str, stop: str, now: datetime
    ) -> list[MemoryEntry]:
        # MongoDB compares strings by their UTF-8 bytes, which is code-point order.
        query = {"namespace": namespace, "key": {"$gte": start, "$lt": stop}}
        cursor = mongo.collection.find({**query, **_live(now.timestamp())}, _PROJECTION)
        return [self._entry(d) for d in await _to_list(cursor.sort([("key", 1)]))]

    async def _do_load(self, mongo: Mongo, namespace: str, now: datetime) -> list[MemoryEntry]:
        cursor = mongo.collection.find(
            {"namespace": namespace, **_live(now.timestamp())}, _PROJECTION
        )
        return [self._entry(d) for d in await _to_list(cursor.sort(_ORDER))]

    async def _do_load_by_key(
        self, mongo: Mongo, namespace: str, key: str, now: datetime
    ) -> MemoryEntry | None:
        # Filtered by _id alone, expiry checked here: some servers (FerretDB) use the _id
        # index only for a filter that is exactly {_id: ...} and scan the collection otherwise.
        doc = await mongo.collection.find_one({"_id": _doc_id(namespace, key, "")}, _PROJECTION)
        if doc is None or (doc["expires_at"] is not None and doc["expires_at"] <= now.timestamp()):
            return None
        return self._entry(doc)

    async def _do_delete(self, mongo: Mongo, namespace: str, entry_id: str) -> bool:
        result = await mongo.collection.delete_one({"namespace": namespace, "entry_id": entry_id})
        return bool(result.deleted_count)

    async def _do_clear(self, mongo: Mongo, namespace: str) -> int:
        return int((await mongo.collection.delete_many({"namespace": namespace})).deleted_count)

    async def _do_cleanup(self, mongo: Mongo, now: datetime) -> int:
        result = await mongo.collection.delete_many({"expires_at": {"$lte": now.timestamp()}})
        return int(result.deleted_count)

    async def _do_namespaces(self, mongo: Mongo) -> list[str]:
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

    async def _do_search(
        self,
        mongo: Mongo,
        namespaces: list[str],
        terms: list[str],
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        if self._text_search:
            words = _mongo_search.text_filter(terms)
        else:
            words = _mongo_search.pattern_filter(terms)
        query = {
            "$and": [
                words,
                {"namespace": {"$in": namespaces}, "importance": {"$gte": minimum}},
                _live(now.timestamp()),
            ]
        }
        cursor = mongo.collection.find(query, _PROJECTION).sort(_ORDER)
        entries = [self._entry(d) for d in await _to_list(cursor)]
        return rank_entries(entries, terms, limit, minimum)
