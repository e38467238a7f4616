"""Ranked search on SQLite (the Rust table and its twin) and on FileStore.

The SQLite tables serve ``search`` from an FTS5 index that triggers keep in step with the
entries; these tests hold the two tables to the same hits in the same order, the index to
every write and to files written before it existed, queries to being data, and
:class:`~memlane.FileStore` to the reading-everything reference.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import require_rust_core
from memlane import FileStore, SQLiteStore, _backend
from memlane._pure import store as pure
from memlane.stores.protocol import SEARCH_TEXT, SearchHit, rank_entries, search_terms
from memlane.types import MemoryEntry, utc_now
from test_store_twins import make_legacy_file, make_sqlite, outcome

# ---------------------------------------------------------------------------- helpers

NAMESPACES = ["a", "b", "c"]
ENTRY_IDS = ["e1", "e2", "e3", "e4", "e5", "e6"]
KEYS = [None, "k1", "k2"]
# Few words, so that queries hit several entries and ties come up; case, diacritics, a
# superscript digit and a sharp s exercise where the two tokenizers must agree.
TEXTS: list[Any] = [
    "apple banana",
    "apple apple cherry",
    "Banana split",
    "café CAFÉ",
    "cafe",
    "x² y",
    "straße",
    "user_timezone: Australia/Adelaide",
    "",
    3,
    None,
    ["apple"],
]
QUERY_TERMS = [["apple"], ["banana", "cherry"], ["café"], ["cafe"], ["x²"], ["adelaide", "user"]]
EXPIRY_OFFSETS = [None, -5.0, 5.0, 60.0]
SCORE_TOLERANCE = 1e-9
"""Relative: the two SQLite builds compute bm25() alike, but need not round alike."""


def metadata(text: Any) -> str:
    """Metadata JSON holding ``text`` as its search text (``None``: no search text at all)."""
    return "{}" if text is None else json.dumps({SEARCH_TEXT: text, "other": 1})


def srow(
    entry_id: str,
    text: Any,
    key: str | None = None,
    importance: float = 0.5,
    expires_at: float | None = None,
    version: int = 0,
) -> pure.Row:
    return (
        entry_id,
        "long_term",
        key,
        json.dumps({"text": str(text)}),
        metadata(text),
        "2024-01-01T00:00:00+00:00",
        expires_at,
        importance,
        version,
    )


def ids(hits: list[tuple[pure.Row, float]]) -> list[str]:
    return [row[0] for row, _ in hits]


def assert_same_hits(
    first: list[tuple[pure.Row, float]], second: list[tuple[pure.Row, float]]
) -> None:
    """The same rows in the same order, with scores equal up to :data:`SCORE_TOLERANCE`."""
    assert [row for row, _ in first] == [row for row, _ in second]
    for (_, a), (_, b) in zip(first, second, strict=True):
        assert a == pytest.approx(b, rel=SCORE_TOLERANCE)
        assert a > 0


def indexed_rows(path: Path) -> int:
    """How many rows the file's search index holds, read by a plain connection."""
    conn = sqlite3.connect(path)
    try:
        count: int = conn.execute("SELECT count(*) FROM memory_search").fetchone()[0]
        return count
    finally:
        conn.close()


def doc(text: Any, *, key: str | None = None, importance: float = 0.5, **kw: Any) -> MemoryEntry:
    data = {} if text is None else {SEARCH_TEXT: text}
    return MemoryEntry(key=key, content={"text": text}, metadata=data, importance=importance, **kw)


def texts(hits: list[SearchHit]) -> list[Any]:
    return [hit.entry.metadata[SEARCH_TEXT] for hit in hits]


def expected_ids(table: Any, namespaces: list[str], terms: list[str], now: float) -> set[str]:
    """The ids a search must find, worked out from ``load``: live, searchable, sharing a term."""
    found = set()
    for namespace in namespaces:
        for row in table.load(namespace, now):
            text = json.loads(row[4]).get(SEARCH_TEXT)
            if isinstance(text, str) and set(search_terms(text)) & set(terms):
                found.add(row[0])
    return found


# ---------------------------------------------------------------------------- the twins


