"""The record stores' contract: what the memory rules rely on, held for every implementation of
engram.ports.RecordsPort (the records, and the claims, thread tails, carriers and scope marks beside them).
A test module imports these and gives a `records` fixture: tests/unit runs them on the in-memory store,
tests/integration on the DynamoDB one under moto, so the two cannot drift apart."""

from __future__ import annotations

import pytest

from engram.errors import Unavailable
from engram.line_spans import line_around
from engram.ports import RecordsPort
from engram.record import KINDS, Duplicate, Listing, Paging, Record, new_record
from engram.store import READ_SHARDS, fact_key, source_key, walk_kind

BOT, OTHER = "bot1", "bot2"
T0 = 1_700_000_000_000


def _record(
    records: RecordsPort,
    text: str,
    *,
    bot: str = BOT,
    kind: str = "fact",
    at: int = T0,
    user: str | None = "alice",
    key: str | None = None,
    **fields: object,
) -> Record:
    return new_record(
        bot,
        records.next_id(),
        kind,
        text,
        user=user,
        created_at=at,
        updated_at=at,
        unique_key=key,
        **fields,
    )


def _stored(records: RecordsPort, text: str, **kw: object) -> Record:
    record = _record(records, text, **kw)  # type: ignore[arg-type]
    records.register_bot(record.bot)
    records.create(record)
    return record


def _message(records: RecordsPort, text: str, thread: str, at: int, **kw: object) -> Record:
    return _stored(records, text, kind="message", thread=thread, at=at, key=source_key(f"m{at}"), **kw)


# ----- records --------------------------------------------------------------------------------------


def test_a_created_record_is_read_back_whole_and_a_missing_one_is_none(records: RecordsPort):
    made = _record(
        records, "Likes tea.", server="s1", content={"a": 1}, context="before", context_author="bob"
    )
    records.register_bot(BOT)
    records.create(made)
    back = records.get(BOT, made.id)
    assert back is not None
    assert (back.text, back.kind, back.user, back.server, back.content) == (
        "Likes tea.",
        "fact",
        "alice",
        "s1",
        {"a": 1},
    )
    assert (back.context, back.context_author, back.pending) == ("before", "bob", True)
    assert records.get(BOT, made.id + 1) is None
    assert records.get(OTHER, made.id) is None


def test_a_unique_key_is_held_by_one_memory_and_a_second_create_is_told_which(records: RecordsPort):
    first = _stored(records, "Likes tea.", key=fact_key(None, None, "alice", "Likes tea."))
    second = _record(records, "likes tea", key=fact_key(None, None, "alice", "Likes tea."))
    with pytest.raises(Duplicate) as refused:
        records.create(second)
    assert refused.value.memory_id == first.id
    assert records.get(BOT, second.id) is None


def test_create_many_writes_the_records_whose_keys_are_free_and_leaves_out_the_rest(records: RecordsPort):
    held = _stored(records, "one", kind="message", key=source_key("m1"))
    batch = [
        _record(records, "one again", kind="message", key=source_key("m1")),
        _record(records, "two", kind="message", key=source_key("m2")),
        _record(records, "three", kind="message", key=source_key("m3")),
    ]
    written = records.create_many(batch)
    assert [r.text for r in written] == ["two", "three"]
    assert records.get(BOT, batch[0].id) is None
    assert records.claims.find_unique(BOT, source_key("m1")).id == held.id  # type: ignore[union-attr]


def test_a_record_id_already_taken_is_refused_never_overwritten(records: RecordsPort):
    first = _stored(records, "first")
    again = new_record(BOT, first.id, "fact", "second", user="bob", created_at=T0, updated_at=T0)
    with pytest.raises(Unavailable):
        records.create(again)
    assert records.get(BOT, first.id).text == "first"  # type: ignore[union-attr]


def test_batch_get_and_existing_leave_out_what_is_missing(records: RecordsPort):
    a, b = _stored(records, "a"), _stored(records, "b")
    missing = b.id + 1000
    assert set(records.batch_get(BOT, [a.id, b.id, missing])) == {a.id, b.id}
    assert records.existing(BOT, [a.id, missing]) == {a.id}
    assert records.existing(BOT, []) == set()
    records.delete([a])
    assert records.existing(BOT, [a.id, b.id]) == {b.id}


