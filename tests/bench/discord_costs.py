"""What the Discord door costs at scale: Discord requests, SQS jobs and DynamoDB calls for one opt-in and
for catch-up ticks, with 50 servers of 40 channels each, against the fake Discord and the local stack."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

GUILDS, CHANNELS, MEMBER_OF = 50, 40, 10
READS = {"GetItem", "BatchGetItem", "Query", "Scan"}


class Meter:
    """Counts DynamoDB operations (pynamodb's one door to botocore) and queued jobs while active."""

    def __init__(self, queue):
        from pynamodb.connection.base import Connection

        self.dynamo: Counter = Counter()
        self.jobs = 0
        self._connection, self._call = Connection, Connection._make_api_call
        meter = self

        def counted(connection, operation_name, operation_kwargs):
            meter.dynamo[operation_name] += 1
            return meter._call(connection, operation_name, operation_kwargs)

        Connection._make_api_call = counted
        self._queue, self._send, self._send_many = queue, queue.send, queue.send_many

        def send(job, *args, **kwargs):
            meter.jobs += 1
            return meter._send(job, *args, **kwargs)

        def send_many(jobs):
            meter.jobs += len(jobs)
            return meter._send_many(jobs)

        queue.send, queue.send_many = send, send_many

    def close(self) -> None:
        self._connection._make_api_call = self._call
        self._queue.send, self._queue.send_many = self._send, self._send_many


def _world(guilds: int, member_of: int):
    """The fake Discord with `guilds` x CHANNELS text channels; the opting-in user is in `member_of` of
    them."""
    from tests.fake_discord import ALICE, BOB, FakeDiscord

    fake = FakeDiscord()
    fake.rate_limited_once = set()
    fake.check_spec = False  # counting requests: the spec is checked by the tests

    def guild(i: int) -> str:  # snowflakes, as Discord's ids are
        return str(1_100_000_000_000_000_000 + i)

    fake.guilds = [{"id": guild(i), "name": f"server {i}"} for i in range(guilds)]
    everyone = str((1 << 10) | (1 << 11) | (1 << 16))
    fake.channels, fake.threads, fake.history = {}, {}, {}
    fake.roles = {
        g["id"]: [{"id": g["id"], "name": "@everyone", "permissions": everyone}] for g in fake.guilds
    }
    fake.members = {
        (guild(i), u): [] for i in range(guilds) for u in ([ALICE, BOB] if i < member_of else [BOB])
    }
    alice, bob = {"id": ALICE, "username": "alice"}, {"id": BOB, "username": "bob"}
    for i in range(guilds):
        g = guild(i)
        fake.channels[g] = [
            {"id": str(1_110_000_000_000_000_000 + i * 1000 + j), "type": 0, "name": f"channel {j}"}
            for j in range(CHANNELS)
        ]
        fake.threads[g] = []
        for c in fake.channels[g]:
            fake.history[c["id"]] = []
            for k in range(3):
                fake.add(c["id"], bob, f"bob says {k}")
            if i < member_of:
                fake.add(c["id"], alice, f"alice in {c['id']}")
    return fake.start()


def settle(stack) -> None:
    """Run every queued job, delayed ones too (a 429, or the 50 requests a second, delays a job)."""
    import time

    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
    ]
    while True:
        if sum(p.drain() for p in stack.pollers):
            continue
        left = sum(
            int(v)
            for p in stack.pollers
            for v in stack.sqs.get_queue_attributes(QueueUrl=p.queue_url, AttributeNames=names)[
                "Attributes"
            ].values()
        )
        if not left:
            return
        time.sleep(0.25)


def bench_discord_costs(embedder, guilds: int = GUILDS, member_of: int = MEMBER_OF) -> dict:
    """Per opt-in and per tick: Discord requests, SQS jobs, DynamoDB reads and writes."""
    from nacl.signing import SigningKey

    from engram.config.discord import DiscordSettings
    from engram.discord.rest import RateLimits
    from engram.jobs import CatchUpJob, DiscordJob, RememberJob
    from engram.store import now_ms
    from infra.local_stack import LocalStack
    from tests.fake_discord import ALICE, APP_ID, TOKEN

    RateLimits.GLOBAL_PER_SECOND = (
        100_000  # counting requests, not pacing them: the fake answers in a millisecond
    )
    fake = _world(guilds, member_of)
    settings = DiscordSettings(
        DISCORD_APPLICATION_ID=APP_ID,
        DISCORD_PUBLIC_KEY=SigningKey.generate().verify_key.encode().hex(),
        DISCORD_BOT_TOKEN=TOKEN,
        DISCORD_API_BASE=fake.url,
    )
    data_dir = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    stack = LocalStack(
        data_dir, port=0, api_key="bench-key", embedder=embedder, discord_settings=settings, poll=False
    ).start()
    out: dict = {"world": f"{guilds} servers x {CHANNELS} channels; the user is in {member_of}"}
    try:

        def run(name: str, job: DiscordJob, before=None) -> None:
            meter, asked = Meter(stack.engine.queue), len(fake.requests)
            try:
                if before:
                    before()
                stack.engine.queue.send(job)
                settle(stack)
            finally:
                meter.close()
            reads = sum(n for op, n in meter.dynamo.items() if op in READS)
            out[name] = {
                "Discord requests": len(fake.requests) - asked,
                "SQS jobs": meter.jobs,
                "DynamoDB reads": reads,
                "DynamoDB writes": sum(meter.dynamo.values()) - reads,
            }

        run(
            "opt-in (remember + backfill)",
            RememberJob(user=ALICE, token="bench", issued_at=now_ms()),
        )
        run("catch-up tick, nothing new", CatchUpJob())

        # one channel of each of the user's servers gets a message from them, written just now
        def activity():
            for i in range(member_of):
                fake.add(
                    str(1_110_000_000_000_000_000 + i * 1000),
                    {"id": ALICE, "username": "alice"},
                    f"news {i}",
                    timestamp=datetime.now(UTC).isoformat(),
                )

        run(
            f"catch-up tick, {member_of} channels with a new message",
            CatchUpJob(),
            before=activity,
        )
        run("catch-up tick after that (windows re-read)", CatchUpJob())
        return out
    finally:
        stack.stop()
        fake.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.support import HashEmbedder

    print(json.dumps(bench_discord_costs(HashEmbedder()), indent=2))
