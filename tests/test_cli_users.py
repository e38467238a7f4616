"""``memlane delete facts|episodes --user`` names a user as every other ``--user`` does: an
id, a merged id, ``channel:id`` or a display name; a name several users share is refused
(exit 1) with the candidates listed, and nothing is deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane import MemoryManager, SQLiteStore
from memlane.cli import main
from memlane.longterm import LongTermMemory
from operator_data import Filled, fill


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, Filled, Path]:
    """A SQLite store with one of every record."""
    path = tmp_path / "users.sqlite3"
    sqlite = SQLiteStore(str(path))
    filled = fill(MemoryManager(store=sqlite, long_term=True))
    sqlite.close()
    return f"sqlite:///{path}", filled, path


def _run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--store", url])
    out, err = capsys.readouterr()
    return code, out, err


def _long_term(path: Path) -> tuple[SQLiteStore, LongTermMemory]:
    sqlite = SQLiteStore(str(path))
    return sqlite, LongTermMemory(sqlite)


class TestDeleteByUser:
    """``--user`` on delete takes every name of a user."""

    @pytest.mark.parametrize("form", ["id", "telegram:1001", "ada"])
    def test_every_form(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str], form: str
    ) -> None:
        url, filled, path = store
        text = filled.user_id if form == "id" else form
        code, out, _ = _run(capsys, url, "delete", "facts", "--user", text, "--yes")
        assert (code, out) == (0, "deleted 2 facts\n")
        code, out, _ = _run(capsys, url, "delete", "episodes", "--user", text, "--yes")
        assert (code, out) == (0, "deleted 1 episode\n")
        sqlite, long_term = _long_term(path)
        try:
            assert long_term.facts(scope="user", scope_id=filled.user_id) == []
            assert [f.key for f in long_term.facts(scope="user")] == ["timezone"]  # Bob's
        finally:
            sqlite.close()

    def test_a_merged_id(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        url, filled, path = store
        sqlite, long_term = _long_term(path)
        long_term.merge_users(filled.other_user_id, filled.user_id)
        sqlite.close()
        code, out, _ = _run(capsys, url, "delete", "episodes", "--user", "Bob", "--yes")
        assert (code, out) == (0, "deleted 1 episode\n")

    def test_a_shared_name_lists_the_candidates(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        url, filled, path = store
        sqlite, long_term = _long_term(path)
        other = long_term.identify_user("slack", "U9", display_name="ADA")
        sqlite.close()
        for kind in ("facts", "episodes"):
            code, out, err = _run(capsys, url, "delete", kind, "--user", "Ada", "--yes")
            assert (code, out) == (1, "")
            assert "Traceback" not in err
            assert "'Ada' names 2 users" in err
            assert filled.user_id in err
            assert other.id in err
        sqlite, long_term = _long_term(path)
        try:
            assert len(long_term.facts(scope="user", scope_id=filled.user_id)) == 2
            assert len(long_term.episodes()) == 1
        finally:
            sqlite.close()

    def test_with_another_scope_it_is_refused(
        self, store: tuple[str, Filled, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        url = store[0]
        code, _, err = _run(
            capsys, url, "delete", "facts", "--user", "Ada", "--agent", "travel", "--yes"
        )
        assert code == 1
        assert "user_id 'Ada' conflicts with scope='agent'" in err
