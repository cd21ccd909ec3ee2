"""Forget leaves nothing behind, proved the way a careful user would check it: `make run` as a process with
a fake Discord, a fake model and a fake extractor; a user's words carry unique canary words through every
front door (Discord backfill and /ask, a LibreChat turn and its extraction, the Memory API's facts and chat
messages, other people's replies that quote them); the user is forgotten; then every store the stack has
is searched for the canaries — search, list and export over HTTP, what the model is told, and, with the
stack stopped, every DynamoDB item (the local DynamoDB scanned), every Qdrant point (payloads and sparse
word indices), the SQS journal and the stack's own log."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import Counter

import httpx
import pytest

from engram.words import term_index, terms
from infra.local_dynamodb import LocalDynamoDB
from tests.fake_discord import ALICE, APP_ID, BOB, C11, C21, G2, FakeDiscord
from tests.fake_upstream import FakeUpstream
from tests.integration.test_crash_recovery import environment, interact, memory_command
from tests.local_process import PROXY_KEY, Stack, free_port
from tests.support import wait_until

# One canary per path a person's words take into engram
CANARIES = {
    "discord backfill": "vexmorrow",
    "discord reply context": "glimtharn",
    "discord /ask prompt": "plonkquist",
    "librechat turn": "brazzelwick",
    # her LibreChat display name, which the facts extracted from her turn keep as their author's
    "librechat user name": "quillanore",
    "memory api fact": "umbertrix",
    "memory api fact context": "sollivane",
    "memory api message": "drabbenfoy",
    # an answer the bot made for Bob from her words (its drewOn names her)
    "discord answer drawn on her": "frobisham",
    # an import of her lines into a bot, one stored before her forget and 1,200 racing it
    "memory api import race": "kestrelbine",
    # not forgotten: one memory deleted, one changed; their old text must leave the next fact's context too
    "memory api deleted message": "qwibbleton",
    "memory api changed message": "zentravia",
}
BOTS = (APP_ID, "librechat", "notes")


def turn(
    stack: Stack, user: str, text: str, conversation: str = "conv-1", name: str | None = None
) -> httpx.Response:
    """A LibreChat turn; `name`: the user's name LibreChat fills in ({{LIBRECHAT_USER_NAME}}), which the
    facts extracted from it keep (sent before the forget only: what comes after it is new)."""
    return httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        timeout=30,
        headers={
            "Authorization": f"Bearer {PROXY_KEY}",
            "x-librechat-user-id": user,
            "x-librechat-conversation-id": conversation,
            **({"x-librechat-user-name": name} if name else {}),
        },
        json={"model": "m", "messages": [{"role": "user", "content": text}]},
    )


def ask(stack: Stack, user: str, prompt: str, token: str) -> httpx.Response:
    body = memory_command("remember", user, token)
    body["data"] = {"name": "ask", "options": [{"type": 3, "name": "prompt", "value": prompt}]}
    body["channel_id"], body["guild_id"] = C21, G2
    return interact(stack, body)


def imported(n: int) -> str:
    """The nth line of an import of Alice's chat lines into the notes bot."""
    text = f"alice's imported line {n} says {CANARIES['memory api import race']}"
    line = {
        "kind": "message",
        "text": text,
        "userId": "alice",
        "threadId": "t-imp",
        "sourceMessageId": f"i{n}",
    }
    return json.dumps(line)


def everything_over_http(stack: Stack) -> str:
    """Every list, search and export the Memory API gives, as one text."""
    out = []
    for bot in BOTS:
        for kind in ("fact", "message"):
            out.append(stack.api.get(f"/v1/bots/{bot}/memories", params={"kind": kind, "limit": 500}).text)
            for canary in CANARIES.values():
                out.append(
                    stack.api.get(f"/v1/bots/{bot}/memories", params={"kind": kind, "query": canary}).text
                )
        out.append(stack.api.get(f"/v1/bots/{bot}/export").text)
    return "\n".join(out)


def found(text: str) -> list[str]:
    return [path for path, canary in CANARIES.items() if canary in text.lower()]


def catch_up_ticks(stack, discord, ticks: int = 2) -> None:
    """Wait for the stack's next catch-up ticks (the fake Discord sees each visit the roster's servers and
    list their channels: Bob still consents) and for every job they queued to have run, instead of a fixed
    time."""

    def listings() -> int:
        visits = Counter(
            r for r in discord.requests if r.startswith("GET /guilds/") and r.endswith("/channels")
        )
        return max(visits.values(), default=0)

    seen = listings()
    assert wait_until(lambda: listings() >= seen + ticks, timeout_s=30)
    stack.settle()


