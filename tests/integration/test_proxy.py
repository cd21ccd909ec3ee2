"""The LibreChat proxy on the real local stack, driven by the real openai and anthropic SDKs, with fake
upstreams on 127.0.0.1 that record what they received and mongomock standing in for LibreChat's MongoDB."""

import contextlib
import json
import time
import uuid
from datetime import UTC, datetime

import anthropic
import httpx
import mongomock
import openai
import pytest
from bson import ObjectId

from engram.config import Settings
from engram.proxy.source import NO_PARENT
from tests.fake_upstream import REPLY
from tests.integration.conftest import KEY, proxy_stack
from tests.librechat_shapes import (
    ATTACHMENT_ONLY_TEXT,
    MEMORY_AGENT_INSTRUCTIONS,
    MEMORY_AGENT_STATUS,
    file_context,
    prepend,
)
from tests.support import wait_until

UPSTREAM_KEY = "sk-upstream-held-by-engram"
PROXY_KEY = "integration-proxy-key"  # what LibreChat holds: not the Memory API's admin key (KEY)


# LibreChat's MongoDB, as its server writes it (@librechat/data-schemas 0.0.71: users, conversations,
# messages, chatprojects); `headers` writes a chat's conversation and its user as LibreChat does before it
# calls the model
LIBRECHAT_DB = mongomock.MongoClient().db


@pytest.fixture(scope="module")
def mongo():
    db = LIBRECHAT_DB
    garden = ObjectId()
    db.chatprojects.insert_one({"_id": garden, "name": "Garden", "user": "alice"})
    db.conversations.insert_one({"conversationId": "conv-garden", "user": "alice", "chatProjectId": garden})
    # LibreChat's chat projects are their owner's: bob's has the same name and is another project
    bobs = ObjectId()
    db.chatprojects.insert_one({"_id": bobs, "name": "Garden", "user": "bob"})
    db.conversations.insert_one(
        {"conversationId": "conv-bobs-garden", "user": "bob", "chatProjectId": str(bobs)}
    )
    db.conversations.insert_one({"conversationId": "conv-plain", "user": "alice"})
    # LibreChat's own opt-outs, as its MongoDB records them
    db.conversations.insert_one({"conversationId": "conv-temporary", "user": "tess", "isTemporary": True})
    db.conversations.insert_one({"conversationId": "conv-private", "user": "pia"})
    db.users.insert_one({"_id": "pia", "personalization": {"memories": False}})
    return db


def written(user: str, conversation: str) -> None:
    """LibreChat's own writes for a chat: its user's account (an ObjectId `_id`, its hex the user id
    LibreChat sends) and the conversation."""
    key = ObjectId(user) if ObjectId.is_valid(user) else user
    LIBRECHAT_DB.users.update_one(
        {"_id": key}, {"$setOnInsert": {"email": f"{user}@example.com"}}, upsert=True
    )
    LIBRECHAT_DB.conversations.update_one(
        {"conversationId": conversation, "user": user}, {"$setOnInsert": {"title": "New Chat"}}, upsert=True
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, upstream, mongo):
    upstreams = [
        {"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": UPSTREAM_KEY},
        {"name": "an", "baseUrl": upstream.url, "api": "anthropic", "apiKey": UPSTREAM_KEY},
        {"name": "byo", "baseUrl": upstream.url + "/v1", "api": "openai"},
        {"name": "pub", "baseUrl": upstream.url + "/v1", "api": "openai", "open": True},
        {
            "name": "cached",
            "baseUrl": upstream.url,
            "api": "openai",
            "apiKey": UPSTREAM_KEY,
            "memoryPlacement": "user",
        },
    ]
    s = proxy_stack(
        tmp_path_factory.mktemp("engram"),
        local_embedder,
        upstreams,
        PROXY_KEY,
        mongo_database=mongo,
        sweep_every_s=5,
    )
    yield s
    s.stop()


def headers(user="alice", conversation=None, unwritten=False):
    """LibreChat's identity headers for a chat; the chat written to its MongoDB first, as LibreChat does
    (`unwritten`: a new chat LibreChat has not written yet)."""
    conversation = conversation or f"conv-{uuid.uuid4().hex[:8]}"
    if not unwritten:
        written(user, conversation)
    return {"x-librechat-user-id": user, "x-librechat-conversation-id": conversation}


def oa(stack, upstream: str = "oa", **kw):
    return openai.OpenAI(
        base_url=f"{stack.url}/{upstream}/v1", api_key=PROXY_KEY, default_headers=headers(**kw), max_retries=0
    )


def an(stack, **kw):
    return anthropic.Anthropic(
        base_url=f"{stack.url}/an", api_key=PROXY_KEY, default_headers=headers(**kw), max_retries=0
    )


