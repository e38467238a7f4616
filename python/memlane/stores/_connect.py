"""What the network stores share before any connection: the driver import, URL checks,
addresses for messages, what a server cannot hold, and the private event-loop thread the
sync methods run on."""

from __future__ import annotations

import asyncio
import threading
import urllib.parse
from collections.abc import Coroutine
from types import ModuleType
from typing import Any, TypeVar

from memlane._validate import check_str

T = TypeVar("T")


class IndexFallbackWarning(UserWarning):
    """A database server lacks an index feature the store would use; a lesser one serves.

    MongoDB-compatible servers without partial or text indexes, PostgreSQL without pg_trgm:
    the store still keeps every rule, and the message says what is slower or matches less.
    """


def require(module: str, extra: str) -> ModuleType:
    """Imports an optional driver, or says which extra installs it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; install it with: pip install 'memlane[{extra}]'"
        ) from exc


def check_url(url: object) -> str:
    """A connection URL: a non-empty ``str``."""
    text = check_str(url, "url")
    if not text:
        raise ValueError("url must be a non-empty connection URL")
    return text


def hosts(url: str, default_port: int) -> str:
    """``host:port`` (comma-separated for a host list) of a connection URL, for messages."""
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    found = []
    for item in netloc.split(",") if netloc else ["localhost"]:
        try:
            parts = urllib.parse.urlsplit(f"//{item}")
            host, port = parts.hostname or "localhost", parts.port or default_port
        except ValueError:
            found.append(item)
            continue
        found.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(found)


def utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot travel as UTF-8 (a lone surrogate), or ``None``."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate {text[exc.start]!r} at position {exc.start}"
    return None


class LoopThread:
    """A private event loop in a daemon thread: where the sync methods run the async ones."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The running private loop, or ``None`` before first use and after :meth:`stop`."""
        return self._loop

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()
                    try:
                        # A call still in flight gets CancelledError instead of waiting forever.
                        pending = asyncio.all_tasks(loop)
                        for task in pending:
                            task.cancel()
                        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                        loop.run_until_complete(loop.shutdown_asyncgens())
                        loop.run_until_complete(loop.shutdown_default_executor())
                    finally:
                        loop.close()

                thread = threading.Thread(target=main, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the private loop and waits for it, from any other thread."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a sync memlane store method was called on the store's own event-loop thread; "
                "await the async_* method instead"
            )
        loop = self._start()
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self) -> None:
        """Stops the loop and joins its thread; a later :meth:`run` starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join()
