"""SQLiteStore's in-process mirror of its file's vectors stays the file's, on both paths.

A search reads the mirror, brought up to date from the file's change log inside the search's
read transaction (``memlane/_pure/sqlite_mirror.py``, ``rust/src/store/sqlite_vectors/``).
These tests change the file behind a store whose mirror is already built — from other
processes of either implementation, through every kind of write — and hold every search to
an oracle that reads the file with plain SQL and scores in float64.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy
import pytest

from memlane import _backend
from memlane._pure import sqlite_mirror, vector_index
from memlane._pure.sqlite_vectors import MIRROR_CHANGES, MIRROR_LOAD
from memlane.stores import EntryVector, SQLiteStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import decode_vector, text_digest, unit
from memlane.types import MemoryEntry, utc_now

DIMS = 8
MODEL = "test:model"
SCORE_TOLERANCE = 1e-5


def fact(text: str, *, importance: float = 0.5, **kw: Any) -> MemoryEntry:
    """An entry searchable by ``text``."""
    return MemoryEntry(
        content={"text": text}, metadata={SEARCH_TEXT: text}, importance=importance, **kw
    )


def random_vector(rng: random.Random, dims: int = DIMS) -> list[float]:
    return unit([rng.gauss(0, 1) for _ in range(dims)])


def attach(store: SQLiteStore, namespace: str, entry: MemoryEntry, vector: list[float]) -> int:
    text = entry.metadata[SEARCH_TEXT]
    return store.save_vectors(
        namespace, MODEL, [EntryVector(entry.entry_id, text_digest(text), vector)]
    )


SQL = r"""
import json, sqlite3, sys
path, statement, params = json.loads(sys.argv[1])
conn = sqlite3.connect(path)
with conn:
    rows = [[r.hex() if isinstance(r, bytes) else r for r in row]
            for row in conn.execute(statement, params)]
conn.close()
print(json.dumps(rows))
"""


def sql(path: Path, statement: str, params: tuple[Any, ...] = ()) -> list[list[Any]]:
    """Runs one statement on the file in another process (blobs as hex): Python's sqlite3
    and the Rust extension are two copies of SQLite, and one closing the file in a process
    drops the other's POSIX locks there (SQLite's documented hazard), so no test opens the
    file with both in one process."""
    done = subprocess.run(
        [sys.executable, "-c", SQL, json.dumps([str(path), statement, list(params)])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows: list[list[Any]] = json.loads(done.stdout)
    return rows


def oracle(
    path: Path,
    namespaces: list[str],
    query: list[float],
    *,
    model: str = MODEL,
    limit: int = 10,
    min_importance: float = 0.0,
) -> list[tuple[str, float]]:
    """(entry id, score) of the best vectors as the file holds them, by plain SQL and float64
    dot products: best first, then importance, then the oldest."""
    rows = sql(
        path,
        "SELECT e.entry_id, e.namespace, e.importance, e.expires_at, e.seq, v.vector"
        " FROM memory_vectors AS v JOIN memory_entries AS e ON e.seq = v.seq"
        " WHERE v.model = ? AND v.dims = ?",
        (model, len(query)),
    )
    now = utc_now().timestamp()
    q = numpy.asarray(query, dtype=numpy.float64)
    hits = [
        (
            float(
                numpy.dot(numpy.asarray(decode_vector(bytes.fromhex(blob)), dtype=numpy.float64), q)
            ),
            imp,
            seq,
            eid,
        )
        for eid, ns, imp, expires, seq, blob in rows
        if ns in namespaces and imp >= min_importance and (expires is None or expires > now)
    ]
    hits.sort(key=lambda hit: (-hit[0], -hit[1], hit[2]))
    return [(eid, score) for score, _, _, eid in hits[:limit]]


def assert_matches(found: list[Any], expected: list[tuple[str, float]]) -> None:
    assert [hit.entry.entry_id for hit in found] == [eid for eid, _ in expected]
    for hit, (_, score) in zip(found, expected, strict=True):
        assert hit.score == pytest.approx(score, abs=SCORE_TOLERANCE)


WORKER = r"""
import json, random, sys
from datetime import timedelta
from memlane.stores import EntryVector, SQLiteStore
from memlane.stores.protocol import SEARCH_TEXT
from memlane.stores.vectors import text_digest, unit
from memlane.types import MemoryEntry, utc_now