def system_of(request):
    """Everything the model was told besides the chat: the caller's system prompt and engram's block (an
    OpenAI system message, or Anthropic text blocks engram put at the start of the turn's user message)."""
    body = request["json"]
    told = []
    if "system" in body:
        told.append(body["system"] if isinstance(body["system"], str) else json.dumps(body["system"]))
    for m in body["messages"]:
        if m["role"] == "system":
            told.append(m["content"])
        elif m["role"] == "user" and isinstance(m["content"], list):
            told += [b["text"] for b in m["content"] if b.get("text", "").startswith("<!-- engram:")]
        elif m["role"] == "user" and m["content"].startswith("<!-- engram:"):
            told.append(m["content"])
    return "\n".join(told)


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
            model="fake-model",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": False},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert upstream.chats()[-1]["json"]["stream_options"] == {"include_usage": True}  # the trace's counts
    assert chunks[-1].usage.total_tokens == 14
    # no stream options at all: an operator dropped them (LibreChat's dropParams), none are added
    list(
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "stream_options" not in upstream.chats()[-1]["json"]


def test_anthropic_sdk_plain_and_streaming(stack, upstream):
    client = an(stack)
    reply = client.messages.create(
        model="fake-model", max_tokens=50, system="Be brief.", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == REPLY
    seen = upstream.chats()[-1]
    assert seen["headers"]["x-api-key"] == UPSTREAM_KEY
    # the caller's system prompt untouched (prompt caching); engram's block opens the turn's message
    assert seen["json"]["system"] == "Be brief."
    first = seen["json"]["messages"][-1]["content"]
    assert first[0]["text"].startswith("<!-- engram:datetime -->") and first[-1] == {
        "type": "text",
        "text": "hi",
    }
    with client.messages.stream(
        model="fake-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "hi"}],
        system=[{"type": "text", "text": "Blocks."}],
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == REPLY
    sent = upstream.chats()[-1]["json"]
    assert sent["system"] == [{"type": "text", "text": "Blocks."}]
    assert sent["messages"][-1]["content"][0]["text"].startswith("<!-- engram:datetime -->")


def test_the_callers_prompt_prefix_is_byte_identical_across_turns(stack, upstream):
    """Provider prompt caches key on the prompt's leading tokens (Anthropic: system, then messages;
    OpenAI: messages in order), and LibreChat's agents put cache_control on the last two user messages.
    engram's block (the time, the memories: different every turn) goes at the newest user message, so in
    two turns of one chat the system prompt and every earlier message reach the provider byte for byte as
    the caller sent them: the second turn's prefix is the first turn's history, untouched."""
    import os

    def common(a: bytes, b: bytes) -> int:
        return len(os.path.commonprefix([a, b]))

    client = an(stack, conversation="conv-cache-seed")
    client.messages.create(
        model="fake-model", max_tokens=50, messages=[{"role": "user", "content": "/memory save I like teal."}]
    )  # a memory to recall: the block differs between the turns

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
    assert one["system"] == system == two["system"]  # as sent, every byte
    assert two["messages"][:2] == [*first_turn, {"role": "assistant", "content": REPLY}]  # untouched
    assert two["messages"][-1]["content"][-1] == {"type": "text", "text": "What colour do I like?"}

    openai_system = {"role": "system", "content": "Answer in French. " * 40}
    history = [openai_system, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": REPLY}]
    for upstream_name in ("oa", "cached"):
        client = oa(stack, conversation=f"conv-cache-{upstream_name}", upstream=upstream_name)
        client.chat.completions.create(model="m", messages=history[:2])
        client.chat.completions.create(model="m", messages=[*history, {"role": "user", "content": "Again"}])
        one, two = (r["json"]["messages"] for r in upstream.chats()[-2:])
        assert [m["role"] for m in two] == ["system", "user", "assistant", "user"]  # no second system
        if upstream_name == "oa":  # the block after the caller's system prompt: that prompt is the prefix
            assert two[0]["content"].startswith(openai_system["content"] + "\n\n<!-- engram:datetime -->")
            assert two[1:3] == history[1:] and two[3] == {"role": "user", "content": "Again"}
            prefix = json.dumps(one)[: json.dumps(one).index("<!-- engram:")]
            assert common(json.dumps(one).encode(), json.dumps(two).encode()) >= len(prefix)
        else:  # "user": the block opens the newest user message, the whole history before it is the prefix
            assert two[:3] == history and two[3]["content"].startswith("<!-- engram:datetime -->")
            assert two[3]["content"].endswith("\n\nAgain")
            assert json.dumps(two).startswith(json.dumps(history)[:-1])


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


def test_a_fact_keeps_its_authors_librechat_names_and_a_question_naming_them_finds_it_first(stack, api):
    """LibreChat fills {{LIBRECHAT_USER_NAME}} and {{LIBRECHAT_USER_USERNAME}} into the headers its
    librechat.yaml names (packages/api/src/utils/env.ts, resolveHeaders): a fact keeps them as its author's
    names, so a search across the bot's users that names one finds theirs first (engram.names)."""
    tag = uuid.uuid4().hex[:6]
    alice, bob, nobody = f"alice-{tag}", f"bob-{tag}", f"nobody-{tag}"
    names = {
        alice: {
            # as Node's http writes a header's string: one byte a letter (latin-1)
            "x-librechat-user-name": "Amélie Moreau".encode("latin-1"),
            "x-librechat-username": "amel",
        },
        bob: {"x-librechat-user-name": "Bob Stone", "x-librechat-username": "bstone"},
        # an install that left the placeholders as written, or sent an empty name: no name is kept
        nobody: {"x-librechat-user-name": "{{LIBRECHAT_USER_NAME}}", "x-librechat-username": ""},
    }
    for user in (nobody, alice, bob):  # bob's is newest: on a tie of words and meaning it comes first
        said = httpx.post(  # the OpenAI SDK sends a header's text as ASCII only; LibreChat's Node does not
            f"{stack.url}/oa/v1/chat/completions",
            headers={"Authorization": f"Bearer {PROXY_KEY}", **headers(user=user), **names[user]},
            json={
                "model": "m",
                "messages": [{"role": "user", "content": f"/memory save The user grows quinces {tag}."}],
            },
            timeout=30,
        )
        assert said.json()["choices"][0]["message"]["content"].startswith("Saved as mem:"), said.text

    def search(query: str) -> list[dict]:
        found = api.get("/v1/bots/librechat/memories", params={"kind": "fact", "query": query, "limit": 3})
        return [m for m in found.json()["memories"] if tag in m["text"]]

    hits = search(f"What does Amelie grow, quinces {tag}?")
    assert [m["userId"] for m in hits][:1] == [alice]
    assert hits[0]["content"] == {"displayName": "Amélie Moreau", "author": "amel"}
    assert [m["userId"] for m in search(f"Which quinces {tag} does amel grow?")][:1] == [alice]
    assert [m["userId"] for m in search(f"What does Bob grow, quinces {tag}?")][:1] == [bob]
    assert next(m for m in search(f"quinces {tag}") if m["userId"] == nobody).get("content") is None


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


def test_project_memories_follow_the_chat_projects_id_and_owner(stack, upstream, mongo):
    """A project is LibreChat's chat project, known by its id: private to its owner (another user's project
    of the same name is another project) and the same project after a rename."""

    def listed(project):
        api = httpx.get(
            f"{stack.url}/v1/bots/librechat/memories",
            params={"project": project},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        return [m["text"] for m in api.json()["memories"]]

    garden = mongo.chatprojects.find_one({"user": "alice"})["_id"]
    c = oa(stack, conversation="conv-garden")
    r = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save The tomatoes need staking in June."}]
    )
    assert r.choices[0].message.content.startswith("Saved")
    status = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert 'project "Garden"' in status.choices[0].message.content
    bob = oa(stack, user="bob", conversation="conv-bobs-garden")
    bob.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save Bob grows leeks."}]
    )
    assert listed(str(garden)) == ["The tomatoes need staking in June."]
    assert listed("Garden") == []  # names are not keys
    # renamed in LibreChat: a chat of the project still finds what was kept in it
    mongo.chatprojects.update_one({"_id": garden}, {"$set": {"name": "Vegetables"}})
    mongo.conversations.insert_one({"conversationId": "conv-veg", "user": "alice", "chatProjectId": garden})
    c = oa(stack, conversation="conv-veg")
    status = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    assert 'project "Vegetables"' in status.choices[0].message.content
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "When do the tomatoes need staking?"}]
    )
    assert "The tomatoes need staking in June." in system_of(upstream.chats()[-1])
    assert listed(str(garden)) == ["The tomatoes need staking in June."]


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

    def send_many(self, jobs):
        for job in jobs:
            self.send(job)


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
    before = len(upstream.requests)
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
    # found among what reached the upstream since (an earlier test's extraction may arrive meanwhile)
    title = [{"role": "user", "content": "Write a title"}]
    sent = [q["json"] for q in upstream.requests[before:] if (q.get("json") or {}).get("messages") == title]
    assert sent == [json.loads(raw)]
    models = httpx.get(f"{stack.url}/oa/v1/models", headers={"Authorization": f"Bearer {PROXY_KEY}"})
    assert models.json()["data"][0]["id"] == "fake-model"
    failed = httpx.post(f"{stack.url}/oa/v1/fail", headers={"Authorization": f"Bearer {PROXY_KEY}"})
    assert failed.status_code == 429 and failed.headers["retry-after"] == "7"
    assert httpx.post(f"{stack.url}/nope/v1/chat/completions", json={}).status_code == 404