@pytest.fixture(scope="module")
def fakes():
    discord, upstream, extractor = FakeDiscord().start(), FakeUpstream().start(), FakeUpstream().start()
    # Alice says something with a canary in Beta; Bob answers right after (his reply's context quotes her)
    alice, bob = {"id": ALICE, "username": "alice"}, {"id": BOB, "username": "bob"}
    discord.add(C21, alice, f"My locker code is {CANARIES['discord backfill']}, don't tell anyone")
    spare = discord.add(C21, alice, f"and the spare one is {CANARIES['discord reply context']}")
    # a Discord reply: its content names her message and her (replyTo), which her forget clears
    discord.add(
        C21, bob, "noted, I will keep it to myself", referenced_message={"id": spare["id"], "author": alice}
    )
    # her message is the last of a channel: where catch-up stands there must not be its id
    discord.add(C11, alice, "see you all tomorrow")
    yield discord, upstream, extractor
    for fake in (discord, upstream, extractor):
        fake.gate.release()
        fake.stop()


@pytest.fixture(scope="module")
def forgotten(tmp_path_factory, fakes):
    """A stack that held Alice's words through every door, then forgot her; stopped at the end."""
    discord, upstream, extractor = fakes
    data = tmp_path_factory.mktemp("residue")
    env = {**environment(discord, upstream, extractor), "ENGRAM_SQS_PORT": str(free_port())}
    stack = Stack(data, env).start()
    api = stack.api
    # Discord: both opt in; the backfill stores Alice's canaries and Bob's reply that quotes them
    for user in (ALICE, BOB):
        interact(stack, memory_command("remember", user, f"tok-remember-{user}"))
        assert wait_until(
            lambda user=user: any(
                "Backfill complete" in s.get("content", "")
                for s in discord.sent
                if s.get("token") == f"tok-remember-{user}"
            ),
            timeout_s=90,
        )
    assert (
        ask(stack, ALICE, f"What did I say about {CANARIES['discord /ask prompt']}?", "tok-ask").json()[
            "type"
        ]
        == 5
    )
    assert wait_until(lambda: any(s.get("token") == "tok-ask" for s in discord.sent), timeout_s=60)
    # Bob asks about her words: the bot's answer is made from them (drewOn names her) and goes with her
    discord.answer = f"Alice keeps her locker code {CANARIES['discord answer drawn on her']} to herself."
    assert ask(stack, BOB, "What is the locker code Alice told us?", "tok-ask-bob").json()["type"] == 5
    assert wait_until(lambda: any(s.get("token") == "tok-ask-bob" for s in discord.sent), timeout_s=60)
    discord.answer = "Here is what I remember."
    # LibreChat: a turn whose extraction stores a fact, a chat setting, a warm recall cache
    her_name = f"Alice {CANARIES['librechat user name'].title()}"
    said = f"My favourite dessert is {CANARIES['librechat turn']}."
    assert turn(stack, "alice", said, name=her_name).status_code == 200
    facts = lambda: api.get("/v1/bots/librechat/memories", params={"userId": "alice"}).json()["memories"]  # noqa: E731
    assert wait_until(lambda: any(CANARIES["librechat turn"] in m["text"] for m in facts()), timeout_s=60)
    assert turn(stack, "alice", "What do I like for dessert?").status_code == 200  # recall, cached
    assert turn(stack, "alice", "/memory off", conversation="conv-2").status_code == 200
    # Memory API: two facts in a row (the second's context is the first), a thread Bob answers in
    for text in (
        f"My cat is called {CANARIES['memory api fact']}.",
        f"My dog is called {CANARIES['memory api fact context']}.",
    ):
        assert api.post("/v1/bots/notes/memories", json={"text": text, "userId": "alice"}).status_code == 201
    assert (
        api.post(
            "/v1/bots/notes/messages",
            json={
                "messages": [
                    {
                        "id": "n1",
                        "text": f"The wifi password is {CANARIES['memory api message']}",
                        "userId": "alice",
                        "threadId": "t1",
                        "createdAt": "2026-11-01T10:00:00Z",
                    },
                    {
                        "id": "n2",
                        "text": "thanks, connected",
                        "userId": "bob",
                        "threadId": "t1",
                        "createdAt": "2026-11-01T10:01:00Z",
                    },
                ]
            },
        ).status_code
        == 200
    )
    assert api.post("/v1/bots/notes/import", content=imported(0)).json()["messages"]["created"] == 1
    # Carol is not forgotten: she deletes one message and changes another, each quoted by her next one in
    # the thread (its context; a fact keeps none since 1.4)
    said = [
        f"My boat is the {CANARIES['memory api deleted message']}.",
        "It has two masts.",
        f"My tent is a {CANARIES['memory api changed message']}.",
        "It sleeps four.",
    ]
    batch = [
        {
            "id": f"carol-{i}",
            "text": text,
            "userId": "carol",
            "threadId": "camp",
            "createdAt": f"2026-05-0{i + 1}T09:00:00Z",
        }
        for i, text in enumerate(said)
    ]
    ids = api.post("/v1/bots/notes/messages", json={"messages": batch}).json()["ids"]
    deleted, changed = {"id": ids[0]}, {"id": ids[2]}
    before = everything_over_http(stack)
    assert set(found(before)) == set(CANARIES), "every canary must be stored somewhere before the forget"

    assert api.delete(f"/v1/bots/notes/memories/{deleted['id']}").status_code == 204
    assert (
        api.patch(f"/v1/bots/notes/memories/{changed['id']}", json={"text": "My tent is a dome."}).status_code
        == 200
    )
    # the change kept her old text in the memory's history; Carol clears it (DELETE …/history)
    assert api.delete(f"/v1/bots/notes/memories/{changed['id']}/history").status_code == 204
    # Forget Alice through three doors: Discord's /memory forget, the proxy's command, the Memory API
    interact(stack, memory_command("forget", ALICE, "tok-forget"))
    assert wait_until(
        lambda: any(
            "Forgotten" in s.get("content", "") for s in discord.sent if s.get("token") == "tok-forget"
        )
    )
    assert "Forgotten" in turn(stack, "alice", "/memory forget everything").text
    # the Memory API's forget lands while an import of 1,200 of her lines is under way
    racing: list[httpx.Response] = []
    lines = "\n".join(imported(n) for n in range(1, 1201))
    importing = threading.Thread(
        target=lambda: racing.append(
            httpx.post(f"{stack.url}/v1/bots/notes/import", content=lines, headers=api.headers, timeout=300)
        )
    )
    importing.start()

    def racing_lines_stored() -> bool:  # the import has arrived (and stores): the forget lands mid-way
        listed = api.get(
            "/v1/bots/notes/memories", params={"kind": "message", "userId": "alice", "limit": 500}
        )
        return any(m.get("sourceMessageId") not in ("i0", "n1") for m in listed.json()["memories"])

    assert wait_until(racing_lines_stored, timeout_s=60, every_s=0.02)
    gone = api.delete("/v1/bots/notes/users/alice/memories")
    importing.join()
    assert gone.status_code == 200 and racing[0].status_code == 200
    catch_up_ticks(stack, discord)  # nothing may come back
    yield stack, data, upstream, gone.json()["deleted"]
    stack.stop()


