"""Issue 32, part 1: Discord work bounded by the work, not by the installation. A remember looks through
the bot's servers a page a job (DISCORD_GUILDS_PER_JOB); a catch-up tick visits a page of the roster of
servers someone opted in is in (DISCORD_GUILDS_PER_TICK), in turn, SERVERS_PER_JOB servers a job queued
in SendMessageBatches, and reads no consent of anyone; a roster missing from an installation older than it
is built from its consents. Against the fake Discord (paging /users/@me/guilds as openapi.json says)
through the signed webhook and the real worker."""

from __future__ import annotations

from collections import Counter

import pytest

from engram.jobs import CatchUpJob
from engram.store import StateStore, keys
from engram.store.models import StateItem
from tests.fake_discord import ALICE, APP_ID, BOB, FakeDiscord
from tests.integration.test_discord import command, discord_stack, interact, memory_cmd, stored_ids
from tests.support import wait_until

SERVERS, HERS, PAGE = 25, 12, 10  # servers of the bot, how many Alice is in, the page size of both knobs


def server(i: int) -> str:
    return str(1_300_000_000_000_000_000 + i)


def channel_of(i: int) -> str:
    return str(1_310_000_000_000_000_000 + i)


@pytest.fixture
def discord():
    """The bot in SERVERS servers of one text channel each; Alice (and the bot) in the first HERS, Bob in
    all; one message of Alice's in each of hers."""
    fake = FakeDiscord()
    fake.guilds = [{"id": server(i), "name": f"server {i}"} for i in range(SERVERS)]
    fake.channels = {server(i): [{"id": channel_of(i), "type": 0, "name": "general"}] for i in range(SERVERS)}
    fake.threads = {server(i): [] for i in range(SERVERS)}
    everyone = str((1 << 10) | (1 << 11) | (1 << 16))
    fake.roles = {
        server(i): [{"id": server(i), "name": "@everyone", "permissions": everyone}] for i in range(SERVERS)
    }
    fake.members = {(server(i), u): [] for i in range(SERVERS) for u in (BOB, APP_ID)}
    fake.members |= {(server(i), ALICE): [] for i in range(HERS)}
    fake.history = {channel_of(i): [] for i in range(SERVERS)}
    for i in range(HERS):
        fake.add(channel_of(i), {"id": ALICE, "username": "alice"}, f"alice writes in server {i}")
    yield fake.start()
    fake.stop()


@pytest.fixture
def stack(tmp_path, local_embedder, discord):
    s = discord_stack(
        tmp_path, local_embedder, discord, DISCORD_GUILDS_PER_TICK=str(PAGE), DISCORD_GUILDS_PER_JOB=str(PAGE)
    )
    yield s
    s.stop()


def replies(discord, token):
    return [s["content"] for s in discord.sent if s.get("token") == token]


def asked(discord, since: int, what: str) -> list[str]:
    return [r for r in discord.requests[since:] if what in r]


