"""Configuration from ``MEMLANE_*`` environment variables: which store, and the memory budgets.

:class:`MemlaneSettings` reads them (pydantic-settings); :func:`create_store` builds the store
they describe; :meth:`memlane.MemoryManager.from_config` does both and initialises a database
store. Every problem is a :class:`ValueError` naming the variable to fix.

* ``MEMLANE_BACKEND``: ``in_memory`` (default), ``file``, ``sqlite``, ``postgres`` or ``mongodb``.
* ``MEMLANE_MAX_CONVERSATION_TOKENS``: budget of each conversation's history (``128000``).
* ``MEMLANE_SUMMARIZE_THRESHOLD``: summarise retained turns above this many tokens (unset:
  ``min(3072, max_conversation_tokens * 3 // 4)``).
* ``MEMLANE_SUMMARIZE_IN_BACKGROUND``: summarise after ``add_turn`` returns (``false``).
* ``MEMLANE_MAX_CACHED_CONVERSATIONS``: conversations kept in memory over a persistent store
  (``10000``).
* ``MEMLANE_RETAIN_TRANSCRIPT``: keep summarised turns for ``get_transcript`` (``true``).
* ``MEMLANE_CONVERSATION_TTL``: seconds a conversation may stay idle before it is gone as a
  whole (unset: forever).
* ``MEMLANE_SHORT_TERM_STRATEGY``: JSON of the short-term strategies, e.g.
  ``{"memory_strategy_id": "max_tokens", "memory_max_tokens": 8000}`` (unset: the budget).
* ``MEMLANE_LONG_TERM_STRATEGY``: JSON of the long-term strategy, e.g.
  ``{"long_term_memory_id": "neuralyzer", "interaction_threshold_qty": 20}``.
* ``MEMLANE_EMBEDDER``: search long-term memory by meaning with this embedder: ``local``
  (WordLlama, offline; ``pip install memlane[embed]``) or a model name pydantic-ai infers,
  e.g. ``openai:text-embedding-3-small`` (unset: search by words only).
* ``MEMLANE_FILE_DIR``: directory of the ``file`` backend (``.memlane``).
* ``MEMLANE_SQLITE_PATH``: database file of the ``sqlite`` backend (``.memlane/memory.sqlite3``).
* ``MEMLANE_POSTGRES_URL``: required for ``postgres``.
* ``MEMLANE_POSTGRES_POOL_SIZE``: most connections per event loop (``10``).
* ``MEMLANE_POSTGRES_POOL_MIN_SIZE``: connections opened up front (``2``).
* ``MEMLANE_POSTGRES_SCHEMA``: schema of the table (``memlane``).
* ``MEMLANE_MONGODB_URL``: required for ``mongodb``.
* ``MEMLANE_MONGODB_DATABASE``: database name (``memlane``).
* ``MEMLANE_MONGODB_COLLECTION``: collection name (``entries``).
* ``MEMLANE_MONGODB_POOL_SIZE``: most connections per client (``10``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memlane.stores import FileStore, InMemoryStore, MemoryStore, SQLiteStore
from memlane.stores.mongodb import MongoDBStore, check_mongo_name
from memlane.stores.postgres import PostgreSQLStore, check_schema_name

__all__ = ["ENV_PREFIX", "Backend", "MemlaneSettings", "create_store"]

ENV_PREFIX = "MEMLANE_"

Backend = Literal["in_memory", "file", "sqlite", "postgres", "mongodb"]


def _variable(field: str) -> str:
    return f"{ENV_PREFIX}{field.upper()}"


class MemlaneSettings(BaseSettings):
    """memlane's settings, read from ``MEMLANE_*`` variables (names are case-insensitive).

    Use :meth:`from_env` rather than the constructor to get errors that name the variable.

    Attributes:
        backend: Which store ``MemoryManager.from_config`` builds.
        max_conversation_tokens: Budget of each conversation's history.
        summarize_threshold: Token total above which turns are folded into the summary
            (``None``: ``min(3072, max_conversation_tokens * 3 // 4)``).
        summarize_in_background: Whether summaries run after ``add_turn`` returns.
        max_cached_conversations: Conversations kept in memory over a persistent store.
        retain_transcript: Keep summarised turns for ``get_transcript``.
        conversation_ttl: Seconds a conversation may stay idle before it is gone (unset:
            forever).
        short_term_strategy: JSON of the short-term strategies (one object or a list).
        long_term_strategy: JSON of the long-term strategy.
        embedder: ``local`` or a pydantic-ai embedding model name; turns long-term memory on
            with search by meaning (unset: none).
        file_dir: Directory of the ``file`` backend.
        sqlite_path: Database file of the ``sqlite`` backend.
        postgres_url: Connection URL of the ``postgres`` backend (required for it).
        postgres_pool_size: Most PostgreSQL connections per event loop.
        postgres_pool_min_size: PostgreSQL connections opened up front.
        postgres_schema: Schema of the PostgreSQL table.
        mongodb_url: Connection URL of the ``mongodb`` backend (required for it).
        mongodb_database: MongoDB database name.
        mongodb_collection: MongoDB collection name.
        mongodb_pool_size: Most MongoDB connections per client.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="ignore")

    backend: Backend = "in_memory"
    max_conversation_tokens: int = Field(default=128_000, gt=0)
    summarize_threshold: int | None = Field(default=None, gt=0)
    summarize_in_background: bool = False
    max_cached_conversations: int = Field(default=10_000, gt=0)
    retain_transcript: bool = True
    conversation_ttl: float | None = Field(default=None, gt=0)
    short_term_strategy: str | None = None
    long_term_strategy: str | None = None
    embedder: str | None = None
    file_dir: str = ".memlane"
    sqlite_path: str = ".memlane/memory.sqlite3"
    postgres_url: str | None = None
    postgres_pool_size: int = Field(default=10, gt=0)
    postgres_pool_min_size: int = Field(default=2, ge=0)
    postgres_schema: str = "memlane"
    mongodb_url: str | None = None
    mongodb_database: str = "memlane"
    mongodb_collection: str = "entries"
    mongodb_pool_size: int = Field(default=10, gt=0)

    @field_validator("backend", mode="before")
    @classmethod
    def _backend_name(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("postgres_schema")
    @classmethod
    def _schema(cls, value: str) -> str:
        return check_schema_name(value)

    @field_validator("mongodb_database", "mongodb_collection")
    @classmethod
    def _mongo_name(cls, value: str) -> str:
        return check_mongo_name(value, "value")

    @field_validator("embedder")
    @classmethod
    def _embedder_name(cls, value: str | None) -> str | None:
        # Checked as a name here (a known provider, or "local"); the model is made, and
        # WordLlama looked for, when a memory is built with it.
        if value is None:
            return None
        from memlane.embeddings.resolve import check_embedder_name

        return check_embedder_name(value)

    @field_validator("short_term_strategy", "long_term_strategy")
    @classmethod
    def _strategy_json(cls, value: str | None, info: Any) -> str | None:
        # Loaded once here so bad JSON is reported against its variable, not deep inside.
        if value is not None:
            from memlane.strategies import load_long_term, load_short_term

            load = load_short_term if info.field_name == "short_term_strategy" else load_long_term
            try:
                load(value)
            except ValidationError as exc:
                raise ValueError(str(exc).replace("\n", " ")) from None
        return value

    @model_validator(mode="after")
    def _backend_needs(self) -> MemlaneSettings:
        if self.backend == "postgres" and not self.postgres_url:
            raise ValueError(
                f"{_variable('postgres_url')} must be set when {_variable('backend')}=postgres"
            )
        if self.backend == "mongodb" and not self.mongodb_url:
            raise ValueError(
                f"{_variable('mongodb_url')} must be set when {_variable('backend')}=mongodb"
            )
        if self.postgres_pool_min_size > self.postgres_pool_size:
            raise ValueError(
                f"{_variable('postgres_pool_min_size')} ({self.postgres_pool_min_size}) must not exceed "
                f"{_variable('postgres_pool_size')} ({self.postgres_pool_size})"
            )
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> MemlaneSettings:
        """Reads the environment (``overrides`` win over it).

        Raises:
            ValueError: An unknown backend, a missing URL, a non-integer or out-of-range
                number; the message names each offending variable.
        """
        try:
            return cls(**overrides)
        except ValidationError as exc:
            problems = []
            for error in exc.errors(include_url=False):
                field = str(error["loc"][0]) if error["loc"] else ""
                message = error["msg"].removeprefix("Value error, ")
                if field:
                    problems.append(f"{_variable(field)}={error.get('input')!r}: {message}")
                else:
                    problems.append(message)
            raise ValueError("invalid memlane configuration: " + "; ".join(problems)) from None


def create_store(settings: MemlaneSettings, *, read_only: bool = False) -> MemoryStore:
    """The store ``settings`` describe, not yet connected.

    A function rather than an ``X.from_config``: the class it returns is what the settings
    choose (``FileStore``, ``SQLiteStore``...), and their common type, :class:`MemoryStore`,
    is a protocol, where a class method would become a member every store must define.
    :meth:`MemoryManager.from_config <memlane.MemoryManager.from_config>` builds on it.

    Args:
        settings: The configuration.
        read_only: Open an existing store for reading only: nothing is created in it, and
            every write raises :class:`~memlane.errors.ReadOnlyStoreError`.

    Raises:
        ImportError: The backend's optional driver is missing (the message names the extra).
        NotAStoreError: ``read_only`` and the file or directory is not a memlane store (a
            database store says so on first use).
    """
    if settings.backend == "file":
        return FileStore(settings.file_dir, read_only=read_only)
    if settings.backend == "sqlite":
        return SQLiteStore(settings.sqlite_path, read_only=read_only)
    if settings.backend == "postgres":
        assert settings.postgres_url is not None  # checked by the model validator
        return PostgreSQLStore(
            settings.postgres_url,
            pool_size=settings.postgres_pool_size,
            pool_min_size=settings.postgres_pool_min_size,
            schema_name=settings.postgres_schema,
            read_only=read_only,
        )
    if settings.backend == "mongodb":
        assert settings.mongodb_url is not None  # checked by the model validator
        return MongoDBStore(
            settings.mongodb_url,
            database=settings.mongodb_database,
            collection=settings.mongodb_collection,
            pool_size=settings.mongodb_pool_size,
            read_only=read_only,
        )
    return InMemoryStore(read_only=read_only)