def test_pages_are_newest_first_below_a_cursor_or_oldest_first_above_it(records: RecordsPort):
    made = [_stored(records, f"fact {n}") for n in range(5)]
    _stored(records, "a message", kind="message")
    ids = [r.id for r in made]
    assert [r.id for r in records.page(BOT, "fact", Paging(None, 3))] == ids[::-1][:3]
    assert [r.id for r in records.page(BOT, "fact", Paging(ids[2], 10))] == [ids[1], ids[0]]
    assert [r.id for r in records.page(BOT, "fact", Paging(ids[2], 10, oldest_first=True))] == [
        ids[3],
        ids[4],
    ]
    assert [r.text for r in records.page(BOT, "message", Paging(None, 10))] == ["a message"]
    assert records.page(OTHER, "fact", Paging(None, 10)) == []


def test_the_shards_of_a_kind_together_hold_each_record_once(records: RecordsPort):
    made = {_stored(records, f"fact {n}").id for n in range(12)}
    parts = [
        r.id
        for shard in range(READ_SHARDS)
        for r in records.page(BOT, "fact", Paging(None, 100, shard=shard))
    ]
    assert sorted(parts) == sorted(made)


def test_newest_narrows_by_user_server_project_and_reads_below_a_cursor(records: RecordsPort):
    a = _stored(records, "alice s1", server="s1")
    b = _stored(records, "bob s1", server="s1", user="bob")
    c = _stored(records, "alice p1", project="p1")
    d = _stored(records, "alice s2", server="s2")
    assert [r.id for r in records.newest(BOT, "fact", 10)] == [d.id, c.id, b.id, a.id]
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(server="s1"))] == [b.id, a.id]
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(user="alice"))] == [d.id, c.id, a.id]
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(project="p1"))] == [c.id]
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(server="s1", user="alice"))] == [a.id]
    assert [r.id for r in records.newest(BOT, "fact", 1, Listing(before=c.id))] == [b.id]
    assert records.newest(BOT, "message", 10) == []


def test_a_record_naming_a_server_and_a_project_is_listed_under_either(records: RecordsPort):
    both = _stored(records, "both", server="s1", project="p1")
    project_only = _stored(records, "project", project="p1")
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(project="p1"))] == [
        project_only.id,
        both.id,
    ]
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(server="s1"))] == [both.id]
    assert records.scopes.state(BOT, "fact") == (True, True)


def test_change_text_moves_the_unique_key_and_marks_the_record_pending(records: RecordsPort):
    old, new = fact_key(None, None, "alice", "old"), fact_key(None, None, "alice", "new")
    record = _stored(records, "old", key=old)
    records.pending.mark_indexed(record, "m")
    records.change_text(record, "new", new)
    back = records.get(BOT, record.id)
    assert back is not None
    assert (back.text, back.unique_key, back.pending, back.vector_model) == ("new", new, True, None)
    assert records.claims.find_unique(BOT, old) is None
    assert records.claims.find_unique(BOT, new).id == record.id  # type: ignore[union-attr]
    _stored(records, "old", key=old)  # the old key is free again


def test_change_text_to_a_key_another_memory_holds_is_refused_and_changes_nothing(records: RecordsPort):
    other = _stored(records, "taken", key=fact_key(None, None, "alice", "taken"))
    record = _stored(records, "mine", key=fact_key(None, None, "alice", "mine"))
    with pytest.raises(Duplicate) as refused:
        records.change_text(record, "taken", fact_key(None, None, "alice", "taken"))
    assert refused.value.memory_id == other.id
    assert records.get(BOT, record.id).text == "mine"  # type: ignore[union-attr]


def test_change_message_changes_text_and_content_unless_the_record_is_gone(records: RecordsPort):
    message = _message(records, "hello", "c1", T0, content={"text": "hello"})
    assert records.change_message(message, "hello, edited", {"text": "hello, edited"})
    back = records.get(BOT, message.id)
    assert back is not None and (back.text, back.content, back.pending) == (
        "hello, edited",
        {"text": "hello, edited"},
        True,
    )
    records.delete([message])
    assert not records.change_message(message, "again", None)
    assert records.get(BOT, message.id) is None  # no stub written back


