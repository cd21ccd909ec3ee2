"""The fake Discord is held to Discord's own OpenAPI document (v10, discord/discord-api-spec, read from
../shared/reference): every route it serves is one of Discord's, and every answer it gives in any test is
checked against the schema for that route and status (FakeDiscord.stop fails the test otherwise)."""

from __future__ import annotations

import re

import pytest

from engram.discord.rest import DiscordClient, DiscordError
from tests.discord_spec import route_of
from tests.fake_discord import ALICE, APP_ID, C11, G1, NOT_DISCORD, TOKEN, FakeDiscord


def test_every_route_the_fake_serves_is_discords():
    fake = FakeDiscord()
    served = [
        (method, route.path)
        for route in fake.app.routes
        if getattr(route, "methods", None) and route.path not in NOT_DISCORD
        for method in route.methods
        if method in ("GET", "POST", "PATCH", "PUT", "DELETE")
    ]
    assert len(served) >= 12
    for method, path in served:
        for kind in ("public", "private"):  # the archived-threads route names its kind
            sample = re.sub(r"\{[^}]+\}", "1100000000000000001", path.replace("{kind}", kind))
            assert route_of(method, sample) is not None, (method, path)


def test_answers_are_checked_and_a_wrong_one_fails_the_test():
    fake = FakeDiscord().start()
    client = DiscordClient(fake.url, TOKEN, APP_ID)
    client.application()
    client.guilds()
    client.messages(C11)
    with pytest.raises(DiscordError):
        client.member(G1, "999")  # 404 Unknown Member: an error body Discord documents
    client.direct_message(ALICE, "hello")
    assert fake.spec_problems == []
    assert {
        ("GET", "applications", 200),
        ("GET", "guilds", 404),
        ("POST", "channels", 200),
    } <= fake.spec_checked
    fake.channels[G1].append({"id": "general", "type": 0, "name": "not a snowflake"})
    client.all_channels(G1)
    with pytest.raises(AssertionError, match="outside Discord's OpenAPI document"):
        fake.stop()