class SearchTwinsMachine(RuleBasedStateMachine):
    """Drives the Rust and Python SQLite tables with the same writes; their searches agree."""

    def __init__(self) -> None:
        super().__init__()
        self.rust = require_rust_core().SqliteTable(":memory:")
        self.py = pure.SqliteTable(":memory:")
        self.now = 1_000.0

    def both(self, method: str, *args: Any) -> Any:
        rust = outcome(getattr(self.rust, method), *args)
        py = outcome(getattr(self.py, method), *args)
        assert rust == py, (method, args)
        return rust

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        entry_id=st.sampled_from(ENTRY_IDS),
        key=st.sampled_from(KEYS),
        text=st.sampled_from(TEXTS),
        importance=st.sampled_from([0.1, 0.5, 0.9]),
        offset=st.sampled_from(EXPIRY_OFFSETS),
    )
    def save(
        self,
        namespace: str,
        entry_id: str,
        key: str | None,
        text: Any,
        importance: float,
        offset: float | None,
    ) -> None:
        expires_at = None if offset is None else self.now + offset
        self.both("save", namespace, srow(entry_id, text, key, importance, expires_at))

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        batch=st.lists(
            st.tuples(st.sampled_from(ENTRY_IDS), st.sampled_from(TEXTS), st.booleans()),
            max_size=3,
        ),
    )
    def save_many(self, namespace: str, batch: list[tuple[str, Any, bool]]) -> None:
        # A row with importance 2.0 violates the CHECK: the whole batch is rolled back.
        rows = [srow(e, text, importance=2.0 if bad else 0.5) for e, text, bad in batch]
        self.both("save_many", namespace, rows)

    @rule(
        namespace=st.sampled_from(NAMESPACES),
        entry_id=st.sampled_from(ENTRY_IDS),
        key=st.sampled_from(["k1", "k2"]),
        text=st.sampled_from(TEXTS),
        expected=st.sampled_from([None, 0, 1, 2]),
    )
    def save_if(
        self, namespace: str, entry_id: str, key: str, text: Any, expected: int | None
    ) -> None:
        version = 1 if expected is None else expected + 1
        self.both(
            "save_if", namespace, srow(entry_id, text, key, version=version), expected, self.now
        )

    @rule(namespace=st.sampled_from(NAMESPACES), entry_id=st.sampled_from(ENTRY_IDS))
    def delete(self, namespace: str, entry_id: str) -> None:
        self.both("delete", namespace, entry_id)

    @rule(namespace=st.sampled_from(NAMESPACES))
    def clear(self, namespace: str) -> None:
        self.both("clear", namespace)

    @rule()
    def cleanup_expired(self) -> None:
        self.both("cleanup_expired", self.now)

    @rule(step=st.sampled_from([1.0, 10.0]))
    def advance(self, step: float) -> None:
        self.now += step

    @rule(
        namespaces=st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=3, unique=True),
        terms=st.sampled_from(QUERY_TERMS),
        limit=st.sampled_from([1, 2, 100]),
        min_importance=st.sampled_from([0.0, 0.5]),
    )
    def search(
        self, namespaces: list[str], terms: list[str], limit: int, min_importance: float
    ) -> None:
        args = (namespaces, terms, limit, min_importance, self.now)
        rust, py = self.rust.search(*args), self.py.search(*args)
        assert ids(rust) == ids(py), args
        assert_same_hits(rust, py)
        ranks = [(-score, -row[7]) for row, score in rust]
        assert ranks == sorted(ranks), "best score first, then importance"

    @invariant()
    def the_index_finds_exactly_the_live_searchable_entries(self) -> None:
        for terms in QUERY_TERMS:
            want = expected_ids(self.py, NAMESPACES, terms, self.now)
            for table in (self.rust, self.py):
                hits = table.search(NAMESPACES, terms, 100, 0.0, self.now)
                assert set(ids(hits)) == want, terms

    def teardown(self) -> None:
        self.rust.close()
        self.py.close()


TestSearchTwins = SearchTwinsMachine.TestCase


