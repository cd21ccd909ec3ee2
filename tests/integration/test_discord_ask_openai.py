"""/ask with a chat model on any OpenAI-compatible API (DISCORD_ASK_CHAT_URL), not only Ollama: the model
is asked through Chat Completions with the key, the memories and the prompt, and its answer is posted."""

from __future__ import annotations

import json

import pytest

from tests.fake_discord import ALICE, C21, G2, FakeDiscord
from tests.fake_upstream import REPLY
from tests.integration.test_discord import ask_cmd, discord_stack, interact, memory_cmd, stored_ids
from tests.support import wait_until


@pytest.fixture(scope="module")
def discord():
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, discord, upstream):
    s = discord_stack(
        tmp_path_factory.mktemp("engram"),
        local_embedder,
        discord,
        DISCORD_ASK_CHAT_URL=f"{upstream.url}/v1",
        DISCORD_ASK_CHAT_KEY="sk-chat",
        DISCORD_ASK_CHAT_MODEL="gpt-small",
        DISCORD_REMEMBER_COOLDOWN_S="0",
    )
    yield s
    s.stop()


def test_ask_asks_an_openai_compatible_chat_model_with_the_server_s_memories(stack, discord, upstream):
    assert interact(stack, memory_cmd("remember", ALICE)).json()["type"] in (4, 5)
    assert wait_until(lambda: len(stored_ids(stack, ALICE)) > 0, timeout_s=60)
    r = interact(
        stack, ask_cmd(ALICE, "What boats did we talk about?", guild=G2, channel=C21, token="tok-oa")
    )
    assert r.json() == {"type": 5}
    assert wait_until(lambda: any(s.get("token") == "tok-oa" for s in discord.sent), timeout_s=60)
    asked = [q for q in upstream.requests if q["path"].endswith("/v1/chat/completions")][-1]
    assert asked["json"]["model"] == "gpt-small" and asked["headers"]["authorization"] == "Bearer sk-chat"
    system = [m for m in asked["json"]["messages"] if m["role"] == "system"]
    memories = json.loads(system[0]["content"].split("\n", 1)[1])
    assert memories and all(m["serverId"] == G2 for m in memories)
    assert [s for s in discord.sent if s.get("token") == "tok-oa"][-1]["content"] == REPLY
    assert discord.chat_requests == []  # Ollama was not asked
