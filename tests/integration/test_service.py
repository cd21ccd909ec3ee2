"""The memory service's rules, run against both index implementations (edge and qdrant-client)."""

import json

from engram.store.keys import bot_of, claim_pk, is_claim_pk
from engram.store.models import StateItem
from engram.vectors import Scope
from tests.rules.service import *  # noqa: F403 - the rules' own tests, run here on DynamoDB and both indexes


def test_a_query_sharing_no_word_is_answered_by_the_dense_leg(service, embedder):
    """The fake embedder puts tea, coffee and beverage on one dimension, so a query sharing no word with
    the memory is found only if the service writes, queries and fuses the dense vectors. (What the real
    model understands is tested on the running stack: test_memory_api, test_local_stack_process.)"""
    tea, _ = service.add_fact("bot1", "The owner drinks green tea every morning.")
    service.add_fact("bot1", "The owner's car is a red hatchback.")
    assert service.search("bot1", "green tea")[0].id == tea.id
    found = service.search("bot1", "favourite beverage?")
    assert found.meaning and found[0].id == tea.id
    embedder.down = True  # the same query by words alone: nothing of the tea memory
    words_only = service.search("bot1", "favourite beverage?")
    assert not words_only.meaning and tea.id not in [m.id for m in words_only]


def test_record_written_while_embedder_down_is_found_by_words_then_filled(service, embedder, engine, aws):
    embedder.down = True
    tea, created = service.add_fact("bot1", "The owner drinks green tea.")
    assert created
    assert service.search("bot1", "tea")[0].id == tea.id  # words at once
    assert service.records.pending.ids("bot1", 10) == [tea.id]
    embedder.down = False
    queued = service.indexer.sweep(grace_ms=0)
    assert queued == 1
    from infra.poller import SqsPoller, load_function_handler

    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1").drain()
    assert service.records.pending.ids("bot1", 10) == []
    assert service.records.get("bot1", tea.id).vector_model == service.dense_name
    assert service.search("bot1", "beverage")[0].id == tea.id  # by meaning now


def test_record_survives_index_down_and_is_indexed_later(service, engine, aws):
    engine.service.index.down = True
    tea, created = service.add_fact("bot1", "The owner drinks green tea.")
    assert created
    # words still answer, from the records, while Qdrant is down
    assert [m.id for m in service.search("bot1", "green tea")] == [tea.id]
    assert [m.id for m in service.list("bot1")] == [tea.id]
    engine.service.index.down = False
    from infra.poller import SqsPoller, load_function_handler

    poller = SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1")
    # the deferred job was queued with a delay; the sweep finds the record regardless
    service.indexer.sweep(grace_ms=0)
    poller.drain()
    assert service.records.pending.ids("bot1", 10) == []
    assert service.index.count(Scope(bot="bot1")) == 1


def test_the_words_fallback_reads_a_bounded_number_of_records(service, engine, monkeypatch):
    """Issue 32: with Qdrant down, a server's search read the bot's whole partition of its kind until it had
    found enough of that server's (a 30 s walk a search at 100 M). It reads the server's own records through
    byScope now; for a bot whose records are not stamped yet it stops after FALLBACK_READ."""
    from pynamodb.connection.base import Connection

    import engram.reads
    from engram.service import ChatMessage
    from engram.store.keys import scopes_ready

    engine.service.index.down = True
    quiet = [ChatMessage(source_id=f"q{i}", text=f"lighthouse keeper {i}", server="small") for i in range(3)]
    busy = [ChatMessage(source_id=f"b{i}", text=f"harbour chatter {i}", server="big") for i in range(1200)]
    service.add_messages("bot1", quiet)
    for start in range(0, len(busy), 100):  # newer than the small server's three
        service.add_messages("bot1", busy[start : start + 100])
    found = lambda: service.search("bot1", "lighthouse keeper", kind="message", server="small")  # noqa: E731
    monkeypatch.setattr(engram.reads, "FALLBACK_READ", 1000)
    assert len(found()) == 3  # the small server's three, read alone
    # a bot older than byScope: its kind is walked, newest first, and the walk stops at 1,000 read
    StateItem(*scopes_ready("bot1", "message")).delete()
    service.records.scopes.forget_known()
    scanned = []
    call = Connection._make_api_call

    def counted(connection, operation, kwargs):
        answer = call(connection, operation, kwargs)
        if operation == "Query" and kwargs.get("IndexName") in ("byKind", "byKindKeys"):
            scanned.append(int(answer.get("ScannedCount") or 0))
        return answer

    monkeypatch.setattr(Connection, "_make_api_call", counted)
    found()
    assert 800 <= sum(scanned) <= 1000  # of 1,203 (its 9 keys read in pages of 111, in turn)
    monkeypatch.setattr(engram.reads, "FALLBACK_READ", 10_000)
    assert len(found()) == 3  # read up to 10,000: the three are reached


