"""Discord end to end on the local stack: requests signed with a real Ed25519 key, a fake Discord REST
API and a fake Ollama on 127.0.0.1, the real worker draining real (moto) SQS."""

import json
import time
from collections import Counter

import httpx
import pytest
from nacl.signing import SigningKey

from engram.bookkeeping import Cursor
from engram.config.discord import DiscordSettings
from engram.errors import Unavailable
from engram.vectors import Scope
from infra.local_stack import LocalStack
from tests.fake_discord import ALICE, APP_ID, BOB, C11, C12, C21, G1, G2, T14, TOKEN, FakeDiscord, dm_channel
from tests.integration.conftest import KEY
from tests.support import key_names, wait_until

SIGNER = SigningKey.generate()
ALLOWED = {C11, T14, C21}


@pytest.fixture(scope="module")
def discord():
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


def discord_stack(
    data_dir, local_embedder, discord, gateway: bool = False, catchup_every_s: float = 600.0, **settings: str
) -> LocalStack:
    """The local stack with its Discord door pointed at the fake (the model too); `settings` as the
    environment would give them (DISCORD_*, OLLAMA_*); `gateway`: its gateway capture on (the fake's)."""
    door = DiscordSettings(
        DISCORD_APPLICATION_ID=APP_ID,
        DISCORD_PUBLIC_KEY=SIGNER.verify_key.encode().hex(),
        DISCORD_BOT_TOKEN=TOKEN,
        DISCORD_API_BASE=discord.url,
        **settings,
    )
    with pytest.MonkeyPatch.context() as env:  # the one Ollama (the chat model's too) is the stack's setting
        env.setenv("ENGRAM_OLLAMA_URL", discord.url)
        return LocalStack(
            data_dir,
            port=0,
            api_key=KEY,
            embedder=local_embedder,
            discord_settings=door,
            gateway=gateway,
            catchup_every_s=catchup_every_s,
        ).start()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, local_embedder, discord):
    s = discord_stack(
        tmp_path_factory.mktemp("engram"),
        local_embedder,
        discord,
        DISCORD_CHANNELS_DISALLOWED=C12,
        OLLAMA_CHAT_MODEL="chat",
        DISCORD_BACKFILL_PAGES_PER_JOB="1",
        DISCORD_REMEMBER_COOLDOWN_S="0",  # a second remember runs (the cooldown: test_discord_source_truth)
    )
    yield s
    s.stop()


def signed(body: dict, signer=SIGNER, timestamp=None) -> tuple[bytes, dict]:
    raw = json.dumps(body).encode()
    ts = str(int(timestamp if timestamp is not None else time.time()))
    signature = signer.sign(ts.encode() + raw).signature.hex()
    return raw, {
        "X-Signature-Ed25519": signature,
        "X-Signature-Timestamp": ts,
        "content-type": "application/json",
    }


def interact(stack, body, **kw):
    raw, headers = signed(body, **kw)
    return httpx.post(f"{stack.url}/discord/interactions", content=raw, headers=headers)


def command(name, user, guild=G1, channel=C11, options=None, token="tok"):
    return {
        "type": 2,
        "id": f"i-{time.time_ns()}",
        "token": token,
        "application_id": APP_ID,
        "guild_id": guild,
        "channel_id": channel,
        "member": {"user": {"id": user, "username": "u"}},
        "data": {"name": name, "options": options or []},
    }


def memory_cmd(sub, user, **kw):
    return command("memory", user, options=[{"type": 1, "name": sub}], **kw)


def ask_cmd(user, prompt, **kw):
    """/ask with its one string option (type 3), `prompt`."""
    return command("ask", user, options=[{"name": "prompt", "type": 3, "value": prompt}], **kw)


