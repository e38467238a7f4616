"""Facts read through the decode cache and the in-memory direct path give what the long way
gave: equal facts and records, never a fact sharing stored state, today's error for a corrupt
stored fact, and a cached fact never outliving the stored version it came from."""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane import CorruptStoreError
from memlane._locks import HybridLock
from memlane._runner import Done, Load, Plan, run_now
from memlane.longterm import LongTermMemory
from memlane.longterm.fact_model import Fact, FactRevision, FactScope, FactType
from memlane.longterm.fact_plans import fact_entry, fact_json
from memlane.longterm.fact_reads import copy_fact, inline_store
from memlane.longterm.fact_scopes import fact_namespace, visible_namespaces
from memlane.stores import InMemoryStore, SQLiteStore
from memlane.types import MemoryEntry, MemoryScope
from store_kinds import STORES, Made, open_store

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
# hypothesis takes naive bounds and attaches the zone itself.
_MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001  # naive by hypothesis's rule
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001  # naive by hypothesis's rule
    timezones=st.just(UTC),
)


class _Runner(InMemoryStore):
    """An in-memory store the direct path does not take: its plans go through the runner."""


@pytest.fixture(params=STORES)
async def made(request: pytest.FixtureRequest, impl: Any, tmp_path: Path) -> AsyncIterator[Made]:
    """Each store kind, built by ``impl``."""
    async for one in open_store(request.param, request, tmp_path, "reads"):
        yield one


async def _call(way: str, memory: LongTermMemory, name: str, *args: Any, **kwargs: Any) -> Any:
    if way == "sync":
        return getattr(memory, name)(*args, **kwargs)
    return await getattr(memory, "async_" + name)(*args, **kwargs)


class TestFactJson:
    """The stored form is built field by field; it must be pydantic's JSON dump exactly."""

    @given(
        value=_JSON,
        created=_MOMENTS,
        updated=_MOMENTS,
        history=st.lists(st.tuples(_JSON, _MOMENTS), max_size=3),
        confidence=st.floats(0.0, 1.0),
        scope=st.sampled_from(list(FactScope)),
        kind=st.sampled_from(list(FactType)),
        counts=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)),
    )
    @settings(max_examples=200)
    def test_equals_model_dump(
        self,
        value: Any,
        created: datetime,
        updated: datetime,
        history: list[tuple[Any, datetime]],
        confidence: float,
        scope: FactScope,
        kind: FactType,
        counts: tuple[int, int],
    ) -> None:
        fact = Fact(
            key="k",
            value=value,
            fact_type=kind,
            scope=scope,
            scope_id=None if scope is FactScope.GLOBAL else "s1",
            confidence=confidence,
            times_confirmed=counts[0],
            times_contradicted=counts[1],
            created_at=created,
            updated_at=updated,
            history=[FactRevision(value=v, replaced_at=at) for v, at in history],
        )
        built = fact_json(fact)
        dumped = fact.model_dump(mode="json")
        assert built == dumped
        assert list(built) == list(dumped)
        assert json.dumps(built) == json.dumps(dumped)

    def test_other_offsets_take_pydantic(self) -> None:
        moment = datetime(2024, 5, 1, 12, tzinfo=UTC).astimezone(
            timezone(timedelta(hours=9, minutes=30))
        )
        fact = Fact.model_construct(key="k", created_at=moment, updated_at=moment)
        assert fact_json(fact)["created_at"] == fact.model_dump(mode="json")["created_at"]

    def test_shares_nothing_with_the_fact(self) -> None:
        fact = Fact(key="k", value={"a": [1]}, history=[FactRevision(value=[2])])
        built = fact_json(fact)
        built["value"]["a"].append(3)
        built["history"][0]["value"].append(4)
        assert fact.value == {"a": [1]}
        assert fact.history[0].value == [2]


