"""kill -9 the real `make run` process in the middle of work, start it again, and nothing acknowledged is
lost: records, and every kind of queued job (a dependency held by a gate keeps each job in flight)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from nacl.signing import SigningKey

from tests.fake_discord import ALICE, APP_ID, C11, C12, C21, G1, T14, TOKEN, FakeDiscord
from tests.fake_upstream import FakeUpstream
from tests.local_process import PROXY_KEY, Stack
from tests.support import wait_until

SIGNER = SigningKey.generate()


@pytest.fixture
def launch(tmp_path):
    """Start `make run` on this test's data dir with an environment; every stack started is stopped."""
    started: list[Stack] = []

    def start(env: dict[str, str]) -> Stack:
        started.append(Stack(tmp_path, env).start())
        return started[-1]

    yield start
    for stack in started:
        stack.stop()


@pytest.fixture
def fakes():
    discord, upstream, extractor = FakeDiscord().start(), FakeUpstream().start(), FakeUpstream().start()
    yield discord, upstream, extractor
    for fake in (discord, upstream, extractor):
        fake.gate.release()
        fake.stop()


def environment(discord, upstream, extractor) -> dict[str, str]:
    """Everything pointed at the fakes: Ollama (embeddings, chat) and Discord at one, a provider, an
    extractor."""
    return {
        "ENGRAM_EMBEDDER": "ollama",
        "ENGRAM_OLLAMA_URL": discord.url,
        "ENGRAM_EMBEDDING_MODEL": "hash-a",
        "UPSTREAMS": json.dumps(
            [{"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": "sk-up"}]
        ),
        "MEMORY_WRITE_MODE": "llm",
        "EXTRACT_BASE_URL": extractor.url + "/v1",
        "EXTRACT_MODEL": "extractor",
        "EXTRACT_API_KEY": "sk-extract",
        "DISCORD_APPLICATION_ID": APP_ID,
        "DISCORD_PUBLIC_KEY": SIGNER.verify_key.encode().hex(),
        "DISCORD_BOT_TOKEN": TOKEN,
        "DISCORD_API_BASE": discord.url,
        "DISCORD_CHANNELS_DISALLOWED": C12,
        "OLLAMA_CHAT_MODEL": "chat",
        "DISCORD_BACKFILL_PAGES_PER_JOB": "1",
        "ENGRAM_CATCHUP_EVERY_S": "2",
    }


def interact(stack: Stack, body: dict) -> httpx.Response:
    raw = json.dumps(body).encode()
    ts = str(int(time.time()))
    sig = SIGNER.sign(ts.encode() + raw).signature.hex()
    return httpx.post(
        f"{stack.url}/discord/interactions",
        content=raw,
        headers={"X-Signature-Ed25519": sig, "X-Signature-Timestamp": ts, "content-type": "application/json"},
    )


def memory_command(sub: str, user: str, token: str) -> dict:
    return {
        "type": 2,
        "id": f"i-{time.time_ns()}",
        "token": token,
        "application_id": APP_ID,
        "guild_id": G1,
        "channel_id": C11,
        "member": {"user": {"id": user, "username": "u"}},
        "data": {"name": "memory", "options": [{"type": 1, "name": sub}]},
    }


def stored_messages(stack: Stack, user: str) -> set[str]:
    r = stack.api.get(f"/v1/bots/{APP_ID}/memories", params={"kind": "message", "userId": user, "limit": 500})
    return {m["sourceMessageId"] for m in r.json()["memories"]}


def crash_while_held(stack: Stack, fake, what: str) -> None:
    """Wait until the fake holds a request of the job, then kill -9 the stack and let the fake answer."""
    assert wait_until(lambda: fake.gate.held > 0, timeout_s=30), f"{what} never reached its dependency"
    stack.kill()
    fake.gate.release()


def test_acknowledged_writes_survive_kill_9_and_leave_no_orphans(launch, fakes):
    """A batch of 100 chat messages, kill -9 right after its 200: all 100 are there after the restart,
    once each; the client's retry stores nothing twice; the index has a point for each and no other."""
    stack = launch(environment(*fakes))
    batch = [
        {
            "id": f"m{i}",
            "text": f"message number {i} about the harbour",
            "userId": "u1",
            "threadId": "t1",
            "createdAt": f"2026-11-01T10:{i // 60:02d}:{i % 60:02d}Z",
        }
        for i in range(100)
    ]
    assert stack.api.post("/v1/bots/crash/messages", json={"messages": batch}).status_code in (200, 201)
    stack.kill()
    stack.start()
    listed = stack.api.get("/v1/bots/crash/memories", params={"kind": "message", "limit": 500}).json()[
        "memories"
    ]
    assert sorted(m["sourceMessageId"] for m in listed) == sorted(f"m{i}" for i in range(100))
    retry = stack.api.post("/v1/bots/crash/messages", json={"messages": batch}).json()
    assert retry["created"] == 0
    assert wait_until(lambda: stack.api.get("/v1/index").json()["last"] is not None)
    hits = stack.api.get(
        "/v1/bots/crash/memories", params={"kind": "message", "query": "harbour", "limit": 500}
    ).json()
    ids = [m["id"] for m in hits["memories"]]
    assert len(ids) == len(set(ids)) == 100


