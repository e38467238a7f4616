"""LongTermMemory.forget_user: every long-term record of one person (merged users included),
found by id, merged id or channel:id, listed first with dry_run, gone afterwards; nobody
else's records are touched. On the in-memory, SQLite and PostgreSQL stores, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from memlane import ConversationMemory, LongTermMemory, SQLiteStore
from memlane.errors import UserNotFoundError
from memlane.longterm import ForgetReport
from memlane.longterm.facts import fact_namespace
from memlane.longterm.model import FactScope
from memlane.longterm.users import USERS_NAMESPACE
from store_kinds import Made, open_store


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def made(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Made]:
    async for found in open_store(request.param, request, tmp_path):
        yield found


class People(NamedTuple):
    memory: LongTermMemory
    alice: str
    alias: str  # a user merged into alice
    bob: str
    thread: str  # the conversation thread_id made for alice


async def people(made: Made) -> People:
    """Alice (telegram 123, and email a@x.org merged into her) and Bob, each with facts, an
    episode and conversations."""
    memory = LongTermMemory(made.store)
    alice = (await memory.async_identify_user("telegram", 123, display_name="Alice")).id
    alias = (await memory.async_identify_user("email", "a@x.org")).id
    bob = (await memory.async_identify_user("telegram", 456, display_name="Bob")).id
    await memory.async_remember("city", "Lisbon", scope="user", scope_id=alice)
    await memory.async_remember("pet", "cat", scope="user", scope_id=alias)
    await memory.async_remember("city", "Porto", scope="user", scope_id=bob)
    await memory.async_remember("motto", "carpe diem", scope="global")
    for uid in (alice, alias, bob):
        await memory.async_record_episode(
            agent_id="helper", trigger="chat", input=f"hi from {uid}", success=True, user_id=uid
        )
    await memory.async_record_user_activity(alice, conversation_id="alice-chat")
    await memory.async_record_user_activity(bob, conversation_id="bob-chat")
    await memory.async_merge_users(alias, alice)
    thread = await memory.async_thread_id(alice, 123, "support")
    conversations = ConversationMemory(store=made.store)
    await conversations.async_add_turn(thread, "help", "sure")
    await conversations.async_add_turn(
        await memory.async_thread_id(bob, 456, "support"), "hey", "hello"
    )
    return People(memory, alice, alias, bob, thread)


def how(p: People, form: str) -> str:
    return {"id": p.alice, "merged": p.alias, "channel": "email:a@x.org"}[form]


class TestForgetUser:
    """forget_user deletes the person's facts, episodes, identifiers and user records."""

    @pytest.mark.parametrize("form", ["id", "merged", "channel"])
    async def test_everything_of_the_person_goes(self, made: Made, form: str) -> None:
        p = await people(made)
        report = await p.memory.async_forget_user(how(p, form))
        assert isinstance(report, ForgetReport)
        assert report.dry_run is False
        assert report.user_ids == [p.alice, p.alias]
        assert sorted(report.facts) == sorted([f"user:{p.alice}:city", f"user:{p.alice}:pet"])
        assert len(report.episodes) == 2
        assert sorted(report.identifiers) == ["email:a@x.org", "telegram:123"]
        # Conversations are listed for the caller, and thread ids are found on stores that
        # list conversations (an in-memory store keeps them in the memory object only).
        expected = ["alice-chat"] if made.kind == "memory" else ["alice-chat", p.thread]
        assert report.conversations == expected
        memory = p.memory
        for uid in (p.alice, p.alias):
            assert await memory.async_get_user(uid) is None
            assert await memory.async_get_fact("city", user_id=uid) is None
        assert [e.user_id for e in await memory.async_episodes()] == [p.bob]
        # The channel identity is free again: seen anew, it is a new person.
        again = await memory.async_identify_user("telegram", 123)
        assert again.id not in (p.alice, p.alias)
        # Nobody else's records are touched.
        bob = await memory.async_get_user(p.bob)
        assert bob is not None
        assert bob.conversation_ids == ["bob-chat"]
        fact = await memory.async_get_fact("city", user_id=p.bob)
        assert fact is not None
        assert fact.value == "Porto"
        motto = await memory.async_get_fact("motto")
        assert motto is not None
        # Long-term memory leaves the conversations to conversation memory.
        if made.kind != "memory":
            turns = await ConversationMemory(store=made.store).async_get_turns(p.thread)
            assert [t.user_prompt for t in turns] == ["help"]

    async def test_dry_run_lists_and_deletes_nothing(self, made: Made) -> None:
        p = await people(made)
        names = await made.store.async_namespaces()
        sizes = {n: len(await made.store.async_load(n)) for n in names}
        listed = await p.memory.async_forget_user(p.alice, dry_run=True)
        assert listed.dry_run is True
        assert await made.store.async_namespaces() == names
        assert {n: len(await made.store.async_load(n)) for n in names} == sizes
        done = await p.memory.async_forget_user(p.alice)
        assert listed.model_dump() == {**done.model_dump(), "dry_run": True}
        assert set(listed.model_dump()) == {
            "user_ids",
            "facts",
            "episodes",
            "identifiers",
            "conversations",
            "dry_run",
        }

    async def test_sync(self, made: Made) -> None:
        p = await people(made)
        report = await asyncio.to_thread(p.memory.forget_user, "telegram:123")
        assert report.user_ids == [p.alice, p.alias]
        assert await asyncio.to_thread(p.memory.get_user, p.alice) is None
        with pytest.raises(UserNotFoundError):
            await asyncio.to_thread(p.memory.forget_user, p.alice)

    async def test_forgotten_twice_or_unknown(self, made: Made) -> None:
        p = await people(made)
        await p.memory.async_forget_user(p.bob)
        for unknown in (p.bob, "telegram:456", "nobody", "sms:1"):
            with pytest.raises(UserNotFoundError, match=repr(unknown)) as info:
                await p.memory.async_forget_user(unknown)
            assert isinstance(info.value, KeyError)

    @pytest.mark.parametrize(
        ("user_id", "dry_run", "error"),
        [("", False, ValueError), (7, False, TypeError), ("x", "yes", TypeError)],
    )
    async def test_bad_arguments(
        self, made: Made, user_id: Any, dry_run: Any, error: type[Exception]
    ) -> None:
        memory = LongTermMemory(made.store)
        with pytest.raises(error):
            await memory.async_forget_user(user_id, dry_run=dry_run)