def test_forget_leaves_nothing_behind_in_either_store(service, aws):
    kept, _ = service.add_fact("bot1", "Bob likes chess.", user="bob")
    other_bot, _ = service.add_fact("bot2", "Alice likes chess.", user="alice")
    for i, (server, project) in enumerate([("s1", None), ("s2", None), (None, "p1")]):
        service.add_fact("bot1", f"Alice fact {i} about chess.", user="alice", server=server, project=project)
    deleted = service.forget_user("bot1", "alice")
    assert {k: deleted[k] for k in ("facts", "messages", "vectors")} == {
        "facts": 3,
        "messages": 0,
        "vectors": 3,
    }
    # DynamoDB: no record and no unique key of alice in bot1
    items = aws["dynamodb"].scan(TableName="t-memories")["Items"]
    assert items and all(
        not (bot_of(i["bot"]["S"]) == "bot1" and i.get("userId", {}).get("S") == "alice") for i in items
    )
    assert len(items) == 2
    keys = [
        i for i in aws["dynamodb"].scan(TableName="t-state")["Items"] if i["pk"]["S"].startswith("unique#")
    ]
    assert len(keys) == 2
    # Qdrant: nothing of alice in bot1; the others untouched
    assert service.index.count(Scope(bot="bot1", user="alice")) == 0
    assert service.index.count(Scope(bot="bot1", user="bob")) == 1
    assert [m.id for m in service.search("bot2", "chess")] == [other_bot.id]
    again = service.forget_user("bot1", "alice")
    assert {k: again[k] for k in ("facts", "messages", "vectors", "contexts", "claims")} == {
        "facts": 0,
        "messages": 0,
        "vectors": 0,
        "contexts": 0,
        "claims": 0,
    }


def test_forget_leaves_no_text_of_the_user_as_anyone_s_context(service, aws):
    from engram.service import ChatMessage

    service.add_fact("bot1", "Alice keeps bees on the roof.", user="alice", project="p1")
    service.add_messages(
        "bot1",
        [ChatMessage(source_id="m1", text="Alice's secret is the blue door.", user="alice", thread="t1")],
    )
    service.add_messages(
        "bot1", [ChatMessage(source_id="m2", text="Bob says hello.", user="bob", thread="t2")]
    )
    service.forget_user("bot1", "alice")
    state = json.dumps(aws["dynamodb"].scan(TableName="t-state")["Items"])
    assert "bees" not in state and "blue door" not in state and "Bob says hello." in state


def test_a_claim_left_by_a_crash_is_taken_over(service):
    from engram.store import fact_key, now_ms

    key = fact_key(None, None, None, "Crash-proof fact.")
    StateItem(
        claim_pk("bot1", key), key, memory_id=424242, value=now_ms() - 60_000
    ).save()  # no record landed
    memory, created = service.add_fact("bot1", "Crash-proof fact.")
    assert created and memory.id != 424242
    assert int(StateItem.get(claim_pk("bot1", key), key).memory_id) == memory.id
    again, created_again = service.add_fact("bot1", "crash-proof FACT.")
    assert not created_again and again.id == memory.id


def test_forget_releases_the_claims_a_crash_left_in_the_user_s_name_and_no_one_else_s(service, aws):
    """A crash between a claim and its record leaves a claim naming the user (a source id or a digest of
    their fact): the forget finds it through the byOwner index and releases it; others' stay."""
    from engram.store import fact_key, source_key

    kept, _ = service.add_fact("bot1", "Alice's fact that stays until the forget.", user="alice")
    service.records.claims.claim("bot1", source_key("crash-msg"), 777001, "alice")  # records never landed
    service.records.claims.claim("bot1", fact_key("s1", None, "alice", "Half-written fact."), 777002, "alice")
    service.records.claims.claim("bot1", source_key("bob-crash-msg"), 777003, "bob")
    # a claim whose record holds it is not stale: only the crash's leftovers are
    assert sorted(service.records.claims.stale("bot1", "alice")) == sorted(
        [source_key("crash-msg"), fact_key("s1", None, "alice", "Half-written fact.")]
    )
    kept_key = service.records.get("bot1", kept.id).unique_key
    assert StateItem.get(claim_pk("bot1", kept_key), kept_key).owner == "bot1#alice"
    deleted = service.forget_user("bot1", "alice")
    assert deleted["claims"] == 2 and deleted["facts"] == 1
    left = {
        i["sk"]["S"]: i
        for i in aws["dynamodb"].scan(TableName="t-state")["Items"]
        if is_claim_pk("bot1", i["pk"]["S"])
    }
    assert list(left) == [source_key("bob-crash-msg")]
    assert all(
        "alice" not in str(item)
        for item in aws["dynamodb"].scan(TableName="t-state")["Items"]
        if item["pk"]["S"].startswith("unique#")
    )


