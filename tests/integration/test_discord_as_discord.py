"""Discord as Discord really behaves, against a fake that follows Discord's documentation: the Message
Content intent off (others' messages come back empty: developers/events/gateway.mdx), system messages
(resources/message.mdx, message types), a DM that cannot be sent (50007), an answer longer than a message
may be (2,000 characters), and a Discord error while a remember plans its backfill — each through the
signed webhook and the real worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.fake_discord import ALICE, APP_ID, BOB, C11, C12, C13, C21, G1, G2, FakeDiscord, dm_channel
from tests.integration.test_discord import ask_cmd, command, discord_stack, interact, memory_cmd, stored_ids
from tests.support import wait_until


@pytest.fixture
def discord():
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


@pytest.fixture
def stack(tmp_path, local_embedder, discord):
    s = discord_stack(
        tmp_path, local_embedder, discord, OLLAMA_CHAT_MODEL="chat", DISCORD_BACKFILL_PAGES_PER_JOB="2"
    )
    yield s
    s.stop()


def replies(discord, token):
    return [s["content"] for s in discord.sent if s.get("token") == token]


def told(stack, discord, prompt, guild, channel, token, channel_payload=None) -> str:
    """Alice asks in a channel (the interaction carrying `channel_payload` as its `channel`); what the model
    was told besides the chat: the memories /ask chose."""
    asked = len(discord.chat_requests)
    body = ask_cmd(ALICE, prompt, guild=guild, channel=channel, token=token)
    if channel_payload:
        body["channel"] = channel_payload
    interact(stack, body)
    assert wait_until(lambda: replies(discord, token), timeout_s=60)
    return " ".join(
        m["content"] for r in discord.chat_requests[asked:] for m in r["messages"] if m["role"] == "system"
    )


def remembered(stack, discord) -> None:
    """Alice opts in, and her backfill is complete."""
    interact(stack, memory_cmd("remember", ALICE, token="tok-remember"))
    assert wait_until(
        lambda: any("Backfill complete" in r for r in replies(discord, "tok-remember")), timeout_s=90
    )


def test_without_the_message_content_intent_remember_and_status_say_so(stack, discord):
    discord.content_intent = False
    remembered(stack, discord)
    said = replies(discord, "tok-remember")
    assert all("Message Content intent is off" in r for r in said)  # the first answer and the final one
    assert not [
        m
        for m in stored_ids(stack, ALICE)
        if not m.startswith("interaction-") and discord.find(m)["author"]["id"] == ALICE
    ]  # none of her own words: Discord gave none
    status = interact(stack, memory_cmd("status", ALICE)).json()["data"]["content"]
    assert "Message Content intent is off" in status


def test_with_the_intent_nothing_is_said_and_system_messages_are_not_stored(stack, discord):
    thread_created = discord.add(C11, {"id": ALICE, "username": "alice"}, "a thread", type=18)
    remembered(stack, discord)
    assert not any("intent" in r for r in replies(discord, "tok-remember"))
    assert "intent" not in interact(stack, memory_cmd("status", ALICE)).json()["data"]["content"]
    assert thread_created["id"] not in stored_ids(stack, ALICE)
    # a reply keeps what it answers (ids only, never that message's words); no roles, which REST never gives
    listed = stack.engine.service.list(APP_ID, kind="message", user=ALICE, limit=500)
    reply = next(m for m in listed if m.saved_by == "bot")
    answered = discord.find(reply.content["replyTo"]["messageId"])
    assert answered["author"]["id"] == reply.content["replyTo"]["authorId"] == ALICE
    assert answered["content"] not in json.dumps(reply.content) and "roles" not in reply.content


def test_a_discord_error_while_planning_a_remember_is_answered_and_leaves_no_consent(stack, discord):
    discord.fail_channel_lists = 1  # the server the command came from: its channels
    interact(stack, memory_cmd("remember", BOB, token="tok-bob"))
    assert wait_until(lambda: replies(discord, "tok-bob"), timeout_s=30)
    assert "not opted in" in replies(discord, "tok-bob")[-1]
    assert "off for you" in interact(stack, memory_cmd("status", BOB)).json()["data"]["content"]


def test_an_export_to_closed_dms_says_so_and_may_be_asked_again(stack, discord):
    remembered(stack, discord)
    discord.closed_dms.add(ALICE)
    interact(stack, memory_cmd("export", ALICE, token="tok-export"))
    assert wait_until(lambda: replies(discord, "tok-export"), timeout_s=30)
    assert "couldn't send you a DM" in replies(discord, "tok-export")[-1]
    discord.closed_dms.clear()
    interact(stack, memory_cmd("export", ALICE, token="tok-export-2"))
    assert wait_until(lambda: replies(discord, "tok-export-2"), timeout_s=30)
    assert replies(discord, "tok-export-2")[-1].startswith("Sent you a DM")


def test_an_answer_longer_than_a_message_comes_in_several(stack, discord):
    discord.answer = " ".join(f"part{i}" for i in range(700))  # ~5,500 characters
    interact(
        stack,
        ask_cmd(ALICE, "Tell me everything.", token="tok-ask"),
    )
    assert wait_until(lambda: len(replies(discord, "tok-ask")) >= 3, timeout_s=60)
    parts = replies(discord, "tok-ask")
    assert all(len(p) <= 2000 for p in parts) and " ".join(parts).split() == discord.answer.split()


def test_channels_the_bot_may_not_read_are_recorded_skipped_and_shown(stack, discord):
    """A 403 channel and one without history (200 []) are read once, marked, and not asked again every
    catch-up tick (each refusal counts toward Discord's 10,000 invalid requests per 10 minutes); no DLQ."""
    from engram.jobs import CatchUpJob

    alice = {"id": ALICE, "username": "alice"}
    discord.channels[G1] += [
        {"id": "1110000000000000015", "type": 0, "name": "staff"},
        {"id": "1110000000000000016", "type": 0, "name": "archive"},
    ]
    discord.history.update({"1110000000000000015": [], "1110000000000000016": []})
    discord.add("1110000000000000015", alice, "staff only")
    discord.add("1110000000000000016", alice, "old news")
    discord.forbidden.add("1110000000000000015")
    discord.no_history.add("1110000000000000016")
    remembered(stack, discord)
    for _ in range(3):  # three catch-up ticks
        stack.engine.queue.send(CatchUpJob())
        stack.poller.drain()
    assert (
        discord.history_reads.count("1110000000000000015") == 1
        and discord.history_reads.count("1110000000000000016") == 1
    )
    status = interact(stack, memory_cmd("status", ALICE)).json()["data"]["content"]
    assert "Channels I may not read: 2" in status
    dlq = stack.sqs.get_queue_url(QueueName="engram-JobsDeadLetterQueue")["QueueUrl"]
    assert (
        stack.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])[
            "Attributes"
        ]["ApproximateNumberOfMessages"]
        == "0"
    )


