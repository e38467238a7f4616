"""The database-server stores' former home; they live in :mod:`memlane.stores` now.

Kept so that existing imports keep working.
"""

from __future__ import annotations

from memlane.stores.mongodb import IndexFallbackWarning, MongoDBStore, check_mongo_name
from memlane.stores.postgres import PostgreSQLStore, check_schema_name

__all__ = [
    "IndexFallbackWarning",
    "MongoDBStore",
    "PostgreSQLStore",
    "check_mongo_name",
    "check_schema_name",
]