def test_clear_context_drops_whose_words_it_quoted_unless_the_record_is_gone(records: RecordsPort):
    record = _stored(records, "reply", context="quoted", context_author="bob", context_source=5)
    assert records.clear_context(record)
    back = records.get(BOT, record.id)
    assert back is not None and (back.context, back.context_author, back.context_source) == (None, None, None)
    assert record.context is None and record.pending
    records.delete([record])
    assert not records.clear_context(record)
    assert records.get(BOT, record.id) is None


def test_delete_removes_records_and_frees_their_unique_keys(records: RecordsPort):
    key = source_key("gone")
    record = _stored(records, "gone", kind="message", key=key)
    records.delete([record])
    assert records.get(BOT, record.id) is None
    assert records.claims.find_unique(BOT, key) is None
    _stored(records, "gone", kind="message", key=key)


def test_marking_indexed_and_pending_is_refused_for_a_gone_record(records: RecordsPort):
    a, b = _stored(records, "a"), _stored(records, "b")
    assert records.pending.mark_indexed(a, "model-1")
    back = records.get(BOT, a.id)
    assert back is not None and (back.pending, back.vector_model) == (False, "model-1")
    records.delete([b])
    assert not records.pending.mark_indexed(b, "model-1")
    assert not records.pending.mark_pending(b)
    assert records.get(BOT, b.id) is None
    assert records.pending.mark_pending(a)
    assert records.get(BOT, a.id).pending  # type: ignore[union-attr]


def test_the_many_forms_answer_which_records_are_gone_or_still_there(records: RecordsPort):
    a, b, c = _stored(records, "a"), _stored(records, "b"), _stored(records, "c")
    records.delete([b])
    gone = records.pending.mark_indexed_many([(a, "m"), (b, "m"), (c, None)])
    assert [r.id for r in gone] == [b.id]
    assert [r.id for r in records.pending.mark_indexed_many([(a, "m")])] == []  # already so: nothing to write
    records.delete([a])
    assert [r.id for r in records.pending.mark_indexed_many([(a, "m")])] == [a.id]
    assert [r.id for r in records.pending.mark_pending_many([a, b, c])] == [c.id]


def test_pending_ids_are_oldest_first_past_a_cursor_and_name_their_bots(records: RecordsPort):
    a, b, c = _stored(records, "a"), _stored(records, "b"), _stored(records, "c")
    _stored(records, "elsewhere", bot=OTHER)
    records.pending.mark_indexed(b, None)
    assert records.pending.ids(BOT, 10) == [a.id, c.id]
    assert records.pending.ids(BOT, 1) == [a.id]
    assert records.pending.ids(BOT, 10, after=a.id) == [c.id]
    assert records.pending.bots() == [BOT, OTHER]
    records.pending.mark_indexed_many([(a, None), (c, None)])
    assert records.pending.bots() == [OTHER]


def test_a_user_s_records_are_found_counted_and_paged_oldest_first(records: RecordsPort):
    mine = [_stored(records, f"alice {n}", kind=KINDS[n % 2]) for n in range(5)]
    _stored(records, "bob's", user="bob")
    _stored(records, "alice elsewhere", bot=OTHER)
    ids = [r.id for r in mine]
    assert sorted(records.iter_user(BOT, "alice")) == ids
    assert records.count_user(BOT, "alice") == 5
    assert records.count_user(BOT, "carol") == 0
    assert records.user_ids_oldest_first(BOT, "alice", None, 2) == ids[:2]
    assert records.user_ids_oldest_first(BOT, "alice", ids[1], 10) == ids[2:]


def test_bots_are_the_registered_ones_and_a_new_bot_s_scoped_listings_are_ready(records: RecordsPort):
    records.register_bot(BOT)
    records.register_bot(OTHER)
    records.register_bot(BOT)
    assert records.bots() == [BOT, OTHER]
    assert records.scopes.state(BOT, "fact")[0] and records.scopes.state(BOT, "message")[0]
    assert records.scopes.unscoped() == {}


def test_ids_are_new_ascending_and_never_repeat(records: RecordsPort):
    many = records.next_ids(50) + [records.next_id() for _ in range(50)]
    assert many == sorted(many) and len(set(many)) == 100


# ----- lines: what windows are read along -----------------------------------------------------------


