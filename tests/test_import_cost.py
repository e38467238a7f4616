"""What ``import memlane`` and the common first calls load: nothing of pydantic-ai, the
strategies, the HTTP client or the database drivers until they are used.

A serverless start or a CLI call pays for every module imported, so each check runs in a fresh
interpreter (on the backend this test run uses: the environment is inherited). No wall-clock
assertions here; ``python -m benches --only tokens`` measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import memlane
from memlane.messages import default_messages
from memlane.types import ConversationTurn, new_turn, strings_only, utc_now

HEAVY = [
    "pydantic_ai",
    "httpx",
    "simpleeval",
    "psycopg",
    "pymongo",
    "memlane.strategies",
    "memlane.stores.sqlite",
    "memlane.stores.postgres",
    "memlane.stores.mongodb",
    "memlane.server",
    "memlane.agents",
]
"""Modules that only the features using them may import."""


def loaded_after(code: str) -> dict[str, bool]:
    """Which of :data:`HEAVY` a fresh interpreter has imported after running ``code``."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import json, sys
        print(json.dumps({{name: name in sys.modules for name in {HEAVY!r}}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_import_memlane_loads_nothing_heavy() -> None:
    loaded = loaded_after("import memlane")
    assert not any(loaded.values()), loaded


def test_import_memlane_loads_no_version_metadata() -> None:
    code = "import memlane, sys; print('importlib.metadata' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "False"


def test_memories_and_a_string_turn_load_no_pydantic_ai() -> None:
    loaded = loaded_after(
        """
        from memlane import ConversationMemory, MemoryManager, WorkingMemory, LongTermMemory
        memory = ConversationMemory()
        turn = memory.add_turn("c", "hi", "hello")
        assert turn.turn_id == 0 and turn.token_estimate > 0
        assert [t.user_prompt for t in memory.get_turns("c")] == ["hi"]
        assert memory.get_total_tokens("c") == turn.token_estimate
        manager = MemoryManager()
        manager.conversation.add_turn("c", "hi", "hello")
        manager.working.set("k", "v")
        assert LongTermMemory is not None and WorkingMemory is not None
        """
    )
    assert not any(loaded.values()), loaded


def test_cli_help_loads_no_pydantic_ai() -> None:
    loaded = loaded_after(
        """
        import contextlib, io, runpy, sys
        sys.argv = ["memlane", "--help"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            runpy.run_module("memlane", run_name="__main__")
        """
    )
    # The command opens stores, so it may load their modules; not the agents' stack.
    agents = ["pydantic_ai", "httpx", "simpleeval", "memlane.strategies", "memlane.agents"]
    assert not any(loaded[name] for name in agents), loaded


def test_cli_names_the_demo_database_without_importing_the_demo() -> None:
    from memlane import demo
    from memlane.cli import demo as cli_demo

    assert cli_demo.DEFAULT_DB == demo.DEFAULT_DEMO_DB


def test_reading_the_messages_builds_them() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys
                from memlane import ConversationMemory
                memory = ConversationMemory()
                turn = memory.add_turn("c", "hi", "hello")
                assert "pydantic_ai" not in sys.modules
                from pydantic_ai.messages import ModelRequest, ModelResponse
                assert isinstance(turn.raw_messages[0], ModelRequest)
                assert isinstance(memory.get_message_history("c")[1], ModelResponse)
                print("ok")
                """
            ),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("name", memlane.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(memlane, name) is not None
    assert name in dir(memlane)


def test_public_names_are_their_modules_objects() -> None:
    from memlane.conversation import ConversationMemory
    from memlane.stores import InMemoryStore, SQLiteStore

    assert memlane.ConversationMemory is ConversationMemory
    assert memlane.InMemoryStore is InMemoryStore
    assert memlane.SQLiteStore is SQLiteStore
    assert isinstance(memlane.__version__, str)
    assert memlane.__version__
    assert memlane.BACKEND in ("rust", "python")


def test_star_import_and_unknown_names() -> None:
    namespace: dict[str, object] = {}
    exec("from memlane import *", namespace)  # noqa: S102 - the star import itself
    assert set(memlane.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = memlane.nope
    from memlane import longterm, stores

    with pytest.raises(AttributeError):
        _ = stores.nope
    with pytest.raises(AttributeError):
        _ = longterm.nope


class TestMessagesBuiltWhenRead:
    """A turn given as strings is the turn with the two messages built from them."""

    def values(self) -> dict[str, object]:
        return {
            "turn_id": 2,
            "user_prompt": "q",
            "assistant_response": "a",
            "timestamp": utc_now(),
            "token_estimate": 4,
            "metadata": {"k": "v"},
        }

    def eager(self, values: dict[str, object]) -> ConversationTurn:
        messages = default_messages("q", "a", values["timestamp"])  # type: ignore[arg-type]
        return ConversationTurn.model_construct(
            **{**values, "raw_messages": messages},  # type: ignore[arg-type]
        )

    def test_attribute(self) -> None:
        values = self.values()
        lazy = new_turn(**values)
        assert strings_only(lazy)
        assert lazy.raw_messages == self.eager(values).raw_messages
        assert not strings_only(lazy)
        assert list(lazy.__dict__) == list(ConversationTurn.model_fields)

    @pytest.mark.parametrize(
        "read",
        [
            lambda t: t.model_dump(),
            lambda t: t.model_dump(mode="json"),
            lambda t: t.model_dump_json(),
            lambda t: repr(t),
            lambda t: dict(t),
            lambda t: t.model_copy().model_dump(),
            lambda t: t.model_copy(deep=True).model_dump(),
        ],
    )
    def test_wholesale_reads(self, read: object) -> None:
        values = self.values()
        assert read(new_turn(**values)) == read(self.eager(values))  # type: ignore[operator]

    def test_equality_and_round_trips(self) -> None:
        import pickle

        values = self.values()
        eager = self.eager(values)
        assert new_turn(**values) == eager
        assert eager == new_turn(**values)
        assert pickle.loads(pickle.dumps(new_turn(**values))) == eager  # noqa: S301 - our own
        assert ConversationTurn.model_validate_json(new_turn(**values).model_dump_json()) == eager
        assert ConversationTurn.model_validate(new_turn(**values).model_dump()) == eager
        assert new_turn(**values).model_fields_set == eager.model_fields_set
