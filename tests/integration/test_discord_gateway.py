"""Capture through the gateway (issue 43), against a fake gateway written from Discord's gateway docs
(tests/fake_gateway.py: HELLO, IDENTIFY, READY, heartbeats, RESUME, RECONNECT, INVALID_SESSION, zlib-stream,
dispatches): the local stack's gateway thread (discord.py) forwards what it hears to the jobs queue and the
real worker applies it. The scheduled catch-up is an hour away, so only the gateway can make these pass."""

import time

import httpx
import pytest

from tests import fake_discord_shapes as shapes
from tests.fake_discord import ALICE, APP_ID, C11, C21, G1, G2, FakeDiscord
from tests.fake_gateway import FakeGateway
from tests.integration.conftest import KEY
from tests.integration.test_discord import discord_stack, interact, memory_cmd, stored_ids
from tests.support import wait_until

ALICE_USER = {"id": ALICE, "username": "alice", "global_name": "Alice", "bot": False}


@pytest.fixture(scope="module")
def discord():
    fake = FakeDiscord()
    fake.start()
    gateway = FakeGateway(fake).start()
    fake.gateway_url = gateway.url
    fake.gateway = gateway
    yield fake
    gateway.stop()
    fake.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, discord):
    s = discord_stack(
        tmp_path_factory.mktemp("engram"),
        local_embedder,
        discord,
        gateway=True,
        catchup_every_s=3600,
        DISCORD_LEFT_SERVER_GRACE_HOURS="0",
    )
    interact(s, memory_cmd("remember", ALICE, token="tok-remember"))
    assert wait_until(
        lambda: any(
            "Backfill complete" in m.get("content", "")
            for m in discord.sent
            if m.get("token") == "tok-remember"
        ),
        timeout_s=120,
    )
    assert wait_until(lambda: discord.gateway.identified == 1, timeout_s=30)
    yield s
    s.stop()


def said(discord, text: str, channel=C11, guild=G1) -> str:
    """A message alice writes now, as the gateway announces it (MESSAGE_CREATE carries guild_id)."""
    message = discord.add(
        channel, ALICE_USER, text, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    )
    discord.gateway.dispatch("MESSAGE_CREATE", {**shapes.message(message), "guild_id": guild})
    return message["id"]


def test_a_new_message_is_stored_within_five_seconds_and_a_deletion_leaves_within_five(stack, discord):
    gateway = discord.gateway
    assert gateway.compressed and all(gateway.compressed)  # zlib-stream, as discord.py asks for it
    assert wait_until(lambda: gateway.heartbeats > 0, timeout_s=10)
    started = time.monotonic()
    new = said(discord, "the gateway canary is marmalade")
    assert wait_until(lambda: new in stored_ids(stack, ALICE), timeout_s=5, every_s=0.1)
    stored_in = time.monotonic() - started
    discord.delete(new)
    started = time.monotonic()
    gateway.dispatch("MESSAGE_DELETE", {"id": new, "channel_id": C11, "guild_id": G1})
    assert wait_until(lambda: new not in stored_ids(stack, ALICE), timeout_s=5, every_s=0.1)
    print(f"stored in {stored_in:.2f} s, deleted in {time.monotonic() - started:.2f} s")


def test_an_edit_heard_on_the_gateway_changes_the_stored_text(stack, discord):
    new = said(discord, "the parcel locker is number 12")
    assert wait_until(lambda: new in stored_ids(stack, ALICE), timeout_s=5, every_s=0.1)
    edited = discord.edit(new, "the parcel locker is number 31")
    discord.gateway.dispatch("MESSAGE_UPDATE", {**shapes.message(edited), "guild_id": G1})
    service = stack.engine.service
    assert wait_until(lambda: service.by_source(APP_ID, new).text.endswith("31"), timeout_s=5, every_s=0.1)