cfg = json.loads(sys.argv[1])
rng = random.Random(cfg["seed"])
def vector():
    return unit([rng.gauss(0, 1) for _ in range(cfg["dims"])])
def vec(entry):
    return EntryVector(entry.entry_id, text_digest(entry.metadata[SEARCH_TEXT]), vector())
with SQLiteStore(cfg["path"]) as store:
    for _ in range(cfg["ops"]):
        entries = store.load("a") + store.load("b")
        op = rng.choice(["add", "add", "delete", "text", "importance", "expire", "model", "move"])
        if op == "add" or not entries:
            ns = rng.choice(["a", "b"])
            text = f"fact {rng.random()}"
            entry = MemoryEntry(content={"text": text}, metadata={SEARCH_TEXT: text},
                                importance=rng.choice([0.2, 0.5, 0.9]))
            store.save(ns, entry)
            store.save_vectors(ns, "test:model", [vec(entry)])
            continue
        entry = rng.choice(entries)
        ns = "a" if entry in store.load("a") else "b"
        if op == "delete":
            store.delete(ns, entry.entry_id)
        elif op == "text":
            text = f"changed {rng.random()}"
            changed = entry.model_copy(update={"metadata": {SEARCH_TEXT: text}})
            store.save(ns, changed)
            if rng.random() < 0.5:
                store.save_vectors(ns, "test:model", [vec(changed)])
        elif op == "importance":
            store.save(ns, entry.model_copy(update={"importance": rng.choice([0.1, 0.6, 1.0])}))
        elif op == "expire":
            gone = utc_now() - timedelta(seconds=1)
            store.save(ns, entry.model_copy(update={"expires_at": gone}))
        elif op == "model":
            store.save_vectors(ns, "other:model", [vec(entry)])
        else:
            store.delete(ns, entry.entry_id)
            store.save("b" if ns == "a" else "a", entry)
            store.save_vectors("b" if ns == "a" else "a", "test:model", [vec(entry)])
