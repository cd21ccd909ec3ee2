"""The LibreChat proxy on the real local stack, driven by the real openai and anthropic SDKs, with fake
upstreams on 127.0.0.1 that record what they received and mongomock standing in for LibreChat's MongoDB."""

import json
import uuid

import anthropic
import httpx
import mongomock
import openai
import pytest
from bson import ObjectId

from engram.config import Settings
from engram.proxy.settings import ProxySettings
from infra.local_stack import LocalStack
from tests.fake_upstream import REPLY
from tests.integration.conftest import KEY
from tests.support import wait_until

UPSTREAM_KEY = "sk-upstream-held-by-engram"
PROXY_KEY = "integration-proxy-key"  # what LibreChat holds: not the Memory API's admin key (KEY)


@pytest.fixture(scope="module")
def mongo():
    db = mongomock.MongoClient().db
    garden = ObjectId()
    db.chatprojects.insert_one({"_id": garden, "name": "Garden", "user": "alice"})
    db.conversations.insert_one({"conversationId": "conv-garden", "user": "alice", "chatProjectId": garden})
    db.conversations.insert_one({"conversationId": "conv-plain", "user": "alice"})
    return db


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, upstream, mongo):
    settings = ProxySettings(
        UPSTREAMS=json.dumps(
            [
                {"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": UPSTREAM_KEY},
                {"name": "an", "baseUrl": upstream.url, "api": "anthropic", "apiKey": UPSTREAM_KEY},
                {"name": "byo", "baseUrl": upstream.url + "/v1", "api": "openai"},
                {"name": "pub", "baseUrl": upstream.url + "/v1", "api": "openai", "open": True},
            ]
        ),
        ENGRAM_PROXY_KEY=PROXY_KEY,
    )
    s = LocalStack(
        tmp_path_factory.mktemp("engram"),
        port=0,
        api_key=KEY,
        embedder=local_embedder,
        proxy_settings=settings,
        mongo_database=mongo,
        sweep_every_s=5,
    ).start()
    yield s
    s.stop()


def headers(user="alice", conversation=None):
    return {
        "x-librechat-user-id": user,
        "x-librechat-conversation-id": conversation or f"conv-{uuid.uuid4().hex[:8]}",
    }


def oa(stack, **kw):
    return openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=headers(**kw), max_retries=0
    )


def an(stack, **kw):
    return anthropic.Anthropic(
        base_url=f"{stack.url}/an", api_key=PROXY_KEY, default_headers=headers(**kw), max_retries=0
    )


def system_of(request):
    body = request["json"]
    if "system" in body:
        return body["system"] if isinstance(body["system"], str) else json.dumps(body["system"])
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")