def test_extraction_after_a_turn_stores_durable_facts(stack, upstream):
    conv = "conv-" + uuid.uuid4().hex[:6]
    named = {"x-librechat-user-name": "Carol Ng", "x-librechat-username": "carol.ng"}
    c = anthropic.Anthropic(
        base_url=f"{stack.url}/an",
        api_key=PROXY_KEY,
        default_headers={**headers(user="carol", conversation=conv), **named},
        max_retries=0,
    )
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
    # the extraction job carried the user's LibreChat names to the fact (engram.names reads them)
    assert stored[0]["content"] == {"displayName": "Carol Ng", "author": "carol.ng"}
    c.messages.create(
        model="fake-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "Which tea should I brew tonight?"}],
    )
    assert "genmaicha" in system_of(upstream.chats()[-1])


def test_mcp_tools(stack):
    import anyio
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def session_as(user):
        hdrs = {"Authorization": f"Bearer {PROXY_KEY}", **headers(user=user)}
        async with (
            httpx2.AsyncClient(headers=hdrs, timeout=30) as http,
            streamable_http_client(f"{stack.url}/mcp", http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            yield session

    async def run():
        async with session_as("dave") as session:
            init = await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            saved = await session.call_tool("save_memory", {"text": "The user plays the oboe."})
            found = await session.call_tool("search_memory", {"query": "musical instrument", "limit": 3})
            floor = {"query": "quantum physics lecture", "min_score": 0.5}
            assert (
                "oboe" in (await session.call_tool("search_memory", floor | {"min_score": 0})).content[0].text
            )
            assert (await session.call_tool("search_memory", floor)).content[0].text == "Nothing found."
            status = await session.call_tool("memory_status", {})
            return init, tools, saved, found, status

    async def unresolved():
        async with session_as("{{LIBRECHAT_USER_ID}}") as session:
            await session.initialize()
            return await session.call_tool("save_memory", {"text": "Everyone shares this."})

    init, tools, saved, found, status = anyio.run(run)
    refused = anyio.run(unresolved)
    assert refused.is_error and "placeholder unresolved" in refused.content[0].text
    everyone = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories",
        params={"query": "Everyone shares this", "limit": 50},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["memories"]
    assert [m for m in everyone if "Everyone" in m["text"]] == []
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


def _hanging(inner):
    def hanging(*args, **kwargs):
        time.sleep(4)
        return inner(*args, **kwargs)

    return hanging


@pytest.mark.parametrize("hangs", ["qdrant", "embedder"])
def test_a_turn_goes_on_without_memory_when_qdrant_or_the_embedder_hangs(stack, upstream, monkeypatch, hangs):
    """A dependency that hangs (rather than refuses) costs a turn its memory budget (1 s), not its timeout;
    the turn says so, and the turns right after do not wait at all until a trial comes back in time."""
    service, user = stack.engine.service, f"hang-{hangs}"
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"})
    fact = {"text": "The user likes oolong tea.", "userId": user}
    assert api.post("/v1/bots/librechat/memories", json=fact).status_code == 201
    asked = {"query": "oolong", "userId": user}
    assert wait_until(lambda: api.get("/v1/bots/librechat/memories", params=asked).json()["meaning"])
    held = service.reads.index if hangs == "qdrant" else service.indexer.embedder
    # an embedder that hangs hangs for searches (embed_queries, where it has one) and writes alike
    names = [n for n in (["search"] if hangs == "qdrant" else ["embed", "embed_queries"]) if hasattr(held, n)]
    inner = {name: getattr(held, name) for name in names}
    for name in names:
        monkeypatch.setattr(held, name, _hanging(inner[name]))
    monkeypatch.setattr(stack.proxy.memory_breaker, "pause_s", 2.0)
    c = oa(stack, user=user)

    def turn(words):
        started = time.monotonic()
        raw = c.chat.completions.with_raw_response.create(
            model="fake-model", messages=[{"role": "user", "content": f"{words} {uuid.uuid4().hex}"}]
        )
        return raw.headers.get("x-engram-memory"), time.monotonic() - started

    try:
        said, took = turn("What tea do I like?")
        assert said == "skipped; reason=over-budget" and took < 2.0, (said, took)
        assert "Remembered from earlier" not in json.dumps(upstream.chats()[-1]["json"])
        said, took = turn("And which coffee?")
        assert said == "skipped; reason=paused" and took < 1.0, (said, took)
        for name in names:  # back: after the pause, a trial finds it on time
            monkeypatch.setattr(held, name, inner[name])
        time.sleep(2.1)
        said, _ = turn("Which tea again?")
        assert said is None and not stack.proxy.memory_breaker.open
    finally:
        stack.proxy.memory_breaker.succeeded()


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
                model="fake-model",
                messages=[{"role": "user", "content": "Tell me about tea"}],
                stream=True,
                stream_options={"include_usage": True},  # as LibreChat's client asks (LangChain's default)
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


# ----- LibreChat as LibreChat calls it --------------------------------------------------------------------

TITLE_COMPLETION = (  # @librechat/agents src/utils/title.ts, defaultCompletionPrompt, convo from run.ts
    "Provide a concise, 5-word-or-less title for the conversation, using title case conventions. Only return "
    "the title itself.\n\nConversation:\nUser: My favourite city is Porto.\nAI: Porto is lovely."
)
TITLE_STRUCTURED = (  # the same file's defaultTitlePrompt, sent with the title/language schema as a tool
    "Analyze this conversation and provide:\n1. The detected language of the conversation\n"
    "2. A concise title in the detected language (5 words or less, no punctuation or quotation)\n\n"
    "User: My favourite city is Porto.\nAI: Porto is lovely."
)
TITLE_SCHEMA = {
    "type": "object",
    "properties": {"language": {"type": "string"}, "title": {"type": "string"}},
    "required": ["language", "title"],
}
SUMMARY = (  # @librechat/agents src/summarization/shared.ts, DEFAULT_SUMMARIZATION_PROMPT (its start)
    "Hold on, before you continue I need you to write me a checkpoint of everything so far. Your context "
    "window is filling up and this checkpoint replaces the messages above."
)


def memories_of(stack, user: str) -> list[str]:
    listed = httpx.get(
        f"{stack.url}/v1/bots/librechat/memories",
        params={"userId": user, "limit": 50},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["memories"]
    return [m["text"] for m in listed]


def test_librechat_side_calls_reach_the_provider_as_sent_and_queue_nothing(stack, upstream, monkeypatch):
    """Titles (both title methods, and an operator's own titlePrompt), summaries and LibreChat's memory
    agent carry the conversation id like a turn, but are not the user speaking: no date, no memories, no
    extraction, and the body reaches the provider byte for byte as LibreChat sent it."""
    settings = stack.proxy.settings.model_copy(
        update={"side_call_markers": ("Name this chat in three words",)}
    )
    monkeypatch.setattr(stack.proxy, "settings", settings)
    hdrs = {"Authorization": f"Bearer {PROXY_KEY}", **headers(user="titler", conversation="conv-title")}
    openai_calls = [
        {"model": "m", "messages": [{"role": "user", "content": TITLE_COMPLETION}]},
        {
            "model": "m",
            "messages": [{"role": "user", "content": TITLE_STRUCTURED}],
            "tools": [{"type": "function", "function": {"name": "extract", "parameters": TITLE_SCHEMA}}],
            "tool_choice": {"type": "function", "function": {"name": "extract"}},
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "My favourite city is Porto."},
                {"role": "assistant", "content": "Porto is lovely."},
                {"role": "user", "content": SUMMARY},
            ],
        },
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": f"{MEMORY_AGENT_INSTRUCTIONS}\n\n{MEMORY_AGENT_STATUS}"},
                {"role": "user", "content": "My favourite city is Porto."},
            ],
            "tools": [
                {"type": "function", "function": {"name": "set_memory", "parameters": {"type": "object"}}}
            ],
        },
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Name this chat in three words: my city Porto"}],
        },
    ]
    for call in openai_calls:
        raw = json.dumps(call).encode()
        assert httpx.post(f"{stack.url}/oa/v1/chat/completions", content=raw, headers=hdrs).status_code == 200
        # a background extraction (an earlier test's turn) may land beside it: the last chat call
        assert upstream.chats()[-1]["json"] == call  # nothing added, nothing taken away
    anthropic_title = {
        "model": "m",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": TITLE_STRUCTURED}],
        "tools": [{"name": "extract", "input_schema": TITLE_SCHEMA}],
    }
    assert httpx.post(f"{stack.url}/an/v1/messages", json=anthropic_title, headers=hdrs).status_code == 200
    assert upstream.chats()[-1]["json"] == anthropic_title
    stack.settle()
    assert memories_of(stack, "titler") == []  # a title quoting the chat stored nothing


