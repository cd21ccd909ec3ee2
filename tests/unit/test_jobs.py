"""Queues: a fan-out goes to SQS ten jobs a SendMessageBatch (issue 32), and an entry SQS fails is sent
again on its own, never lost (SQS answers a batch 200 with a `Failed` list: the API reference of
SendMessageBatch)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from engram.jobs import CatchUpJob, SqsQueue, parse_job


def test_many_jobs_go_ten_a_batch_and_every_one_arrives():
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        calls = []
        sqs.meta.events.register("before-call.sqs.SendMessageBatch", lambda **kw: calls.append(1))
        jobs = [CatchUpJob(guild=str(g)) for g in range(25)]
        SqsQueue(sqs, url).send_many(jobs)
        got = []
        while True:
            answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
            if not answer.get("Messages"):
                break
            got += [parse_job(m["Body"]).guild for m in answer["Messages"]]
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(answer["Messages"])
                ],
            )
        assert len(calls) == 3 and sorted(got, key=int) == [str(g) for g in range(25)]


class FailingSecond:
    """SQS as its reference says a partial failure looks: 200, the failed entry under `Failed`."""

    def __init__(self):
        self.single, self.batches = [], []

    def send_message_batch(self, QueueUrl, Entries):
        self.batches.append([e["Id"] for e in Entries])
        return {
            "Successful": [{"Id": e["Id"]} for e in Entries if e["Id"] != "1"],
            "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}],
        }

    def send_message(self, QueueUrl, MessageBody, DelaySeconds=0):
        self.single.append(parse_job(MessageBody).guild)


def test_an_entry_sqs_failed_is_sent_again_on_its_own():
    client = FailingSecond()
    SqsQueue(client, "url").send_many([CatchUpJob(guild=g) for g in ("a", "b", "c")])
    assert client.batches == [["0", "1", "2"]] and client.single == ["b"]


def test_a_step_begins_no_page_that_would_end_past_its_budget():
    """StepBudget, the one rule of every paged job step (rebuild, re-embed, spread): after a page, the
    next begins only while one as long as the longest so far would still end inside the budget."""
    from engram.store import StepBudget

    now = [100.0]
    budget = StepBudget(10.0, lambda: now[0])
    took = []
    for length in (2.0, 1.0, 3.0, 1.0, 1.0):
        budget.begin_page()
        now[0] += length
        took.append(length)
        if not budget.another_fits():
            break
    # after the third page (at 106) a page as long as the longest (3 s) ends at 109, inside 110: one more;
    # after the fourth (at 107) it would end at 110, not inside: the step ends
    assert took == [2.0, 1.0, 3.0, 1.0]
    zero = StepBudget(0.0, lambda: now[0])
    zero.begin_page()
    assert not zero.another_fits()  # a budget of nothing: one page a step


# ----- jobs by type ------------------------------------------------------------------------------------

DISCORD_BODIES = {
    # as the single DiscordJob model sent them before each action had its own: extra fields are ignored
    "remember": {"user": "u1", "guild": "g1", "token": "t", "guilds": [], "recheck": False},
    "forget": {"user": "u1", "token": "t", "private": False},
    "export": {"user": "u1", "token": "t"},
    "forget-message": {"user": "u1", "token": "t", "target_id": "m1"},
    "ask": {
        "user": "u1",
        "guild": "g1",
        "channel": "c1",
        "prompt": "what did we decide?",
        "app_permissions": 1,
    },
    "find-servers": {"user": "u1", "run": "r1", "guild": "g1", "after": "5"},
    "plan-backfill": {"user": "u1", "run": "r1", "guild": "g2"},
    "catchup": {"guilds": ["g1", "g2"], "budget": 3},
}


@pytest.mark.parametrize("action", sorted(DISCORD_BODIES))
def test_each_discord_action_parses_to_its_own_model_from_the_body_sqs_holds(action):
    from engram import jobs

    body = json.dumps({"kind": "discord", "action": action, "issued_at": 7, **DISCORD_BODIES[action]})
    job = parse_job(body)
    assert type(job) in jobs.DISCORD_JOBS and job.action == action and job.issued_at == 7
    assert parse_job(job.model_dump_json()) == job  # what it sends again reads back the same


@pytest.mark.parametrize(
    "action, missing",
    [("forget-message", "target_id"), ("ask", "prompt"), ("plan-backfill", "guild"), ("find-servers", "run")],
)
def test_a_discord_job_without_what_its_action_needs_is_refused_when_read(action, missing):
    from pydantic import ValidationError

    body = {k: v for k, v in DISCORD_BODIES[action].items() if k != missing}
    with pytest.raises(ValidationError):
        parse_job(json.dumps({"kind": "discord", "action": action, **body}))


def test_a_discord_job_of_an_unknown_action_is_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        parse_job(json.dumps({"kind": "discord", "action": "dance", "user": "u1"}))


def test_the_worker_has_a_handler_for_every_job_type_of_the_union():
    import typing

    from engram import jobs, worker

    assert set(typing.get_args(jobs.AnyJob)) == set(worker.HANDLERS)


def test_interactions_go_on_the_interactive_queue_and_the_rest_by_their_class():
    from engram.jobs import (
        AskJob,
        BackfillJob,
        CatchUpJob,
        ExtractJob,
        ForgetJob,
        IndexJob,
        IndexMaintenanceJob,
        PlanBackfillJob,
        RememberJob,
        job_class,
    )

    assert job_class(AskJob(user="u", prompt="p")) == "interactive"
    assert job_class(RememberJob(user="u")) == "interactive"
    assert job_class(ForgetJob(bot="b", user="u", at=1)) == "interactive"
    assert job_class(PlanBackfillJob(user="u", run="r", guild="g")) == "ingest"
    assert job_class(CatchUpJob()) == "ingest"
    assert job_class(BackfillJob(user="u", guild="g", channel="c", run="r")) == "ingest"
    assert job_class(ExtractJob(bot="b", user="u", conversation="c", user_text="t")) == "extract"
    assert job_class(IndexJob(bot="b", ids=[1])) == "index"
    assert job_class(IndexMaintenanceJob(action="rebuild")) == "maintenance"


def test_a_job_that_needs_a_server_it_was_not_given_says_which():
    from engram.jobs import CatchUpJob

    with pytest.raises(ValueError, match="catchup job without guild"):
        CatchUpJob(channel="c1").need("guild")
    assert CatchUpJob(guild="g1").need("guild") == "g1"


def test_a_failed_job_waits_seconds_where_someone_waits_and_minutes_for_bulk_work():
    from engram.jobs import retry_after_s

    assert [retry_after_s("interactive", n) for n in (0, 1, 2, 3, 4, 40)] == [5, 5, 10, 20, 40, 60]
    assert [retry_after_s("index", n) for n in (1, 2, 3, 4, 5, 6, 40)] == [30, 60, 120, 240, 480, 900, 900]
    # three tries of an interactive job (its queue's maxReceiveCount) are over within a minute
    assert sum(retry_after_s("interactive", n) for n in (1, 2)) < 60
