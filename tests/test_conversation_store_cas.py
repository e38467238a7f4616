"""MemlaneConversationStore saves and deletes by conditional write: of N writers over one loaded
revision exactly one wins, the others get ConversationConflict, on every store, whether the
writers are threads, event-loop tasks or processes.

The ``gated`` variants hold every writer at the store's ``save_if`` until all have arrived, so
each has passed the revision check before any writes: only the conditional write can then tell
the winner. The process workers are this module run as a script (see the end of the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import subprocess
import sys
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.run import AgentRunResult

from conftest import SYNC_METHODS, drop_server_place
from memlane import FileStore, InMemoryStore, MemoryStore, SQLiteStore
from memlane._backend import Implementation
from memlane.agents import MemlaneConversationStore
from memlane.stores import IndexFallbackWarning, MongoDBStore, PostgreSQLStore
from memlane.types import MemoryEntry
from test_multiprocess import STEP_TIMEOUT
from test_multiprocess import Worker as MultiprocessWorker

KINDS = ["memory", "sqlite", "file", "postgres", "mongodb"]
SHARED_KINDS = KINDS[1:]  # the stores several processes can open
WRITERS = 8
PROCESSES = 4
ROUNDS = 4

Place = dict[str, str]
SaveIf = Callable[[str, MemoryEntry, int | None], Awaitable[bool]]


def _last_prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts if isinstance(message, ModelRequest) else []:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                return part.content
    raise AssertionError(f"no prompt in {messages!r}")


def _echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"reply to {_last_prompt(messages)!r}")])


_agent = Agent(FunctionModel(_echo))


def open_store(place: Place) -> MemoryStore:
    """A store object over ``place``; every process opening it shares what it holds."""
    kind = place["kind"]
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(place["path"])
    if kind == "file":
        return FileStore(place["path"])
    if kind == "postgres":
        return PostgreSQLStore(
            place["url"], schema_name=place["name"], pool_min_size=1, pool_size=4
        )
    return MongoDBStore(place["url"], collection=place["name"], pool_size=4)


@contextlib.asynccontextmanager
async def _made_place(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Place]:
    name = f"cas_{uuid.uuid4().hex[:12]}"
    if kind in {"memory", "sqlite", "file"}:
        yield {"kind": kind, "path": str(tmp_path / f"{kind}-store"), "name": name}
        return
    server = request.getfixturevalue("postgres_server" if kind == "postgres" else "mongodb_server")
    place = {"kind": kind, "url": server.url, "name": name}
    yield place
    await drop_server_place(kind, server.url, name)


@pytest.fixture(params=KINDS)
async def place(
    request: pytest.FixtureRequest, tmp_path: Path, impl: Implementation
) -> AsyncIterator[Place]:
    """Where one test's store lives, on the test's implementation."""
    async with _made_place(request.param, request, tmp_path) as made:
        yield made


@pytest.fixture(params=SHARED_KINDS)
async def shared_place(
    request: pytest.FixtureRequest, tmp_path: Path, impl: Implementation
) -> AsyncIterator[Place]:
    """Where processes meet: an SQLite file, a directory, a PostgreSQL schema or a collection."""
    async with _made_place(request.param, request, tmp_path) as made:
        yield made


@pytest.fixture
async def store(place: Place) -> AsyncIterator[MemoryStore]:
    """An initialised store over ``place`` (FerretDB's index fallback notice silenced)."""
    made = open_store(place)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IndexFallbackWarning)
        await made.async_initialize()
    yield made
    await made.async_close()


# ---------------------------------------------------------------------------- helpers


async def _contenders(
    cs: MemlaneConversationStore, cid: str, count: int
) -> list[AgentRunResult[str]]:
    """``count`` runs, each continuing its own copy of the conversation as loaded now."""
    loaded = [await cs.load(cid) or Conversation(conversation_id=cid) for _ in range(count)]
    return [await _agent.run(f"writer {i}", conversation=c) for i, c in enumerate(loaded)]


def _gate(
    monkeypatch: pytest.MonkeyPatch, stores: list[MemoryStore], parties: int, *, threads: bool
) -> None:
    """Holds each ``async_save_if`` call on ``stores`` until ``parties`` calls are waiting."""
    barrier = threading.Barrier(parties, timeout=STEP_TIMEOUT)
    tasks_barrier = asyncio.Barrier(parties)

    async def wait() -> None:
        if threads:
            await asyncio.to_thread(barrier.wait)
        else:
            async with asyncio.timeout(STEP_TIMEOUT):
                await tasks_barrier.wait()

    for store in {id(s): s for s in stores}.values():
        original: SaveIf = cast("Any", store).async_save_if

        async def gated(
            namespace: str, entry: MemoryEntry, expected: int | None, original: SaveIf = original
        ) -> bool:
            await wait()
            return await original(namespace, entry, expected)

        monkeypatch.setattr(store, "async_save_if", gated)