def test_forget_this_message_removes_one_stored_message_of_its_owner_only(stack, discord):
    remembered(stack, discord)
    mine = next(m for m in discord.history[C21] if m["author"]["id"] == ALICE)
    assert mine["id"] in stored_ids(stack, ALICE)

    def forget_message(user, token):
        body = command("Forget this message", user, guild=G2, channel=C21, token=token)
        body["data"] = {"name": "Forget this message", "type": 3, "target_id": mine["id"]}
        return interact(stack, body)

    assert forget_message(BOB, "tok-bob").json() == {"type": 5, "data": {"flags": 64}}
    assert wait_until(lambda: replies(discord, "tok-bob"), timeout_s=30)
    assert "isn't yours" in replies(discord, "tok-bob")[-1] and mine["id"] in stored_ids(stack, ALICE)
    forget_message(ALICE, "tok-alice")
    assert wait_until(lambda: replies(discord, "tok-alice"), timeout_s=30)
    assert replies(discord, "tok-alice")[-1].startswith("Forgotten") and mine["id"] not in stored_ids(
        stack, ALICE
    )


def test_ask_recalls_only_what_everyone_who_sees_the_answer_may_read(stack, discord):
    """#staff is private (@everyone denied, the staff role allowed): an /ask in #general carries nothing of
    it, even asked by staff; an /ask in #staff may."""
    view = 1 << 10
    discord.roles[G1].append({"id": "1150000000000000001", "name": "staff", "permissions": "0"})
    discord.channels[G1].append(
        {
            "id": "1110000000000000017",
            "type": 0,
            "name": "staff",
            "permission_overwrites": [
                {"id": G1, "type": 0, "allow": "0", "deny": str(view)},
                {"id": "1150000000000000001", "type": 0, "allow": str(view), "deny": "0"},
            ],
        }
    )
    discord.members[(G1, ALICE)] = ["1150000000000000001"]
    discord.history["1110000000000000017"] = []
    discord.add(
        "1110000000000000017",
        {"id": ALICE, "username": "alice"},
        "the staff gardening rota is secret: Tuesdays",
    )
    remembered(stack, discord)

    rota = "What is the gardening rota?"
    in_general = told(stack, discord, rota, G1, C11, "tok-general")
    assert "gardening" in in_general and "Tuesdays" not in in_general  # memories, but none from #staff
    assert "Tuesdays" in told(stack, discord, rota, G1, "1110000000000000017", "tok-staff")