class TestTwinsTakeAnyTerms:
    """Terms are only data to both tables: any text, same hits, never an error."""

    @given(terms=st.lists(st.text(st.characters(exclude_categories=["Cs"])), max_size=4))
    def test_arbitrary_terms(self, terms: list[str]) -> None:
        results = []
        for table in (require_rust_core().SqliteTable(":memory:"), pure.SqliteTable(":memory:")):
            table.save("a", srow("e1", 'say "hi" OR NEAR(x y) * ^col:z'))
            table.save("a", srow("e2", "plain words"))
            results.append(ids(table.search(["a"], terms, 10, 0.0, 0.0)))
            table.close()
        assert results[0] == results[1]

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_namespaces_are_data_too(self, backend: str) -> None:
        table = make_sqlite(backend, ":memory:")
        odd = ['q"uote', "back\\slash", "new\nline", "é😀", "a", "[]", '"a"']
        for i, namespace in enumerate(odd):
            table.save(namespace, srow(f"e{i}", "word"))
        for namespace in odd:
            assert ids(table.search([namespace], ["word"], 10, 0.0, 0.0)) == [
                f"e{odd.index(namespace)}"
            ]
        assert len(table.search(odd, ["word"], 100, 0.0, 0.0)) == len(odd)
        table.close()

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_no_terms_or_no_namespaces_find_nothing(self, backend: str) -> None:
        table = make_sqlite(backend, ":memory:")
        table.save("a", srow("e1", "word"))
        assert table.search(["a"], [], 10, 0.0, 0.0) == []
        assert table.search([], ["word"], 10, 0.0, 0.0) == []
        table.close()
        with pytest.raises(ValueError, match="closed"):
            table.search(["a"], ["word"], 10, 0.0, 0.0)


class TestTheIndexIsUsed:
    """A search walks the FTS index and looks each hit up by rowid: it never scans the entries."""

    def plan(self, conn: sqlite3.Connection) -> str:
        rows = conn.execute(
            f"EXPLAIN QUERY PLAN {pure.SEARCH}", ('"apple"', '["a"]', 0.0, 0.0, 10)
        ).fetchall()
        return "\n".join(row[3] for row in rows)

    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_plan(self, backend: str, tmp_path: Path) -> None:
        path = tmp_path / "m.sqlite3"
        table = make_sqlite(backend, path)
        table.save_many("a", [srow(f"e{i}", f"apple {i}") for i in range(300)])
        table.save_many("b", [srow(f"f{i}", "pear") for i in range(300)])
        table.close()
        conn = sqlite3.connect(path)
        try:
            for analyzed in (False, True):
                if analyzed:  # statistics must not talk the planner into a scan either
                    conn.execute("ANALYZE")
                plan = self.plan(conn)
                assert "SCAN memory_search VIRTUAL TABLE" in plan, plan
                assert "SEARCH e USING INTEGER PRIMARY KEY" in plan, plan
                assert "SCAN e" not in plan, plan
        finally:
            conn.close()


# ---------------------------------------------------------------------------- one file, both


class TestFilesAreShared:
    """Either table searches what the other wrote, and keeps the other's index right."""

    @pytest.mark.parametrize(("writer", "reader"), [("rust", "python"), ("python", "rust")])
    def test_written_by_one_searched_by_the_other(
        self, writer: str, reader: str, tmp_path: Path
    ) -> None:
        path = tmp_path / "m.sqlite3"
        first = make_sqlite(writer, path)
        first.save("a", srow("e1", "apple banana", key="k1"))
        first.save("a", srow("e2", "apple"))
        first.save("b", srow("e3", "apple"))
        before = first.search(["a", "b"], ["apple", "banana"], 10, 0.0, 0.0)
        first.close()
        second = make_sqlite(reader, path)
        assert_same_hits(second.search(["a", "b"], ["apple", "banana"], 10, 0.0, 0.0), before)
        second.save("a", srow("e4", "cherry", key="k1"))  # takes k1 from e1
        second.delete("b", "e3")
        second.close()
        first = make_sqlite(writer, path)
        # Each term is in one of the two entries left: equal scores, so the older comes first.
        assert ids(first.search(["a", "b"], ["apple", "banana", "cherry"], 10, 0.0, 0.0)) == [
            "e2",
            "e4",
        ]
        first.close()
        assert indexed_rows(path) == 2

    def test_interleaved_writers_on_one_file(self, tmp_path: Path) -> None:
        path = tmp_path / "m.sqlite3"
        rust = make_sqlite("rust", path)
        py = make_sqlite("python", path)
        for i in range(20):
            writer = rust if i % 2 else py
            writer.save("a", srow(f"e{i % 7}", f"word{i % 3} shared", key=f"k{i % 5}"))
            assert_same_hits(
                rust.search(["a"], ["shared"], 100, 0.0, 0.0),
                py.search(["a"], ["shared"], 100, 0.0, 0.0),
            )
        assert set(ids(py.search(["a"], ["shared"], 100, 0.0, 0.0))) == {
            row[0] for row in py.load("a", 0.0)
        }
        rust.close()
        py.close()


# ---------------------------------------------------------------------------- migration


