"""SQS for the local stack: the calls engram and its poller make, over SQS's own JSON protocol (what boto3
speaks, `X-Amz-Target: AmazonSQS.<Action>`), with SQS's semantics — a received message is invisible for the
queue's (or the call's) visibility timeout and comes back if not deleted, its receive count rises, past the
redrive policy's maxReceiveCount it moves to the dead-letter queue, DelaySeconds holds a send back, long
polling waits up to 20 s, retention drops old messages.

`make run` used moto's server for this; moto is a test library (hundreds of services, Flask, and 60 MB),
and a newcomer's `make run` installs only what runs the stack. The journal beside it (queue_journal.py)
keeps messages across a crash, as before. Tests still use moto for AWS in-process (tests/integration)."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)
ACCOUNT = "000000000000"
REGION = "us-east-1"
MAX_WAIT_S = 20


class SqsError(Exception):
    """An SQS error: its shape name (what boto3 raises), the query code it maps from, the status."""

    def __init__(self, shape: str, message: str, query_code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.shape, self.message, self.status = shape, message, status
        self.query_code = query_code or f"AWS.SimpleQueueService.{shape}"


def _no_queue(name: str) -> SqsError:
    return SqsError(
        "QueueDoesNotExist",
        f"The specified queue {name} does not exist.",
        "AWS.SimpleQueueService.NonExistentQueue",
    )


def md5_of_attributes(attributes: dict[str, Any]) -> str:
    """SQS's digest of message attributes: each, by name, as length-prefixed name, type, a transport byte
    (1 string or number, 2 binary) and length-prefixed value."""
    digest = hashlib.md5()  # noqa: S324 - SQS's own checksum, not a security measure
    for name in sorted(attributes):
        value = attributes[name]
        kind = value["DataType"]
        digest.update(struct.pack(">I", len(name.encode())) + name.encode())
        digest.update(struct.pack(">I", len(kind.encode())) + kind.encode())
        if "BinaryValue" in value:
            raw = value["BinaryValue"]
            raw = raw if isinstance(raw, bytes) else base64.b64decode(raw)
            digest.update(b"\x02" + struct.pack(">I", len(raw)) + raw)
        else:
            text = str(value["StringValue"]).encode()
            digest.update(b"\x01" + struct.pack(">I", len(text)) + text)
    return digest.hexdigest()


@dataclass
class Message:
    message_id: str
    body: str
    attributes: dict[str, Any]
    sent_at: float
    visible_at: float
    receives: int = 0
    first_received_at: float | None = None
    receipt: str | None = None


@dataclass
class Queue:
    name: str
    attributes: dict[str, str]
    messages: list[Message] = field(default_factory=list)

    @property
    def arn(self) -> str:
        return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{self.name}"

    def number(self, name: str, default: int) -> int:
        return int(self.attributes.get(name, default))

    def counts(self, now: float) -> dict[str, str]:
        """SQS's three approximate counts: waiting, received and not yet back, delayed."""
        waiting = sum(m.visible_at <= now for m in self.messages)
        in_flight = sum(m.receives > 0 and m.visible_at > now for m in self.messages)
        delayed = sum(m.receives == 0 and m.visible_at > now for m in self.messages)
        return {
            "ApproximateNumberOfMessages": str(waiting),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
        }