def test_a_forget_landing_after_a_write_read_the_tombstones_leaves_no_thread_tail(service, monkeypatch):
    """The thread's tail (the next message's context) is written before the tombstones are read: a forget
    landing right after that read finds the tail and drops it, so the next message quotes nothing of hers."""
    from engram.service import ChatMessage

    refused, calls = service.writes.refused, []

    def then_forgotten(bot, users, origin):
        out = refused(bot, users, origin)
        calls.append(1)
        if len(calls) == 2:  # the read in _settle (the first is the batch's, before anything is written)
            service.forget_user("bot1", "alice")
        return out

    monkeypatch.setattr(service.writes, "refused", then_forgotten)
    service.add_messages(
        "bot1",
        [ChatMessage(source_id="a1", text="The spare key is under the blue pot.", user="alice", thread="t1")],
    )
    monkeypatch.undo()
    assert len(calls) == 2
    assert service.list("bot1", user="alice") == []
    added = service.add_messages(
        "bot1", [ChatMessage(source_id="b1", text="Got it.", user="bob", thread="t1")]
    )
    assert service.records.get("bot1", added.memories[0].id).context is None
    tails = [i for i in StateItem.query("thread#bot1")]
    assert all("blue pot" not in json.dumps(i.attribute_values, default=str) for i in tails)


def test_two_builds_of_one_index_answer_in_one_order(tmp_path):
    """Ties on the word side are settled by the meaning side, then by id, in engram: the order points
    were written in (which the engine's own tie order follows) changes nothing."""
    from engram.vectors import Fusion, IndexPoint, Query
    from engram.vectors.edge import EdgeIndex
    from engram.words import WordVectorizer

    words = WordVectorizer()
    points = [
        IndexPoint(
            i,
            {"bot": "b", "kind": "fact", "text": f"apple {i}"},
            words.document(f"apple pie {i % 3}"),
            {"d": [1.0, (i % 4) / 4, 0.5]},
        )
        for i in range(1, 16)
    ]
    answers = []
    for name, order in (("forward", points), ("backward", points[::-1])):
        index = EdgeIndex(tmp_path / name)
        index.ensure_dense("d", 3)
        for p in order:
            index.upsert([p])
        scope = Scope(bot="b")
        answers.append(
            [
                [
                    h.id
                    for h in index.search(
                        scope, Query(words.query("apple pie"), dense, 5, Fusion(k=2, words_weight=1.5))
                    )
                ]
                for dense in (None, ("d", [1.0, 0.2, 0.5]))
            ]
        )
        index.close()
    assert answers[0] == answers[1]
    words_only, hybrid = answers[0]
    assert words_only == sorted(words_only, reverse=True)  # all equal on words: newest first
    assert hybrid != words_only  # the meaning side broke the word-side ties


def test_a_forget_past_its_budget_answers_what_is_left_and_jobs_finish_it(service, engine, aws):
    from infra.poller import SqsPoller, load_function_handler

    for i in range(250):
        service.add_fact("bot1", f"Alice's note number {i}.", user="alice")
    bob, _ = service.add_fact("bot1", "Bob keeps bees.", user="bob")
    first = service.forget_user("bot1", "alice", budget_s=0)  # a door out of time: nothing but the start
    assert (first["done"], first["left"], first["facts"]) == (False, 250, 0)
    assert service.list("bot1", user="alice") == [] and [m.id for m in service.list("bot1")] == [bob.id]
    assert {m.user for m in service.search("bot1", "Alice's note number")} <= {"bob"}
    # the job it queued finishes it; the sweep resumes a forget whose job was lost (a crash) as well
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1").drain()
    assert engine.service.state.tombstones.under_way("bot1") == {}
    assert service.records.iter_user("bot1", "alice") == []
    service.add_fact("bot1", "Carol rows.", user="carol")
    assert service.forget_user("bot1", "carol", budget_s=0)["left"] == 1
    assert service.forgetting.resume_stalled(stalled_ms=0) == 1
    assert service.forgetting.resume_stalled() == 0  # moved just now: not stalled