def make_pre_index_file(path: Path, legacy: bool) -> None:
    """A file as memlane wrote it before the index: in the version-less schema, or the last.

    Namespace "a" holds e1 (searchable, key k1), e2 (not searchable), e3 (search text not a
    string), e4 (metadata that is not JSON) and e5 (searchable).
    """
    if legacy:
        make_legacy_file(path, [("e1", "k1"), ("e2", None), ("e3", None), ("e4", None)])
        conn = sqlite3.connect(path)
    else:
        conn = sqlite3.connect(path)
        conn.executescript(pure.SCHEMA)
        conn.executemany(
            "INSERT INTO memory_entries (entry_id, namespace, scope, key, content, created_at) "
            "VALUES (?, 'a', 'long_term', ?, '1', '2024-01-01T00:00:00+00:00')",
            [("e1", "k1"), ("e2", None), ("e3", None), ("e4", None)],
        )
    conn.executemany(
        "UPDATE memory_entries SET metadata = ? WHERE entry_id = ?",
        [(metadata("old apple"), "e1"), (metadata(7), "e3"), ("{not json", "e4")],
    )
    conn.execute(
        "INSERT INTO memory_entries (entry_id, namespace, scope, content, metadata, created_at) "
        "VALUES ('e5', 'a', 'long_term', '1', ?, '2024-01-01T00:00:00+00:00')",
        (metadata("apple pie"),),
    )
    conn.commit()
    conn.close()


OPENER = """
import sys
from memlane import _backend
with _backend.use(sys.argv[2]):
    table = _backend.active.SqliteTable(sys.argv[1])
print(",".join(row[0] for row, _ in table.search(["a"], ["apple"], 10, 0.0, 0.0)))
table.close()
"""


class TestOldFilesGainTheIndex:
    """A file written before the index existed gets it, filled, on open: once, by either table."""

    @pytest.mark.parametrize("legacy", [True, False], ids=["version-less", "pre-index"])
    @pytest.mark.parametrize("backend", ["rust", "python"])
    def test_back_filled_on_open(self, backend: str, legacy: bool, tmp_path: Path) -> None:
        path = tmp_path / "old.sqlite3"
        make_pre_index_file(path, legacy)
        table = make_sqlite(backend, path)
        assert set(ids(table.search(["a"], ["apple"], 10, 0.0, 0.0))) == {"e1", "e5"}
        # The row with broken metadata did not stop the migration and can still be removed.
        assert table.delete("a", "e4") is True
        table.save_if("a", srow("e6", "apple cider", key="k1", version=1), 0, 0.0)
        table.close()
        # Reopened by the other table: not filled a second time.
        other = make_sqlite("python" if backend == "rust" else "rust", path)
        assert set(ids(other.search(["a"], ["apple"], 10, 0.0, 0.0))) == {"e5", "e6"}
        other.close()
        assert indexed_rows(path) == 2

    def test_both_tables_migrate_to_the_same_schema(self, tmp_path: Path) -> None:
        schemas = []
        for backend in ("rust", "python"):
            path = tmp_path / f"{backend}.sqlite3"
            make_pre_index_file(path, legacy=True)
            make_sqlite(backend, path).close()
            conn = sqlite3.connect(path)
            schemas.append(
                conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
            )
            conn.close()
        assert schemas[0] == schemas[1]
        assert ("table", "memory_search") in [(t, n) for t, n, _ in schemas[0]]

    def test_processes_opening_one_old_file_at_once_fill_it_once(self, tmp_path: Path) -> None:
        path = tmp_path / "old.sqlite3"
        make_pre_index_file(path, legacy=True)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), "rust" if i % 2 else "python"],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(6)
        ]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        assert [p.returncode for p in procs] == [0] * 6
        assert {frozenset(out.strip().split(",")) for out in outputs} == {frozenset({"e1", "e5"})}
        assert indexed_rows(path) == 2


# ---------------------------------------------------------------------------- SQLiteStore


def stores(tmp_path: Path) -> list[Any]:
    """A SQLiteStore (on the implementation the test selected) and a FileStore."""
    return [SQLiteStore(tmp_path / "s.sqlite3"), FileStore(tmp_path / "files")]


