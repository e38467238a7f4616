"""The ``/memories`` page in a real headless Chromium, against the real ``memlane serve``:
browsing, deleting, paging, sorting, filters, links, export, editing, the conversation view,
forgetting a user, and the layout at 1280 and 420 px, light and dark.

Screenshots of every tab are saved in ``target/test-artifacts/`` (see ``serve_process``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser, expect

from memlane import MemoryManager, SQLiteStore, WorkingMemory
from operator_data import Filled, fill
from serve_process import Served, chromium, open_tab, screenshot

TOKEN = "browser-test-token"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless; its absence is a failure with the fix in the message."""
    with chromium() as launched:
        yield launched


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
        screenshot(page, "facts")

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

        open_tab(page, "episodes", 1)
        expect(page.locator("#rows")).to_contain_text("plan a day in Sintra")
        screenshot(page, "episodes")

        open_tab(page, "conversations", 2)
        page.click(f'#rows tr[data-id="{filled.conversation_id}"] td:nth-child(2)')
        chat = page.locator("#chat")
        expect(chat).to_be_visible()
        expect(chat.locator(".turn")).to_have_count(2)
        expect(chat.locator(".msg.user").first).to_have_text("Hi, I'm Ada. Planning Lisbon in May.")
        expect(chat.locator(".msg.assistant").last).to_have_text("Sunny, 22°C.")
        expect(chat.locator("#budget")).to_contain_text("/ 128000 tokens")
        expect(chat.locator(".tokens").first).to_contain_text("tokens")
        screenshot(page, "conversations")

        open_tab(page, "procedures", 1)
        expect(page.locator("#rows")).to_contain_text("weather lookup")
        screenshot(page, "procedures")

        open_tab(page, "users", 2)
        page.fill("#search", "Bob")
        expect(page.locator("#rows tr[data-id]")).to_have_count(1)
        page.click("#select-all")
        page.click("#delete")
        expect(page.locator("#status")).to_have_text("deleted 1")
        assert _api_ids(served, "memory-users/") == [filled.user_id]
        page.fill("#search", "")
        expect(page.locator("#rows tr[data-id]")).to_have_count(1)
        screenshot(page, "users")

        open_tab(page, "working", 2)
        expect(page.locator("#scope")).to_have_value("agent:travel")
        expect(page.locator("#rows")).to_contain_text("Lisbon")
        screenshot(page, "working")
    finally:
        context.close()
    assert "deleted facts" in served.log()


@pytest.fixture
def many(tmp_path: Path) -> Iterator[tuple[Served, Filled]]:
    """``memlane serve`` over the usual records plus 55 more global facts (61 in all)."""
    path = tmp_path / "many.sqlite3"
    store = SQLiteStore(str(path))
    manager = MemoryManager(store=store, long_term=True)
    filled = fill(manager)
    assert manager.long_term is not None
    for n in range(55):
        manager.long_term.remember(f"note_{n:02}", {"n": n, "tags": ["x"]}, confidence=0.5)
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        yield served, filled