def test_openai_sdk_plain_and_streaming(stack, upstream):
    client = oa(stack)
    reply = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == REPLY
    seen = upstream.chats()[-1]
    assert (
        seen["headers"]["authorization"] == f"Bearer {UPSTREAM_KEY}"
    )  # the key engram holds, not the caller's
    assert "# Current date and time" in system_of(seen) and "Unix time:" in system_of(seen)
    chunks = list(
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert upstream.chats()[-1]["json"]["stream_options"] == {"include_usage": True}
    assert chunks[-1].usage.total_tokens == 14


def test_anthropic_sdk_plain_and_streaming(stack, upstream):
    client = an(stack)
    reply = client.messages.create(
        model="fake-model", max_tokens=50, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == REPLY
    seen = upstream.chats()[-1]
    assert seen["headers"]["x-api-key"] == UPSTREAM_KEY
    # the caller's system prompt first and untouched (prompt caching), engram's blocks after it
    assert seen["json"]["system"].startswith("Be brief.\n\n<!-- engram:datetime -->")
    with client.messages.stream(
        model="fake-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "hi"}],
        system=[{"type": "text", "text": "Blocks."}],
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == REPLY
    blocks = upstream.chats()[-1]["json"]["system"]
    assert blocks[0] == {"type": "text", "text": "Blocks."} and blocks[-1]["text"].startswith(
        "<!-- engram:datetime -->"
    )


def test_the_callers_prompt_prefix_is_byte_identical_across_turns(stack, upstream):
    """Provider prompt caches key on the prompt's leading tokens (Anthropic: system, then messages;
    OpenAI: messages in order). The caller's system prompt, with its cache_control breakpoint, comes first
    and byte for byte the same in two turns of one conversation; engram's memory and time blocks follow."""
    import os

    def common(a: bytes, b: bytes) -> int:
        return len(os.path.commonprefix([a, b]))

    system = [
        {"type": "text", "text": "You are a careful assistant. " * 40, "cache_control": {"type": "ephemeral"}}
    ]
    first_turn = [{"role": "user", "content": "My favourite colour is teal."}]
    client = an(stack, conversation="conv-cache")
    client.messages.create(model="fake-model", max_tokens=50, system=system, messages=first_turn)
    client.messages.create(
        model="fake-model",
        max_tokens=50,
        system=system,
        messages=[
            *first_turn,
            {"role": "assistant", "content": REPLY},
            {"role": "user", "content": "What colour do I like?"},
        ],
    )
    one, two = (r["json"] for r in upstream.chats()[-2:])
    prompt = lambda body: (json.dumps(body["system"]) + json.dumps(body["messages"])).encode()  # noqa: E731
    n = len(json.dumps(system[0]).encode())
    assert one["system"][0] == system[0] == two["system"][0]
    assert common(prompt(one), prompt(two)) > n  # the whole caller's block, and then some

    openai_system = {"role": "system", "content": "Answer in French. " * 40}
    client = oa(stack, conversation="conv-cache-oa")
    client.chat.completions.create(model="m", messages=[openai_system, {"role": "user", "content": "Hi"}])
    client.chat.completions.create(
        model="m",
        messages=[
            openai_system,
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": REPLY},
            {"role": "user", "content": "Again"},
        ],
    )
    one, two = (json.dumps(r["json"]["messages"]).encode() for r in upstream.chats()[-2:])
    assert common(one, two) > len(json.dumps(openai_system).encode())


def test_memory_commands_never_reach_the_upstream(stack, upstream):
    before = len(upstream.chats())
    conv = "conv-cmd-" + uuid.uuid4().hex[:6]
    c = oa(stack, conversation=conv)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert "Memory is on for this chat" in r.choices[0].message.content
    chunks = list(
        c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "/memory off"}], stream=True
        )
    )
    assert (
        "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        == "Memory is now off for this chat."
    )
    a = an(stack, conversation=conv)
    r = a.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "/memory status"}])
    assert "Memory is off for this chat (this chat's setting)" in r.content[0].text
    with a.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "/memory reset"}]
    ) as s:
        assert "follows the server default again" in "".join(s.text_stream)
    r = a.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "/memory"}])
    assert "/memory search <query>" in r.content[0].text
    assert len(upstream.chats()) == before


