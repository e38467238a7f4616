"""The conversation log on a persistent store: coherence, conditional writes, compaction, the
layout before the log, stores without the conditional methods, and the bounded cache.

The multi-process and real-server scenarios are in ``test_fleet.py``; these pin down the
mechanics one store call at a time.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memlane import SQLiteStore
from memlane._backend import Implementation
from memlane.conversation import ConversationMemory
from memlane.conversation.state import LOG_PREFIX, SUMMARY_KEY, namespace
from memlane.types import ConversationTurn, MemoryEntry, MemoryScope, utc_now


def summarize(turns: list[ConversationTurn]) -> str:
    """Every prompt it was given, after the previous summary: content stays traceable."""
    return " | ".join(
        t.assistant_response if t.metadata.get("summary") else t.user_prompt for t in turns
    )


class Counting:
    """A store that counts the calls made to it and passes them on."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attribute(*args, **kwargs)

        return call


class Bare:
    """A custom store written against the protocol before save_if, load_range and save_many."""

    persistent = True

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def save(self, namespace: str, entry: MemoryEntry) -> None:
        self._store.save(namespace, entry)

    def load(self, namespace: str) -> list[MemoryEntry]:
        return self._store.load(namespace)

    def load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self._store.load_by_key(namespace, key)

    def delete(self, namespace: str, entry_id: str) -> bool:
        return self._store.delete(namespace, entry_id)

    def clear(self, namespace: str) -> int:
        return self._store.clear(namespace)

    async def async_save(self, namespace: str, entry: MemoryEntry) -> None:
        self.save(namespace, entry)

    async def async_load(self, namespace: str) -> list[MemoryEntry]:
        return self.load(namespace)

    async def async_load_by_key(self, namespace: str, key: str) -> MemoryEntry | None:
        return self.load_by_key(namespace, key)

    async def async_delete(self, namespace: str, entry_id: str) -> bool:
        return self.delete(namespace, entry_id)

    async def async_clear(self, namespace: str) -> int:
        return self.clear(namespace)


def prompts(memory: ConversationMemory, cid: str = "c") -> list[str]:
    return [t.user_prompt for t in memory.get_turns(cid)]


def covered(memory: ConversationMemory, count: int, cid: str = "c") -> list[int]:
    """Which of turns ``t00``..``t<count>`` are neither in the summary nor kept."""
    text = " ".join([memory.get_summary(cid) or "", *prompts(memory, cid)])
    return [i for i in range(count) if f"t{i:02d}" not in text]


@pytest.fixture
def db(tmp_path: Path, impl: Implementation) -> Path:
    return tmp_path / "log.db"


class TestCoherence:
    def test_a_read_with_no_news_is_one_range_read(self, db: Path) -> None:
        store = Counting(SQLiteStore(db))
        memory = ConversationMemory(store=store)
        memory.add_turn("c", "hello", "hi")
        store.calls.clear()
        memory.get_message_history("c")
        assert store.calls == Counter({"load_range": 1})

    def test_an_append_with_no_news_is_one_conditional_write(self, db: Path) -> None:
        # The write is the coherence check: only a lost race reads what the others wrote.
        store = Counting(SQLiteStore(db))
        memory = ConversationMemory(store=store)
        memory.add_turn("c", "hello", "hi")
        store.calls.clear()
        memory.add_turn("c", "again", "sure")
        assert store.calls == Counter({"save_if": 1})

    def test_news_is_read_from_where_the_host_stopped(self, db: Path) -> None:
        a = ConversationMemory(store=SQLiteStore(db))
        b = ConversationMemory(store=SQLiteStore(db))
        a.add_turn("c", "a1", "ok")
        b.add_turn("c", "b2", "ok")
        store = Counting(a.store)
        a.store = store
        assert prompts(a) == ["a1", "b2"]
        assert store.calls == Counter({"load_range": 1})  # no full load

    def test_the_losing_host_takes_the_next_slot(self, db: Path) -> None:
        a = ConversationMemory(store=SQLiteStore(db))
        b = ConversationMemory(store=SQLiteStore(db))
        a.add_turn("c", "a1", "ok")
        b.get_turns("c")
        a.add_turn("c", "a2", "ok")
        # b's cache ends at a1: its first try at slot 1 loses to a2, the next one wins.
        turn = b.add_turn("c", "b3", "ok")
        assert turn.turn_id == 2
        assert prompts(a) == prompts(b) == ["a1", "a2", "b3"]
        assert [t.turn_id for t in a.get_turns("c")] == [0, 1, 2]

    def test_a_host_that_missed_a_compaction_reloads(self, db: Path) -> None:
        options: dict[str, Any] = {"max_tokens": 4000, "summarize_threshold": 40}
        a = ConversationMemory(store=SQLiteStore(db), summarizer=summarize, **options)
        b = ConversationMemory(store=SQLiteStore(db), summarizer=summarize, **options)
        a.add_turn("c", "t00 first", "ok")
        assert prompts(b) == ["t00 first"]  # b caches the conversation at one turn
        for i in range(1, 12):
            a.add_turn("c", f"t{i:02d} more words here", "fine")
        assert a.get_summary("c")  # a summarised and deleted the turns b never saw
        assert prompts(b) == prompts(a)
        assert b.get_summary("c") == a.get_summary("c")
        assert [t.turn_id for t in b.get_turns("c")] == [t.turn_id for t in a.get_turns("c")]
        assert covered(b, 12) == []


