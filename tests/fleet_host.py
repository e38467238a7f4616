"""One agent host of a fleet, for tests/test_fleet.py: the shared stores, the traceable
summarizer, and the program a child process runs.

Run as ``python fleet_host.py CONFIG_JSON``, a child is a long-lived host driven over
stdin/stdout with one JSON object per line (the line protocol of tests/test_multiprocess.py):
it says ``{"state": "ready", ...}``, then answers each command ``{"op": ...}`` with
``{"state": "ok", ...}`` until ``{"op": "exit"}``. The ``cache`` mode instead measures its own
resident memory while it touches many conversations, and reports once.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memlane
from memlane import ConversationMemory, MemoryManager
from memlane.conversation import SUMMARY_KEY, summary_backoff
from memlane.messages import message_texts
from memlane.stores import (
    FileStore,
    IndexFallbackWarning,
    MemoryStore,
    MongoDBStore,
    PostgreSQLStore,
    SQLiteStore,
)
from memlane.types import ConversationTurn, MemoryEntry

KINDS = ["sqlite", "file", "postgres", "mongodb"]
"""The shared stores a fleet can meet on."""

PROMPT = re.compile(r"\[[a-z]+\d+\]")
"""The prompts the summary tests add (``[a07]``): findable inside a summary's text."""


def prompt(label: str, number: int) -> str:
    """The prompt of turn ``number`` added by host ``label``, as :data:`PROMPT` finds it."""
    return f"[{label}{number:02d}]"


def concat_summarizer(turns: list[ConversationTurn]) -> str:
    """A summary that is the previous summary's text followed by the evicted prompts.

    Every summarised turn's prompt stays in the text verbatim, so a test can tell which turns
    a summary holds, and how many times.
    """
    return " ".join(
        t.assistant_response if t.metadata.get("summary") else t.user_prompt for t in turns
    )


class SwitchableSummarizer:
    """:func:`concat_summarizer` behind a provider that a test takes down and brings back;
    counts its calls."""

    def __init__(self) -> None:
        self.up = True
        self.calls = 0

    def __call__(self, turns: list[ConversationTurn]) -> str:
        self.calls += 1
        if not self.up:
            raise ConnectionError("summary provider down")
        return concat_summarizer(turns)


def _store_class(cfg: dict[str, Any]) -> type[Any]:
    return {
        "sqlite": SQLiteStore,
        "file": FileStore,
        "postgres": PostgreSQLStore,
        "mongodb": MongoDBStore,
    }[cfg["kind"]]


def _writes_summary(args: tuple[Any, ...]) -> bool:
    """Whether a store call's arguments hold a conversation's summary entry."""
    for arg in args:
        entries = arg if isinstance(arg, list | tuple) else [arg]
        for entry in entries:
            if isinstance(entry, MemoryEntry) and (
                entry.key == SUMMARY_KEY or entry.metadata.get("kind") == "summary"
            ):
                return True
    return False


def _killing(cls: type[Any], marker: Path) -> type[Any]:
    """``cls`` whose process dies by SIGKILL at the first store call after a summary write.

    Every public method is wrapped, whatever the store protocol grows, so the kill lands on
    the call right after the summary entry is written (today: deleting the turns it
    replaced). The method it died in is written to ``marker`` first, for the test to check.
    """

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def before(self: Any) -> None:
            if self.summary_written:
                marker.write_text(name)
                os.kill(os.getpid(), signal.SIGKILL)

        if inspect.iscoroutinefunction(method):

            async def async_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                before(self)
                result = await method(self, *args, **kwargs)
                self.summary_written = self.summary_written or _writes_summary(args)
                return result

            return async_wrapper

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            before(self)
            result = method(self, *args, **kwargs)
            self.summary_written = self.summary_written or _writes_summary(args)
            return result

        return wrapper

    skip = {"initialize", "async_initialize", "close", "async_close"}
    methods = {
        name: wrap(name, getattr(cls, name))
        for name in dir(cls)
        if not name.startswith("_")
        and name not in skip
        and callable(getattr(cls, name))
        and not isinstance(getattr(cls, name), type)
    }
    return type(f"Killing{cls.__name__}", (cls,), {**methods, "summary_written": False})


def make_store(cfg: dict[str, Any], *, kill_marker: Path | None = None) -> MemoryStore:
    """A connected store on the shared place ``cfg`` names (its own client, as a host has).

    With ``kill_marker``, the process dies right after its first summary write.
    """
    cls = _store_class(cfg)
    if kill_marker is not None:
        cls = _killing(cls, kill_marker)
    kind = cfg["kind"]
    store: MemoryStore
    if kind in ("sqlite", "file"):
        store = cls(cfg["path"])
    elif kind == "postgres":
        store = cls(cfg["url"], schema_name=cfg["name"], pool_min_size=1, pool_size=2)
    else:
        store = cls(cfg["url"], collection=cfg["name"], pool_size=2)
    with warnings.catch_warnings():
        # FerretDB cannot build the partial index; the fallback is tested on its own.
        warnings.simplefilter("ignore", IndexFallbackWarning)
        store.initialize()
    return store