class TestCopies:
    """What a caller is handed is never what is stored or cached."""

    async def test_changing_a_read_fact_changes_nothing_stored(self, made: Made, way: str) -> None:
        memory = LongTermMemory(made.store)
        await _call(way, memory, "remember", "langs", ["python"], scope="user", scope_id="u")
        result = await _call(
            way, memory, "remember", "langs", ["rust", {"x": [1]}], scope="user", scope_id="u"
        )
        assert result.status == "updated"
        for _ in range(2):  # the second read is a cache hit where there is a cache
            fact = await _call(way, memory, "get_fact", "langs", user_id="u")
            assert fact.value == ["rust", {"x": [1]}]
            assert [r.value for r in fact.history] == [["python"]]
            fact.value.append("go")
            fact.value[1]["x"].append(2)
            fact.history[0].value.append("perl")
            fact.history.append(FactRevision(value="x"))
            fact.confidence = 0.1
        result.fact.value.append("c")
        again = await _call(way, memory, "get_fact", "langs", user_id="u")
        assert again.value == ["rust", {"x": [1]}]
        assert [r.value for r in again.history] == [["python"]]
        assert again.confidence == 0.8
        listed = await _call(way, memory, "facts", scope="user", scope_id="u")
        assert [f.value for f in listed] == [["rust", {"x": [1]}]]
        listed[0].value[1]["x"].append(5)
        recalled = await _call(way, memory, "recall", "langs", user_id="u")
        assert [f.value for f in recalled] == [["rust", {"x": [1]}]]
        recalled[0].value.clear()
        assert (await _call(way, memory, "get_fact", "langs", user_id="u")).value == [
            "rust",
            {"x": [1]},
        ]

    def test_copy_fact_is_equal_and_separate(self) -> None:
        fact = Fact(key="k", value={"a": 1}, history=[FactRevision(value={"b": [1]})])
        copied = copy_fact(fact)
        assert copied == fact
        assert copied.model_fields_set == fact.model_fields_set
        assert copied.value is not fact.value
        assert copied.history is not fact.history
        assert copied.history[0] is not fact.history[0]
        assert copied.history[0].value is not fact.history[0].value


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _records(store: InMemoryStore) -> list[tuple[str, str | None, dict[str, Any], Any, int]]:
    """Every stored fact, without what differs between two runs (ids and clock times)."""
    out = []
    for name in store.namespaces():
        for entry in store.load(name):
            content = dict(entry.content)
            for moment in ("created_at", "updated_at"):
                content.pop(moment)
            content["history"] = [r["value"] for r in content["history"]]
            out.append((name, entry.key, content, entry.metadata, entry.version))
    return out


def _result_of(result: Any) -> Any:
    if result is None or isinstance(result, bool):
        return result
    fact = result.fact if hasattr(result, "status") else result
    shown = fact.model_dump(exclude={"created_at", "updated_at"})
    shown["history"] = [r["value"] for r in shown["history"]]
    return (getattr(result, "status", None), shown)


class TestDirectPathIsTheRunnersPath:
    """In process memory remember and get_fact run their plans without the runner; a store
    the direct path does not take runs the same plans through it: the same answers and the
    same records, step by step."""

    async def test_same_results_and_records(self, impl: Any, way: str) -> None:
        direct, runner = InMemoryStore(), _Runner()
        assert inline_store(direct)
        assert not inline_store(runner)
        memories = [LongTermMemory(direct), LongTermMemory(runner)]
        steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("remember", ("color", "blue"), {}),
            ("remember", ("color", "blue"), {"confidence": 0.9}),
            ("remember", ("color", "green"), {"confidence": 0.4}),
            ("remember", ("color", "red"), {"overwrite": False}),
            ("remember", ("tz", "Perth"), {"scope": "user", "scope_id": "u1"}),
            (
                "remember",
                ("tone", "formal"),
                {"scope": "user", "scope_id": "u1", "fact_type": "user_preference"},
            ),
            (
                "remember",
                ("tone", "casual"),
                {"scope": "user", "scope_id": "u1", "fact_type": "user_preference"},
            ),
            (
                "remember",
                ("tz", {"city": "Perth", "utc": [8]}),
                {"scope": "session", "scope_id": "s"},
            ),
            ("get_fact", ("tz",), {"session_id": "s", "user_id": "u1"}),
            ("get_fact", ("tz",), {"user_id": "u1"}),
            ("get_fact", ("color",), {"user_id": "u1", "agent_id": "a"}),
            ("get_fact", ("missing",), {"user_id": "u1"}),
            ("contradict", ("color",), {}),
            ("get_fact", ("color",), {}),
            ("forget", ("tz",), {"scope": "user", "scope_id": "u1"}),
            ("get_fact", ("tz",), {"user_id": "u1"}),
            ("remember_many", ({"a": 1, "b": [2]},), {"scope": "agent", "scope_id": "a"}),
            ("get_fact", ("b",), {"agent_id": "a"}),
        ]
        for name, args, kwargs in steps:
            got = [await _call(way, m, name, *args, **kwargs) for m in memories]
            if name == "remember_many":
                got = [[_result_of(r) for r in one] for one in got]
            else:
                got = [_result_of(r) for r in got]
            assert got[0] == got[1], (name, args, kwargs)
            assert _records(direct) == _records(runner), (name, args, kwargs)
        users = [await _call(way, m, "get_user", "u1") for m in memories]
        assert [u.preferences if u else None for u in users] == [
            u.preferences if u else None for u in users[::-1]
        ]

    async def test_errors_are_the_same(self, impl: Any, way: str) -> None:
        for store in (InMemoryStore(), _Runner()):
            memory = LongTermMemory(store)
            with pytest.raises(ValueError, match="scope 'user' needs a scope_id"):
                await _call(way, memory, "remember", "k", 1, scope="user")
            with pytest.raises(TypeError, match="user_id must be str, not int"):
                await _call(way, memory, "get_fact", "k", user_id=3)
            with pytest.raises(ValueError, match="user_id must be a non-empty string"):
                await _call(way, memory, "get_fact", "k", user_id="")
            store.close()
            with pytest.raises(Exception, match="is closed"):
                await _call(way, memory, "get_fact", "k")
            with pytest.raises(Exception, match="is closed"):
                await _call(way, memory, "remember", "k", 1)

    def test_run_now_runs_store_operations_only(self) -> None:
        store = InMemoryStore()

        def plan() -> Plan[int]:
            entries = yield Load("ns")
            yield HybridLock()
            return len(entries)

        with pytest.raises(TypeError, match="run_now runs store operations only"):
            run_now(plan(), store)

        def failing() -> Plan[str]:
            try:
                yield Load("")
            except ValueError as exc:
                return f"handled: {exc}"
            return "not reached"

        done = run_now(failing(), store)
        assert isinstance(done, Done)
        assert done.value.startswith("handled: namespace must be a non-empty string")


