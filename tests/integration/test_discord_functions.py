"""The interactions function on the sample events in events/, signed with a real Ed25519 key; the
verifier; command registration; and that the webhook path stays lean."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from infra.poller import LambdaContext, load_function_handler

ROOT = Path(__file__).resolve().parents[2]
SIGNER = SigningKey.generate()


@pytest.fixture
def interactions(aws, monkeypatch):
    monkeypatch.setenv("DISCORD_APPLICATION_ID", "900")
    monkeypatch.setenv("DISCORD_PUBLIC_KEY", SIGNER.verify_key.encode().hex())
    monkeypatch.setenv("ENGRAM_JOBS_QUEUE_URL", aws["queue_url"])
    monkeypatch.setenv("ENGRAM_MEMORIES_TABLE", "t-memories")
    monkeypatch.setenv("ENGRAM_STATE_TABLE", "t-state")
    from engram.config import get_discord_settings, get_settings

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
        ("remember", "1001", "1100000000000000001"),
        ("ask", "1001", "1100000000000000001"),
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
