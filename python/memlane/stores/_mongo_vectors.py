"""MongoDBStore's vectors: kept in the entry's own document, checked against its text.

An entry's document carries at most one vector: ``vector`` (float32 little-endian bytes, as
:func:`~memlane.stores.vectors.encode_vector` writes them), ``vector_model``,
``vector_dims`` and ``vector_digest`` (the digest of the text it was made from). Deleting,
clearing or cleaning up the entry removes its document and the vector with it; a search
reads live documents only. A save that changes the entry's search text leaves the old
vector in the document, but a vector counts only while its digest is the digest of the
document's current ``search_text``: every read checks it, so a changed entry is never found
by its old meaning, whichever writer (this release, an older one, ``save_if``) changed it.

Ranking: MongoDB's ``$vectorSearch`` needs a search index served by Atlas Search (or a
self-managed ``mongot``), which most servers (FerretDB, a plain ``mongod``) do not have.
The store asks the server once, on its first vector operation, and where the stage is
refused it reads the candidates' vectors and
:func:`~memlane.stores._network_vectors.best_vectors` ranks them, with one
:class:`~memlane.stores.VectorFallbackWarning` naming the server's refusal.
"""

from __future__ import annotations

import inspect
import json
from datetime import datetime
from typing import Any

from memlane.stores._connect import require
from memlane.stores._mongo_cas import Mongo
from memlane.stores._mongo_documents import _ORDER, _PROJECTION, _live, _to_list
from memlane.stores._network_vectors import NetworkVectorStore, best_vectors
from memlane.stores.protocol import SEARCH_TEXT, SearchHit
from memlane.stores.vectors import EntryVector, encode_vector, text_digest
from memlane.types import MemoryEntry

__all__ = ["MongoVectorStore", "current_digest"]

FIELDS = ("vector", "vector_model", "vector_dims", "vector_digest")

_PROBE_INDEX = "memlane_vectors"

_UPDATE_BATCH = 50
"""Updates per ``bulk_write``: FerretDB 1.24 (SQLite) stops answering, on that connection and
every other, during an update command of 100 documents that change; 50 never did."""


def current_digest(metadata_text: object) -> str | None:
    """The digest of the search text in a document's metadata (JSON text), or ``None``."""
    try:
        metadata = json.loads(metadata_text) if isinstance(metadata_text, str) else None
    except ValueError:
        return None
    text = metadata.get(SEARCH_TEXT) if isinstance(metadata, dict) else None
    return text_digest(text) if isinstance(text, str) else None


