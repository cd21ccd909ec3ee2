"""The scale bench (issue 32, part 8): the Discord door at 100, 1,000 and 10,000 servers and 10, 1,000 and
10,000 opted-in users, against the fake Discord and the local stack (dynalite, the SQS journal, the
embedded index), one JSON object a line per configuration and phase:

    {"servers", "users", "phase", "discord_requests", "sqs_jobs", "read_units", "write_units",
     "longest_job_s", "most_requests_in_a_job", "stored"}

- `opt-in`: a new user's /memory remember and its whole backfill (they are in 5 servers, from the first);
- `opt-in again`: the same user's second remember (the cooldown set to 0): what a re-run reads;
- `quiet tick`: a catch-up tick when nothing was written;
- `busy tick`: a tick after 20 opted-in people each wrote one message in 20 channels.

Ids and counts, not content: each server has one text channel, empty but for the busy tick's messages and
the new user's five (`last_message_id` null: a quiet channel costs no read), so 10,000 servers fit on two
cores. The users' consents are written straight into the state table (each in three servers; the roster
of servers follows). Read units are DynamoDB's own (`ReturnConsumedCapacity: INDEXES` on every call);
`write_units` are the table's, as dynalite answers them, plus `index_write_units`, what each write costs in
the global secondary indexes by AWS's rules (tests/bench/index_units.py: dynalite bills no index).
`longest_job_s` is measured here, against a fake that answers in a millisecond: `most_requests_in_a_job`
/ 50 is the floor Discord's 50 requests a second puts on a job's time.

`python tests/bench/scale.py [--servers 100,1000,10000] [--users 10,1000,10000]` (`make bench-scale`)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERS, BUSY, SERVERS_EACH = 5, 20, 3
APP = "900"
NEWCOMER = "7000000000000000000"
READS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"}
ITEM_CALLS = READS | WRITES


def server(i: int) -> str:
    return str(1_300_000_000_000_000_000 + i)


def channel_of(i: int) -> str:
    return str(1_310_000_000_000_000_000 + i)


def user(i: int) -> str:
    return str(1_400_000_000_000_000_000 + i)


class Meter:
    """Counts, while active: DynamoDB capacity units (asked for on every call pynamodb makes), SQS jobs
    sent, the fake Discord's requests, and each job's time and requests."""

    def __init__(self, stack, fake):
        from pynamodb.connection.base import Connection

        from engram.store.models import MemoryRecord, StateItem
        from engram.worker import Worker
        from tests.bench.index_units import IndexWrites

        self.read_units = self.write_units = self.index_write_units = 0.0
        self.key_writes: Counter = Counter()
        self.tables = {"records": MemoryRecord.Meta.table_name, "state": StateItem.Meta.table_name}
        tables = {"MemoriesTable": self.tables["records"], "StateTable": self.tables["state"]}
        indexes = IndexWrites(stack.dynamodb, tables)
        self.jobs = 0
        self.longest_s, self.most_requests, self.longest = 0.0, 0, ""
        self.fake, self.asked = fake, len(fake.requests)
        self._patches = []
        meter = self

        def counted(connection, operation, kwargs):
            if operation in ITEM_CALLS:
                kwargs = {**kwargs, "ReturnConsumedCapacity": "INDEXES"}
            written = indexes.keys_written(operation, kwargs) if operation in WRITES else []
            for table, key in written:  # item writes per partition key (a key takes ~1,000 units a second)
                meter.key_writes[(table, next(iter(key.values()))["S"])] += 1
            before = indexes.read(written)
            try:
                answer = original_call(connection, operation, kwargs)
            finally:  # a refused conditional write changes nothing: the items read again say so
                meter.index_write_units += indexes.units(written, before)
            consumed = answer.get("ConsumedCapacity") if isinstance(answer, dict) else None
            for c in consumed if isinstance(consumed, list) else [consumed] if consumed else []:
                units = float(c.get("CapacityUnits") or 0)
                if operation in READS:
                    meter.read_units += units
                else:
                    meter.write_units += units
            return answer

        original_call = Connection._make_api_call
        Connection._make_api_call = counted
        self._patches.append((Connection, "_make_api_call", original_call))

        original_run = Worker.run

        def timed(self, job, context=None):
            before, start = len(fake.requests), time.perf_counter()
            try:
                return original_run(self, job, context)
            finally:
                took = time.perf_counter() - start
                if took > meter.longest_s:
                    meter.longest_s, meter.longest = took, f"{job.kind} {getattr(job, 'action', '')}".strip()
                meter.most_requests = max(meter.most_requests, len(fake.requests) - before)

        Worker.run = timed
        self._patches.append((Worker, "run", original_run))
        sqs = stack.sqs
        send, send_batch = sqs.send_message, sqs.send_message_batch

        def one(**kwargs):
            meter.jobs += 1
            return send(**kwargs)

        def many(**kwargs):
            meter.jobs += len(kwargs["Entries"])
            return send_batch(**kwargs)

        sqs.send_message, sqs.send_message_batch = one, many
        self._sqs = (sqs, send, send_batch)

    def close(self) -> dict:
        for owner, name, value in self._patches:
            setattr(owner, name, value)
        sqs, send, send_batch = self._sqs
        sqs.send_message, sqs.send_message_batch = send, send_batch
        return {
            "discord_requests": len(self.fake.requests) - self.asked,
            # what Discord counts toward its 10,000 invalid requests per 10 minutes (401, 403, 429), and the
            # 404s (an opt-in's Unknown Member answers), which it does not count
            "invalid_requests": sum(1 for s in self.fake.statuses[self.asked :] if s in (401, 403, 429)),
            "not_found": sum(1 for s in self.fake.statuses[self.asked :] if s == 404),
            "sqs_jobs": self.jobs,
            "read_units": round(self.read_units, 1),
            "write_units": round(self.write_units + self.index_write_units, 1),
            "index_write_units": round(self.index_write_units, 1),
            **self._busiest_keys(),
            "longest_job_s": round(self.longest_s, 2),
            "longest_job": self.longest,
            "most_requests_in_a_job": self.most_requests,
        }

    def _busiest_keys(self) -> dict:
        """The partition key of each table that took the most item writes, and how many."""
        out = {}
        for label, table in self.tables.items():
            counts = {k: n for (t, k), n in self.key_writes.items() if t == table}
            if counts:
                key = max(counts, key=lambda k: counts[k])
                out[f"busiest_{label}_key"], out[f"busiest_{label}_key_writes"] = key, counts[key]
        return out


def world(servers: int):
    """The fake Discord: `servers` servers of one empty text channel; the bot and everyone in each (a
    membership request answers 200), the newcomer in the first HERS only."""
    from tests.fake_discord import FakeDiscord

    fake = FakeDiscord()
    fake.rate_limited_once = set()
    fake.check_spec = False  # counting requests: the spec is checked by the tests
    ids = [server(i) for i in range(servers)]
    fake.guilds = [{"id": g, "name": "s"} for g in ids]
    fake.channels = {g: [{"id": channel_of(i), "type": 0, "name": "general"}] for i, g in enumerate(ids)}
    fake.threads = {g: [] for g in ids}
    everyone = str((1 << 10) | (1 << 11) | (1 << 16))
    fake.roles = {g: [{"id": g, "name": "@everyone", "permissions": everyone}] for g in ids}
    fake.history = {channel_of(i): [] for i in range(servers)}
    fake.members = _Members(servers)
    for i in range(HERS):
        fake.add(channel_of(i), {"id": NEWCOMER, "username": "newcomer"}, f"hello from server {i}")
    return fake.start()


class _Members(dict):
    """(guild, user) -> roles, without a dict of every pair: the newcomer is in the first HERS servers,
    everyone else (the bot included) in all."""

    def __init__(self, servers: int):
        super().__init__()
        self.first = {server(i) for i in range(HERS)}

    def __contains__(self, key) -> bool:
        guild, who = key
        return who != NEWCOMER or guild in self.first

    def __getitem__(self, key):
        if key not in self:
            raise KeyError(key)
        return []

    def get(self, key, default=None):
        return [] if key in self else default


def consents(servers: int, users: int) -> None:
    """`users` opted in, each in SERVERS_EACH servers spread over all of them (the roster follows)."""
    from engram.store import StateStore

    state = StateStore()
    for i in range(users):
        spread = sorted({server((i * 7919 + k * 104_729) % servers) for k in range(SERVERS_EACH)})
        state.consents.give(APP, user(i), 1, guilds=spread)


def settle(stack) -> None:
    """Run every queued job, the delayed ones too (the cost bench's own)."""
    from tests.bench.discord_costs import settle as run_every_job

    run_every_job(stack)


def tick(stack) -> None:
    from engram.jobs import CatchUpJob

    stack.engine.queue.send(CatchUpJob())
    settle(stack)


def configuration(servers: int, users: int) -> list[dict]:
    """The three phases at one size."""
    from nacl.signing import SigningKey

    from engram.config.discord import DiscordSettings
    from engram.discord.rest import RateLimits
    from engram.jobs import RememberJob
    from engram.store import StateStore, now_ms
    from infra.local_stack import LocalStack
    from tests.fake_discord import TOKEN
    from tests.support import HashEmbedder

    RateLimits.GLOBAL_PER_SECOND = 100_000  # counting requests, not pacing them
    fake = world(servers)
    settings = DiscordSettings(
        DISCORD_APPLICATION_ID=APP,
        DISCORD_PUBLIC_KEY=SigningKey.generate().verify_key.encode().hex(),
        DISCORD_BOT_TOKEN=TOKEN,
        DISCORD_API_BASE=fake.url,
        DISCORD_REMEMBER_COOLDOWN_S="0",
    )
    data_dir = Path(tempfile.mkdtemp(prefix="engram-scale-"))
    stack = LocalStack(  # no timers: the ticks and sweeps measured are the ones run here
        data_dir,
        port=0,
        api_key="k",
        embedder=HashEmbedder(),
        discord_settings=settings,
        poll=False,
        sweep_every_s=10**9,
        catchup_every_s=10**9,
    ).start()
    out = []
    try:
        consents(servers, users)

        def measure(phase: str, run) -> None:
            meter = Meter(stack, fake)
            try:
                run()
            finally:
                figures = meter.close()
            out.append({"servers": servers, "users": users, "phase": phase, **figures})

        def opt_in() -> None:
            stack.engine.queue.send(RememberJob(user=NEWCOMER, guild=server(0), issued_at=now_ms()))
            settle(stack)

        measure("opt-in", opt_in)
        measure("opt-in again", opt_in)  # the cooldown set to 0 here: what a second run reads
        while not StateStore().roster.mark(APP).built:  # an installation's first ticks build it
            tick(stack)
        tick(stack)  # every channel the newcomer wrote in is read once
        measure("quiet tick", lambda: tick(stack))
        # BUSY opted-in people each write one message, in servers the next tick visits
        mark = StateStore().roster.mark(APP)
        ahead = StateStore().roster.page(APP, mark.after, BUSY)
        ahead += StateStore().roster.page(APP, None, BUSY - len(ahead))
        writers = [user(i) for i in range(min(users, len(ahead)))]
        for n, who in enumerate(writers):
            i = int(ahead[n]) - int(server(0))
            fake.add(channel_of(i), {"id": who, "username": f"u{n}"}, f"news {n}", timestamp=_now())
        measure("busy tick", lambda: tick(stack))
        out[-1]["messages"] = len(writers)
        return out
    finally:
        stack.stop()
        fake.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def tenants(points: int, small: int = 1_000, queries: int = 200, dims: int = 384) -> list[dict]:
    """The embedded engine (qdrant-edge) with `points` points of one large bot and `small` of another: a
    filtered hybrid search's p50 / p95 for each (words and meaning, as a recall asks). Vectors are random
    unit vectors and each point has eight random words: the engine's work, not the model's. Loaded as one
    import and searched unoptimized (below): a floor for what a built graph gives the large tenant."""
    import statistics

    import numpy as np

    from engram.vectors import Fusion, IndexPoint, Query, Scope
    from engram.vectors.edge import EdgeIndex
    from engram.words import SparseVector

    rng = np.random.default_rng(7)
    path = Path(tempfile.mkdtemp(prefix="engram-tenants-"))
    index = EdgeIndex(path / "index")
    out = []
    try:
        index.ensure_dense("bench", dims)
        started, chunk = time.perf_counter(), 5_000
        for start in range(0, points + small, chunk):
            ids = range(start + 1, min(start + chunk, points + small) + 1)
            vectors = rng.standard_normal((len(ids), dims)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            words = rng.integers(0, 50_000, (len(ids), 8))
            # loaded as a bulk import would be: the engine's own optimize once at the end, not every 5,000
            index._writes_since_optimize = -(points + small)
            index.upsert(
                [
                    IndexPoint(
                        id=i,
                        payload={
                            "bot": "small" if i > points else "large",
                            "kind": "message",
                            "user": str(i % 997),
                        },
                        words=SparseVector(sorted({int(w) for w in words[n]}), [1.0] * len(set(words[n]))),
                        dense={"bench": vectors[n].tolist()},
                    )
                    for n, i in enumerate(ids)
                ]
            )
        # no optimize: building the HNSW graph of 1 M 384-d points takes hours on two cores (51,000 took
        # five minutes); an unoptimized segment answers by a filtered scan, the payload index narrowing it
        loaded_s = time.perf_counter() - started
        for bot, size in (("small", small), ("large", points)):
            times = []
            for _ in range(queries):
                query = rng.standard_normal(dims).astype(np.float32)
                query /= np.linalg.norm(query)
                words = sorted({int(w) for w in rng.integers(0, 50_000, 3)})
                begun = time.perf_counter()
                index.search(
                    Scope(bot=bot, kind="message"),
                    Query(SparseVector(words, [1.0] * len(words)), ("bench", query.tolist()), 10, Fusion()),
                )
                times.append((time.perf_counter() - begun) * 1000)
            times.sort()
            out.append(
                {
                    "phase": "filtered search",
                    "points": points + small,
                    "tenant_points": size,
                    "p50_ms": round(statistics.median(times), 2),
                    "p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
                    "load_s": round(loaded_s, 1),
                }
            )
        return out
    finally:
        index.close()
        shutil.rmtree(path, ignore_errors=True)


def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="100,1000,10000")
    parser.add_argument("--users", default="10,1000,10000")
    parser.add_argument("--points", type=int, default=1_000_000, help="the embedded engine's size (0: skip)")
    args = parser.parse_args()
    if args.points:
        for line in tenants(args.points):
            print(json.dumps(line), flush=True)
    for servers in [int(s) for s in args.servers.split(",")]:
        for users in [int(u) for u in args.users.split(",")]:
            for line in configuration(servers, users):
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    import logging
    import os

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # the figures alone on stdout
    logging.disable(logging.WARNING)
    sys.path.insert(0, str(ROOT))
    main()
