"""Conditional writes and key-range reads on the local stores: InMemoryStore, SQLiteStore, FileStore.

``save_if`` is a compare-and-swap on an entry's key, ``load_range`` reads the keys of a
half-open range in code-point order, and every load returns the version the store assigned.
The stores run on each implementation in turn (the ``impl`` fixture); the tests across
processes start real interpreters, and on SQLite mix both implementations on one file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import (
    FileStore,
    InMemoryStore,
    MemoryEntry,
    MemoryManager,
    MemoryStore,
    SQLiteStore,
    UnstorableValueError,
    _backend,
)
from memlane.stores.file import LOCK_FILENAME, namespace_filename
from memlane.stores.protocol import ConditionalStore
from test_store_twins import make_legacy_file
from worker_processes import backends, either_backend_env, release_together, started

STORES = ["memory", "sqlite", "file"]
# UTF-16 order would differ from code-point order on the last two ("\uffff" < "😀").
RANGE_KEYS = ["b", "a", "B", "é", "ab", "", "a\x00", "\uffff", "😀"]


@pytest.fixture(params=STORES)
def store(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> Iterator[Any]:
    """Each local store, its tables built by ``impl``."""
    made: MemoryStore
    if request.param == "memory":
        made = InMemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "m.sqlite3")
    else:
        made = FileStore(tmp_path / "files")
    yield made
    made.close()


def entry(key: str | None, content: Any = "v", **kw: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **kw)


def past() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=1)


def snapshot(store: Any) -> list[tuple[str, str | None, Any, int]]:
    return [(e.entry_id, e.key, e.content, e.version) for e in store.load("ns")]


class TestSaveIfAbsent:
    """expected_version=None wins once, while no unexpired entry holds the key."""

    def test_first_wins_second_loses(self, store: Any) -> None:
        first, second = entry("k", 1), entry("k", 2)
        assert store.save_if("ns", first, None) is True
        assert store.save_if("ns", second, None) is False
        found = store.load_by_key("ns", "k")
        assert (found.entry_id, found.content, found.version) == (first.entry_id, 1, 1)
        assert len(store.load("ns")) == 1

    def test_expired_holder_counts_as_absent_and_is_replaced(self, store: Any) -> None:
        stale = entry("k", "old", expires_at=past())
        store.save("ns", stale)
        assert store.save_if("ns", entry("k", "stale version"), 0) is False
        fresh = entry("k", "new")
        assert store.save_if("ns", fresh, None) is True
        assert [(e.entry_id, e.version) for e in store.load("ns")] == [(fresh.entry_id, 1)]
        # The expired holder is gone, not merely hidden.
        assert store.cleanup_expired() == 0

    def test_other_namespaces_and_keys_do_not_count(self, store: Any) -> None:
        store.save("other", entry("k"))
        store.save("ns", entry("j"))
        assert store.save_if("ns", entry("k"), None) is True


class TestSaveIfVersion:
    """An int expected_version wins only against an unexpired holder at exactly that version."""

    def test_versions_increment(self, store: Any) -> None:
        assert store.save_if("ns", entry("k", 0), None) is True
        for version in range(1, 5):
            assert store.save_if("ns", entry("k", version), version) is True
            assert store.load_by_key("ns", "k").version == version + 1

    def test_wrong_version_loses_and_changes_nothing(self, store: Any) -> None:
        store.save_if("ns", entry("k", "kept"), None)
        store.save("ns", entry(None, "other"))
        before = snapshot(store)
        for wrong in (0, 2, 7):
            assert store.save_if("ns", entry("k", "lost"), wrong) is False
        assert snapshot(store) == before

    def test_absent_key_loses_against_a_version(self, store: Any) -> None:
        assert store.save_if("ns", entry("k"), 0) is False
        assert store.load("ns") == []
        assert store.namespaces() == []

    def test_plain_save_stores_version_zero(self, store: Any) -> None:
        store.save_if("ns", entry("k", 1), None)
        store.save("ns", entry("k", 2, version=9))  # the entry's own version is ignored
        assert store.load_by_key("ns", "k").version == 0
        assert store.save_if("ns", entry("k", 3), 0) is True
        store.save_many("ns", [entry("k", 4, version=3)])
        assert store.load_by_key("ns", "k").version == 0

    def test_entry_version_is_ignored_on_input(self, store: Any) -> None:
        assert store.save_if("ns", entry("k", version=41), None) is True
        assert store.load_by_key("ns", "k").version == 1
        assert store.save_if("ns", entry("k", version=0), 1) is True
        assert store.load_by_key("ns", "k").version == 2

    def test_winner_replaces_by_key_and_by_entry_id(self, store: Any) -> None:
        moved = entry("a", "was a")
        store.save("ns", moved)
        store.save_if("ns", entry("k", "holder"), None)
        # The same entry_id under key k: the holder of k and the old entry are both replaced.
        again = MemoryEntry(entry_id=moved.entry_id, key="k", content="now k")
        assert store.save_if("ns", again, 1) is True
        assert snapshot(store) == [(moved.entry_id, "k", "now k", 2)]
        assert store.load_by_key("ns", "a") is None


class TestSaveIfArguments:
    """Bad arguments raise before anything is written, naming what was wrong."""

    @pytest.mark.parametrize(
        ("expected", "error", "match"),
        [
            ("1", TypeError, "expected_version must be int or None, not str"),
            (True, TypeError, "expected_version must be int or None, not bool"),
            (1.0, TypeError, "expected_version must be int or None, not float"),
            (-1, ValueError, "expected_version must be between 0 and"),
            (2**63 - 1, ValueError, "expected_version must be between 0 and"),
        ],
    )
    def test_expected_version(
        self, store: Any, expected: Any, error: type[Exception], match: str
    ) -> None:
        with pytest.raises(error, match=match):
            store.save_if("ns", entry("k"), expected)
        assert store.load("ns") == []

    def test_keyless_entry(self, store: Any) -> None:
        with pytest.raises(TypeError, match=r"entry\.key must be str, not None"):
            store.save_if("ns", entry(None), None)
        assert store.load("ns") == []

    def test_not_an_entry_and_bad_namespace(self, store: Any) -> None:
        with pytest.raises(TypeError, match="entry must be MemoryEntry"):
            store.save_if("ns", {"key": "k"}, None)
        with pytest.raises(ValueError, match="namespace"):
            store.save_if("", entry("k"), None)
        with pytest.raises(TypeError, match="namespace"):
            store.save_if(1, entry("k"), None)

    def test_the_value_rule_as_save(self, store: Any) -> None:
        with pytest.raises(UnstorableValueError, match=r"'k'.*content\['a'\]"):
            store.save_if("ns", entry("k", {"a": object()}), None)
        with pytest.raises(UnstorableValueError, match="non-finite float"):
            store.save_if("ns", entry("k", metadata={"x": float("nan")}), None)
        assert store.load("ns") == []

    def test_closed_store(self, store: Any) -> None:
        store.close()
        with pytest.raises(ValueError, match="closed"):
            store.save_if("ns", entry("k"), None)
        with pytest.raises(ValueError, match="closed"):
            store.load_range("ns", "", "z")


class TestLoadRange:
    """Unexpired keyed entries with start <= key < stop, in code-point order."""

    def test_key_order_is_code_point_order(self, store: Any) -> None:
        for key in RANGE_KEYS:
            store.save("ns", entry(key, key))
        store.save("ns", entry(None, "keyless"))
        found = store.load_range("ns", "", "\U0010ffff")
        assert [e.key for e in found] == sorted(RANGE_KEYS)
        # UTF-16 would put the emoji (a surrogate pair) before U+FFFF.
        assert [e.key for e in found][-2:] == ["\uffff", "😀"]

    def test_bounds_are_half_open(self, store: Any) -> None:
        for key in ["a", "b", "ba", "bz", "c"]:
            store.save("ns", entry(key))
        assert [e.key for e in store.load_range("ns", "b", "c")] == ["b", "ba", "bz"]
        assert [e.key for e in store.load_range("ns", "ba", "bz")] == ["ba"]
        assert store.load_range("ns", "c", "b") == []
        assert store.load_range("ns", "b", "b") == []
        assert store.load_range("other", "", "z") == []

    def test_expired_and_keyless_entries_are_left_out(self, store: Any) -> None:
        store.save("ns", entry("a"))
        store.save("ns", entry("b", expires_at=past()))
        store.save("ns", entry(None))
        store.save("ns", entry("c", expires_at=datetime.now(UTC) + timedelta(hours=1)))
        assert [e.key for e in store.load_range("ns", "", "z")] == ["a", "c"]

    def test_entries_and_versions_round_trip(self, store: Any) -> None:
        first = entry("log-0001", {"turn": 1}, metadata={"m": [1]}, importance=0.9)
        store.save("ns", first)
        store.save_if("ns", entry("log-0002", {"turn": 2}), None)
        found = store.load_range("ns", "log-0001", "log-9999")
        assert found[0] == first
        assert [(e.key, e.content, e.version) for e in found] == [
            ("log-0001", {"turn": 1}, 0),
            ("log-0002", {"turn": 2}, 1),
        ]

    def test_arguments(self, store: Any) -> None:
        with pytest.raises(TypeError, match="start must be str, not NoneType"):
            store.load_range("ns", None, "z")
        with pytest.raises(TypeError, match="stop must be str, not bytes"):
            store.load_range("ns", "a", b"z")
        with pytest.raises(ValueError, match="namespace"):
            store.load_range("", "a", "z")


class TestVersionsPersist:
    """The stored version comes back from every load, also after reopening a persistent store."""

    def test_every_load_returns_the_version(self, store: Any) -> None:
        store.save_if("ns", entry("k"), None)
        store.save_if("ns", entry("k"), 1)
        assert [e.version for e in store.load("ns")] == [2]
        assert store.load_by_key("ns", "k").version == 2
        assert [e.version for e in store.load_range("ns", "k", "l")] == [2]

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_reopened(self, impl: _backend.Implementation, tmp_path: Path, kind: str) -> None:
        def make() -> Any:
            if kind == "sqlite":
                return SQLiteStore(tmp_path / "m.sqlite3")
            return FileStore(tmp_path / "files")

        first = make()
        first.save_if("ns", entry("k"), None)
        first.save_if("ns", entry("k"), 1)
        first.close()
        again = make()
        assert again.load_by_key("ns", "k").version == 2
        assert again.save_if("ns", entry("k"), 1) is False
        assert again.save_if("ns", entry("k"), 2) is True
        again.close()


class TestAsyncTwins:
    """async_save_if and async_load_range give the sync methods' answers."""

    async def test_async(self, store: Any) -> None:
        assert await store.async_save_if("ns", entry("b"), None) is True
        assert await store.async_save_if("ns", entry("b"), None) is False
        assert await store.async_save_if("ns", entry("b"), 1) is True
        store.save("ns", entry("a"))
        found = await store.async_load_range("ns", "a", "c")
        assert [(e.key, e.version) for e in found] == [("a", 0), ("b", 2)]
        assert found == store.load_range("ns", "a", "c")