def view(memory: ConversationMemory, cid: str) -> dict[str, Any]:
    """What ``memory`` shows of conversation ``cid``, as JSON-ready values."""
    turns = memory.get_turns(cid)
    return {
        "prompts": [t.user_prompt for t in turns],
        "turn_ids": [t.turn_id for t in turns],
        "summary": memory.get_summary(cid),
        "history": message_texts(memory.get_message_history(cid)),
        "history_tokens": memory.get_history_tokens(cid),
    }


def _say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


def _rss() -> int:
    """Resident memory now, in bytes, without file-backed pages (a mapped database file is
    not what the cache holds); now, not the peak: a bounded cache must stop it growing."""
    gc.collect()
    with open("/proc/self/statm") as statm:
        _, resident, shared, *_ = (int(field) for field in statm.read().split())
    return (resident - shared) * os.sysconf("SC_PAGE_SIZE")


def _cache(cfg: dict[str, Any]) -> None:
    """Touches ``cfg["conversations"]`` conversations; reports RSS at each checkpoint."""
    store = make_store(cfg)
    memory = ConversationMemory(store=store, max_cached_conversations=cfg["max_cached"])
    rss: dict[str, int] = {}
    for i in range(cfg["conversations"]):
        memory.add_turn(f"c{i}", f"question {i}", f"answer {i}")
        if i + 1 in cfg["checkpoints"]:
            rss[str(i + 1)] = _rss()
    first = memory.get_turns("c0")
    again = memory.add_turn("c0", "question 0 again", "answer 0 again")
    _say(
        state="done",
        rss=rss,
        first_prompts=[t.user_prompt for t in first],
        first_ids=[t.turn_id for t in first],
        again_id=again.turn_id,
    )
    memory.close()
    store.close()


async def _async_add_all(memory: ConversationMemory, cid: str, prompts: list[str]) -> list[int]:
    return [(await memory.async_add_turn(cid, p, f"answer to {p}")).turn_id for p in prompts]


def _host(cfg: dict[str, Any]) -> None:
    marker = cfg.get("kill_marker")
    store = make_store(cfg, kill_marker=None if marker is None else Path(marker))
    switchable = SwitchableSummarizer()
    if cfg.get("frozen_clock"):
        # The backoff's delays never pass, however slow the machine: a test sees exactly the
        # attempts the turns it adds allow.
        summary_backoff.monotonic = lambda: 0.0
    manager = MemoryManager(
        store=store,
        max_conversation_tokens=cfg["max_tokens"],
        summarize_threshold=cfg.get("summarize_threshold", 10**9),
        summarizer=switchable if cfg.get("summarize") else None,
        conversation_ttl=cfg.get("conversation_ttl"),
    )
    memory = manager.conversation
    _say(state="ready", backend=memlane.BACKEND)
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "exit":
            break
        if op == "summarizer":  # the provider goes down or comes back, for every conversation
            switchable.up = command["up"]
            _say(state="ok", calls=switchable.calls)
            continue
        cid = command["cid"]
        if op == "add":
            turn = memory.add_turn(
                cid,
                command["prompt"],
                f"answer to {command['prompt']}",
                pinned=command.get("pinned", False),
            )
            _say(state="ok", turn_id=turn.turn_id)
        elif op == "pin":
            turn = memory.pin_turn(cid, command["turn_id"])
            _say(state="ok", metadata=turn.metadata)
        elif op == "status":
            status = memory.summary_status(cid)
            _say(state="ok", status=status.state, failures=status.failures, calls=switchable.calls)
        elif op == "add_many":
            prompts = [f"{command['label']}-{i}" for i in range(command["turns"])]
            if command["use_async"]:
                ids = asyncio.run(_async_add_all(memory, cid, prompts))
            else:
                ids = [memory.add_turn(cid, p, f"answer to {p}").turn_id for p in prompts]
            _say(state="ok", turn_ids=ids)
        elif op == "view":
            _say(state="ok", **view(memory, cid))
        elif op == "clear":
            if command.get("use_async"):
                asyncio.run(memory.async_clear(cid))
            else:
                memory.clear(cid)
            _say(state="ok", conversation_ids=memory.conversation_ids)
        else:
            raise ValueError(f"unknown op {op!r}")
    manager.close()
    store.close()


def main() -> None:
    """Runs the host ``sys.argv[1]`` (JSON) describes."""
    cfg = json.loads(sys.argv[1])
    if cfg["mode"] == "cache":
        _cache(cfg)
    else:
        _host(cfg)


if __name__ == "__main__":
    main()
