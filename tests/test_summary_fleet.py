"""Fail-safe summaries and pinned turns in a fleet of two hosts on SQLite and PostgreSQL
(issue 27): backoff state is each host's own, and a summary committed by either host ends the
other's; a pin made on one host holds on the other, through its summaries, and in a host
that starts afterwards.

Hosts are child processes (tests/fleet_host.py, as in tests/test_fleet.py), and pairs of
instances in this process each with its own store client.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from conftest import drop_server_place
from db_servers import Server
from fleet_host import make_store, prompt, view
from memlane import ConversationMemory, _backend
from memlane.conversation import summary_backoff
from summary_models import Clock, CountingSummarizer, call
from test_fleet import child_hosts, fresh_memory

FAILING = {"summarize": True, "summarize_threshold": 40, "max_tokens": 120, "frozen_clock": True}
"""Hosts that summarise every few turns (a turn of these tests costs ~10 tokens), whose
backoff delays never pass."""


@pytest.fixture(params=["sqlite", "postgres"])
async def place(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Where the two hosts meet: an SQLite file or a fresh PostgreSQL schema."""
    name = f"fleet_{uuid.uuid4().hex[:12]}"
    if request.param == "sqlite":
        path = tmp_path / "shared.sqlite3"
        make_store({"kind": "sqlite", "path": str(path)}).close()
        yield {"kind": "sqlite", "path": str(path), "name": name}
        return
    server: Server = request.getfixturevalue("postgres_server")
    yield {"kind": "postgres", "url": server.url, "name": name}
    await drop_server_place("postgres", server.url, name)


