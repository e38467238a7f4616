"""Searching what was said in past conversations (``conversation/transcript_search.py``).

:class:`TranscriptSearch` keeps a searchable copy of each committed turn, written and embedded
off the turn's path, and searches it by meaning (hybrid, as long-term memory does). These tests
drive it directly, with WordLlama's offline model, on the local stores and both
implementations, and from several processes sharing one SQLite file.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.embeddings import Embedder

from memlane import _backend
from memlane._ops import Save
from memlane._runner import Done, Plan, run_async, run_sync
from memlane.conversation.transcript_methods import transcript_methods
from memlane.conversation.transcript_search import (
    ALL_CONVERSATIONS,
    TranscriptMatch,
    TranscriptSearch,
    conversation_namespace,
    user_namespace,
)
from memlane.embeddings import resolve_embedder
from memlane.embeddings.local import LocalEmbeddingModel
from memlane.stores import FileStore, InMemoryStore, SQLiteStore
from memlane.types import ConversationTurn, MemoryEntry
from store_kinds import Made, open_store
from test_database_stores import initialized
from test_database_vectors import (  # pgvector_server: the fixture, found by its name
    VECTOR_KINDS,
    factory_for,
    first_vector_call,
    pgvector_server,  # noqa: F401
)

LOCAL_VECTOR_STORES = ["memory", "file", "sqlite"]
SHARED_VECTOR_STORES = ["file", "sqlite"]


@pytest.fixture(scope="module")
def embedder() -> Any:
    """The offline model, loaded once for the module."""
    return resolve_embedder("local")


@pytest.fixture(params=LOCAL_VECTOR_STORES)
async def made(
    request: pytest.FixtureRequest, impl: _backend.Implementation, tmp_path: Path
) -> AsyncIterator[Made]:
    """Each local store kind, built by ``impl``."""
    async for opened in open_store(request.param, request, tmp_path):
        yield opened


@pytest.fixture
def index(made: Made, embedder: Any) -> Iterator[TranscriptSearch]:
    search = TranscriptSearch(made.store, embedder)
    yield search
    search.close()


def turn(turn_id: int, prompt: str, answer: str, user: str | None = None) -> ConversationTurn:
    metadata = {} if user is None else {"user_id": user}
    return ConversationTurn(
        turn_id=turn_id, user_prompt=prompt, assistant_response=answer, metadata=metadata
    )


CHAT_A = [
    turn(0, "Ada drinks her coffee black, no sugar.", "Noted: black coffee for Ada.", "ada"),
    turn(1, "The invoice INV-48213 was paid on Monday.", "I marked INV-48213 as paid.", "ada"),
]
CHAT_B = [
    turn(0, "My dog Rex is a golden retriever.", "Rex sounds lovely.", "ben"),
    turn(1, "I fly to Lisbon on Tuesday.", "Have a good trip to Portugal.", "ben"),
    turn(2, "Invoice INV-48231 is still open.", "I will remind the customer.", "ada"),
]


def fill(index: TranscriptSearch) -> None:
    for t in CHAT_A:
        index.submit("chat-a", t)
    for t in CHAT_B:
        index.submit("chat-b", t)
    index.flush()


def where(matches: list[TranscriptMatch]) -> list[tuple[str, int]]:
    return [(m.conversation_id, m.turn_id) for m in matches]


class TestFindsWhatWasSaid:
    """A turn of any past conversation is found by a question in other words."""

    def test_a_paraphrase_finds_the_turn(self, index: TranscriptSearch) -> None:
        fill(index)
        found = index.search_transcripts("how does she take her hot drink", limit=3)
        assert where(found)[0] == ("chat-a", 0)
        first = found[0]
        assert first.user_prompt == CHAT_A[0].user_prompt
        assert first.assistant_response == CHAT_A[0].assistant_response
        assert first.user_id == "ada"
        assert first.timestamp == CHAT_A[0].timestamp
        assert first.score > 0
        assert [m.score for m in found] == sorted((m.score for m in found), reverse=True)

    def test_across_conversations(self, index: TranscriptSearch) -> None:
        fill(index)
        assert where(index.search_transcripts("which breed is the puppy", limit=1)) == [
            ("chat-b", 0)
        ]
        assert where(index.search_transcripts("travel to Portugal", limit=1)) == [("chat-b", 1)]

    def test_an_identifier_finds_its_own_turn_first(self, index: TranscriptSearch) -> None:
        fill(index)
        assert where(index.search_transcripts("INV-48231", limit=2))[0] == ("chat-b", 2)
        assert where(index.search_transcripts("was INV-48213 paid", limit=2))[0] == ("chat-a", 1)

    async def test_async_twin_agrees(self, index: TranscriptSearch) -> None:
        for t in CHAT_A:
            index.submit("chat-a", t)
        await index.async_flush()
        query = "how does she take her hot drink"
        found = await index.async_search_transcripts(query, limit=2)
        assert found == index.search_transcripts(query, limit=2)

    def test_nothing_stored_finds_nothing(self, index: TranscriptSearch) -> None:
        assert index.search_transcripts("anything at all") == []
        assert index.search_transcripts("anything", conversation_id="nope") == []
        assert index.search_transcripts("anything", user_id="nobody") == []


class TestNarrowing:
    """``conversation_id`` and ``user_id`` keep to one conversation, or one user's turns."""

    def test_one_conversation(self, index: TranscriptSearch) -> None:
        fill(index)
        found = index.search_transcripts("invoice", conversation_id="chat-a", limit=10)
        assert {m.conversation_id for m in found} == {"chat-a"}
        assert len(found) == 2

    def test_one_user_across_conversations(self, index: TranscriptSearch) -> None:
        fill(index)
        found = index.search_transcripts("invoice paid", user_id="ada", limit=10)
        assert {m.user_id for m in found} == {"ada"}
        assert sorted(where(found)) == [("chat-a", 0), ("chat-a", 1), ("chat-b", 2)]
        assert {m.user_id for m in index.search_transcripts("trip", user_id="ben")} == {"ben"}

    def test_both(self, index: TranscriptSearch) -> None:
        fill(index)
        found = index.search_transcripts("invoice", conversation_id="chat-b", user_id="ada")
        assert where(found) == [("chat-b", 2)]

    def test_limit(self, index: TranscriptSearch) -> None:
        fill(index)
        assert len(index.search_transcripts("invoice", limit=1)) == 1


