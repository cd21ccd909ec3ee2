"""The memory page in a real headless Chromium (Debian's, driven by Playwright) against `make run` as a
process: sign in, bots, newest first with filters and paging, search with scores, add, edit in place
(and a merge), remove, forget a user, a chat message shown readably, export and import, the embedder
settings with the API's error, the vectors progress bar; by keyboard, and on a phone-sized screen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.local_process import KEY, PROXY_KEY, Stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("page"), {}).start().wait_warm()  # the page's searches use meaning
    api = s.api
    for i in range(25):
        api.post(
            "/v1/bots/garden/memories",
            json={"text": f"Garden note {i}: plant row {i} in spring.", "userId": "u1" if i % 2 else "u2"},
        )
    api.post("/v1/bots/garden/memories", json={"text": "The tomatoes need six hours of sun.", "userId": "u3"})
    api.post(
        "/v1/bots/garden/messages",
        json={
            "messages": [
                {
                    "id": "m1",
                    "text": "Look at this seedling!",
                    "userId": "u1",
                    "serverId": "g1",
                    "threadId": "c1",
                    "createdAt": "2026-11-02T09:30:00Z",
                    "content": {
                        "author": "lena",
                        "displayName": "Lena",
                        "channelId": "c1",
                        "timestamp": "2026-11-02T09:30:00+00:00",
                        "attachments": [{"filename": "seedling.png"}],
                        "links": [{"url": "https://example.org/seeds"}],
                    },
                }
            ]
        },
    )
    api.post("/v1/bots/kitchen/memories", json={"text": "The oven runs hot."})
    api.post(
        "/v1/bots/librechat/memories", json={"text": "The user prefers metric units.", "userId": "alice"}
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM, "Debian's chromium is needed (.ci/run installs it)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, stack):
    context = browser.new_context(accept_downloads=True)
    pg = context.new_page()
    pg.on("dialog", lambda dialog: dialog.accept())
    pg.goto(stack.url + "/")
    yield pg
    context.close()


def sign_in(page, key=KEY):
    page.get_by_label("Key", exact=True).fill(key)
    page.get_by_role("button", name="Sign in").click()


def open_bot(page, bot="garden"):
    page.get_by_role("button", name=bot, exact=True).click()
    expect(page.locator("#bot-name")).to_have_text(bot)


def test_sign_in_refuses_a_wrong_key_and_keeps_the_right_one_for_the_tab(page):
    sign_in(page, "wrong")
    expect(page.locator("#signin-error")).to_contain_text("key")
    sign_in(page)
    expect(page.get_by_role("button", name="garden", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="kitchen", exact=True)).to_be_visible()
    expect(page.locator("#signin")).to_be_hidden()
    page.reload()  # same tab: still signed in
    expect(page.get_by_role("button", name="garden", exact=True)).to_be_visible()


def test_newest_first_with_filters_and_paging(page):
    sign_in(page)
    open_bot(page)
    items = page.locator("#memories li .text")
    expect(items.first).to_have_text("The tomatoes need six hours of sun.")
    expect(items).to_have_count(20)
    page.get_by_role("button", name="Older").click()
    expect(items).to_have_count(26)
    expect(items.last).to_have_text("Garden note 0: plant row 0 in spring.")
    page.get_by_label("User", exact=True).fill("u3")
    page.get_by_role("button", name="Show").click()
    expect(items).to_have_count(1)


def test_the_page_loads_with_an_empty_console(browser, stack):
    """No 404s (the favicon among them), no errors, no warnings: from the first load to a search."""
    context = browser.new_context()
    pg = context.new_page()
    said, failed = [], []
    pg.on("console", lambda message: said.append(f"{message.type}: {message.text}"))
    pg.on("pageerror", lambda error: said.append(f"error: {error}"))
    pg.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
    try:
        pg.goto(stack.url + "/")
        pg.wait_for_load_state("networkidle")
        sign_in(pg)
        open_bot(pg)
        pg.get_by_label("Search").fill("tomato sunlight")
        pg.get_by_label("Search").press("Enter")
        expect(pg.locator("#memories li .text").first).to_have_text("The tomatoes need six hours of sun.")
        pg.wait_for_load_state("networkidle")
        assert said == [] and failed == []
        assert httpx.get(stack.url + "/favicon.ico").headers["content-type"].startswith("image/svg+xml")
    finally:
        context.close()


def test_search_by_meaning_shows_scores(page):
    sign_in(page)
    open_bot(page)
    page.get_by_label("Search").fill("how much sunlight do tomato plants want")
    page.get_by_label("Search").press("Enter")
    expect(page.locator("#memories li .text").first).to_have_text("The tomatoes need six hours of sun.")
    expect(page.locator("#memories li .score").first).to_contain_text("score")


def test_add_edit_merge_and_remove(page, stack):
    sign_in(page)
    open_bot(page, "kitchen")
    page.get_by_label("New fact").fill("The kettle is in the left cupboard.")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#notice")).to_contain_text("Added")
    first = page.locator("#memories li").first
    expect(first.locator(".text")).to_have_text("The kettle is in the left cupboard.")
    kettle = first.get_attribute("data-id")
    page.get_by_role("button", name=f"Edit {kettle}").click()
    page.get_by_label(f"New text for {kettle}").fill("The kettle is in the right cupboard.")
    # a listing landing while the editor is open (the refresh an Add starts, here "Show") leaves it open
    # with what was typed (CI: the Add's refresh landed after the Edit click and closed the editor)
    page.evaluate("document.querySelectorAll('#memories li').forEach((li) => { li.dataset.before = '1'; })")
    page.get_by_role("button", name="Show").click()
    # listed again: every other row is a new one
    expect(page.locator(f'#memories li[data-before]:not([data-id="{kettle}"])')).to_have_count(0)
    expect(page.get_by_label(f"New text for {kettle}")).to_have_value("The kettle is in the right cupboard.")
    page.get_by_label(f"New text for {kettle}").press("Enter")
    expect(page.locator(f'#memories li[data-id="{kettle}"] .text')).to_have_text(
        "The kettle is in the right cupboard."
    )
    # saying what another memory says: the two merge and the page says which one stands
    page.get_by_role("button", name=f"Edit {kettle}").click()
    page.get_by_label(f"New text for {kettle}").fill("the oven runs hot.")
    page.get_by_label(f"New text for {kettle}").press("Enter")
    expect(page.locator("#notice")).to_contain_text("merged")
    expect(page.locator(f'#memories li[data-id="{kettle}"]')).to_have_count(0)
    expect(page.locator("#memories li .text").first).to_have_text("The oven runs hot.")  # the one that stands
    oven = page.locator("#memories li").first.get_attribute("data-id")
    page.get_by_role("button", name=f"Remove {oven}").click()
    expect(page.locator("#notice")).to_contain_text(f"Removed {oven}")
    assert stack.api.get(f"/v1/bots/kitchen/memories/{oven}").status_code == 404


def test_a_chat_message_reads_as_who_when_where_and_what_it_carries(page):
    sign_in(page)
    open_bot(page)
    page.get_by_label("Kind").select_option("message")
    page.get_by_role("button", name="Show").click()
    meta = page.locator("#memories li .meta").first
    expect(meta).to_contain_text("Lena")
    expect(meta).to_contain_text("#c1")
    expect(meta).to_contain_text("seedling.png")
    expect(meta).to_contain_text("https://example.org/seeds")


def test_forget_a_user_after_confirming_shows_the_counts(page, stack):
    sign_in(page)
    open_bot(page)
    page.get_by_label("User to forget").fill("u2")
    page.get_by_role("button", name="Forget this user").click()
    expect(page.locator("#notice")).to_contain_text("Forgot u2: 13 facts, 0 messages")
    assert stack.api.get("/v1/bots/garden/memories", params={"userId": "u2"}).json()["memories"] == []


def test_export_then_import_into_another_bot(page, stack, tmp_path):
    sign_in(page)
    open_bot(page, "kitchen")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export (NDJSON)").click()
    path = Path(download.value.path())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(line["kind"] in ("fact", "message") for line in lines)
    target = tmp_path / "moved.ndjson"
    target.write_text("\n".join(json.dumps(line) for line in lines) + "\n{broken\n")
    stack.api.post("/v1/bots/pantry/memories", json={"text": "Flour is on the top shelf."})
    page.reload()
    open_bot(page, "pantry")
    page.locator("#import").set_input_files(str(target))
    expect(page.locator("#notice")).to_contain_text(
        f"Imported: {sum(1 for line in lines if line['kind'] == 'fact')} facts"
    )
    expect(page.locator("#notice")).to_contain_text(f"line {len(lines) + 1}")


def test_settings_show_the_apis_error_and_the_progress_bar(page):
    sign_in(page)
    expect(page.locator("#progress-text")).to_contain_text("memories")
    page.get_by_label("Embedder").select_option("remote")
    page.get_by_label("Provider").fill("nowhere")
    page.get_by_label("Model").fill("x")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#settings-error")).to_contain_text("nowhere")
    value = page.locator("#progress").evaluate("p => [p.value, p.max]")
    assert value[1] >= 1 and 0 <= value[0] <= value[1]


def test_usable_by_keyboard_and_on_a_phone(browser, stack):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    pg = context.new_page()
    pg.goto(stack.url + "/")
    pg.keyboard.press("Tab")  # the key field
    pg.keyboard.type(KEY)
    pg.keyboard.press("Enter")
    expect(pg.get_by_role("button", name="garden", exact=True)).to_be_visible()
    pg.get_by_role("button", name="garden", exact=True).focus()
    pg.keyboard.press("Enter")
    expect(pg.locator("#bot-name")).to_have_text("garden")
    width = pg.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # nothing wider than the phone
    context.close()


def test_the_page_ships_with_the_package_and_needs_no_key_itself(stack):
    r = httpx.get(stack.url + "/")
    assert r.status_code == 200 and "<title>engram" in r.text
    for asset in ("app.js", "style.css"):
        assert httpx.get(f"{stack.url}/page/{asset}").status_code == 200
    assert "cdn" not in r.text.lower() and "https://" not in r.text


def test_the_proxy_key_reads_only_the_proxys_bot(page, stack):
    sign_in(page, PROXY_KEY)
    expect(page.get_by_role("button", name="librechat", exact=True)).to_be_visible()
    expect(page.locator("#bots li")).to_have_count(1)  # no other bot, not even its name
    expect(page.locator("#who")).to_have_text("proxy key: read only")
    expect(page.locator("#settings-error")).to_contain_text("admin key")
    open_bot(page, "librechat")
    expect(page.locator("#memories li .text").first).to_have_text("The user prefers metric units.")
    page.get_by_label("New fact").fill("Written with the proxy key.")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#notice")).to_contain_text("admin key")  # reading only
    proxy = {"Authorization": f"Bearer {PROXY_KEY}"}
    assert httpx.get(f"{stack.url}/v1/bots/garden/memories", headers=proxy).status_code == 401
    assert httpx.get(f"{stack.url}/v1/bots/garden/export", headers=proxy).status_code == 401
    assert (
        httpx.delete(f"{stack.url}/v1/bots/librechat/users/alice/memories", headers=proxy).status_code == 401
    )
    assert httpx.get(f"{stack.url}/v1/settings", headers=proxy).status_code == 401


def test_a_memory_shows_its_metadata_and_when_it_expires(page, stack):
    stack.api.post(
        "/v1/bots/labels/memories",
        json={
            "text": "The gate code is 2580.",
            "metadata": {"source": "crm", "pinned": True},
            "expiresAt": "2099-01-01T00:00:00Z",
        },
    )
    sign_in(page)
    open_bot(page, "labels")
    meta = page.locator("#memories li .meta").first
    expect(meta).to_contain_text("metadata: source=crm, pinned=true")
    expect(meta).to_contain_text("expires")


def test_a_user_s_keys_are_minted_listed_and_revoked_on_the_page(page, stack):
    sign_in(page)
    open_bot(page, "librechat")
    page.get_by_label("User whose keys").fill("alice")
    page.get_by_label("Key name").fill("Claude Desktop")
    page.get_by_role("button", name="Mint a key").click()
    expect(page.locator("#minted")).to_contain_text("egk_")
    minted = page.locator("#minted").inner_text()
    expect(page.get_by_label("Keys", exact=True)).to_contain_text("Claude Desktop")
    mcp = {"Authorization": f"Bearer {minted}", "Accept": "application/json, text/event-stream"}
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert httpx.post(f"{stack.url}/mcp", json=hello, headers=mcp).status_code == 200  # the key opens /mcp
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("#notice")).to_contain_text("opens nothing")
    expect(page.get_by_label("Keys", exact=True)).to_contain_text("alice has no keys")
    assert httpx.post(f"{stack.url}/mcp", json=hello, headers=mcp).status_code == 401
    page.get_by_label("User whose keys").fill("bad name!")
    page.get_by_role("button", name="Keys", exact=True).click()
    expect(page.locator("#notice")).to_contain_text("userId")  # the API's problem detail, in words


@pytest.mark.parametrize("docs", ["/docs", "/redoc"])
def test_the_api_docs_render_offline_from_engram_alone(browser, stack, docs):
    """Swagger UI and ReDoc render the document with every request answered by engram itself (the machine
    has no route out, as many an operator's does not: a page that loads its script from a CDN is blank)."""
    context = browser.new_context()
    pg = context.new_page()
    answered: set[str] = set()  # hosts something was loaded from
    refused: list[str] = []  # why a request elsewhere did not go out
    pg.on("response", lambda response: answered.add(response.url.split("/")[2]))
    pg.on("requestfailed", lambda request: refused.append(f"{request.url} {request.failure}"))
    pg.goto(stack.url + docs)
    expect(pg.get_by_text("List Memories").filter(visible=True).first).to_be_visible()
    pg.wait_for_load_state("networkidle")
    context.close()
    # ReDoc's bundle asks for Redocly's logo on its CDN: the page's Content-Security-Policy blocks it
    assert answered == {stack.url.split("/")[2]}
    # and not because this machine is offline: the page itself forbids it (Chromium says "csp")
    assert all(r.endswith(" csp") for r in refused if stack.url not in r), refused
