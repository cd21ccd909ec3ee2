"""Hostile input at every front door (Memory API, the proxy in both wire formats, MCP, Discord): each
case is answered 4xx with a clear message, none 5xx, and nothing is stored half-way. Also the
regressions of the trust-boundary defects (issue 10), each shown to fail before its fix."""

from __future__ import annotations

import json
import socket
import time
import uuid

import anthropic
import httpx
import openai
import pytest
from nacl.signing import SigningKey

from engram.config.discord import DiscordSettings
from engram.config.proxy import ProxySettings
from infra.local_stack import LocalStack
from tests.fake_upstream import REPLY
from tests.integration.conftest import KEY

PROXY_KEY = "hostile-proxy-key"
ADMIN = {"Authorization": f"Bearer {KEY}"}
SIGNER = SigningKey.generate()
BOT = "hostile"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, upstream):
    proxy = ProxySettings(
        UPSTREAMS=json.dumps(
            [
                {"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": "sk-held"},
                {"name": "an", "baseUrl": upstream.url, "api": "anthropic", "apiKey": "sk-held"},
                {"name": "byo", "baseUrl": upstream.url + "/v1", "api": "openai"},
                {"name": "gone", "baseUrl": "http://127.0.0.1:9", "api": "anthropic", "apiKey": "sk-held"},
            ]
        ),
        ENGRAM_PROXY_KEY=PROXY_KEY,
    )
    discord = DiscordSettings(
        DISCORD_APPLICATION_ID="900",
        DISCORD_PUBLIC_KEY=SIGNER.verify_key.encode().hex(),
        DISCORD_BOT_TOKEN="t",
        DISCORD_API_BASE="http://127.0.0.1:9",
    )
    s = LocalStack(
        tmp_path_factory.mktemp("engram"),
        port=0,
        api_key=KEY,
        embedder=local_embedder,
        poll=False,
        proxy_settings=proxy,
        discord_settings=discord,
    ).start()
    yield s
    s.stop()


def send(stack, method, path, body=None, headers=None, timeout=10):
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    return httpx.request(
        method,
        stack.url + path,
        content=raw,
        timeout=timeout,
        headers={"content-type": "application/json", **(headers or {})},
    )


def assert_clear_4xx(response, status, fragment):
    """The status, and a message naming the problem (any of the `|`-separated fragments)."""
    assert response.status_code == status, response.text
    message = json.dumps(response.json())
    assert any(f.lower() in message.lower() for f in fragment.split("|")), message


# ----- the Memory API -------------------------------------------------------------------------------

