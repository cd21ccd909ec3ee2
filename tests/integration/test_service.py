"""The memory service's rules, run against both index implementations (edge and qdrant-client)."""

import json

import pytest

from engram.errors import InvalidInput, NotFound, Unavailable
from engram.store.keys import bot_of, claim_pk, is_claim_pk
from engram.store.models import StateItem
from engram.vectors import Scope


def test_add_then_list_newest_first(service):
    a, created_a = service.add_fact("bot1", "The owner drinks green tea.")
    b, created_b = service.add_fact("bot1", "The owner has a dog named Rex.")
    assert created_a and created_b
    assert [m.id for m in service.list("bot1")] == [b.id, a.id]
    assert service.list("bot1", limit=1)[0].id == b.id
    assert a.to_json()["id"] == f"mem:{a.id}" and a.to_json()["savedBy"] == "owner"


def test_same_text_in_other_case_or_spacing_answers_the_memory_already_there(service):
    first, _ = service.add_fact("bot1", "The owner drinks green tea.")
    again, created = service.add_fact("bot1", "  the OWNER   drinks green tea. ")
    assert not created and again.id == first.id
    assert len(service.list("bot1")) == 1


def test_same_text_in_another_scope_is_another_memory(service):
    a, _ = service.add_fact("bot1", "Likes tea.", user="u1")
    b, created = service.add_fact("bot1", "Likes tea.", user="u2")
    assert created and a.id != b.id


@pytest.mark.parametrize("text", ["", "   ", "x" * 1001])
def test_bad_text_is_refused_and_nothing_is_written(service, text):
    with pytest.raises(InvalidInput):
        service.add_fact("bot1", text)
    assert service.list("bot1") == []


@pytest.mark.parametrize("limit", [0, 501, -1, True])
def test_limit_out_of_range_is_refused(service, limit):
    with pytest.raises(InvalidInput):
        service.list("bot1", limit=limit)


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


def test_search_with_embedder_down_answers_by_words(service, embedder):
    tea, _ = service.add_fact("bot1", "The owner drinks green tea.")
    embedder.down = True
    found = service.search("bot1", "green tea")
    assert [m.id for m in found] == [tea.id]
    assert "down" in service.last_error


def test_record_written_while_embedder_down_is_found_by_words_then_filled(service, embedder, engine, aws):
    embedder.down = True
    tea, created = service.add_fact("bot1", "The owner drinks green tea.")
    assert created
    assert service.search("bot1", "tea")[0].id == tea.id  # words at once
    assert service.records.pending_ids("bot1", 10) == [tea.id]
    embedder.down = False
    queued = service.indexer.sweep(grace_ms=0)
    assert queued == 1
    from infra.poller import SqsPoller, load_function_handler

    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1").drain()
    assert service.records.pending_ids("bot1", 10) == []
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
    assert service.records.pending_ids("bot1", 10) == []
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
        if operation == "Query" and kwargs.get("IndexName") == "byKind":
            scanned.append(int(answer.get("ScannedCount") or 0))
        return answer

    monkeypatch.setattr(Connection, "_make_api_call", counted)
    found()
    assert 800 <= sum(scanned) <= 1000  # of 1,203 (its 9 keys read in pages of 111, in turn)
    monkeypatch.setattr(engram.reads, "FALLBACK_READ", 10_000)
    assert len(found()) == 3  # read up to 10,000: the three are reached


def test_update_changes_text_and_vectors(service):
    m, _ = service.add_fact("bot1", "The owner drinks green tea.")
    changed = service.update("bot1", m.id, "The owner drinks black coffee.")
    assert changed.id == m.id and changed.text == "The owner drinks black coffee."
    assert changed.updated_at >= m.updated_at
    assert service.search("bot1", "coffee")[0].id == m.id
    assert all("green" not in m.text for m in service.search("bot1", "green"))
    # the old text is free again
    again, created = service.add_fact("bot1", "The owner drinks green tea.")
    assert created and again.id != m.id