def test_archived_threads_forum_posts_and_voice_chat_are_read(stack, discord):
    """Threads archive after inactivity (most thread history is there), forum posts are threads, and voice
    channels have a text chat: a backfill reads them all; private archived threads need Manage Threads."""
    alice = {"id": ALICE, "username": "alice"}
    discord.channels[G1].append({"id": "1110000000000000018", "type": 15, "name": "ideas"})  # a forum
    for thread in ("1120000000000000019", "1120000000000000020", "1120000000000000022"):
        discord.history[thread] = []
    discord.history[C13] = []
    post = discord.add("1120000000000000019", alice, "a forum post about raised beds, archived long ago")
    old = discord.add("1120000000000000020", alice, "an archived public thread about seed swaps")
    hidden = discord.add("1120000000000000022", alice, "an archived private thread")
    voice = discord.add(C13, alice, "typed in the voice channel's chat")
    meta = {"archived": True, "archive_timestamp": "2026-10-01T00:00:00+00:00"}
    discord.archived = {
        "1110000000000000018": {
            "public": [
                {
                    "id": "1120000000000000019",
                    "type": 11,
                    "parent_id": "1110000000000000018",
                    "thread_metadata": meta,
                }
            ]
        },
        C11: {
            "public": [{"id": "1120000000000000020", "type": 11, "parent_id": C11, "thread_metadata": meta}],
            "private": [{"id": "1120000000000000022", "type": 12, "parent_id": C11, "thread_metadata": meta}],
        },
    }
    remembered(stack, discord)
    stored = set(stored_ids(stack, ALICE))
    assert {post["id"], old["id"], voice["id"]} <= stored and hidden["id"] not in stored
    # the bot may not manage threads (its roles say so): the private listing is never asked, no 403 earned
    assert not [r for r in discord.requests if r.endswith("/threads/archived/private")]
    assert discord.forbidden_answers == 0
    # an archived thread's messages keep their channel, so /ask can tell who may read them
    kept = stack.engine.service.by_source(APP_ID, old["id"])
    assert kept.content["channelId"] == "1120000000000000020" and kept.content["parentId"] == C11


def test_a_catch_up_tick_reads_only_channels_with_new_messages(stack, discord):
    """The channel list carries each channel's last_message_id: a quiet channel costs no job and no read."""
    from engram.jobs import CatchUpJob

    remembered(stack, discord)

    def tick():  # the jobs run on the stack's own pollers: wait until every one of them has run
        stack.engine.queue.send(CatchUpJob())
        stack.settle()

    tick()  # a first tick reads what the backfill left
    before = len(discord.history_reads)
    tick()
    assert discord.history_reads[before:] == []  # nothing moved: nothing read
    new = discord.add(C21, {"id": ALICE, "username": "alice"}, "something new in the lobby")
    tick()
    assert wait_until(lambda: new["id"] in stored_ids(stack, ALICE), timeout_s=20)
    assert discord.history_reads[before:] == [C21]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def tick(stack):
    """One catch-up tick, with every job it queues run (on the stack's own pollers too)."""
    from engram.jobs import CatchUpJob

    stack.engine.queue.send(CatchUpJob())
    stack.settle()