def test_saved_memory_is_recalled_for_its_user_only(stack, upstream):
    conv = "conv-" + uuid.uuid4().hex[:6]
    c = oa(stack, conversation=conv)
    saved = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save The user's cat is called Miso."}]
    )
    assert saved.choices[0].message.content.startswith("Saved as mem:")
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is my cat's name?"}])
    assert "The user's cat is called Miso." in system_of(upstream.chats()[-1])
    assert "<!-- engram:memory -->" in system_of(upstream.chats()[-1])
    found = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory search cat"}])
    assert "Miso" in found.choices[0].message.content
    other = oa(stack, user="bob")
    other.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is my cat's name?"}])
    assert "Miso" not in system_of(upstream.chats()[-1])
    listed = other.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory search cat Miso"}]
    )
    assert "Miso" not in listed.choices[0].message.content
    memory_id = saved.choices[0].message.content.split()[2].rstrip(":")
    refused = other.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"/memory forget {memory_id}"}]
    )
    assert "you have no memory" in refused.choices[0].message.content
    # the Memory API lists LibreChat memories under the librechat bot
    api = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories",
        params={"userId": "alice"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert "The user's cat is called Miso." in [m["text"] for m in api.json()["memories"]]


def test_project_comes_from_mongo(stack, upstream):
    c = oa(stack, conversation="conv-garden")
    r = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save The tomatoes need staking in June."}]
    )
    assert r.choices[0].message.content.startswith("Saved")
    status = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert 'project "Garden"' in status.choices[0].message.content
    api = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories",
        params={"project": "Garden"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert [m["text"] for m in api.json()["memories"]] == ["The tomatoes need staking in June."]


def test_keyed_upstream_refuses_callers_without_engram_key(stack, upstream):
    before = len(upstream.chats())
    bad = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key="sk-caller-own", default_headers=headers(), max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    bad_an = anthropic.Anthropic(
        base_url=f"{stack.url}/an", api_key="nope", default_headers=headers(), max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError):
        bad_an.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert len(upstream.chats()) == before


def test_upstreams_without_a_key_still_need_engrams_key(stack, upstream):
    before = len(upstream.chats())
    caller = openai.OpenAI(
        base_url=f"{stack.url}/byo/v1", api_key="sk-caller-own", default_headers=headers(), max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        caller.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert httpx.get(f"{stack.url}/byo/v1/models").status_code == 401
    assert len(upstream.chats()) == before
    # the caller's own provider key passes through once engram's key is shown beside it
    keyed = openai.OpenAI(
        base_url=f"{stack.url}/byo/v1",
        api_key="sk-caller-own",
        max_retries=0,
        default_headers={**headers(), "x-engram-key": PROXY_KEY},
    )
    assert (
        keyed.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        .choices[0]
        .message.content
        == REPLY
    )
    seen = upstream.chats()[-1]["headers"]
    assert seen["authorization"] == "Bearer sk-caller-own" and "x-engram-key" not in seen
    r = keyed.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert "Memory is on" in r.choices[0].message.content


def test_engrams_key_never_reaches_a_provider(stack, upstream):
    """LibreChat configured as the README shows: apiKey is engram's key, on an upstream without its own."""
    client = openai.OpenAI(
        base_url=f"{stack.url}/byo/v1", api_key=PROXY_KEY, default_headers=headers(), max_retries=0
    )
    assert (
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        .choices[0]
        .message.content
        == REPLY
    )
    sent = json.dumps(upstream.chats()[-1]["headers"])
    assert PROXY_KEY not in sent and "authorization" not in upstream.chats()[-1]["headers"]


def test_an_open_upstream_passes_through_without_memory(stack, upstream):
    caller = openai.OpenAI(
        base_url=f"{stack.url}/pub/v1", api_key="sk-caller-own", default_headers=headers(), max_retries=0
    )
    assert (
        caller.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        .choices[0]
        .message.content
        == REPLY
    )
    seen = upstream.chats()[-1]
    assert seen["headers"]["authorization"] == "Bearer sk-caller-own"
    assert "<!-- engram:memory -->" not in system_of(seen)  # no engram key: no memory, just the clock
    r = caller.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert "needs engram's key" in r.choices[0].message.content


class SlowRecordingQueue:
    """A queue whose sends take a while, recording when each one finished."""

    def __init__(self, inner, delay_s=0.4):
        self.inner, self.delay_s, self.sent = inner, delay_s, []

    def send(self, job, delay_s=0):
        import time

        time.sleep(self.delay_s)
        self.inner.send(job, delay_s)
        self.sent.append(job)


@pytest.mark.parametrize("stream", [False, True])
def test_extraction_is_queued_before_the_reply_completes(stack, upstream, monkeypatch, stream):
    """Behind the Lambda Web Adapter nothing runs once the response is complete: the job must be queued
    first."""
    slow = SlowRecordingQueue(stack.engine.queue)
    monkeypatch.setattr(stack.engine, "queue", slow)
    client = oa(stack)
    text = "My favourite tree is the rowan."
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], stream=True
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    else:
        assert (
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
            .choices[0]
            .message.content
            == REPLY
        )
    assert [job.user_text for job in slow.sent] == [text]  # already there when the client has the whole reply


def test_side_calls_and_other_paths_are_forwarded_verbatim(stack, upstream):
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "Write a title"}], "stream": false}'
    r = httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        content=raw,
        headers={
            "Authorization": f"Bearer {PROXY_KEY}",
            "content-type": "application/json",
            "x-librechat-user-id": "alice",
        },
    )
    assert r.status_code == 200
    assert upstream.requests[-1]["json"] == json.loads(raw)
    models = httpx.get(f"{stack.url}/oa/v1/models", headers={"Authorization": f"Bearer {PROXY_KEY}"})
    assert models.json()["data"][0]["id"] == "fake-model"
    failed = httpx.post(f"{stack.url}/oa/v1/fail", headers={"Authorization": f"Bearer {PROXY_KEY}"})
    assert failed.status_code == 429 and failed.headers["retry-after"] == "7"
    assert httpx.post(f"{stack.url}/nope/v1/chat/completions", json={}).status_code == 404


