"""Feeds the worker handler with SQS-shaped events from a real (local) SQS queue, as Lambda's poller does."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger("engram.poller")
ROOT = Path(__file__).resolve().parent.parent


def load_function_handler(name: str):
    """`handler` from functions/<name>/app.py, imported by path as Lambda would."""
    path = ROOT / "functions" / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"engram_fn_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no function at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.handler


class LambdaContext:
    """What Lambda hands a handler as `context`, for running one outside Lambda (the local stack, tests)."""

    def __init__(self, function_name: str = "engram-local", timeout_s: int = 180, memory_mb: int = 512):
        import time
        import uuid

        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        import time

        return max(0, int((self._deadline - time.monotonic()) * 1000))


def sqs_event(messages: list[dict], queue_arn: str, region: str) -> dict:
    """An SQS event in the shape Lambda hands a function."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody") or hashlib.md5(m["Body"].encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


class SqsPoller:
    """Long-polls a queue, calls the handler per batch, deletes what succeeded; failures reappear
    after the visibility timeout and go to the DLQ after maxReceiveCount, as on AWS."""

    def __init__(self, sqs_client, queue_url: str, handler, region: str, wait_s: int = 1, on_batch=None):
        self.sqs = sqs_client
        self.queue_url = queue_url
        self.handler = handler
        self.region = region
        self.wait_s = wait_s
        self.on_batch = on_batch
        self.queue_arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self, wait_s: int | None = None) -> int:
        """Receive one batch and run it; returns how many messages it got."""
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=self.wait_s if wait_s is None else wait_s,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        if not messages:
            return 0
        try:
            result = (
                self.handler(sqs_event(messages, self.queue_arn, self.region), LambdaContext("engram-worker"))
                or {}
            )
        except Exception:  # a crashed invocation: the whole batch comes back later
            log.exception("worker invocation failed")
            return len(messages)
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        if self.on_batch:
            self.on_batch()
        return len(messages)

    def drain(self, max_batches: int = 1000) -> int:
        """Run batches until the queue answers empty; returns how many messages ran."""
        total = 0
        for _ in range(max_batches):
            n = self.poll_once(wait_s=0)
            if n == 0:
                break
            total += n
        return total

    def start(self) -> None:
        """Poll in a background thread until stop()."""

        def loop():
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except Exception:
                    log.exception("poll failed")
                    self._stop.wait(1)

        self._thread = threading.Thread(target=loop, name="sqs-poller", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Ask the loop to stop after its current poll (stop() waits for it): halting every poller first
        lets their last long polls end together, not one after another."""
        self._stop.set()

    def stop(self) -> None:
        """Stop polling (waits for the batch in hand)."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)


COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


def queues_quiet(sqs) -> bool:
    """Whether the stack's job queues hold nothing: none waiting, none in flight (a worker deletes a job when
    it has run), none delayed (a rate limit's retry)."""
    # imported here: a tier that loads the built handlers must not have the source tree's engram cached
    from engram.jobs import QUEUE_OF_CLASS

    for name in (f"engram-{q}" for q in dict.fromkeys(QUEUE_OF_CLASS.values())):
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(COUNTS))["Attributes"]
        if any(int(attributes.get(count, 0)) for count in COUNTS):
            return False
    return True


def settle(sqs, timeout_s: float = 60) -> None:
    """For tests: wait for what the stack reports instead of a fixed time: every job that was queued has
    run (the queues read empty twice, a poller's round apart), whatever it queued in turn included."""

    def quiet_twice() -> bool:
        if not queues_quiet(sqs):
            return False
        time.sleep(0.3)
        return queues_quiet(sqs)

    deadline = time.monotonic() + timeout_s
    while not quiet_twice():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job queues did not settle in {timeout_s} s")
        time.sleep(0.1)
