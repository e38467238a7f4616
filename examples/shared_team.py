"""Shared memory for a manager and its workers: one job's record, each role its own view.

The manager hands out tasks, two workers record their actions and results, and the manager
reads its workers' results; all of it on a SQLite store other processes could share.
"""

from __future__ import annotations

import asyncio
import uuid

from memlane import SQLiteStore
from memlane.shared import (
    HierarchicalMessageStoreMemory,
    ManagerHistoryFilter,
    SharedMemory,
    StoreMessageStore,
)
from memlane.shared.message_builder import (
    create_action,
    create_final,
    create_observation,
    create_task_entry,
    create_user_message,
)


async def main() -> None:
    job = f"job-{uuid.uuid4().hex[:8]}"
    with SQLiteStore("team.sqlite3") as store:
        manager = HierarchicalMessageStoreMemory(
            StoreMessageStore(store), job, "manager", subordinates=["worker_1", "worker_2"]
        )
        workers = {key: SharedMemory(store, job, key) for key in ("worker_1", "worker_2")}
        await manager.async_add_message(create_user_message("Which of our tables grew this week?"))
        for key, table, rows in (("worker_1", "sales", 120), ("worker_2", "users", 7)):
            await manager.async_add_message(
                create_task_entry(f"Check the {table} table", agent_key=key)
            )
            await workers[key].async_add_message(create_action("count_rows", {"table": table}))
            await workers[key].async_add_message(create_observation(f"{rows} new rows"))
            await workers[key].async_add_message(create_final(f"{table}: +{rows} rows"))
        results = await manager.async_get_message_history(filter=ManagerHistoryFilter())
        for message in results:
            print(f"{message.get('agent_key', '-')}: {message['content']}")


if __name__ == "__main__":
    asyncio.run(main())