def test_search_list_and_export_find_none_of_the_forgotten_words(forgotten):
    stack, _, _, deleted = forgotten
    assert found(everything_over_http(stack)) == []
    assert (
        deleted["contexts"] == 1 and deleted["facts"] == 2 and deleted["messages"] >= 2
    )  # Bob's reply, cleared; her message and what was stored of her import before the forget
    # what stays of the others: Bob's reply, its context gone
    bob = stack.api.get("/v1/bots/notes/memories", params={"kind": "message", "userId": "bob"}).json()[
        "memories"
    ]
    assert [m["text"] for m in bob] == ["thanks, connected"]
    exported = [json.loads(line) for line in stack.api.get("/v1/bots/notes/export").text.splitlines()]
    assert [line.get("context") for line in exported if line.get("userId") == "bob"] == [None]


def test_a_deleted_or_changed_memory_leaves_the_context_of_the_next(forgotten):
    stack = forgotten[0]
    carol = [
        line
        for line in map(
            json.loads, stack.api.get("/v1/bots/notes/export", params={"userId": "carol"}).text.splitlines()
        )
        if line.get("threadId") == "camp"
    ]
    assert [(line["text"], line.get("context")) for line in carol] == [
        ("It has two masts.", None),
        ("My tent is a dome.", "It has two masts."),
        ("It sleeps four.", None),
    ]
    # (their word vectors are checked with the index on disk: no point keeps the old words' indices)