def test_edits_and_deletions_on_discord_reach_memory(stack, discord):
    """resources/message.mdx: an edit keeps the id and sets edited_timestamp; a deleted message is gone from
    the history while the channel's last_message_id still names it. A webhook bot gets no event for
    either: the catch-up re-reads the newest page of a channel it stored from lately."""
    from engram.store.models import MemoryRecord

    remembered(stack, discord)
    alice = {"id": ALICE, "username": "alice"}
    moved = discord.add(C21, alice, "I live in Lisbon by the river", timestamp=_now())
    gone = discord.add(C21, alice, "my locker combination is cobalt-walrus", timestamp=_now())
    after = discord.add(C21, alice, "and I cycle to the harbour", timestamp=_now())
    tick(stack)
    assert wait_until(
        lambda: {moved["id"], gone["id"], after["id"]} <= set(stored_ids(stack, ALICE)), timeout_s=20
    )

    discord.edit(moved["id"], "I live in Porto now, by the sea")
    discord.delete(gone["id"])
    reads = len(discord.history_reads)
    tick(stack)  # nothing new was sent: last_message_id did not move, the window is re-read anyway
    assert C21 in discord.history_reads[reads:]
    assert wait_until(lambda: gone["id"] not in stored_ids(stack, ALICE), timeout_s=20)
    kept = stack.engine.service.by_source(APP_ID, moved["id"])
    assert kept.text == "I live in Porto now, by the sea" and kept.content["message"] == kept.text
    found = stack.engine.service.search(APP_ID, "Porto", user=ALICE, kind="message")
    assert moved["id"] in [m.source_id for m in found]
    # the deleted words are nowhere: not in any record, context or content
    assert wait_until(
        lambda: (
            not [
                r
                for r in MemoryRecord.scan()
                if "cobalt-walrus" in json.dumps({"t": r.text, "c": r.context, "x": r.content})
            ]
        ),
        timeout_s=20,
    )
    assert not [
        m
        for m in stack.engine.service.search(APP_ID, "Lisbon", user=ALICE, kind="message")
        if "Lisbon" in m.text
    ]


def test_a_new_channel_is_paged_in_bounded_jobs_and_ask_reads_one_page(stack, discord):
    """A channel with no newest id read yet is not walked inside /ask: /ask reads its newest page, and the
    rest is paged by catch-up jobs of a few pages each."""
    remembered(stack, discord)
    alice = {"id": ALICE, "username": "alice"}
    discord.channels[G2].append({"id": "1110000000000000023", "type": 0, "name": "new"})
    discord.history["1110000000000000023"] = []
    written = [
        discord.add("1110000000000000023", alice, f"alice in the new channel, note {i}") for i in range(430)
    ]
    reads = len(discord.history_reads)
    interact(
        stack,
        ask_cmd(ALICE, "What did I note?", guild=G2, channel="1110000000000000023", token="tok-ask-new"),
    )
    assert wait_until(lambda: replies(discord, "tok-ask-new"), timeout_s=60)
    assert wait_until(lambda: {m["id"] for m in written} <= set(stored_ids(stack, ALICE)), timeout_s=60)
    # /ask: its newest page and the rolling context; then 3.3 more pages in jobs of at most two pages
    assert discord.history_reads[reads:].count("1110000000000000023") == 2 + 4


def test_a_backfill_reads_only_the_guilds_the_user_is_in(stack, discord):
    """Get Guild Member answers 404 (10007 Unknown Member) for a guild the user is not in: its channels and
    threads are never listed for that user's backfill."""
    del discord.members[(G2, ALICE)]
    reads = len(discord.history_reads)
    remembered(stack, discord)
    assert C21 not in discord.history_reads[reads:]
    assert not {m["id"] for m in discord.history[C21] if m["author"]["id"] == ALICE} & set(
        stored_ids(stack, ALICE)
    )
    # nor does a catch-up read a server where no consenting user is, however busy it is
    discord.add(C21, {"id": BOB, "username": "bob"}, "bob keeps talking in Beta")
    reads = len(discord.requests)
    tick(stack)
    assert not [r for r in discord.requests[reads:] if "/guilds/g2/" in r or C21 in r]
    # she joins Beta: her first /ask there makes it hers, and the catch-up reads it from then on
    discord.members[(G2, ALICE)] = []
    interact(
        stack,
        ask_cmd(ALICE, "Anything about boats?", guild=G2, channel=C21, token="tok-ask-beta"),
    )
    assert wait_until(lambda: replies(discord, "tok-ask-beta"), timeout_s=60)
    joined = discord.add(C21, {"id": ALICE, "username": "alice"}, "alice now sails in Beta")
    tick(stack)
    assert wait_until(lambda: joined["id"] in stored_ids(stack, ALICE), timeout_s=20)