def stored_ids(stack, user):
    r = httpx.get(
        f"{stack.url}/v1/bots/{APP_ID}/memories",
        params={"kind": "message", "userId": user, "limit": 500},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    return [m["sourceMessageId"] for m in r.json()["memories"]]


def test_signatures_and_ping(stack):
    assert interact(stack, {"type": 1}).json() == {"type": 1}
    raw, headers = signed({"type": 1})
    headers["X-Signature-Ed25519"] = "00" * 64
    assert httpx.post(f"{stack.url}/discord/interactions", content=raw, headers=headers).status_code == 401
    assert interact(stack, {"type": 1}, signer=SigningKey.generate()).status_code == 401  # forged
    assert interact(stack, {"type": 1}, timestamp=time.time() - 3600).status_code == 401  # stale
    raw, headers = signed({"type": 1})
    assert (
        httpx.post(f"{stack.url}/discord/interactions", content=raw + b" ", headers=headers).status_code
        == 401
    )  # tampered
    assert httpx.post(f"{stack.url}/discord/interactions", content=raw).status_code == 401  # unsigned


def test_remember_backfills_exactly_the_consenting_user(stack, discord):
    started = time.perf_counter()
    r = interact(stack, memory_cmd("remember", ALICE, token="tok-remember"))
    assert time.perf_counter() - started < 3
    assert r.json() == {"type": 5, "data": {"flags": 64}}
    assert wait_until(
        lambda: any(
            "Backfill complete" in s.get("content", "")
            for s in discord.sent
            if s.get("token") == "tok-remember"
        )
    )
    expected = discord.expected_for(ALICE, ALLOWED)
    final = [s["content"] for s in discord.sent if s.get("token") == "tok-remember"][-1]
    assert final == f"Backfill complete: {len(expected)} messages stored."
    ids = stored_ids(stack, ALICE)
    assert len(ids) == len(set(ids)) and set(ids) == expected
    # the interaction token is kept only in its own item, and only for Discord's 15 minutes
    state = stack.dynamodb.scan(TableName="engram-state")["Items"]
    holding = [i for i in state if "tok-remember" in json.dumps(i)]
    assert holding and all(
        i["sk"]["S"].startswith(f"token#{ALICE}#") and int(i["expiresAt"]["N"]) <= time.time() + 900
        for i in holding
    )
    assert stored_ids(stack, BOB) == []
    status = interact(stack, memory_cmd("status", ALICE)).json()
    assert status["type"] == 4 and status["data"]["flags"] == 64
    assert f"Memories stored: {len(expected)}" in status["data"]["content"]
    # again: resumes, stores nothing twice, and reads no history a run of hers read to its start already
    reads = len(discord.history_reads)
    interact(stack, memory_cmd("remember", ALICE, token="tok-again"))
    assert wait_until(
        lambda: any(
            "Backfill complete" in s.get("content", "") for s in discord.sent if s.get("token") == "tok-again"
        )
    )
    assert [s["content"] for s in discord.sent if s.get("token") == "tok-again"][
        -1
    ] == "Backfill complete: 0 messages stored."
    assert sorted(stored_ids(stack, ALICE)) == sorted(ids)
    assert discord.history_reads[reads:] == []


def test_ask_recalls_memories_of_the_same_server_only(stack, discord):
    assert wait_until(lambda: len(stored_ids(stack, ALICE)) > 0)
    r = interact(
        stack,
        ask_cmd(ALICE, "What boats did we talk about?", guild=G2, channel=C21, token="tok-ask"),
    )
    assert r.json() == {"type": 5}
    assert wait_until(lambda: any(s.get("token") == "tok-ask" for s in discord.sent))
    request = discord.chat_requests[-1]
    system = [m for m in request["messages"] if m["role"] == "system"]
    assert len(system) == 1
    memories = json.loads(system[0]["content"].split("\n", 1)[1])
    assert memories and all(m["serverId"] == G2 for m in memories)
    assert request["messages"][-1] == {"role": "user", "content": "What boats did we talk about?"}
    # rolling context: the words of people who opted in (alice), none of those who did not (bob)
    assert any(m["role"] == "user" and "alice in Beta" in m["content"] for m in request["messages"])
    assert not any("bob in Beta" in m["content"] for m in request["messages"])
    answer = [s for s in discord.sent if s.get("token") == "tok-ask"][-1]
    assert answer["content"] == "Here is what I remember."
    assert wait_until(
        lambda: answer["id"] in stored_ids(stack, ALICE)
    )  # the reply is stored, attributed to alice


def test_ask_answers_without_memory_when_qdrant_hangs_and_says_so(stack, discord, monkeypatch):
    """Issue 46: a Qdrant that hangs (rather than refuses) held an /ask for its timeouts, one of the few
    interactive slots with it; /ask now waits DISCORD_ASK_MEMORY_BUDGET_MS for its memories, then answers
    without them, saying so under the answer (not in what is stored)."""
    from engram.discord.ask import WITHOUT_MEMORY

    index = stack.engine.service.reads.index
    inner = index.search

    def hanging(*args, **kwargs):
        time.sleep(6)
        return inner(*args, **kwargs)

    monkeypatch.setattr(index, "search", hanging)
    asks = stack.discord.asks
    monkeypatch.setattr(asks, "settings", asks.settings.model_copy(update={"memory_budget_ms": 500}))
    chats, started = len(discord.chat_requests), time.monotonic()
    interact(
        stack,
        ask_cmd(ALICE, "Which boats again?", guild=G2, channel=C21, token="tok-ask-hang"),
    )
    assert wait_until(lambda: any(s.get("token") == "tok-ask-hang" for s in discord.sent), timeout_s=40)
    took = time.monotonic() - started
    [answer] = [s for s in discord.sent if s.get("token") == "tok-ask-hang"]
    assert took < 4 and answer["content"] == "Here is what I remember." + WITHOUT_MEMORY, (took, answer)
    request = discord.chat_requests[chats]
    assert not [m for m in request["messages"] if m["role"] == "system"]  # no memories given
    monkeypatch.setattr(index, "search", inner)
    assert wait_until(lambda: answer["id"] in stored_ids(stack, ALICE))
    stored = stack.engine.service.by_sources(APP_ID, [answer["id"]])[answer["id"]]
    assert WITHOUT_MEMORY.strip() not in stored.text


def test_export_sends_everything_stored_about_the_user_by_dm_once_per_ten_minutes(stack, discord):
    stored = stored_ids(stack, ALICE)
    assert stored
    r = interact(stack, memory_cmd("export", ALICE, token="tok-export"))
    assert r.json() == {"type": 5, "data": {"flags": 64}}
    assert wait_until(lambda: any(s.get("token") == "tok-export" for s in discord.sent))
    reply = [s["content"] for s in discord.sent if s.get("token") == "tok-export"][-1]
    assert reply.startswith("Sent you a DM") and "one export every 10 minutes" in reply and "8 MB" in reply
    dm = [s for s in discord.sent if s.get("channel") == dm_channel(ALICE) and s.get("files")][-1]
    upload = dm["files"][0]
    assert upload["filename"] == f"engram-{ALICE}.ndjson" and upload["content_type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in upload["data"].decode().splitlines()]
    assert [line["kind"] for line in lines[:2]] == ["consent", "backfill"]
    assert "token" not in json.dumps(lines[:2])  # never the interaction token
    memories = [line for line in lines if line["kind"] in ("fact", "message")]
    assert {m["userId"] for m in memories} == {ALICE} and len(memories) == len(stored)
    assert sorted(m["sourceMessageId"] for m in memories if m["kind"] == "message") == sorted(stored)
    # a second one within ten minutes is refused, saying why
    interact(stack, memory_cmd("export", ALICE, token="tok-export-2"))
    assert wait_until(lambda: any(s.get("token") == "tok-export-2" for s in discord.sent))
    again = [s["content"] for s in discord.sent if s.get("token") == "tok-export-2"][-1]
    assert "a moment ago" in again and "one export every 10 minutes" in again


def test_forget_leaves_nothing_of_the_user(stack, discord):
    assert stored_ids(stack, ALICE)
    interact(stack, memory_cmd("forget", ALICE, token="tok-forget"))
    assert wait_until(
        lambda: any(
            "Forgotten" in s.get("content", "") for s in discord.sent if s.get("token") == "tok-forget"
        )
    )
    assert stored_ids(stack, ALICE) == []
    items = stack.dynamodb.scan(TableName="engram-memories")["Items"]
    assert not [i for i in items if i.get("userId", {}).get("S") == ALICE]
    assert stack.engine.service.index.count(Scope(bot=APP_ID, user=ALICE)) == 0
    state = stack.dynamodb.scan(TableName="engram-state")["Items"]
    left = [i for i in state if key_names(i["sk"]["S"], ALICE) or key_names(i["pk"]["S"], ALICE)]
    # only the tombstone: the user's id and when, which keeps anything queued before from storing them again
    assert [(i["pk"]["S"], i["sk"]["S"], sorted(i)) for i in left] == [
        (f"forgotten#{APP_ID}", ALICE, ["pk", "sk", "value"])
    ]
    assert "off for you" in interact(stack, memory_cmd("status", ALICE)).json()["data"]["content"]


class DuplicatingQueue:
    """SQS may deliver a message twice: every backfill job is sent twice (`links`: how many times each link,
    (channel, step), was sent)."""

    def __init__(self, inner):
        self.inner, self.links = inner, Counter()

    def send(self, job, delay_s=0):
        self.inner.send(job, delay_s)
        if job.kind == "discord-backfill":
            self.inner.send(job, delay_s)
            self.links[job.channel, job.step] += 2

    def send_many(self, jobs):
        for job in jobs:
            self.send(job)


def test_duplicate_deliveries_count_each_channel_once(stack, discord, monkeypatch):
    duplicating = DuplicatingQueue(stack.discord.core.queue)
    monkeypatch.setattr(stack.discord.core, "queue", duplicating)
    interact(stack, memory_cmd("remember", BOB, token="tok-dup"))
    assert wait_until(
        lambda: any(
            "Backfill complete" in s.get("content", "") for s in discord.sent if s.get("token") == "tok-dup"
        )
    )
    stack.settle()  # the duplicates have run out
    finals = [
        s["content"]
        for s in discord.sent
        if s.get("token") == "tok-dup" and "Backfill complete" in s.get("content", "")
    ]
    expected = discord.expected_for(BOB, ALLOWED)
    assert finals == [f"Backfill complete: {len(expected)} messages stored."]
    assert set(stored_ids(stack, BOB)) == expected
    # a duplicate of a link is dropped, and queues no second chain beside the first (which would double
    # again with each duplicate of its own)
    assert max(duplicating.links.values()) == 2 and duplicating.links[C11, 2] == 2, duplicating.links
    assert "Backfill: complete" in interact(stack, memory_cmd("status", BOB)).json()["data"]["content"]


def recording_failures(backfills, monkeypatch):
    """The backfill's links, each one that raises recorded and held back (SQS would give it back after its
    visibility timeout, at a time the test cannot choose: the test is the one that redelivers it, by hand):
    the links' own function, and the failed ones."""
    run_job, failed = backfills.backfill, []

    def recording(job):
        try:
            run_job(job)
        except Exception:
            failed.append(job)

    monkeypatch.setattr(backfills, "backfill", recording)
    return run_job, failed


def finals(discord, token):
    """What the interaction `token`'s backfill said when it completed (once, when all is well)."""
    sent = [s["content"] for s in discord.sent if s.get("token") == token]
    return [content for content in sent if "complete" in content]


def test_the_queued_mark_never_moves_a_cursor_back_nor_writes_back_one_a_forget_deleted(stack):
    """A link marks its cursor "queued" after sending the next link, which may have run and moved the
    cursor on by then (the worker runs links side by side), or a forget may have deleted it."""
    state, bot, user, channel = stack.discord.backfills.state, stack.discord.backfills.bot, "1999", C11
    saved = Cursor(before="900", done=False, run="r1", step=1, queued=False)
    state.cursors.save(bot, user, channel, saved)
    assert state.cursors.mark_queued(bot, user, channel, saved)
    assert state.cursors.get(bot, user, channel) == saved.moved(queued=True)
    moved = saved.moved(before="800", step=2, queued=False)
    state.cursors.save(bot, user, channel, saved)
    state.cursors.save(bot, user, channel, moved)  # the next link ran before this link's mark
    assert not state.cursors.mark_queued(bot, user, channel, saved)
    assert state.cursors.get(bot, user, channel) == moved
    state.forget_user(bot, user)
    assert not state.cursors.mark_queued(bot, user, channel, moved)
    assert state.cursors.get(bot, user, channel) is None


def test_a_link_cut_off_before_queueing_its_next_link_is_redelivered_and_the_channel_goes_on(
    tmp_path, local_embedder, discord, monkeypatch
):
    """A link of a channel's backfill saves its cursor and counts, then its SendMessage of the next link
    times out: SQS delivers it again; the cursor says it ran, and it queues the next link then (before, the
    redelivery was dropped as a duplicate and the channel, and the run, stopped there for good)."""
    stack, token = (
        discord_stack(tmp_path, local_embedder, discord, DISCORD_BACKFILL_PAGES_PER_JOB="1"),
        "tok-next",
    )
    try:
        backfills = stack.discord.backfills
        queue, (run_job, failed) = backfills.core.queue, recording_failures(backfills, monkeypatch)
        send = queue.send

        def send_timing_out_once(job, **kwargs):
            if getattr(job, "channel", None) == C11 and getattr(job, "step", 0) == 1 and not failed:
                raise Unavailable("SQS timed out")
            return send(job, **kwargs)

        monkeypatch.setattr(queue, "send", send_timing_out_once)
        interact(stack, memory_cmd("remember", BOB, token=token))
        assert wait_until(lambda: failed and backfills.state.backfills.get(backfills.bot, BOB).left <= 1)
        stack.settle()  # every other job queued has run: the run waits for the channel
        assert backfills.state.backfills.get(backfills.bot, BOB).left == 1

        assert finals(discord, token) == []
        run_job(failed[0])  # the redelivery
        expected = discord.expected_for(BOB, ALLOWED | {C12})  # this stack disallows no channel
        complete = f"Backfill complete: {len(expected)} messages stored."
        assert wait_until(lambda: finals(discord, token) == [complete])
        assert set(stored_ids(stack, BOB)) == expected
    finally:
        stack.stop()


@pytest.mark.parametrize("lost", ["final message", "count"])
def test_a_last_link_cut_off_after_its_cursor_counts_and_speaks_on_redelivery_and_only_once(
    tmp_path, local_embedder, discord, monkeypatch, lost
):
    """The job that reads a channel's last page saves its cursor, then times out: on its way to Discord
    with the final message, or on the run's count itself. SQS delivers it again; the cursor says the link
    ran, yet the count is made and the final message sent by that delivery — once; a duplicate says nothing
    more. (The deploy tier's CI saw a run end with no final message at all.)"""
    stack, token = discord_stack(tmp_path, local_embedder, discord), f"tok-lost-{lost[0]}"
    try:
        backfills, client = stack.discord.backfills, stack.discord.core.client
        edit, count = client.edit_original, backfills.state.backfills.count
        run_job, failed = recording_failures(backfills, monkeypatch)

        def edit_timing_out_once(to, content):
            if to == token and content.startswith("Backfill complete") and not failed:
                raise httpx.ReadTimeout("the edit timed out")
            return edit(to, content)

        def count_timing_out_once(bot, user, run, channel, stored, finished):
            if finished and not failed:
                raise Unavailable("DynamoDB timed out")
            return count(bot, user, run, channel, stored, finished)

        if lost == "count":
            monkeypatch.setattr(backfills.state.backfills, "count", count_timing_out_once)
        else:
            monkeypatch.setattr(client, "edit_original", edit_timing_out_once)
        interact(stack, memory_cmd("remember", BOB, token=token))
        assert wait_until(lambda: failed and backfills.state.backfills.get(backfills.bot, BOB).left <= 1)
        stack.settle()  # every other job queued has run: the run waits for the failed link

        assert finals(discord, token) == []
        expected = discord.expected_for(BOB, ALLOWED | {C12})  # this stack disallows no channel
        run_job(failed[0])  # the redelivery
        assert finals(discord, token) == [f"Backfill complete: {len(expected)} messages stored."]
        run_job(failed[0])  # a duplicate of it
        assert len(finals(discord, token)) == 1
        assert "Backfill: complete" in interact(stack, memory_cmd("status", BOB)).json()["data"]["content"]
    finally:
        stack.stop()
