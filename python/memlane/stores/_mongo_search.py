"""MongoDBStore's search: the indexed field, its back-fill, and the two ways to find candidates.

Metadata is stored as JSON text (so any key round-trips), which no MongoDB index can look
into; each document therefore also carries ``search_terms``: its ``metadata["search_text"]``
split by :func:`~memlane.stores.protocol.search_terms` and joined by single spaces (``None``
when the entry is not searchable). Splitting here, not on the server, makes every server see
the same words: MongoDB's own text tokenizer keeps ``user_timezone`` whole, for one.

Where the server has text indexes, a text index on that field (language ``"none"``: no
stemming, no stop words) finds candidates with ``$text``; elsewhere (FerretDB) a regular
expression per term does, anchored at the spaces between words. Either way the candidates
are ranked by :func:`~memlane.stores.protocol.rank_entries`: MongoDB's ``textScore`` counts
occurrences but has no inverse document frequency, and rarer terms must weigh more.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memlane.stores.protocol import SEARCH_TEXT, search_terms
from memlane.types import MemoryEntry

__all__ = [
    "FIELD",
    "INDEX",
    "backfill",
    "entry_terms",
    "indexed_terms",
    "pattern_filter",
    "text_filter",
]

FIELD = "search_terms"
INDEX = "search_terms"
"""The search index's name. Its existence also says the collection was back-filled: it is
created only after the back-fill ran."""

# Updates per bulk_write: FerretDB 1.24 (SQLite) stops answering during one update command
# of 100 changed documents (see _mongo_vectors), 50 never did.
_BATCH = 50


def indexed_terms(metadata: dict[str, Any]) -> str | None:
    """What a document's ``search_terms`` holds for ``metadata``."""
    text = metadata.get(SEARCH_TEXT)
    return " ".join(search_terms(text)) if isinstance(text, str) else None


def entry_terms(entry: MemoryEntry) -> str | None:
    """``search_terms`` of an entry being saved."""
    return indexed_terms(entry.metadata)


async def backfill(coll: Any, update_one: Any) -> int:
    """Gives ``search_terms`` to the documents written before it existed; how many.

    Each update repeats the metadata it read, so a document rewritten meanwhile (by a
    release that does not know the field) is left for that writer's own value.
    """
    cursor = coll.find({FIELD: {"$exists": False}}, {"_id": 1, "metadata": 1})
    updates: list[Any] = []
    done = 0
    async for doc in cursor:
        try:
            metadata = json.loads(doc["metadata"])
        except (KeyError, TypeError, ValueError):
            metadata = {}
        value = indexed_terms(metadata) if isinstance(metadata, dict) else None
        selector = {"_id": doc["_id"], "metadata": doc.get("metadata"), FIELD: {"$exists": False}}
        updates.append(update_one(selector, {"$set": {FIELD: value}}))
        if len(updates) >= _BATCH:
            done += (await coll.bulk_write(updates, ordered=False)).modified_count
            updates = []
    if updates:
        done += (await coll.bulk_write(updates, ordered=False)).modified_count
    return done


def text_filter(terms: list[str]) -> dict[str, Any]:
    """``$text`` for any of ``terms``: they are letters and digits only, so joined by spaces
    they can form no phrase (``"``) or negation (``-``)."""
    return {"$text": {"$search": " ".join(terms)}}


def pattern_filter(terms: list[str]) -> dict[str, Any]:
    """Documents whose ``search_terms`` hold any of ``terms`` as a whole word.

    Both sides are already case folded, so no case-insensitive matching is needed; each term
    is escaped all the same, so no query can ever become a pattern.
    """
    return {"$or": [{FIELD: {"$regex": f"(?:^| ){re.escape(t)}(?: |$)"}} for t in terms]}
