"""The Memory API over real HTTP on the real local stack, with the real MiniLM embedder."""

import json
import time
import uuid

import httpx
import pytest

from engram.store.keys import bot_of
from engram.vectors import Scope
from tests.integration.conftest import KEY
from tests.support import wait_until


@pytest.fixture
def bot():
    return f"bot-{uuid.uuid4().hex[:8]}"


def add(api, bot, text, **scope):
    return api.post(f"/v1/bots/{bot}/memories", json={"text": text, **scope})


def test_healthz_needs_no_key_and_tells_strangers_nothing_more(stack):
    r = httpx.get(f"{stack.url}/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True}
    detailed = httpx.get(f"{stack.url}/healthz", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert detailed["ok"] is True and "embedder" in detailed and "upstreams" in detailed


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "integration-key"},
        {"Authorization": "Basic integration-key"},
    ],
)
def test_missing_or_wrong_key_is_401(stack, headers):
    r = httpx.get(f"{stack.url}/v1/bots/b/memories", headers=headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"


def test_add_list_newest_first_and_duplicates(api, bot):
    first = add(api, bot, "The owner drinks green tea.")
    assert first.status_code == 201
    body = first.json()
    assert body["id"].startswith("mem:") and body["kind"] == "fact" and body["savedBy"] == "owner"
    assert body["createdAt"].endswith("Z") and body["userId"] is None
    second = add(api, bot, "The owner's dog is called Rex.")
    again = add(api, bot, "  THE owner drinks   green tea. ")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    listed = api.get(f"/v1/bots/{bot}/memories").json()["memories"]
    assert [m["id"] for m in listed] == [second.json()["id"], body["id"]]
    assert [m["id"] for m in api.get(f"/v1/bots/{bot}/memories", params={"limit": 1}).json()["memories"]] == [
        second.json()["id"]
    ]


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"text": ""}, "empty"),
        ({"text": "   "}, "empty"),
        ({"text": "x" * 1001}, "1000"),
        ({}, "text"),
        ({"text": 5}, "text"),
    ],
)
def test_bad_text_is_400_with_a_reason(api, bot, body, needle):
    r = api.post(f"/v1/bots/{bot}/memories", json=body)
    assert r.status_code == 400
    assert needle in r.json()["error"]["message"]
    assert api.get(f"/v1/bots/{bot}/memories").json()["memories"] == []


