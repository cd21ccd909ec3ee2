"""The memory service's rules: what every front door relies on, held on every seam.

A test module imports these and gives `service`, `engine` and `embedder` fixtures: tests/unit runs them on
the in-memory stores and the embedded index, tests/integration on DynamoDB under moto with both index
implementations."""

import pytest

from engram.errors import InvalidInput, NotFound, Unavailable
from engram.vectors import Scope
from tests.rules import with_retrieval


def with_contexts(service):
    """The same stores and index, with contexts counting as they did before issue 48 (off by default now:
    beside windows they were worth ~0 on the leave-out): a fact's context its author's fact of the last 30
    minutes, a context's words at 0.3 and its meaning at 0.5."""
    return with_retrieval(service, words_context=0.3, dense_context=0.5, fact_context_minutes=30.0)


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


def test_search_with_embedder_down_answers_by_words(service, embedder):
    tea, _ = service.add_fact("bot1", "The owner drinks green tea.")
    embedder.down = True
    found = service.search("bot1", "green tea")
    assert [m.id for m in found] == [tea.id]
    assert "down" in service.last_error


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


def test_facts_stand_alone_by_default(service):
    first, _ = service.add_fact("bot1", "I went to a support group yesterday.", user="caroline")
    second, _ = service.add_fact("bot1", "It was really powerful.", user="caroline")
    assert [service.records.get("bot1", m.id).context for m in (first, second)] == [None, None]


def test_a_model_with_settings_of_its_own_is_tuned_by_them_and_the_others_are_not(service):
    """E5's own leave-out chose a context's meaning (engram.retrieval.MODEL_SETTINGS): while E5 embeds, a fact
    keeps its author's fact of the last 30 minutes as its context and its vector holds that context's
    meaning; under a model without settings of its own, facts stand alone again."""
    from dataclasses import replace

    from engram.embedders.e5 import E5_MODEL
    from tests.support import HashEmbedder

    shipped, chars = service.indexer.embedder, service.indexer.message_vector_chars
    assert (service.retrieval.dense_context, service.retrieval.fact_context_minutes) == (0.0, 0.0)
    service.indexer.use(HashEmbedder(model=E5_MODEL), chars)
    assert (service.retrieval.dense_context, service.retrieval.fact_context_minutes) == (0.5, 30.0)
    first, _ = service.add_fact("bot1", "I went to a support group yesterday.", user="caroline")
    second, _ = service.add_fact("bot1", "It was really powerful.", user="caroline")
    record = service.records.get("bot1", second.id)
    assert record.context == first.text
    alone = replace(record, context=None, context_author=None, context_source=None)
    mixed, own = (service.indexer.dense_vectors([r])[second.id] for r in (record, alone))
    assert mixed != own  # the context's meaning is in the fact's
    service.indexer.use(shipped, chars)
    assert service.retrieval.dense_context == 0.0
    third, _ = service.add_fact("bot1", "I paint on Sundays.", user="caroline")
    assert service.records.get("bot1", third.id).context is None
    again = service.records.get("bot1", second.id)
    assert service.indexer.dense_vectors([again]) == service.indexer.dense_vectors([alone])


def test_a_fact_carries_its_author_s_previous_fact_as_context_when_recent(service):
    service = with_contexts(service)
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

    service = with_contexts(service)
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


def test_a_forget_landing_while_a_reply_is_written_leaves_no_quoted_words_in_its_vectors(
    service, monkeypatch
):
    """Bob's reply is embedded ahead with Alice's message as its context while DynamoDB stores it; Alice is
    forgotten before the write settles: the context is cleared, and the vectors made ahead with her words
    are thrown away, not written into Bob's point."""
    from engram.service import ChatMessage
    from engram.vectors import Fusion, Query

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
        Scope(bot="bot1", user="bob"), Query(None, (name, expected), 1, Fusion(), with_vector=True)
    )
    assert [h.id for h in hits] == [record.id]
    assert hits[0].vector == pytest.approx(expected, abs=1e-5)


def test_a_question_naming_a_day_finds_that_days_memories_first(service):
    """A memory's day is its createdAt, which no leg can match: a question naming the day asks that day's
    memories too, and they move up by half the best hit's score (among the first three here), even from
    below the depth the search reaches without it."""
    from datetime import UTC, datetime

    from engram.clock import now_ms
    from engram.service import ChatMessage

    day_ms = 86_400_000
    nov_9 = int(datetime(2022, 11, 9, 19, 30, tzinfo=UTC).timestamp() * 1000)
    others = [
        ChatMessage(
            f"o{i}",
            "Nate cooked pasta, Nate cooked rice",
            user="nate",
            thread="t",
            created_at=nov_9 - (i + 3) * day_ms,
        )
        for i in range(40)
    ]
    that_day = ChatMessage(
        "d", "Some cooking this week: coconut ice cream", user="nate", thread="t", created_at=nov_9
    )
    recent = ChatMessage(
        "y", "Some cooking again: coconut sorbet", user="nate", thread="u", created_at=now_ms() - day_ms
    )
    service.add_messages("days", [*others, that_day, recent])
    by_id = {m.source_id: m.id for m in service.list("days", kind="message", limit=50)}

    def top(question):
        return [m.id for m in service.search("days", question, kind="message", limit=3)]

    assert by_id["d"] not in top("What did Nate cook?")
    assert by_id["d"] in top("What did Nate cook on 9 November, 2022?")
    assert by_id["d"] in top("What did Nate cook on November 9th, 2022?")
    assert by_id["y"] not in top("What did Nate cook?")
    assert by_id["y"] in top("What did Nate cook yesterday?")


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
