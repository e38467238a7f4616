"""SQLite tables build entries from rows without validation: the Rust builder, its twin
(``memlane._pure.store.build_entry``) and ``row_to_entry`` agree on every row.

A row the builders do not take for certain comes back as the row itself, and the store decodes
it with ``row_to_entry``; so whatever path a row takes, ``SQLiteStore`` returns the same entry
or raises the same ``CorruptStoreError``.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import require_rust_core
from memlane import _backend
from memlane._pure import entry_builder
from memlane._pure import store as pure
from memlane.errors import CorruptStoreError
from memlane.store import SQLiteStore
from memlane.stores.protocol import row_to_entry
from memlane.stores.sqlite import ENTRY_KIT
from memlane.types import MemoryEntry, MemoryScope

CREATED = "2024-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def tables() -> Iterator[tuple[Any, Any]]:
    directory = Path(tempfile.mkdtemp(prefix="memlane-entries-"))
    rust = require_rust_core().SqliteTable(str(directory / "rust.sqlite3"))
    py = pure.SqliteTable(str(directory / "python.sqlite3"))
    yield rust, py
    rust.close()
    py.close()
    shutil.rmtree(directory, ignore_errors=True)


def snapshot(entry: Any) -> Any:
    """Everything an entry holds, with the exact types of its values (``1 == 1.0 == True``)."""
    if isinstance(entry, MemoryEntry):
        return (
            type(entry),
            [(k, snapshot(v)) for k, v in entry.__dict__.items()],
            sorted(entry.__pydantic_fields_set__),
            entry.__pydantic_extra__,
            entry.__pydantic_private__,
        )
    if isinstance(entry, dict):
        return (dict, [(snapshot(k), snapshot(v)) for k, v in entry.items()])
    if isinstance(entry, list):
        return (list, [snapshot(v) for v in entry])
    if isinstance(entry, float) and math.isnan(entry):
        return (float, "nan")
    if hasattr(entry, "tzinfo"):
        return (type(entry), entry, entry.tzinfo)
    return (type(entry), entry)


def outcome(items: list[Any], odd: list[int]) -> Any:
    """The entries a store returns for ``(items, odd)``, or the error it raises."""
    try:
        for i in odd:
            items[i] = row_to_entry(items[i], "file")
    except Exception as exc:  # noqa: BLE001 - the point is to compare any failure
        return ("raised", type(exc), str(exc))
    return ("ok", [snapshot(e) for e in items])


def reference(rows: list[pure.Row]) -> Any:
    try:
        return ("ok", [snapshot(row_to_entry(r, "file")) for r in rows])
    except Exception as exc:  # noqa: BLE001 - the point is to compare any failure
        return ("raised", type(exc), str(exc))


def check(tables: tuple[Any, Any], rows: list[pure.Row]) -> None:
    """Both tables, loading ``rows``, give what ``row_to_entry`` gives, by every read."""
    for table in tables:
        table.clear("n")
        table.save_many("n", rows)
    expected = reference(rows)
    for table in tables:
        assert outcome(*table.load_entries("n", 0.0, ENTRY_KIT)) == expected
        keyed = [r for r in rows if r[2] is not None]
        assert outcome(*table.load_range_entries("n", "", "\U0010ffff", 0.0, ENTRY_KIT)) == (
            reference(sorted(keyed, key=lambda r: str(r[2])))
        )
        for r in keyed:
            found = table.load_by_key_entry("n", r[2], 0.0, ENTRY_KIT)
            odd = [0] if type(found) is tuple else []
            assert outcome([found], odd) == reference([r])
        assert table.load_by_key_entry("n", "absent", 0.0, ENTRY_KIT) is None


def row(
    content: str = '{"a":1}',
    *,
    metadata: str = "{}",
    scope: str = "working",
    key: str | None = "k",
    created_at: str = CREATED,
    expires_at: float | None = None,
    importance: float = 0.5,
    version: int = 0,
    entry_id: str = "e",
) -> pure.Row:
    return (entry_id, scope, key, content, metadata, created_at, expires_at, importance, version)


# JSON texts json.dumps writes and ones it never writes (hand-edited or damaged files).
ODD_JSON = [
    "0",
    "-0",
    "-0.0",
    "1E5",
    "1e-400",
    "1e400",
    "-1.5e+3",
    str(2**63),
    str(-(2**63)),
    str(2**63 - 1),
    "123456789012345678901234567890",
    "NaN",
    "[Infinity, -Infinity]",
    '"\\ud800"',
    '"\\udc00\\ud800"',
    '"\\ud83d\\ude00 \\u00e9\\/\\b\\f\\n\\r\\t\\"\\\\"',
    '"\\u12"',
    '"\\x"',
    '"a\tb"',
    '"\x7f"',
    ' \n\t{ "a" : [ 1 , 2 ] } \r',
    '{"a":1,"a":2,"b":3}',
    "[01]",
    "01",
    "[1,]",
    '{"a":1,}',
    "[1 2]",
    "1.",
    ".5",
    "-",
    "tru",
    "true false",
    "",
    "[" * 300 + "]" * 300,
    "[" * 150 + "]" * 150,
    '{"": null, "t": true, "f": false, "l": [], "d": {}}',
    '"😀é\\u0000"',
]


@pytest.mark.parametrize("text", ODD_JSON)
def test_json_decodes_as_json_loads_or_is_left_to_it(tables: tuple[Any, Any], text: str) -> None:
    check(tables, [row(text), row(metadata=text, key="m", entry_id="m")])


@pytest.mark.parametrize(
    "odd",
    [
        row(scope="nope"),
        row(scope="long_term"),
        row(created_at="2024-01-01"),
        row(created_at="2024-01-01T00:00:00.5+02:00"),
        row(created_at="2024-13-01T00:00:00+00:00"),
        row(created_at="not a date"),
        row(expires_at=1e300),
        row(expires_at=1_700_000_000.123456),
        row(expires_at=1.0),
        row(version=-1),
        row(version=2**63 - 1),
        row(importance=1.0),
        row(key=None),
    ],
)
def test_odd_fields_agree(tables: tuple[Any, Any], odd: pure.Row) -> None:
    check(tables, [odd])


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.tuples(json_values, st.booleans(), st.booleans()), min_size=1, max_size=6)
)
def test_any_json_value_round_trips_alike(
    tables: tuple[Any, Any], values: list[tuple[Any, bool, bool]]
) -> None:
    rows = []
    for i, (value, ascii_only, spaced) in enumerate(values):
        separators = (", ", ": ") if spaced else (",", ":")
        # ensure_ascii spells lone surrogates as escapes, which SQLite can store.
        text = json.dumps(value, ensure_ascii=True, separators=separators)
        if not ascii_only:
            try:
                text.encode("utf-8")
                text = json.dumps(value, ensure_ascii=False, separators=separators)
                text.encode("utf-8")
            except UnicodeEncodeError:
                text = json.dumps(value, ensure_ascii=True, separators=separators)
        rows.append(row(text, key=f"k{i}", entry_id=f"e{i}"))
    check(tables, rows)


def test_built_entries_are_model_construct_entries(tables: tuple[Any, Any]) -> None:
    r = row('{"x":[1,2.5,"s"]}', metadata='{"search_text":"t"}', expires_at=1_800_000_000.25)
    for table in tables:
        table.clear("n")
        table.save("n", r)
    built = [t.load_by_key_entry("n", "k", 0.0, ENTRY_KIT) for t in tables]
    expected = MemoryEntry.model_construct(**row_to_entry(r, "file").__dict__)
    for entry in built:
        assert type(entry) is MemoryEntry
        assert snapshot(entry) == snapshot(expected)
        assert entry == expected
        assert entry.scope is MemoryScope.WORKING
        # A built entry is an ordinary model: assignment validates, copies are independent.
        entry.importance = 0.75
        with pytest.raises(ValueError, match="importance"):
            entry.importance = 2.0
        assert (
            entry.model_copy(update={"key": "other"}).model_fields_set == expected.model_fields_set
        )
    assert built[0].__pydantic_fields_set__ is not built[1].__pydantic_fields_set__


@pytest.mark.parametrize("enabled", [True, False])
def test_a_bulk_load_leaves_the_collector_as_it_was(tables: tuple[Any, Any], enabled: bool) -> None:
    rows = [row(key=f"k{i}", entry_id=f"e{i}") for i in range(200)] + [row("NaN", key=None)]
    for table in tables:
        table.clear("n")
        table.save_many("n", rows)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        for table in tables:
            items, odd = table.load_entries("n", 0.0, ENTRY_KIT)
            assert len(items) == 201
            assert odd in ([], [200])  # the twin's json.loads takes NaN, the Rust builder not
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize("backend", ["rust", "python"])
def test_the_store_names_the_file_for_a_corrupt_row(
    tmp_path: Path, backend: _backend.BackendName
) -> None:
    with _backend.use(backend):
        store = SQLiteStore(tmp_path / "s.sqlite3")
    store._table.save_many("n", [row(), row("{oops", key="j", entry_id="bad")])
    with pytest.raises(CorruptStoreError, match=r"corrupt entry 'bad' in .*s\.sqlite3"):
        store.load("n")
    with pytest.raises(CorruptStoreError, match="corrupt entry 'bad'"):
        store.load_by_key("n", "j")
    with pytest.raises(CorruptStoreError, match="corrupt entry 'bad'"):
        store.load_range("n", "a", "z")
    assert store.load_by_key("n", "k") == row_to_entry(row(), "x")
    store.close()


def test_both_builders_set_the_fields_memory_entry_declares() -> None:
    core = require_rust_core()
    assert core.ENTRY_FIELDS == entry_builder._ENTRY_FIELDS == tuple(MemoryEntry.model_fields)


def test_a_bulk_load_keeps_frozen_objects_frozen(tables: tuple[Any, Any]) -> None:
    """Large batches join the oldest generation by ``gc.freeze()`` and ``gc.unfreeze()``,
    but only when nothing else is frozen."""
    rows = [row(key=f"k{i}", entry_id=f"e{i}") for i in range(1100)]
    for table in tables:
        table.clear("n")
        table.save_many("n", rows)
    held = [[i] for i in range(50)]  # tracked objects of the program's own
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        for table in tables:
            items, _ = table.load_entries("n", 0.0, ENTRY_KIT)
            assert len(items) == 1100
            assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    for table in tables:
        table.load_entries("n", 0.0, ENTRY_KIT)
        # Unfrozen, a bulk load leaves nothing frozen behind it.
        assert gc.get_freeze_count() == 0
    assert held[49] == [49]


@settings(max_examples=40, deadline=None)
@given(
    picks=st.lists(
        st.tuples(
            st.sampled_from(["a", "bench", "t3", "x" * 32, "y" * 33, "é😀", "note"]),
            st.sampled_from([0.0, 0.5, 0.5, 1.0, 0.25]),
            st.sampled_from(["working", "long_term", "short_term", "nope"]),
            st.booleans(),
        ),
        min_size=65,
        max_size=90,
    )
)
def test_a_batch_shares_nothing_mutable(
    tables: tuple[Any, Any], picks: list[tuple[str, float, str, bool]]
) -> None:
    """Rows repeating short strings, importances and scopes (shared within a batch by the
    Rust builder), with odd rows among them, load as ``row_to_entry`` decodes each alone."""
    rows = [
        row(
            json.dumps({text: [text, i]}) if good else "NaN",
            metadata=json.dumps({"tag": text}),
            scope=scope,
            importance=importance,
            key=f"k{i}",
            entry_id=f"e{i}",
        )
        for i, (text, importance, scope, good) in enumerate(picks)
    ]
    check(tables, rows)
    items, odd = tables[0].load_entries("n", 0.0, ENTRY_KIT)
    built = [e for i, e in enumerate(items) if i not in odd]
    for entry in built:
        entry.content["mine"] = entry.entry_id
        entry.model_fields_set.discard("key")
    assert all(e.content["mine"] == e.entry_id for e in built)
    assert len({id(e.content) for e in built}) == len(built)
    assert len({id(e.__pydantic_fields_set__) for e in built}) == len(built)


def test_a_subclass_kit_builds_the_subclass(tables: tuple[Any, Any]) -> None:
    class Tagged(MemoryEntry):
        pass

    kit = (Tagged, *ENTRY_KIT[1:])
    rows = [row(key=f"k{i}", entry_id=f"e{i}") for i in range(70)]
    for table in tables:
        table.clear("n")
        table.save_many("n", rows)
        items, odd = table.load_entries("n", 0.0, kit)
        assert odd == []
        assert all(type(e) is Tagged for e in items)
        assert [e.__dict__ for e in items] == [row_to_entry(r, "f").__dict__ for r in rows]
        # The store's own kit still builds MemoryEntry objects afterwards.
        items, _ = table.load_entries("n", 0.0, ENTRY_KIT)
        assert all(type(e) is MemoryEntry for e in items)
