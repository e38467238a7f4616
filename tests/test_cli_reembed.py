"""``memlane reembed``: every searchable record gets a vector of the configured embedder.

Records are written without an embedder (or with another model), then the command runs
in-process (``main``) against the store; what it attached is checked by searching by meaning
with WordLlama's offline model. A second run finds nothing left to do.
"""

from __future__ import annotations

import argparse
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.embeddings import Embedder

from memlane import FileStore, SQLiteStore
from memlane._ops import SaveMany
from memlane._runner import run_sync
from memlane.cli import main
from memlane.cli.output import Output
from memlane.cli.reembed import reembed, reembed_conversations
from memlane.conversation.knowledge import knowledge_entries, knowledge_namespace
from memlane.conversation.transcript_search import TranscriptSearch
from memlane.embeddings import embedder_id, resolve_embedder
from memlane.embeddings.local import LocalEmbeddingModel
from memlane.longterm import LongTermMemory
from memlane.strategies import KnowledgeBases, SummarizerStrategy
from memlane.types import ConversationTurn
from zero_vector_model import BlankBlind

LOCAL = "wordllama:l2_supercat"


class OtherModel(LocalEmbeddingModel):
    """The same vectors under another model's name: what a store written before a change of
    embedder holds."""

    @property
    def model_name(self) -> str:
        return "older"


@pytest.fixture(params=["file", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store holding facts, an episode, a turn's copy and a knowledge chunk, none with a
    vector of the local model; its ``--store`` URL."""
    path = tmp_path / ("store" if request.param == "file" else "s.sqlite3")
    store: Any = FileStore(path) if request.param == "file" else SQLiteStore(path)
    memory = LongTermMemory(store)
    memory.remember("ada_coffee", "Ada drinks her coffee black, no sugar.")
    memory.remember("ben_allergy", "Ben is allergic to peanuts.", scope="user", scope_id="ben")
    memory.record_episode(
        agent_id="agent", trigger="greeting", input="hello there", output="hi!", success=True
    )
    older = TranscriptSearch(store, Embedder(OtherModel()))
    older.submit(
        "chat",
        ConversationTurn(
            turn_id=0, user_prompt="I fly to Lisbon on Tuesday.", assistant_response="Safe trip!"
        ),
    )
    older.close()
    kb = SummarizerStrategy(knowledge_base=KnowledgeBases(collection_id="kb"))
    chunks = knowledge_entries(kb, "c", 3, "The release moved to Thursday.", datetime.now(UTC), len)
    run_sync(SaveMany(knowledge_namespace("kb"), chunks), store)
    store.close()
    return f"{request.param}:///{path}" if request.param == "sqlite" else f"file://{path}"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def open_again(url: str) -> Any:
    if url.startswith("sqlite:"):
        return SQLiteStore(url.removeprefix("sqlite:///"))
    return FileStore(url.removeprefix("file://"))


class TestReembed:
    """Every kind of searchable record is embedded once; a second run has nothing to do."""

    def test_embeds_everything_then_nothing(
        self, capsys: pytest.CaptureFixture[str], store_url: str
    ) -> None:
        code, out, err = run_cli(capsys, "reembed", "--store", store_url, "--embedder", "local")
        assert code == 0, err
        # two facts, one episode, one turn's copy, one knowledge chunk
        assert out == f"embedded 5 records for {LOCAL}\n"
        code, out, err = run_cli(
            capsys, "reembed", "--store", store_url, "--embedder", "local", "--json"
        )
        assert code == 0, err
        assert json.loads(out) == {"embedded": 0, "model": LOCAL}

    def test_found_by_meaning_afterwards(
        self, capsys: pytest.CaptureFixture[str], store_url: str
    ) -> None:
        assert run_cli(capsys, "reembed", "--store", store_url, "--embedder", "local")[0] == 0
        store = open_again(store_url)
        memory = LongTermMemory(store, embedder="local")
        (fact,) = memory.search("how does she take her hot drink", mode="semantic", limit=1)
        assert fact.key == "ada_coffee"
        local = resolve_embedder("local")
        assert local is not None
        turns = TranscriptSearch(store, local)
        (turn,) = turns.search_transcripts("trip to Portugal", limit=1)
        assert turn.user_prompt == "I fly to Lisbon on Tuesday."
        turns.close()
        store.close()

    def test_without_an_embedder(
        self, capsys: pytest.CaptureFixture[str], store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("MEMLANE_EMBEDDER", raising=False)
        code, _, err = run_cli(capsys, "reembed", "--store", store_url)
        assert code == 1
        assert err.startswith("memlane: error: no embedder")
        assert "MEMLANE_EMBEDDER" in err

    def test_a_bad_embedder_name(self, capsys: pytest.CaptureFixture[str], store_url: str) -> None:
        code, _, err = run_cli(capsys, "reembed", "--store", store_url, "--embedder", "nope")
        assert code == 1
        assert "embedder" in err
        assert "Traceback" not in err

    def test_batch_size_must_be_positive(
        self, capsys: pytest.CaptureFixture[str], store_url: str
    ) -> None:
        with pytest.raises(SystemExit) as exit_:
            main(["reembed", "--store", store_url, "--embedder", "local", "--batch-size", "0"])
        assert exit_.value.code == 2
        assert "batch-size" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class TestProgress:
    """A progress bar counts the vectors on a terminal; the count matches what was attached."""

    def test_the_bar_is_drawn_on_a_terminal(self, store_url: str) -> None:
        out, err = io.StringIO(), _Terminal()
        args = argparse.Namespace(store=store_url, embedder="local", batch_size=2, json=False)
        assert reembed(args, Output(stream=out, err=err)) == 0
        assert out.getvalue() == f"embedded 5 records for {LOCAL}\n"
        assert f"embedding for {LOCAL}" in err.getvalue()

    def test_advance_adds_up_to_the_vectors_attached(self, store_url: str) -> None:
        store = open_again(store_url)
        local = resolve_embedder("local")
        assert local is not None
        steps: list[int] = []
        attached = reembed_conversations(store, local, batch_size=1, advance=steps.append)
        assert attached == 2  # the turn's copy (another model's vector) and the chunk
        assert sum(steps) == attached
        assert reembed_conversations(store, local) == 0
        assert (
            store.missing_vectors([knowledge_namespace("kb")], embedder_id(local), limit=10) == []
        )
        store.close()


class TestRecordsWithoutADirection:
    """Records the model gives no direction stay missing; they never hide the rest."""

    def test_a_round_of_them_does_not_stop_the_command(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A round of listed records that all stay missing (the oldest ones) once ended the
        # whole namespace; a round of 2 shows it without writing 10,000 records.
        monkeypatch.setattr("memlane.cli.reembed._ROUND", 2)
        store = SQLiteStore(tmp_path / "s.sqlite3")
        older = TranscriptSearch(store, Embedder(OtherModel()))
        prompts = ["blank", "blank again", "blank once more", "I fly to Lisbon.", "My cat naps."]
        for turn_id, prompt in enumerate(prompts):
            turn = ConversationTurn(turn_id=turn_id, user_prompt=prompt, assistant_response="")
            older.submit("chat", turn)
            older.flush()
        older.close()
        embedder = Embedder(BlankBlind())
        assert reembed_conversations(store, embedder, batch_size=2) == 2
        assert reembed_conversations(store, embedder, batch_size=2) == 0
        store.close()