def test_paging_sorting_filters_links_export_and_editing(
    browser: Browser, many: tuple[Served, Filled], tmp_path: Path
) -> None:
    """What an operator does: page through every record, sort, filter, follow a link, export
    what is shown, edit a value in place, open a row from the keyboard, search every kind."""
    served, filled = many
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    try:
        page.goto(served.page_url)
        rows = page.locator("#rows tr[data-id]")
        expect(rows).to_have_count(50)
        expect(page.locator("#range")).to_have_text("1–50 of 61")
        page.click("#next")
        expect(page.locator("#range")).to_have_text("51–61 of 61")
        expect(rows).to_have_count(11)
        page.click("#prev")
        expect(rows).to_have_count(50)
        expect(page.locator("#rows")).not_to_contain_text("[object Object]")
        expect(page.locator("#rows")).to_contain_text('{"n":3,"tags":["x"]}')

        page.click("th button[data-sort=key]")
        expect(page.locator("th[aria-sort=ascending]")).to_have_count(1)
        expect(rows.first).to_have_attribute("data-id", "global:capital_of_portugal")
        page.click("th button[data-sort=key]")
        expect(page.locator("th[aria-sort=descending]")).to_have_count(1)
        expect(rows.first.locator("td").nth(1)).to_have_text("timezone")

        page.select_option("select[data-filter=scope]", "user")
        expect(rows).to_have_count(3)
        expect(page.locator("#rows")).to_contain_text("user: Ada")  # a name, not the raw id
        with page.expect_download() as shown_csv:
            page.click("#export-csv")
        csv_text = Path(shown_csv.value.path()).read_text(encoding="utf-8")
        assert csv_text.splitlines()[0] == "id,key,value,scope,type,confidence,updated"
        assert len(csv_text.splitlines()) == 4
        assert f"user:{filled.user_id}:timezone" in csv_text
        with page.expect_download() as shown_json:
            page.click("#export-json")
        exported = json.loads(Path(shown_json.value.path()).read_text(encoding="utf-8"))
        assert {f["scope"] for f in exported} == {"user"}
        assert len(exported) == 3

        fact = f"user:{filled.user_id}:timezone"
        page.locator(f'#rows tr[data-id="{fact}"] button.edit').click()
        page.fill("tr.editor textarea", "Europe/Porto")
        page.fill("tr.editor input[type=number]", "0.3")
        page.click("tr.editor button[type=submit]")
        expect(page.locator("#status")).to_have_text(f"saved {fact}")
        edited = _api(served, "facts/", user_id=filled.user_id, q="timezone")["items"][0]
        assert (edited["value"], edited["confidence"]) == ("Europe/Porto", 0.3)

        page.goto(f"{served.base}/memories#facts/{quote(fact, safe='')}")
        page.reload()
        expect(page.locator("#detail")).to_be_visible()
        expect(page.locator("#detail pre")).to_contain_text('"value": "Europe/Porto"')

        open_tab(page, "episodes", 1)
        page.locator("#rows tr[data-id]").first.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#detail")).to_contain_text("Quinta da Regaleira")
        assert page.url.endswith(f"#episodes/{filled.episode_id}")

        open_tab(page, "users", 2)
        page.locator(f'#rows tr[data-id="{filled.user_id}"] button.edit').click()
        page.fill("tr.editor input[type=text]", "Ada Lovelace")
        page.click("tr.editor button[type=submit]")
        expect(page.locator("#rows")).to_contain_text("Ada Lovelace")

        page.fill("#everywhere-q", "Sintra")
        page.press("#everywhere-q", "Enter")
        expect(page.locator("nav button[data-tab=search]")).to_have_attribute(
            "aria-selected", "true"
        )
        expect(rows).to_have_count(1)
        page.locator("#rows a").first.click()
        expect(page.locator("#detail")).to_contain_text("plan a day in Sintra")
    finally:
        context.close()


def _api(server: Served, path: str, **params: Any) -> Any:
    response = httpx.get(
        f"{server.base}/api/v1/{path}",
        params=params,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    response.raise_for_status()
    return response.json()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 420])
def test_layout_wide_narrow_light_dark(
    browser: Browser, server: tuple[Served, Filled], width: int, scheme: str
) -> None:
    """Every tab fits a 420 px screen without sideways scrolling; dark mode follows the system."""
    served, filled = server
    context = browser.new_context(
        viewport={"width": width, "height": 900},
        color_scheme=scheme,  # type: ignore[arg-type]
    )
    page = context.new_page()
    try:
        page.goto(served.page_url)
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background == ("rgb(18, 22, 27)" if scheme == "dark" else "rgb(247, 249, 251)")
        for tab, count in (("facts", 6), ("episodes", 1), ("users", 2), ("conversations", 2)):
            open_tab(page, tab, count)
            assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        page.click(f'#rows tr[data-id="{filled.conversation_id}"] td:nth-child(3)')
        expect(page.locator("#chat .turn")).to_have_count(2)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        screenshot(page, f"{width}-{scheme}")
    finally:
        context.close()


