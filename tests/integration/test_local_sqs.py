"""The local stack's SQS (infra/local_sqs.py) through boto3, as engram and its poller call it: the template's
queues, sends with delays and attributes, visibility, receive counts and the redrive to the dead-letter
queue, long polling, batches, deletes and SQS's own errors."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest

from infra.aws_template import create_queues
from infra.local_sqs import LocalSqsServer, md5_of_attributes


@pytest.fixture
def sqs():
    server = LocalSqsServer().start()
    client = boto3.client(
        "sqs",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    yield client
    server.stop()


def test_the_template_s_queues_are_made_with_their_redrive_policies(sqs):
    urls = create_queues(sqs, "engram", visibility_s=1)
    jobs = sqs.get_queue_attributes(QueueUrl=urls["JobsQueue"], AttributeNames=["All"])["Attributes"]
    policy = json.loads(jobs["RedrivePolicy"])
    assert (
        policy["deadLetterTargetArn"].endswith(":engram-JobsDeadLetterQueue")
        and jobs["VisibilityTimeout"] == "1"
    )
    assert sqs.get_queue_url(QueueName="engram-JobsQueue")["QueueUrl"] == urls["JobsQueue"]


def test_a_message_comes_back_until_deleted_then_goes_to_the_dead_letter_queue(sqs):
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"})
    q = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "1", "RedrivePolicy": redrive})[
        "QueueUrl"
    ]
    sent = sqs.send_message(QueueUrl=q, MessageBody="job")
    counts = []
    for _ in range(2):
        got = sqs.receive_message(QueueUrl=q, WaitTimeSeconds=2, AttributeNames=["All"])["Messages"]
        assert [m["MessageId"] for m in got] == [sent["MessageId"]] and got[0]["Body"] == "job"
        counts.append(got[0]["Attributes"]["ApproximateReceiveCount"])
        assert sqs.receive_message(QueueUrl=q).get("Messages", []) == []  # invisible while held
    assert counts == ["1", "2"]
    time.sleep(1.1)
    assert sqs.receive_message(QueueUrl=q, WaitTimeSeconds=1).get("Messages", []) == []  # a third time: moved
    dead = sqs.receive_message(QueueUrl=dlq)["Messages"]
    assert [m["Body"] for m in dead] == ["job"]
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead[0]["ReceiptHandle"])
    attributes = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert (
        attributes["ApproximateNumberOfMessages"]
        == attributes["ApproximateNumberOfMessagesNotVisible"]
        == "0"
    )


def test_delays_visibility_changes_batches_and_long_polls(sqs):
    q = sqs.create_queue(QueueName="q2")["QueueUrl"]
    sqs.send_message(QueueUrl=q, MessageBody="later", DelaySeconds=1)
    counted = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert counted["Attributes"] == {"ApproximateNumberOfMessagesDelayed": "1"}
    assert sqs.receive_message(QueueUrl=q).get("Messages", []) == []
    started = time.monotonic()
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=q, WaitTimeSeconds=5)["Messages"]] == ["later"]
    assert 0.5 < time.monotonic() - started < 3  # the long poll ended when the delay did

    batch = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)]
    assert len(sqs.send_message_batch(QueueUrl=q, Entries=batch)["Successful"]) == 10
    got = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(f"m{i}" for i in range(10))
    sqs.change_message_visibility(QueueUrl=q, ReceiptHandle=got[0]["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=q)["Messages"]
    assert [m["Body"] for m in again] == [got[0]["Body"]]
    entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate([*got[1:], *again])]
    assert len(sqs.delete_message_batch(QueueUrl=q, Entries=entries)["Successful"]) == 10

    arrived: list[str] = []
    waiter = threading.Thread(
        target=lambda: arrived.extend(
            m["Body"] for m in sqs.receive_message(QueueUrl=q, WaitTimeSeconds=10).get("Messages", [])
        )
    )
    waiter.start()
    time.sleep(0.3)
    sqs.send_message(QueueUrl=q, MessageBody="woken")
    waiter.join(timeout=5)
    assert arrived == ["woken"]


def test_attributes_travel_with_their_checksum_and_errors_are_sqs_s(sqs):
    q = sqs.create_queue(QueueName="q3")["QueueUrl"]
    attributes = {"reason": {"DataType": "String", "StringValue": "boom"}}
    sent = sqs.send_message(QueueUrl=q, MessageBody="b", MessageAttributes=attributes)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attributes)
    got = sqs.receive_message(QueueUrl=q, MessageAttributeNames=["All"])["Messages"][0]
    assert (
        got["MessageAttributes"] == attributes
        and got["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    )
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName="nowhere")
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.change_message_visibility(QueueUrl=q, ReceiptHandle="nope", VisibilityTimeout=5)