@pytest.mark.parametrize("value", ["{{LIBRECHAT_USER_ID}}", "", "${LIBRECHAT_USER_ID}"])
def test_an_identity_librechat_left_unresolved_is_refused_and_nothing_is_stored(stack, upstream, value):
    before = len(upstream.requests)
    r = httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "My favourite colour is plum."}]},
        headers={
            "Authorization": f"Bearer {PROXY_KEY}",
            "x-librechat-user-id": value,
            "x-librechat-conversation-id": "conv-unresolved",
        },
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_identity"
    assert (
        "x-librechat-user-id" in r.json()["error"]["message"]
        and "librechat.yaml" in r.json()["error"]["message"]
    )
    assert len(upstream.requests) == before  # never sent, never stored under


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_tool_calling_turn_stores_the_users_fact_and_not_the_tools(stack, upstream, api):
    """An agent turn: the first answer is a tool call (no text), the next request ends with the tool's
    result. engram recalls once for the turn (the block is the same byte for byte in both rounds), extracts
    from the user's words and the final answer, and never from what the tool returned."""
    user, conv = f"tools-{api}", f"conv-tools-{api}"
    said = "My diet is vegetarian. Find restaurants in Lisbon."
    found = "Tasca Verde. My favourite dish is bacalhau."  # the tool's result: not the user speaking
    if api == "openai":
        c = oa(stack, user=user, conversation=conv)
        tools = [{"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}]
        first = [{"role": "user", "content": said}]
        call = c.chat.completions.create(model="m", messages=first, tools=tools).choices[0].message
        assert call.tool_calls
        rounds = [
            *first,
            call.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "call_1", "content": found},
        ]
        final = c.chat.completions.create(model="m", messages=rounds, tools=tools).choices[0].message.content
        one, two = (r["json"]["messages"] for r in upstream.chats()[-2:])
        block = lambda messages: messages[0]["content"]  # noqa: E731  # no system prompt: in the turn's message
        assert [m["role"] for m in two] == ["user", "assistant", "tool"]
    else:
        c = an(stack, user=user, conversation=conv)
        tools = [{"name": "web_search", "input_schema": {"type": "object"}}]
        first = [{"role": "user", "content": said}]
        call = c.messages.create(model="m", max_tokens=50, messages=first, tools=tools)
        assert call.stop_reason == "tool_use"
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": found}
        rounds = [
            *first,
            {"role": "assistant", "content": [b.model_dump() for b in call.content]},
            {"role": "user", "content": [result]},
        ]
        final = c.messages.create(model="m", max_tokens=50, messages=rounds, tools=tools).content[0].text
        one, two = (r["json"]["messages"] for r in upstream.chats()[-2:])
        block = lambda messages: messages[0]["content"][0]  # noqa: E731
    assert final == REPLY
    assert block(one) == block(two)  # recalled once per user turn: the tool round is told the same
    assert wait_until(lambda: "The user's diet is vegetarian." in memories_of(stack, user), timeout_s=30)
    stack.settle()
    assert not [m for m in memories_of(stack, user) if "bacalhau" in m]


def test_file_text_librechat_prepends_is_neither_recalled_on_nor_stored(stack, upstream):
    """LibreChat puts an attached file's text before the user's words (packages/api/src/files/context.ts,
    agents/client.ts prependFileContext). Someone else's CV is not a fact about the user, and a command
    typed with a file attached is still a command."""
    cv = file_context(("cv.pdf", "My age is 42. My allergy is penicillin. My employer is Initech."))
    c = oa(stack, user="filer", conversation="conv-file")
    for words in ("What jobs suit this CV?", ATTACHMENT_ONLY_TEXT):
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": prepend(cv, words)}])
    stack.settle()
    assert memories_of(stack, "filer") == []
    before = len(upstream.requests)
    answer = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prepend(cv, "/memory status")}]
    )
    assert "Memory is on" in answer.choices[0].message.content and len(upstream.requests) == before


