"""``memlane serve`` in a subprocess on a free loopback port, for tests that need a real server."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx


def free_port() -> int:
    """A TCP port nothing listens on now, on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """A running ``memlane serve``: its base URL, the page URL it printed, and its log.

    Args:
        args: Extra arguments after ``serve`` (``--store`` at least).
        log: Where the server's standard output and error go.
        env: Extra environment variables.
    """

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = log.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memlane", "serve", "--port", str(self.port), *args],
            stdout=self._log,  # uvicorn's access log: tests check no token reaches it
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.page_url = self._wait()

    def _wait(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"memlane serve exited:\n{self.log()}")
            found = re.search(r"memlane serve: (\S+/memories\?token=\S+)", self.log())
            if found:
                try:
                    httpx.get(f"{self.base}/api/v1/openapi.json", timeout=2)
                except httpx.TransportError:
                    pass
                else:
                    return found.group(1)
            time.sleep(0.1)
        raise RuntimeError(f"memlane serve did not start in 60 s:\n{self.log()}")

    def log(self) -> str:
        """What the server wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8")

    def stop(self) -> None:
        """Stops the server (interrupt, then kill) and closes its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