def test_a_dropped_connection_resumes_without_losing_an_event(stack, discord):
    gateway = discord.gateway
    resumed = gateway.resumed
    gateway.drop()
    missed = said(discord, "said while the connection was down: heron")  # numbered, kept for the RESUME
    assert wait_until(lambda: gateway.resumed > resumed, timeout_s=30)
    assert wait_until(lambda: missed in stored_ids(stack, ALICE), timeout_s=10, every_s=0.1)
    assert gateway.identified == 1  # resumed, not a new session
    # op 7 RECONNECT: the same, asked for by Discord
    gateway.reconnect()
    assert wait_until(lambda: gateway.resumed > resumed + 1, timeout_s=30)
    after = said(discord, "said after a reconnect: kestrel")
    assert wait_until(lambda: after in stored_ids(stack, ALICE), timeout_s=10, every_s=0.1)


def test_an_invalid_session_identifies_anew_and_capture_goes_on(stack, discord):
    gateway = discord.gateway
    identified = gateway.identified
    gateway.invalidate()
    assert wait_until(lambda: gateway.identified > identified, timeout_s=30)
    new = said(discord, "said in a new session: lapwing")
    assert wait_until(lambda: new in stored_ids(stack, ALICE), timeout_s=10, every_s=0.1)


def test_words_of_someone_who_never_opted_in_are_not_forwarded(stack, discord):
    forwarded = stack.capture.forwarded
    message = discord.add(C11, {"id": "1009", "username": "dora", "bot": False}, "dora's words stay out")
    discord.gateway.dispatch("MESSAGE_CREATE", {**shapes.message(message), "guild_id": G1})
    marker = said(discord, "and alice's words go in")
    assert wait_until(lambda: marker in stored_ids(stack, ALICE), timeout_s=5, every_s=0.1)
    assert stack.capture.forwarded == forwarded + 1  # alice's only: dora's never left the gateway process


def test_a_guild_delete_removes_a_left_servers_memories_at_once(stack, discord):
    def in_beta() -> list[str]:
        r = httpx.get(
            f"{stack.url}/v1/bots/{APP_ID}/memories",
            params={"kind": "message", "serverId": G2, "limit": 500},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        return [m["text"] for m in r.json()["memories"]]

    assert in_beta()
    discord.guilds = [g for g in discord.guilds if g["id"] != G2]  # the bot was removed from Beta
    discord.gateway.dispatch("GUILD_DELETE", {"id": G2})
    assert wait_until(lambda: in_beta() == [], timeout_s=10, every_s=0.2)
    assert C21 and stored_ids(stack, ALICE)  # Alpha's stay


def test_a_gateway_message_keeps_its_authors_server_nickname_as_a_name_of_theirs(stack, discord):
    """MESSAGE_CREATE carries the author as a partial member of the server (topics/gateway-events.mdx,
    Message Create: `member`): their nickname there is stored beside their username and display name, the
    names a question may call them by (engram.names)."""
    message = discord.add(
        C11,
        ALICE_USER,
        "the nickname canary is quince",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
    )
    # the Guild Member Object as the fake's REST serves it, with a nickname and without `user` (Message
    # Create's member is partial: the author is the message's own `author`)
    member = {k: v for k, v in shapes.member(ALICE, []).items() if k != "user"} | {"nick": "Ali"}
    discord.gateway.dispatch("MESSAGE_CREATE", {**shapes.message(message), "guild_id": G1, "member": member})
    assert wait_until(lambda: message["id"] in stored_ids(stack, ALICE), timeout_s=5, every_s=0.1)
    found = httpx.get(
        f"{stack.url}/v1/bots/{APP_ID}/memories",
        params={"kind": "message", "query": "what is Ali's canary"},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()["memories"]
    stored = next(m for m in found if m["sourceMessageId"] == message["id"])
    assert {k: stored["content"][k] for k in ("author", "displayName", "nick")} == {
        "author": "alice",
        "displayName": "Alice",
        "nick": "Ali",
    }
