"""The worker function: typed jobs from real (moto) SQS, partial batch failures, DLQ after retries."""

import json

from engram.jobs import IndexJob, SweepJob, parse_job
from infra.poller import LambdaContext, SqsPoller, load_function_handler, sqs_event


def test_jobs_round_trip_through_their_json():
    assert parse_job(IndexJob(bot="b", ids=[1, 2]).model_dump_json()) == IndexJob(bot="b", ids=[1, 2])
    assert isinstance(parse_job('{"kind": "sweep"}'), SweepJob)


def test_one_bad_message_fails_alone(service, aws):
    memory, _ = service.add_fact("bot1", "The owner drinks tea.")
    handler = load_function_handler("worker")
    messages = [
        {
            "MessageId": "good",
            "ReceiptHandle": "r1",
            "Body": IndexJob(bot="bot1", ids=[memory.id]).model_dump_json(),
        },
        {"MessageId": "bad", "ReceiptHandle": "r2", "Body": json.dumps({"kind": "explode"})},
        {"MessageId": "sweep", "ReceiptHandle": "r3", "Body": SweepJob().model_dump_json()},
    ]
    result = handler(
        sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:t-jobs", "us-east-1"), LambdaContext()
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "bad"}]}


def test_index_job_for_a_deleted_record_is_a_no_op(service):
    memory, _ = service.add_fact("bot1", "The owner drinks tea.")
    service.remove("bot1", memory.id)
    assert service.indexer.fill_vectors("bot1", [memory.id]) == 0
    assert service.search("bot1", "tea") == []


def test_failed_messages_go_to_the_dead_letter_queue(service, aws):
    sqs = aws["sqs"]
    sqs.set_queue_attributes(QueueUrl=aws["queue_url"], Attributes={"VisibilityTimeout": "0"})
    sqs.send_message(QueueUrl=aws["queue_url"], MessageBody='{"kind": "explode"}')
    poller = SqsPoller(sqs, aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0)
    for _ in range(6):
        poller.poll_once()
    dlq = aws["dlq_url"]
    dead = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dead] == ['{"kind": "explode"}']


class ContextWithLittleTimeLeft(LambdaContext):
    def get_remaining_time_in_millis(self):
        return 10_000


def test_a_job_started_too_close_to_the_timeout_goes_back_on_the_queue(service, aws):
    handler = load_function_handler("worker")
    messages = [{"MessageId": "late", "ReceiptHandle": "r1", "Body": SweepJob().model_dump_json()}]
    result = handler(
        sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:t-jobs", "us-east-1"),
        ContextWithLittleTimeLeft(),
    )
    assert result == {
        "batchItemFailures": []
    }  # not a failure: requeued at once, not after the visibility timeout
    again = aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"]) for m in again] == [{"kind": "sweep"}]


def test_a_batch_that_fails_whole_is_reported_not_raised(service, aws):
    handler = load_function_handler("worker")
    messages = [
        {"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": '{"kind": "explode"}'} for i in range(3)
    ]
    result = handler(
        sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:t-jobs", "us-east-1"), LambdaContext()
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": f"m{i}"} for i in range(3)]}
