"""The source is the truth (issue 43), against the fake Discord with no gateway: what is deleted on Discord,
a thread under a disallowed channel, messages past retention, a server the bot left and every part of a
long answer leave memory, on REST alone. The local stack, its real worker and queues; requests signed."""

import json
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from engram.clock import now_ms
from engram.jobs import CatchUpJob, GatewayJob
from tests.fake_discord import ALICE, APP_ID, BOB, C11, C12, C21, G1, G2, T14, FakeDiscord
from tests.integration.conftest import KEY
from tests.integration.test_discord import command, discord_stack, interact, memory_cmd, stored_ids
from tests.support import wait_until

THREAD_WORDS = re.compile(r"alice in a thread \d")  # T14's messages (a probe's prompt is stored too)
T15 = "1120000000000000015"  # a thread under the disallowed C12
T16 = "1120000000000000016"  # a thread of #general that archives between two visits
ALICE_USER = {"id": ALICE, "username": "alice", "global_name": "Alice", "bot": False}
BOB_USER = {"id": BOB, "username": "bob", "global_name": "Bob", "bot": False}


def days_ago(n: int) -> str:
    return (datetime.now(UTC) - timedelta(days=n)).isoformat()


@pytest.fixture(scope="module")
def discord():
    fake = FakeDiscord()
    # a month-old secret in #general, a thread under the disallowed channel, a 60-day-old message (past
    # DISCORD_RETENTION_DAYS=45) and bob's words for a long answer to draw on
    fake.add(C11, ALICE_USER, "my locker combination is 4417 orchid", timestamp=days_ago(33))
    fake.threads[G1].append({"id": T15, "type": 11, "name": "under secret", "parent_id": C12})
    fake.history[T15] = []
    fake.add(T15, ALICE_USER, "alice in a thread of a disallowed channel about kites")
    fake.add(C11, ALICE_USER, "the old harbour lighthouse story", timestamp=days_ago(60))
    fake.add(C11, BOB_USER, "bob says the pergola paint is sage green")
    fake.threads[G1].append({"id": T16, "type": 11, "name": "short lived", "parent_id": C11})
    fake.history[T16] = []
    fake.add(T16, ALICE_USER, "the first word in a thread that will archive")
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, discord):
    s = discord_stack(
        tmp_path_factory.mktemp("engram"),
        local_embedder,
        discord,
        DISCORD_CHANNELS_DISALLOWED=C12,
        DISCORD_RETENTION_DAYS="45",
        DISCORD_LEFT_SERVER_GRACE_HOURS="0",
        OLLAMA_CHAT_MODEL="chat",
    )
    for user, token in ((ALICE, "tok-alice"), (BOB, "tok-bob")):
        interact(s, memory_cmd("remember", user, token=token))
        assert wait_until(
            lambda t=token: any(
                "Backfill complete" in m.get("content", "") for m in discord.sent if m.get("token") == t
            ),
            timeout_s=120,
        )
    s.settle()
    yield s
    s.stop()