"""


class TestTheMirrorFollowsOtherProcesses:
    """A store whose mirror is built sees, at its next search, every change other processes
    (of both implementations) made to the file: new, deleted, moved, re-texted, re-weighted,
    expired and re-modelled vectors."""

    def test_every_search_is_the_files(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "shared.sqlite3"
        rng = random.Random(11)
        with SQLiteStore(path) as store:
            for i in range(30):
                entry = fact(f"seed {i}", importance=rng.choice([0.2, 0.5, 0.9]))
                store.save("a", entry)
                attach(store, "a", entry, random_vector(rng))
            for round_ in range(6):
                query = random_vector(rng)
                assert_matches(
                    store.vector_search(["a"], query, model=MODEL), oracle(path, ["a"], query)
                )
                cfg = {"path": str(path), "seed": round_, "ops": 25, "dims": DIMS}
                env = {**os.environ, "MEMLANE_PURE_PYTHON": "1" if round_ % 2 else "0"}
                done = subprocess.run(
                    [sys.executable, "-c", WORKER, json.dumps(cfg)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert done.returncode == 0, done.stderr
                for namespaces, floor in [(["a"], 0.0), (["b"], 0.0), (["a", "b"], 0.5)]:
                    query = random_vector(rng)
                    found = store.vector_search(
                        namespaces, query, model=MODEL, limit=50, min_importance=floor
                    )
                    expected = oracle(path, namespaces, query, limit=50, min_importance=floor)
                    assert_matches(found, expected)


class TestTheMirrorFollowsEveryWrite:
    """Writes through the same or another store of the process reach the mirror."""

    def test_importance_and_expiry_changes_of_an_entry_with_a_vector(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "v.sqlite3"
        with SQLiteStore(path) as store, SQLiteStore(path) as other:
            low, high = fact("low", importance=0.2), fact("high", importance=0.9)
            for entry, vector in [(low, [1.0, 0.0]), (high, [0.0, 1.0])]:
                store.save("a", entry)
                attach(store, "a", entry, vector)
            assert [
                h.entry.entry_id
                for h in store.vector_search(["a"], [1, 0], model=MODEL, min_importance=0.5)
            ] == [high.entry_id]
            other.save("a", low.model_copy(update={"importance": 0.8}))
            found = store.vector_search(["a"], [1, 0], model=MODEL, min_importance=0.5)
            assert [h.entry.entry_id for h in found] == [low.entry_id, high.entry_id]
            gone = utc_now() - timedelta(seconds=1)
            other.save("a", high.model_copy(update={"expires_at": gone}))
            found = store.vector_search(["a"], [1, 0], model=MODEL)
            assert [h.entry.entry_id for h in found] == [low.entry_id]

    def test_a_pruned_log_rebuilds_the_mirror(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "v.sqlite3"
        rng = random.Random(5)
        with SQLiteStore(path) as store:
            entries = [fact(f"f{i}") for i in range(20)]
            store.save_many("a", entries)
            for entry in entries:
                attach(store, "a", entry, random_vector(rng))
            query = random_vector(rng)
            assert_matches(
                store.vector_search(["a"], query, model=MODEL), oracle(path, ["a"], query)
            )
            for entry in entries[:10]:
                attach(store, "a", entry, random_vector(rng))
            store.delete("a", entries[15].entry_id)
            # What the pruning trigger does once the log is long: the changes this mirror has
            # not read are gone from the log.
            sql(
                path,
                "DELETE FROM memory_vector_changes"
                " WHERE gen < (SELECT max(gen) FROM memory_vector_changes)",
            )
            query = random_vector(rng)
            assert_matches(
                store.vector_search(["a"], query, model=MODEL), oracle(path, ["a"], query)
            )

    def test_the_log_is_pruned_by_the_file(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "v.sqlite3"
        with SQLiteStore(path) as store:
            entry = fact("often")
            store.save("a", entry)
            for i in range(1030):
                attach(store, "a", entry, unit([1.0, float(i)]))
        [[first, last]] = sql(path, "SELECT min(gen), max(gen) FROM memory_vector_changes")
        assert last >= 1030
        assert first == 1  # under the kept length: nothing pruned yet
        # Pretend the log already went far past the kept length, then write on.
        sql(path, "UPDATE sqlite_sequence SET seq = 70000 WHERE name = 'memory_vector_changes'")
        with SQLiteStore(path) as store:
            for i in range(1024):
                attach(store, "a", entry, unit([float(i), 1.0]))
            assert [
                h.entry.entry_id for h in store.vector_search(["a"], [1023, 1], model=MODEL)
            ] == [entry.entry_id]
        [[first, last]] = sql(path, "SELECT min(gen), max(gen) FROM memory_vector_changes")
        assert last > 71000
        assert first > 1030  # the old end went, the latest 65,536 positions stay

    def test_a_file_made_again_at_the_same_path_has_its_own_mirror(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "v.sqlite3"
        for vector in ([1.0, 0.0], [0.0, 1.0]):
            entry = fact("same text")
            with SQLiteStore(path) as store:
                store.save("a", entry)
                attach(store, "a", entry, vector)
                hits = store.vector_search(["a"], [1, 0], model=MODEL)
                assert [h.entry.entry_id for h in hits] == [entry.entry_id]
                assert hits[0].score == pytest.approx(vector[0], abs=SCORE_TOLERANCE)
            for leftover in tmp_path.iterdir():
                leftover.unlink()

    def test_models_and_dimensions_have_separate_mirrors(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "v.sqlite3"
        with SQLiteStore(path) as store:
            a, b = fact("a"), fact("b")
            store.save_many("a", [a, b])
            attach(store, "a", a, [1.0, 0.0])
            store.save_vectors(
                "a", "other", [EntryVector(b.entry_id, text_digest("b"), [1.0, 0.0, 0.0])]
            )
            assert [h.entry.entry_id for h in store.vector_search(["a"], [1, 0], model=MODEL)] == [
                a.entry_id
            ]
            assert [
                h.entry.entry_id for h in store.vector_search(["a"], [1, 0, 0], model="other")
            ] == [b.entry_id]
            # b's vector moves to MODEL: it leaves the other mirror and joins this one.
            attach(store, "a", b, [0.6, 0.8])
            assert store.vector_search(["a"], [1, 0, 0], model="other") == []
            found = store.vector_search(["a"], [0, 1], model=MODEL)
            assert [h.entry.entry_id for h in found] == [b.entry_id, a.entry_id]


class TestALargeMirrorSplitsItsPass:
    """A mirror large enough that the Rust pass splits over the cores answers as the file."""

    # 16,384 rows of 256 dimensions: two parts' worth of codes (the Rust mirror starts a
    # thread per 2^21 codes, up to one per core).
    ROWS = 16_384
    WIDE = 256

    def test_every_search_is_the_files(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        rng = numpy.random.default_rng(26)
        # Clustered rows with exact duplicates, so scores crowd and tie at every split point.
        centres = rng.normal(size=(4, self.WIDE))
        vectors = centres[numpy.arange(self.ROWS) % 4] + 0.3 * rng.normal(
            size=(self.ROWS, self.WIDE)
        )
        vectors[::9] = centres[0]
        vectors /= numpy.linalg.norm(vectors, axis=1, keepdims=True)
        entries = [fact(f"f{i}", importance=(0.2, 0.5, 0.9)[i % 3]) for i in range(self.ROWS)]
        spaces = ["b" if i % 5 == 0 else "a" for i in range(self.ROWS)]
        path = tmp_path / "v.sqlite3"
        with SQLiteStore(path) as store:
            for name in ("a", "b"):
                held = [
                    (e, v) for e, v, n in zip(entries, vectors, spaces, strict=True) if n == name
                ]
                store.save_many(name, [e for e, _ in held])
                store.save_vectors(
                    name,
                    MODEL,
                    [
                        EntryVector(e.entry_id, text_digest(e.metadata[SEARCH_TEXT]), v.tolist())
                        for e, v in held
                    ],
                )
            gone = utc_now() - timedelta(seconds=1)
            expired = {entries[i].entry_id for i in range(3, self.ROWS, 97)}
            for i in range(3, self.ROWS, 97):
                store.save(spaces[i], entries[i].model_copy(update={"expires_at": gone}))
            # The file's own floats (float32), scored in float64.
            stored = vectors.astype(numpy.float32).astype(numpy.float64)
            queries = [centres[0] / numpy.linalg.norm(centres[0])] + [
                unit(rng.normal(size=self.WIDE).tolist()) for _ in range(3)
            ]
            for query, (names, limit, floor) in zip(
                queries,
                [(["a"], 50, 0.0), (["a", "b"], 10, 0.5), (["b"], 1, 0.0), (["a", "b"], 200, 0.2)],
                strict=True,
            ):
                q = numpy.asarray(query, dtype=numpy.float32).astype(numpy.float64)
                scores = stored @ q
                # Ties go to importance, then to the older row: "a" was written before "b".
                hits = sorted(
                    (-scores[i], -entries[i].importance, (spaces[i], i), i)
                    for i in range(self.ROWS)
                    if spaces[i] in names
                    and entries[i].importance >= floor
                    and entries[i].entry_id not in expired
                )[:limit]
                found = store.vector_search(
                    names, list(query), model=MODEL, limit=limit, min_importance=floor
                )
                assert_matches(found, [(entries[i].entry_id, -score) for score, _, _, i in hits])


class TestReadOnlyOpensFollowWithoutWriting:
    """A read-only store builds and updates its mirror from the file and never writes it."""

    def test_searches_change_nothing(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "v.sqlite3"
        rng = random.Random(2)
        with SQLiteStore(path) as writer:
            entries = [fact(f"f{i}") for i in range(10)]
            writer.save_many("a", entries)
            for entry in entries:
                attach(writer, "a", entry, random_vector(rng))
        queries = [random_vector(rng) for _ in range(3)]
        expected = [oracle(path, ["a"], query) for query in queries]
        # Bytes are read only while no store is open: closing a file descriptor of the
        # database in this process would drop SQLite's POSIX locks on it.
        # (SQLite itself may make the WAL's side files for a reader; the database is the
        # file compared.)
        before = path.read_bytes()
        with SQLiteStore(path, read_only=True) as reader:
            found = [reader.vector_search(["a"], query, model=MODEL) for query in queries]
        assert path.read_bytes() == before
        for hits, answer in zip(found, expected, strict=True):
            assert_matches(hits, answer)

    def test_searches_see_the_writer(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        path = tmp_path / "v.sqlite3"
        rng = random.Random(4)
        with SQLiteStore(path) as writer:
            entries = [fact(f"f{i}") for i in range(10)]
            writer.save_many("a", entries)
            for entry in entries:
                attach(writer, "a", entry, random_vector(rng))
            with SQLiteStore(path, read_only=True) as reader:
                for _ in range(3):
                    query = random_vector(rng)
                    assert_matches(
                        reader.vector_search(["a"], query, model=MODEL), oracle(path, ["a"], query)
                    )
                    writer.delete("a", writer.load("a")[0].entry_id)
                    attach(writer, "a", writer.load("a")[-1], random_vector(rng))


class TestASearchReadsOnlyWhatChanged:
    """After the first search, a search reads no vector of the table but the changed ones
    (counted on the twin's connection, whose statements Python can trace)."""

    def test_statements_of_each_search(self, tmp_path: Path) -> None:
        with _backend.use("python"):
            store = SQLiteStore(tmp_path / "v.sqlite3")
        rng = random.Random(3)
        entries = [fact(f"f{i}") for i in range(40)]
        store.save_many("a", entries)
        for entry in entries:
            attach(store, "a", entry, random_vector(rng))
        # The traced statements have their parameters filled in: matched by their opening.
        load, changes = (text.strip().split("\n")[0] for text in (MIRROR_LOAD, MIRROR_CHANGES))
        statements: list[str] = []
        table: Any = store._table  # the twin's own connection is what is observed
        table._open().set_trace_callback(statements.append)
        store.vector_search(["a"], random_vector(rng), model=MODEL)
        assert sum(load in s for s in statements) == 1
        statements.clear()
        store.vector_search(["a"], random_vector(rng), model=MODEL)
        assert not any(load in s or changes in s for s in statements)
        attach(store, "a", entries[0], random_vector(rng))
        statements.clear()
        store.vector_search(["a"], random_vector(rng), model=MODEL)
        assert sum(changes in s for s in statements) == 1
        assert not any(load in s for s in statements)
        store.close()

    def test_the_process_keeps_few_mirrors(self) -> None:
        first = sqlite_mirror.mirror_for("kept-test-0", MODEL, 2)
        for i in range(1, sqlite_mirror.KEPT_MIRRORS + 1):
            sqlite_mirror.mirror_for(f"kept-test-{i}", MODEL, 2)
        assert sqlite_mirror.mirror_for("kept-test-0", MODEL, 2) is not first


class TestTheTwinsPlainMirror:
    """Without numpy, the twin's mirror keeps plain lists and gives the same answers."""

    def test_changes_and_searches_match_the_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(vector_index, "NUMPY", False)
        path = tmp_path / "v.sqlite3"
        rng = random.Random(8)
        with _backend.use("python"):
            store = SQLiteStore(path)
        with store:
            entries = [fact(f"f{i}", importance=rng.choice([0.2, 0.9])) for i in range(40)]
            store.save_many("a", entries)
            for entry in entries:
                attach(store, "a", entry, random_vector(rng))
            for step in range(12):
                query = random_vector(rng)
                assert_matches(
                    store.vector_search(["a"], query, model=MODEL, min_importance=0.5),
                    oracle(path, ["a"], query, min_importance=0.5),
                )
                victim = entries[step]
                if step % 3 == 0:
                    store.delete("a", victim.entry_id)
                elif step % 3 == 1:
                    store.save("a", victim.model_copy(update={"importance": 1.0}))
                else:
                    attach(store, "a", victim, random_vector(rng))