def test_update_to_what_another_says_merges_into_the_other(service):
    tea, _ = service.add_fact("bot1", "The owner drinks green tea.")
    coffee, _ = service.add_fact("bot1", "The owner drinks coffee.")
    stands = service.update("bot1", coffee.id, "the owner drinks GREEN tea.")
    assert stands.id == tea.id and stands.text == "The owner drinks green tea."
    with pytest.raises(NotFound):
        service.get("bot1", coffee.id)
    assert [m.id for m in service.list("bot1")] == [tea.id]
    assert service.index.count(Scope(bot="bot1")) == 1


def test_update_and_remove_unknown_ids_are_not_found(service):
    with pytest.raises(NotFound):
        service.update("bot1", 999, "x")
    with pytest.raises(NotFound):
        service.remove("bot1", 999)


def test_remove_deletes_from_both_stores(service):
    m, _ = service.add_fact("bot1", "The owner drinks green tea.")
    service.remove("bot1", m.id)
    assert service.list("bot1") == []
    assert service.search("bot1", "tea") == []
    assert service.index.count(Scope(bot="bot1")) == 0
    again, created = service.add_fact("bot1", "The owner drinks green tea.")
    assert created


def test_remove_with_index_down_changes_nothing(service, engine):
    m, _ = service.add_fact("bot1", "The owner drinks green tea.")
    engine.service.index.down = True
    with pytest.raises(Unavailable):
        service.remove("bot1", m.id)
    engine.service.index.down = False
    assert service.get("bot1", m.id).text == "The owner drinks green tea."


def test_two_bots_never_see_each_other(service):
    mine, _ = service.add_fact("bot1", "The owner drinks green tea.")
    theirs, _ = service.add_fact("bot2", "The owner drinks green tea.")
    assert mine.id != theirs.id
    assert [m.id for m in service.search("bot1", "tea")] == [mine.id]
    assert [m.id for m in service.list("bot2")] == [theirs.id]
    with pytest.raises(NotFound):
        service.get("bot2", mine.id)
    with pytest.raises(NotFound):
        service.remove("bot2", mine.id)


def test_scope_filters_hold_on_hybrid_queries(service):
    a, _ = service.add_fact("bot1", "Alice drinks tea.", user="alice", server="s1")
    b, _ = service.add_fact("bot1", "Bob drinks tea.", user="bob", server="s2")
    c, _ = service.add_fact("bot1", "Carol drinks tea.", project="p1")
    assert [m.id for m in service.search("bot1", "tea drinks", user="alice")] == [a.id]
    assert [m.id for m in service.search("bot1", "tea drinks", server="s2")] == [b.id]
    assert [m.id for m in service.search("bot1", "tea drinks", project="p1")] == [c.id]
    assert {m.id for m in service.search("bot1", "tea drinks")} == {a.id, b.id, c.id}
    assert [m.id for m in service.list("bot1", user="bob")] == [b.id]


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


def test_a_fact_carries_its_author_s_previous_fact_as_context_when_recent(service):
    first, _ = service.add_fact("bot1", "Caroline: I went to a support group yesterday.", user="caroline")
    second, _ = service.add_fact("bot1", "Caroline: It was really powerful.", user="caroline")
    other, _ = service.add_fact("bot1", "Melanie: That sounds great.", user="melanie")
    later, _ = service.add_fact(
        "bot1", "Caroline: Painting now.", user="caroline", created_at=second.created_at + 31 * 60_000
    )
    contexts = {m.id: service.records.get("bot1", m.id).context for m in (first, second, other, later)}
    assert contexts == {first.id: None, second.id: first.text, other.id: None, later.id: None}
    # the context is part of what the index knows: "support group" finds the reply that follows it too
    assert second.id in [m.id for m in service.search("bot1", "support group", limit=3)]


