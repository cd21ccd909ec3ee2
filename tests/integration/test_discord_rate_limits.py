"""Discord's rate limits as every worker shares them (topics/rate-limits.mdx): two worker processes, each
with engram's own limiter counting in one DynamoDB (dynalite, a real server), request as fast as they can
from the fake Discord: no second holds more than Discord's 50 global requests; and one channel's used-up
bucket delays no other channel, the bucket hash being one for the route and counted per channel."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from infra.aws_template import create_tables
from infra.local_dynamodb import LocalDynamoDB
from tests.fake_discord import C12, TOKEN, FakeDiscord

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"MemoriesTable": "rl-memories", "StateTable": "rl-state"}

WORKER = r"""
import sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/layers/engram"]
from engram.config import Settings
from engram.discord.limits import RateLimits, shared_global
from engram.discord.rest import DiscordClient
from engram.store import StateStore, bind_tables
from tests.fake_discord import C11, C12, C21, T14

endpoint, api, token, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
bind_tables(Settings(memories_table="rl-memories", state_table="rl-state", dynamodb_endpoint=endpoint))
state = StateStore()
limits = RateLimits(global_limit=shared_global(lambda w, k, e: state.limits.take_rate_slot("900", w, k, e)),
                    max_sleep_s=5)
client = DiscordClient(api, token, "900", limits=limits)
print("ready", flush=True)
sys.stdin.readline()  # both start together
for i in range(n):
    client.messages((C11, C12, T14, C21)[i % 4], limit=1)
"""


@pytest.fixture
def dynamodb(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    server = LocalDynamoDB(tmp_path / "dynamodb").start()
    create_tables(boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server.endpoint), TABLES)
    yield server.endpoint
    server.stop()


@pytest.fixture
def discord():
    fake = FakeDiscord().start()
    fake.rate_limited_once = set()
    yield fake
    fake.stop()


def test_two_workers_together_keep_under_fifty_a_second(dynamodb, discord, tmp_path):
    per_worker = 120
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(ROOT), dynamodb, discord.url, TOKEN, str(per_worker)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "PATH": "/usr/bin:/bin"},
        )
        for _ in range(2)
    ]
    for w in workers:
        assert w.stdout.readline().strip() == "ready"
    before = len(discord.arrivals)
    for w in workers:
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in workers:
        assert w.wait(timeout=60) == 0
    arrivals = discord.arrivals[before:]
    assert len(arrivals) == 2 * per_worker
    busiest = max(sum(1 for t in arrivals if start <= t < start + 1) for start in arrivals)
    assert busiest <= 50, busiest
    spread = arrivals[-1] - arrivals[0]
    assert spread >= 240 / 50 - 1  # paced by the shared count, not by luck
    assert discord.too_many == 0


def test_one_channels_used_up_bucket_delays_no_other_channel(discord):
    from engram.discord.limits import RateLimits
    from engram.discord.rest import DiscordClient, RateLimited

    busy, quiet = "1311111111111111111", "1322222222222222222"  # snowflakes, as Discord's ids are
    for channel in (busy, quiet):
        discord.history[channel] = []
        discord.add(channel, {"id": "1001", "username": "alice"}, "hello")
    discord.bucket_limit, discord.bucket_window_s = 2, 30.0
    client = DiscordClient(discord.url, TOKEN, "900", limits=RateLimits(max_sleep_s=0))
    client.messages(busy, limit=1)
    client.messages(busy, limit=1)  # the bucket says remaining 0 for this channel
    with pytest.raises(RateLimited):  # it waits (up front: no 429 earned) ...
        client.messages(busy, limit=1)
    started = time.monotonic()
    client.messages(quiet, limit=1)  # ... another channel of the same bucket hash goes at once
    client.messages(C12, limit=1)
    assert time.monotonic() - started < 1.0
    assert discord.too_many == 0