class TestWriting:
    """Copies are idempotent, live in their own namespaces, and never block the turn."""

    def test_a_turn_submitted_twice_is_kept_once(self, index: TranscriptSearch) -> None:
        index.submit("c", CHAT_A[0])
        index.submit("c", CHAT_A[0])
        index.flush()
        assert len(index.store.load(conversation_namespace("c"))) == 1
        assert len(index.search_transcripts("coffee", limit=10)) == 1

    def test_directories(self, index: TranscriptSearch) -> None:
        fill(index)
        store = index.store
        assert {e.key for e in store.load(ALL_CONVERSATIONS)} == {"chat-a", "chat-b"}
        assert {e.key for e in store.load(user_namespace("ada"))} == {"chat-a", "chat-b"}
        assert {e.key for e in store.load(user_namespace("ben"))} == {"chat-b"}

    def test_stored_text_is_data(self, index: TranscriptSearch) -> None:
        hostile = turn(0, "'); DROP TABLE entries; -- <script>x</script>", "%s {0} $where", "u")
        index.submit("c'; --", hostile)
        index.flush()
        (found,) = index.search_transcripts("DROP TABLE entries", limit=1)
        assert found.conversation_id == "c'; --"
        assert found.user_prompt == hostile.user_prompt
        assert found.assistant_response == hostile.assistant_response

    def test_submit_returns_before_the_embedding(self, made: Made) -> None:
        """A turn's copy waits for a slow embedder; ``submit`` does not."""
        started, release = threading.Event(), threading.Event()

        class Slow(LocalEmbeddingModel):
            def encode(self, texts: Any) -> Any:
                started.set()
                release.wait(30)
                return super().encode(texts)

        slow = TranscriptSearch(made.store, Embedder(Slow()))
        slow.submit("c", CHAT_A[0])  # returns while the embedding has yet to finish
        assert started.wait(30)  # the worker thread is embedding it now
        release.set()
        slow.flush()
        assert where(slow.search_transcripts("coffee", limit=1)) == [("c", 0)]
        slow.close()


