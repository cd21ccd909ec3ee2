"""Queues: a fan-out goes to SQS ten jobs a SendMessageBatch (issue 32), and an entry SQS fails is sent
again on its own, never lost (SQS answers a batch 200 with a `Failed` list: the API reference of
SendMessageBatch)."""

from __future__ import annotations

import boto3
from moto import mock_aws

from engram.jobs import DiscordJob, SqsQueue, parse_job


def test_many_jobs_go_ten_a_batch_and_every_one_arrives():
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="jobs")["QueueUrl"]
        calls = []
        sqs.meta.events.register("before-call.sqs.SendMessageBatch", lambda **kw: calls.append(1))
        jobs = [DiscordJob(action="catchup", guild=str(g)) for g in range(25)]
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
    SqsQueue(client, "url").send_many([DiscordJob(action="catchup", guild=g) for g in ("a", "b", "c")])
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
