"""MemlaneSettings reads MEMLANE_* variables; MemoryManager.from_config / async_from_config build every backend."""

from __future__ import annotations

import re
import uuid
import warnings
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from db_servers import Server
from memlane import FileStore, InMemoryStore, MemoryManager, SQLiteStore
from memlane.config import MemlaneSettings, create_store
from memlane.stores import IndexFallbackWarning, MongoDBStore, PostgreSQLStore

FIELDS = list(MemlaneSettings.model_fields)
INT_VARIABLES = [
    "MEMLANE_MAX_CONVERSATION_TOKENS",
    "MEMLANE_SUMMARIZE_THRESHOLD",
    "MEMLANE_MAX_CACHED_CONVERSATIONS",
    "MEMLANE_POSTGRES_POOL_SIZE",
    "MEMLANE_POSTGRES_POOL_MIN_SIZE",
    "MEMLANE_MONGODB_POOL_SIZE",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No MEMLANE_* setting leaks in from the environment running the tests."""
    for field in FIELDS:
        monkeypatch.delenv(f"MEMLANE_{field.upper()}", raising=False)
    return monkeypatch


def unique_name() -> str:
    return f"cfg_{uuid.uuid4().hex[:12]}"


class TestDefaults:
    """Without variables the settings are the documented defaults and the backend is in memory."""

    def test_defaults(self) -> None:
        settings = MemlaneSettings.from_env()
        assert settings.model_dump() == {
            "backend": "in_memory",
            "max_conversation_tokens": 128_000,
            "summarize_threshold": None,
            "summarize_in_background": False,
            "max_cached_conversations": 10_000,
            "retain_transcript": True,
            "conversation_ttl": None,
            "short_term_strategy": None,
            "long_term_strategy": None,
            "embedder": None,
            "file_dir": ".memlane",
            "sqlite_path": ".memlane/memory.sqlite3",
            "postgres_url": None,
            "postgres_pool_size": 10,
            "postgres_pool_min_size": 2,
            "postgres_schema": "memlane",
            "mongodb_url": None,
            "mongodb_database": "memlane",
            "mongodb_collection": "entries",
            "mongodb_pool_size": 10,
        }

    def test_manager_defaults(self) -> None:
        manager = MemoryManager.from_config()
        assert isinstance(manager.store, InMemoryStore)
        assert manager.conversation.max_tokens == 128_000
        assert manager.conversation.summarize_threshold == 3072  # min(3072, 3/4 of the budget)


class TestVariablesAreRead:
    """Every MEMLANE_* variable reaches its setting, and the backend name is case-insensitive."""

    def test_every_variable(self, clean_env: pytest.MonkeyPatch) -> None:
        values = {
            "MEMLANE_BACKEND": " Postgres ",
            "MEMLANE_MAX_CONVERSATION_TOKENS": "4096",
            "MEMLANE_SUMMARIZE_THRESHOLD": "3000",
            "MEMLANE_SUMMARIZE_IN_BACKGROUND": "true",
            "MEMLANE_MAX_CACHED_CONVERSATIONS": "500",
            "MEMLANE_FILE_DIR": "/data/files",
            "MEMLANE_SQLITE_PATH": "/data/db.sqlite3",
            "MEMLANE_POSTGRES_URL": "postgresql://u:p@db:5433/app",
            "MEMLANE_POSTGRES_POOL_SIZE": "20",
            "MEMLANE_POSTGRES_POOL_MIN_SIZE": "5",
            "MEMLANE_POSTGRES_SCHEMA": "agents",
            "MEMLANE_MONGODB_URL": "mongodb://mongo:27018/",
            "MEMLANE_MONGODB_DATABASE": "agents",
            "MEMLANE_MONGODB_COLLECTION": "memories",
            "MEMLANE_MONGODB_POOL_SIZE": "7",
        }
        for name, value in values.items():
            clean_env.setenv(name, value)
        settings = MemlaneSettings.from_env()
        assert settings.backend == "postgres"
        assert (settings.max_conversation_tokens, settings.summarize_threshold) == (4096, 3000)
        assert (settings.summarize_in_background, settings.max_cached_conversations) == (True, 500)
        assert (settings.file_dir, settings.sqlite_path) == ("/data/files", "/data/db.sqlite3")
        assert settings.postgres_url == "postgresql://u:p@db:5433/app"
        assert (settings.postgres_pool_size, settings.postgres_pool_min_size) == (20, 5)
        assert settings.postgres_schema == "agents"
        assert settings.mongodb_url == "mongodb://mongo:27018/"
        assert (settings.mongodb_database, settings.mongodb_collection) == ("agents", "memories")
        assert settings.mongodb_pool_size == 7

    def test_stores_get_the_settings(self, clean_env: pytest.MonkeyPatch) -> None:
        clean_env.setenv("MEMLANE_BACKEND", "postgres")
        clean_env.setenv("MEMLANE_POSTGRES_URL", "postgresql://u@db:5433/app")
        clean_env.setenv("MEMLANE_POSTGRES_POOL_SIZE", "20")
        clean_env.setenv("MEMLANE_POSTGRES_POOL_MIN_SIZE", "5")
        clean_env.setenv("MEMLANE_POSTGRES_SCHEMA", "agents")
        pg = create_store(MemlaneSettings.from_env())
        assert isinstance(pg, PostgreSQLStore)
        assert (pg.pool_size, pg.pool_min_size, pg.schema_name, pg.address) == (
            20,
            5,
            "agents",
            "db:5433",
        )
        clean_env.setenv("MEMLANE_BACKEND", "mongodb")
        clean_env.setenv("MEMLANE_MONGODB_URL", "mongodb://mongo:27018/")
        clean_env.setenv("MEMLANE_MONGODB_DATABASE", "agents")
        clean_env.setenv("MEMLANE_MONGODB_COLLECTION", "memories")
        clean_env.setenv("MEMLANE_MONGODB_POOL_SIZE", "7")
        mongo = create_store(MemlaneSettings.from_env())
        assert isinstance(mongo, MongoDBStore)
        assert (mongo.database, mongo.collection, mongo.pool_size, mongo.address) == (
            "agents",
            "memories",
            7,
            "mongo:27018",
        )

    def test_explicit_settings_and_overrides(self, tmp_path: Path) -> None:
        settings = MemlaneSettings.from_env(
            backend="sqlite", sqlite_path=str(tmp_path / "m.db"), summarize_threshold=50
        )
        manager = MemoryManager.from_config(
            settings, working_scope_id="planner", max_conversation_tokens=999
        )
        assert isinstance(manager.store, SQLiteStore)
        assert manager.working.scope_id == "planner"
        assert manager.conversation.max_tokens == 999
        assert manager.conversation.summarize_threshold == 50
        manager.store.close()


class TestErrorsNameTheVariable:
    """A missing URL, an unknown backend or a bad number raises ValueError naming the variable."""

    @pytest.mark.parametrize(
        ("variables", "named"),
        [
            ({"MEMLANE_BACKEND": "redis"}, "MEMLANE_BACKEND"),
            ({"MEMLANE_BACKEND": "postgres"}, "MEMLANE_POSTGRES_URL"),
            ({"MEMLANE_BACKEND": "postgres", "MEMLANE_POSTGRES_URL": ""}, "MEMLANE_POSTGRES_URL"),
            ({"MEMLANE_BACKEND": "mongodb"}, "MEMLANE_MONGODB_URL"),
            ({"MEMLANE_POSTGRES_SCHEMA": "x; DROP TABLE t"}, "MEMLANE_POSTGRES_SCHEMA"),
            ({"MEMLANE_MONGODB_COLLECTION": "$cmd"}, "MEMLANE_MONGODB_COLLECTION"),
            (
                {"MEMLANE_POSTGRES_POOL_SIZE": "2", "MEMLANE_POSTGRES_POOL_MIN_SIZE": "3"},
                "MEMLANE_POSTGRES_POOL_MIN_SIZE",
            ),
        ],
    )
    def test_configuration_errors(
        self, clean_env: pytest.MonkeyPatch, variables: dict[str, str], named: str
    ) -> None:
        for name, value in variables.items():
            clean_env.setenv(name, value)
        with pytest.raises(ValueError, match=named):
            MemoryManager.from_config()

    @pytest.mark.parametrize("variable", INT_VARIABLES)
    @pytest.mark.parametrize("value", ["many", "1.5", "", "0x10"])
    def test_non_integer_numbers(
        self, clean_env: pytest.MonkeyPatch, variable: str, value: str
    ) -> None:
        clean_env.setenv(variable, value)
        with pytest.raises(ValueError, match=variable):
            MemlaneSettings.from_env()

    @pytest.mark.parametrize(
        "variable",
        [
            "MEMLANE_MAX_CONVERSATION_TOKENS",
            "MEMLANE_SUMMARIZE_THRESHOLD",
            "MEMLANE_POSTGRES_POOL_SIZE",
        ],
    )
    def test_out_of_range_numbers(self, clean_env: pytest.MonkeyPatch, variable: str) -> None:
        clean_env.setenv(variable, "0")
        with pytest.raises(ValueError, match=variable):
            MemlaneSettings.from_env()

    async def test_async_twin_raises_the_same(self, clean_env: pytest.MonkeyPatch) -> None:
        clean_env.setenv("MEMLANE_BACKEND", "mongodb")
        with pytest.raises(ValueError, match="MEMLANE_MONGODB_URL"):
            await MemoryManager.async_from_config()


class TestEmbeddedBackends:
    """file and sqlite backends are built at the configured paths and persist across managers."""

    def test_file(self, clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
        clean_env.setenv("MEMLANE_BACKEND", "file")
        clean_env.setenv("MEMLANE_FILE_DIR", str(tmp_path / "files"))
        manager = MemoryManager.from_config()
        assert isinstance(manager.store, FileStore)
        manager.set_fact("city", "Oslo")
        assert MemoryManager.from_config().get_fact("city") == "Oslo"
        assert (tmp_path / "files").is_dir()

    def test_sqlite(self, clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
        clean_env.setenv("MEMLANE_BACKEND", "sqlite")
        clean_env.setenv("MEMLANE_SQLITE_PATH", str(tmp_path / "db" / "m.sqlite3"))
        first = MemoryManager.from_config()
        cid = first.new_conversation()
        first.add_turn(cid, "hi", "hello")
        second = MemoryManager.from_config()
        assert second.get_message_history(cid) == first.get_message_history(cid)
        assert isinstance(first.store, SQLiteStore)
        assert isinstance(second.store, SQLiteStore)
        first.store.close()
        second.store.close()

    async def test_async_in_memory(self) -> None:
        manager = await MemoryManager.async_from_config()
        assert isinstance(manager.store, InMemoryStore)


async def drop_schema(url: str, schema: str) -> None:
    con = await asyncpg.connect(url)
    try:
        await con.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await con.close()


SCHEMA_TABLES = ["entry_vectors", "memory_entries", "vector_models"]
"""What initialising a PostgreSQLStore creates in its schema: the entries, their vectors and
the models those were made with."""


async def schema_tables(url: str, schema: str) -> list[str]:
    con = await asyncpg.connect(url)
    try:
        rows = await con.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    finally:
        await con.close()
    return sorted(r[0] for r in rows)


async def drop_collection(url: str, name: str) -> list[str]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        indexes = list(await client["memlane"][name].index_information())
        await client["memlane"].drop_collection(name)
    finally:
        await client.close()
    return indexes


class TestDatabaseBackends:
    """postgres and mongodb backends come back connected and migrated, sync and async."""

    async def test_postgres_sync(
        self, clean_env: pytest.MonkeyPatch, postgres_server: Server
    ) -> None:
        schema = unique_name()
        clean_env.setenv("MEMLANE_BACKEND", "postgres")
        clean_env.setenv("MEMLANE_POSTGRES_URL", postgres_server.url)
        clean_env.setenv("MEMLANE_POSTGRES_SCHEMA", schema)
        clean_env.setenv("MEMLANE_POSTGRES_POOL_MIN_SIZE", "1")
        manager = MemoryManager.from_config()
        try:
            assert isinstance(manager.store, PostgreSQLStore)
            assert await schema_tables(postgres_server.url, schema) == SCHEMA_TABLES
            manager.set_fact("k", [1, 2])
            assert manager.get_fact("k") == [1, 2]
        finally:
            assert isinstance(manager.store, PostgreSQLStore | MongoDBStore)
            await manager.store.async_close()
            await drop_schema(postgres_server.url, schema)

    async def test_postgres_async(
        self, clean_env: pytest.MonkeyPatch, postgres_server: Server
    ) -> None:
        schema = unique_name()
        clean_env.setenv("MEMLANE_BACKEND", "postgres")
        clean_env.setenv("MEMLANE_POSTGRES_URL", postgres_server.url)
        clean_env.setenv("MEMLANE_POSTGRES_SCHEMA", schema)
        manager = await MemoryManager.async_from_config()
        try:
            assert await schema_tables(postgres_server.url, schema) == SCHEMA_TABLES
            cid = await manager.conversation.async_new_conversation()
            await manager.async_add_turn(cid, "q", "a")
            assert len(await manager.async_get_message_history(cid)) == 2
        finally:
            assert isinstance(manager.store, PostgreSQLStore | MongoDBStore)
            await manager.store.async_close()
            await drop_schema(postgres_server.url, schema)

    @pytest.mark.parametrize("use_async", [False, True])
    async def test_mongodb(
        self, clean_env: pytest.MonkeyPatch, mongodb_server: Server, use_async: bool
    ) -> None:
        name = unique_name()
        clean_env.setenv("MEMLANE_BACKEND", "mongodb")
        clean_env.setenv("MEMLANE_MONGODB_URL", mongodb_server.url)
        clean_env.setenv("MEMLANE_MONGODB_COLLECTION", name)
        clean_env.setenv("MEMLANE_MONGODB_POOL_SIZE", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IndexFallbackWarning)
            manager = (
                await MemoryManager.async_from_config()
                if use_async
                else MemoryManager.from_config()
            )
        try:
            assert isinstance(manager.store, MongoDBStore)
            await manager.working.async_set("k", {"$v": 1})
            assert await manager.working.async_get("k") == {"$v": 1}
        finally:
            assert isinstance(manager.store, PostgreSQLStore | MongoDBStore)
            await manager.store.async_close()
            indexes = await drop_collection(mongodb_server.url, name)
        assert {"entry_id_unique", "namespace_seq", "namespace_key", "expires_at"} <= set(indexes)

    def test_unreachable_database_is_a_connection_error(
        self, clean_env: pytest.MonkeyPatch
    ) -> None:
        clean_env.setenv("MEMLANE_BACKEND", "postgres")
        clean_env.setenv("MEMLANE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:9/x")
        with pytest.raises(ConnectionError, match=re.escape("127.0.0.1:9")):
            MemoryManager.from_config()


def test_from_config_passes_the_fleet_settings(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MEMLANE_BACKEND", "sqlite")
    clean_env.setenv("MEMLANE_SQLITE_PATH", str(tmp_path / "m.db"))
    clean_env.setenv("MEMLANE_SUMMARIZE_IN_BACKGROUND", "1")
    clean_env.setenv("MEMLANE_MAX_CACHED_CONVERSATIONS", "3")
    manager = MemoryManager.from_config()
    try:
        assert manager.conversation.summarize_in_background is True
        assert manager.conversation.max_cached_conversations == 3
    finally:
        manager.close()


class TestEmbedder:
    """MEMLANE_EMBEDDER gives the manager's long-term memory an embedder; a bad one is named."""

    def test_local(self, clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
        clean_env.setenv("MEMLANE_EMBEDDER", "local")
        clean_env.setenv("MEMLANE_BACKEND", "file")
        clean_env.setenv("MEMLANE_FILE_DIR", str(tmp_path / "m"))
        manager = MemoryManager.from_config()
        try:
            long_term = manager.long_term
            assert long_term is not None
            assert long_term.embedding_model == "wordllama:l2_supercat"
            long_term.remember("coffee_order", "Ada drinks coffee black, no sugar")
            manager.flush()
            assert [f.key for f in long_term.search("her hot drink", mode="semantic")] == [
                "coffee_order"
            ]
        finally:
            manager.close()

    async def test_a_model_name_async(self, clean_env: pytest.MonkeyPatch) -> None:
        clean_env.setenv("MEMLANE_EMBEDDER", " openai:text-embedding-3-small ")
        assert MemlaneSettings.from_env().embedder == "openai:text-embedding-3-small"
        manager = await MemoryManager.async_from_config()
        try:
            assert manager.long_term is not None
            assert manager.long_term.embedding_model == "openai:text-embedding-3-small"
        finally:
            await manager.async_close()

    def test_unset_means_no_embedder(self) -> None:
        manager = MemoryManager.from_config(long_term=True)
        assert manager.long_term is not None
        assert manager.long_term.embedder is None

    @pytest.mark.parametrize(
        ("value", "problem"),
        [
            ("nosuchprovider:model", "no embedding model for"),
            ("text-embedding-3-small", "provider:model"),
            ("", "non-empty"),
        ],
    )
    def test_a_bad_value_names_the_variable(
        self, clean_env: pytest.MonkeyPatch, value: str, problem: str
    ) -> None:
        clean_env.setenv("MEMLANE_EMBEDDER", value)
        with pytest.raises(ValueError, match=rf"MEMLANE_EMBEDDER={value!r}: .*{problem}"):
            MemoryManager.from_config()


class TestManagerEmbedder:
    """MemoryManager(embedder=...) turns long-term memory on with it; flush waits for it."""

    def test_turns_long_term_memory_on(self) -> None:
        manager = MemoryManager(embedder="local")
        assert manager.long_term is not None
        manager.long_term.remember("coffee_order", "Ada drinks coffee black, no sugar")
        manager.flush()
        found = manager.long_term.search("how does she take her hot drink", mode="semantic")
        assert [f.key for f in found] == ["coffee_order"]
        manager.close()

    async def test_async_flush(self) -> None:
        manager = MemoryManager(long_term=True, embedder="local")
        assert manager.long_term is not None
        await manager.long_term.async_remember("pet", "a grey cat called Turing")
        await manager.async_flush()
        assert manager.long_term.search("kitten", mode="semantic")[0].key == "pet"
        await manager.async_close()

    def test_a_ready_memory_keeps_its_own(self) -> None:
        from memlane.longterm import LongTermMemory

        manager = MemoryManager(long_term=LongTermMemory(), embedder="local")
        assert manager.long_term is not None
        assert manager.long_term.embedder is None
        assert manager.conversation.embedder is not None  # the conversations' transcripts

    def test_past_conversations_by_meaning(self) -> None:
        manager = MemoryManager(embedder="local")
        manager.add_turn("c1", "My cat Turing knocked a cup off the desk", "Oh no!")
        manager.add_turn("c2", "Book a table for two on Friday", "Done.")
        manager.flush()
        found = manager.search_transcripts("what did my kitten break?", limit=1)
        assert "Turing" in str(found[0])
        manager.close()

    @pytest.mark.parametrize("bad", [42, "nosuchprovider:x"])
    def test_a_bad_embedder_is_named(self, bad: object) -> None:
        with pytest.raises((TypeError, ValueError), match=r"^embedder"):
            MemoryManager(embedder=bad)  # type: ignore[arg-type]  # what a caller might pass