def test_memory_commands_and_their_answers_leave_the_history_the_model_gets(stack, upstream):
    """LibreChat stores a /memory command and engram's answer as messages and sends both back on every later
    turn: the model never sees them."""
    c = oa(stack, user="hygiene", conversation="conv-hygiene")
    saved = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save I like figs."}]
    )
    history = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "/memory save I like figs."},
        {"role": "assistant", "content": saved.choices[0].message.content},
        {"role": "user", "content": "What should I eat?"},
    ]
    c.chat.completions.create(model="m", messages=history)
    sent = upstream.chats()[-1]["json"]["messages"]
    assert sent[:2] == [history[0], history[1]] and len(sent) == 3
    assert sent[2]["content"].startswith("<!-- engram:") and sent[2]["content"].endswith(
        "\n\nWhat should I eat?"
    )


@pytest.mark.parametrize("model", ["o3-mini", "house-reasoner"])
def test_a_reasoning_models_chat_stores_its_fact(stack, upstream, model):
    """o-series and gpt-5 take only the default temperature and answer 400 to `temperature: 0`, as OpenAI
    does: extraction sends them none, and asks a model it could not know by name again without it."""
    user = f"reasoner-{model}"
    oa(stack, user=user, conversation=f"conv-{user}").chat.completions.create(
        model=model, messages=[{"role": "user", "content": "My favourite tea is sencha."}]
    )
    assert wait_until(lambda: "The user's favourite tea is sencha." in memories_of(stack, user), timeout_s=30)
    asked = [r["json"] for r in upstream.requests if r["json"] and upstream.is_extraction(r["json"])]
    mine = [body for body in asked if "sencha" in json.dumps(body) and body["model"] == model]
    assert [("temperature" in body) for body in mine] == ([False] if model == "o3-mini" else [True, False])