class TestBackoffPerHost:
    """A failing host backs off alone; another host's summary ends its backoff."""

    def test_two_processes(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        with child_hosts(place, impl, FAILING, FAILING) as (down, up):
            down.call("summarizer", up=False)
            down.call("add", cid=cid, prompt=prompt("a", 0))
            added = 1
            while down.call("status", cid=cid)["status"] != "failing":
                down.call("add", cid=cid, prompt=prompt("a", added))
                added += 1
            for _ in range(4):  # backed off: no call at these turns
                down.call("add", cid=cid, prompt=prompt("a", added))
                added += 1
            status = down.call("status", cid=cid)
            assert (status["status"], status["failures"], status["calls"]) == ("failing", 1, 1)
            assert up.call("status", cid=cid)["status"] == "pending"  # its own state: no failure
            up.call("add", cid=cid, prompt=prompt("b", added))  # summarises, and commits
            added += 1
            assert up.call("status", cid=cid)["status"] == "ok"
            status = down.call("status", cid=cid)
            assert (status["status"], status["calls"]) == ("ok", 1)
            shown = down.call("view", cid=cid)
            assert shown["summary"] is not None
            assert shown["history_tokens"] <= FAILING["max_tokens"]
            for child in (down, up):
                child.exit()

    def test_two_instances(
        self, place: dict[str, Any], impl: _backend.Implementation, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        clock = Clock()
        monkeypatch.setattr(summary_backoff, "monotonic", clock)
        cid = uuid.uuid4().hex
        failing, working = CountingSummarizer(), CountingSummarizer()
        failing.up = False
        options = {"max_tokens": 120, "summarize_threshold": 40}
        with (
            fresh_memory(place, summarizer=failing, **options) as down,
            fresh_memory(place, summarizer=working, **options) as up,
        ):
            for i in range(8):
                down.add_turn(cid, prompt("a", i), "word " * 5)
                assert down.get_history_tokens(cid) <= 120
            assert failing.calls == 1
            assert down.summary_status(cid).state == "failing"
            up.add_turn(cid, prompt("b", 8), "word " * 5)
            assert working.calls == 1
            assert down.summary_status(cid).state == "ok"
            clock.advance(0.5)  # still inside the old delay: the backoff has ended anyway
            failing.up = True
            for i in range(9, 16):
                down.add_turn(cid, prompt("a", i), "word " * 5)
            assert failing.calls > 1


class TestPinsAcrossHosts:
    """A pin made on one host holds on the other, through its summaries, and after them."""

    def test_two_processes(self, place: dict[str, Any], impl: _backend.Implementation) -> None:
        cid = uuid.uuid4().hex
        with child_hosts(place, impl, FAILING, FAILING) as (one, two):
            one.call("add", cid=cid, prompt="[pin00]", pinned=True)
            two.call("add", cid=cid, prompt=prompt("b", 1))
            assert one.call("pin", cid=cid, turn_id=1)["metadata"] == {"pinned": True}
            for i in range(2, 20):
                (one, two)[i % 2].call("add", cid=cid, prompt=prompt("ab"[i % 2], i))
            shown = [child.call("view", cid=cid) for child in (one, two)]
            with fresh_memory(place, max_tokens=FAILING["max_tokens"]) as reader:
                final = view(reader, cid)
            for seen in shown:
                assert {k: v for k, v in seen.items() if k != "state"} == final
            assert final["summary"] is not None
            assert final["turn_ids"][:2] == [0, 1]
            assert final["prompts"][:2] == ["[pin00]", "[b01]"]
            assert "[pin00]" not in final["summary"]
            joined = " ".join(final["history"])
            assert "[pin00]" in joined
            assert "[b01]" in joined
            assert final["history_tokens"] <= FAILING["max_tokens"]
            for child in (one, two):
                child.exit()

    async def test_two_instances_async(
        self, place: dict[str, Any], impl: _backend.Implementation
    ) -> None:
        cid = uuid.uuid4().hex
        options = {"max_tokens": 120, "summarize_threshold": 40}
        with (
            fresh_memory(place, summarizer=CountingSummarizer(), **options) as one,
            fresh_memory(place, summarizer=CountingSummarizer(), **options) as two,
        ):
            await one.async_add_turn(cid, "[pin00]", "word " * 5)
            await two.async_pin_turn(cid, 0)
            for i in range(1, 16):
                await (one, two)[i % 2].async_add_turn(cid, prompt("ab"[i % 2], i), "word " * 5)
            for host in (one, two):
                turns = await host.async_get_turns(cid)
                assert (turns[0].turn_id, turns[0].metadata) == (0, {"pinned": True})
                history = " ".join(view(host, cid)["history"])
                assert "[pin00]" in history
            transcript = await two.async_get_transcript(cid)
            assert transcript[0].metadata == {"pinned": True}
            assert [t.turn_id for t in transcript] == list(range(16))


def test_a_host_sees_the_pins_of_a_memory_it_did_not_make(
    place: dict[str, Any], impl: _backend.Implementation
) -> None:
    """A restarted host on the shared store restores folded pins."""
    cid = uuid.uuid4().hex
    with fresh_memory(place, summarizer=CountingSummarizer(), max_tokens=120) as first:
        first.add_turn(cid, "[pin00]", "word " * 5, pinned=True)
        for i in range(1, 20):
            first.add_turn(cid, prompt("a", i), "word " * 5)
        expected = view(first, cid)
    with fresh_memory(place, summarizer=CountingSummarizer(), max_tokens=120) as again:
        assert view(again, cid) == expected
        assert isinstance(again, ConversationMemory)


class TestSummaryOnDemandAcrossHosts:
    """summarize_now on one host: the other sees the summary, and its backoff ends."""

    @pytest.mark.parametrize("mode", ["sync", "async"])
    async def test_two_instances(
        self,
        place: dict[str, Any],
        impl: _backend.Implementation,
        mode: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(summary_backoff, "monotonic", Clock())
        cid = uuid.uuid4().hex
        failing, working = CountingSummarizer(), CountingSummarizer()
        failing.up = False
        options = {"max_tokens": 120, "summarize_threshold": 40}
        with (
            fresh_memory(place, summarizer=failing, **options) as down,
            fresh_memory(place, summarizer=working, **options) as up,
        ):
            for i in range(6):
                await call(down, "add_turn", mode, cid, prompt("a", i), "word " * 5, pinned=i == 1)
            assert (await call(down, "summary_status", mode, cid)).state == "failing"
            summary = await call(up, "summarize_now", mode, cid, focus="the a-prompts")
            assert working.inputs[-1][0].metadata == {"focus": True}
            assert await call(down, "get_summary", mode, cid) == summary
            assert (await call(down, "summary_status", mode, cid)).state == "ok"
            assert [t.turn_id for t in await call(down, "get_turns", mode, cid)] == [1]