def test_a_line_around_records_holds_reach_turns_each_side_in_time_order(records: RecordsPort):
    thread = [_message(records, f"turn {n}", "c1", T0 + n * 1000) for n in range(9)]
    _message(records, "another thread", "c2", T0 + 4500)
    lines = line_around(records, [thread[4]], reach=2)
    assert list(lines) == [thread[4].line]
    got = [r.text for r in lines[thread[4].line]]  # type: ignore[index]
    assert got[got.index("turn 4") - 2 : got.index("turn 4") + 3] == [f"turn {n}" for n in range(2, 7)]
    assert "another thread" not in got
    assert got == sorted(got, key=lambda t: int(t.split()[1]))


def test_a_step_s_line_reads_give_each_record_its_window_and_nothing_between(records: RecordsPort):
    thread = [_message(records, f"turn {n:02d}", "c1", T0 + n * 1000) for n in range(30)]
    reads = records.line_reads()
    lines = line_around(records, [thread[3], thread[25]], reach=2, reads=reads)
    got = [r.text for r in lines[thread[3].line]]  # type: ignore[index]
    assert got == [f"turn {n:02d}" for n in (1, 2, 3, 4, 5, 23, 24, 25, 26, 27)]


def test_facts_line_up_by_author_and_scope(records: RecordsPort):
    a1 = _stored(records, "a1", server="s1", at=T0)
    _stored(records, "b1", server="s1", user="bob", at=T0 + 1)
    a2 = _stored(records, "a2", server="s1", at=T0 + 2)
    _stored(records, "a elsewhere", server="s2", at=T0 + 3)
    lines = line_around(records, [a2], reach=3)
    assert [r.id for r in lines[a2.line]] == [a1.id, a2.id]  # type: ignore[index]


def test_a_record_given_its_line_later_is_found_on_it(records: RecordsPort):
    record = _message(records, "turn", "c1", T0)
    assert [r.id for r in records.give_lines([record])] == [record.id]
    records.delete([record])
    assert records.give_lines([record]) == []


def test_a_walk_pages_newest_first_and_stops_where_its_budget_ends(records: RecordsPort):
    made = [_stored(records, f"fact {n}").id for n in range(7)]
    seen: list[int] = []
    keep = lambda page: seen.extend(r.id for r in page)  # noqa: E731
    assert walk_kind(records.page, BOT, "fact", (None, 3), 60.0, keep) is None
    assert seen == made[::-1]
    seen.clear()
    cursor = walk_kind(records.page, BOT, "fact", (None, 3), 0.0, keep)
    assert seen == made[::-1][:3] and cursor == made[4]


def test_a_stamp_pass_ends_and_leaves_records_listed_under_their_scope(records: RecordsPort):
    a = _stored(records, "a", server="s1")
    assert records.stamp_scopes(BOT, "fact", None, 60.0) is None
    assert [r.id for r in records.newest(BOT, "fact", 10, Listing(server="s1"))] == [a.id]


# ----- claims --------------------------------------------------------------------------------------


def test_a_claim_is_held_by_its_memory_and_released_only_by_it(records: RecordsPort):
    record = _stored(records, "held", key=fact_key(None, None, "alice", "held"))
    key = record.unique_key
    assert key is not None
    assert records.claims.claim(BOT, key, 999, "bob") == record.id
    records.claims.release(BOT, key, 999)  # not its holder: nothing happens
    assert records.claims.find_unique(BOT, key).id == record.id  # type: ignore[union-attr]
    assert records.claims.find_uniques(BOT, [key, "fact####missing"]) == {key: record.id}


def test_a_fresh_claim_whose_record_is_not_written_yet_is_in_flight(records: RecordsPort):
    assert records.claims.claim(BOT, source_key("in-flight"), 777, "alice") is None
    assert records.claims.claim(BOT, source_key("in-flight"), 778, "bob") == 777
    assert records.claims.find_unique(BOT, source_key("in-flight")) is None  # no record holds it yet
    records.claims.release(BOT, source_key("in-flight"), 777)
    assert records.claims.claim(BOT, source_key("in-flight"), 778, "bob") is None


def test_stale_claims_are_a_user_s_claims_whose_memory_does_not_hold_them(records: RecordsPort):
    kept = _stored(records, "kept", kind="message", key=source_key("kept"))
    records.claims.claim(BOT, source_key("crashed"), 777001, "alice")
    records.claims.claim(BOT, source_key("bob-crashed"), 777002, "bob")
    assert records.claims.stale(BOT, "alice") == [source_key("crashed")]
    records.claims.drop(BOT, [source_key("crashed")])
    assert records.claims.stale(BOT, "alice") == []
    assert records.claims.stale(BOT, "bob") == [source_key("bob-crashed")]
    assert records.claims.find_unique(BOT, source_key("kept")).id == kept.id  # type: ignore[union-attr]


