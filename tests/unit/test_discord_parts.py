"""The interactions function on the sample events in events/, signed with a real Ed25519 key; the
verifier; command registration; and that the webhook path stays lean."""

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from nacl.signing import SigningKey

from engram.discord.verify import verify_request
from infra.poller import LambdaContext, load_function_handler
from infra.register_commands import COMMANDS, register

ROOT = Path(__file__).resolve().parents[2]
SIGNER = SigningKey.generate()


def test_verify_request():
    body, ts = b'{"type":1}', str(int(time.time()))
    sig = SIGNER.sign(ts.encode() + body).signature.hex()
    key = SIGNER.verify_key.encode().hex()
    assert verify_request(key, sig, ts, body)
    assert not verify_request(key, sig, ts, body + b" ")
    assert not verify_request(key, sig, str(int(ts) + 1), body)
    assert not verify_request(key, "zz", ts, body) and not verify_request(key, None, ts, body)
    assert not verify_request(None, sig, ts, body) and not verify_request("nothex", sig, ts, body)
    assert not verify_request(key, sig, ts, body, now=int(ts) + 301)


@pytest.fixture
def interactions(aws, monkeypatch):
    monkeypatch.setenv("DISCORD_APPLICATION_ID", "900")
    monkeypatch.setenv("DISCORD_PUBLIC_KEY", SIGNER.verify_key.encode().hex())
    monkeypatch.setenv("ENGRAM_JOBS_QUEUE_URL", aws["queue_url"])
    monkeypatch.setenv("ENGRAM_MEMORIES_TABLE", "t-memories")
    monkeypatch.setenv("ENGRAM_STATE_TABLE", "t-state")
    from engram.config import get_settings
    from engram.discord.settings import get_discord_settings

    get_settings.cache_clear()
    get_discord_settings.cache_clear()
    yield load_function_handler("interactions")
    get_settings.cache_clear()
    get_discord_settings.cache_clear()


def signed_event(name):
    event = json.loads((ROOT / "events" / f"discord-{name}.json").read_text())
    ts = str(int(time.time()))
    event["headers"]["x-signature-timestamp"] = ts
    event["headers"]["x-signature-ed25519"] = SIGNER.sign(
        ts.encode() + event["body"].encode()
    ).signature.hex()
    return event


def test_interactions_function_on_the_sample_events(interactions, aws):
    assert json.loads(interactions(signed_event("ping"), LambdaContext())["body"]) == {"type": 1}
    forged = signed_event("ping")
    forged["headers"]["x-signature-ed25519"] = SigningKey.generate().sign(b"x").signature.hex()
    assert interactions(forged, LambdaContext())["statusCode"] == 401
    status = json.loads(interactions(signed_event("memory-status"), LambdaContext())["body"])
    assert (
        status["type"] == 4 and status["data"]["flags"] == 64 and "off for you" in status["data"]["content"]
    )
    assert json.loads(interactions(signed_event("memory-remember"), LambdaContext())["body"]) == {
        "type": 5,
        "data": {"flags": 64},
    }
    assert json.loads(interactions(signed_event("ask"), LambdaContext())["body"]) == {"type": 5}
    queued = [
        json.loads(m["Body"])
        for m in aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10)["Messages"]
    ]
    assert [(j["action"], j["user"], j["guild"]) for j in queued] == [
        ("remember", "1001", "g1"),
        ("ask", "1001", "g1"),
    ]
    assert (
        queued[1]["prompt"] == "What did we plant last spring?" and queued[1]["token"] == "interaction-token"
    )


