"""A store filled with one of every kind of record, for the command line and server tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memlane import MemoryManager, WorkingMemory
from memlane.longterm import LongTermMemory


@dataclass
class Filled:
    """The ids of what :func:`fill` stored."""

    conversation_id: str
    other_conversation_id: str
    user_id: str
    other_user_id: str
    episode_id: str
    procedure_id: str


def fill(manager: MemoryManager) -> Filled:
    """Stores facts in every scope, two conversations, an episode, a procedure, two users and
    a working-memory scope with a colon in its name."""
    long_term = manager.long_term or LongTermMemory(manager.store)
    ada = long_term.identify_user("telegram", "1001", display_name="Ada")
    bob = long_term.identify_user("email", "bob@example.com", display_name="Bob")
    long_term.remember("timezone", "Europe/Lisbon", scope="user", scope_id=ada.id)
    long_term.remember(
        "diet", "vegetarian", scope="user", scope_id=ada.id, fact_type="user_preference"
    )
    long_term.remember("timezone", "America/Chicago", scope="user", scope_id=bob.id)
    long_term.remember("style", "concise answers", scope="agent", scope_id="travel")
    long_term.remember("capital_of_portugal", "Lisbon")
    long_term.remember("timezone", "UTC")  # a global fact with a key users also have
    start = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    episode = long_term.record_episode(
        agent_id="travel",
        trigger="user_message",
        input="plan a day in Sintra",
        success=True,
        output="Pena Palace, then Quinta da Regaleira",
        user_id=ada.id,
        started_at=start,
        ended_at=start + timedelta(seconds=3),
    )
    procedure = long_term.add_procedure(
        "weather lookup",
        trigger_conditions={"goal_contains": ["weather"]},
        procedure_type="tool_sequence",
        content=["get_weather"],
    )
    cid = manager.new_conversation()
    manager.add_turn(cid, "Hi, I'm Ada. Planning Lisbon in May.", "Lovely! Noted.")
    manager.add_turn(cid, "What's the weather like?", "Sunny, 22°C.")
    other = manager.new_conversation()
    manager.add_turn(other, "Hello from Bob", "Hi Bob")
    working = WorkingMemory(store=manager.store, scope_id="agent:travel")
    working.set("city", "Lisbon")
    working.set("budget", 1200)
    return Filled(cid, other, ada.id, bob.id, episode.id, procedure.id)