def test_malformed_json_is_400(api, bot):
    r = api.post(
        f"/v1/bots/{bot}/memories", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid"


@pytest.mark.parametrize("limit", ["0", "501", "abc", "-3", "1.5"])
def test_bad_limit_is_400(api, bot, limit):
    r = api.get(f"/v1/bots/{bot}/memories", params={"limit": limit})
    assert r.status_code == 400 and "limit" in r.json()["error"]["message"]


def test_search_by_meaning_shares_no_word(api, bot):
    pet = add(api, bot, "Maria adopted a golden retriever puppy last spring.").json()
    add(api, bot, "The quarterly tax report is due in April.")
    add(api, bot, "I am allergic to peanuts.")
    add(api, bot, "The office wifi password changes every month.")
    found = api.get(f"/v1/bots/{bot}/memories", params={"query": "Which animal does she own?"}).json()[
        "memories"
    ]
    assert found[0]["id"] == pet["id"]
    assert found[0]["score"] > 0
    by_words = api.get(f"/v1/bots/{bot}/memories", params={"query": "peanuts", "limit": 1}).json()["memories"]
    assert by_words[0]["text"] == "I am allergic to peanuts."


def test_update_and_merge(api, bot):
    tea = add(api, bot, "The owner drinks green tea.").json()
    coffee = add(api, bot, "The owner drinks coffee.").json()
    number = coffee["id"].split(":")[1]
    changed = api.patch(f"/v1/bots/{bot}/memories/{number}", json={"text": "The owner drinks black coffee."})
    assert changed.status_code == 200 and changed.json()["text"] == "The owner drinks black coffee."
    merged = api.patch(
        f"/v1/bots/{bot}/memories/{coffee['id']}", json={"text": "the owner DRINKS green tea."}
    )
    assert merged.status_code == 200 and merged.json()["id"] == tea["id"]
    assert merged.json()["text"] == "The owner drinks green tea."
    assert api.get(f"/v1/bots/{bot}/memories/{coffee['id']}").status_code == 404
    assert [m["id"] for m in api.get(f"/v1/bots/{bot}/memories").json()["memories"]] == [tea["id"]]
    assert api.patch(f"/v1/bots/{bot}/memories/mem:999999", json={"text": "x"}).status_code == 404
    assert api.patch(f"/v1/bots/{bot}/memories/{tea['id']}", json={"text": ""}).status_code == 400


def test_a_changed_chat_message_keeps_no_copy_of_its_old_words(api, bot):
    """PATCH of a chat message: its content (the caller's JSON, wherever it held the words) follows the text,
    so neither a read nor a search finds the old words."""
    sent = api.post(
        f"/v1/bots/{bot}/messages",
        json={
            "messages": [
                {
                    "id": "m-locker",
                    "text": "my locker code is QZX1",
                    "userId": "ana",
                    "content": {
                        "message": "my locker code is QZX1",
                        "quoted": ["said: my locker code is QZX1"],
                    },
                }
            ]
        },
    ).json()
    memory_id = sent["ids"][0]
    changed = api.patch(f"/v1/bots/{bot}/memories/{memory_id}", json={"text": "my locker code changed"})
    assert changed.status_code == 200
    read = api.get(f"/v1/bots/{bot}/memories/{memory_id}").json()
    assert "QZX1" not in json.dumps(read) and read["content"]["message"] == "my locker code changed"
    found = api.get(f"/v1/bots/{bot}/memories", params={"kind": "message", "query": "QZX1"}).json()
    assert "QZX1" not in json.dumps(found)


def test_remove(api, bot):
    m = add(api, bot, "Temporary fact about kites.").json()
    assert api.delete(f"/v1/bots/{bot}/memories/{m['id']}").status_code == 204
    assert api.delete(f"/v1/bots/{bot}/memories/{m['id']}").status_code == 404
    r = api.delete(f"/v1/bots/{bot}/memories/not-an-id")
    assert r.status_code == 400 and "memory id" in r.json()["error"]["message"]
    assert api.get(f"/v1/bots/{bot}/memories", params={"query": "kites"}).json()["memories"] == []


def test_two_bots_never_see_each_other(api, bot):
    other = bot + "-other"
    mine = add(api, bot, "The launch code is in the blue folder.").json()
    add(api, other, "The launch code is in the red folder.")
    for params in ({}, {"query": "launch code folder"}):
        texts = [m["text"] for m in api.get(f"/v1/bots/{other}/memories", params=params).json()["memories"]]
        assert texts == ["The launch code is in the red folder."]
    assert api.get(f"/v1/bots/{other}/memories/{mine['id']}").status_code == 404
    assert api.delete(f"/v1/bots/{other}/memories/{mine['id']}").status_code == 404


def test_forget_leaves_nothing_behind(api, bot, stack):
    for i, scope in enumerate([{"serverId": "g1"}, {"serverId": "g2"}, {"project": "Garden"}, {}]):
        assert (
            add(api, bot, f"Alice fact number {i} about orchids.", userId="alice", **scope).status_code == 201
        )
    add(api, bot, "Bob grows cacti.", userId="bob")
    r = api.delete(f"/v1/bots/{bot}/users/alice/memories")
    assert r.status_code == 200
    deleted = r.json()["deleted"]
    assert {k: deleted[k] for k in ("facts", "messages", "vectors", "contexts", "claims")} == {
        "facts": 4,
        "messages": 0,
        "vectors": 4,
        "contexts": 0,
        "claims": 0,
    }
    assert set(deleted["state"]) == {
        "consent",
        "backfill",
        "exportLimit",
        "tokens",
        "cursors",
        "chatSettings",
        "keys",
    }
    assert api.get(f"/v1/bots/{bot}/memories", params={"userId": "alice"}).json()["memories"] == []
    assert [
        m["userId"]
        for m in api.get(f"/v1/bots/{bot}/memories", params={"query": "orchids"}).json()["memories"]
    ] == ["bob"]
    items = stack.dynamodb.scan(TableName="engram-memories")["Items"]
    assert not [i for i in items if bot_of(i["bot"]["S"]) == bot and i.get("userId", {}).get("S") == "alice"]
    assert stack.engine.service.index.count(Scope(bot=bot, user="alice")) == 0


def test_scope_filters(api, bot):
    add(api, bot, "Guild one likes jazz.", serverId="g1")
    add(api, bot, "Guild two likes jazz.", serverId="g2")
    found = api.get(f"/v1/bots/{bot}/memories", params={"query": "jazz", "serverId": "g2"}).json()["memories"]
    assert [m["text"] for m in found] == ["Guild two likes jazz."]
    assert api.get(f"/v1/bots/{bot}/memories", params={"kind": "nope"}).status_code == 400
    assert api.get(f"/v1/bots/{bot}/memories", params={"kind": "message"}).json()["memories"] == []


def test_openapi_document_lists_every_route(stack):
    doc = httpx.get(f"{stack.url}/openapi.json").json()
    paths = doc["paths"]
    assert set(paths["/v1/bots/{bot}/memories"]) == {"get", "post"}
    assert set(paths["/v1/bots/{bot}/memories/{memory_id}"]) == {"get", "patch", "delete"}
    assert "delete" in paths["/v1/bots/{bot}/users/{user_id}/memories"]
    assert "201" in paths["/v1/bots/{bot}/memories"]["post"]["responses"]


def test_message_batches_are_idempotent(api, bot):
    batch = {
        "messages": [
            {
                "id": "m1",
                "text": "Anyone up for sailing on Saturday?",
                "userId": "u1",
                "serverId": "g1",
                "createdAt": "2023-05-08T13:56:00Z",
            },
            {
                "id": "m2",
                "text": "",
                "userId": "u2",
                "content": {"attachments": [{"type": "image", "description": "a sailboat"}]},
            },
        ]
    }
    first = api.post(f"/v1/bots/{bot}/messages", json=batch)
    assert first.status_code == 200 and first.json()["created"] == 2
    again = api.post(f"/v1/bots/{bot}/messages", json=batch)
    assert again.json() == {"created": 0, "ids": first.json()["ids"]}
    listed = api.get(f"/v1/bots/{bot}/memories", params={"kind": "message"}).json()["memories"]
    assert {m["sourceMessageId"] for m in listed} == {"m1", "m2"}
    sail = [m for m in listed if m["sourceMessageId"] == "m1"][0]
    assert sail["createdAt"] == "2023-05-08T13:56:00.000Z" and sail["savedBy"] == "user"
    found = api.get(
        f"/v1/bots/{bot}/memories", params={"kind": "message", "query": "boat trip at the weekend"}
    ).json()
    assert found["memories"][0]["sourceMessageId"] == "m1"
    assert api.post(f"/v1/bots/{bot}/messages", json={"messages": []}).status_code == 400
    assert (
        api.post(f"/v1/bots/{bot}/messages", json={"messages": [{"id": "x", "text": ""}]}).status_code == 400
    )


def test_pages_of_newest_first_and_the_bots(api):
    ids = [
        api.post("/v1/bots/pages/memories", json={"text": f"page fact number {i}", "userId": "pu"}).json()[
            "id"
        ]
        for i in range(7)
    ]
    seen, before = [], None
    while True:
        params = {"limit": 3, **({"before": before} if before else {})}
        page = api.get("/v1/bots/pages/memories", params=params).json()["memories"]
        if not page:
            break
        seen += [m["id"] for m in page]
        before = page[-1]["id"]
    assert seen == ids[::-1]  # every memory once, newest first
    mine = api.get("/v1/bots/pages/memories", params={"limit": 2, "userId": "pu", "before": ids[4]}).json()[
        "memories"
    ]
    assert [m["id"] for m in mine] == [ids[3], ids[2]]
    assert api.get("/v1/bots/pages/memories", params={"before": "yesterday"}).status_code == 400
    assert "pages" in api.get("/v1/bots").json()["bots"]
    assert httpx.get(str(api.base_url.join("/v1/bots"))).status_code == 401


def test_new_facts_are_found_by_meaning_a_second_after_their_201(api, bot):
    """Six facts one after another, as a turn's extraction writes them; a second after the last 201 each is
    found by a question that shares no word with it (so meaning found it), its search saying so."""
    from tests.bench.searchable import PAIRS

    assert wait_until(lambda: api.get("/healthz").json()["embedderWarm"], timeout_s=120)  # a warm stack
    for i, (fact, _) in enumerate(PAIRS[:6]):
        assert add(api, bot, fact, userId=f"reader-{i}").status_code == 201
    time.sleep(1)
    for i, (fact, question) in enumerate(PAIRS[:6]):
        answer = api.get(
            f"/v1/bots/{bot}/memories", params={"query": question, "userId": f"reader-{i}"}
        ).json()
        assert answer["meaning"] is True and [m["text"] for m in answer["memories"]] == [fact], question


def test_a_question_about_the_asker_favours_their_memories_when_the_search_says_who_asks(api, bot):
    """`askedBy`: "my sister" is the asker's sister. Each asker finds their own fact first, whichever of
    the two the words and meaning alone would rank first; a malformed asker is refused."""
    for user, text in (("alice", "My sister is called Rosa."), ("bob", "My sister is called Ines.")):
        assert api.post(f"/v1/bots/{bot}/memories", json={"text": text, "userId": user}).status_code == 201

    def first(asker: str) -> str:
        params = {"query": "What is my sister called?", "askedBy": asker}
        return api.get(f"/v1/bots/{bot}/memories", params=params).json()["memories"][0]["userId"]

    assert (first("alice"), first("bob")) == ("alice", "bob")
    refused = api.get(f"/v1/bots/{bot}/memories", params={"query": "my sister", "askedBy": "a b"})
    assert refused.status_code == 400 and "askedBy" in refused.text


def test_a_question_naming_someone_by_what_the_thread_calls_them_finds_their_messages_first(api, bot):
    """Discord-like messages: ids that are not names, each author's names in its content, no name in any
    text but the greeting that calls Melanie "Mel". A question about Mel's class finds Melanie's message
    first, above Caroline's, which has more of the question's words; naming no one leaves the order to the
    words."""
    people = {
        "81234567": {"author": "melanie_p", "displayName": "Melanie"},
        "99887766": {"author": "caro.b", "displayName": "Caroline", "nick": "Caro"},
    }
    said = [
        ("81234567", "I signed up for a class on Thursdays"),
        ("99887766", "Hey Mel! Fun, my pottery class on Thursdays is the best part of my week"),
        ("81234567", "Nice, what do you make there?"),
    ]
    batch = {
        "messages": [
            {
                "id": f"names-{i}",
                "text": text,
                "userId": user,
                "threadId": "general",
                "createdAt": f"2026-03-0{i + 1}T10:00:00Z",
                "content": people[user],
            }
            for i, (user, text) in enumerate(said)
        ]
    }
    assert api.post(f"/v1/bots/{bot}/messages", json=batch).status_code in (200, 201)

    def first(question: str) -> str:
        found = api.get(f"/v1/bots/{bot}/memories", params={"query": question, "kind": "message"}).json()
        return found["memories"][0]["text"]

    assert first("When is the pottery class on Thursdays?") == said[1][1]  # the words' choice
    assert first("When is Mel's pottery class on Thursdays?") == said[0][1]  # hers, by what she is called
    assert first("When is Melanie's pottery class on Thursdays?") == said[0][1]  # by her display name
    assert first("When is Caro's pottery class on Thursdays?") == said[1][1]  # by a server nickname

    # forgotten, Melanie's names go with her: her messages held them, and the greeting that called her
    # "Mel" no longer says whom it answered (Caroline's words stay, as her own)
    assert api.delete(f"/v1/bots/{bot}/users/81234567/memories").json()["deleted"]["contexts"] == 1
    lines = [json.loads(line) for line in api.get(f"/v1/bots/{bot}/export").text.splitlines()]
    kept = json.dumps([line for line in lines if line["kind"] != "forgotten"])  # (the forget's own line)
    assert "81234567" not in kept and "melanie" not in kept.casefold()
    assert first("When is Mel's pottery class on Thursdays?") == said[1][1]