def test_conversation_view_and_forgetting_a_user(browser: Browser, tmp_path: Path) -> None:
    """A conversation link opens its chat with its own budget and every turn, the summarised
    ones dimmed; a user is forgotten from the Users tab after the list of what goes."""
    path = tmp_path / "chat.sqlite3"
    store = SQLiteStore(str(path))
    manager = MemoryManager(
        store=store,
        long_term=True,
        max_conversation_tokens=400,
        summarize_threshold=200,
        summarizer=lambda turns: f"They planned {len(turns)} trips.",
    )
    filled = fill(manager)
    cid = manager.new_conversation()
    for n in range(30):
        manager.add_turn(cid, f"question {n} about trains, buses and ferries", f"answer {n}")
    kept = len(manager.conversation.get_turns(cid))
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        try:
            page.goto(served.page_url)
            page.goto(f"{served.base}/memories#conversations/{cid}")
            chat = page.locator("#chat")
            expect(chat).to_be_visible()
            expect(chat.locator("#budget")).to_contain_text("/ 400 tokens")
            expect(chat.locator("#budget")).to_contain_text("summarised past 200")
            expect(chat.locator(".summary")).to_contain_text("They planned")
            expect(chat.locator(".turn")).to_have_count(30)
            dimmed = chat.locator(".turn.summarised")
            expect(dimmed).to_have_count(30 - kept)
            assert dimmed.first.evaluate("e => getComputedStyle(e).opacity") == "0.5"
            expect(dimmed.first.locator(".tokens")).to_contain_text("summarised")
            expect(chat.locator(".turn").last.locator(".tokens")).to_contain_text("sent now")
            screenshot(page, "conversation-view")

            open_tab(page, "users", 2)
            page.locator(f'#rows tr[data-id="{filled.user_id}"] button.forget').click()
            detail = page.locator("#detail")
            expect(detail).to_contain_text("2 facts")
            expect(detail).to_contain_text("1 episodes")
            assert _api(served, "facts/")["total"] == 6  # listing deletes nothing
            detail.locator("button.danger").click()
            expect(page.locator("#status")).to_contain_text("forgot 1 user record(s), 2 facts")
            expect(page.locator("#rows tr[data-id]")).to_have_count(1)
            assert _api(served, "facts/")["total"] == 4
            assert _api(served, "episodes/")["total"] == 0
        finally:
            context.close()


def test_editing_a_working_key_with_a_slash(browser: Browser, tmp_path: Path) -> None:
    """A working-memory key holding "/", "?", "#", "%", a space and other scripts is edited
    in place from the page, and only that entry changes."""
    path = tmp_path / "memory.sqlite3"
    store = SQLiteStore(str(path))
    fill(MemoryManager(store=store, long_term=True))
    key = "trip/day 1?#%Üb東"
    WorkingMemory(store=store, scope_id="agent:travel").set(key, "Sintra")
    WorkingMemory(store=store, scope_id="agent:travel").set("trip", "a neighbour")
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        try:
            page.goto(served.page_url)
            open_tab(page, "working", 4)
            row = page.locator("#rows tr[data-id]").filter(has_text="trip/day 1")
            row.locator("button.edit").click()
            page.fill("tr.editor textarea", "Porto")
            page.click("tr.editor button[type=submit]")
            expect(page.locator("#status")).to_contain_text("saved")
            expect(page.locator("#rows")).to_contain_text("Porto")
        finally:
            context.close()
    store = SQLiteStore(str(path))
    try:
        working = WorkingMemory(store=store, scope_id="agent:travel")
        assert (working.get(key), working.get("trip")) == ("Porto", "a neighbour")
    finally:
        store.close()