def test_forget_with_index_down_hides_the_user_at_once_and_a_retry_finishes_it(service, engine):
    service.add_fact("bot1", "Alice likes chess.", user="alice")
    service.add_fact("bot1", "Bob likes go.", user="bob")
    engine.service.index.down = True
    with pytest.raises(Unavailable):
        service.forget_user("bot1", "alice")
    engine.service.index.down = False
    # the forget is under way: every read hides alice, though her record is still stored
    assert service.list("bot1", user="alice") == []
    assert [m.user for m in service.list("bot1")] == ["bob"]
    assert [m.user for m in service.search("bot1", "likes chess")] == ["bob"]
    assert engine.service.state.tombstones.under_way("bot1").keys() == {"alice"}
    assert service.forget_user("bot1", "alice")["facts"] == 1
    assert engine.service.state.tombstones.under_way("bot1") == {}


@pytest.mark.parametrize("name", ["", "a b", "x" * 200, "../etc", "bot\n"])
def test_bad_names_are_refused(service, name):
    with pytest.raises(InvalidInput):
        service.add_fact(name, "tea")
    with pytest.raises(InvalidInput):
        service.add_fact("bot1", "tea", user=name)


def test_concurrent_adds_of_the_same_text_make_one_memory(service):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: service.add_fact("bot1", "Same text."), range(8)))
    assert len({m.id for m, _ in results}) == 1
    assert sum(created for _, created in results) == 1


def test_messages_are_stored_once_by_source_id(service):
    from engram.service import ChatMessage

    batch = [
        ChatMessage(source_id=f"d{i}", text=f"message number {i} about sailing", user="u1", server="g1")
        for i in range(3)
    ]
    added = service.add_messages("bot1", batch)
    memories, created = added.memories, added.created
    assert created == 3 and [m.source_id for m in memories] == ["d0", "d1", "d2"]
    added = service.add_messages("bot1", batch + [ChatMessage(source_id="d3", text="fourth about sailing")])
    again, created_again = added.memories, added.created
    assert created_again == 1
    assert [m.id for m in again[:3]] == [m.id for m in memories]
    assert len(service.list("bot1", kind="message")) == 4
    assert service.list("bot1") == []  # facts by default
    assert {m.source_id for m in service.search("bot1", "sailing", kind="message")} == {
        "d0",
        "d1",
        "d2",
        "d3",
    }
    gone = service.forget_user("bot1", "u1")
    assert (gone["facts"], gone["messages"], gone["vectors"]) == (0, 3, 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"source_id": "", "text": "x"},
        {"source_id": "a", "text": ""},
        {"source_id": "a", "text": "x" * 16001},
        {"source_id": "a", "text": "x", "user": "a b"},
    ],
)
def test_bad_messages_are_refused(kwargs):
    from engram.service import ChatMessage

    with pytest.raises(InvalidInput):
        ChatMessage(**kwargs)


def test_thread_context_comes_from_the_previous_message_even_across_batches(service):
    from engram.service import ChatMessage

    first = [
        ChatMessage(source_id="a2", text="Yes, a sunrise over the lake.", thread="c1", created_at=2000),
        ChatMessage(source_id="a1", text="Did you paint anything lately?", thread="c1", created_at=1000),
        ChatMessage(source_id="x1", text="Unrelated channel.", thread="c2", created_at=1500),
    ]
    added = service.add_messages("bot1", first)
    memories = added.memories
    records = {m.source_id: service.records.get("bot1", m.id) for m in memories}
    assert records["a1"].context is None
    assert records["a2"].context == "Did you paint anything lately?"
    assert records["x1"].context is None
    added = service.add_messages(
        "bot1", [ChatMessage(source_id="a3", text="It took two weeks.", thread="c1", created_at=3000)]
    )
    later = added.memories
    assert service.records.get("bot1", later[0].id).context == "Yes, a sunrise over the lake."
    # an older message arriving late does not move the thread's tail back
    service.add_messages("bot1", [ChatMessage(source_id="a0", text="Hi!", thread="c1", created_at=500)])
    tail = service.records.tails.of("bot1", ["c1"])["c1"]
    assert tail.text == "It took two weeks."
    # the context's words make the reply findable by what it answers
    assert service.search("bot1", "paint", kind="message")[0].source_id in {"a1", "a2"}
    assert "a2" in {m.source_id for m in service.search("bot1", "paint", kind="message", limit=2)}


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