def test_a_backfill_keeps_to_the_rate_limit_buckets_discord_announces(stack, discord):
    """topics/rate-limits.mdx: every answer says how much of its bucket is left and when it resets; a
    client that reads the headers never earns a 429 (each one counts toward the invalid-request ban)."""
    discord.bucket_limit, discord.bucket_window_s = 2, 1.0
    remembered(stack, discord)
    assert discord.history_reads.count(C11) >= 3  # three pages of one bucket: it had to wait for a reset
    assert discord.too_many == 0


def test_ask_keeps_private_threads_age_restricted_and_voice_words_and_decides_any_number_of_roles(
    stack, discord
):
    """Through the signed webhook, the fake serving each case as Discord's docs describe it: a private
    thread (type 12: its members and Manage Threads only), an age-restricted channel (`nsfw`), a voice
    channel whose chat needs CONNECT, denied to @everyone; and a verification-role server of 45 roles, where
    @Member (in no overwrite) sees the server and @Restricted is denied #serious."""
    alice = {"id": ALICE, "username": "alice"}
    view, history, connect = 1 << 10, 1 << 16, 1 << 20
    discord.threads[G1].append({"id": "1120000000000000030", "type": 12, "name": "mods", "parent_id": C11})
    discord.channels[G1] += [
        {"id": "1110000000000000031", "type": 0, "name": "after-dark", "nsfw": True},
        {
            "id": "1110000000000000032",
            "type": 2,
            "name": "locked voice",
            "permission_overwrites": [{"id": G1, "type": 0, "allow": "0", "deny": str(connect)}],
        },
    ]
    discord.roles[G2] = [
        {"id": G2, "name": "@everyone", "permissions": "0"},
        {"id": "1150000000000000002", "name": "Member", "permissions": str(view | history | (1 << 11))},
        {"id": "1150000000000000003", "name": "Restricted", "permissions": "0"},
        *(
            {"id": str(1_160_000_000_000_000_000 + i), "name": f"role {i}", "permissions": "0"}
            for i in range(42)
        ),
    ]
    discord.channels[G2].append(
        {
            "id": "1110000000000000033",
            "type": 0,
            "name": "serious",
            "permission_overwrites": [
                {"id": "1150000000000000003", "type": 0, "allow": "0", "deny": str(view)}
            ],
        }
    )
    discord.members[(G2, ALICE)] = ["1150000000000000002"]
    words = {
        "1120000000000000030": "PRIVATE-FERN",
        "1110000000000000031": "NIGHT-OWL",
        "1110000000000000032": "QUIET-BELL",
        "1110000000000000033": "SERIOUS-OAK",
    }
    for channel, word in words.items():
        discord.history[channel] = []
        discord.add(channel, alice, f"the codeword is {word}")
    remembered(stack, discord)
    assert len(discord.roles[G2]) == 45

    ask = "What is the codeword?"
    in_general = told(stack, discord, ask, G1, C11, "tok-general", {"id": C11, "type": 0})
    assert not [w for w in ("PRIVATE-FERN", "NIGHT-OWL", "QUIET-BELL") if w in in_general]
    assert "PRIVATE-FERN" in told(
        stack,
        discord,
        ask,
        G1,
        "1120000000000000030",
        "tok-thread",
        {"id": "1120000000000000030", "type": 12, "parent_id": C11},
    )
    assert "NIGHT-OWL" in told(
        stack,
        discord,
        ask,
        G1,
        "1110000000000000031",
        "tok-adults",
        {"id": "1110000000000000031", "type": 0, "nsfw": True},
    )
    in_lobby = told(stack, discord, ask, G2, C21, "tok-lobby", {"id": C21, "type": 0})
    assert "SERIOUS-OAK" not in in_lobby
    assert "SERIOUS-OAK" in told(
        stack,
        discord,
        ask,
        G2,
        "1110000000000000033",
        "tok-serious",
        {"id": "1110000000000000033", "type": 0},
    )