class TestVisibleNamespaces:
    @pytest.mark.parametrize(
        "ids",
        [(None, None, None), ("s", None, None), (None, "u", "a"), ("s", "u", "a")],
    )
    def test_as_check_ids(self, ids: tuple[str | None, ...]) -> None:
        from memlane.longterm.fact_scopes import check_ids

        expected = tuple(fact_namespace(s, i) for s, i in check_ids(*ids))
        assert visible_namespaces(*ids) == expected
        assert visible_namespaces(*ids) == expected  # cached

    @pytest.mark.parametrize(
        ("ids", "error"),
        [
            ((1, None, None), TypeError),
            ((None, ["u"], None), TypeError),
            ((None, None, "a\x00"), ValueError),
            ((None, "", None), ValueError),
        ],
    )
    def test_bad_ids_are_refused_every_time(
        self, ids: tuple[object, ...], error: type[Exception]
    ) -> None:
        for _ in range(2):
            with pytest.raises(error):
                visible_namespaces(*ids)


def _bad_entry(key: str, content: Any) -> MemoryEntry:
    return MemoryEntry(scope=MemoryScope.LONG_TERM, key=key, content=content)


class TestCorruptFacts:
    """A stored value that is not a fact raises today's error, cached or not."""

    async def test_in_memory(self, impl: Any, way: str) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        await _call(way, memory, "remember", "k", 1)
        assert (await _call(way, memory, "get_fact", "k")).value == 1  # decoded and cached
        where = fact_namespace(FactScope.GLOBAL, None)
        store.save(where, _bad_entry("k", {"key": "k", "confidence": 7}))
        for name, args in (("get_fact", ("k",)), ("remember", ("k", 2)), ("contradict", ("k",))):
            with pytest.raises(
                CorruptStoreError, match=r"corrupt fact 'k' in longterm:facts:global"
            ):
                await _call(way, memory, name, *args)

    async def test_sqlite_rows(self, impl: Any, way: str, tmp_path: Path) -> None:
        path = tmp_path / "facts.sqlite3"
        store = SQLiteStore(path)
        memory = LongTermMemory(store)
        await _call(way, memory, "remember", "good", [1])
        await _call(way, memory, "remember", "bad", [1])
        await _call(way, memory, "remember", "text", [1])
        assert (await _call(way, memory, "get_fact", "bad")).value == [1]  # cached by its text
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE memory_entries SET content = ? WHERE key = 'bad'",
                (json.dumps({"key": "bad", "confidence": 7}),),
            )
            conn.execute("UPDATE memory_entries SET content = '{not json' WHERE key = 'text'")
        with pytest.raises(CorruptStoreError, match=r"corrupt fact 'bad' in longterm:facts:global"):
            await _call(way, memory, "get_fact", "bad")
        with pytest.raises(CorruptStoreError, match=str(path).replace("\\", "\\\\")):
            await _call(way, memory, "get_fact", "text")
        with pytest.raises(CorruptStoreError, match=r"corrupt fact 'bad'"):
            await _call(way, memory, "remember", "bad", 2)
        assert (await _call(way, memory, "get_fact", "good")).value == [1]
        store.close()


