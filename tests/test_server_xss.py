"""Markup stored in every field of every kind of record never runs on the ``/memories`` page.

Ids, keys and turns come from end users and channels; the page must show them as text. The
test stores payloads (``<img onerror>``, ``<script>``, ``<svg onload>``, ``javascript:``,
``<iframe srcdoc>``) everywhere, opens every tab, a record of each, the chat view and the
search results in Chromium, and checks that nothing ran (a global counter, dialogs, injected
elements, CSP reports, console errors) and that every payload is visible as text: once with
the CSP enforced and once with it bypassed, so the escaping alone is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

from memlane import MemoryManager, SQLiteStore, WorkingMemory
from serve_process import Served, chromium, open_tab

TOKEN = "xss-test-token"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless."""
    with chromium() as launched:
        yield launched


# Markup that runs script if a page ever parses it as HTML. Each one counts itself in
# window.__xss and opens a dialog; the test watches for both, for CSP reports and for elements.
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
                open_tab(page, tab, rows)
                shown = _shown(page)
                for text in expected[tab]:
                    assert text in shown, (tab, text)
                page.locator("#rows tr[data-id]").first.focus()
                page.keyboard.press("Enter")  # the detail view or the chat of the first row
                expect(page.locator("#detail, #chat").locator("visible=true")).to_have_count(1)
                _nothing_ran(page, dialogs, errors)
            big = next(c for c in conversation if c.startswith("P24"))
            page.goto(f"{served.base}/memories#conversations/{quote(big, safe='')}")
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