class LocalSqs:
    """The queues and what each call does to them (no HTTP here)."""

    def __init__(self) -> None:
        self.queues: dict[str, Queue] = {}
        self.changed = threading.Condition()
        self.base_url = "http://127.0.0.1"

    def _queue(self, url_or_name: str) -> Queue:
        name = url_or_name.rstrip("/").rsplit("/", 1)[-1]
        queue = self.queues.get(name)
        if queue is None:
            raise _no_queue(name)
        return queue

    def url(self, name: str) -> str:
        return f"{self.base_url}/{ACCOUNT}/{name}"

    def CreateQueue(
        self, QueueName: str, Attributes: dict[str, str] | None = None, **_: Any
    ) -> dict[str, Any]:
        if QueueName not in self.queues:
            self.queues[QueueName] = Queue(QueueName, dict(Attributes or {}))
        return {"QueueUrl": self.url(QueueName)}

    def GetQueueUrl(self, QueueName: str, **_: Any) -> dict[str, Any]:
        self._queue(QueueName)
        return {"QueueUrl": self.url(QueueName)}

    def ListQueues(self, QueueNamePrefix: str = "", **_: Any) -> dict[str, Any]:
        return {"QueueUrls": [self.url(n) for n in sorted(self.queues) if n.startswith(QueueNamePrefix)]}

    def DeleteQueue(self, QueueUrl: str, **_: Any) -> dict[str, Any]:
        self.queues.pop(self._queue(QueueUrl).name, None)
        return {}

    def PurgeQueue(self, QueueUrl: str, **_: Any) -> dict[str, Any]:
        self._queue(QueueUrl).messages.clear()
        return {}

    def SetQueueAttributes(self, QueueUrl: str, Attributes: dict[str, str], **_: Any) -> dict[str, Any]:
        self._queue(QueueUrl).attributes.update(Attributes)
        return {}

    def GetQueueAttributes(
        self, QueueUrl: str, AttributeNames: list[str] | None = None, **_: Any
    ) -> dict[str, Any]:
        queue, now = self._queue(QueueUrl), time.time()
        self._expire(queue, now)
        every = {
            **queue.attributes,
            "QueueArn": queue.arn,
            "VisibilityTimeout": str(queue.number("VisibilityTimeout", 30)),
            **queue.counts(now),
        }

        names = AttributeNames or ["All"]
        return {"Attributes": every if "All" in names else {k: v for k, v in every.items() if k in names}}

    def _send(
        self, queue: Queue, body: str, delay_s: int | None, attributes: dict[str, Any] | None
    ) -> dict[str, Any]:
        if not body:
            raise SqsError(
                "InvalidParameterValue",
                "The request must contain the parameter MessageBody.",
                "InvalidParameterValue",
            )
        now = time.time()
        delay = queue.number("DelaySeconds", 0) if delay_s is None else int(delay_s)
        message = Message(str(uuid.uuid4()), body, dict(attributes or {}), now, now + delay)
        queue.messages.append(message)
        answer = {"MessageId": message.message_id, "MD5OfMessageBody": hashlib.md5(body.encode()).hexdigest()}  # noqa: S324
        if message.attributes:
            answer["MD5OfMessageAttributes"] = md5_of_attributes(message.attributes)
        return answer

    def SendMessage(
        self,
        QueueUrl: str,
        MessageBody: str,
        DelaySeconds: int | None = None,
        MessageAttributes: dict[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        answer = self._send(self._queue(QueueUrl), MessageBody, DelaySeconds, MessageAttributes)
        self._notify()
        return answer

    def SendMessageBatch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        done = []
        for entry in Entries:
            sent = self._send(
                queue, entry["MessageBody"], entry.get("DelaySeconds"), entry.get("MessageAttributes")
            )
            done.append({"Id": entry["Id"], **sent})
        self._notify()
        return {"Successful": done, "Failed": []}

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def _expire(self, queue: Queue, now: float) -> None:
        retention = queue.number("MessageRetentionPeriod", 345_600)
        queue.messages[:] = [m for m in queue.messages if m.sent_at > now - retention]

    def _dead_letter_target(self, queue: Queue) -> tuple[int, Queue] | None:
        policy = queue.attributes.get("RedrivePolicy")
        if not policy:
            return None
        redrive = json.loads(policy)
        target = self.queues.get(str(redrive["deadLetterTargetArn"]).rsplit(":", 1)[-1])
        return (int(redrive["maxReceiveCount"]), target) if target else None

    def _take(self, queue: Queue, count: int, visibility: int) -> list[Message]:
        now = time.time()
        self._expire(queue, now)
        redrive = self._dead_letter_target(queue)
        taken: list[Message] = []
        for message in list(queue.messages):
            if len(taken) >= count:
                break
            if message.visible_at > now:
                continue
            if redrive and message.receives >= redrive[0]:  # received maxReceiveCount times: to the DLQ
                queue.messages.remove(message)
                message.visible_at, message.receipt = now, None
                redrive[1].messages.append(message)
                continue
            message.receives += 1
            message.first_received_at = message.first_received_at or now
            message.visible_at = now + visibility
            message.receipt = f"{message.message_id}#{uuid.uuid4().hex}"
            taken.append(message)
        return taken

    def ReceiveMessage(  # noqa: PLR0913 - SQS's parameters, by their names
        self,
        QueueUrl: str,
        MaxNumberOfMessages: int = 1,
        WaitTimeSeconds: int = 0,
        VisibilityTimeout: int | None = None,
        AttributeNames: list[str] | None = None,
        MessageSystemAttributeNames: list[str] | None = None,
        MessageAttributeNames: list[str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        visibility = (
            queue.number("VisibilityTimeout", 30) if VisibilityTimeout is None else int(VisibilityTimeout)
        )
        deadline = time.monotonic() + min(int(WaitTimeSeconds or 0), MAX_WAIT_S)
        with self.changed:
            while True:
                taken = self._take(queue, max(1, min(int(MaxNumberOfMessages), 10)), visibility)
                left = deadline - time.monotonic()
                if taken or left <= 0:
                    break
                self.changed.wait(min(left, 0.5))  # a delayed message comes due without a notify
        system = set((AttributeNames or []) + (MessageSystemAttributeNames or []))
        wanted = set(MessageAttributeNames or [])
        return {"Messages": [self._shown(m, system, wanted) for m in taken]}

    @staticmethod
    def _shown(message: Message, system: set[str], wanted: set[str]) -> dict[str, Any]:
        every = {
            "SenderId": ACCOUNT,
            "SentTimestamp": str(int(message.sent_at * 1000)),
            "ApproximateReceiveCount": str(message.receives),
            "ApproximateFirstReceiveTimestamp": str(int((message.first_received_at or 0) * 1000)),
        }
        shown: dict[str, Any] = {
            "MessageId": message.message_id,
            "ReceiptHandle": message.receipt,
            "MD5OfBody": hashlib.md5(message.body.encode()).hexdigest(),  # noqa: S324
            "Body": message.body,
        }
        attributes = every if "All" in system else {k: v for k, v in every.items() if k in system}
        if attributes:
            shown["Attributes"] = attributes
        kept = {
            k: v for k, v in message.attributes.items() if "All" in wanted or ".*" in wanted or k in wanted
        }
        if kept:
            shown["MessageAttributes"] = kept
            shown["MD5OfMessageAttributes"] = md5_of_attributes(kept)
        return shown

    def _by_receipt(self, queue: Queue, receipt: str) -> Message | None:
        return next((m for m in queue.messages if m.receipt == receipt), None)

    def DeleteMessage(self, QueueUrl: str, ReceiptHandle: str, **_: Any) -> dict[str, Any]:
        queue = self._queue(QueueUrl)
        message = self._by_receipt(queue, ReceiptHandle)
        if message is not None:  # SQS deletes by a stale handle too, or answers as if it did
            queue.messages.remove(message)
        return {}

    def DeleteMessageBatch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        for entry in Entries:
            self.DeleteMessage(QueueUrl, entry["ReceiptHandle"])
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def ChangeMessageVisibility(
        self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int, **_: Any
    ) -> dict[str, Any]:
        message = self._by_receipt(self._queue(QueueUrl), ReceiptHandle)
        if message is None:
            raise SqsError("ReceiptHandleIsInvalid", f"The receipt handle {ReceiptHandle!r} is not valid.")
        message.visible_at = time.time() + int(VisibilityTimeout)
        self._notify()
        return {}

    def call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        operation = getattr(self, action, None) if action[:1].isupper() else None
        if operation is None:
            raise SqsError(
                "UnsupportedOperation",
                f"{action} is not supported by the local SQS",
                "AWS.SimpleQueueService.UnsupportedOperation",
            )
        with self.changed:  # one call at a time (ReceiveMessage's wait lets the lock go while it waits)
            return dict(operation(**params))


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        target = self.headers.get("x-amz-target", "")
        length = int(self.headers.get("content-length") or 0)
        try:
            params = json.loads(self.rfile.read(length) or b"{}")
            answer, status, headers = self.server.sqs.call(target.partition(".")[2], params), 200, {}
        except SqsError as exc:
            answer = {"__type": f"com.amazonaws.sqs#{exc.shape}", "message": exc.message}
            status, headers = exc.status, {"x-amzn-query-error": f"{exc.query_code};Sender"}
        except (TypeError, ValueError) as exc:
            answer = {"__type": "com.amazonaws.sqs#InvalidParameterValue", "message": str(exc)}
            status, headers = 400, {"x-amzn-query-error": "InvalidParameterValue;Sender"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/x-amz-json-1.0")
        self.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("sqs %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sqs: LocalSqs


class LocalSqsServer:
    """The local SQS on a port (0: a free one), served from a thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sqs = LocalSqs()
        self._server = _Server((host, port), _Handler)
        self._server.sqs = self.sqs
        self.port = self._server.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        self.sqs.base_url = self.endpoint
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-sqs", daemon=True)

    def start(self) -> LocalSqsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