def test_the_webhook_path_imports_no_model_and_no_vector_index():
    code = (
        "import sys, time; t = time.perf_counter(); sys.path.insert(0, 'functions/interactions');"
        "import app; print(round(time.perf_counter() - t, 3));"
        "heavy = ('torch', 'sentence_transformers', 'qdrant_client', 'qdrant_edge', 'fastapi');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "DISCORD_PUBLIC_KEY": "00" * 32}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[1] == "[]", out


def test_register_commands_puts_both_commands():
    seen = []

    def handle(request):
        seen.append(
            (request.method, request.url.path, request.headers["authorization"], json.loads(request.content))
        )
        return httpx.Response(200, json=json.loads(request.content))

    done = register(
        "900", "tok", "https://discord.test/api/v10", guild="g1", transport=httpx.MockTransport(handle)
    )
    assert [c["name"] for c in done] == ["memory", "ask", "Forget this message"]
    assert seen[0][:3] == ("PUT", "/api/v10/applications/900/guilds/g1/commands", "Bot tok")
    assert {o["name"] for o in COMMANDS[0]["options"]} == {"remember", "forget", "status", "export"}
    assert COMMANDS[1]["options"][0]["required"] is True
    # where each shows: /memory in a server and the bot's DM, /ask only in a server; installed to servers
    assert [(c["name"], c["type"], c["contexts"], c["integration_types"]) for c in COMMANDS] == [
        ("memory", 1, [0, 1], [0]),
        ("ask", 1, [0], [0]),
        ("Forget this message", 3, [0], [0]),
    ]


def test_long_answers_are_split_at_word_boundaries_within_discord_s_limit():
    from engram.discord.ask import split_message

    parts = split_message(" ".join(f"word{i}" for i in range(1000)))
    assert all(len(p) <= 2000 for p in parts) and len(parts) == 4
    assert " ".join(parts).split() == [f"word{i}" for i in range(1000)]
    assert split_message("short") == ["short"] and [len(p) for p in split_message("x" * 4100)] == [
        2000,
        2000,
        100,
    ]


def test_rate_limits_delay_instead_of_breaking_them():
    from engram.discord.rest import DiscordClient, RateLimited, RateLimits

    now = [100.0]
    limits = RateLimits(clock=lambda: now[0], max_sleep_s=0)
    calls = []

    def handle(request):
        calls.append(request.url.path)
        if request.url.path.endswith("/c9/messages") and len(calls) > 3:
            return httpx.Response(429, json={"retry_after": 2.5, "global": False})
        remaining = "0" if request.url.path.endswith("/c1/messages") else "5"
        return httpx.Response(
            200,
            json=[],
            headers={
                "x-ratelimit-bucket": "b-" + request.url.path.split("/")[-2],
                "x-ratelimit-remaining": remaining,
                "x-ratelimit-reset-after": "1.5",
            },
        )

    client = DiscordClient(
        "https://d.test/api/v10", "tok", "900", transport=httpx.MockTransport(handle), limits=limits
    )
    client.messages("c1")
    with pytest.raises(RateLimited) as limited:  # the bucket is used up: delay, don't ask
        client.messages("c1")
    assert limited.value.retry_after == pytest.approx(1.5) and len(calls) == 1
    now[0] += 2
    client.messages("c1")
    client.messages("c9")
    with pytest.raises(RateLimited) as told:  # Discord's own 429 carries retry_after
        client.messages("c9")
    assert told.value.retry_after == 2.5
    now[0] += 10
    for _ in range(RateLimits.GLOBAL_PER_SECOND):
        limits.before("GET", "/x")
    with pytest.raises(RateLimited) as global_limit:
        limits.before("GET", "/y")
    assert global_limit.value.is_global


def test_a_short_rate_limit_is_waited_out_in_the_job():
    """A job that lists a thousand channels would hit the global 50 a second and, delayed on the queue,
    start over and hit it again forever: waits under a second are slept instead."""
    from engram.discord.rest import RateLimited, RateLimits

    now, slept = [100.0], []

    def sleep(s):
        slept.append(s)
        now[0] += s

    limits = RateLimits(clock=lambda: now[0], sleep=sleep)
    for i in range(3 * RateLimits.GLOBAL_PER_SECOND):
        limits.before("GET", f"/channels/{i}")
    assert len(slept) == 2 and now[0] == pytest.approx(102.0)
    limits._exhausted_until["b"] = now[0] + 30
    limits._route_bucket["GET /long"] = "b"
    with pytest.raises(RateLimited):  # a long one still delays the job on the queue
        limits.before("GET", "/long")
