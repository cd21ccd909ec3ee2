"""What a newcomer's HTTP client expects (issue 47): errors as RFC 9457 problem details from every door, the
Memory API owning /v1 (its own 404 and 405), WWW-Authenticate on a 401, pages that say where the next one
is, docs pages that load nothing from another host; keys minted for one user, which open /mcp (the real
`mcp` client, no other header) and the proxy as that user and no one else."""

from __future__ import annotations

import contextlib
import json
import re
import uuid

import anyio
import httpx
import pytest

from tests.integration.conftest import KEY, proxy_stack

PROXY_KEY = "conventional-proxy-key"
UPSTREAM_KEY = "upstream-key"
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, upstream):
    upstreams = [{"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": UPSTREAM_KEY}]
    s = proxy_stack(tmp_path_factory.mktemp("engram"), local_embedder, upstreams, PROXY_KEY, sweep_every_s=5)
    yield s
    s.stop()


@pytest.fixture
def api(stack):
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        yield client


def is_problem(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["code"] == code and body["type"].endswith(f":{code}")
    assert body["title"] and body["detail"]
    legacy = body["error"]  # what 1.2 clients read: engram's {code, message}, the Discord door's string
    assert legacy == (
        body["detail"] if isinstance(legacy, str) else {"code": code, "message": body["detail"]}
    )
    return body


def test_a_mistyped_api_path_is_the_api_s_own_404_not_the_proxy_s(api):
    body = is_problem(api.get("/v1/bot/demo/memories"), 404, "not_found")
    assert "GET /v1/bot/demo/memories" in body["detail"] and "upstream" not in body["detail"]
    assert is_problem(api.post("/v1/bots/demo/search", json={}), 404, "not_found")
    # the proxy's own routes still answer under an upstream's name
    assert "no upstream named 'nope'" in api.get("/nope/v1/models").json()["detail"]


def test_a_wrong_method_is_405_with_the_methods_allowed(api):
    r = api.put("/v1/bots/demo/memories", json={})
    body = is_problem(r, 405, "method_not_allowed")
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert "PUT" in body["detail"]


@pytest.mark.parametrize("path", ["/v1/bots/demo/memories", "/v1/settings", "/v1/bot/typo"])
def test_a_401_says_how_to_authenticate(stack, path):
    r = httpx.get(f"{stack.url}{path}", headers={"Authorization": "Bearer wrong"})
    is_problem(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")


def test_a_proxy_refusal_is_a_problem_too_and_still_reads_as_openai_s_error(stack):
    r = httpx.post(f"{stack.url}/oa/v1/chat/completions", json={}, headers={"Authorization": "Bearer wrong"})
    body = is_problem_member(r, 401)
    assert body["error"]["message"] == body["detail"] and r.headers["www-authenticate"].startswith("Bearer")


def is_problem_member(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status and r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == status and body["detail"]
    return body


def test_malformed_json_says_so_in_words(api):
    r = api.post(
        "/v1/bots/demo/memories", content=b'{"text": nope}', headers={"content-type": "application/json"}
    )
    body = is_problem(r, 400, "invalid")
    assert "not valid JSON" in body["detail"] and "character 9" in body["detail"]


def test_a_full_page_says_where_the_next_one_starts_and_links_to_it(api):
    bot = f"page-{uuid.uuid4().hex[:6]}"
    ids = [
        api.post(f"/v1/bots/{bot}/memories", json={"text": f"Fact number {n}."}).json()["id"]
        for n in range(3)
    ]
    first = api.get(f"/v1/bots/{bot}/memories", params={"limit": 2})
    assert [m["id"] for m in first.json()["memories"]] == ids[:0:-1] and first.json()["next"] == ids[1]
    link = re.fullmatch(r'<([^>]+)>; rel="next"', first.headers["link"])
    assert link is not None
    second = api.get(link.group(1))
    assert [m["id"] for m in second.json()["memories"]] == [ids[0]]
    assert "next" not in second.json() and "link" not in second.headers


def test_the_docs_pages_load_nothing_from_another_host(stack):
    for page in ("/docs", "/redoc"):
        html = httpx.get(f"{stack.url}{page}").text
        loaded = re.findall(r'(?:src|href)=["\']([^"\']+)', html) + re.findall(r"url: ?'([^']+)'", html)
        assert loaded, page
        assert [u for u in loaded if u.startswith(("http:", "https:", "//"))] == [], page
        for url in loaded:
            assert httpx.get(f"{stack.url}{url}").status_code == 200, url
    assert "fonts.googleapis" not in httpx.get(f"{stack.url}/redoc").text


def test_the_openapi_document_says_errors_are_problem_details(stack):
    doc = httpx.get(f"{stack.url}/openapi.json").json()
    listing = doc["paths"]["/v1/bots/{bot}/memories"]["get"]["responses"]
    assert set(listing["401"]["content"]) == {PROBLEM}
    assert {"type", "title", "status", "detail", "code"} <= set(
        doc["components"]["schemas"]["ErrorResponse"]["properties"]
    )


def test_discord_s_door_on_a_stack_without_discord_says_what_is_missing(stack):
    assert not stack.discord.settings.public_key  # this stack has no Discord application
    r = httpx.post(f"{stack.url}/discord/interactions", content=b"{}")
    assert "DISCORD_PUBLIC_KEY" in is_problem(r, 503, "discord_not_configured")["detail"]


# ----- keys for people --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def mcp_session(url: str, key: str, **headers: str):
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}", **headers}, timeout=30) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def search_by_mcp(url: str, key: str, query: str, **headers: str) -> str:
    async def run() -> str:
        async with mcp_session(url, key, **headers) as session:
            found = await session.call_tool("search_memory", {"query": query, "limit": 10})
            return found.content[0].text

    return anyio.run(run)


def test_a_key_minted_for_one_user_opens_mcp_as_that_user_and_no_one_else(stack, api):
    kim, lee = f"kim-{uuid.uuid4().hex[:6]}", f"lee-{uuid.uuid4().hex[:6]}"
    for user, fact in (
        (kim, "The user keeps bees on the roof."),
        (lee, "The user keeps bees in the orchard."),
    ):
        assert api.post("/v1/bots/librechat/memories", json={"text": fact, "userId": user}).status_code == 201
    minted = api.post(f"/v1/bots/librechat/users/{kim}/keys", json={"name": "Claude Desktop"})
    assert minted.status_code == 201
    key = minted.json()["key"]
    assert key.startswith("egk_") and minted.json()["userId"] == kim
    listed = api.get(f"/v1/bots/librechat/users/{kim}/keys").json()["keys"]
    assert [k["id"] for k in listed] == [minted.json()["id"]] and "key" not in listed[0]
    assert stack.engine.state.user_keys.find(minted.json()["id"])[1] != key  # kept as a digest only

    found = search_by_mcp(stack.url, key, "bees")
    assert "roof" in found and "orchard" not in found
    # a header naming someone else is not believed: the key says who
    claimed = search_by_mcp(stack.url, key, "bees", **{"x-librechat-user-id": lee})
    assert "roof" in claimed and "orchard" not in claimed

    async def save() -> str:
        # a name sent beside a user key is not believed either: its holder could call themselves anyone
        async with mcp_session(stack.url, key, **{"x-librechat-user-name": "Lee"}) as session:
            return (
                (await session.call_tool("save_memory", {"text": "The user's hive is called Hum."}))
                .content[0]
                .text
            )

    assert anyio.run(save).startswith("Saved as mem:")
    mine = api.get("/v1/bots/librechat/memories", params={"userId": kim}).json()["memories"]
    hive = next(m for m in mine if "Hum" in m["text"])
    assert hive.get("content") is None

    # the key opens neither the Memory API nor another bot's door
    assert (
        httpx.get(
            f"{stack.url}/v1/bots/librechat/memories", headers={"Authorization": f"Bearer {key}"}
        ).status_code
        == 401
    )
    other = api.post(f"/v1/bots/elsewhere/users/{kim}/keys").json()["key"]
    assert (
        httpx.post(f"{stack.url}/mcp", json={}, headers={"Authorization": f"Bearer {other}"}).status_code
        == 401
    )

    assert api.delete(f"/v1/bots/librechat/users/{kim}/keys/{minted.json()['id']}").status_code == 204
    refused = httpx.post(f"{stack.url}/mcp", json={}, headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401 and "wrong bearer key" in refused.json()["error"]["message"]
    assert api.get(f"/v1/bots/librechat/users/{kim}/keys").json()["keys"] == []
    assert is_problem(
        api.delete(f"/v1/bots/librechat/users/{kim}/keys/{minted.json()['id']}"), 404, "not_found"
    )


def test_a_wrong_key_reaches_the_mcp_client_as_an_error_that_says_so(stack):
    said: list[str] = []

    def messages(exc: BaseException) -> list[str]:
        inner = getattr(exc, "exceptions", None)
        return [m for e in inner for m in messages(e)] if inner else [str(exc)]

    async def run() -> None:
        try:
            async with mcp_session(stack.url, "egk_0000000000000000_nope"):
                said.append("let in")
        except BaseException as exc:  # noqa: BLE001 - an ExceptionGroup from the client's task group
            said.extend(messages(exc))

    anyio.run(run)
    assert any("wrong bearer key" in m for m in said), said


def test_a_user_s_key_goes_with_the_user_when_they_are_forgotten(stack, api):
    user = f"gone-{uuid.uuid4().hex[:6]}"
    key = api.post(f"/v1/bots/librechat/users/{user}/keys").json()["key"]
    assert (
        api.post("/v1/bots/librechat/memories", json={"text": "The user sails.", "userId": user}).status_code
        == 201
    )
    assert api.delete(f"/v1/bots/librechat/users/{user}/memories").json()["deleted"]["state"]["keys"] == 1
    assert api.get(f"/v1/bots/librechat/users/{user}/keys").json()["keys"] == []
    assert (
        httpx.post(f"{stack.url}/mcp", json={}, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    )


def test_the_proxy_takes_a_user_s_key_as_that_user_whatever_user_header_comes(stack, api, upstream):
    """Memory is recalled for a chat (a conversation header names it, as LibreChat's does); the user is the
    key's, and a user header naming someone else is dropped."""
    user = f"pat-{uuid.uuid4().hex[:6]}"
    api.post("/v1/bots/librechat/memories", json={"text": "The user's cat is called Miso.", "userId": user})
    key = api.post(f"/v1/bots/librechat/users/{user}/keys").json()["key"]
    r = httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        json={"model": "fake-model", "messages": [{"role": "user", "content": "What is my cat called?"}]},
        headers={
            "Authorization": f"Bearer {key}",
            "x-librechat-conversation-id": f"chat-{user}",
            "x-librechat-user-id": "someone-else",
        },
        timeout=60,
    )
    assert r.status_code == 200, r.text
    sent = upstream.chats()[-1]
    assert "Miso" in json.dumps(sent["json"])
    assert key not in json.dumps(sent)  # a user's key never reaches the provider