class TestTheIndexFollowsWrites:
    """Every write path changes what search finds, and the index never holds a stale row."""

    def test_every_write_path(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "s.sqlite3"
        store = SQLiteStore(path)
        store.save("ns", doc("alpha", key="k"))
        store.save_many("ns", [doc("beta one"), doc("beta two", key="j")])
        assert texts(store.search(["ns"], "alpha")) == ["alpha"]
        assert sorted(texts(store.search(["ns"], "beta"))) == ["beta one", "beta two"]
        # Key takeover: a new id saved under k removes the old holder from the index.
        store.save("ns", doc("gamma", key="k"))
        assert store.search(["ns"], "alpha") == []
        # Replacing by id re-indexes the new text.
        [holder] = [e for e in store.load("ns") if e.key == "j"]
        holder.metadata = {SEARCH_TEXT: "delta"}
        store.save("ns", holder)
        assert texts(store.search(["ns"], "beta delta")) == ["delta", "beta one"]
        # A replacement that is no longer searchable leaves the index.
        holder.metadata = {}
        store.save("ns", holder)
        assert store.search(["ns"], "delta") == []
        assert store.save_if("ns", doc("epsilon", key="k"), 0)
        assert store.search(["ns"], "gamma") == []
        assert not store.save_if("ns", doc("zeta", key="k"), 0)
        assert texts(store.search(["ns"], "epsilon zeta")) == ["epsilon"]
        [one] = [e for e in store.load("ns") if e.metadata.get(SEARCH_TEXT) == "beta one"]
        assert store.delete("ns", one.entry_id)
        assert store.search(["ns"], "beta") == []
        store.save("other", doc("epsilon elsewhere"))
        assert store.clear("ns") == 2
        assert texts(store.search(["ns", "other"], "epsilon")) == ["epsilon elsewhere"]
        store.save("other", doc("eta", expires_at=utc_now() - timedelta(seconds=1)))
        assert store.search(["other"], "eta") == []
        assert store.cleanup_expired() == 1
        store.close()
        assert indexed_rows(path) == 1

    async def test_async_search(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        for store in stores(tmp_path):
            await store.async_save("ns", doc("alpha beta"))
            [hit] = await store.async_search(["ns"], "BETA", limit=3)
            assert hit.entry.metadata[SEARCH_TEXT] == "alpha beta"
            assert hit.score > 0
            store.close()

    def test_errors_are_mapped(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        from memlane.errors import CorruptStoreError, StoreClosedError

        path = tmp_path / "s.sqlite3"
        store = SQLiteStore(path)
        store.save("ns", doc("alpha"))
        conn = sqlite3.connect(path)
        conn.execute("UPDATE memory_entries SET scope = 'no such scope'")
        conn.commit()
        conn.close()
        with pytest.raises(CorruptStoreError, match=str(path)):
            store.search(["ns"], "alpha")
        store.close()
        with pytest.raises(StoreClosedError):
            store.search(["ns"], "alpha")

    def test_huge_limit(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        store = SQLiteStore(tmp_path / "s.sqlite3")
        store.save("ns", doc("alpha"))
        assert texts(store.search(["ns"], "alpha", limit=10**30)) == ["alpha"]
        store.close()


HOSTILE = [
    '"x" OR y*',
    "NEAR(a b)",
    "a AND -b",
    "%",
    "%alpha%",
    "'; DROP TABLE memory_entries; --",
    '"; DROP TABLE memory_search; --',
    "$where",
    '{"$where": "1"} alpha',
    "col:term",
    "text:alpha",
    "alpha.* [b]+ (x|y)? ^$ \\d{2}",
    "alpha(",
    '"',
    "*",
    "^alpha",
    "alpha + beta - gamma",
]


class TestQueriesAreData:
    """A query's operators and metacharacters never act: it finds what its plain terms find."""

    @pytest.mark.parametrize("query", HOSTILE)
    def test_hostile_query(self, impl: _backend.Implementation, tmp_path: Path, query: str) -> None:
        corpus = [
            "alpha beta",
            "x y",
            "a b",
            "term col",
            "drop table memory entries",
            "where",
            "text",
            "d 2",
            "gamma",
        ]
        for store in stores(tmp_path):
            store.save_many("ns", [doc(text) for text in corpus])
            found = set(texts(store.search(["ns"], query, limit=100)))
            wanted = set(search_terms(query))
            assert found == {t for t in corpus if wanted & set(search_terms(t))}, query
            assert len(store.load("ns")) == len(corpus)
            store.close()


class TestBadArguments:
    """Bad arguments raise TypeError or ValueError naming the argument, before any I/O."""

    @pytest.mark.parametrize(
        ("args", "kwargs", "error", "name"),
        [
            (("ns", "q"), {}, TypeError, "namespaces"),
            ((None, "q"), {}, TypeError, "namespaces"),
            ((["ns"], b"q"), {}, TypeError, "query"),
            ((["ns"], None), {}, TypeError, "query"),
            (([""], "q"), {}, ValueError, "namespace"),
            ((["a\x00b"], "q"), {}, ValueError, "namespace"),
            (([3], "q"), {}, TypeError, "namespace"),
            ((["ns"], "q"), {"limit": 0}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": -1}, ValueError, "limit"),
            ((["ns"], "q"), {"limit": 2.0}, TypeError, "limit"),
            ((["ns"], "q"), {"limit": True}, TypeError, "limit"),
            ((["ns"], "q"), {"min_importance": -0.1}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": math.nan}, ValueError, "min_importance"),
            ((["ns"], "q"), {"min_importance": None}, TypeError, "min_importance"),
        ],
    )
    def test_named(
        self,
        impl: _backend.Implementation,
        tmp_path: Path,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        error: type[Exception],
        name: str,
    ) -> None:
        for store in stores(tmp_path):
            with pytest.raises(error, match=name):
                store.search(*args, **kwargs)
            store.close()


# ---------------------------------------------------------------------------- FileStore


class TestFileStoreSearch:
    """FileStore has no index: its search is the reference ranking over the namespaces read."""

    def test_is_the_reference(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        entries = [
            doc("the quick brown fox", importance=0.4),
            doc("quick thinking", importance=0.9),
            doc("brown brown dog"),
            doc("nothing here"),
            doc(None),
            doc("fox", importance=0.1),
        ]
        store.save_many("a", entries[:3])
        store.save_many("b", entries[3:])
        for query in ["brown fox", "quick", "dog fox quick"]:
            terms = list(dict.fromkeys(search_terms(query)))
            for limit, minimum in [(10, 0.0), (2, 0.0), (10, 0.3)]:
                assert store.search(["a", "b"], query, limit=limit, min_importance=minimum) == (
                    rank_entries(entries, terms, limit, minimum)
                )
        assert texts(store.search(["b"], "fox")) == ["fox"]
        assert store.search(["missing"], "fox") == []

    def test_expired_and_unsearchable_entries(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        past = utc_now() - timedelta(seconds=1)
        store.save_many(
            "a",
            [doc("alpha old", expires_at=past), doc(["alpha"]), doc(5), doc("alpha new")],
        )
        assert texts(store.search(["a"], "alpha")) == ["alpha new"]

    def test_same_hits_as_sqlite(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        file_store, sqlite_store = FileStore(tmp_path / "f"), SQLiteStore(tmp_path / "s.db")
        corpus = [doc(t) for t in ["red apple", "green apple pie", "blue sky", "apple apple"]]
        for store in (file_store, sqlite_store):
            store.save_many("ns", corpus)
        for query in ["apple", "pie sky", "red green blue"]:
            assert [h.entry for h in file_store.search(["ns"], query)] == [
                h.entry for h in sqlite_store.search(["ns"], query)
            ], query
        sqlite_store.close()


# ---------------------------------------------------------------------------- two processes

WRITER = """
import json, sys
from memlane import SQLiteStore, _backend
from memlane.types import MemoryEntry
path, label, backend, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with _backend.use(backend):
    store = SQLiteStore(path)
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    store.save("ns", MemoryEntry(
        content=i, metadata={"search_text": f"shared {label} number{i}"}, key=f"{label}-{i}"
    ))
print("written", flush=True)
sys.stdin.readline()
hits = store.search(["ns"], "shared", limit=1000)
print(json.dumps(sorted(h.entry.key for h in hits)), flush=True)
store.close()
"""


class TestTwoProcesses:
    """Two interpreters writing searchable entries to one file both find every entry."""

    def test_both_see_all(self, tmp_path: Path) -> None:
        require_rust_core()
        path = tmp_path / "shared.sqlite3"
        count = 40
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(path), label, backend, str(count)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for label, backend in (("p", "python"), ("r", "rust"))
        ]
        try:
            for line in ("ready", "written"):
                for p in procs:
                    assert p.stdout is not None
                    assert p.stdout.readline() == f"{line}\n"
                for p in procs:  # release both together: their writes interleave
                    assert p.stdin is not None
                    p.stdin.write("go\n")
                    p.stdin.flush()
            outputs = [p.communicate(timeout=120)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
        assert [p.returncode for p in procs] == [0, 0]
        everyone = sorted(f"{label}-{i}" for label in "pr" for i in range(count))
        assert [json.loads(out) for out in outputs] == [everyone, everyone]
        assert indexed_rows(path) == 2 * count
