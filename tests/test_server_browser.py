"""The ``/memories`` page in a real headless Chromium, against the real ``memlane serve``.

Chromium comes from Debian's packages (``scripts/install_browser.sh``, run by the test
command); Playwright drives it through ``executable_path``, since Playwright's own browser
download cannot work here. A missing Chromium fails the test: it is never skipped.

Screenshots of every tab are saved in ``target/test-artifacts/`` (or
``$MEMLANE_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from memlane import MemoryManager, SQLiteStore
from operator_data import Filled, fill
from serve_process import Served

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
TOKEN = "browser-test-token"
ARTIFACTS = Path(
    os.environ.get(
        "MEMLANE_TEST_ARTIFACTS",
        Path(__file__).resolve().parent.parent / "target" / "test-artifacts",
    )
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
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


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Served, Filled]]:
    """``memlane serve`` over a SQLite file holding one of every record."""
    path = tmp_path / "memory.sqlite3"
    store = SQLiteStore(str(path))
    filled = fill(MemoryManager(store=store, long_term=True))
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        yield served, filled


def _api_ids(server: Served, path: str) -> list[str]:
    response = httpx.get(
        f"{server.base}/api/v1/{path}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    response.raise_for_status()
    return [item["id"] for item in response.json()["items"]]


def _open_tab(page: Page, name: str, rows: int) -> None:
    page.click(f"nav button[data-tab={name}]")
    expect(page.locator(f"nav button[data-tab={name}]")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#rows tr[data-id]")).to_have_count(rows)


def _screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"memories-{name}.png"), full_page=True)


def test_browse_search_and_delete(browser: Browser, server: tuple[Served, Filled]) -> None:
    """Every tab shows its records; search narrows; two selected facts are deleted, only them."""
    served, filled = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        page.on("dialog", lambda dialog: dialog.accept())
        # The printed URL carries the token once; the page then lives on the cookie.
        page.goto(served.page_url)
        assert page.url == f"{served.base}/memories#facts"
        assert TOKEN not in page.url
        expect(page.locator("#rows tr[data-id]")).to_have_count(6)
        _screenshot(page, "facts")

        page.fill("#search", "timezone")
        expect(page.locator("#rows tr[data-id]")).to_have_count(3)
        page.fill("#search", "")
        expect(page.locator("#rows tr[data-id]")).to_have_count(6)

        doomed = [f"user:{filled.user_id}:timezone", "global:capital_of_portugal"]
        expect(page.locator("#delete")).to_be_disabled()
        for fact in doomed:
            page.locator(f'input.select[data-id="{fact}"]').check()
        page.click("#delete")
        expect(page.locator("#status")).to_have_text("deleted 2")
        expect(page.locator("#rows tr[data-id]")).to_have_count(4)
        left = _api_ids(served, "facts/")
        assert len(left) == 4
        assert not set(doomed) & set(left)
        assert f"user:{filled.other_user_id}:timezone" in left
        assert "global:timezone" in left

        _open_tab(page, "episodes", 1)
        expect(page.locator("#rows")).to_contain_text("plan a day in Sintra")
        _screenshot(page, "episodes")

        _open_tab(page, "conversations", 2)
        page.click(f'#rows tr[data-id="{filled.conversation_id}"] td:nth-child(2)')
        chat = page.locator("#chat")
        expect(chat).to_be_visible()
        expect(chat.locator(".turn")).to_have_count(2)
        expect(chat.locator(".msg.user").first).to_have_text("Hi, I'm Ada. Planning Lisbon in May.")
        expect(chat.locator(".msg.assistant").last).to_have_text("Sunny, 22°C.")
        expect(chat.locator("#budget")).to_contain_text("/ 128000 tokens")
        expect(chat.locator(".tokens").first).to_contain_text("tokens")
        _screenshot(page, "conversations")

        _open_tab(page, "procedures", 1)
        expect(page.locator("#rows")).to_contain_text("weather lookup")
        _screenshot(page, "procedures")

        _open_tab(page, "users", 2)
        page.fill("#search", "Bob")
        expect(page.locator("#rows tr[data-id]")).to_have_count(1)
        page.click("#select-all")
        page.click("#delete")
        expect(page.locator("#status")).to_have_text("deleted 1")
        assert _api_ids(served, "memory-users/") == [filled.user_id]
        page.fill("#search", "")
        expect(page.locator("#rows tr[data-id]")).to_have_count(1)
        _screenshot(page, "users")

        _open_tab(page, "working", 2)
        expect(page.locator("#scope")).to_have_value("agent:travel")
        expect(page.locator("#rows")).to_contain_text("Lisbon")
        _screenshot(page, "working")
    finally:
        context.close()
    assert "deleted facts" in served.log()