def test_an_extraction_in_flight_completes_after_kill_9(launch, fakes):
    discord, upstream, extractor = fakes
    stack = launch(environment(*fakes))
    extractor.gate.hold()
    turn = httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        timeout=30,
        headers={
            "Authorization": f"Bearer {PROXY_KEY}",
            "x-librechat-user-id": "alice",
            "x-librechat-conversation-id": "conv-1",
        },
        json={"model": "m", "messages": [{"role": "user", "content": "My home town is Porto."}]},
    )
    assert turn.status_code == 200
    crash_while_held(stack, extractor, "the extraction")
    stack.start()
    assert stack.replayed() >= 1

    def facts():
        return stack.api.get("/v1/bots/librechat/memories", params={"userId": "alice"}).json()["memories"]  # noqa: E731

    assert wait_until(lambda: any("Porto" in m["text"] for m in facts()), timeout_s=60)


def test_a_backfill_in_flight_completes_after_kill_9(launch, fakes):
    discord, _, _ = fakes
    stack = launch(environment(*fakes))
    discord.gate.hold()
    assert interact(stack, memory_command("remember", ALICE, "tok-remember")).json()["type"] == 5
    crash_while_held(stack, discord, "the remember job")
    stack.start()
    assert stack.replayed() >= 1
    expected = discord.expected_for(ALICE, {C11, T14, C21})
    assert wait_until(lambda: stored_messages(stack, ALICE) == expected, timeout_s=90)
    # the completion message follows the last stored page: it may still be on its way
    assert wait_until(
        lambda: any(
            "Backfill complete" in s.get("content", "")
            for s in discord.sent
            if s.get("token") == "tok-remember"
        ),
        timeout_s=30,
    )


def test_a_catch_up_in_flight_completes_after_kill_9(launch, fakes):
    discord, _, _ = fakes
    stack = launch(environment(*fakes))
    interact(stack, memory_command("remember", ALICE, "tok-remember"))
    expected = discord.expected_for(ALICE, {C11, T14, C21})
    assert wait_until(lambda: stored_messages(stack, ALICE) == expected, timeout_s=90)
    new = discord.add(C21, {"id": ALICE, "username": "alice"}, "A new message after the backfill.")
    discord.gate.hold()  # the next catch-up (every 2 s here) reads the channels and waits
    crash_while_held(stack, discord, "the catch-up")
    stack.start()
    assert wait_until(lambda: new["id"] in stored_messages(stack, ALICE), timeout_s=60)
    assert stored_messages(stack, ALICE) == expected | {new["id"]}


def test_a_reembed_in_flight_completes_after_kill_9(launch, fakes):
    discord, _, _ = fakes
    stack = launch(environment(*fakes))
    for i in range(30):
        assert (
            stack.api.post(
                "/v1/bots/re/memories", json={"text": f"fact {i}: the tide comes in at {i} o'clock"}
            ).status_code
            == 201
        )
    discord.gate.hold(after=1)  # the settings check's test embed goes through, the re-embed waits
    changed = stack.api.patch(
        "/v1/settings", json={"embedder": "remote", "embeddingProvider": "ollama", "embeddingModel": "hash-b"}
    )
    assert changed.status_code == 200, changed.text
    crash_while_held(stack, discord, "the re-embed")
    stack.start()
    assert stack.replayed() >= 1

    def done():
        p = stack.api.get("/v1/settings/embedding").json()
        return p["model"] == "hash-b" and p["memoriesWithVectors"] == p["memories"] == 30

    assert wait_until(done, timeout_s=60), stack.api.get("/v1/settings/embedding").json()


def test_an_index_rebuild_in_flight_completes_after_kill_9(launch, fakes):
    discord, _, _ = fakes
    stack = launch(environment(*fakes))
    for i in range(10):
        stack.api.post("/v1/bots/rb/memories", json={"text": f"the lighthouse keeper's note number {i}"})
    discord.gate.hold()  # the rebuild embeds every record again
    assert stack.api.post("/v1/index/rebuild", params={"bot": "rb"}).status_code == 202
    crash_while_held(stack, discord, "the rebuild")
    stack.start()
    assert stack.replayed() >= 1

    # its parts (facts, messages, points) are jobs of their own, replayed as they were left
    def rebuilt():
        status = stack.api.get("/v1/index").json()
        return status["last"] == "rebuilding" and status["records"] == 10 and status["error"] is None

    assert wait_until(rebuilt, timeout_s=60), stack.api.get("/v1/index").json()


def test_a_write_never_waits_for_the_cold_local_model_and_its_vector_survives_kill_9(launch, fakes):
    """The shipped local model: a write right after start answers without it, and the index job that
    waits for the model is run again after a kill -9 during the load."""
    env = {k: v for k, v in environment(*fakes).items() if not k.startswith("ENGRAM_EMBEDD")}
    stack = launch({**env, "ENGRAM_EMBEDDER": "local"})
    started = time.perf_counter()
    added = stack.api.post("/v1/bots/cold/memories", json={"text": "Lena plays the oboe in an orchestra."})
    took = time.perf_counter() - started
    assert added.status_code == 201 and took < 3.0  # the model takes 3.5 s idle, over 5 s busy
    warm = stack.api.get("/healthz").json()["embedderWarm"]
    stack.kill()
    stack.start()
    if not warm:
        assert stack.replayed() >= 1  # the index job was waiting for the model when the stack died

    def by_meaning():
        hits = stack.api.get(
            "/v1/bots/cold/memories", params={"query": "musical instrument", "limit": 1}
        ).json()
        return hits["memories"] and hits["memories"][0]["id"] == added.json()["id"]

    assert wait_until(by_meaning, timeout_s=60)
    assert stack.api.get("/healthz").json()["embedderWarm"] is True