def test_the_model_is_told_nothing_of_the_forgotten_user(forgotten):
    stack, _, upstream, _ = forgotten
    told = len(upstream.chats())
    assert (
        turn(stack, "alice", "What do I like for dessert?").status_code == 200
    )  # the cached recall of before
    sent = json.dumps(upstream.chats()[told:])
    assert sent and found(sent) == []


def test_discord_says_the_user_is_off_and_stores_nothing_new(forgotten, fakes):
    stack, _, _, _ = forgotten
    discord = fakes[0]
    status = interact(stack, memory_command("status", ALICE, "tok-status")).json()["data"]["content"]
    assert "off for you" in status
    new = discord.add(C21, {"id": ALICE, "username": "alice"}, "a message after the forget")
    catch_up_ticks(stack, discord)
    listed = stack.api.get(f"/v1/bots/{APP_ID}/memories", params={"kind": "message", "userId": ALICE}).json()
    assert listed["memories"] == [] and new["id"] not in json.dumps(listed)


def test_no_store_on_disk_holds_the_forgotten_words(forgotten, fakes):
    """With the stack stopped: every item of the local DynamoDB, every point of the index (payloads and
    sparse word indices), every row of the SQS journal, and the stack's log."""
    stack, data, _, _ = forgotten
    stack.stop()
    log = "".join(p.read_text() for p in data.glob("stack-*.log"))
    assert found(log) == []
    # nor her id, the ids of her messages, or a live interaction's token: the log keeps no person
    people = {m["id"] for ms in fakes[0].history.values() for m in ms if m["author"]["id"] == ALICE}
    tokens = set(fakes[0].interactions)
    assert [x for x in {ALICE, *people, *tokens} if x in log] == []

    # the raw bytes of LevelDB's tables and logs (dynalite compacts after every forget), of the journal's
    # files (secure_delete, its WAL truncated) and of the embedded index's segments and WAL (rewritten from
    # its live points): not only what a read returns, what a grep of the disk finds
    files = [
        *(data / "dynamodb").rglob("*"),
        *data.glob("queue-journal.sqlite*"),
        *(data / "qdrant").rglob("*"),
    ]
    raw = b"".join(f.read_bytes() for f in files if f.is_file())
    holding = [str(f) for f in files if f.is_file() and found(f.read_bytes().decode("latin-1"))]
    assert found(raw.decode("latin-1")) == [], holding

    journal = sqlite3.connect(data / "queue-journal.sqlite")
    rows = [row[0] for row in journal.execute("SELECT body FROM messages")]
    journal.close()
    assert found("\n".join(rows)) == []

    dynamodb = LocalDynamoDB(data / "dynamodb").start()
    try:
        import boto3

        client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint, region_name="us-east-1")
        items = []
        for table in client.list_tables()["TableNames"]:
            for page in client.get_paginator("scan").paginate(TableName=table):
                items += page["Items"]
    finally:
        dynamodb.stop()
    assert items and found(json.dumps(items)) == []
    # the tombstones are all that names Alice in the state table: her id and when
    named = [i for i in items if "pk" in i and i["sk"]["S"] in (ALICE, "alice")]
    assert {i["pk"]["S"] for i in named} == {f"forgotten#{APP_ID}", "forgotten#librechat", "forgotten#notes"}
    # and no other item's key or value holds her id or the id of a message of hers (replies, windows, ...)
    hers = {m["id"] for ms in fakes[0].history.values() for m in ms if m["author"]["id"] == ALICE}
    # an id whole, alone or part of a composite value ("notes#alice": a claim's owner, a record's botUser)
    # or inside a JSON value held as a string (a channel's {"newest": ...}): bounded by anything not a word
    an_id = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(x) for x in hers | {ALICE, "alice"}) + r")(?!\w)")
    naming = [i for i in items if i not in named and an_id.search(json.dumps(i))]
    assert naming == []

    from engram.vectors.edge import EdgeIndex

    index = EdgeIndex(data / "qdrant" / "engram")  # the collection ENGRAM_COLLECTION names
    try:
        points = index.every_point()
    finally:
        index.close()
    assert points and found(json.dumps([p.payload for p in points])) == []
    canary_terms = {term_index(t): path for path, canary in CANARIES.items() for t in terms(canary)}
    in_index = {canary_terms[i] for p in points for i in p.words.indices if i in canary_terms}
    assert in_index == set()