def test_a_forget_landing_while_a_reply_is_written_leaves_no_quoted_words_in_its_vectors(
    service, monkeypatch
):
    """Bob's reply is embedded ahead with Alice's message as its context while DynamoDB stores it; Alice is
    forgotten before the write settles: the context is cleared, and the vectors made ahead with her words
    are thrown away, not written into Bob's point."""
    from engram.service import ChatMessage
    from engram.vectors import Fusion

    service.add_messages(
        "bot1",
        [ChatMessage(source_id="a1", text="My locker code is 4417 by the gym.", user="alice", thread="t1")],
    )
    create_many = service.records.create_many

    def written_then_forgotten(records):
        out = create_many(records)
        service.forget_user("bot1", "alice")  # before _settle notes the carriers: it cannot find Bob's reply
        return out

    monkeypatch.setattr(service.records, "create_many", written_then_forgotten)
    reply = ChatMessage(source_id="b1", text="Noted, see you there.", user="bob", thread="t1")
    added = service.add_messages("bot1", [reply])
    monkeypatch.undo()
    record = service.records.get("bot1", added.memories[0].id)
    assert record is not None and record.context is None
    expected = service.indexer.dense_vectors([record])[record.id]
    name = service.indexer.dense_name
    hits = service.index.search(
        Scope(bot="bot1", user="bob"), None, (name, expected), 1, Fusion(), with_vector=True
    )
    assert [h.id for h in hits] == [record.id]
    assert hits[0].vector == pytest.approx(expected, abs=1e-5)


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


def test_ties_come_back_in_the_same_order_every_time(service):
    """Equal scores are ordered by id, newest first, so the same query always gives the same list."""
    for i in range(12):
        # one shared word, equal length, each its own author (no window of neighbours): equal word scores
        service.add_fact("ties", f"apple number{i}", user=f"u{i}")
    service.indexer.embedder.down = True  # words only: every hit scores the same
    runs = [[m.id for m in service.search("ties", "apple", limit=5)] for _ in range(5)]
    assert all(run == runs[0] for run in runs)
    all_ids = [m.id for m in service.list("ties", limit=20)]
    assert runs[0] == all_ids[:5]  # newest first among equals


def test_two_builds_of_one_index_answer_in_one_order(tmp_path):
    """Ties on the word side are settled by the meaning side, then by id, in engram: the order points
    were written in (which the engine's own tie order follows) changes nothing."""
    from engram.vectors import Fusion, IndexPoint
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
                        scope, words.query("apple pie"), dense, 5, Fusion(k=2, words_weight=1.5)
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


def test_the_sweep_queues_each_waiting_record_once_a_pass(service, embedder):
    """Issue 32: a lagging queue is not fed the same records every sweep; a pass an hour old starts again
    from the oldest (its jobs have run or dead-lettered: what still waits was lost)."""
    embedder.down = True
    service.add_fact("bot1", "The owner drinks green tea.")
    assert service.indexer.sweep(grace_ms=0) == 1
    assert service.indexer.sweep(grace_ms=0) == 0  # queued already
    service.add_fact("bot1", "The garage code is 4417.")
    assert service.indexer.sweep(grace_ms=0) == 1  # only the new one
    assert service.indexer.sweep(grace_ms=0, requeue_ms=0) == 2


def test_an_index_job_embeds_only_what_still_waits_and_hands_back_what_the_embedder_could_not(
    service, embedder
):
    done, _ = service.add_fact("bot1", "The owner drinks green tea.")
    calls = embedder.calls
    assert service.indexer.fill_vectors("bot1", [done.id]) == 0  # finished by its own write: no embed
    assert embedder.calls == calls
    embedder.down = True
    waiting, _ = service.add_fact("bot1", "The garage code is 4417.")
    assert service.indexer.sweep(grace_ms=0) == 1
    assert service.indexer.sweep(grace_ms=0) == 0  # queued already
    assert (
        service.indexer.fill_vectors("bot1", [done.id, waiting.id]) == 0
    )  # its job: the embedder still down
    assert service.indexer.sweep(grace_ms=0) == 1  # handed back to the sweep, which queues it again