SURROGATE = b'"tea \\ud800 time"'
MEMORY_API = [
    ("malformed JSON", "POST", f"/v1/bots/{BOT}/memories", b'{"text": ', 400, "JSON"),
    ("not an object", "POST", f"/v1/bots/{BOT}/memories", b'["x"]', 400, "body"),
    ("wrong type", "POST", f"/v1/bots/{BOT}/memories", b'{"text": 12}', 400, "text"),
    ("empty text", "POST", f"/v1/bots/{BOT}/memories", b'{"text": "   "}', 400, "empty"),
    ("huge text", "POST", f"/v1/bots/{BOT}/memories", b'{"text": "' + b"x" * 20_000 + b'"}', 400, "text"),
    (
        "lone surrogate in a fact",
        "POST",
        f"/v1/bots/{BOT}/memories",
        b'{"text": ' + SURROGATE + b"}",
        400,
        "surrogate|unicode",
    ),
    (
        "control characters in a fact",
        "POST",
        f"/v1/bots/{BOT}/memories",
        b'{"text": "tea\\u0000\\u0007 time"}',
        400,
        "control",
    ),
    (
        "lone surrogate in a message's content",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "m1", "text": "hi", "content": {"note": ' + SURROGATE + b"}}]}",
        400,
        "surrogate|unicode",
    ),
    (
        "content past 32 KB serialized",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "m-big", "text": "hi", "content": {"blob": "' + b"x" * 40_000 + b'"}}]}',
        400,
        "content is 40,",
    ),
    (
        "lone surrogate in a message id",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "m\\ud800", "text": "hi"}]}',
        400,
        "surrogate|unicode",
    ),
    (
        "createdAt converting to year 0",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "m2", "text": "hi", "createdAt": "0001-01-01T00:00:00+14:00"}]}',
        400,
        "createdAt",
    ),
    (
        "createdAt past 9999",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "m3", "text": "hi", "createdAt": "9999-12-31T23:00:00-05:00"}]}',
        400,
        "createdAt",
    ),
    (
        "one bad message spoils the batch",
        "POST",
        f"/v1/bots/{BOT}/messages",
        b'{"messages": [{"id": "ok1", "text": "fine"}, {"id": "bad", "text": 5}]}',
        400,
        "text",
    ),
    ("an empty batch", "POST", f"/v1/bots/{BOT}/messages", b'{"messages": []}', 400, "messages"),
    (
        "lone surrogate in settings",
        "PATCH",
        "/v1/settings",
        b'{"embeddingModel": ' + SURROGATE + b"}",
        400,
        "surrogate|unicode",
    ),
    ("unknown setting", "PATCH", "/v1/settings", b'{"colour": "red"}', 400, "colour"),
    ("settings not an object", "PATCH", "/v1/settings", b"[]", 400, "body"),
    ("limit 0", "GET", f"/v1/bots/{BOT}/memories?limit=0", None, 400, "limit"),
    ("limit not a number", "GET", f"/v1/bots/{BOT}/memories?limit=abc", None, 400, "limit"),
    ("unknown kind", "GET", f"/v1/bots/{BOT}/memories?kind=secret", None, 400, "kind"),
    (
        "a query over 2,000 characters",
        "GET",
        f"/v1/bots/{BOT}/memories?query={'q' * 2100}",
        None,
        400,
        "query",
    ),
    ("encoded slashes in a bot", "GET", "/v1/bots/..%2f..%2fx/memories", None, 404, "not_found"),
    ("a NUL in a bot", "GET", "/v1/bots/a%00b/memories", None, 400, "bot"),
    ("a bot name too long", "GET", f"/v1/bots/{'b' * 200}/memories", None, 400, "bot"),
    ("a junk memory id", "GET", f"/v1/bots/{BOT}/memories/mem:-1", None, 400, "memory id"),
    (
        "a user id with spaces",
        "DELETE",
        f"/v1/bots/{BOT}/users/a%20b/memories",
        None,
        400,
        "user_id: must be",
    ),
    (
        "a body over the route's limit",
        "POST",
        f"/v1/bots/{BOT}/memories",
        b'{"text": "' + b"x" * 70_000 + b'"}',
        413,
        "65,536 bytes",
    ),
]


@pytest.mark.parametrize("name,method,path,body,status,fragment", MEMORY_API, ids=[c[0] for c in MEMORY_API])
def test_memory_api_refuses_clearly(stack, name, method, path, body, status, fragment):
    assert_clear_4xx(send(stack, method, path, body, ADMIN), status, fragment)


def test_nothing_of_the_refused_input_was_stored(stack):
    for kind in ("fact", "message"):
        listed = send(stack, "GET", f"/v1/bots/{BOT}/memories?kind={kind}", headers=ADMIN)
        assert listed.status_code == 200 and listed.json()["memories"] == []
    assert send(stack, "GET", "/v1/settings", headers=ADMIN).json()["embedder"] == "local"


def test_the_admin_key_is_checked_before_the_body_is_read(stack):
    """A stranger announcing a 50 MB body gets 401 at once; the server never waits for the body."""
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/bots/x/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 50000000\r\nauthorization: Bearer wrong\r\n\r\n{"
        )
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 401")


# ----- the proxy, both wire formats ---------------------------------------------------------------------


def turn_headers(conversation=True):
    h = {"authorization": f"Bearer {PROXY_KEY}", "x-librechat-user-id": "mallory"}
    if conversation:
        h["x-librechat-conversation-id"] = "conv-" + uuid.uuid4().hex[:6]
    return h