def test_remember_looks_through_the_bots_servers_a_page_a_job(stack, discord):
    interact(stack, memory_cmd("remember", ALICE, token="tok-r") | {"guild_id": server(0)})
    assert wait_until(lambda: any("Backfill complete" in r for r in replies(discord, "tok-r")), timeout_s=90)
    assert replies(discord, "tok-r")[-1] == f"Backfill complete: {HERS} messages stored."
    assert "1 channels here, and from your other servers as I find them" in replies(discord, "tok-r")[0]
    assert len(stored_ids(stack, ALICE)) == HERS
    # the interaction's own server needs no membership request; the rest are asked a page (10) a job
    listings = asked(discord, 0, "GET /users/@me/guilds")
    assert len(listings) == -(-SERVERS // PAGE)  # 3 pages: 10, 10, 5
    members = asked(discord, 0, f"/members/{ALICE}")
    assert len(members) == SERVERS - 1 and not any(server(0) in r for r in members)
    state = StateStore()
    assert sorted(state.consents.get(APP_ID, ALICE).guilds or ()) == sorted(server(i) for i in range(HERS))
    assert sorted(state.roster.page(APP_ID, None, 100)) == sorted(server(i) for i in range(HERS))
    status = interact(stack, memory_cmd("status", ALICE)).json()["data"]["content"]
    assert "Backfill: complete." in status


def test_a_tick_visits_a_page_of_the_roster_in_turn_in_batched_jobs_and_reads_no_consent(
    stack, discord, monkeypatch
):
    interact(stack, memory_cmd("remember", ALICE, token="tok-r") | {"guild_id": server(0)})
    assert wait_until(lambda: any("Backfill complete" in r for r in replies(discord, "tok-r")), timeout_s=90)
    stack.settle()
    stack.engine.queue.send(CatchUpJob())  # the bot's first: builds the roster (one query)
    stack.settle()
    batches: list[int] = []
    send_batch = stack.sqs.send_message_batch

    def counted(**kwargs):
        batches.append(len(kwargs["Entries"]))
        return send_batch(**kwargs)

    monkeypatch.setattr(stack.sqs, "send_message_batch", counted)
    from pynamodb.connection.base import Connection

    call, consent_reads = Connection._make_api_call, []

    def watched(connection, operation, kwargs):
        if operation in ("Query", "BatchGetItem", "GetItem") and "consent#" in str(kwargs):
            consent_reads.append((operation, kwargs.get("Limit")))
        return call(connection, operation, kwargs)

    visited: list[set[str]] = []
    monkeypatch.setattr(Connection, "_make_api_call", watched)
    for _ in range(2):
        since = len(discord.requests)
        stack.engine.queue.send(CatchUpJob())
        stack.settle()
        visited.append(
            {r.split("/")[2] for r in asked(discord, since, "/channels") if r.startswith("GET /guilds/")}
        )
    # a page of 10 servers a tick, the next tick on from there (round the roster's end): all 12 in two
    assert [len(v) for v in visited] == [PAGE, PAGE]
    assert visited[0] | visited[1] == {server(i) for i in range(HERS)}
    # each tick's ten servers are one job (SERVERS_PER_JOB a job), sent as a SendMessageBatch; nothing moved,
    # so no channel's job
    assert batches == [1, 1]
    # the tick asks only whether anyone consents (one item), never anyone's consent: nothing was new
    assert consent_reads and all(op == "Query" and limit == 1 for op, limit in consent_reads)


def test_a_roster_missing_from_an_older_installation_is_built_from_its_consents(stack, discord):
    """Consents given before the roster existed (with their servers, and older ones naming none): the
    first tick puts their servers in the roster (the latter: every server of the bot) and visits them."""
    StateItem(*keys.consent(APP_ID, ALICE), value=1, data={"consentedAt": 1, "guilds": [server(3)]}).save()
    StateItem(*keys.consent(APP_ID, BOB), value=1, data={"consentedAt": 1}).save()
    assert StateStore().roster.page(APP_ID, None, 100) == []
    since = len(discord.requests)
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    roster = StateStore().roster.page(APP_ID, None, 100)
    assert sorted(roster) == sorted(server(i) for i in range(SERVERS))  # Bob's names none: every server
    assert len(asked(discord, since, "GET /users/@me/guilds")) == 1  # every server, once, in one page
    assert StateStore().roster.mark(APP_ID).built is True
    visits = Counter(
        r.split("/")[2] for r in asked(discord, since, "/channels") if r.startswith("GET /guilds/")
    )
    assert len(visits) == PAGE and set(visits.values()) == {1}
    # consent is global: what Alice wrote in every server the tick went to is caught up
    hers = {discord.history[channel_of(i)][0]["id"] for i in range(HERS) if server(i) in visits}
    assert set(stored_ids(stack, ALICE)) == hers


def test_a_server_the_bot_left_leaves_the_roster(stack, discord):
    StateStore().consents.give(APP_ID, ALICE, 1, guilds=[server(1), server(2)])
    del discord.channels[server(2)]  # Discord: 404 Unknown Guild
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert StateStore().roster.page(APP_ID, None, 100) == [server(1)]


def test_an_ask_in_a_server_joined_after_opting_in_adds_it_to_the_roster(stack, discord):
    StateStore().consents.give(APP_ID, ALICE, 1, guilds=[server(1)])
    interact(
        stack,
        command(
            "ask",
            ALICE,
            guild=server(5),
            channel=channel_of(5),
            token="tok-a",
            options=[{"name": "prompt", "type": 3, "value": "what did I say?"}],
        ),
    )
    assert wait_until(lambda: server(5) in StateStore().roster.page(APP_ID, None, 100), timeout_s=60)
