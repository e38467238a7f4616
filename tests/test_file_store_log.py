"""FileStore keeps each namespace as a JSON-lines log: readable, compacted, crash-safe, shared.

The whole-file format of earlier versions is read and migrated; a write costs one line however
large the namespace; several real processes append and read one directory.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memlane import CorruptStoreError, FileStore, MemoryEntry
from memlane.stores import _file_log
from memlane.stores.file import namespace_filename
from worker_processes import release_together, started


def entry(key: str | None, content: Any = "v", **kw: Any) -> MemoryEntry:
    return MemoryEntry(key=key, content=content, **kw)


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class TestTheFileIsJsonLines:
    """Each line is one JSON object a human can read: a header, then puts and deletes."""

    def test_header_puts_and_deletes(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        first = entry("greeting", "héllo ✓")
        store.save("notes", first)
        store.save_many("notes", [entry("a", 1), entry("b", {"x": [1, 2]})])
        assert store.delete("notes", first.entry_id)
        path = tmp_path / namespace_filename("notes")
        text = path.read_text(encoding="utf-8")
        assert "héllo ✓" in text  # not escaped
        header, put, put_many, delete = lines_of(path)
        assert header["memlane"] == "namespace log"
        assert (header["format"], header["namespace"]) == (1, "notes")
        assert (put["op"], put["entry"]["key"], put["entry"]["content"]) == (
            "put",
            "greeting",
            "héllo ✓",
        )
        assert [d["key"] for d in put_many["entries"]] == ["a", "b"]
        assert delete == {"op": "delete", "entry_id": first.entry_id}
        assert [e.key for e in FileStore(tmp_path).load("notes")] == ["a", "b"]

    def test_replacing_keeps_the_insertion_position(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        kept = entry("a", 1)
        store.save_many("ns", [kept, entry("b", 2), entry("c", 3)])
        store.save("ns", kept.model_copy(update={"content": 10}))
        store.save("ns", entry("b", 20))  # another entry_id takes the key: it moves to the end
        fresh = FileStore(tmp_path)
        assert [(e.key, e.content) for e in fresh.load("ns")] == [("a", 10), ("c", 3), ("b", 20)]
        assert [(e.key, e.content) for e in store.load("ns")] == [("a", 10), ("c", 3), ("b", 20)]

    def test_deleting_the_last_entry_removes_the_file(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        only = entry("k")
        store.save("ns", only)
        assert store.delete("ns", only.entry_id)
        assert not (tmp_path / namespace_filename("ns")).exists()
        assert store.namespaces() == []


class TestCompaction:
    """A log grown to twice its live entries is rewritten with only them, nothing lost."""

    def test_overwrites_are_compacted_and_everything_kept(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = FileStore(tmp_path)
        store.save_many("ns", [entry(f"k{i:02d}", i) for i in range(20)])
        path = tmp_path / namespace_filename("ns")
        rewrites: list[int] = []
        rewrite = FileStore._rewrite

        def counted(self: FileStore, *args: Any) -> None:
            rewrites.append(path.stat().st_size)
            rewrite(self, *args)

        monkeypatch.setattr(FileStore, "_rewrite", counted)
        big = "x" * 1000
        sizes = []
        for round_ in range(200):
            store.save("ns", entry("hot", f"{round_} {big}"))
            sizes.append(path.stat().st_size)
        # 200 KB appended: compacted each time the log reached 64 KiB, and only then.
        assert len(rewrites) >= 2
        assert min(rewrites) >= _file_log.COMPACT_MIN_BYTES - 2000
        assert max(sizes) < 2 * _file_log.COMPACT_MIN_BYTES
        assert any(after < before for before, after in itertools.pairwise(sizes))
        expected = [(f"k{i:02d}", i) for i in range(20)] + [("hot", f"199 {big}")]
        assert [(e.key, e.content) for e in store.load("ns")] == expected
        assert [(e.key, e.content) for e in FileStore(tmp_path).load("ns")] == expected
        # The compacted file holds one put per live entry.
        records = lines_of(path)[1:]
        assert all(r["op"] == "put" for r in records)
        assert len(records) <= 21 + 64  # live entries, and what was appended since

    def test_cleanup_expired_compacts(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        past = datetime.now(UTC) - timedelta(seconds=1)
        store.save_many("ns", [entry("old", 1, expires_at=past), entry("new", 2)])
        assert store.cleanup_expired() == 1
        records = lines_of(tmp_path / namespace_filename("ns"))[1:]
        assert [r["entry"]["key"] for r in records] == ["new"]


def legacy_doc(key: str | None, content: Any, **kw: Any) -> dict[str, Any]:
    doc = {
        "entry_id": f"id-{key}",
        "scope": "working",
        "key": key,
        "content": content,
        "metadata": {},
        "created_at": "2024-01-01T00:00:00+00:00",
        "expires_at": None,
        "importance": 0.5,
    }
    doc.update(kw)
    return doc


class TestOldFormatFiles:
    """A whole-file namespace of an earlier version is read as it is and migrated by a write."""

    def write_legacy(self, tmp_path: Path) -> Path:
        docs = [
            legacy_doc("b", "first"),
            legacy_doc(None, "keyless"),
            legacy_doc("a", {"nested": ["ü"]}, version=3),
            legacy_doc("gone", 1, expires_at="2000-01-01T00:00:00+00:00"),
        ]
        path = tmp_path / namespace_filename("old")
        # As the earlier version wrote it: indented, non-ASCII kept, no final newline.
        path.write_text(
            json.dumps({"namespace": "old", "entries": docs}, ensure_ascii=False, indent=2),
            encoding="utf-8",
        )
        return path

    def test_read_then_migrated_by_the_first_write(self, tmp_path: Path) -> None:
        path = self.write_legacy(tmp_path)
        store = FileStore(tmp_path)
        assert store.namespaces() == ["old"]
        assert [e.content for e in store.load("old")] == ["first", "keyless", {"nested": ["ü"]}]
        held = store.load_by_key("old", "a")
        assert held is not None
        assert held.version == 3
        assert [e.key for e in store.load_range("old", "a", "c")] == ["a", "b"]
        assert path.read_text(encoding="utf-8").startswith("{\n")  # reading changed nothing
        store.save("old", entry("c", "added"))
        header, *records = lines_of(path)
        assert header["namespace"] == "old"
        assert [r["entry"]["key"] for r in records] == ["b", None, "a", "gone", "c"]
        for reader in (store, FileStore(tmp_path)):
            assert [e.key for e in reader.load("old")] == ["b", None, "a", "c"]
            assert reader.namespaces() == ["old"]

    def test_a_reader_sees_another_store_migrate(self, tmp_path: Path) -> None:
        self.write_legacy(tmp_path)
        reader, writer = FileStore(tmp_path), FileStore(tmp_path)
        assert len(reader.load("old")) == 3
        writer.save("old", entry("b", "second"))
        # Another entry took the key "b": the old holder went, the new one is last.
        assert [e.content for e in reader.load("old")][::2] == ["keyless", "second"]


class TestTornTail:
    """A last line a crash cut short is ignored, and cut off by the next write."""

    def test_partial_line_is_ignored_then_truncated(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        store.save_many("ns", [entry("a", 1), entry("b", 2)])
        path = tmp_path / namespace_filename("ns")
        intact = path.read_bytes()
        with path.open("ab") as fh:  # what a crash in the middle of an append leaves
            fh.write(b'{"op": "put", "entry": {"entry_id": "torn", "key": "c", "cont')
        for reader in (store, FileStore(tmp_path)):
            assert [e.key for e in reader.load("ns")] == ["a", "b"]
            assert reader.load_by_key("ns", "c") is None
        store.save("ns", entry("c", 3))
        text = path.read_bytes()
        assert text.startswith(intact)
        assert b"torn" not in text
        assert text.endswith(b"\n")
        assert [r["op"] for r in lines_of(path)[1:]] == ["put", "put", "put"]
        assert [e.key for e in FileStore(tmp_path).load("ns")] == ["a", "b", "c"]

    def test_a_torn_tail_seen_by_a_reader_is_read_once_complete(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        store.save("ns", entry("a", 1))
        path = tmp_path / namespace_filename("ns")
        line = _file_log.encode_put([_file_log.document(entry("b", 2))])
        with path.open("ab") as fh:  # another process caught mid-append
            fh.write(line[:10])
        reader = FileStore(tmp_path)
        assert [e.key for e in reader.load("ns")] == ["a"]
        with path.open("ab") as fh:
            fh.write(line[10:])
        assert [e.key for e in reader.load("ns")] == ["a", "b"]

    def test_a_complete_bad_line_is_corruption(self, tmp_path: Path) -> None:
        store = FileStore(tmp_path)
        store.save("ns", entry("a", 1))
        path = tmp_path / namespace_filename("ns")
        with path.open("ab") as fh:
            fh.write(b"{ not json\n")
        before = path.read_bytes()
        with pytest.raises(CorruptStoreError, match=path.name):
            FileStore(tmp_path).load("ns")
        with pytest.raises(CorruptStoreError):
            store.save("ns", entry("b", 2))
        assert path.read_bytes() == before


class TestAWriteCostsOneLine:
    """A set at 10,000 keys appends one line: the file grows by as much as at 100 keys."""

    def written_per_set(self, tmp_path: Path, size: int, monkeypatch: pytest.MonkeyPatch) -> int:
        store = FileStore(tmp_path / str(size))
        store.save_many("ns", [entry(f"key-{i:05d}", i) for i in range(size)])
        path = tmp_path / str(size) / namespace_filename("ns")

        def no_parse(namespace: str, data: bytes) -> Any:
            raise AssertionError("the whole file was read again")

        def no_rewrite(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the whole file was rewritten")

        monkeypatch.setattr("memlane.stores.file.parse", no_parse)
        monkeypatch.setattr(FileStore, "_rewrite", no_rewrite)
        before = path.stat().st_size
        for i in range(0, size, size // 20):
            store.save("ns", entry(f"key-{i:05d}", -i))
            held = store.load_by_key("ns", f"key-{i:05d}")
            assert held is not None
            assert held.content == -i
        monkeypatch.undo()
        return (path.stat().st_size - before) // 20

    def test_bytes_per_set_do_not_grow(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        small = self.written_per_set(tmp_path, 100, monkeypatch)
        large = self.written_per_set(tmp_path, 10_000, monkeypatch)
        assert 0 < small < 1024
        assert large <= small + 20  # the same line; only the digits of the key and value differ


WORKER = r"""
import json, sys, time
cfg = json.loads(sys.argv[1])
from memlane import FileStore, MemoryEntry