async def test_reading_users_on_a_read_only_store_never_writes(tmp_path: Path) -> None:
    """get_user, identify_user of a known person and user_context refresh the preference
    cache on a writable store; read-only, they return fresh preferences and write nothing."""
    path = tmp_path / "memory.sqlite3"
    store = SQLiteStore(path)
    memory = LongTermMemory(store)
    uid = (await memory.async_identify_user("telegram", 1)).id
    # A preference written behind the cache's back (as an older release could leave it).
    await memory.async_remember(
        "tone", "brief", scope="user", scope_id=uid, fact_type="user_preference"
    )
    held = await store.async_load_by_key(USERS_NAMESPACE, uid)
    assert held is not None
    stale = held.model_copy(update={"content": {**held.content, "preferences": {}}})
    await store.async_save(USERS_NAMESPACE, stale)
    assert len(await store.async_load(fact_namespace(FactScope.USER, uid))) == 1
    store.close()
    before = path.read_bytes()
    reader = LongTermMemory(SQLiteStore(path, read_only=True))
    user = await reader.async_get_user(uid)
    assert user is not None
    assert user.preferences == {"tone": "brief"}
    assert (await reader.async_user_context(uid)).preferences == {"tone": "brief"}
    assert (await reader.async_identify_user("telegram", 1)).id == uid
    report = await reader.async_forget_user(uid, dry_run=True)
    assert report.user_ids == [uid]
    reader.store.close()
    assert path.read_bytes() == before
