"""The Lambda handlers, fed the sample events in events/ (API Gateway HTTP API, SQS, schedule)."""

import json
from pathlib import Path

import pytest

from engram.store import now_ms
from infra.poller import LambdaContext, load_function_handler

EVENTS = Path(__file__).resolve().parents[2] / "events"


def event(name):
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def keyed(engine):
    engine.settings.api_key = "event-key"
    return engine


def test_http_function_adds_and_lists_through_mangum(keyed):
    handler = load_function_handler("http")
    added = handler(event("apigw-http-add-memory.json"), LambdaContext())
    assert added["statusCode"] == 201
    assert json.loads(added["body"])["text"] == "The owner drinks green tea."
    listed = handler(event("apigw-http-list-memories.json"), LambdaContext())
    assert listed["statusCode"] == 200
    assert [m["text"] for m in json.loads(listed["body"])["memories"]] == ["The owner drinks green tea."]


def test_http_function_refuses_a_wrong_key(keyed):
    handler = load_function_handler("http")
    e = event("apigw-http-list-memories.json")
    e["headers"]["authorization"] = "Bearer nope"
    assert handler(e, LambdaContext())["statusCode"] == 401


def test_worker_function_runs_the_sample_sweep(engine, aws):
    """The sample sweep event makes the worker queue an index job for a record left pending (Qdrant was
    down when it was written) and older than the sweep's grace minute, and for nothing else."""
    engine.service.index.down = True
    long_ago = now_ms() - 120_000
    stuck, _ = engine.service.add_fact("bot1", "The owner drinks green tea.", created_at=long_ago)
    engine.service.index.down = False
    fresh, _ = engine.service.add_fact("bot1", "The owner rides a bike.")  # indexed at once
    result = load_function_handler("worker")(event("sqs-sweep-job.json"), LambdaContext())
    assert result == {"batchItemFailures": []}
    # (the write's own retry job waits 30 s on the queue: what is visible now is the sweep's)
    got = aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10)
    jobs = [json.loads(m["Body"]) for m in got.get("Messages", [])]
    assert jobs == [{"kind": "index", "bot": "bot1", "ids": [stuck.id]}]
    assert fresh.id not in engine.service.records.pending.ids("bot1", 10)


def test_schedule_function_queues_a_sweep(aws, monkeypatch):
    monkeypatch.setenv("ENGRAM_JOBS_QUEUE_URL", aws["queue_url"])
    from engram.config import get_settings

    get_settings.cache_clear()
    try:
        assert load_function_handler("schedule")(event("schedule-sweep.json"), LambdaContext()) == {
            "queued": "sweep"
        }
    finally:
        get_settings.cache_clear()
    bodies = [
        m["Body"]
        for m in aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10)["Messages"]
    ]
    assert bodies == ['{"kind":"sweep"}']