def test_extraction_after_a_turn_stores_durable_facts(stack, upstream):
    conv = "conv-" + uuid.uuid4().hex[:6]
    c = an(stack, user="carol", conversation=conv)
    upstream.extraction_style = "malformed"  # single quotes and a trailing comma: repaired
    with c.messages.stream(
        model="fake-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "My favourite tea is genmaicha. Any tips?"}],
    ) as s:
        assert "".join(s.text_stream) == REPLY
    api = {"Authorization": f"Bearer {KEY}"}
    assert wait_until(
        lambda: any(
            "genmaicha" in m["text"]
            for m in httpx.get(
                f"{stack.url}/v1/bots/librechat/memories", params={"userId": "carol"}, headers=api
            ).json()["memories"]
        )
    )
    stored = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories", params={"userId": "carol"}, headers=api
    ).json()["memories"]
    assert stored[0]["savedBy"] == "bot" and stored[0]["text"] == "The user's favourite tea is genmaicha."
    c.messages.create(
        model="fake-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "Which tea should I brew tonight?"}],
    )
    assert "genmaicha" in upstream.chats()[-1]["json"]["system"]


def test_mcp_tools(stack):
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run():
        hdrs = {"Authorization": f"Bearer {PROXY_KEY}", **headers(user="dave")}
        async with (
            httpx2.AsyncClient(headers=hdrs, timeout=30) as http,
            streamable_http_client(f"{stack.url}/mcp", http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            saved = await session.call_tool("save_memory", {"text": "The user plays the oboe."})
            found = await session.call_tool("search_memory", {"query": "musical instrument", "limit": 3})
            status = await session.call_tool("memory_status", {})
            return init, tools, saved, found, status

    init, tools, saved, found, status = anyio.run(run)
    assert "automatic" in (init.instructions or "")
    assert tools == {
        "search_memory",
        "save_memory",
        "update_memory",
        "forget_memory",
        "forget_me",
        "memory_status",
        "set_memory_enabled",
    }
    assert saved.content[0].text.startswith("Saved as mem:")
    assert "oboe" in found.content[0].text
    assert "Memory is on" in status.content[0].text
    assert httpx.post(f"{stack.url}/mcp", json={}).status_code == 401


def test_langfuse_traces_each_model_turn_and_no_command(stack, upstream):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from engram.proxy.telemetry import Telemetry

    exporter = InMemorySpanExporter()
    off = stack.proxy.telemetry
    stack.proxy.telemetry = Telemetry("pk-test", "sk-test", "http://127.0.0.1:9", span_exporter=exporter)
    try:
        conv = "conv-" + uuid.uuid4().hex[:6]
        c = oa(stack, conversation=conv)
        c.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "/memory status"}]
        )
        assert exporter.get_finished_spans() == ()  # commands never call a model: no trace
        list(
            c.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "Tell me about tea"}], stream=True
            )
        )
        assert wait_until(lambda: any(s.name == "chat-turn" for s in exporter.get_finished_spans()), 10), [
            s.name for s in exporter.get_finished_spans()
        ]
        spans = {s.name: s for s in exporter.get_finished_spans()}
        assert {"chat-turn", "resolve-context", "recall", "upstream", "memory-write"} <= set(spans)
        generation = dict(spans["upstream"].attributes)
        assert generation["langfuse.observation.model.name"] == "fake-model"
        assert json.loads(generation["langfuse.observation.usage_details"]) == {"input": 5, "output": 9}
        assert spans["upstream"].parent.span_id == spans["chat-turn"].context.span_id
        root = dict(spans["chat-turn"].attributes)
        assert root.get("session.id") == conv or conv in json.dumps(root)
    finally:
        stack.proxy.telemetry = off


