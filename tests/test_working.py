"""WorkingMemory and MemoryManager: scoped facts, TTL, importance, forks."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import FileStore, InMemoryStore, MemoryManager, SQLiteStore, WorkingMemory


@pytest.fixture(params=["memory", "sqlite", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Each embedded store."""
    if request.param == "memory":
        return InMemoryStore()
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "m.db")
    return FileStore(tmp_path / "files")


# Every test here runs on both implementations (the store tables are Rust or their twins).
pytestmark = pytest.mark.usefixtures("impl")


class TestScratchpad:
    """set/get/has/delete/keys/items/to_dict/to_context_string/clear behave like a dict of facts."""

    def test_basic_operations(self, store: Any) -> None:
        wm = WorkingMemory(store=store)
        assert wm.namespace == "working:default"
        assert wm.to_context_string() == ""
        wm.set("user", "Ada")
        wm.set("plan", ["a", "b"], importance=0.9)
        wm.set("user", "Grace")
        assert wm.get("user") == "Grace"
        assert wm.get("missing", "dflt") == "dflt"
        assert wm.has("plan")
        assert not wm.has("missing")
        assert wm.keys() == ["plan", "user"]
        assert wm.items() == [("plan", ["a", "b"]), ("user", "Grace")]
        assert wm.to_dict() == {"plan": ["a", "b"], "user": "Grace"}
        assert wm.to_context_string() == "Working Memory:\n- plan: ['a', 'b']\n- user: Grace"
        entry = wm.get_entry("plan")
        assert entry is not None
        assert entry.importance == 0.9
        assert wm.delete("plan") is True
        assert wm.delete("plan") is False
        assert wm.clear() == 1
        assert wm.to_dict() == {}

    def test_ttl(self, store: Any) -> None:
        wm = WorkingMemory(store=store)
        wm.set("short", 1, ttl=0.5)
        wm.set("long", 2, ttl=timedelta(hours=1))
        assert wm.has("short")
        time.sleep(0.6)
        assert not wm.has("short")
        assert wm.to_dict() == {"long": 2}

    def test_scopes_share_a_store_without_seeing_each_other(self, store: Any) -> None:
        a = WorkingMemory(store=store, scope_id="a")
        b = WorkingMemory(store=store, scope_id="b")
        a.set("k", "from a")
        b.set("k", "from b")
        assert (a.get("k"), b.get("k")) == ("from a", "from b")
        a.clear()
        assert b.get("k") == "from b"

    def test_concurrent_set_leaves_one_value(self, store: Any) -> None:
        wm = WorkingMemory(store=store)

        def writer(n: int) -> None:
            for i in range(15):
                wm.set("k", n * 100 + i)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wm.keys() == ["k"]
        assert len(store.load(wm.namespace)) == 1

    async def test_async(self, store: Any) -> None:
        wm = WorkingMemory(store=store)
        await wm.async_set("k", "v")
        assert await wm.async_get("k") == "v"
        assert await wm.async_delete("k")
        assert await wm.async_get("k", 0) == 0


class TestBadInput:
    """Invalid keys, importance and TTL raise precise errors and change nothing."""

    @pytest.mark.parametrize(
        ("kwargs", "exc", "msg"),
        [
            ({"importance": 1.5}, ValueError, "importance must be between 0.0 and 1.0, got 1.5"),
            ({"importance": -0.1}, ValueError, "importance must be between"),
            ({"importance": float("nan")}, ValueError, "importance must be between"),
            ({"importance": "high"}, TypeError, "importance must be a number, not str"),
            ({"ttl": 0}, ValueError, "ttl must be a positive finite duration, got 0"),
            ({"ttl": -1}, ValueError, "ttl must be a positive"),
            ({"ttl": "1h"}, TypeError, "ttl must be seconds"),
        ],
    )
    def test_set_arguments(self, kwargs: dict[str, Any], exc: type[Exception], msg: str) -> None:
        wm = WorkingMemory()
        wm.set("k", "original")
        with pytest.raises(exc, match=msg):
            wm.set("k", "new", **kwargs)
        assert wm.get("k") == "original"

    def test_non_string_key(self) -> None:
        wm = WorkingMemory()
        with pytest.raises(TypeError, match="key must be str, not int"):
            wm.set(1, "v")  # type: ignore[arg-type]  # the wrong type is the point
        with pytest.raises(TypeError, match="key must be str, not NoneType"):
            wm.get(None)  # type: ignore[arg-type]

    def test_unstorable_value_on_persistent_store(self, tmp_path: Path) -> None:
        wm = WorkingMemory(store=SQLiteStore(tmp_path / "m.db"))
        wm.set("k", "original")
        with pytest.raises(TypeError, match=r"'k'.*set"):
            wm.set("k", {1, 2})
        assert wm.get("k") == "original"


