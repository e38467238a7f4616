"""A fleet of two hosts on PostgreSQL: two processes serve one conversation, turn by turn.

Each host is a separate process with its own connection pool; every turn is a conditional
write, so both see the same history in commit order. Needs a PostgreSQL server and
``pip install 'memlane[postgres]'``::

    MEMLANE_POSTGRES_URL=postgresql://app@localhost/memory python examples/fleet_postgres.py
"""

from __future__ import annotations

import os
import subprocess
import sys

from memlane import MemoryManager
from memlane.config import MemlaneSettings

TURNS_PER_HOST = 3


def manager() -> MemoryManager:
    """The host's memory on the PostgreSQL store ``MEMLANE_POSTGRES_URL`` names."""
    return MemoryManager.from_config(MemlaneSettings.from_env(backend="postgres"))


def host(name: str, conversation_id: str) -> None:
    """One host: adds its turns to the shared conversation."""
    memory = manager()
    try:
        for n in range(TURNS_PER_HOST):
            memory.add_turn(conversation_id, f"{name}: question {n}", f"{name}: answer {n}")
    finally:
        memory.close()


def main() -> None:
    if not os.environ.get("MEMLANE_POSTGRES_URL"):
        sys.exit(
            "set MEMLANE_POSTGRES_URL to a PostgreSQL database, e.g. postgresql://app@localhost/memory"
        )
    memory = manager()
    try:
        cid = memory.new_conversation()
        hosts = [
            subprocess.Popen([sys.executable, __file__, "--host", name, cid])
            for name in ("host-a", "host-b")
        ]
        if any(p.wait() != 0 for p in hosts):
            sys.exit("a host failed")
        turns = memory.get_turns(cid)
        print(f"conversation {cid}: {len(turns)} turns from two hosts")
        for turn in turns:
            print(f"  [{turn.turn_id}] {turn.user_prompt}")
        assert [t.turn_id for t in turns] == list(range(2 * TURNS_PER_HOST))
    finally:
        memory.close()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--host":
        host(sys.argv[2], sys.argv[3])
    else:
        main()