# ----- thread tails ---------------------------------------------------------------------------------


def test_a_thread_s_tail_is_its_newest_message_whatever_order_they_land_in(records: RecordsPort):
    records.tails.advance(BOT, "c1", T0 + 2, "second", "bob", 2)
    records.tails.advance(BOT, "c1", T0 + 1, "first", "alice", 1)  # older: ignored
    tail = records.tails.of(BOT, ["c1", "c2"])
    assert list(tail) == ["c1"]
    assert (tail["c1"].text, tail["c1"].user, tail["c1"].id, tail["c1"].at) == ("second", "bob", 2, T0 + 2)
    assert records.tails.of(OTHER, ["c1"]) == {}


def test_tails_are_dropped_by_whose_words_or_which_record_they_are(records: RecordsPort):
    records.tails.advance(BOT, "c1", T0, "alice's", "alice", 1)
    records.tails.advance(BOT, "c2", T0, "bob's", "bob", 2)
    records.tails.advance(BOT, "c3", T0, "bob's too", "bob", 3)
    assert records.tails.drop(BOT, ["c1", "c2", "c3"], user="alice") == 1
    assert records.tails.drop(BOT, ["c2", "c3"], memory_id=3) == 1
    assert sorted(records.tails.of(BOT, ["c1", "c2", "c3"])) == ["c2"]
    assert records.tails.drop(BOT, ["c2"], user="carol") == 0


# ----- carriers -------------------------------------------------------------------------------------


def test_carriers_are_found_by_whose_words_they_quote_and_from_which_record(records: RecordsPort):
    quoting = _stored(
        records, "reply", user="bob", context="alice said", context_author="alice", context_source=11
    )
    other = _stored(
        records, "reply 2", user="bob", context="alice again", context_author="alice", context_source=12
    )
    own = _stored(
        records, "mine", user="alice", context="alice before", context_author="alice", context_source=10
    )
    records.carriers.note([quoting, other, own])
    assert sorted(records.carriers.of(BOT, "alice")) == sorted([quoting.id, other.id, own.id])
    assert records.carriers.of(BOT, "alice", source=11) == [quoting.id]
    records.carriers.drop(BOT, "alice", [quoting.id])
    assert sorted(records.carriers.of(BOT, "alice")) == sorted([other.id, own.id])
    assert records.carriers.of(OTHER, "alice") == []


def test_a_reply_and_an_answer_carry_the_words_of_whom_they_answer_and_drew_on(records: RecordsPort):
    reply = _stored(records, "sure", kind="message", user="bob", content={"replyTo": {"authorId": "alice"}})
    answer = _stored(
        records, "answer", kind="message", user="bot", content={"drewOn": ["alice", "carol", "bot"]}
    )
    records.carriers.note([reply, answer])
    assert sorted(records.carriers.of(BOT, "alice")) == sorted([reply.id, answer.id])
    assert records.carriers.of(BOT, "carol") == [answer.id]
    assert records.carriers.of(BOT, "bot") == []  # no one carries their own words
    assert records.carriers.of(BOT, "bob") == []


# ----- scope marks ----------------------------------------------------------------------------------


def test_a_pass_is_claimed_once_until_its_time_to_try_again(records: RecordsPort):
    assert records.scopes.claim_stamp(BOT, again_after_ms=3_600_000)
    assert not records.scopes.claim_stamp(BOT, again_after_ms=3_600_000)
    assert records.scopes.claim_spread_pass(BOT, again_after_ms=3_600_000)
    assert not records.scopes.claim_spread_pass(BOT, again_after_ms=3_600_000)
    assert records.scopes.claim_stamp(OTHER, again_after_ms=3_600_000)


def test_mixed_scopes_are_noted_before_such_a_record_is_written(records: RecordsPort):
    records.register_bot(BOT)
    assert records.scopes.state(BOT, "fact") == (True, False)
    records.scopes.note_mixed([_record(records, "x", server="s1", project="p1")])
    assert records.scopes.state(BOT, "fact") == (True, True)
    assert records.scopes.state(OTHER, "fact") == (False, False)