class OldStyleStore:
    """A custom store written before save_if and load_range existed."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name in {"save_if", "load_range", "async_save_if", "async_load_range"}:
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __enter__(self) -> OldStyleStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()

    async def __aenter__(self) -> OldStyleStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.inner.close()


for _name in (
    "save",
    "save_many",
    "load",
    "load_by_key",
    "delete",
    "clear",
    "namespaces",
    "cleanup_expired",
    "initialize",
    "close",
):
    # Real attributes, as a runtime protocol check looks them up on the class.
    setattr(OldStyleStore, _name, lambda self, *a, _n=_name, **k: getattr(self.inner, _n)(*a, **k))
    setattr(
        OldStyleStore,
        f"async_{_name}",
        lambda self, *a, _n=_name, **k: getattr(self.inner, f"async_{_n}")(*a, **k),
    )


class TestProtocols:
    """Every local store is a ConditionalStore; a store without the new methods is still a MemoryStore."""

    def test_local_stores_are_conditional(self, store: Any) -> None:
        assert isinstance(store, ConditionalStore)
        assert isinstance(store, MemoryStore)

    def test_old_style_store_is_still_accepted(self) -> None:
        old = OldStyleStore()
        assert isinstance(old, MemoryStore)
        assert not isinstance(old, ConditionalStore)
        MemoryManager(store=old)


class TestLegacyFiles:
    """Files written before versions existed open, load at version 0 and take conditional writes."""

    def test_sqlite_file_without_the_version_column(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        path = tmp_path / "old.sqlite3"
        make_legacy_file(path, [("e1", "k1"), ("e2", None)])
        store = SQLiteStore(path)
        assert [(e.entry_id, e.key, e.version) for e in store.load("a")] == [
            ("e1", "k1", 0),
            ("e2", None, 0),
        ]
        assert store.save_if("a", entry("k1", "new"), None) is False
        assert store.save_if("a", entry("k1", "new"), 0) is True
        assert [e.content for e in store.load_range("a", "k", "l")] == ["new"]
        store.close()

    def test_file_store_doc_without_version(self, tmp_path: Path) -> None:
        doc: dict[str, Any] = {
            "entry_id": "e1",
            "scope": "working",
            "key": "k1",
            "content": "old",
            "metadata": {},
            "created_at": "2024-01-01T00:00:00+00:00",
            "expires_at": None,
            "importance": 0.5,
        }
        (tmp_path / namespace_filename("a")).write_text(
            json.dumps({"namespace": "a", "entries": [doc]}), encoding="utf-8"
        )
        store = FileStore(tmp_path)
        found = store.load_by_key("a", "k1")
        assert found is not None
        assert found.version == 0
        assert store.save_if("a", entry("k1", "new"), 0) is True
        text = (tmp_path / namespace_filename("a")).read_text(encoding="utf-8")
        saved = [json.loads(line)["entry"] for line in text.splitlines()[1:]]
        assert [(d["content"], d["version"]) for d in saved] == [("new", 1)]


class TestFileStoreLockFile:
    """The lock file lives in the store's directory and is never taken for a namespace."""

    def test_lock_file_is_not_a_namespace(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        store.save("ns", entry("k"))
        assert (tmp_path / LOCK_FILENAME).exists()
        # Another process's temporary file, caught mid-write, is not one either.
        (tmp_path / ".tmp-abc.json").write_text("{", encoding="utf-8")
        assert store.namespaces() == ["ns"]
        assert store.cleanup_expired() == 0


class TestFileStoreRangeOfAnUnchangedFile:
    """An empty range of a file nobody changed is answered without parsing it again."""

    def test_a_writer_elsewhere_is_seen_and_no_news_reads_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        reader, writer = FileStore(tmp_path), FileStore(tmp_path)
        writer.save("ns", entry("log:1"))
        assert [e.key for e in reader.load_range("ns", "log:2", "log;")] == []
        reads: list[str] = []
        parse = FileStore._read_stamped

        def counted(self: FileStore, namespace: str) -> Any:
            if self is reader:
                reads.append(namespace)
            return parse(self, namespace)

        monkeypatch.setattr(FileStore, "_read_stamped", counted)
        assert reader.load_range("ns", "log:2", "log;") == []
        assert reads == []  # unchanged: one stat
        writer.save("ns", entry("log:2"))  # another store object, as another process would
        assert [e.key for e in reader.load_range("ns", "log:2", "log;")] == ["log:2"]
        assert reads == ["ns"]
        assert [e.key for e in reader.load_range("ns", "log:1", "log:2")] == ["log:1"]

    def test_a_missing_file_is_an_empty_range(self, tmp_path: Path) -> None:
        assert FileStore(tmp_path).load_range("nothing", "a", "b") == []


class TestThreadsRacing:
    """Threads of one process: one winner per key, and no increment lost."""

    def test_one_winner(self, store: Any) -> None:
        wins: list[int] = []
        barrier = threading.Barrier(8)

        def race(worker: int) -> None:
            barrier.wait()
            if store.save_if("ns", entry("k", worker), None):
                wins.append(worker)

        threads = [threading.Thread(target=race, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert store.load_by_key("ns", "k").content == wins[0]

    def test_counter(self, store: Any) -> None:
        def increment() -> None:
            for _ in range(25):
                while True:
                    held = store.load_by_key("ns", "counter")
                    value = 0 if held is None else held.content
                    version = None if held is None else held.version
                    if store.save_if("ns", entry("counter", value + 1), version):
                        break

        threads = [threading.Thread(target=increment) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        found = store.load_by_key("ns", "counter")
        assert (found.content, found.version) == (100, 100)


# ---------------------------------------------------------------------------- processes

WORKER = r"""
import json, sys
from memlane import FileStore, MemoryEntry, SQLiteStore, _backend

cfg = json.loads(sys.argv[1])
with _backend.use(cfg["backend"]):
    store = SQLiteStore(cfg["path"]) if cfg["kind"] == "sqlite" else FileStore(cfg["path"])
store.load("warm-up")
print("ready", flush=True)
assert sys.stdin.readline() == "go\n"
ns, label, count = "shared", cfg["label"], cfg["count"]
result = None
if cfg["mode"] == "save":
    for i in range(count):
        store.save(ns, MemoryEntry(key=f"{label}-{i}", content=i))
elif cfg["mode"] == "race":
    result = [
        k for k in range(count)
        if store.save_if(ns, MemoryEntry(key=f"key-{k}", content=label), None)
    ]
else:
    retries = 0
    for _ in range(count):
        while True:
            held = store.load_by_key(ns, "counter")
            value, version = (0, None) if held is None else (held.content, held.version)
            if store.save_if(ns, MemoryEntry(key="counter", content=value + 1), version):
                break
            retries += 1
    result = retries
store.close()
print(json.dumps(result), flush=True)
"""


def run_workers(kind: str, path: Path, mode: str, count: int, workers: int) -> list[Any]:
    """Starts ``workers`` processes on one store, releases them together, returns their results."""
    names = backends()
    cfgs = [
        {
            "kind": kind,
            "path": str(path),
            "mode": mode,
            "count": count,
            "label": f"w{w}",
            "backend": names[w % len(names)],
        }
        for w in range(workers)
    ]
    with started(WORKER, cfgs, env=either_backend_env()) as procs:
        return release_together(procs)


def store_at(kind: str, path: Path) -> Any:
    return SQLiteStore(path) if kind == "sqlite" else FileStore(path)


def location(kind: str, tmp_path: Path) -> Path:
    return tmp_path / "m.sqlite3" if kind == "sqlite" else tmp_path / "files"


class TestProcessesSharingOneStore:
    """Real processes on one file or directory: no acknowledged write lost, one winner per key, exact counts."""

    def test_file_store_keeps_every_acknowledged_save(self, tmp_path: Path) -> None:
        path = location("file", tmp_path)
        run_workers("file", path, "save", count=150, workers=2)
        store = FileStore(path)
        keys = {e.key for e in store.load("shared")}
        assert keys == {f"w{w}-{i}" for w in range(2) for i in range(150)}

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_one_winner_per_key(self, tmp_path: Path, kind: str) -> None:
        path = location(kind, tmp_path)
        wins = run_workers(kind, path, "race", count=20, workers=4)
        winners = {k: [f"w{w}" for w, won in enumerate(wins) if k in won] for k in range(20)}
        assert all(len(names) == 1 for names in winners.values()), winners
        store = store_at(kind, path)
        for k, (name,) in winners.items():
            held = store.load_by_key("shared", f"key-{k}")
            assert (held.content, held.version) == (name, 1)
        store.close()

    @pytest.mark.parametrize("kind", ["sqlite", "file"])
    def test_counter_loses_no_increment(self, tmp_path: Path, kind: str) -> None:
        path = location(kind, tmp_path)
        run_workers(kind, path, "count", count=30, workers=3)
        store = store_at(kind, path)
        held = store.load_by_key("shared", "counter")
        assert (held.content, held.version) == (90, 90)
        store.close()
