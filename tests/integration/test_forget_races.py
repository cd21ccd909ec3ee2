"""A forgotten user stays forgotten: `make run` as a process, the user forgotten while each kind of job is in
flight (a backfill page, a remember, a catch-up, /ask, an extraction, an index job) or delivered after the
forget although made before it (a retry, a job moved back from the dead-letter queue, an import of an old
export, a journal replayed after kill -9) — and nothing of theirs is stored afterwards."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from engram.jobs import BackfillJob, CatchUpJob, ExportJob, ExtractJob, IndexJob, RememberJob
from tests.fake_discord import ALICE, APP_ID, C21, G2, FakeDiscord
from tests.fake_upstream import FakeUpstream
from tests.integration.test_crash_recovery import environment, interact, memory_command
from tests.local_process import PROXY_KEY, Stack, free_port
from tests.support import key_names, wait_until


@pytest.fixture
def fakes():
    discord, upstream, extractor, embedder = (
        FakeDiscord().start(),
        FakeUpstream().start(),
        FakeUpstream().start(),
        FakeDiscord().start(),
    )
    yield discord, upstream, extractor, embedder
    for fake in (discord, upstream, extractor, embedder):
        fake.gate.release()
        fake.stop()


@pytest.fixture
def stack(tmp_path, fakes):
    discord, upstream, extractor, embedder = fakes
    # embeddings from a fake of their own, so holding Discord (or the chat model) never holds a forget
    env = {
        **environment(discord, upstream, extractor),
        "ENGRAM_OLLAMA_URL": embedder.url,
        "ENGRAM_SQS_PORT": str(free_port()),
        "ENGRAM_DYNAMODB_PORT": str(free_port()),
    }
    s = Stack(tmp_path, env).start()
    yield s
    s.stop()


def send_job(stack: Stack, job, queue: str) -> None:
    """Put a job straight on the stack's queue, as a retry or a DLQ redrive delivers it."""
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=f"engram-{queue}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=job.model_dump_json())


def remembered(stack: Stack, discord) -> None:
    """Alice opts in, and her backfill is complete."""
    interact(stack, memory_command("remember", ALICE, "tok-remember"))
    assert wait_until(
        lambda: any("Backfill complete" in s.get("content", "") for s in discord.sent), timeout_s=90
    )


def forget(stack: Stack, bot: str, user: str) -> dict:
    r = stack.api.delete(f"/v1/bots/{bot}/users/{user}/memories")
    assert r.status_code == 200, r.text
    return r.json()["deleted"]


def held(fake, what: str) -> None:
    assert wait_until(lambda: fake.gate.held > 0, timeout_s=30), f"{what} never reached its dependency"


def discord_messages(stack: Stack, user: str = ALICE) -> list[dict]:
    return stack.api.get(
        f"/v1/bots/{APP_ID}/memories", params={"kind": "message", "userId": user, "limit": 500}
    ).json()["memories"]


def facts(stack: Stack, bot: str, user: str) -> list[dict]:
    return stack.api.get(f"/v1/bots/{bot}/memories", params={"userId": user, "limit": 500}).json()["memories"]


def status(stack: Stack, user: str = ALICE) -> str:
    return interact(stack, memory_command("status", user, "tok-status")).json()["data"]["content"]


def chat(stack: Stack, user: str, text: str) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/oa/v1/chat/completions",
        timeout=30,
        headers={
            "Authorization": f"Bearer {PROXY_KEY}",
            "x-librechat-user-id": user,
            "x-librechat-conversation-id": "conv-1",
        },
        json={"model": "m", "messages": [{"role": "user", "content": text}]},
    )


def test_a_backfill_page_in_flight_stores_nothing_after_the_forget(stack, fakes):
    discord = fakes[0]
    interact(stack, memory_command("remember", ALICE, "tok-remember"))
    assert wait_until(lambda: len(discord_messages(stack)) > 0, timeout_s=60)  # the first pages are in
    discord.gate.hold()  # the next link waits on its page
    held(discord, "the next backfill link")
    forget(stack, APP_ID, ALICE)
    discord.gate.release()
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert discord_messages(stack) == []
    assert "off for you" in status(stack)


def test_a_remember_in_flight_or_retried_after_the_forget_does_not_opt_the_user_back_in(stack, fakes):
    discord = fakes[0]
    asked = int(time.time() * 1000)
    discord.gate.hold()
    interact(stack, memory_command("remember", ALICE, "tok-remember"))
    held(discord, "the remember job")
    forget(stack, APP_ID, ALICE)
    discord.gate.release()
    # ... and the same remember delivered again later (a retry, a DLQ redrive)
    send_job(stack, RememberJob(user=ALICE, token="tok-old", issued_at=asked), "InteractiveQueue")
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert "off for you" in status(stack)
    assert discord_messages(stack) == []
    # a new /memory remember, after the forget, is what opts them in again
    interact(stack, memory_command("remember", ALICE, "tok-again"))
    assert wait_until(lambda: len(discord_messages(stack)) > 0, timeout_s=60)