def test_an_answer_that_meets_a_429_still_comes_and_a_dead_token_answers_by_dm(stack, discord):
    """topics/rate-limits.mdx: the webhook route answers 429 with retry_after; the /ask answer waits it out
    and is posted through its token. A token that died early (404, 10015 Unknown Webhook) does not lose the
    result: the remember's confirmation comes by DM."""
    discord.webhook_429_once.add("tok-limited")
    interact(
        stack,
        ask_cmd(ALICE, "What do I grow?", token="tok-limited"),
    )
    assert wait_until(lambda: replies(discord, "tok-limited"), timeout_s=60)
    assert replies(discord, "tok-limited") == [discord.answer]
    assert not [s for s in discord.sent if s.get("channel") == dm_channel(ALICE)]
    discord.dead_tokens.add("tok-dead")
    interact(stack, memory_cmd("remember", ALICE, token="tok-dead"))
    assert wait_until(
        lambda: [
            s for s in discord.sent if s.get("channel") == dm_channel(ALICE) and "Backfill" in s["content"]
        ],
        timeout_s=60,
    )


def test_ask_where_the_bot_may_not_read_makes_no_read_discord_would_refuse(stack, discord):
    """The interaction carries `app_permissions`, the bot's own in the channel: without View Channel and Read
    Message History there, /ask reads nothing of it (each refusal counts toward Discord's invalid-request
    limit) and still answers."""
    discord.forbidden.add(C12)
    body = ask_cmd(ALICE, "What do I grow?", channel=C12, token="tok-unread")
    body["app_permissions"] = str(1 << 11)  # Send Messages only
    reads = len(discord.history_reads)
    interact(stack, body)
    assert wait_until(lambda: replies(discord, "tok-unread"), timeout_s=60)
    assert C12 not in discord.history_reads[reads:]


def test_an_ask_answer_goes_when_someone_it_drew_on_forgets_and_words_of_others_are_not_sent(stack, discord):
    """Issue 30, path 4: Bob's stored /ask answer was made from Alice's memories and still quoted them after
    she forgot; the rolling context sent words of people who never opted in (Carol)."""
    remembered(stack, discord)
    discord.add(C11, {"id": "1003", "username": "carol"}, "carol's locker word is amberwolf")
    interact(stack, memory_cmd("remember", BOB, token="tok-bob"))
    assert wait_until(
        lambda: any("Backfill complete" in r for r in replies(discord, "tok-bob")), timeout_s=90
    )
    discord.answer = "Alice writes about gardening."
    asked = len(discord.chat_requests)
    ask = ask_cmd(BOB, "What about gardening?", token="tok-bob-ask")
    interact(stack, ask)
    service = stack.engine.service

    def answers() -> list:
        stored = service.list(APP_ID, kind="message", user=BOB, limit=500)
        return [m for m in stored if (m.content or {}).get("viaCommand") is None and m.saved_by == "bot"]

    assert wait_until(lambda: answers(), timeout_s=60)
    told = json.dumps(discord.chat_requests[asked:])
    assert "gardening" in told and "amberwolf" not in told  # Carol never opted in: her words stay out
    answer = answers()[0]
    assert answer.content["drewOn"] == [ALICE]
    interact(stack, memory_cmd("forget", ALICE, token="tok-forget"))
    assert wait_until(lambda: any("Forgotten" in r for r in replies(discord, "tok-forget")), timeout_s=60)
    assert answers() == []  # the answer made from her words went with them
    assert [m for m in service.list(APP_ID, kind="message", user=BOB, limit=500) if m.text.startswith("bob")]