store = FileStore(cfg["path"])
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
if cfg["role"] == "writer":
    label, pad = cfg["label"], "x" * 500
    for i in range(cfg["count"]):
        store.save("shared", MemoryEntry(key=f"{label}-{i}", content=i))
        store.save("shared", MemoryEntry(key=f"hot-{label}", content=f"{i} {pad}"))
    print(json.dumps({"done": True}), flush=True)
else:
    want = set(cfg["want"])
    seen, polls, shrank = set(), 0, False
    deadline = time.monotonic() + 100
    while not want <= seen and time.monotonic() < deadline:
        now = {e.key for e in store.load("shared") if not e.key.startswith("hot-")}
        shrank = shrank or not seen <= now
        seen = now
        polls += 1
    print(json.dumps({"seen": sorted(seen), "polls": polls, "shrank": shrank}), flush=True)
"""


class TestProcessesAppendingAndReading:
    """Two processes append (and compact) while a third reads: it sees every write, none lost."""

    def test_two_writers_and_a_reader(self, tmp_path: Path) -> None:
        count = 150
        want = [f"w{w}-{i}" for w in range(2) for i in range(count)]
        configs: list[dict[str, Any]] = [
            {"role": "writer", "label": "w0", "count": count},
            {"role": "writer", "label": "w1", "count": count},
            {"role": "reader", "want": want},
        ]
        cfgs = [{**cfg, "path": str(tmp_path)} for cfg in configs]
        with started(WORKER, cfgs) as procs:
            results = release_together(procs)
        reader = results[2]
        assert reader["seen"] == sorted(want)
        assert reader["shrank"] is False  # a write once seen never disappears
        final = FileStore(tmp_path).load("shared")
        assert {e.key for e in final} == {*want, "hot-w0", "hot-w1"}
        # The hot keys were rewritten often enough that the log was compacted meanwhile.
        path = tmp_path / namespace_filename("shared")
        assert path.stat().st_size < 4 * _file_log.COMPACT_MIN_BYTES