def test_keys_are_separated_by_power(stack, upstream):
    """The proxy key (LibreChat's) opens the proxy and /mcp, and reads its own bot's memories (what the
    proxy recalls anyway) — nothing else of the Memory API; the admin key opens the Memory API only."""
    admin, proxy = {"Authorization": f"Bearer {KEY}"}, {"Authorization": f"Bearer {PROXY_KEY}"}
    assert httpx.get(f"{stack.url}/v1/bots/librechat/memories", headers=proxy).status_code == 200
    assert httpx.get(f"{stack.url}/v1/bots", headers=proxy).json() == {"bots": ["librechat"]}
    assert httpx.get(f"{stack.url}/v1/bots/other/memories", headers=proxy).status_code == 401
    assert httpx.get(f"{stack.url}/v1/bots/other/export", headers=proxy).status_code == 401
    assert (
        httpx.post(f"{stack.url}/v1/bots/librechat/memories", json={"text": "x"}, headers=proxy).status_code
        == 401
    )
    assert httpx.get(f"{stack.url}/v1/settings", headers=proxy).status_code == 401
    assert httpx.get(f"{stack.url}/v1/index", headers=proxy).status_code == 401
    assert httpx.patch(f"{stack.url}/v1/settings", json={"embedder": "off"}, headers=proxy).status_code == 401
    assert (
        httpx.delete(f"{stack.url}/v1/bots/librechat/users/alice/memories", headers=proxy).status_code == 401
    )
    assert httpx.get(f"{stack.url}/v1/bots/librechat/memories", headers=admin).status_code == 200
    assert httpx.get(f"{stack.url}/oa/v1/models", headers=admin).status_code == 401
    assert httpx.post(f"{stack.url}/mcp", json={}, headers=admin).status_code == 401


@pytest.mark.parametrize("mode", ["relevant", "newest", "both"])
def test_recall_mode_decides_what_the_model_is_told(stack, upstream, monkeypatch, mode):
    # MEMORY_RECALL_MODE as the environment sets it, on the running proxy, through the openai SDK
    monkeypatch.setenv("MEMORY_RECALL_MODE", mode)
    settings = stack.proxy.settings.model_copy(
        update={"recall_mode": Settings().proxy.recall_mode, "recall_limit": 2}
    )
    monkeypatch.setattr(stack.proxy, "settings", settings)
    monkeypatch.setattr(stack.proxy.memory, "settings", settings)
    user = f"mode-{mode}"
    c = oa(stack, user=user)
    for text in (
        "My dog is called Biscuit.",
        "I live in Lyon.",
        "I play the oboe.",
        "I am allergic to peanuts.",
    ):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"/memory save {text}"}])
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "What is my dog's name?"}])
    told = system_of(upstream.chats()[-1])
    assert ("Biscuit" in told, "peanuts" in told and "oboe" in told) == {
        "relevant": (True, False),
        "newest": (False, True),
        "both": (True, True),
    }[mode]
    assert len(told.split("<!-- engram:memory -->", 1)[1]) <= settings.max_context_chars