class TestTheTurnHook:
    """``recorded`` submits a turn once its plan has committed it, never before or on failure."""

    def test_a_finished_step(self, index: TranscriptSearch) -> None:
        step = index.recorded("c", Done(CHAT_A[0]))
        assert run_sync(step, index.store) == CHAT_A[0]
        index.flush()
        assert where(index.search_transcripts("coffee")) == [("c", 0)]

    def test_a_plan(self, index: TranscriptSearch) -> None:
        def plan() -> Plan[ConversationTurn]:
            yield Save("elsewhere", MemoryEntry(content={"x": 1}))
            return CHAT_A[0]

        assert run_sync(index.recorded("c", plan()), index.store) == CHAT_A[0]
        index.flush()
        assert where(index.search_transcripts("coffee")) == [("c", 0)]

    async def test_a_plan_on_the_async_runner(self, index: TranscriptSearch) -> None:
        def plan() -> Plan[ConversationTurn]:
            yield Save("elsewhere", MemoryEntry(content={"x": 1}))
            return CHAT_A[0]

        assert await run_async(index.recorded("c", plan()), index.store) == CHAT_A[0]
        await index.async_flush()
        assert where(index.search_transcripts("coffee")) == [("c", 0)]

    def test_a_failed_plan_submits_nothing(self, index: TranscriptSearch) -> None:
        def plan() -> Plan[ConversationTurn]:
            yield Save("elsewhere", MemoryEntry(content={"x": 1}))
            raise RuntimeError("the turn lost its slot")

        with pytest.raises(RuntimeError, match="slot"):
            run_sync(index.recorded("c", plan()), index.store)
        index.flush()
        assert index.search_transcripts("coffee") == []


class TestBadArguments:
    """Bad arguments raise TypeError/ValueError naming the parameter, before any read."""

    @pytest.mark.parametrize(
        ("kwargs", "error", "name"),
        [
            ({"query": 3}, TypeError, "query"),
            ({"query": "   "}, ValueError, "query"),
            ({"limit": 0}, ValueError, "limit"),
            ({"limit": 2.5}, TypeError, "limit"),
            ({"conversation_id": ""}, ValueError, "conversation_id"),
            ({"conversation_id": 7}, TypeError, "conversation_id"),
            ({"user_id": 5}, TypeError, "user_id"),
            ({"user_id": "a\x00b"}, ValueError, "user_id"),
        ],
    )
    def test_named(
        self, kwargs: dict[str, Any], error: type[Exception], name: str, embedder: Any
    ) -> None:
        index = TranscriptSearch(InMemoryStore(), embedder)
        args: dict[str, Any] = {"query": "coffee"}
        args.update(kwargs)
        query = args.pop("query")
        with pytest.raises(error, match=name):
            index.search_transcripts(query, **args)

    def test_a_store_without_vectors(self, embedder: Any) -> None:
        with pytest.raises(TypeError, match="store"):
            TranscriptSearch(object(), embedder)  # type: ignore[arg-type]  # the check under test


class TestMethodsForAMemory:
    """``transcript_methods`` gives a memory the pair, and names ``embedder`` without one."""

    class Memory:
        search_transcripts, async_search_transcripts = transcript_methods("Memory")

        def __init__(self, transcripts: TranscriptSearch | None) -> None:
            self._transcripts = transcripts

    async def test_delegates(self, index: TranscriptSearch) -> None:
        fill(index)
        memory = self.Memory(index)
        found = memory.search_transcripts("coffee", conversation_id="chat-a", limit=1)
        assert where(found) == [("chat-a", 0)]
        assert (
            await memory.async_search_transcripts("coffee", conversation_id="chat-a", limit=1)
            == found
        )

    async def test_without_an_embedder(self) -> None:
        memory = self.Memory(None)
        with pytest.raises(ValueError, match="embedder"):
            memory.search_transcripts("coffee")
        with pytest.raises(ValueError, match="embedder"):
            await memory.async_search_transcripts("coffee")
        assert "conversation_id" in (self.Memory.search_transcripts.__doc__ or "")


_WRITER = """
import sys
from memlane.conversation.transcript_search import TranscriptSearch
from memlane.embeddings import resolve_embedder
from memlane.stores import FileStore, SQLiteStore
from memlane.types import ConversationTurn

store = (SQLiteStore if sys.argv[1].endswith(".sqlite3") else FileStore)(sys.argv[1])
index = TranscriptSearch(store, resolve_embedder("local"))
cid, prompt = sys.argv[2], sys.argv[3]
for i in range(5):
    index.submit(cid, ConversationTurn(turn_id=i, user_prompt=f"{prompt} {i}",
                                       assistant_response="ok", metadata={"user_id": "u"}))
index.close()
store.close()
"""


