"""An in-memory ``remember`` runs its steps at once (``remember_now``): for every outcome it
gives what the plan gives through the runner — the same result, the same stored entry, the
same search index —, a lost race is retried as the plan retries it, and the settings cache
and the reused clock text change no answer."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from memlane._runner import run_sync
from memlane.longterm import LongTermMemory
from memlane.longterm.fact_model import FactScope, FactType, RememberResult
from memlane.longterm.fact_plans import _iso, fact_entry, remember_now, remember_plan
from memlane.longterm.fact_scopes import fact_namespace
from memlane.longterm.facts import Facts
from memlane.stores import InMemoryStore
from memlane.types import MemoryEntry

_SCOPES = [(FactScope.GLOBAL, None), (FactScope.USER, "u1"), (FactScope.SESSION, "s1")]
_VALUES = st.sampled_from(["blue", "green", 1, True, 1.0, [1, 2], {"a": 1}, {"a": [1, None]}])
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["k", "j"]),
        _VALUES,
        st.sampled_from(range(len(_SCOPES))),
        st.sampled_from(list(FactType)),
        st.sampled_from([0.0, 0.3, 0.8, 1.0]),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def _stored(store: InMemoryStore) -> list[tuple[Any, ...]]:
    """Every stored entry without what differs between two runs (ids and clock times)."""
    out = []
    for name in store.namespaces():
        for entry in store.load(name):
            content = dict(entry.content)
            for moment in ("created_at", "updated_at"):
                content.pop(moment)
            content["history"] = [r["value"] for r in content["history"]]
            out.append(
                (name, entry.key, content, dict(entry.metadata), entry.importance, entry.version)
            )
    return out


def _shown(result: RememberResult) -> tuple[str, dict[str, Any]]:
    fact = result.fact.model_dump(exclude={"created_at", "updated_at"})
    fact["history"] = [r["value"] for r in fact["history"]]
    return result.status, fact


def _hits(store: InMemoryStore, query: str) -> list[tuple[str | None, Any]]:
    names = store.namespaces()
    return [(h.entry.key, h.entry.content["value"]) for h in store.search(names, query, limit=50)]


class TestRememberNowIsThePlan:
    """remember_now and remember_plan through the runner agree at every step."""

    @given(steps=_STEPS)
    @settings(deadline=None)
    def test_same_results_entries_and_index(self, impl: Any, steps: list[tuple[Any, ...]]) -> None:
        direct, planned = InMemoryStore(), InMemoryStore()
        for key, value, scope_at, kind, confidence, overwrite in steps:
            scope, scope_id = _SCOPES[scope_at]
            args = (key, value, scope, scope_id, kind, confidence, overwrite)
            now = remember_now(direct, *args)
            ran = run_sync(remember_plan(*args), planned)
            assert _shown(now) == _shown(ran)
            assert _stored(direct) == _stored(planned)
        for query in ("blue", "green", "k", "j", "a"):
            assert _hits(direct, query) == _hits(planned, query)

    @pytest.mark.parametrize(
        ("first", "second", "overwrite", "status"),
        [
            ("v", None, True, "created"),
            ("v", "v", True, "confirmed"),
            ("v", "w", True, "updated"),
            ("v", "w", False, "skipped"),
        ],
    )
    def test_every_status(
        self, impl: Any, first: str, second: str | None, overwrite: bool, status: str
    ) -> None:
        stores = InMemoryStore(), InMemoryStore()
        results = []
        for store, run in zip(stores, (_now, _planned), strict=True):
            result = run(store, "k", first)
            if second is not None:
                result = run(store, "k", second, overwrite=overwrite)
            results.append(result)
        assert [r.status for r in results] == [status, status]
        assert _shown(results[0]) == _shown(results[1])
        assert _stored(stores[0]) == _stored(stores[1])


def _now(store: InMemoryStore, key: str, value: Any, *, overwrite: bool = True) -> RememberResult:
    return remember_now(
        store, key, value, FactScope.USER, "u1", FactType.WORLD_KNOWLEDGE, 0.8, overwrite
    )


def _planned(
    store: InMemoryStore, key: str, value: Any, *, overwrite: bool = True
) -> RememberResult:
    plan = remember_plan(key, value, FactScope.USER, "u1", FactType.WORLD_KNOWLEDGE, 0.8, overwrite)
    return run_sync(plan, store)


class _Raced(InMemoryStore):
    """A store where another writer's remember of the same key lands just before each of the
    first ``races`` conditional writes."""

    def __init__(self, rival: Any, races: int) -> None:
        super().__init__()
        self.rival, self.races, self.calls = rival, races, 0

    def save_if(self, namespace: str, entry: MemoryEntry, expected_version: int | None) -> bool:
        self.calls += 1
        if self.races:
            self.races -= 1
            assert _now(self, entry.key or "", self.rival).status != "skipped"
        return super().save_if(namespace, entry, expected_version)


class TestLostRaces:
    """A write that loses its compare-and-swap is read again and retried, as the plan does."""

    @pytest.mark.parametrize(("rival", "status"), [("v", "confirmed"), ("w", "updated")])
    def test_a_new_key_taken_first(self, impl: Any, rival: str, status: str) -> None:
        stores = _Raced(rival, 1), _Raced(rival, 1)
        now = _now(stores[0], "k", "v")
        planned = _planned(stores[1], "k", "v")
        assert now.status == planned.status == status
        assert _shown(now) == _shown(planned)
        assert _stored(stores[0]) == _stored(stores[1])
        # Each lost once and won on the retry; the rival's write is its own winning one.
        assert stores[0].calls == stores[1].calls == 3
        (entry,) = stores[0].load(fact_namespace(FactScope.USER, "u1"))
        assert entry.version == 2
        assert entry.content["times_confirmed"] == 1

    def test_a_changed_fact(self, impl: Any) -> None:
        stores = _Raced("x", 0), _Raced("x", 0)
        for store, run in zip(stores, (_now, _planned), strict=True):
            run(store, "k", "v")
            store.races = 1
        now = _now(stores[0], "k", "w")
        planned = _planned(stores[1], "k", "w")
        assert _shown(now) == _shown(planned)
        assert [r.value for r in now.fact.history] == ["v", "x"]
        assert now.fact.times_confirmed == 2
        assert _stored(stores[0]) == _stored(stores[1])


class TestExpiredHolder:
    """A key whose holder has expired is free: the new fact is created and displaces it."""

    def test_created_over_an_expired_holder(self, impl: Any) -> None:
        where = fact_namespace(FactScope.USER, "u1")
        stores = InMemoryStore(), InMemoryStore()
        for store in stores:
            old = _now(InMemoryStore(), "k", "stale words").fact
            expired = fact_entry(old).model_copy(
                update={"expires_at": datetime.now(UTC) - timedelta(seconds=1)}
            )
            store.save(where, expired)
        now = _now(stores[0], "k", "fresh")
        planned = _planned(stores[1], "k", "fresh")
        assert now.status == planned.status == "created"
        assert _stored(stores[0]) == _stored(stores[1])
        for store in stores:
            assert store.load_by_key(where, "k") is not None
            assert _hits(store, "stale") == []
            assert _hits(store, "fresh") == [("k", "fresh")]


class TestBlockingRememberSignatures:
    """The blocking remember methods, written out for speed, keep the plan's defaults."""

    @pytest.mark.parametrize("method", [Facts.remember, LongTermMemory.remember])
    def test_defaults_are_the_plans(self, method: Any) -> None:
        plan = Facts._remember
        assert method.__kwdefaults__ == plan.__kwdefaults__
        assert _parameters(method) == _parameters(plan)
        assert inspect.signature(method) == inspect.signature(Facts.remember)


