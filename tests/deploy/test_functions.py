"""Every function of the template, run from the artifact `sam build` makes, in a fresh interpreter of
the runtime's Python, with the environment the template gives it, against its resources in moto; each
AWS call it makes must be granted by its role."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from engram.jobs import QUEUE_OF_CLASS
from tests.deploy import harness
from tests.deploy.conftest import DISALLOWED, KEY, PROXY_KEY, UPSTREAM_KEY
from tests.fake_discord import ALICE, C21

EVENTS = harness.ROOT / "events"


def event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def signed(deployment, e: dict) -> dict:
    """The sample interaction event with a fresh interaction id, signed now with the application's key
    (as Discord signs)."""
    payload = json.loads(e["body"])
    if "id" in payload:
        payload["id"] = f"{payload['id']}-{time.time_ns()}"
    e["body"] = json.dumps(payload)
    stamp = str(int(time.time()))
    signature = deployment.signer.sign(stamp.encode() + e["body"].encode()).signature.hex()
    e["headers"] = {**e["headers"], "x-signature-ed25519": signature, "x-signature-timestamp": stamp}
    return e


def body(answer: dict) -> dict:
    assert answer["error"] is None, answer["error"]
    return json.loads(answer["result"]["body"])


def assert_granted(deployment, logical: str) -> None:
    """Each AWS call the function made is allowed by its role (a missing permission fails here)."""
    fn = deployment.function(logical)
    calls = deployment.calls(logical)
    assert calls, f"{logical} made no AWS calls: the recorder is not seeing them"
    assert harness.denied(calls, fn.statements) == []


def test_interactions_function_starts_from_the_templates_environment(deployment):
    fn = deployment.function("InteractionsFunction")
    assert fn.environment["DISCORD_CHANNELS_DISALLOWED"] == DISALLOWED  # comma-separated, as documented
    process = deployment.start("InteractionsFunction")
    pong = process.invoke(signed(deployment, event("discord-ping.json")))
    assert pong["result"]["statusCode"] == 200 and body(pong) == {"type": 1}
    forged = signed(deployment, event("discord-ping.json"))
    forged["headers"]["x-signature-ed25519"] = "00" * 64
    assert process.invoke(forged)["result"]["statusCode"] == 401
    status = body(process.invoke(signed(deployment, event("discord-memory-status.json"))))
    assert "Long-term memory is off for you" in status["data"]["content"]
    deferred = body(process.invoke(signed(deployment, event("discord-memory-remember.json"))))
    assert deferred["type"] == 5
    queued = [json.loads(m["Body"]) for m in deployment.receive("InteractiveQueue")]
    assert [(j["kind"], j["action"]) for j in queued] == [("discord", "remember")]
    assert deployment.receive("JobsQueue") == []
    assert_granted(deployment, "InteractionsFunction")
    assert not any(
        c["service"] == "ssm" for c in deployment.calls("InteractionsFunction")
    )  # no secret it doesn't need


def keyed(e: dict) -> dict:
    e["headers"]["authorization"] = f"Bearer {KEY}"
    return e


def test_http_function_keeps_writes_and_searches_by_words_while_qdrant_is_down(deployment):
    deployment.qdrant.down = True  # down from before the cold start
    process = deployment.start("HttpFunction")
    added = process.invoke(keyed(event("apigw-http-add-memory.json")))
    assert added["result"]["statusCode"] == 201, added
    listed = body(process.invoke(keyed(event("apigw-http-list-memories.json"))))
    assert [m["text"] for m in listed["memories"]] == ["The owner drinks green tea."]
    search = keyed(event("apigw-http-list-memories.json"))
    search["rawQueryString"] = "query=green+tea"
    found = body(process.invoke(search))
    assert [m["text"] for m in found["memories"]] == ["The owner drinks green tea."]
    assert body(process.invoke(harness.apigw_event("GET", "/healthz"))) == {
        "ok": True
    }  # strangers learn nothing
    health = process.invoke(
        harness.apigw_event("GET", "/healthz", headers={"authorization": f"Bearer {KEY}"})
    )
    assert health["result"]["statusCode"] == 200 and "Qdrant" in (body(health)["lastError"] or "")
    assert process.invoke(harness.apigw_event("GET", "/livez"))["result"]["statusCode"] == 200
    for path in ("/docs", "/docs/", "/redoc", "/openapi.json"):  # API docs are off on AWS
        assert process.invoke(harness.apigw_event("GET", path))["result"]["statusCode"] in (307, 404)
    # the vectors are owed: the record stays pending and a (delayed) index job went on the jobs queue
    records = deployment.dynamodb.scan(TableName=deployment.stack.physical["MemoriesTable"]["Ref"])["Items"]
    # a record's keys name its bot and, after "~", which of the bot's partition keys holds it
    demo = [r for r in records if r["bot"]["S"].split("~")[0] == "demo"]
    assert [r["pendingBot"]["S"].split("~")[0] for r in demo] == ["demo"]
    sends = [c for c in deployment.calls("HttpFunction") if c["operation"] == "SendMessage"]
    assert sends and sends[-1]["queue_url"] == deployment.queue_url("IndexQueue")
    assert_granted(deployment, "HttpFunction")


def test_once_qdrant_is_back_the_worker_fills_vectors_and_search_uses_them(deployment):
    deployment.qdrant.down = False
    table = deployment.stack.physical["MemoriesTable"]["Ref"]
    pending = [
        int(r["id"]["N"]) for r in deployment.dynamodb.scan(TableName=table)["Items"] if "pendingBot" in r
    ]
    assert pending
    # the index job the HTTP function queued (delayed 30 s on the queue), delivered now
    deployment.sqs.send_message(
        QueueUrl=deployment.queue_url("IndexQueue"),
        MessageBody=json.dumps({"kind": "index", "bot": "demo", "ids": pending}),
    )
    worker = deployment.start("WorkerFunction")
    answers = deployment.drain("IndexQueue", worker, 5)
    assert all(a["result"]["batchItemFailures"] == [] for a in answers)
    assert not [r for r in deployment.dynamodb.scan(TableName=table)["Items"] if "pendingBot" in r]
    assert deployment.qdrant.engine.count("engram").count >= 1
    process = deployment.start("HttpFunction")
    search = keyed(event("apigw-http-list-memories.json"))
    search["rawQueryString"] = "query=which+beverage"  # no shared word: found by meaning (the fake Ollama)
    found = body(process.invoke(search))["memories"]
    assert found and found[0]["text"] == "The owner drinks green tea." and found[0]["score"] > 0
    assert (
        "POST",
        "/collections/engram/points/query/batch",
    ) in deployment.qdrant.requests  # words and meaning, one trip
    assert_granted(deployment, "WorkerFunction")


def test_http_function_proxies_a_librechat_turn_and_queues_extraction(deployment):
    process = deployment.start("HttpFunction")
    request = {"model": "m", "messages": [{"role": "user", "content": "My favourite colour is teal."}]}
    headers = {
        "authorization": f"Bearer {PROXY_KEY}",
        "content-type": "application/json",
        "x-librechat-user-id": "alice",
        "x-librechat-conversation-id": "conv-1",
    }
    answer = process.invoke(
        harness.apigw_event("POST", "/oa/v1/chat/completions", json.dumps(request), headers)
    )
    assert answer["result"]["statusCode"] == 200, answer
    seen = deployment.upstream.chats()[-1]["headers"]
    assert seen["authorization"] == f"Bearer {UPSTREAM_KEY}" and PROXY_KEY not in json.dumps(seen)
    jobs = [json.loads(m["Body"]) for m in deployment.receive("ExtractQueue")]
    assert [(j["kind"], j["user_text"]) for j in jobs if j["kind"] == "extract"] == [
        ("extract", "My favourite colour is teal.")
    ]
    unkeyed = process.invoke(
        harness.apigw_event(
            "POST", "/oa/v1/chat/completions", json.dumps(request), {"content-type": "application/json"}
        )
    )
    assert unkeyed["result"]["statusCode"] == 401
    assert_granted(deployment, "HttpFunction")


def test_schedule_function_queues_what_its_rules_send(deployment):
    process = deployment.start("ScheduleFunction")
    rules = deployment.stack.resources("AWS::Events::Rule")
    inputs = sorted(json.loads(t["Input"])["job"] for r in rules.values() for t in r["Properties"]["Targets"])
    assert inputs == ["discord-catchup", "librechat-reconcile", "qdrant-snapshot", "sweep"]
    deployment.discard("JobsQueue")
    deployment.discard("IndexQueue")
    deployment.discard("MaintenanceQueue")
    for job in inputs:
        assert process.invoke({"job": job})["error"] is None
    # the reconcile only where LibreChat's MongoDB is (LibreChatMongoUri): none on this stack
    assert process.invoke({"job": "librechat-reconcile"})["result"] == {"queued": None}
    with_mongo = deployment.start(
        "ScheduleFunction", LIBRECHAT_MONGO_URI_PARAMETER="/engram/test/librechat-mongo-uri"
    )
    assert with_mongo.invoke({"job": "librechat-reconcile"})["result"] == {"queued": "librechat-reconcile"}
    maintenance = [json.loads(m["Body"]) for m in deployment.receive("MaintenanceQueue")]
    # the snapshot only on a Qdrant server (this stack's QdrantUrl), the reconcile where MongoDB is
    assert sorted((m["kind"], m.get("action") or m.get("bot")) for m in maintenance) == [
        ("index-maintenance", "snapshot"),
        ("librechat-reconcile", "librechat"),
    ]
    # the catch-up on the jobs queue (ingest), the sweep on the index queue (engram.jobs.QUEUE_OF_CLASS)
    assert [json.loads(m["Body"])["kind"] for m in deployment.receive("JobsQueue")] == ["discord"]
    assert [json.loads(m["Body"])["kind"] for m in deployment.receive("IndexQueue")] == ["sweep"]
    assert_granted(deployment, "ScheduleFunction")


def test_worker_runs_discord_jobs_from_both_queues_and_starts_while_qdrant_is_down(deployment):
    """remember -> backfill of every readable channel but the disallowed ones -> one final message; the
    catch-up fans out per channel; the index jobs wait for Qdrant without dead-lettering anything."""
    deployment.qdrant.down = True
    discord = deployment.discord
    deployment.discard("JobsQueue")
    interactions = deployment.start("InteractionsFunction")
    interactions.invoke(signed(deployment, event("discord-memory-remember.json")))
    worker = deployment.start("WorkerFunction")
    batch = {
        e["Properties"]["Queue"]: e["Properties"]["BatchSize"]
        for e in deployment.function("WorkerFunction").properties.get("Events", {}).values()
    } or None
    sizes = {}
    for mapping in deployment.stack.resources("AWS::Lambda::EventSourceMapping").values():
        props = deployment.stack.resolve(mapping["Properties"])
        sizes[props["EventSourceArn"].rsplit(":", 1)[-1].removeprefix("fid-")] = props["BatchSize"]
    assert batch is None and set(sizes) == set(QUEUE_OF_CLASS.values())
    deployment.drain("InteractiveQueue", worker, sizes["InteractiveQueue"])
    answers = deployment.drain("JobsQueue", worker, sizes["JobsQueue"])
    assert discord.history_reads and not set(discord.history_reads) & set(DISALLOWED.split(","))
    finals = [s["content"] for s in discord.sent if "Backfill complete" in s.get("content", "")]
    errors = [line for line in worker.stderr.splitlines() if '"level":"ERROR"' in line.replace(" ", "")]
    assert len(finals) == 1, (discord.sent, [a["result"] for a in answers], errors[-5:])
    # catch-up from the schedule: one job per channel whose newest message moved since the backfill read it
    discord.add(C21, {"id": ALICE, "username": "alice"}, "a message after the backfill")
    deployment.sqs.send_message(
        QueueUrl=deployment.queue_url("JobsQueue"), MessageBody='{"kind":"discord","action":"catchup"}'
    )
    reads = len(discord.history_reads)
    deployment.drain("JobsQueue", worker, sizes["JobsQueue"])
    assert discord.history_reads[reads:] == [C21]  # the quiet channels cost no read
    dead = deployment.receive("JobsDeadLetterQueue")
    assert dead == []
    assert_granted(deployment, "WorkerFunction")
    for queue_arn in deployment.stack.event_source_queues(
        "WorkerFunction"
    ):  # what Lambda's poller does as the role
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"):
            assert harness.allowed(deployment.function("WorkerFunction").statements, action, queue_arn)
    messages = deployment.dynamodb.scan(TableName=deployment.stack.physical["MemoriesTable"]["Ref"])["Items"]
    assert any(m.get("userId", {}).get("S") == ALICE for m in messages)


def test_streaming_proxy_is_ready_without_its_dependencies_and_queues_extraction_before_the_reply_ends(
    deployment,
):
    fn = deployment.function("StreamingProxyFunction")
    assert fn.environment["AWS_LWA_INVOKE_MODE"] == "response_stream"
    process = deployment.start_web("StreamingProxyFunction")  # Qdrant is down: ready anyway
    deployment.discard("ExtractQueue")
    client = openai.OpenAI(
        base_url=f"{process.url}/oa/v1",
        api_key=PROXY_KEY,
        max_retries=0,
        default_headers={"x-librechat-user-id": "bob", "x-librechat-conversation-id": "conv-stream"},
    )
    text = "My dog is called Biscuit."
    chunks = list(
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jobs = [json.loads(m["Body"]) for m in deployment.receive("ExtractQueue")]
    assert [j["user_text"] for j in jobs if j["kind"] == "extract"] == [
        text
    ]  # queued before the stream ended
    no_key = openai.OpenAI(base_url=f"{process.url}/oa/v1", api_key="sk-someone-else", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        no_key.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert (
        httpx.get(f"{process.url}/oa/v1/models").status_code == 401
    )  # nothing under an upstream without the key
    assert httpx.get(f"{process.url}/docs").status_code != 200
    assert_granted(deployment, "StreamingProxyFunction")


SETTINGS_PROBE = """
from engram.config import Settings