ESCAPES = [
    "/byo/%2e%2e/secret",
    "/byo/..%2fsecret",
    "/byo/v1/%2E%2E/%2E%2E/secret",
    "/byo/.%2e/secret",
    "/byo/%5c..%5csecret",
    "/oa/%2e%2e/secret",
    "/byo//secret",
    "/byo/models/%2e%2e/%2e%2e/secret",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_proxied_paths_cannot_leave_the_upstreams_base_url(stack, upstream, path):
    for method in ("GET", "DELETE"):
        r = httpx.request(method, stack.url + path, headers=turn_headers())
        assert r.status_code in (400, 404), r.text
    assert not [q for q in upstream.requests if "secret" in q["path"]]


def test_a_path_under_the_base_url_still_passes(stack, upstream):
    r = httpx.get(stack.url + "/byo/models", headers={**turn_headers(), "x-engram-key": PROXY_KEY})
    assert r.status_code == 200 and upstream.requests[-1]["path"] == "/v1/models"


PROXY_OPENAI = [
    ("malformed JSON", b'{"messages": ', 400, "messages"),
    ("no messages list", b'{"messages": "hi"}', 400, "messages"),
    ("not an object", b"[1, 2]", 400, "messages"),
    (
        "a text part holding a list",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": ["a"]}]}]}',
        400,
        "must be a string",
    ),
    (
        "stream_options a string",
        b'{"stream": true, "stream_options": "yes", "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "stream_options",
    ),
    ("a message that is a string", b'{"messages": ["hi"]}', 400, "must be an object"),
    ("over the body limit", b'{"messages": [], "pad": "' + b"x" * (17 * 1024 * 1024) + b'"}', 413, "bytes"),
]


@pytest.mark.parametrize("name,body,status,fragment", PROXY_OPENAI, ids=[c[0] for c in PROXY_OPENAI])
def test_proxy_openai_refuses_clearly(stack, name, body, status, fragment):
    r = send(stack, "POST", "/oa/v1/chat/completions", body, turn_headers(), timeout=30)
    assert_clear_4xx(r, status, fragment)


@pytest.mark.parametrize(
    "name,body,status,fragment", PROXY_OPENAI[:-1], ids=[c[0] for c in PROXY_OPENAI[:-1]]
)
def test_proxy_anthropic_refuses_clearly_in_anthropics_shape(stack, name, body, status, fragment):
    r = send(stack, "POST", "/an/v1/messages", body, turn_headers())
    assert_clear_4xx(r, status, fragment)
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"


def test_anthropic_routes_answer_too_large_and_unreachable_in_anthropics_shape(stack):
    """Anthropic's SDK reads `error.type`: a body past Anthropic's own 32 MB and an upstream that does not
    answer come back in its shape; 20 MB (past the OpenAI routes' 16 MiB) is still taken."""
    big = b'{"messages": [], "pad": "' + b"x" * (33 * 1000 * 1000) + b'"}'
    r = send(stack, "POST", "/an/v1/messages", big, turn_headers(), timeout=60)
    assert r.status_code == 413 and r.json()["type"] == "error"
    assert (
        r.json()["error"]["type"] == "request_too_large"
        and "32,000,000 bytes" in r.json()["error"]["message"]
    )
    twenty = b'{"model": "m", "max_tokens": 5, "messages": [], "pad": "' + b"x" * (20 * 1024 * 1024) + b'"}'
    assert send(stack, "POST", "/an/v1/messages", twenty, turn_headers(), timeout=60).status_code != 413
    client = anthropic.Anthropic(base_url=f"{stack.url}/gone", api_key=PROXY_KEY, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502 and caught.value.body["type"] == "error"
    assert (
        caught.value.body["error"]["type"] == "api_error"
        and "did not answer" in caught.value.body["error"]["message"]
    )


def test_librechats_identity_headers_never_reach_a_provider(stack, upstream):
    librechat = {
        **turn_headers(),
        "x-librechat-body-parentmessageid": "00000000-0000-0000-0000-000000000000",
        "x-librechat-message-id": "m-1",
    }
    chat = b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
    for path in ("/oa/v1/chat/completions", "/an/v1/messages", "/byo/models"):
        send(
            stack,
            "POST" if "models" not in path else "GET",
            path,
            chat,
            {**librechat, "x-engram-key": PROXY_KEY},
        )
        assert not [h for h in upstream.requests[-1]["headers"] if h.startswith("x-librechat-")], path


def test_anthropic_routes_answer_auth_errors_in_anthropics_shape(stack):
    client = anthropic.Anthropic(base_url=f"{stack.url}/an", api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    error = caught.value.body["error"]
    assert error["type"] == "authentication_error" and "proxy key" in error["message"]


def test_a_lone_surrogate_in_a_chat_turn_or_a_save_fails_nothing(stack, upstream):
    h = turn_headers()
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "my cat is ' + b"\\ud800" + b' grey"}]}'
    r = send(stack, "POST", "/oa/v1/chat/completions", raw, h)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == REPLY
    save = send(
        stack,
        "POST",
        "/oa/v1/chat/completions",
        b'{"model": "m", "messages": [{"role": "user", "content": "/memory save tea \\ud800"}]}',
        h,
    )
    assert save.status_code == 200 and "surrogate" in save.json()["choices"][0]["message"]["content"]
    assert send(stack, "GET", "/v1/bots/librechat/memories?userId=mallory", headers=ADMIN).status_code == 200