def test_a_catch_up_job_reads_consent_only_for_the_people_on_its_page(stack, discord):
    """Issue 32: a channel's catch-up reads the consent of its page's authors (one batch of keys), never
    every consent of the bot: its work is bounded by its page, not by how many have opted in."""
    from pynamodb.connection.base import Connection

    remembered(stack, discord)
    state = stack.discord.core.state
    for n in range(300):  # others opted in elsewhere: nothing a page of this channel needs
        state.consents.give(APP_ID, f"77{n:05d}", at=1, guilds=["1100000000000000999"])
    stack.discord.catch_up.catch_up(channels=[(G2, C21)])  # the backfill's page, read once
    bob = {"id": BOB, "username": "bob"}
    new = discord.add(C21, {"id": ALICE, "username": "alice"}, "the ferry leaves at noon", timestamp=_now())
    discord.add(C21, bob, "noted", timestamp=_now())
    consent_keys: list[str] = []
    call = Connection._make_api_call

    def counted(connection, operation, kwargs):
        if operation == "BatchGetItem":
            for table in kwargs["RequestItems"].values():
                sks = [k.get("sk", {}).get("S", "") for k in table["Keys"]]
                consent_keys.extend(sk for sk in sks if sk.startswith("consent#"))
        if operation == "Query":
            values = json.dumps(kwargs.get("ExpressionAttributeValues", {}))
            assert "consent#" not in values or kwargs.get("Limit") == 1, "a query of every consent"
        return call(connection, operation, kwargs)

    Connection._make_api_call = counted
    try:
        stored = stack.discord.catch_up.catch_up(channels=[(G2, C21)])
    finally:
        Connection._make_api_call = call
    assert stored == 1 and new["id"] in stored_ids(stack, ALICE)
    assert sorted(consent_keys) == sorted({f"consent#{ALICE}", f"consent#{BOB}"})


def test_a_tick_re_reads_a_bounded_number_of_quiet_windows_those_read_longest_ago_first(stack, discord):
    """Issue 32: edits and deletions are looked for within DISCORD_WINDOW_BUDGET quiet channels a tick, not
    in every channel holding a message stored this week (at 10,000 servers, far past Discord's 50/s)."""
    remembered(stack, discord)
    alice = {"id": ALICE, "username": "alice"}
    ids = [discord.add(c, alice, f"a recent message in {c}", timestamp=_now())["id"] for c in (C11, C21)]
    tick(stack)
    assert wait_until(lambda: set(ids) <= set(stored_ids(stack, ALICE)), timeout_s=20)
    catch_up = stack.discord.catch_up
    catch_up.settings = catch_up.settings.model_copy(update={"window_budget": 1})
    read = []
    for _ in range(2):
        before = len(discord.history_reads)
        tick(stack)
        read.append(discord.history_reads[before:])
    assert [len(r) for r in read] == [1, 1] and read[0] != read[1]  # the other one waited a tick


def test_a_catch_up_gap_delivered_twice_queues_each_of_its_jobs_once(stack, discord, monkeypatch):
    """Issue 46: a gap older than a channel's newest page is read a few pages a job, each job queuing the
    next. SQS delivers at least once: a job delivered twice queued the rest of the gap twice, and each copy
    went on to the gap's end, doubling with every duplicate of its own. Every job here is run twice."""
    from engram.clock import now_ms
    from engram.jobs import CatchUpJob

    remembered(stack, discord)
    alice = {"id": ALICE, "username": "alice"}
    ids = [discord.add(C21, alice, f"gap message {n}", timestamp=_now())["id"] for n in range(450)]
    queued: list[CatchUpJob] = []
    monkeypatch.setattr(
        stack.discord.core, "queue", type("Recorder", (), {"send": lambda _, job, **kw: queued.append(job)})()
    )
    pending = [
        CatchUpJob(guild=G2, channel=C21, before=str(int(ids[-1]) + 1), until=None, issued_at=now_ms())
    ]
    runs = 0
    while pending:
        job = pending.pop()
        for _ in range(2):  # delivered twice
            stack.discord.catch_up.catch_up_gap(job)
        runs += 1
        pending, queued[:] = list(queued), []
        assert len(pending) <= 1, pending
    assert runs == 3  # 450 messages, two pages of 100 a job
    assert set(ids) <= set(stored_ids(stack, ALICE))