def handler(event, context):
    s = Settings()
    d, p = s.discord, s.proxy
    return {"disallowed": sorted(d.channels_disallowed), "allow": sorted(d.fetch_allow_networks),
            "qdrant": s.qdrant_url, "embedder": s.embedder, "jobs": bool(s.jobs_queue_url),
            "interactive": bool(s.interactive_queue_url), "upstreams": [u.name for u in p.upstreams],
            "chat_model": d.chat_model, "vision": d.vision_model, "mongo": p.mongo_uri}
"""
FUNCTIONS = [
    "HttpFunction",
    "InteractionsFunction",
    "StreamingProxyFunction",
    "WorkerFunction",
    "ScheduleFunction",
]


@pytest.mark.parametrize("logical", FUNCTIONS)
def test_every_settings_class_builds_from_each_functions_environment(deployment, logical):
    """As the template sets them (unused ones as ""), and with the README's other variables set as
    documented."""
    seen = deployment.probe(logical, SETTINGS_PROBE).invoke({})
    assert seen["error"] is None, seen["error"]
    assert seen["result"]["disallowed"] == sorted(DISALLOWED.split(","))
    assert seen["result"]["vision"] is None  # OllamaVisionModel "" means vision off, not a model named ""
    documented = {
        "LINK_FETCH_ALLOW_NETWORKS": "10.1.0.0/16, 192.168.7.0/24",
        "DISCORD_CHANNELS_DISALLOWED": "",
        "UPSTREAMS": '[{"name": "oa", "baseUrl": "https://api.openai.com"}]',
        "MEMORY_TOP_K": "7",
        "LIBRECHAT_MONGO_URI": "",
    }
    seen = deployment.probe(logical, SETTINGS_PROBE, **documented).invoke({})
    assert seen["error"] is None, seen["error"]
    assert seen["result"]["allow"] == ["10.1.0.0/16", "192.168.7.0/24"] and seen["result"]["disallowed"] == []
    assert seen["result"]["upstreams"] == ["oa"] and seen["result"]["mongo"] is None


def test_where_discord_is_not_set_up_its_catch_up_costs_nothing_and_fails_nothing(deployment):
    """The stack deployed without DiscordApplicationId and without the bot token parameter."""
    unset = {"DISCORD_APPLICATION_ID": "", "DISCORD_BOT_TOKEN_PARAMETER": "/engram/no-such-parameter"}
    schedule = deployment.start("ScheduleFunction", **unset)
    assert schedule.invoke({"job": "discord-catchup"})["result"] == {"queued": None}
    deployment.discard("JobsQueue")
    deployment.sqs.send_message(
        QueueUrl=deployment.queue_url("JobsQueue"), MessageBody='{"kind":"discord","action":"catchup"}'
    )
    worker = deployment.start("WorkerFunction", **unset)
    answers = deployment.drain("JobsQueue", worker, 5)
    assert answers and all(a["result"]["batchItemFailures"] == [] for a in answers)