@pytest.mark.parametrize("text", ["/memory\tstatus", "/memory\nstatus", "/memory \t status"])
def test_memory_commands_after_any_whitespace_never_reach_the_model(stack, upstream, text):
    before = len(upstream.chats())
    client = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=turn_headers(), max_retries=0
    )
    answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    assert "Memory is" in answer.choices[0].message.content
    assert len(upstream.chats()) == before


def test_memory_commands_without_a_conversation_never_reach_the_model(stack, upstream):
    before = len(upstream.chats())
    client = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1",
        api_key=PROXY_KEY,
        max_retries=0,
        default_headers=turn_headers(conversation=False),
    )
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory status"}]
    )
    assert "x-librechat-conversation-id" in answer.choices[0].message.content
    assert len(upstream.chats()) == before


def test_any_memory_failure_leaves_the_turn_standing(stack, upstream, monkeypatch):
    def broken(*_):
        raise RuntimeError("something unexpected in recall")

    monkeypatch.setattr(stack.proxy.memory, "recall", broken)
    client = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=turn_headers(), max_retries=0
    )
    assert (
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        .choices[0]
        .message.content
        == REPLY
    )


def test_compressed_upstream_streams_arrive_whole(stack, upstream, monkeypatch):
    monkeypatch.setattr(upstream, "compress", True)
    client = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=turn_headers(), max_retries=0
    )
    chunks = list(
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    jobs = [
        json.loads(m["Body"])
        for m in stack.sqs.receive_message(
            QueueUrl=stack.settings.extract_queue_url, MaxNumberOfMessages=10
        ).get("Messages", [])
    ]
    assert REPLY in [j.get("assistant_text") for j in jobs]  # extraction saw the decoded text


# ----- MCP ----------------------------------------------------------------------------------------------


def mcp(stack, payload, key=PROXY_KEY, method="POST"):
    return httpx.request(
        method,
        f"{stack.url}/mcp",
        json=payload,
        headers={
            "authorization": f"Bearer {key}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-06-18",
            "x-librechat-user-id": "mallory",
        },
        timeout=10,
    )


def call_tool(stack, name, arguments):
    return mcp(
        stack,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
    )


def test_mcp_initialize_names_its_version(stack):
    r = mcp(
        stack,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    from engram import __version__

    assert r.json()["result"]["serverInfo"]["version"] == __version__ != ""


@pytest.mark.parametrize(
    "name,arguments,fragment",
    [
        ("save_memory", {"text": "   "}, "text is empty"),
        ("forget_memory", {"id": "mem:abc"}, "is not a memory id"),
        ("update_memory", {"id": "mem:999999", "text": "x"}, "no memory"),
        ("search_memory", {"query": ""}, "query is empty"),
        ("search_memory", {"query": "tea", "min_score": 2}, "min_score must be a number from 0 to 1"),
        # a destructive confirmation is a JSON boolean, never a string coerced to one
        ("forget_me", {"confirm": "true"}, "valid boolean"),
    ],
)
def test_mcp_tool_errors_carry_their_reason(stack, name, arguments, fragment):
    payload = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )
    r = httpx.post(
        f"{stack.url}/mcp",
        content=payload.encode("utf-8", "surrogatepass").replace(b"\xed\xa0\x80", b"\\ud800"),
        headers={
            "authorization": f"Bearer {PROXY_KEY}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-06-18",
            "x-librechat-user-id": "mallory",
        },
        timeout=10,
    )
    result = r.json()["result"]
    assert result["isError"] is True
    assert fragment.lower() in result["content"][0]["text"].lower(), result


def test_a_lone_surrogate_in_a_tool_call_is_refused_clearly(stack):
    payload = (
        b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", '
        b'"params": {"name": "save_memory", "arguments": {"text": "tea \\ud800"}}}'
    )
    r = httpx.post(
        f"{stack.url}/mcp",
        content=payload,
        headers={
            "authorization": f"Bearer {PROXY_KEY}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-06-18",
            "x-librechat-user-id": "mallory",
        },
        timeout=10,
    )
    assert r.status_code < 500
    answer = r.json()
    text = json.dumps(answer.get("error") or answer["result"]).lower()
    assert any(w in text for w in ("surrogate", "unicode", "invalid", "parse error")), answer


def test_mcp_offers_no_never_ending_event_stream(stack):
    started = time.monotonic()
    r = httpx.get(
        f"{stack.url}/mcp",
        headers={"authorization": f"Bearer {PROXY_KEY}", "accept": "text/event-stream"},
        timeout=5,
    )
    assert r.status_code == 405 and time.monotonic() - started < 2


@pytest.mark.parametrize("body,status", [(b"{", 400), (b"[]", 400), (b'{"jsonrpc": "2.0"}', 400)])
def test_mcp_refuses_malformed_requests(stack, body, status):
    r = httpx.post(
        f"{stack.url}/mcp",
        content=body,
        headers={
            "authorization": f"Bearer {PROXY_KEY}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        },
    )
    assert 400 <= r.status_code < 500


def test_mcp_refuses_strangers_and_the_admin_key(stack):
    assert mcp(stack, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, key="wrong").status_code == 401
    assert mcp(stack, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, key=KEY).status_code == 401


# ----- Discord ------------------------------------------------------------------------------------------


def interact(stack, raw: bytes, timestamp=None):
    ts = str(int(timestamp if timestamp is not None else time.time()))
    headers = {
        "x-signature-ed25519": SIGNER.sign(ts.encode() + raw).signature.hex(),
        "x-signature-timestamp": ts,
        "content-type": "application/json",
    }
    return httpx.post(f"{stack.url}/discord/interactions", content=raw, headers=headers)


def command(name="memory", sub="forget", **extra):
    body = {
        "type": 2,
        "id": f"i{time.time_ns()}",
        "token": "tok",
        "guild_id": "g1",
        "channel_id": "c1",
        "member": {"user": {"id": "1001"}},
        "data": {"name": name, "options": [{"type": 1, "name": sub}]},
        **extra,
    }
    return json.dumps(body).encode()


DISCORD = [
    ("a list", b"[]", 400, "interaction"),
    ("a string", b'"x"', 400, "interaction"),
    ("not JSON", b"{", 400, "interaction"),
    ("type as a string", b'{"type": "2"}', 400, "type|user"),
    (
        "data not an object",
        b'{"type": 2, "id": "i1", "data": "x", "member": {"user": {"id": "1"}}}',
        400,
        "data",
    ),
    ("a user id of the wrong type", b'{"type": 2, "id": "i2", "member": {"user": {"id": 5}}}', 400, "id"),
    (
        "a user id that is not a name",
        b'{"type": 2, "id": "i3", "member": {"user": {"id": "../x"}}}',
        400,
        "id",
    ),
    ("no user", b'{"type": 2, "id": "i4", "data": {"name": "memory"}}', 400, "user"),
    (
        "options not a list",
        b'{"type": 2, "id": "i5", "member": {"user": {"id": "1"}}, "data": {"name": "ask", "options": 3}}',
        400,
        "options",
    ),
    ("an unknown type", b'{"type": 9}', 400, "type"),
    ("a huge body", b'{"type": 1, "pad": "' + b"x" * 70_000 + b'"}', 413, "bytes"),
]


@pytest.mark.parametrize("name,raw,status,fragment", DISCORD, ids=[c[0] for c in DISCORD])
def test_discord_refuses_clearly_even_when_signed(stack, name, raw, status, fragment):
    assert_clear_4xx(interact(stack, raw), status, fragment)


def test_a_replayed_interaction_is_refused_and_queued_once(stack):
    raw = command(sub="forget")
    queue = stack.settings.interactive_queue_url
    assert interact(stack, raw).status_code == 200
    replay = interact(stack, raw)
    assert replay.status_code == 401 and "already handled" in replay.json()["error"]
    bodies = [
        json.loads(m["Body"])
        for m in stack.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    ]
    assert [b["interaction_id"] for b in bodies].count(json.loads(raw)["id"]) == 1


def test_a_signature_from_the_future_is_refused(stack):
    assert interact(stack, b'{"type": 1}', timestamp=time.time() + 120).status_code == 401
    assert (
        interact(stack, b'{"type": 1}', timestamp=time.time() + 5).status_code == 200
    )  # clocks differ a little


def test_a_lone_surrogate_in_an_ask_prompt_is_refused(stack):
    raw = (
        json.dumps(
            {
                "type": 2,
                "id": f"i{time.time_ns()}",
                "guild_id": "g1",
                "channel_id": "c1",
                "member": {"user": {"id": "1001"}},
                "data": {"name": "ask", "options": [{"name": "prompt", "value": "hi"}]},
            }
        )
        .encode()
        .replace(b'"hi"', b'"h\\ud800"')
    )
    assert_clear_4xx(interact(stack, raw), 400, "surrogate|interaction")


# ----- what strangers learn -----------------------------------------------------------------------------


def test_strangers_learn_nothing_from_healthz(stack):
    assert httpx.get(f"{stack.url}/healthz").json() == {"ok": True}