class TestCachedFactsFollowTheStore:
    """A cached decode is keyed by what makes it valid: a new stored version is read anew."""

    async def test_in_memory_entry_replaced(self, impl: Any, way: str) -> None:
        store = InMemoryStore()
        memory = LongTermMemory(store)
        await _call(way, memory, "remember", "k", "one")
        assert (await _call(way, memory, "get_fact", "k")).value == "one"
        where = fact_namespace(FactScope.GLOBAL, None)
        held = store.load_by_key(where, "k")
        assert held is not None
        replaced = fact_entry(Fact(key="k", value="two"), held.entry_id)
        store.save(where, replaced)
        assert (await _call(way, memory, "get_fact", "k")).value == "two"
        # The same entry object with other content (an assignment): read anew too.
        replaced.content = fact_json(Fact(key="k", value="three"))
        assert (await _call(way, memory, "get_fact", "k")).value == "three"

    async def test_another_writer_of_the_file(self, impl: Any, way: str, tmp_path: Path) -> None:
        path = tmp_path / "shared.sqlite3"
        mine, theirs = SQLiteStore(path), SQLiteStore(path)
        reader, writer = LongTermMemory(mine), LongTermMemory(theirs)
        await _call(way, writer, "remember", "k", {"v": 1}, scope="user", scope_id="u")
        for expected in ({"v": 1}, {"v": 2}, {"v": 3}):
            if expected != {"v": 1}:
                await _call(way, writer, "remember", "k", expected, scope="user", scope_id="u")
            for _ in range(2):
                fact = await _call(way, reader, "get_fact", "k", user_id="u")
                assert fact.value == expected
                assert fact.times_confirmed == expected["v"] - 1
        confirmed = await _call(way, reader, "remember", "k", {"v": 3}, scope="user", scope_id="u")
        assert (confirmed.status, confirmed.fact.times_confirmed) == ("confirmed", 3)
        assert (await _call(way, writer, "get_fact", "k", user_id="u")).times_confirmed == 3
        mine.close()
        theirs.close()

    @pytest.mark.parametrize("rounds", [3])
    def test_another_process_writes_the_file(self, impl: Any, tmp_path: Path, rounds: int) -> None:
        """A fact this process decoded and cached is read anew once another process has
        changed it: the cache is keyed by the stored text, which every change rewrites."""
        path = tmp_path / "processes.sqlite3"
        store = SQLiteStore(path)
        memory = LongTermMemory(store)
        memory.remember("k", {"v": 0}, scope="user", scope_id="u")
        env = dict(os.environ)
        env.pop("MEMLANE_PURE_PYTHON", None)
        if impl.name == "python":
            env["MEMLANE_PURE_PYTHON"] = "1"
        for i in range(1, 4):
            cached = memory.get_fact("k", user_id="u")  # decoded and cached now
            assert cached is not None
            assert cached.value == {"v": i - 1}
            done = subprocess.run(
                [sys.executable, "-c", _WRITER, str(path), str(i)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == "updated"
            fact = memory.get_fact("k", user_id="u")
            assert fact is not None
            assert (fact.value, fact.times_confirmed) == ({"v": i}, i)
            assert [r.value for r in fact.history] == [{"v": j} for j in range(i)]
        store.close()

    async def test_every_store_reads_what_was_written(self, made: Made, way: str) -> None:
        memory = LongTermMemory(made.store)
        other = LongTermMemory(made.store)
        for i in range(3):
            await _call(way, memory, "remember", "n", i, scope="agent", scope_id="a")
            got = await _call(way, other, "get_fact", "n", agent_id="a")
            assert (got.value, got.history[-1].value if i else None) == (i, i - 1 if i else None)


_WRITER = r"""
import sys
from memlane import SQLiteStore
from memlane.longterm import LongTermMemory

store = SQLiteStore(sys.argv[1])
result = LongTermMemory(store).remember("k", {"v": int(sys.argv[2])}, scope="user", scope_id="u")
print(result.status)
store.close()
"""


class TestForwardedSignatures:
    """The memory's fact methods, run without the part's method, still show its signature
    and docstring, with the result type a caller gets."""

    @pytest.mark.parametrize(
        ("name", "result"),
        [
            ("get_fact", "Fact | None"),
            ("async_get_fact", "Fact | None"),
            ("remember", "RememberResult"),
            ("async_remember", "RememberResult"),
        ],
    )
    def test_same_as_the_part(self, name: str, result: str) -> None:
        from memlane.longterm.facts import Facts

        mine, part = getattr(LongTermMemory, name), getattr(Facts, name)
        assert inspect.signature(mine) == inspect.signature(part)
        assert inspect.signature(mine).return_annotation == result
        assert mine.__doc__ == part.__doc__
        assert mine.__name__ == name
        assert mine.__qualname__ == f"LongTermMemory.{name}"