def texts(stack, user) -> list[str]:
    r = httpx.get(
        f"{stack.url}/v1/bots/{APP_ID}/memories",
        params={"kind": "message", "userId": user, "limit": 500},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    return [m["text"] for m in r.json()["memories"]]


def ask(stack, discord, user, prompt, token, channel=C11, guild=G1, thread_of=None) -> dict:
    """Run /ask (in a thread of `thread_of`, when given); returns what the model was given."""
    asked = len(discord.chat_requests)
    body = command(
        "ask",
        user,
        guild=guild,
        channel=channel,
        token=token,
        options=[{"name": "prompt", "type": 3, "value": prompt}],
    )
    if thread_of is not None:  # the partial channel an interaction carries (a public thread's)
        body["channel"] = {"type": 11, "parent_id": thread_of}
    discord.interactions[token] = (channel, body["id"], user)
    interact(stack, body)
    assert wait_until(
        lambda: len(discord.chat_requests) > asked and any(s.get("token") == token for s in discord.sent)
    )
    stack.settle()
    return discord.chat_requests[asked]


def recalled(request: dict) -> str:
    """The Discord messages the model was given from memory, as one text (the /ask prompts it was given
    too, which are the asker's own words to engram, left out: a probe's prompt names what it looks for)."""
    system = [m["content"] for m in request["messages"] if m["role"] == "system"]
    memories = json.loads(system[0].split("\n", 1)[1]) if system else []
    return json.dumps([m for m in memories if m.get("viaCommand") != "/ask"])


def test_a_message_deleted_a_month_after_it_was_written_is_not_quoted_and_leaves_memory(stack, discord):
    secret = next(m for m in discord.history[C11] if "4417 orchid" in m["content"])
    assert secret["id"] in stored_ids(stack, ALICE)
    assert "4417 orchid" in recalled(
        ask(stack, discord, ALICE, "what is the locker combination orchid", "tok-a1")
    )
    discord.delete(secret["id"])  # a moderator deletes it, 33 days after it was written
    given = ask(stack, discord, ALICE, "what is the locker combination orchid", "tok-a2")
    assert "4417" not in json.dumps(given)
    assert secret["id"] not in stored_ids(stack, ALICE)  # gone from memory, found where it would be quoted


def test_a_deleted_threads_words_are_not_quoted_in_its_parent(stack, discord):
    assert any(THREAD_WORDS.match(t) for t in texts(stack, ALICE))
    assert "alice in a thread" in recalled(
        ask(stack, discord, ALICE, "alice in a thread about compost", "tok-t0")
    )
    discord.delete_channel(T14)
    given = ask(stack, discord, ALICE, "what did alice say in the thread about compost", "tok-t1")
    assert "alice in a thread" not in recalled(given)
    assert wait_until(lambda: not any(THREAD_WORDS.match(t) for t in texts(stack, ALICE)), timeout_s=60)


def test_a_thread_under_a_disallowed_channel_is_never_stored_nor_an_ask_in_one(stack, discord):
    assert not any("kites" in t for t in texts(stack, ALICE))  # backfilled: its parent is disallowed
    discord.add(T15, ALICE_USER, "more about kites in the disallowed thread")
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert not any("kites" in t for t in texts(stack, ALICE))
    before = set(stored_ids(stack, ALICE))
    ask(stack, discord, ALICE, "tell me about kites", "tok-d1", channel=C12)
    ask(stack, discord, ALICE, "tell me about kites again", "tok-d2", channel=T15, thread_of=C12)
    assert not any("kites" in t for t in texts(stack, ALICE))
    assert set(stored_ids(stack, ALICE)) == before  # neither the prompts nor the answers


def test_a_message_past_retention_is_neither_stored_nor_recalled_and_the_sweep_deletes_what_ages_out(
    stack, discord
):
    assert not any("lighthouse" in t for t in texts(stack, ALICE))  # 60 days old, retention 45
    given = ask(stack, discord, ALICE, "the old harbour lighthouse story", "tok-r1")
    assert "lighthouse" not in recalled(given)
    # one that aged out while stored (imported as Discord's, 50 days old): the tick's sweep deletes it
    line = {
        "kind": "message",
        "text": "a fifty day old canary about tramlines",
        "userId": ALICE,
        "serverId": G1,
        "threadId": C11,
        "sourceMessageId": "1190000000000000001",
        "createdAt": days_ago(50),
    }
    r = httpx.post(
        f"{stack.url}/v1/bots/{APP_ID}/import",
        content=json.dumps(line) + "\n",
        headers={"Authorization": f"Bearer {KEY}", "content-type": "application/x-ndjson"},
    )
    assert r.status_code == 200, r.text
    stack.settle()
    assert any("tramlines" in t for t in texts(stack, ALICE))
    discord.add(C11, BOB_USER, "bob writes again")  # the channel moves: the tick reads it
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert not any("tramlines" in t for t in texts(stack, ALICE))


def test_every_part_of_a_long_answer_goes_when_someone_it_quoted_forgets(stack, discord):
    discord.answer = "The pergola paint is sage green, bob said. " + "More on paint. " * 300  # three parts
    given = ask(stack, discord, ALICE, "what colour is the pergola paint", "tok-long")
    assert "sage green" in recalled(given)
    parts = [s for s in discord.sent if s.get("token") == "tok-long"]
    assert len(parts) >= 3 and parts[0]["kind"] == "edit"
    ids = [p["id"] for p in parts]
    stack.engine.queue.send(CatchUpJob())  # the parts are in the channel's history: a catch-up sees them
    stack.settle()
    service = stack.engine.service
    stored = service.by_sources(APP_ID, ids)
    assert list(stored) == [ids[0]]  # one answer, under its first part, never a part as alice's words
    answer = stored[ids[0]]
    assert answer.content["parts"] == ids[1:] and BOB in answer.content["drewOn"]
    assert len(answer.text) > 2000
    interact(stack, memory_cmd("forget", BOB, token="tok-forget-bob"))
    assert wait_until(
        lambda: any(
            "Forgotten" in s.get("content", "") for s in discord.sent if s.get("token") == "tok-forget-bob"
        )
    )
    assert service.by_sources(APP_ID, ids) == {}
    assert not any("sage green" in t for t in texts(stack, ALICE))
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert service.by_sources(APP_ID, ids) == {}  # and no catch-up brings a part back
    # the bot's earlier answer built on bob's words is not handed to the model again
    again = ask(stack, discord, ALICE, "what colour is the pergola paint", "tok-long-2")
    assert "sage green" not in json.dumps(again["messages"][:-1])


def test_a_message_the_gateway_heard_before_a_forget_is_not_stored_after_it(stack, discord):
    """A gateway job waits on the queue while its author forgets and opts in again: what it heard before the
    forget stays out (its origin is when it was heard); what it heard after is stored."""

    def created(text: str, message_id: str) -> dict:
        message = {"id": message_id, "channel_id": C11, "guild_id": G1, "author": BOB_USER, "content": text}
        return {"t": "MESSAGE_CREATE", "d": {**message, "timestamp": days_ago(0), "type": 0}}

    heard = now_ms()
    for sub, token in (("forget", "tok-gw-forget"), ("remember", "tok-gw-remember")):
        interact(stack, memory_cmd(sub, BOB, token=token))
        assert wait_until(lambda t=token: any(s.get("token") == t for s in discord.sent), timeout_s=60)
    stack.settle()
    before, after = "1400000000000000001", "1400000000000000002"
    stack.engine.queue.send(GatewayJob(events=[created("heard before bob forgot", before)], issued_at=heard))
    stack.engine.queue.send(
        GatewayJob(events=[created("heard after bob came back", after)], issued_at=now_ms())
    )
    stack.settle()
    assert after in stored_ids(stack, BOB) and before not in stored_ids(stack, BOB)


def test_a_thread_that_archives_between_two_visits_is_read_once_more(stack, discord):
    stack.engine.queue.send(CatchUpJob())  # a visit: T16 is active
    stack.settle()
    late = discord.add(
        T16, ALICE_USER, "written just before the thread archived: otters", timestamp=days_ago(0)
    )
    thread = next(t for t in discord.threads[G1] if t["id"] == T16)
    discord.threads[G1].remove(thread)  # archived: no longer among the active threads
    discord.archived.setdefault(C11, {})["public"] = [
        {**thread, "thread_metadata": {"archived": True, "archive_timestamp": days_ago(0)}}
    ]
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert late["id"] in stored_ids(stack, ALICE)
    stored = stack.engine.service.by_source(APP_ID, late["id"])
    assert stored.content["parentId"] == C11  # its channel remembered from the visit that saw it active


def test_a_second_remember_within_the_cooldown_is_answered_not_run(stack, discord):
    lists = sum(1 for r in discord.requests if r.endswith("/channels"))
    interact(stack, memory_cmd("remember", ALICE, token="tok-again"))
    assert wait_until(lambda: any(s.get("token") == "tok-again" for s in discord.sent))
    said = [s["content"] for s in discord.sent if s.get("token") == "tok-again"][-1]
    assert "already opted in" in said and "can run again in" in said
    assert sum(1 for r in discord.requests if r.endswith("/channels")) == lists  # no server listed again


def test_a_server_the_bot_left_is_deleted_after_its_grace(stack, discord):
    assert any("sailing boats" in t for t in texts(stack, ALICE))
    discord.guilds = [g for g in discord.guilds if g["id"] != G2]
    discord.channels.pop(G2)
    discord.threads.pop(G2)
    stack.engine.queue.send(CatchUpJob())
    stack.settle()
    assert wait_until(lambda: not any("sailing boats" in t for t in texts(stack, ALICE)), timeout_s=300)
    assert any("gardening" in t for t in texts(stack, ALICE))  # the server the bot is still in is kept
    assert C21  # the channel's memories went with its server