class TestSharedAcrossProcesses:
    """Hosts sharing one store each write their turns' copies; any of them finds them all."""

    @pytest.mark.parametrize("kind", SHARED_VECTOR_STORES)
    def test_two_writers_one_reader(self, kind: str, tmp_path: Path, embedder: Any) -> None:
        path = tmp_path / ("shared.sqlite3" if kind == "sqlite" else "shared")
        opened = SQLiteStore(path) if kind == "sqlite" else FileStore(path)
        opened.close()
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(path), cid, prompt],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for cid, prompt in (
                ("host-a", "Ada drinks her coffee black"),
                ("host-b", "Ben flies to Lisbon"),
            )
        ]
        for writer in writers:
            _, err = writer.communicate(timeout=120)
            assert writer.returncode == 0, err.decode()
        store = SQLiteStore(path) if kind == "sqlite" else FileStore(path)
        index = TranscriptSearch(store, embedder)
        assert {m.conversation_id for m in index.search_transcripts("hot drink", limit=1)} == {
            "host-a"
        }
        assert {
            m.conversation_id for m in index.search_transcripts("trip to Portugal", limit=1)
        } == {"host-b"}
        assert len(index.search_transcripts("anything", user_id="u", limit=100)) == 10
        index.close()
        store.close()


@pytest.fixture(params=VECTOR_KINDS)
async def server_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """PostgreSQL with and without pgvector and MongoDB, past the one fallback warning."""
    factory = factory_for(request, request.param)
    store = await initialized(factory.make())
    await first_vector_call(store, request.param)
    yield store
    await factory.cleanup()


class TestOnDatabaseServers:
    """The copies and their search work the same on the database servers."""

    def test_found_and_narrowed(self, server_store: Any, embedder: Any) -> None:
        index = TranscriptSearch(server_store, embedder)
        fill(index)
        assert where(index.search_transcripts("how does she take her hot drink", limit=1)) == [
            ("chat-a", 0)
        ]
        assert where(index.search_transcripts("INV-48231", limit=1)) == [("chat-b", 2)]
        found = index.search_transcripts("invoice paid", user_id="ada", limit=10)
        assert sorted(where(found)) == [("chat-a", 0), ("chat-a", 1), ("chat-b", 2)]
        index.close()

    async def test_async(self, server_store: Any, embedder: Any) -> None:
        index = TranscriptSearch(server_store, embedder)
        for t in CHAT_B:
            index.submit("chat-b", t)
        await index.async_flush()
        found = await index.async_search_transcripts("which breed is the puppy", limit=1)
        assert where(found) == [("chat-b", 0)]
        index.close()


class TestForgetting:
    """A conversation's copies and directory entries go with it: a search no longer finds it."""

    def test_forget_one_conversation(self, index: TranscriptSearch) -> None:
        fill(index)
        assert index.forget_conversation("chat-b") == 3
        assert {m.conversation_id for m in index.search_transcripts("invoice", limit=10)} == {
            "chat-a"
        }
        assert index.search_transcripts("puppy", conversation_id="chat-b") == []
        assert index.search_transcripts("trip", user_id="ben") == []
        assert {e.key for e in index.store.load(user_namespace("ada"))} == {"chat-a"}
        assert index.forget_conversation("chat-b") == 0

    async def test_async_and_a_new_turn_lists_it_again(self, index: TranscriptSearch) -> None:
        fill(index)
        assert await index.async_forget_conversation("chat-a") == 2
        index.submit("chat-a", CHAT_A[0])
        await index.async_flush()
        assert where(await index.async_search_transcripts("coffee", limit=1)) == [("chat-a", 0)]

    def test_a_turn_still_queued_is_forgotten_too(self, index: TranscriptSearch) -> None:
        index.submit("c", CHAT_A[0])
        assert index.forget_conversation("c") == 1
        index.flush()
        assert index.search_transcripts("coffee") == []

    def test_bad_id(self, index: TranscriptSearch) -> None:
        with pytest.raises(ValueError, match="conversation_id"):
            index.forget_conversation("")
