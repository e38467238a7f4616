"""Typed store operations: each runs its store method on either path, and the runner runs them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memlane import _backend
from memlane._runner import (
    CleanupExpired,
    Clear,
    Delete,
    DeleteMany,
    Done,
    Gather,
    Load,
    LoadByKey,
    LoadRange,
    Namespaces,
    Plan,
    Save,
    SaveIf,
    SaveMany,
    Search,
    StoreOp,
    Summarize,
    Then,
    run_async,
    run_sync,
)
from memlane.stores import InMemoryStore, SQLiteStore
from memlane.stores.protocol import SEARCH_TEXT, ConditionalStore
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope


def entry(key: str | None, content: str, text: str | None = None) -> MemoryEntry:
    metadata = {} if text is None else {SEARCH_TEXT: text}
    return MemoryEntry(scope=MemoryScope.WORKING, key=key, content=content, metadata=metadata)


@pytest.fixture(params=["memory", "sqlite"])
def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> Iterator[Any]:
    """An empty store of each kind on each implementation."""
    made: Any = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "m.db")
    with made:
        yield made


class LegacyStore:
    """A store written before save_many, save_if and load_range: only the core methods."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def save(self, namespace: str, e: MemoryEntry) -> None:
        self.inner.save(namespace, e)

    def load(self, namespace: str) -> list[MemoryEntry]:
        return self.inner.load(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.inner.load_by_key(namespace, key)

    async def async_save(self, namespace: str, e: MemoryEntry) -> None:
        self.inner.save(namespace, e)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        return self.inner.load(namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.inner.load_by_key(namespace, key)


def every_operation(first: MemoryEntry) -> Plan[list[Any]]:
    """One of each operation, in an order whose results are known."""
    got: list[Any] = []
    got.append((yield Save("ns", first)))
    got.append((yield SaveMany("ns", [entry("b", "2"), entry("c", "3", "blue whale")])))
    got.append([e.content for e in (yield Load("ns"))])
    got.append((yield Then(LoadByKey("ns", "b"), lambda found: found and found.content)))
    got.append((yield SaveIf("ns", entry("b", "2x"), None)))
    got.append((yield SaveIf("ns", entry("d", "4"), None)))
    got.append([e.key for e in (yield LoadRange("ns", "b", "d"))])
    got.append([hit.entry.key for hit in (yield Search(["ns"], "whale", limit=5))])
    got.append((yield Namespaces()))
    got.append((yield Delete("ns", first.entry_id)))
    got.append((yield DeleteMany("ns", ["nope"])))
    got.append((yield CleanupExpired()))
    got.append((yield Clear("ns")))
    return got


EXPECTED = [
    None,
    None,
    ["1", "2", "3"],
    "2",
    False,
    True,
    ["b", "c"],
    ["c"],
    ["ns"],
    True,
    [],
    0,
    3,
]


class TestEachOperationRunsItsMethod:
    """Every operation gives the result of its store method, blocking and awaited alike."""

    def test_sync(self, store: Any) -> None:
        assert run_sync(every_operation(entry("a", "1")), store) == EXPECTED

    async def test_async(self, store: Any) -> None:
        assert await run_async(every_operation(entry("a", "1")), store) == EXPECTED

    def test_an_operation_is_a_whole_plan(self, store: Any) -> None:
        run_sync(Save("ns", entry("a", "1")), store)
        assert run_sync(Then(Load("ns"), len), store) == 1
        assert run_sync(Done(7), store) == 7

    async def test_an_operation_is_a_whole_plan_awaited(self, store: Any) -> None:
        await run_async(Save("ns", entry("a", "1")), store)
        assert await run_async(Then(Load("ns"), len), store) == 1


class TestOperationsAreValues:
    """An operation is a frozen, slotted value carrying its arguments."""

    def test_frozen(self) -> None:
        op = LoadByKey("ns", "k")
        with pytest.raises(dataclasses.FrozenInstanceError):
            op.key = "other"  # type: ignore[misc]  # the assignment the test expects to fail
        assert op == LoadByKey("ns", "k")
        assert not hasattr(op, "__dict__")

    def test_every_store_method_has_one(self) -> None:
        methods = {
            "save",
            "save_many",
            "load",
            "load_by_key",
            "delete",
            "delete_many",
            "clear",
            "namespaces",
            "cleanup_expired",
            "save_if",
            "load_range",
            "search",
        }
        ops = [Save, SaveMany, Load, LoadByKey, Delete, DeleteMany, Clear, Namespaces]
        ops += [CleanupExpired, SaveIf, LoadRange, Search]
        assert all(issubclass(op, StoreOp) for op in ops)
        named = {
            "".join("_" + c.lower() if c.isupper() else c for c in op.__name__)[1:] for op in ops
        }
        assert named == methods

    def test_a_failure_is_thrown_into_the_plan(self) -> None:
        def plan() -> Plan[str]:
            try:
                yield Load("")
            except ValueError as exc:
                return f"caught {type(exc).__name__}"
            return "not caught"

        assert run_sync(plan(), InMemoryStore()) == "caught ValueError"


class TestStoresWithoutTheOptionalMethods:
    """save_many, save_if and load_range work on a store that lacks them (one process)."""

    def plan(self) -> Plan[list[Any]]:
        got: list[Any] = []
        yield SaveMany("ns", [entry("a", "1"), entry("b", "2")])
        got.append((yield SaveIf("ns", entry("a", "1x"), None)))  # held: loses
        got.append((yield SaveIf("ns", entry("a", "1y"), 0)))  # held at 0: wins
        got.append((yield SaveIf("ns", entry("z", "26"), None)))  # free: wins
        got.append([e.key for e in (yield LoadRange("ns", "a", "c"))])
        got.append((yield Then(LoadByKey("ns", "a"), lambda e: e and e.content)))
        return got

    def test_sync(self) -> None:
        legacy = LegacyStore()
        assert not isinstance(legacy, ConditionalStore)
        assert run_sync(self.plan(), legacy) == [False, True, True, ["a", "b"], "1y"]

    async def test_async(self) -> None:
        assert await run_async(self.plan(), LegacyStore()) == [False, True, True, ["a", "b"], "1y"]

    def test_save_if_needs_a_key(self) -> None:
        with pytest.raises(TypeError, match="key"):
            run_sync(SaveIf("ns", entry(None, "x"), None), LegacyStore())


class TestRunnerCollaborators:
    """The summarizer is the runner's argument; Gather runs several plans."""

    TURN = ConversationTurn(turn_id=1, user_prompt="hi", assistant_response="hello")

    def summarize(self) -> Plan[str]:
        text: str = yield Summarize([self.TURN])
        return text

    def test_the_summarizer_given(self) -> None:
        def summarizer(turns: list[ConversationTurn]) -> str:
            return f"{len(turns)} turn"

        assert run_sync(self.summarize(), None, summarizer) == "1 turn"

    async def test_an_async_summarizer_awaited(self) -> None:
        async def summarizer(turns: list[ConversationTurn]) -> str:
            return f"{len(turns)} turns"

        assert await run_async(self.summarize(), None, summarizer) == "1 turns"

    def test_no_summarizer_says_so(self) -> None:
        with pytest.raises(RuntimeError, match="no summarizer"):
            run_sync(self.summarize(), None)

    def gathered(self) -> Plan[list[Any]]:
        results: list[Any] = yield Gather([Then(Load("a"), len), Then(Load("b"), len)])
        return results

    def test_gather(self) -> None:
        store = InMemoryStore()
        store.save("b", entry("k", "v"))
        assert run_sync(self.gathered(), store) == [0, 1]

    async def test_gather_awaited(self) -> None:
        store = InMemoryStore()
        store.save("b", entry("k", "v"))
        assert await run_async(self.gathered(), store) == [0, 1]
