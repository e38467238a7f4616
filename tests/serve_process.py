"""``memlane serve`` in a subprocess on a free loopback port, and Debian's Chromium to open it.

Chromium comes from Debian's packages (``scripts/install_browser.sh``, run by the test
command); Playwright drives it through ``executable_path``, since Playwright's own browser
download cannot work here. A missing Chromium fails the test: it is never skipped.
Screenshots go to ``target/test-artifacts/`` (or ``$MEMLANE_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium keeps trying to reach Google's services, flooding a closed network.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(
    os.environ.get(
        "MEMLANE_TEST_ARTIFACTS",
        Path(__file__).resolve().parent.parent / "target" / "test-artifacts",
    )
)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless; its absence is a failure with the fix in the message."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/install_browser.sh (apt-get install chromium)",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


def open_tab(page: Page, name: str, rows: int) -> None:
    """Clicks the tab ``name`` and waits until its ``rows`` records are shown."""
    page.click(f"nav button[data-tab={name}]")
    expect(page.locator(f"nav button[data-tab={name}]")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#rows")).to_have_attribute("data-tab", name)
    expect(page.locator("#rows tr[data-id]")).to_have_count(rows)


def screenshot(page: Page, name: str) -> None:
    """Saves the whole page as ``memories-{name}.png`` in :data:`ARTIFACTS`."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"memories-{name}.png"), full_page=True)


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
