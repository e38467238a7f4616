"""The ``/memories`` page in a real headless Chromium, against the real ``memlane serve``.

Chromium comes from Debian's packages (``scripts/install_browser.sh``, run by the test
command); Playwright drives it through ``executable_path``, since Playwright's own browser
download cannot work here. A missing Chromium fails the test: it is never skipped.

Screenshots of every tab are saved in ``target/test-artifacts/`` (or
``$MEMLANE_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

from memlane import MemoryManager, SQLiteStore, WorkingMemory
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
    expect(page.locator("#rows")).to_have_attribute("data-tab", name)
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


# Markup that runs script if a page ever parses it as HTML. Each one counts itself in
# window.__xss and opens a dialog; the tests watch for both, for CSP reports and for elements.
RUN = "window.__xss=(window.__xss||0)+1;alert(1)"
PAYLOADS = [
    f'<img src=x onerror="{RUN}">',
    f"<script>{RUN}</script>",
    f'"><svg onload="{RUN}">',
    f"javascript:{RUN}//",
    f'\'><iframe srcdoc="<script>parent.{RUN}</script>">',
    f"<a href=javascript:{RUN}>x</a>{{{{7*7}}}}",
]


def _hostile(n: int) -> str:
    return f"P{n}{PAYLOADS[n % len(PAYLOADS)]}"


def fill_hostile(manager: MemoryManager) -> dict[str, list[str]]:
    """Stores a payload in every string field of every kind; returns, per tab, the texts the
    page must show."""
    long_term = manager.long_term
    assert long_term is not None
    h = [_hostile(n) for n in range(40)]
    user = long_term.identify_user(h[0], h[1], display_name=h[2])
    long_term.remember(h[3], h[4], scope="user", scope_id=user.id)
    long_term.remember(h[5], {"nested": h[6]}, scope="agent", scope_id=h[7])
    long_term.remember(h[8], [h[9]], scope="session", scope_id=h[10])
    long_term.record_episode(
        agent_id=h[11], trigger=h[12], input=h[13], success=False, output=h[14], user_id=h[15]
    )
    long_term.add_procedure(
        h[16],
        trigger_conditions={"goal_contains": [h[17]]},
        procedure_type="tool_sequence",
        content=[h[18]],
    )
    WorkingMemory(store=manager.store, scope_id=h[19]).set(h[20], h[21])
    WorkingMemory(store=manager.store, scope_id=h[19]).set(h[22], {"deep": [h[23]]})
    for n in range(12):
        manager.add_turn(h[24], f"{h[25]} question {n}", f"{h[26]} answer {n}")
    manager.add_turn(h[27], h[28], h[29])
    return {
        "facts": [h[3], h[4], h[2], h[5], _js({"nested": h[6]}), h[8], _js([h[9]])],
        "episodes": [h[11], h[12], h[13], h[14]],
        "procedures": [h[16], _js({"goal_contains": [h[17]]}), _js([h[18]])],
        "users": [h[2], h[0], h[1]],
        "working": [h[19], h[20], h[21], _js({"deep": [h[23]]})],
        "conversations": [],
        "chat": [h[24], h[25], h[26], SUMMARY],
    }


SUMMARY = _hostile(39)


def _js(value: Any) -> str:
    """``value`` as the page shows a structured value: JSON.stringify's text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


WATCH = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  e => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
"""


def _shown(page: Page) -> str:
    """The text of the page plus the titles that hold full ids."""
    text: str = page.evaluate(
        "() => document.querySelector('main').innerText + ' ' + "
        "[...document.querySelectorAll('[title]')].map(e => e.title).join(' ')"
    )
    return text


def _nothing_ran(page: Page, dialogs: list[str], errors: list[str]) -> None:
    assert page.evaluate("() => window.__xss") is None
    assert dialogs == []
    injected = page.evaluate(
        "() => document.querySelectorAll('main img, main svg, main script, main iframe, "
        "main [onerror], main [onload], main a[href^=javascript]').length"
    )
    assert injected == 0
    assert page.evaluate("() => window.__violations") == []
    assert errors == []


@pytest.mark.parametrize("csp", ["enforced", "bypassed"])
def test_stored_markup_never_runs(browser: Browser, tmp_path: Path, csp: str) -> None:
    """Markup in every field of every kind is shown as text on every tab and in the chat view;
    with the CSP bypassed too, so the escaping alone is what is tested."""
    path = tmp_path / "hostile.sqlite3"
    store = SQLiteStore(str(path))
    manager = MemoryManager(
        store=store,
        long_term=True,
        max_conversation_tokens=400,
        summarize_threshold=200,
        summarizer=lambda turns: SUMMARY,
    )
    expected = fill_hostile(manager)
    conversation = manager.conversation.conversation_ids
    store.close()
    with Served(
        "--store", f"sqlite:///{path}", "--token", TOKEN, log=tmp_path / "serve.log"
    ) as served:
        context = browser.new_context(bypass_csp=csp == "bypassed")
        context.add_init_script(WATCH)
        page = context.new_page()
        dialogs: list[str] = []
        errors: list[str] = []

        def on_dialog(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on(
            "console",
            lambda message: errors.append(message.text) if message.type == "error" else None,
        )
        try:
            page.goto(served.page_url)
            for tab, rows in (
                ("facts", 3),
                ("episodes", 1),
                ("procedures", 1),
                ("users", 1),
                ("working", 2),
                ("conversations", 2),
            ):
                _open_tab(page, tab, rows)
                shown = _shown(page)
                for text in expected[tab]:
                    assert text in shown, (tab, text)
                page.locator("#rows tr[data-id]").first.focus()
                page.keyboard.press("Enter")  # the detail view or the chat of the first row
                expect(page.locator("#detail, #chat").locator("visible=true")).to_have_count(1)
                _nothing_ran(page, dialogs, errors)
            big = next(c for c in conversation if c.startswith("P24"))
            page.goto(f"{served.base}/memories#conversations/{_quote(big)}")
            chat = page.locator("#chat")
            expect(chat).to_be_visible()
            expect(chat.locator(".summary")).to_contain_text(SUMMARY)
            for text in expected["chat"]:
                assert text in _shown(page)
            page.fill("#everywhere-q", "P13")
            page.press("#everywhere-q", "Enter")
            expect(page.locator("#rows tr[data-id]")).not_to_have_count(0)
            _nothing_ran(page, dialogs, errors)
        finally:
            context.close()


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


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

        page.goto(f"{served.base}/memories#facts/{_quote(fact)}")
        page.reload()
        expect(page.locator("#detail")).to_be_visible()
        expect(page.locator("#detail pre")).to_contain_text('"value": "Europe/Porto"')

        _open_tab(page, "episodes", 1)
        page.locator("#rows tr[data-id]").first.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#detail")).to_contain_text("Quinta da Regaleira")
        assert page.url.endswith(f"#episodes/{filled.episode_id}")

        _open_tab(page, "users", 2)
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
            _open_tab(page, tab, count)
            assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        page.click(f'#rows tr[data-id="{filled.conversation_id}"] td:nth-child(3)')
        expect(page.locator("#chat .turn")).to_have_count(2)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        _screenshot(page, f"{width}-{scheme}")
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
            _screenshot(page, "conversation-view")

            _open_tab(page, "users", 2)
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