def test_memory_status_says_when_extraction_is_failing(stack, upstream):
    c = oa(stack, user="unlucky", conversation="conv-unlucky")
    c.chat.completions.create(model="broken-1", messages=[{"role": "user", "content": "My pen is blue."}])
    assert wait_until(lambda: stack.engine.state.marks.extraction("librechat").failing, timeout_s=30)
    status = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory status"}])
    said = status.choices[0].message.content
    assert "Extraction is failing" in said and "HTTP 503" in said
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "My pen is red."}])
    assert wait_until(lambda: not stack.engine.state.marks.extraction("librechat").failing, timeout_s=30)


def said_in_librechat(stack, user: str, conversation: str, parent: str, text: str) -> str:
    """A user message as LibreChat handles it: saved in its MongoDB (messageSchema), then sent to the
    model with the endpoint's headers, the parent message id among them; returns the message id."""
    message = str(uuid.uuid4())
    LIBRECHAT_DB.messages.insert_one(
        {
            "messageId": message,
            "conversationId": conversation,
            "user": user,
            "parentMessageId": parent,
            "isCreatedByUser": True,
            "sender": "User",
            "text": text,
            "createdAt": datetime.now(UTC),
        }
    )
    hdrs = {**headers(user, conversation), "x-librechat-parent-message-id": parent}
    client = openai.OpenAI(
        base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=hdrs, max_retries=0
    )
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    return message


