"""Local SQS that survives a crash: moto's queues (real SQS semantics) with a journal beside them.

Every message the stack sends is written to a SQLite journal (WAL) before the send returns, and taken
out when a poller deletes it. After a crash the journal's messages are sent again, so every queued job
(index, extract, Discord backfill and catch-up, re-embed, index maintenance) runs after a restart.
Jobs are idempotent by their domain key, so a job that had run but was not yet deleted running
once more is harmless. A message received maxReceiveCount times comes back in the dead-letter queue."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,          -- queue name (URLs change with moto's port)
    message_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    receives INTEGER NOT NULL DEFAULT 0,
    sent_at REAL                  -- unix seconds: a dead-lettered row is kept only as long as the DLQ keeps
    it
)"""


def _queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


class QueueJournal:
    """The journal file: one row per message not yet deleted."""

    def __init__(self, path: Path):
        # WAL with synchronous=NORMAL: a committed row survives the process dying (not a power cut,
        # the same promise as the local DynamoDB)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # a deleted row's bytes are overwritten, not left in free pages (job bodies carry chat text)
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.execute(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(messages)")}
        if "sent_at" not in columns:  # a journal from before dead-lettered rows expired
            self._db.execute("ALTER TABLE messages ADD COLUMN sent_at REAL")
            self._db.execute("UPDATE messages SET sent_at = ?", (time.time(),))
        self._lock = threading.Lock()

    def add(self, queue_url: str, message_id: str, body: str) -> None:
        """Record a sent message."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO messages (queue, message_id, body, sent_at) VALUES (?, ?, ?, ?)",
                (_queue_name(queue_url), message_id, body, time.time()),
            )

    def expire(self, queue_name: str, retention_s: float, now: float | None = None) -> int:
        """Drop a queue's rows older than its retention (as SQS drops the messages); returns how many."""
        cutoff = (now or time.time()) - retention_s
        with self._lock:
            return self._db.execute(
                "DELETE FROM messages WHERE queue = ? AND sent_at < ?", (queue_name, cutoff)
            ).rowcount

    def forget_user(self, user: str, bot: str | None = None) -> int:
        """Drop every journaled job of a user (of this bot, or of any Discord job): after a forget they would
        be dropped when they ran, but their bodies (chat text, for extractions and /ask) must not stay on
        disk, least of all in a dead-letter queue for 14 days. Returns how many rows went."""
        with self._lock:
            rows = list(self._db.execute("SELECT seq, body FROM messages"))
            doomed = []
            for seq, body in rows:
                try:
                    job = json.loads(body)
                except ValueError:
                    continue
                if isinstance(job, dict) and job.get("user") == user and job.get("bot", bot) in (bot, None):
                    doomed.append((seq,))
            self._db.executemany("DELETE FROM messages WHERE seq = ?", doomed)
            self._scrub()
            return len(doomed)

    def _scrub(self) -> None:
        """Leave no copy of deleted rows on disk: the WAL still holds the frames that wrote them until it
        is checkpointed into the (securely deleted) file and truncated."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def received(self, message_ids: list[str]) -> None:
        """Count one more receive of these messages."""
        with self._lock:
            self._db.executemany(
                "UPDATE messages SET receives = receives + 1 WHERE message_id = ?",
                [(m,) for m in message_ids],
            )

    def remove(self, message_ids: list[str]) -> None:
        """Forget deleted messages."""
        with self._lock:
            self._db.executemany("DELETE FROM messages WHERE message_id = ?", [(m,) for m in message_ids])

    def pending(self) -> list[tuple[int, str, str, int]]:
        """(seq, queue name, body, receives) of every message not yet deleted, oldest first."""
        with self._lock:
            return list(self._db.execute("SELECT seq, queue, body, receives FROM messages ORDER BY seq"))

    def replace(self, seq: int, queue_url: str, message_id: str) -> None:
        """A message sent again (after a restart) has a new id, and possibly a new queue (its DLQ)."""
        with self._lock:
            self._db.execute(
                "UPDATE messages SET queue = ?, message_id = ? WHERE seq = ?",
                (_queue_name(queue_url), message_id, seq),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class JournaledSqs:
    """A boto3 SQS client whose sends, receives and deletes are journaled; everything else passes through."""

    def __init__(self, client, journal: QueueJournal):
        self._client = client
        self.journal = journal
        self._handles: dict[str, str] = {}  # receipt handle -> message id, for deletes
        self._latest: dict[str, str] = {}  # message id -> its newest receipt handle (older ones are void)
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._client, name)

    def send_message(self, **kwargs):
        response = self._client.send_message(**kwargs)
        self.journal.add(kwargs["QueueUrl"], response["MessageId"], kwargs["MessageBody"])
        return response

    def send_message_batch(self, **kwargs):
        response = self._client.send_message_batch(**kwargs)
        bodies = {e["Id"]: e["MessageBody"] for e in kwargs["Entries"]}
        for ok in response.get("Successful", []):
            self.journal.add(kwargs["QueueUrl"], ok["MessageId"], bodies[ok["Id"]])
        return response

    def receive_message(self, **kwargs):
        response = self._client.receive_message(**kwargs)
        messages = response.get("Messages", [])
        if messages:
            with self._lock:
                for m in messages:  # a message received again (a retry) voids its earlier handle
                    self._handles.pop(self._latest.get(m["MessageId"], ""), None)
                    self._handles[m["ReceiptHandle"]] = m["MessageId"]
                    self._latest[m["MessageId"]] = m["ReceiptHandle"]
            self.journal.received([m["MessageId"] for m in messages])
        return response

    def delete_message(self, **kwargs):
        response = self._client.delete_message(**kwargs)
        self._forget([kwargs["ReceiptHandle"]])
        return response

    def delete_message_batch(self, **kwargs):
        response = self._client.delete_message_batch(**kwargs)
        handles = {e["Id"]: e["ReceiptHandle"] for e in kwargs["Entries"]}
        self._forget([handles[ok["Id"]] for ok in response.get("Successful", [])])
        return response

    def _forget(self, handles: list[str]) -> None:
        with self._lock:
            ids = [self._handles.pop(h) for h in handles if h in self._handles]
            for message_id in ids:
                self._latest.pop(message_id, None)
        self.journal.remove(ids)

    def replay(self, queue_urls: dict[str, str]) -> int:
        """After a restart: send every journaled message again (to its dead-letter queue once it has been
        received maxReceiveCount times); returns how many. `queue_urls` maps queue names to URLs."""
        limits: dict[str, tuple[int, str] | None] = {}
        for name, url in queue_urls.items():
            attributes = self._client.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
            policy = attributes.get("Attributes", {}).get("RedrivePolicy")
            if policy:
                policy = json.loads(policy)
                dlq = _queue_name(policy["deadLetterTargetArn"].replace(":", "/"))
                limits[name] = (int(policy["maxReceiveCount"]), queue_urls[dlq])
        count = 0
        for seq, name, body, receives in self.journal.pending():
            if name not in queue_urls:  # a queue the template no longer has: nothing can run it
                continue
            target = queue_urls[name]
            limit = limits.get(name)
            if limit and receives >= limit[0]:
                target = limit[1]
            response = self._client.send_message(QueueUrl=target, MessageBody=body)
            self.journal.replace(seq, target, response["MessageId"])
            count += 1
        return count
