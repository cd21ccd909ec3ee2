"""forget_user and its tombstone, on moto and both index engines: what a forget reaches, that writes made
or asked for before it are refused at the moment they write, and re-applying forgets after a restore."""

from __future__ import annotations

import json
import re

from engram.bookkeeping import Cursor
from engram.service import ChatMessage
from engram.store import now_ms
from tests.rules.forgetting import *  # noqa: F403 - the rules' own tests, run here on DynamoDB and both indexes


def everything(aws) -> str:
    out = []
    for table in ("t-memories", "t-state"):
        out += aws["dynamodb"].scan(TableName=table)["Items"]
    return json.dumps(out)


def test_forget_user_reaches_the_contexts_of_other_people_and_every_state_kind(service, aws):
    service.add_messages(
        "bot1",
        [
            ChatMessage(
                source_id="a1", text="my locker code is vexmorrow", user="alice", thread="t", created_at=1000
            ),
            ChatMessage(source_id="b1", text="noted", user="bob", thread="t", created_at=2000),
        ],
    )
    service.state.consents.give("bot1", "alice", 1)
    service.state.backfills.start("bot1", "alice", "run1", 3, 1)
    service.state.cursors.save("bot1", "alice", "c1", Cursor(before="5"))
    service.state.backfills.keep_token("bot1", "alice", "run1", "tok", now_ms() // 1000 + 900)
    service.state.limits.take_export_slot("bot1", "alice", now_ms(), 600)
    service.state.chat_settings.set("bot1", "alice", "conv-1", False)
    assert "vexmorrow" in everything(aws)
    bob = service.search("bot1", "vexmorrow", kind="message")
    assert [m.source_id for m in bob][:2] == [
        "a1",
        "b1",
    ]  # Bob's reply is found by Alice's words, via its context
    deleted = service.forget_user("bot1", "alice")
    assert (deleted["messages"], deleted["contexts"]) == (1, 1)
    assert deleted["state"] == {
        "consent": 1,
        "backfill": 1,
        "exportLimit": 1,
        "tokens": 1,
        "cursors": 1,
        "chatSettings": 1,
        "keys": 0,
    }
    assert "vexmorrow" not in everything(aws)
    from engram.embedders import NoEmbedder

    service.indexer.embedder = NoEmbedder()  # words alone: the meaning side matches everything a little
    assert service.search("bot1", "vexmorrow", kind="message") == []
    assert [m.text for m in service.list("bot1", kind="message")] == ["noted"]
    assert service.records.get("bot1", bob[1].id).context is None
    assert service.state.tombstones.when("bot1", ["alice", "bob"]).keys() == {"alice"}


def test_forgets_are_applied_again_to_a_restored_table(service, aws):
    from engram.store.models import StateItem
    from infra.reapply_forgets import reapply

    service.add_fact("bot1", "Alice likes chess.", user="alice")
    service.forget_user("bot1", "alice")
    tombstones = [
        i for i in aws["dynamodb"].scan(TableName="t-state")["Items"] if i["pk"]["S"].startswith("forgotten#")
    ]
    # a restore to before the forget: Alice's record back, her tombstone gone (it lives on in the old table)
    aws["dynamodb"].create_table(
        TableName="t-state-old",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    for item in tombstones:
        aws["dynamodb"].put_item(TableName="t-state-old", Item=item)
        StateItem(item["pk"]["S"], item["sk"]["S"]).delete()
    restored, _ = service.add_fact("bot1", "Alice likes chess.", user="alice", created_at=1)
    done = reapply(aws["dynamodb"], "t-state-old", service)
    assert [(bot, user) for bot, user, _ in done] == [("bot1", "alice")]
    assert service.list("bot1", user="alice") == []


def import_ndjson(service, bot: str, rows: list[dict]) -> dict:
    from engram.portability import import_lines

    return import_lines(service, bot, [json.dumps(r) for r in rows])


def test_an_imported_context_is_cleared_when_its_author_is_forgotten(service, aws):
    """Issue 30, path 1: imports never noted whose words a context carried, so a forget left them."""
    outcome = import_ndjson(
        service,
        "bot1",
        [
            {"kind": "message", "text": "wifi is QZX1", "userId": "alice", "sourceMessageId": "i1"},
            {
                "kind": "message",
                "text": "thanks",
                "userId": "bob",
                "sourceMessageId": "i2",
                "context": "wifi is QZX1",
                "contextUserId": "alice",
            },
            # a context nobody can attribute is not kept: no forget could ever find it
            {
                "kind": "message",
                "text": "ok",
                "userId": "bob",
                "sourceMessageId": "i3",
                "context": "QZX1 too",
            },
        ],
    )
    assert outcome["errors"] == []
    service.indexer.fill_vectors("bot1", [m.id for m in service.list("bot1", kind="message")])
    assert service.forget_user("bot1", "alice")["contexts"] == 1
    from engram.embedders import NoEmbedder

    service.indexer.embedder = NoEmbedder()  # words alone: the meaning side matches everything a little
    assert service.search("bot1", "QZX1", kind="message") == []
    assert "QZX1" not in everything(aws)


def test_a_rebuild_clears_a_context_whose_author_was_forgotten(service, aws):
    """Issue 30, paths 3 and 7: a record whose context quotes a forgotten author (one no carrier names: an
    old record, or a forget cut off) is indexed without those words by every re-index path."""
    service.add_messages(
        "bot1",
        [
            ChatMessage(
                source_id="a1", text="gate code is plumbrise", user="alice", thread="t", created_at=1
            ),
            ChatMessage(source_id="b1", text="got it", user="bob", thread="t", created_at=2),
        ],
    )
    bob = service.by_source("bot1", "b1")
    # what a forget cut off before its contexts step leaves: the tombstone, and Bob's context still quoting
    service.state.tombstones.mark("bot1", "alice", now_ms())
    service.records.carriers.drop("bot1", "alice", [bob.id])
    service.indexer.fill_vectors("bot1", [bob.id])
    assert service.records.get("bot1", bob.id).context is None
    from engram.embedders import NoEmbedder

    service.indexer.embedder = NoEmbedder()
    assert bob.id not in [m.id for m in service.search("bot1", "plumbrise", kind="message")]


def test_a_forget_clears_replies_to_them_and_the_windows_ids_of_their_messages(service, aws):
    """Issue 30, path 8: Bob's reply kept replyTo.authorId/messageId of Alice's message, and the edit/delete
    window kept watching her message ids."""
    service.add_messages(
        "bot1",
        [
            ChatMessage(
                source_id="9001", text="the boat is at pier nine", user="alice", content={"channelId": "c1"}
            ),
            ChatMessage(
                source_id="9002",
                text="see you there",
                user="bob",
                content={"channelId": "c1", "replyTo": {"messageId": "9001", "authorId": "alice"}},
            ),
        ],
    )
    service.state.channels.note_recent("bot1", "c1", [("9001", 1, "", now_ms() // 1000 + 600)], now_ms())
    service.forget_user("bot1", "alice")
    bob = service.by_source("bot1", "9002")
    assert bob is not None and bob.content == {"channelId": "c1"} and bob.text == "see you there"
    assert service.state.channels.recent("bot1", "c1", now_ms() // 1000) == {}
    # no id of her message in any item's key or value (as a whole number: a time or a memory id may hold 9001)
    assert re.search(r"(?<!\d)9001(?!\d)", everything(aws)) is None