def test_librechats_deletions_and_edits_reach_engram_within_one_reconcile(stack, upstream):
    """LibreChat deletes an account (data-schemas deleteUserById), a chat (deleteConvos: the conversation
    and its messages), and an edit sent again makes a newer user message under the same parent: one pass
    of the reconcile takes each to engram's facts; a fact of the Memory API's is left alone."""
    from engram.jobs import LibreChatReconcileJob

    lena, omar = str(ObjectId()), str(ObjectId())
    home, food, sport = (f"conv-{uuid.uuid4().hex[:8]}" for _ in range(3))
    said_in_librechat(stack, lena, home, NO_PARENT, "My home city is Berlin.")
    assert wait_until(lambda: "The user's home city is Berlin." in memories_of(stack, lena), timeout_s=30)
    time.sleep(0.01)  # the edit is the newer message
    said_in_librechat(stack, lena, home, NO_PARENT, "My home town is Munich, actually.")
    said_in_librechat(stack, lena, food, NO_PARENT, "My favourite dish is ramen.")
    said_in_librechat(stack, omar, sport, NO_PARENT, "My favourite sport is judo.")
    stack.settle()
    assert set(memories_of(stack, lena)) == {
        "The user's home city is Berlin.",
        "The user's home town is Munich, actually.",
        "The user's favourite dish is ramen.",
    }
    assert memories_of(stack, omar) == ["The user's favourite sport is judo."]
    api_fact = httpx.post(
        f"{stack.url}/v1/bots/librechat/memories",
        json={"text": "Lena's badge number is 12.", "userId": lena},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert api_fact.status_code in (200, 201), api_fact.text
    LIBRECHAT_DB.conversations.delete_many({"conversationId": food})
    LIBRECHAT_DB.messages.delete_many({"conversationId": food})
    LIBRECHAT_DB.users.delete_one({"_id": ObjectId(omar)})
    stack.engine.queue.send(LibreChatReconcileJob())
    stack.settle()
    kept = {"The user's home town is Munich, actually.", "Lena's badge number is 12."}
    assert set(memories_of(stack, lena)) == kept
    assert memories_of(stack, omar) == []
    stack.engine.queue.send(LibreChatReconcileJob())  # a second pass finds nothing more to do
    stack.settle()
    assert set(memories_of(stack, lena)) == kept


def test_a_chat_librechat_has_not_written_yet_is_memory_off_until_it_is(stack, upstream, monkeypatch):
    """LibreChat saves a new chat without waiting for it: a turn whose chat cannot be read yet recalls
    nothing (its settings may say memory off) and its facts wait for the worker to read them."""
    import engram.proxy.extract as extract

    monkeypatch.setattr(extract, "CONFIRM_DELAY_S", 1)
    user, conversation = "newcomer", f"conv-{uuid.uuid4().hex[:8]}"
    oa(stack, user=user, conversation="conv-newcomer-seed").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save I keep bees."}]
    )

    def client(conversation: str):
        hdrs = headers(user, conversation, unwritten=True)
        return openai.OpenAI(
            base_url=f"{stack.url}/oa/v1", api_key=PROXY_KEY, default_headers=hdrs, max_retries=0
        )

    client(conversation).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My dog is Rex."}]
    )
    assert "bees" not in system_of(upstream.chats()[-1])  # nothing recalled: the chat's settings unknown
    time.sleep(1.5)
    assert "The user's dog is Rex." not in memories_of(stack, user)  # not before LibreChat says so
    written(user, conversation)
    assert wait_until(lambda: "The user's dog is Rex." in memories_of(stack, user), timeout_s=30)
    # never written (a chat LibreChat dropped): nothing kept, after a few tries
    client(f"conv-{uuid.uuid4().hex[:8]}").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My cat is Tom."}]
    )
    time.sleep(extract.CONFIRM_ATTEMPTS * 1.5)
    stack.settle()
    assert "The user's cat is Tom." not in memories_of(stack, user)


def test_librechat_opt_outs_are_kept(stack, upstream):
    """A temporary chat (LibreChat deletes it) keeps nothing; a user who switched personalization memories off
    in LibreChat gets no recall and no extraction. Both read with the project lookup engram already makes."""
    c = oa(stack, user="tess", conversation="conv-temporary")
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My favourite bird is the wren."}]
    )
    c = oa(stack, user="pia", conversation="conv-private")
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory save I like owls."}])
    c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "My favourite bird is the owl."}]
    )
    told = system_of(upstream.chats()[-1])
    assert "owls" not in told and "# Current date and time" in told  # the time still, no memories
    stack.settle()
    assert memories_of(stack, "tess") == []
    assert memories_of(stack, "pia") == ["I like owls."]  # what she saved herself, nothing extracted


def test_an_answer_stopped_half_way_keeps_nothing(stack, upstream):
    """LibreChat's Stop closes the stream before the answer's end: what the user said in that turn is
    not extracted from half an answer (they may well regenerate it)."""
    body = {
        "model": "slow-model",
        "stream": True,
        "messages": [{"role": "user", "content": "My favourite bird is the wren."}],
    }
    hdrs = {"Authorization": f"Bearer {PROXY_KEY}", **headers(user="stopper", conversation="conv-stop")}
    with httpx.stream("POST", f"{stack.url}/oa/v1/chat/completions", json=body, headers=hdrs) as r:
        next(r.iter_lines())  # the answer has begun; Stop
    stack.settle()
    assert not [
        r
        for r in upstream.requests
        if r["json"] and upstream.is_extraction(r["json"]) and "wren" in json.dumps(r["json"])
    ]
    assert memories_of(stack, "stopper") == []


