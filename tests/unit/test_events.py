"""Every sample event in events/ is what its handler expects (and what `sam local invoke -e` feeds it):
API Gateway and Function URL events Mangum recognises, SQS records whose bodies are jobs on the queue
their kind belongs to, schedule inputs the rules send, Discord interactions that verify once signed."""

import json
from pathlib import Path

import pytest
from mangum.handlers import HTTPGateway

from engram.discord.interactions import Interaction
from engram.discord.verify import verify_request
from engram.jobs import QUEUE_OF_CLASS, job_class, parse_job
from infra.aws_template import load_template
from infra.poller import LambdaContext
from infra.sam_local import prepare

EVENTS = Path(__file__).resolve().parents[2] / "events"
ALL = sorted(p.name for p in EVENTS.glob("*.json"))
JOB_KINDS = {"index", "sweep", "extract", "discord", "discord-backfill", "reembed", "index-maintenance"}


def load(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def test_every_event_has_a_handler_and_every_function_an_event():
    prefixes = {
        "apigw-": "HttpFunction",
        "function-url-": "StreamingProxyFunction",
        "discord-": "InteractionsFunction",
        "schedule-": "ScheduleFunction",
        "sqs-": "WorkerFunction",
    }
    owners = {next(f for p, f in prefixes.items() if name.startswith(p)) for name in ALL}
    functions = {
        k for k, v in load_template()["Resources"].items() if v["Type"] == "AWS::Serverless::Function"
    }
    assert owners == functions


@pytest.mark.parametrize("name", [n for n in ALL if n.startswith(("apigw-", "function-url-"))])
def test_http_events_are_http_api_v2_events(name):
    event = load(name)
    assert HTTPGateway.infer(event, LambdaContext(), {"api_gateway_base_path": "/"})
    assert event["rawPath"] == event["requestContext"]["http"]["path"]
    if event.get("body"):
        json.loads(event["body"])


def test_sqs_events_carry_every_job_kind_on_its_own_queue():
    kinds = set()
    for name in (n for n in ALL if n.startswith("sqs-")):
        for record in load(name)["Records"]:
            job = parse_job(record["body"])
            kinds.add(job.kind)
            queue = record["eventSourceARN"].rsplit(":", 1)[1]
            assert queue.endswith(QUEUE_OF_CLASS[job_class(job)]), name
    assert kinds == JOB_KINDS


def test_schedule_events_are_what_the_rules_send():
    rules = [
        e["Properties"]["Input"]
        for e in load_template()["Resources"]["ScheduleFunction"]["Properties"]["Events"].values()
    ]
    assert sorted(
        json.dumps(load(n), separators=(",", ":")) for n in ALL if n.startswith("schedule-")
    ) == sorted(json.dumps(json.loads(r), separators=(",", ":")) for r in rules)


def test_discord_events_verify_once_signed_for_sam_local(tmp_path):
    (tmp_path / "api-key").write_text("local-admin")
    signed = prepare(tmp_path)
    env = json.loads((tmp_path / "env.json").read_text())["Parameters"]
    assert env["ENGRAM_API_KEY"] == "local-admin" and env["DISCORD_PUBLIC_KEY"]
    for name in (n for n in ALL if n.startswith("discord-")):
        event = json.loads((signed / name).read_text())
        Interaction.model_validate_json(event["body"])
        headers = event["headers"]
        assert verify_request(
            env["DISCORD_PUBLIC_KEY"],
            headers["x-signature-ed25519"],
            headers["x-signature-timestamp"],
            event["body"].encode(),
            max_age_s=300,
        ), name
        unsigned = load(name)["headers"]["x-signature-ed25519"]
        assert not verify_request(
            env["DISCORD_PUBLIC_KEY"],
            unsigned,
            headers["x-signature-timestamp"],
            event["body"].encode(),
            max_age_s=300,
        )


def test_sam_local_events_carry_this_data_dirs_keys_and_a_new_interaction_each_time(tmp_path):
    (tmp_path / "api-key").write_text("local-admin")
    (tmp_path / "proxy-key").write_text("local-proxy")
    first = json.loads((prepare(tmp_path) / "discord-memory-status.json").read_text())
    assert (
        json.loads((tmp_path / "events" / "apigw-http-add-memory.json").read_text())["headers"][
            "authorization"
        ]
        == "Bearer local-admin"
    )
    assert (
        json.loads((tmp_path / "events" / "apigw-http-proxy-turn.json").read_text())["headers"][
            "authorization"
        ]
        == "Bearer local-proxy"
    )
    second = json.loads((prepare(tmp_path) / "discord-memory-status.json").read_text())
    # the function refuses an interaction id it has handled (a replay): each run is a new one
    assert json.loads(first["body"])["id"] != json.loads(second["body"])["id"]