class TestMemoryManager:
    """The facade composes both memories over one store and forks independent scopes."""

    def test_defaults(self) -> None:
        m = MemoryManager()
        assert m.conversation.max_tokens == 128_000
        assert m.conversation.summarize_threshold == 3072  # min(3072, 3/4 of the budget)
        assert m.working.scope_id == "default"
        assert m.conversation.store is m.store
        assert m.working.store is m.store

    def test_facade(self, tmp_path: Path) -> None:
        m = MemoryManager(store=SQLiteStore(tmp_path / "m.db"), max_conversation_tokens=1000)
        cid = m.new_conversation()
        m.add_turn(cid, "hi", "hello")
        m.set_fact("name", "Ada", importance=1.0)
        assert m.get_fact("name") == "Ada"
        assert m.get_working_context() == "Working Memory:\n- name: Ada"
        assert len(m.get_message_history(cid)) == 2
        child = m.fork(working_scope_id="researcher")
        assert child.get_fact("name") is None
        child.set_fact("topic", "memory")
        assert m.get_fact("topic") is None
        assert child.get_message_history(cid) == m.get_message_history(cid)
        child.add_turn(cid, "more", "sure")
        assert len(m.get_message_history(cid)) == 4
        m.clear_conversation(cid)
        assert m.get_message_history(cid) == []
        m.clear_working()
        assert m.get_fact("name") is None
        assert child.get_fact("topic") == "memory"
        m.clear_all()
        assert m.conversation.conversation_ids == []

    @pytest.mark.parametrize("bad", ["sqlite", 3, object(), WorkingMemory()])
    def test_store_that_is_not_one_is_refused_at_construction(self, bad: object) -> None:
        with pytest.raises(
            TypeError, match=rf"store must be a MemoryStore .*not {type(bad).__name__}"
        ):
            MemoryManager(store=bad)  # type: ignore[arg-type]  # the wrong type is the point


class TestAsyncTwins:
    """Every working-memory and manager method has an async twin that sees the same facts."""

    async def test_async_methods_mirror_sync_ones(self, store: Any) -> None:
        wm = WorkingMemory(store=store, scope_id="twin")
        await wm.async_set("b", 2, importance=0.7)
        wm.set("a", [1])
        assert await wm.async_get("a") == [1]
        assert await wm.async_has("b")
        assert not await wm.async_has("zzz")
        entry = await wm.async_get_entry("b")
        assert entry is not None
        assert entry.importance == 0.7
        assert await wm.async_keys() == wm.keys() == ["b", "a"]
        assert await wm.async_items() == wm.items()
        assert await wm.async_to_dict() == {"b": 2, "a": [1]}
        assert await wm.async_to_context_string() == wm.to_context_string()
        assert [e.key for e in await wm.async_entries()] == ["b", "a"]
        assert await wm.async_delete("b") is True
        assert await wm.async_delete("b") is False
        assert await wm.async_clear() == 1
        assert len(wm) == 0

    async def test_manager_async_twins(self) -> None:
        m = MemoryManager()
        cid = await m.async_new_conversation()
        await m.async_add_turn(cid, "hi", "hello")
        assert len(await m.async_get_message_history(cid)) == 2
        await m.async_set_fact("tz", "UTC")
        assert await m.async_get_fact("tz") == "UTC"
        assert await m.async_get_working_context() == "Working Memory:\n- tz: UTC"
        await m.async_clear_working()
        assert await m.async_get_fact("tz") is None
        await m.async_clear_conversation(cid)
        assert m.get_message_history(cid) == []
        await m.async_add_turn(cid, "again", "ok")
        await m.async_set_fact("k", 1)
        await m.async_clear_all()
        assert m.conversation.conversation_ids == []
        assert m.get_fact("k") is None