def test_a_backfill_link_and_a_catch_up_made_before_the_forget_store_nothing_after_it(stack, fakes):
    discord = fakes[0]
    remembered(stack, discord)
    forget(stack, APP_ID, ALICE)
    assert discord_messages(stack) == []
    discord.add(C21, {"id": ALICE, "username": "alice"}, "written just after the forget")
    send_job(
        stack,
        BackfillJob(user=ALICE, guild=G2, channel=C21, run="the-run-before", step=0, origin=1),
        "JobsQueue",
    )
    send_job(stack, CatchUpJob(guild=G2, channel=C21, issued_at=1), "JobsQueue")
    # and a /memory export asked for before the forget (issue 30, path 8: it wrote an export slot back)
    send_job(stack, ExportJob(user=ALICE, token="tok-x", issued_at=1), "InteractiveQueue")
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert discord_messages(stack) == []
    # no state item names her but the tombstone: no cursor the backfill link saved, no export slot
    client = stack.client("dynamodb")
    items = client.scan(TableName="engram-state")["Items"]
    naming = [
        (i["pk"]["S"], i["sk"]["S"])
        for i in items
        if key_names(i["pk"]["S"], ALICE) or key_names(i["sk"]["S"], ALICE)
    ]
    assert naming == [(f"forgotten#{APP_ID}", ALICE)]


def test_a_catch_up_in_flight_stores_nothing_after_the_forget(stack, fakes):
    discord = fakes[0]
    remembered(stack, discord)
    discord.add(C21, {"id": ALICE, "username": "alice"}, "a new message the catch-up will read")
    discord.gate.hold()  # the next catch-up tick (every 2 s) waits on Discord
    held(discord, "the catch-up")
    forget(stack, APP_ID, ALICE)
    discord.gate.release()
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert discord_messages(stack) == []


def test_an_ask_in_flight_stores_neither_prompt_nor_answer_after_the_forget(stack, fakes):
    discord = fakes[0]
    remembered(stack, discord)
    body = memory_command("remember", ALICE, "tok-ask")
    body["data"] = {
        "name": "ask",
        "options": [{"type": 3, "name": "prompt", "value": "what about the quokka plan?"}],
    }
    discord.gate.hold()
    interact(stack, body)
    held(discord, "the /ask job")
    forget(stack, APP_ID, ALICE)
    discord.gate.release()
    assert wait_until(
        lambda: any(s.get("token") == "tok-ask" for s in discord.sent), timeout_s=60
    )  # it answered
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert discord_messages(stack) == []


def test_an_extraction_in_flight_or_redriven_stores_nothing_after_the_forget(stack, fakes):
    extractor = fakes[2]
    extractor.gate.hold()
    assert chat(stack, "alice", "My favourite island is Vexholm.").status_code == 200
    held(extractor, "the extraction")
    forget(stack, "librechat", "alice")
    extractor.gate.release()
    # the same extraction delivered again from before the forget (a DLQ redrive)
    send_job(
        stack,
        ExtractJob(
            bot="librechat",
            user="alice",
            conversation="conv-1",
            upstream="oa",
            model="m",
            user_text="My favourite island is Vexholm.",
            queued_at=1,
        ),
        "JobsQueue",
    )
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert facts(stack, "librechat", "alice") == []
    # what the user says after the forget is new, and is remembered
    assert chat(stack, "alice", "My new town is Porto.").status_code == 200
    assert wait_until(
        lambda: [m["text"] for m in facts(stack, "librechat", "alice")] == ["The user's new town is Porto."],
        timeout_s=30,
    )


def test_an_index_job_in_flight_leaves_no_searchable_point_and_no_stub(stack, fakes):
    embedder = fakes[3]
    ids = [
        int(
            stack.api.post(
                "/v1/bots/notes/memories",
                json={"text": f"Alice hid note {i} under the quokka stone.", "userId": "alice"},
            )
            .json()["id"]
            .split(":")[1]
        )
        for i in range(3)
    ]
    # a rebuild writes every point again: it waits on the embedder with the records in hand
    embedder.gate.hold()
    assert stack.api.post("/v1/index/rebuild", params={"bot": "notes"}).status_code == 202
    held(embedder, "the rebuild")
    forget(stack, "notes", "alice")
    send_job(stack, IndexJob(bot="notes", ids=ids), "JobsQueue")  # and an index job from before, after
    embedder.gate.release()
    assert wait_until(lambda: stack.api.get("/v1/index").json()["last"] == "rebuilding", timeout_s=30)
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert stack.api.get("/v1/bots/notes/memories", params={"query": "quokka stone"}).json()["memories"] == []
    assert facts(stack, "notes", "alice") == []
    for memory_id in ids:  # no stub record written back by the rebuild's marks
        assert stack.api.get(f"/v1/bots/notes/memories/{memory_id}").status_code == 404