def test_a_regenerated_answer_extracts_the_turn_once(stack, upstream):
    """LibreChat's regenerate sends the same user message of the same chat again: its facts are extracted
    once, not once per answer."""

    def extractions() -> int:
        return sum(1 for r in upstream.requests if r["json"] and upstream.is_extraction(r["json"]))

    c = oa(stack, user="regen", conversation="conv-regen")
    turn = [{"role": "user", "content": "My favourite fruit is quince."}]
    c.chat.completions.create(model="m", messages=turn)
    assert wait_until(
        lambda: extractions() > 0 and "The user's favourite fruit is quince." in memories_of(stack, "regen")
    )
    stack.settle()
    before = extractions()
    c.chat.completions.create(model="m", messages=turn)  # regenerate
    stack.settle()
    assert extractions() == before
    # the same words later in the chat follow another history: a turn of their own, extracted
    later = [*turn, {"role": "assistant", "content": REPLY}, *turn]
    c.chat.completions.create(model="m", messages=later)
    assert wait_until(lambda: extractions() == before + 1)


def test_a_fork_keeps_its_chats_setting(stack, upstream):
    """LibreChat's fork (and duplicate) makes a new conversation id with a copy of the history up to the fork
    point (api/server/utils/import/fork.js): the /memory off said in the original comes with the copy, and
    so does its setting; a chat whose history holds no such command follows the default."""
    c = oa(stack, user="forker", conversation="conv-original")
    off = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "/memory off"}])
    history = [
        {"role": "user", "content": "/memory off"},
        {"role": "assistant", "content": off.choices[0].message.content},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": REPLY},
    ]
    fork = oa(stack, user="forker", conversation="conv-fork")
    fork.chat.completions.create(
        model="m", messages=[*history, {"role": "user", "content": "My favourite fruit is the plum."}]
    )
    status = fork.chat.completions.create(
        model="m", messages=[*history, {"role": "user", "content": "/memory status"}]
    )
    assert "Memory is off for this chat (this chat's setting)" in status.choices[0].message.content
    # a command engram refused set nothing: its answer is not a setting's
    refused = [
        {"role": "user", "content": "/memory off"},
        {"role": "assistant", "content": "engram's memory needs engram's key: send it as the bearer token."},
    ]
    other = oa(stack, user="forker", conversation="conv-other")
    status = other.chat.completions.create(
        model="m", messages=[*refused, {"role": "user", "content": "/memory status"}]
    )
    assert "Memory is on for this chat (the server default)" in status.choices[0].message.content
    stack.settle()
    assert memories_of(stack, "forker") == []


def test_a_single_delete_or_change_reaches_every_cached_recall(stack, upstream):
    """The proxy caches a recall for a while; a memory removed or changed through the Memory API (another
    instance, as on AWS) is not told to the model again: the cache is checked against the bot's last
    change."""
    c = oa(stack, user="cachy", conversation="conv-cachy")
    saved = c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "/memory save My gate code is 8813."}]
    )
    memory_id = saved.choices[0].message.content.split()[2].rstrip(":")
    ask = [{"role": "user", "content": "What is my gate code?"}]
    c.chat.completions.create(model="m", messages=ask)
    # the words, not the bare digits: a memory id shown beside them may hold any four digits
    assert "code is 8813" in system_of(upstream.chats()[-1])
    admin = {"Authorization": f"Bearer {KEY}"}
    changed = httpx.patch(
        f"{stack.url}/v1/bots/librechat/memories/{memory_id}",
        json={"text": "My gate code is 4402."},
        headers=admin,
    )
    assert changed.status_code == 200
    c.chat.completions.create(model="m", messages=ask)  # the same query: a cache hit but for the change
    told = system_of(upstream.chats()[-1])
    assert "code is 8813" not in told and "code is 4402" in told
    assert (
        httpx.delete(f"{stack.url}/v1/bots/librechat/memories/{memory_id}", headers=admin).status_code == 204
    )
    c.chat.completions.create(model="m", messages=ask)
    assert "code is 4402" not in system_of(upstream.chats()[-1])


def test_a_caller_without_the_key_is_refused_before_its_body_is_read(stack, upstream):
    """Issue 46: the proxy's URL is open to the internet (a Function URL, AuthType NONE: LibreChat sends a
    bearer key, never a SigV4 signature). A caller without engram's key holds a slot only as long as its
    refusal takes: the key is checked on the headers, before any of the body is read, so a body that is
    never sent holds nothing up."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(stack.url)
    before = len(upstream.requests)
    with socket.create_connection((where.hostname, where.port), timeout=5) as conn:
        started = time.monotonic()
        conn.sendall(
            b"POST /oa/v1/chat/completions HTTP/1.1\r\nHost: engram\r\nAuthorization: Bearer wrong\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"model": '
        )
        answer = conn.recv(4096).decode()
        took = time.monotonic() - started
        head, _, body = answer.partition("\r\n\r\n")
        length = int(
            next(h.split(":")[1] for h in head.split("\r\n") if h.lower().startswith("content-length"))
        )
        while len(body.encode()) < length:  # the body may come in a segment of its own
            body += conn.recv(4096).decode()
        answer = f"{head}\r\n\r\n{body}"
    assert answer.startswith("HTTP/1.1 401") and "needs engram's proxy key" in answer, answer
    assert took < 1.0, took
    assert len(upstream.requests) == before
