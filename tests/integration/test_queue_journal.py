"""The local queue's journal: what was sent and not deleted comes back after a restart, on its own queue
until it has been received maxReceiveCount times, then on the dead-letter queue."""

import boto3
from moto import mock_aws

from infra.aws_template import create_queues
from infra.queue_journal import JournaledSqs, QueueJournal


def _fresh_queues():
    sqs = boto3.client("sqs", region_name="us-east-1")
    urls = create_queues(sqs, "j")
    return sqs, urls, {u.rsplit("/", 1)[-1]: u for u in urls.values()}


def _bodies(sqs, url):
    return sorted(
        m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    )


def test_sent_and_not_deleted_comes_back_after_a_restart(tmp_path):
    with mock_aws():
        sqs, urls, _ = _fresh_queues()
        client = JournaledSqs(sqs, QueueJournal(tmp_path / "journal.sqlite"))
        client.send_message(QueueUrl=urls["JobsQueue"], MessageBody="done")
        client.send_message_batch(
            QueueUrl=urls["InteractiveQueue"],
            Entries=[{"Id": "1", "MessageBody": "a"}, {"Id": "2", "MessageBody": "b"}],
        )
        got = client.receive_message(QueueUrl=urls["JobsQueue"])["Messages"]
        client.delete_message(QueueUrl=urls["JobsQueue"], ReceiptHandle=got[0]["ReceiptHandle"])
        interactive = client.receive_message(QueueUrl=urls["InteractiveQueue"], MaxNumberOfMessages=10)[
            "Messages"
        ]
        first = [m for m in interactive if m["Body"] == "a"]
        client.delete_message_batch(
            QueueUrl=urls["InteractiveQueue"],
            Entries=[{"Id": "0", "ReceiptHandle": first[0]["ReceiptHandle"]}],
        )
        assert len(client.journal) == 1  # "b": received, never deleted (a crashed job)
    with mock_aws():  # the restart: moto's queues are empty again
        sqs, urls, by_name = _fresh_queues()
        client = JournaledSqs(sqs, QueueJournal(tmp_path / "journal.sqlite"))
        assert client.replay(by_name) == 1
        assert _bodies(sqs, urls["InteractiveQueue"]) == ["b"]
        assert _bodies(sqs, urls["JobsQueue"]) == []


def test_a_message_received_max_times_is_dead_lettered_on_replay(tmp_path):
    with mock_aws():
        sqs, urls, _ = _fresh_queues()
        client = JournaledSqs(sqs, QueueJournal(tmp_path / "journal.sqlite"))
        client.send_message(QueueUrl=urls["InteractiveQueue"], MessageBody="poison")
        client.send_message(QueueUrl=urls["JobsQueue"], MessageBody="retry me")
        for url in (urls["InteractiveQueue"], urls["JobsQueue"]):
            for _ in range(3):  # the interactive queue's maxReceiveCount; the jobs queue allows 5
                client.receive_message(QueueUrl=url, VisibilityTimeout=0)
    with mock_aws():
        sqs, urls, by_name = _fresh_queues()
        client = JournaledSqs(sqs, QueueJournal(tmp_path / "journal.sqlite"))
        assert client.replay(by_name) == 2
        assert _bodies(sqs, urls["JobsDeadLetterQueue"]) == ["poison"]
        assert _bodies(sqs, urls["JobsQueue"]) == ["retry me"]