def test_an_import_of_an_export_taken_before_the_forget_brings_nothing_back(stack):
    api = stack.api
    api.post("/v1/bots/notes/memories", json={"text": "Alice's bike lock is 4417.", "userId": "alice"})
    api.post(
        "/v1/bots/notes/messages",
        json={
            "messages": [
                {
                    "id": "a1",
                    "text": "my bike lock is 4417",
                    "userId": "alice",
                    "threadId": "t",
                    "createdAt": "2026-11-01T10:00:00Z",
                },
                {
                    "id": "b1",
                    "text": "got it",
                    "userId": "bob",
                    "threadId": "t",
                    "createdAt": "2026-11-01T10:01:00Z",
                },
            ]
        },
    )
    export = api.get("/v1/bots/notes/export").text
    # the words, not the bare digits: the export's memory ids may hold any four digits
    assert "lock is 4417" in export
    forget(stack, "notes", "alice")
    result = api.post("/v1/bots/notes/import", content=export).json()
    assert len([e for e in result["errors"] if "forgotten" in e["error"]]) == 2
    assert "lock is 4417" not in api.get("/v1/bots/notes/export").text
    # the export's dates are only what it says: a line dated after the forget is refused all the same
    future = "\n".join(
        json.dumps(
            {**json.loads(line), "createdAt": "2099-01-01T00:00:00Z", "updatedAt": "2099-01-01T00:00:00Z"}
        )
        for line in export.splitlines()
        if "lock is 4417" in line
    )
    result = api.post("/v1/bots/notes/import", content=future).json()
    assert len([e for e in result["errors"] if "forgotten" in e["error"]]) == 2
    assert "lock is 4417" not in api.get("/v1/bots/notes/export").text


def test_history_stored_after_a_forget_stays_whatever_its_own_dates(stack):
    """A forgotten user who opts in again has their history stored anew, with the dates it was written on
    (before the forget): the jobs that finish an interrupted forget compare the forget with when engram
    received each record, so a rebuild keeps it."""
    api = stack.api
    api.post("/v1/bots/again/memories", json={"text": "Carol's boat is the Petrel.", "userId": "carol"})
    forget(stack, "again", "carol")
    old = {
        "id": "c-old",
        "text": "my boat is the Petrel",
        "userId": "carol",
        "createdAt": "2024-05-01T10:00:00Z",
    }
    assert api.post("/v1/bots/again/messages", json={"messages": [old]}).json()["created"] == 1
    stack.settle()
    assert api.post("/v1/index/rebuild", params={"bot": "again"}).status_code == 202
    stack.settle()
    listed = api.get("/v1/bots/again/memories", params={"kind": "message", "userId": "carol"}).json()
    assert [m["text"] for m in listed["memories"]] == ["my boat is the Petrel"]


def test_a_journal_replayed_after_kill_9_brings_nothing_back(stack, fakes):
    extractor = fakes[2]
    extractor.gate.hold()
    assert chat(stack, "alice", "My home port is Kirkenes.").status_code == 200
    held(extractor, "the extraction")
    forget(stack, "librechat", "alice")
    stack.kill()  # the extraction never finished: its job is in the journal... or was, before the forget
    extractor.gate.release()
    stack.start()
    stack.settle()  # every job that was queued has run: anything that would come back has by then
    assert facts(stack, "librechat", "alice") == []
    assert "Kirkenes" not in stack.api.get("/v1/bots/librechat/export").text


def test_a_turn_still_streaming_when_the_forget_lands_stores_nothing(stack, fakes):
    """Issue 30, path 2: the extraction's time was taken when the answer ended, so a forget made while the
    answer streamed looked older than the turn, and its fact was stored."""
    upstream = fakes[1]
    upstream.gate.hold()
    answered: list[httpx.Response] = []

    def turn() -> None:
        answered.append(
            httpx.post(
                f"{stack.url}/oa/v1/chat/completions",
                timeout=60,
                headers={
                    "Authorization": f"Bearer {PROXY_KEY}",
                    "x-librechat-user-id": "alice",
                    "x-librechat-conversation-id": "conv-stream",
                },
                json={
                    "model": "m",
                    "stream": True,
                    "messages": [{"role": "user", "content": "My favourite river is the Quellmar."}],
                },
            )
        )

    talking = threading.Thread(target=turn)
    talking.start()
    held(upstream, "the streaming answer")
    forget(stack, "librechat", "alice")
    upstream.gate.release()
    talking.join(60)
    assert answered and answered[0].status_code == 200 and "data:" in answered[0].text
    stack.settle()
    assert facts(stack, "librechat", "alice") == []