async def _thread_stores(place: Place, store: MemoryStore, count: int) -> list[MemoryStore]:
    """The store each of ``count`` threads uses: the shared object, or for a database server its
    own object, connected and migrated here (a thread's event loop ends with the thread, and
    only the store object that opened connections on it can close them there)."""
    if place["kind"] not in {"postgres", "mongodb"}:
        return [store] * count
    own = [open_store(place) for _ in range(count)]
    for made in own:
        await made.async_initialize()
    return own


async def _save(
    store: MemoryStore, result: AgentRunResult[str], *, close: bool
) -> list[ConversationEntry]:
    try:
        return await MemlaneConversationStore(store).save(result)
    finally:
        if close:
            await store.async_close()


def _in_threads(calls: list[Callable[[], Awaitable[object]]]) -> list[object]:
    """Each call on its own thread and event loop, started together; results or exceptions."""
    start = threading.Barrier(len(calls), timeout=STEP_TIMEOUT)
    outcomes: list[object] = [None] * len(calls)

    async def run(call: Callable[[], Awaitable[object]]) -> object:
        return await call()

    def work(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = asyncio.run(run(calls[i]))
        except Exception as exc:  # noqa: BLE001  # judged by the test thread
            outcomes[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


async def _in_tasks(calls: list[Callable[[], Awaitable[object]]]) -> list[object]:
    return list(await asyncio.gather(*(c() for c in calls), return_exceptions=True))


def _the_winner(outcomes: list[object]) -> int:
    """The index of the one call that succeeded; every other one was a conflict."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, ConversationConflict):
            raise outcome
    winners = [i for i, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    return winners[0]


async def _assert_stored(
    cs: MemlaneConversationStore, cid: str, winner: AgentRunResult[str]
) -> None:
    """The store holds the winner's conversation and no entry a losing writer wrote."""
    loaded = await cs.load(cid)
    assert loaded is not None
    assert loaded.revision == winner.conversation.revision
    assert loaded.messages == winner.all_messages()
    assert len(await cs.store.async_load(cs.ENTRIES)) == len(loaded.messages)


# ---------------------------------------------------------------------------- one process


class TestOneOfManyWritersWins:
    """Of eight writers saving over one loaded revision exactly one wins; the store holds its save."""

    @pytest.mark.parametrize("gated", [False, True], ids=["free", "gated"])
    async def test_threads(
        self, place: Place, store: MemoryStore, monkeypatch: pytest.MonkeyPatch, gated: bool
    ) -> None:
        cs = MemlaneConversationStore(store)
        await cs.save(await _agent.run("hello", conversation=Conversation(conversation_id="c")))
        results = await _contenders(cs, "c", WRITERS)
        stores = await _thread_stores(place, store, WRITERS)
        if gated:
            _gate(monkeypatch, stores, WRITERS, threads=True)
        calls = [
            functools.partial(_save, s, r, close=s is not store)
            for s, r in zip(stores, results, strict=True)
        ]
        outcomes = await asyncio.to_thread(_in_threads, list(calls))
        await _assert_stored(cs, "c", results[_the_winner(outcomes)])

    @pytest.mark.parametrize("gated", [False, True], ids=["free", "gated"])
    async def test_tasks(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch, gated: bool
    ) -> None:
        cs = MemlaneConversationStore(store)
        await cs.save(await _agent.run("hello", conversation=Conversation(conversation_id="c")))
        results = await _contenders(cs, "c", WRITERS)
        if gated:
            _gate(monkeypatch, [store], WRITERS, threads=False)
        outcomes = await _in_tasks([functools.partial(cs.save, r) for r in results])
        await _assert_stored(cs, "c", results[_the_winner(outcomes)])

    async def test_new_conversations_under_one_id(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cs = MemlaneConversationStore(store)
        results = await _contenders(cs, "fresh", WRITERS)
        _gate(monkeypatch, [store], WRITERS, threads=False)
        outcomes = await _in_tasks([functools.partial(cs.save, r) for r in results])
        await _assert_stored(cs, "fresh", results[_the_winner(outcomes)])


class TestDeletesRaceSaves:
    """Deletes are conditional writes too: one of the writers and deleters over a revision wins."""

    @pytest.mark.parametrize("deleters_first", [False, True], ids=["saves-first", "deletes-first"])
    async def test_writers_and_deleters(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch, deleters_first: bool
    ) -> None:
        cs = MemlaneConversationStore(store)
        first = await _agent.run("hello", conversation=Conversation(conversation_id="c"))
        await cs.save(first)
        revision = first.conversation.revision
        assert revision is not None
        results = await _contenders(cs, "c", WRITERS // 2)
        contenders: list[tuple[Callable[[], Awaitable[object]], AgentRunResult[str] | None]] = [
            *((functools.partial(cs.save, r), r) for r in results),
            *(
                (functools.partial(cs.delete_record, "c", expected_revision=revision), None)
                for _ in range(WRITERS // 2)
            ),
        ]
        if deleters_first:
            contenders.reverse()
        _gate(monkeypatch, [store], WRITERS, threads=False)
        winner = _the_winner(await _in_tasks([call for call, _ in contenders]))
        saved = contenders[winner][1]
        if saved is None:
            assert await cs.load("c") is None
            assert await cs.list_conversations() == []
            assert await store.async_load(cs.ENTRIES) == []
        else:
            await _assert_stored(cs, "c", saved)

    async def test_new_conversations_replace_a_deleted_one(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        cs = MemlaneConversationStore(store)
        await cs.save(await _agent.run("old", conversation=Conversation(conversation_id="c")))
        await cs.delete("c")
        results = await _contenders(cs, "c", WRITERS)
        assert all(len(r.all_messages()) == 2 for r in results)  # none saw the deleted one
        _gate(monkeypatch, [store], WRITERS, threads=False)
        outcomes = await _in_tasks([functools.partial(cs.save, r) for r in results])
        await _assert_stored(cs, "c", results[_the_winner(outcomes)])

    async def test_a_writer_loses_to_a_conversation_created_again(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The writer has passed its revision check; meanwhile the conversation is deleted and
        # created again. Its conditional write must not take the new conversation for the one
        # it loaded.
        cs = MemlaneConversationStore(store)
        await cs.save(await _agent.run("old", conversation=Conversation(conversation_id="c")))
        [stale] = await _contenders(cs, "c", 1)
        original: SaveIf = cast("Any", store).async_save_if
        reached, release = asyncio.Event(), asyncio.Event()

        async def hold_the_first(namespace: str, entry: MemoryEntry, expected: int | None) -> bool:
            if not reached.is_set():
                reached.set()
                await release.wait()
            return await original(namespace, entry, expected)

        monkeypatch.setattr(store, "async_save_if", hold_the_first)
        held = asyncio.create_task(cs.save(stale))
        async with asyncio.timeout(STEP_TIMEOUT):
            await reached.wait()
        await cs.delete("c")
        again = await _agent.run("again", conversation=Conversation(conversation_id="c"))
        await cs.save(again)
        release.set()
        with pytest.raises(ConversationConflict):
            await held
        await _assert_stored(cs, "c", again)

    async def test_a_delete_keeps_the_entries_of_a_save_in_flight(
        self, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The other save's entries are written and its record is not yet: a delete must not
        # take them for entries no conversation reaches.
        cs = MemlaneConversationStore(store)
        await cs.save(await _agent.run("doomed", conversation=Conversation(conversation_id="a")))
        [other] = await _contenders(cs, "b", 1)
        original: SaveIf = cast("Any", store).async_save_if
        reached, release = asyncio.Event(), asyncio.Event()

        async def hold_b(namespace: str, entry: MemoryEntry, expected: int | None) -> bool:
            if entry.key == "b":
                reached.set()
                await release.wait()
            return await original(namespace, entry, expected)

        monkeypatch.setattr(store, "async_save_if", hold_b)
        held = asyncio.create_task(cs.save(other))
        async with asyncio.timeout(STEP_TIMEOUT):
            await reached.wait()
        await cs.delete("a")
        release.set()
        await held
        await _assert_stored(cs, "b", other)


# ---------------------------------------------------------------------------- old stores


class OldProtocolStore:
    """A custom store written for the protocol before ``save_if``: it delegates every method."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: OldProtocolStore, *args: Any) -> Any:
        return getattr(self.inner, name)(*args)

    method.__name__ = name
    return method


for _name in [*SYNC_METHODS, *(f"async_{n}" for n in SYNC_METHODS)]:
    setattr(OldProtocolStore, _name, _delegate(_name))
for _name in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
    setattr(OldProtocolStore, _name, _delegate(_name))


class TestStoresWithoutConditionalWrites:
    """A store without save_if can be read; saving or deleting raises a TypeError that says so."""

    async def test_reads_work_writes_say_what_is_missing(self, store: MemoryStore) -> None:
        first = await _agent.run("hello", conversation=Conversation(conversation_id="c"))
        await MemlaneConversationStore(store).save(first)
        old = MemlaneConversationStore(cast("MemoryStore", OldProtocolStore(store)))
        loaded = await old.load("c")
        assert loaded is not None
        assert loaded.messages == first.all_messages()
        assert [r.conversation_id for r in await old.list_conversations()] == ["c"]
        missing = r"OldProtocolStore has no save_if: .*MemlaneConversationStore\.save"
        with pytest.raises(TypeError, match=missing):
            await old.save(await _agent.run("more", conversation=loaded))
        with pytest.raises(TypeError, match=missing):
            await old.save(Conversation(conversation_id="fresh"))
        with pytest.raises(TypeError, match=missing):
            await old.delete("c")
        await _assert_stored(MemlaneConversationStore(store), "c", first)


# ---------------------------------------------------------------------------- processes


class Worker(MultiprocessWorker):
    """One worker process (this module run as a script), told to quit when closed."""

    def __init__(self, place: Place, impl: Implementation) -> None:
        env = {**os.environ, "MEMLANE_PURE_PYTHON": "1" if impl.name == "python" else "0"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(place)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            with contextlib.suppress(subprocess.TimeoutExpired):  # the base class kills it
                self.proc.wait(timeout=STEP_TIMEOUT)
        super().close()


@contextlib.contextmanager
def _workers(place: Place, impl: Implementation) -> Iterator[list[Worker]]:
    workers = [Worker(place, impl) for _ in range(PROCESSES)]
    try:
        for w in workers:
            w.expect("ready")
        yield workers
    finally:
        for w in workers:
            w.close()


class TestOneProcessWins:
    """Four processes saving over one revision: exactly one wins each round, all see its save."""

    def test_rounds(self, shared_place: Place, impl: Implementation) -> None:
        cid = uuid.uuid4().hex
        with _workers(shared_place, impl) as workers:
            for round_ in range(ROUNDS):
                gated = round_ % 2 == 0  # round 0: new conversations; gated: all past the check
                for i, w in enumerate(workers):
                    w.send(json.dumps({"cid": cid, "label": f"w{i}-r{round_}", "gated": gated}))
                loaded = {w.expect("loaded")["revision"] for w in workers}
                assert len(loaded) == 1, loaded
                for w in workers:
                    w.send("go")
                if gated:
                    for w in workers:
                        w.expect("at-cas")
                    for w in workers:
                        w.send("cas")
                saved = [w.expect("saved") for w in workers]
                winners = [s for s in saved if s["outcome"] == "won"]
                assert len(winners) == 1, saved
                assert sorted(s["outcome"] for s in saved) == ["ConversationConflict"] * 3 + ["won"]
                for w in workers:
                    w.send("check")
                for w in workers:
                    seen = w.expect("checked")
                    assert seen["revision"] == winners[0]["revision"]
                    assert seen["last_prompt"] == winners[0]["label"]
                    assert seen["messages"] == seen["entries"] == 2 * (round_ + 1)


async def _worker(place: Place) -> None:
    """A process of TestOneProcessWins: loads, runs and saves as the test's lines say."""
    warnings.simplefilter("ignore")  # e.g. FerretDB's index fallback notice

    def say(**message: Any) -> None:
        print(json.dumps(message), flush=True)

    def step(expected: str) -> None:
        line = sys.stdin.readline().strip()
        assert line == expected, line

    store = open_store(place)
    await store.async_initialize()
    cs = MemlaneConversationStore(store)
    original: SaveIf = cast("Any", store).async_save_if
    gated = [False]

    async def at_cas(namespace: str, entry: MemoryEntry, expected: int | None) -> bool:
        if gated[0]:
            say(state="at-cas")
            step("cas")
        return await original(namespace, entry, expected)

    cast("Any", store).async_save_if = at_cas
    say(state="ready")
    while (line := sys.stdin.readline().strip()) not in {"", "quit"}:
        task = json.loads(line)
        gated[0] = task["gated"]
        conversation = await cs.load(task["cid"])
        say(state="loaded", revision=None if conversation is None else conversation.revision)
        conversation = conversation or Conversation(conversation_id=task["cid"])
        result = await _agent.run(task["label"], conversation=conversation)
        step("go")
        try:
            await cs.save(result)
        except ConversationConflict as exc:
            say(state="saved", outcome=type(exc).__name__)
        else:
            say(
                state="saved",
                outcome="won",
                revision=result.conversation.revision,
                label=task["label"],
            )
        step("check")
        stored = await cs.load(task["cid"])
        assert stored is not None
        say(
            state="checked",
            revision=stored.revision,
            last_prompt=_last_prompt(stored.messages),
            messages=len(stored.messages),
            entries=len(await store.async_load(cs.ENTRIES)),
        )
    await store.async_close()


if __name__ == "__main__":
    asyncio.run(_worker(json.loads(sys.argv[1])))
