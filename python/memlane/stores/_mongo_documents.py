"""The documents of :class:`~memlane.stores.mongodb.MongoDBStore`: their ``_id``, the fields
read back, the filters of live entries, and the checks of database and collection names.

Kept apart from the store so ``mongodb.py`` holds the store's connection and operations only.
"""

from __future__ import annotations

import inspect
import json
import re
import urllib.parse
from typing import Any

from memlane._validate import check_str
from memlane.errors import InvalidValueError

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
    "version": 1,
}
_FIELDS = (
    "entry_id",
    "scope",
    "key",
    "content",
    "metadata",
    "created_at",
    "expires_at",
    "importance",
)
# Options the store sets from timeout and pool_size unless the URL sets them (URI option
# names are case-insensitive).
_URL_OPTIONS = ("maxPoolSize", "serverSelectionTimeoutMS", "connectTimeoutMS", "socketTimeoutMS")
_ORDER = [("seq", 1), ("_id", 1)]

# PyMongo's server-selection error appends every timeout setting and a dump of the whole
# topology to the reason; the reason alone is what an operator needs.
_SELECTION_NOISE = re.compile(r" \(configured timeouts:[^)]*\)|, Timeout: .*", re.DOTALL)


def _live(now: float) -> dict[str, Any]:
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


def _url_options(url: str) -> set[str]:
    """Lower-cased names of the options written in a ``mongodb://`` URL's query."""
    query = urllib.parse.urlsplit(url).query
    return {name.lower() for name, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)}


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