def _parameters(function: Any) -> tuple[str, ...]:
    """The names a function takes, as written (not the signature it shows)."""
    code = function.__code__
    return tuple(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])


class TestSettingsCache:
    """The checked scope, id and fact type come from a cache; errors are raised every time."""

    def test_answers(self) -> None:
        memory = LongTermMemory()
        for scope in ("user", FactScope.USER):
            for kind in ("user_preference", FactType.USER_PREFERENCE):
                result = memory.remember("k", "v", scope=scope, scope_id="u1", fact_type=kind)
                assert result.fact.scope is FactScope.USER
                assert result.fact.fact_type is FactType.USER_PREFERENCE
        assert memory.remember("n", 1, confidence=1).fact.confidence == 1.0
        assert type(memory.remember("m", 1, confidence=1).fact.confidence) is float

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"scope": "user"}, ValueError, "scope_id"),
            ({"scope_id": "u1"}, ValueError, "scope_id must be None for the global scope"),
            ({"scope": "planet"}, ValueError, "scope must be one of"),
            ({"fact_type": "rumour"}, ValueError, "fact_type must be one of"),
            ({"fact_type": 3}, TypeError, "fact_type must be str, not int"),
            ({"scope": ["user"]}, TypeError, "scope must be str, not list"),
            ({"confidence": True}, TypeError, "confidence must be a number, not bool"),
            ({"confidence": 1.5}, ValueError, "confidence must be between 0.0 and 1.0"),
            ({"confidence": float("nan")}, ValueError, "confidence must be between"),
            ({"overwrite": 1}, TypeError, "overwrite must be bool, not int"),
        ],
    )
    def test_errors_every_time(
        self, kwargs: dict[str, Any], error: type[Exception], match: str
    ) -> None:
        memory = LongTermMemory()
        for _ in range(2):
            with pytest.raises(error, match=match):
                memory.remember("k", "v", **kwargs)
        assert memory.facts() == []


_DATETIME: TypeAdapter[datetime] = TypeAdapter(datetime)


class TestIsoText:
    """A timestamp's text is pydantic's JSON form, whether or not its second's text is reused."""

    @given(
        start=st.datetimes(
            min_value=datetime(1, 1, 1),  # noqa: DTZ001  # naive by hypothesis's rule
            max_value=datetime(9999, 12, 31, 23, 59, 58),  # noqa: DTZ001  # as above
            timezones=st.just(UTC),
        ),
        steps=st.lists(st.integers(0, 1_500_000), max_size=6),
    )
    def test_equals_pydantic(self, start: datetime, steps: list[int]) -> None:
        moments = [start, start.replace(microsecond=0)]
        for step in steps:
            moments.append(moments[-1] + timedelta(microseconds=step))
        for moment in moments:
            assert _iso(moment) == _DATETIME.dump_python(moment, mode="json")

    @pytest.mark.parametrize(
        "moment",
        [
            datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
            datetime(1, 1, 1, tzinfo=UTC),
            datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(0))),
        ],
    )
    def test_edges(self, moment: datetime) -> None:
        _iso(datetime(2026, 1, 2, 3, 4, 5, 7, tzinfo=UTC))  # a second's text held
        assert _iso(moment) == _DATETIME.dump_python(moment, mode="json")