class MongoVectorStore(NetworkVectorStore[Mongo]):
    """The vector operations of :class:`~memlane.stores.mongodb.MongoDBStore`, which
    supplies ``_errors``, ``_entry`` and ``_is_connection_error``."""

    _errors: Any
    # Why the server cannot rank vectors itself, once asked (None: not asked yet).
    _vector_refusal: str | None = None

    def _entry(self, doc: dict[str, Any]) -> MemoryEntry:
        raise NotImplementedError

    async def _ask_vector_search(self, mongo: Mongo) -> None:
        """Asks the server once whether it runs ``$vectorSearch``; warns when it does not."""
        if self._vector_refusal is None:
            probe = {
                "$vectorSearch": {
                    "index": _PROBE_INDEX,
                    "path": "vector",
                    "queryVector": [1.0],
                    "numCandidates": 1,
                    "limit": 1,
                }
            }
            try:
                await _to_list(mongo.collection.aggregate([probe]))
                refusal = "has no vector search index for memlane's vectors"
            except self._errors.OperationFailure as exc:
                if self._is_connection_error(exc):
                    raise
                why = exc.details.get("errmsg", str(exc)) if exc.details else str(exc)
                refusal = f"has no $vectorSearch ({why})"
            self._vector_refusal = refusal
        self._warn_vector_fallback(self._vector_refusal)

    async def _do_save_vectors(
        self,
        mongo: Mongo,
        namespace: str,
        model: str,
        vectors: list[EntryVector],
        now: datetime,
    ) -> int:
        await self._ask_vector_search(mongo)
        pymongo = require("pymongo", "mongodb")
        bson = require("bson", "mongodb")
        latest = {v.entry_id: v for v in vectors}
        query = {
            "namespace": namespace,
            "entry_id": {"$in": list(latest)},
            **_live(now.timestamp()),
        }
        docs = await _to_list(
            mongo.collection.find(query, {"_id": 1, "entry_id": 1, "metadata": 1})
        )
        updates = []
        for doc in docs:
            vector = latest[doc["entry_id"]]
            if current_digest(doc.get("metadata")) != vector.digest:
                continue
            # By _id alone (FerretDB uses its index for no other filter, and scanned the
            # collection once per vector). A save since the read needs no guard here: the
            # vector keeps the digest of the text it was made from, and every read ignores it
            # unless the document's text is still that text.
            selector = {"_id": doc["_id"]}
            values = {
                "vector": bson.Binary(encode_vector(vector.vector)),
                "vector_model": model,
                "vector_dims": len(vector.vector),
                "vector_digest": vector.digest,
            }
            updates.append(pymongo.UpdateOne(selector, {"$set": values}))
        attached = 0
        for start in range(0, len(updates), _UPDATE_BATCH):
            batch = updates[start : start + _UPDATE_BATCH]
            attached += (await mongo.collection.bulk_write(batch, ordered=False)).matched_count
        return attached

    async def _do_vector_search(
        self,
        mongo: Mongo,
        namespaces: list[str],
        query: list[float],
        model: str,
        limit: int,
        minimum: float,
        now: datetime,
    ) -> list[SearchHit]:
        await self._ask_vector_search(mongo)
        selector = {
            "namespace": {"$in": namespaces},
            "importance": {"$gte": minimum},
            "vector_model": model,
            "vector_dims": len(query),
            **_live(now.timestamp()),
        }
        fields = {"_id": 0, "entry_id": 1, "vector": 1, "vector_digest": 1, "importance": 1}
        candidates = await _to_list(mongo.collection.find(selector, fields).sort(_ORDER))
        ranked = best_vectors(
            query,
            [(bytes(c["vector"]), c["importance"], i) for i, c in enumerate(candidates)],
            len(candidates),
        )
        hits: list[SearchHit] = []
        # Best first, a page at a time: only the entries that may be returned are read whole,
        # and one whose text changed since its vector was made is passed over.
        for start in range(0, len(ranked), limit):
            page = ranked[start : start + limit]
            ids = [candidates[i]["entry_id"] for i, _ in page]
            found = {
                d["entry_id"]: d
                for d in await _to_list(
                    mongo.collection.find(
                        {"entry_id": {"$in": ids}, **_live(now.timestamp())}, _PROJECTION
                    )
                )
            }
            for (i, score), entry_id in zip(page, ids, strict=True):
                doc = found.get(entry_id)
                digest = candidates[i]["vector_digest"]
                if doc is not None and current_digest(doc["metadata"]) == digest:
                    hits.append(SearchHit(self._entry(doc), score))
                    if len(hits) == limit:
                        return hits
        return hits

    async def _do_missing_vectors(
        self, mongo: Mongo, namespaces: list[str], model: str, limit: int, now: datetime
    ) -> list[MemoryEntry]:
        selector = {
            "namespace": {"$in": namespaces},
            "search_terms": {"$ne": None},
            **_live(now.timestamp()),
        }
        fields = {**_PROJECTION, "vector_model": 1, "vector_digest": 1}
        missing: list[MemoryEntry] = []
        cursor = mongo.collection.find(selector, fields).sort(_ORDER)
        try:
            async for doc in cursor:
                digest = current_digest(doc["metadata"])
                if digest is None:
                    continue
                if doc.get("vector_model") != model or doc.get("vector_digest") != digest:
                    missing.append(self._entry(doc))
                    if len(missing) == limit:
                        break
        finally:
            # Stopped early, the server would keep the cursor open until it times out.
            closing = cursor.close()
            if inspect.isawaitable(closing):  # PyMongo's async cursor; Motor's closes at once
                await closing
        return missing