class TestSummaries:
    def test_a_summary_made_stale_by_another_host_is_discarded_and_made_again(
        self, db: Path
    ) -> None:
        options: dict[str, Any] = {"max_tokens": 4000, "summarize_threshold": 15}
        other = ConversationMemory(store=SQLiteStore(db), summarizer=summarize, **options)
        rounds: list[int] = []

        def racing(turns: list[ConversationTurn]) -> str:
            # While this host summarises, the other host commits a summary of its own.
            rounds.append(len(turns))
            if len(rounds) == 1:
                other.add_turn("c", "t50 from the other host, long enough to summarise", "ok")
                assert other.get_summary("c") is not None
            return summarize(turns)

        host = ConversationMemory(store=SQLiteStore(db), summarizer=racing, **options)
        for i in range(8):
            host.add_turn("c", f"t{i:02d} words words", "fine")
        assert len(rounds) >= 2  # the first result was discarded, a second one made
        fresh = ConversationMemory(store=SQLiteStore(db), **options)
        text = " ".join([fresh.get_summary("c") or "", *prompts(fresh)])
        for i in [*range(8), 50]:  # nothing lost, nothing doubled
            assert text.count(f"t{i:02d}") == 1, (i, text)
        assert prompts(host) == prompts(fresh)
        assert host.get_summary("c") == fresh.get_summary("c")

    def test_a_summary_too_big_for_the_budget_is_cut_to_fit(
        self, db: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        memory = ConversationMemory(
            store=SQLiteStore(db),
            max_tokens=300,
            summarize_threshold=40,
            summarizer=lambda turns: "a long summary sentence. " * 4000,
        )
        with caplog.at_level(logging.WARNING, logger="memlane"):
            for i in range(12):
                memory.add_turn("c", f"t{i:02d} words words words", "fine")
        history = memory.get_message_history("c")
        assert memory.get_summary("c") is not None
        assert memory.get_history_tokens("c") <= 300
        first = history[0].parts[0]
        assert "a long summary sentence." in str(getattr(first, "content", ""))
        assert any("cut to" in r.getMessage() for r in caplog.records)


class TestLayoutBeforeTheLog:
    def _legacy(self, store: SQLiteStore) -> None:
        """Two unkeyed turns after a summary of three, as memlane stored them before."""
        ns = namespace("old")
        store.save(
            ns,
            MemoryEntry(
                scope=MemoryScope.CONVERSATION,
                key=SUMMARY_KEY,
                content={
                    "text": "t00 t01 t02",
                    "tokens": 12,
                    "summarized_turns": 3,
                    "evicted_entry_ids": ["gone"],
                    "created_at": utc_now().isoformat(),
                },
                metadata={"kind": "summary"},
            ),
        )
        for i in (3, 4):
            turn = ConversationTurn(
                turn_id=i, user_prompt=f"t{i:02d}", assistant_response="ok", token_estimate=5
            )
            store.save(
                ns,
                MemoryEntry(
                    scope=MemoryScope.CONVERSATION,
                    content=turn.model_dump(mode="json"),
                    metadata={"kind": "turn"},
                ),
            )

    def test_it_loads_and_continues(self, db: Path) -> None:
        store = SQLiteStore(db)
        self._legacy(store)
        memory = ConversationMemory(store=store)
        assert [(t.turn_id, t.user_prompt) for t in memory.get_turns("old")] == [
            (3, "t03"),
            (4, "t04"),
        ]
        assert memory.add_turn("old", "t05", "ok").turn_id == 5
        again = ConversationMemory(store=SQLiteStore(db))
        assert [t.turn_id for t in again.get_turns("old")] == [3, 4, 5]
        assert again.get_summary("old") == "t00 t01 t02"

    def test_a_new_summary_replaces_the_old_entries(self, db: Path) -> None:
        store = SQLiteStore(db)
        self._legacy(store)
        memory = ConversationMemory(
            store=store, max_tokens=4000, summarize_threshold=20, summarizer=summarize
        )
        for i in range(5, 9):
            memory.add_turn("old", f"t{i:02d} words words", "ok")
        again = ConversationMemory(store=SQLiteStore(db))
        assert covered(again, 9, "old") == []
        entries = SQLiteStore(db).load(namespace("old"))
        assert all(e.key is not None and e.key.startswith(LOG_PREFIX) for e in entries)


class TestStoresWithoutConditionalWrites:
    def test_a_bare_store_still_serves_one_process(self, db: Path) -> None:
        memory = ConversationMemory(
            store=Bare(SQLiteStore(db)),  # type: ignore[arg-type]
            max_tokens=4000,
            summarize_threshold=30,
            summarizer=summarize,
        )
        for i in range(8):
            memory.add_turn("c", f"t{i:02d} words", "ok")
        assert covered(memory, 8) == []
        again = ConversationMemory(store=SQLiteStore(db))
        assert prompts(again) == prompts(memory)
        assert [t.turn_id for t in again.get_turns("c")] == [
            t.turn_id for t in memory.get_turns("c")
        ]


class TestBoundedCache:
    def test_least_recently_used_conversations_leave_the_cache_and_come_back(
        self, db: Path
    ) -> None:
        memory = ConversationMemory(store=SQLiteStore(db), max_cached_conversations=2)
        for cid in ("a", "b", "c"):
            memory.add_turn(cid, f"hello {cid}", "hi")
        assert list(memory._conversations.states) == ["b", "c"]
        memory.get_turns("b")  # b is now the most recently used
        memory.add_turn("d", "hello d", "hi")
        assert list(memory._conversations.states) == ["b", "d"]
        assert prompts(memory, "a") == ["hello a"]  # reloaded from the store
        assert memory.add_turn("a", "again", "ok").turn_id == 1

    def test_idle_locks_are_dropped_with_their_conversations(self, db: Path) -> None:
        memory = ConversationMemory(store=SQLiteStore(db), max_cached_conversations=1)
        for i in range(200):
            memory.add_turn(f"c{i}", "hello", "hi")
        assert len(memory._conversations.states) == 1
        assert len(memory._conversations.locks) <= 2 * 1 + 64 + 1

    def test_an_in_memory_store_keeps_everything(self, impl: Implementation) -> None:
        memory = ConversationMemory(max_cached_conversations=1)
        for cid in ("a", "b", "c"):
            memory.add_turn(cid, f"hello {cid}", "hi")
        assert [prompts(memory, cid) for cid in ("a", "b", "c")] == [
            ["hello a"],
            ["hello b"],
            ["hello c"],
        ]

    def test_the_bound_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="max_cached_conversations"):
            ConversationMemory(max_cached_conversations=0)
        with pytest.raises(TypeError, match="summarize_in_background"):
            ConversationMemory(summarize_in_background="yes")  # type: ignore[arg-type]


class TestSmallFixes:
    def test_an_empty_message_list_means_none(self, impl: Implementation) -> None:
        memory = ConversationMemory()
        given = memory.add_turn("c", "hello there", "hi", [])
        built = memory.add_turn("d", "hello there", "hi")
        assert given.token_estimate == built.token_estimate > 0
        assert len(given.raw_messages) == 2

    def test_an_imported_zero_estimate_is_counted_again(self, impl: Implementation) -> None:
        memory = ConversationMemory()
        counted = memory.add_turn("src", "hello there", "hi").token_estimate
        snapshot = memory.export_conversation("src")
        snapshot["turns"][0]["token_estimate"] = 0
        memory.import_conversation(snapshot, conversation_id="zero")
        del snapshot["turns"][0]["token_estimate"]
        memory.import_conversation(snapshot, conversation_id="missing")
        assert [t.token_estimate for t in memory.get_turns("zero")] == [counted]
        assert [t.token_estimate for t in memory.get_turns("missing")] == [counted]
