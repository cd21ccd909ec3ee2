"""The worker function: typed jobs from real (moto) SQS, partial batch failures, DLQ after retries."""

import json
import time

from engram.jobs import IndexJob, SweepJob, parse_job
from infra.poller import LambdaContext, SqsPoller, load_function_handler, sqs_event


def test_jobs_round_trip_through_their_json():
    assert parse_job(IndexJob(bot="b", ids=[1, 2]).model_dump_json()) == IndexJob(bot="b", ids=[1, 2])
    assert isinstance(parse_job('{"kind": "sweep"}'), SweepJob)


def test_one_bad_message_fails_alone(service, aws):
    memory, _ = service.add_fact("bot1", "The owner drinks tea.")
    handler = load_function_handler("worker")
    arn = aws["sqs"].get_queue_attributes(QueueUrl=aws["queue_url"], AttributeNames=["QueueArn"])
    messages = [
        {
            "MessageId": "good",
            "ReceiptHandle": "r1",
            "Body": IndexJob(bot="bot1", ids=[memory.id]).model_dump_json(),
        },
        {"MessageId": "bad", "ReceiptHandle": "r2", "Body": json.dumps({"kind": "explode"})},
        {"MessageId": "sweep", "ReceiptHandle": "r3", "Body": SweepJob().model_dump_json()},
    ]
    result = handler(sqs_event(messages, arn["Attributes"]["QueueArn"], "us-east-1"), LambdaContext())
    # the bad one is no job at all: it went to the dead-letter queue (below), and fails nothing
    assert result == {"batchItemFailures": []}
    dead = aws["sqs"].receive_message(QueueUrl=aws["dlq_url"], MessageAttributeNames=["All"])["Messages"]
    assert [m["Body"] for m in dead] == [json.dumps({"kind": "explode"})]


def test_index_job_for_a_deleted_record_is_a_no_op(service):
    memory, _ = service.add_fact("bot1", "The owner drinks tea.")
    service.remove("bot1", memory.id)
    assert service.indexer.fill_vectors("bot1", [memory.id]) == 0
    assert service.search("bot1", "tea") == []


def in_queue(sqs, url) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_a_message_that_is_no_job_goes_to_the_dead_letter_queue_at_once_with_why(service, aws):
    """Every try of it would fail the same way: five tries at the queue's 18-minute visibility were 90
    minutes before anyone could read it."""
    sqs = aws["sqs"]
    sqs.send_message(QueueUrl=aws["queue_url"], MessageBody='{"kind": "explode"}')
    poller = SqsPoller(sqs, aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0)
    assert poller.poll_once() == 1
    dlq = aws["dlq_url"]
    dead = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"])[
        "Messages"
    ]
    assert [m["Body"] for m in dead] == ['{"kind": "explode"}']
    assert dead[0]["MessageAttributes"]["reason"]["StringValue"].startswith("not a job")
    assert in_queue(sqs, aws["queue_url"]) == 0  # gone from the jobs queue, not waiting to be tried again


def test_a_failed_interactive_job_is_tried_again_within_seconds_and_bulk_work_after_minutes(
    service, engine, aws
):
    """A failure holds the job back as long as its class waits (engram.jobs.retry_after_s): an /ask that
    failed comes back 5 s later (not after the queue's 18-minute visibility), a bulk job 30 s later."""
    from aws_lambda_powertools.utilities.batch import process_partial_response

    from engram.jobs import AskJob, BackfillJob, retry_after_s
    from engram.worker import Worker, processor

    sqs = aws["sqs"]
    # wired without Discord's parts: every Discord job fails (a RuntimeError), as one would with Discord down
    worker = Worker(lambda: engine)

    def handler(event, context):
        return process_partial_response(
            event=event, record_handler=worker.handle, processor=processor, context=context
        )

    ask = AskJob(user="u1", guild="g1", channel="c1", token="t", prompt="what did we plan?")
    sqs.send_message(QueueUrl=aws["interactive_queue_url"], MessageBody=ask.model_dump_json())
    poller = SqsPoller(sqs, aws["interactive_queue_url"], handler, "us-east-1", wait_s=0)
    assert poller.poll_once() == 1  # failed
    assert poller.poll_once() == 0  # held back
    time.sleep(retry_after_s("interactive", 1) + 0.5)
    again = sqs.receive_message(QueueUrl=aws["interactive_queue_url"], AttributeNames=["All"])["Messages"]
    assert len(again) == 1 and again[0]["Attributes"]["ApproximateReceiveCount"] == "2"

    bulk = BackfillJob(user="u1", guild="g1", run="r1", channel="c1")
    sqs.send_message(QueueUrl=aws["queue_url"], MessageBody=bulk.model_dump_json())
    jobs = SqsPoller(sqs, aws["queue_url"], handler, "us-east-1", wait_s=0)
    assert jobs.poll_once() == 1 and retry_after_s("ingest", 1) == 30
    time.sleep(retry_after_s("interactive", 1) + 0.5)
    assert jobs.poll_once() == 0  # still held back where an /ask would be tried again


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


class ContextWithAMinuteLeft(LambdaContext):
    def get_remaining_time_in_millis(self):
        return 55_000


def test_a_stepped_job_needs_its_steps_time_left_and_a_short_one_does_not(service, aws):
    """Issue 46: a re-embed step runs its 30 s budget and the page it started just before, ~50 s; with a
    minute left in the batch it is put back on the queue for a fresh invocation, a sweep there is run."""
    from engram.jobs import ReembedJob
    from engram.worker import time_needed_ms

    step = ReembedJob(vector="dense-x", bot="b1", after_id=5, planned=1)
    assert time_needed_ms(step) > 55_000 > time_needed_ms(SweepJob())
    handler = load_function_handler("worker")
    messages = [
        {"MessageId": "step", "ReceiptHandle": "r1", "Body": step.model_dump_json()},
        {"MessageId": "sweep", "ReceiptHandle": "r2", "Body": SweepJob().model_dump_json()},
    ]
    result = handler(
        sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:t-jobs", "us-east-1"),
        ContextWithAMinuteLeft(),
    )
    assert result == {"batchItemFailures": []}
    again = aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["kind"] for m in again] == ["reembed"]


def test_a_batch_that_fails_whole_is_reported_not_raised(service, aws):
    handler = load_function_handler("worker")
    messages = [
        {"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": '{"kind": "explode"}'} for i in range(3)
    ]
    result = handler(
        sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:t-jobs", "us-east-1"), LambdaContext()
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": f"m{i}"} for i in range(3)]}
