"""``SQLiteStore.load_content_by_key``: a keyed entry's id, version and stored JSON text.

For readers that decode the text themselves (a fact read straight from its row): no entry is
built. It answers exactly what ``load_by_key`` answers (the same entry, or none, at the same
moment), with ``content`` as the text the row holds; the Rust table and its twin answer alike.
"""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memlane import _backend
from memlane.errors import StoreClosedError
from memlane.stores import SQLiteStore
from memlane.types import MemoryEntry, MemoryScope

NS = "long_term:user:u1:facts"

LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)

VALUES: list[Any] = [
    {"value": "tea", "n": 1},
    {"nested": {"list": [1, 2.5, None, True], "é": "ünïcode ✓ 😀"}},
    'a plain string with "quotes" and \\ backslashes\n',
    [],
    0,
    -7.25,
    None,
]


def fill(store: SQLiteStore, rng: random.Random) -> None:
    """Keys written, rewritten by compare-and-swap, expired, taken over and deleted."""
    for step in range(120):
        key = f"k{rng.randrange(30):02d}"
        value = rng.choice(VALUES)
        roll = rng.random()
        if roll < 0.1:
            held = store.load_by_key(NS, key)
            if held is not None:
                store.delete(NS, held.entry_id)
            continue
        entry = MemoryEntry(
            scope=MemoryScope.LONG_TERM,
            key=key,
            content={"step": step, "value": value},
            # A few expired the moment they are written: answered as missing.
            expires_at=LONG_AGO if roll > 0.93 else None,
        )
        if roll < 0.6:
            held = store.load_by_key(NS, key)
            assert store.save_if(NS, entry, None if held is None else held.version)
        else:
            store.save(NS, entry)


def answers(store: SQLiteStore) -> dict[str, tuple[str, int, str] | None]:
    return {f"k{i:02d}": store.load_content_by_key(NS, f"k{i:02d}") for i in range(32)}


class TestContentByKey:
    """The same answer as load_by_key, its content as stored text, on both implementations."""

    def test_is_load_by_key_without_the_entry(
        self, impl: _backend.Implementation, tmp_path: Path
    ) -> None:
        with SQLiteStore(tmp_path / "f.sqlite3") as store:
            fill(store, random.Random(5))
            found = answers(store)
            assert any(v is None for v in found.values())
            assert sum(v is not None for v in found.values()) > 10
            assert any(v is not None and v[1] > 1 for v in found.values())  # rewritten by CAS
            for key, answer in found.items():
                entry = store.load_by_key(NS, key)
                if entry is None:
                    assert answer is None
                    continue
                assert answer is not None
                entry_id, version, text = answer
                assert (entry_id, version) == (entry.entry_id, entry.version)
                assert type(text) is str
                assert json.loads(text) == entry.content

    @pytest.mark.twins
    def test_both_tables_answer_alike_on_one_file(self, tmp_path: Path) -> None:
        """One file written by each implementation in turn, read by both: the same tuples."""
        path = tmp_path / "f.sqlite3"
        rng = random.Random(11)
        names: tuple[_backend.BackendName, ...] = ("rust", "python", "rust")
        for name in names:
            with _backend.use(name), SQLiteStore(path) as store:
                fill(store, rng)
        seen = {}
        for name in names[:2]:
            with _backend.use(name), SQLiteStore(path, read_only=True) as reader:
                assert type(reader._table).__module__.startswith(
                    "memlane._core" if name == "rust" else "memlane._pure"
                )
                seen[name] = answers(reader)
        assert seen["rust"] == seen["python"]
        assert any(v is not None for v in seen["rust"].values())

    def test_async_and_argument_checks(self, impl: _backend.Implementation, tmp_path: Path) -> None:
        store = SQLiteStore(tmp_path / "f.sqlite3")
        store.save(NS, MemoryEntry(scope=MemoryScope.LONG_TERM, key="k", content={"v": 1}))
        found = asyncio.run(store.async_load_content_by_key(NS, "k"))
        assert found is not None
        assert found == store.load_content_by_key(NS, "k")
        assert found[1:] == (0, '{"v":1}')
        with pytest.raises(TypeError, match="namespace"):
            store.load_content_by_key(3, "k")  # type: ignore[arg-type]  # checked at run time
        with pytest.raises(TypeError, match="key"):
            store.load_content_by_key(NS, None)  # type: ignore[arg-type]  # checked at run time
        with pytest.raises(ValueError, match="namespace"):
            store.load_content_by_key("", "k")
        store.close()
        with pytest.raises(StoreClosedError):
            store.load_content_by_key(NS, "k")
