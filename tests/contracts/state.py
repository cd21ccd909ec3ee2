"""The state stores' contract: what the memory rules rely on, held for every implementation of
engram.ports.StatePort. A test module imports these and gives a `state` fixture: tests/unit runs them on
the in-memory stores, tests/integration on the DynamoDB ones under moto, so the two cannot drift apart."""

from __future__ import annotations

from engram import access_keys
from engram.bookkeeping import ChannelSeen, Cursor, EmbeddingSettings, RosterMark, Unreadable
from engram.ports import StatePort
from engram.record import Record

BOT, ALICE, BOB = "bot1", "alice", "bob"


def test_embedder_settings_are_none_until_saved_then_read_back(state: StatePort):
    assert state.embedder_settings.get() is None
    chosen = EmbeddingSettings(
        embedder="remote", embeddingProvider="ollama", embeddingModel="m", messageVectors=10
    )
    state.embedder_settings.save(chosen)
    assert state.embedder_settings.get() == chosen


def test_a_chains_next_step_is_claimed_once_per_position_and_positions_only_rise(state: StatePort):
    from engram.store.state.follow_ons import CLAIM_STALE_MS

    chains, now = state.follow_ons, 1_800_000_000_000
    assert chains.claim("c", 4, now)
    assert not chains.claim("c", 4, now)  # a duplicate delivery of the same step
    chains.sent("c", 4)
    assert chains.claim("c", 5, now)  # the next step's follow-on
    assert not chains.claim("c", 4, now + 10 * CLAIM_STALE_MS)  # an old step again
    # claimed and never marked sent (its claimer cut off): taken over once stale, not before
    assert not chains.claim("c", 5, now + CLAIM_STALE_MS // 2)
    assert chains.claim("c", 5, now + 2 * CLAIM_STALE_MS)
    chains.sent("c", 5)
    assert not chains.claim("c", 5, now + 10 * CLAIM_STALE_MS)  # sent: never again
    # a send that failed gives the claim back at once; chains are apart; positions may be negative and large
    assert chains.claim("d", -(2**63) * 1000, now)
    chains.release("d", -(2**63) * 1000)
    assert chains.claim("d", -(2**63) * 1000, now)
    assert chains.claim("d", -(2**62) * 1000, now) and chains.claim("c", 6, now)


def test_chat_settings_per_chat_and_a_default_and_none_drops_one(state: StatePort):
    state.chat_settings.set(BOT, ALICE, "c1", False)
    state.chat_settings.set(BOT, ALICE, None, True)
    assert state.chat_settings.of(BOT, ALICE) == {"c1": False, None: True}
    state.chat_settings.set(BOT, ALICE, "c1", None)
    assert state.chat_settings.of(BOT, ALICE) == {None: True}
    assert state.chat_settings.of(BOT, BOB) == {}


def test_a_reembed_chain_is_counted_through_once_and_told_what_is_left(state: StatePort):
    assert state.reembeds.end_chain("v", "c1") is None  # no plan on record
    state.reembeds.start("v", 2)
    assert state.reembeds.left("v") == 2
    assert state.reembeds.end_chain("v", "c1") == (1, False)
    assert state.reembeds.end_chain("v", "c1") == (1, False)  # a redelivery counts nothing again
    assert state.reembeds.end_chain("v", "c2") == (0, False)
    state.reembeds.mark_followed("v")
    assert state.reembeds.end_chain("v", "c2") == (0, True)
    state.reembeds.start("v", 3)  # a new plan replaces the last
    assert state.reembeds.left("v") == 3 and state.reembeds.end_chain("v", "c1") == (2, False)


def test_tombstones_say_when_each_user_was_last_forgotten(state: StatePort):
    assert state.tombstones.when(BOT, [ALICE]) == {}
    state.tombstones.mark(BOT, ALICE, 100)
    state.tombstones.mark(BOT, ALICE, 200)
    state.tombstones.mark("bot2", BOB, 5)
    assert state.tombstones.when(BOT, [ALICE]) == {ALICE: 200}
    assert state.tombstones.when(BOT, [ALICE, BOB, ""]) == {ALICE: 200}
    assert state.tombstones.when(BOT, []) == {}
    state.tombstones.mark(BOT, BOB, 7)
    assert state.tombstones.page(BOT, None, 10) == sorted([(ALICE, 200), (BOB, 7)])
    first = state.tombstones.page(BOT, None, 1)
    assert len(first) == 1 and state.tombstones.page(BOT, first[0][0], 10) == [
        t for t in sorted([(ALICE, 200), (BOB, 7)]) if t[0] > first[0][0]
    ]
    assert state.tombstones.page("bot3", None, 10) == []


def test_a_forget_under_way_ends_only_for_its_own_time_or_a_later_one(state: StatePort):
    state.tombstones.begin(BOT, ALICE, 100, 150)
    assert state.tombstones.under_way(BOT) == {ALICE: (100, 150)}
    assert state.tombstones.under_way("bot2") == {}
    state.tombstones.begin(BOT, ALICE, 300, 310)  # a later forget of the same user, begun meanwhile
    state.tombstones.end(BOT, ALICE, 100)
    assert state.tombstones.under_way(BOT)[ALICE].at == 300
    state.tombstones.end(BOT, ALICE, 300)
    assert state.tombstones.under_way(BOT) == {}


def test_consent_names_its_servers_and_puts_them_on_the_roster(state: StatePort):
    assert state.consents.get(BOT, ALICE) is None and not state.consents.anyone(BOT)
    state.consents.give(BOT, ALICE, 42, guilds=["g2", "g1"])
    held = state.consents.get(BOT, ALICE)
    assert held is not None and held.consented_at == 42 and held.guilds == ("g1", "g2")
    assert state.consents.anyone(BOT) and not state.consents.anyone("bot2")
    assert state.consents.consenting(BOT, {ALICE, BOB, ""}) == {ALICE}
    assert state.roster.page(BOT, None, 10) == ["g1", "g2"]


def test_a_consent_given_before_servers_were_kept_names_none_and_takes_none_added(state: StatePort):
    state.consents.give(BOT, ALICE, 1)
    state.consents.add_guilds(BOT, ALICE, ["g9"])
    held = state.consents.get(BOT, ALICE)
    assert held is not None and held.guilds is None
    assert state.roster.page(BOT, None, 10) == []


def test_servers_found_later_join_the_consent_unless_a_forget_came_first(state: StatePort):
    state.consents.give(BOT, ALICE, 1, guilds=["g1"])
    state.consents.add_guilds(BOT, ALICE, ["g3", "g1"])
    held = state.consents.get(BOT, ALICE)
    assert held is not None and held.guilds == ("g1", "g3")
    assert state.roster.page(BOT, None, 10) == ["g1", "g3"]
    state.forget_user(BOT, ALICE)
    state.consents.add_guilds(BOT, ALICE, ["g4"])  # a forget meanwhile wins: nothing is written back
    assert state.consents.get(BOT, ALICE) is None


def test_consents_are_paged_in_key_order_with_where_to_read_on(state: StatePort):
    for n, user in enumerate(["u1", "u2", "u3"]):
        state.consents.give(BOT, user, n, guilds=[f"g{n}"] if n != 1 else None)
    lists, after = state.consents.guilds_page(BOT, None, 2)
    assert lists == [["g0"], None] and after is not None
    lists, after = state.consents.guilds_page(BOT, after, 2)
    assert lists == [["g2"]] and after is None


def test_a_left_server_is_due_after_its_grace_once_and_cleared(state: StatePort):
    state.roster.mark_left(BOT, "g1", 1_000)
    state.roster.mark_left(BOT, "g2", 5_000)
    state.roster.mark_left(BOT, "g1", 9_000)  # seen gone again: the first due time stands
    assert state.roster.left_due(BOT, 999, 10) == []
    assert state.roster.left_due(BOT, 1_000, 10) == ["g1"]
    assert sorted(state.roster.left_due(BOT, 6_000, 10)) == ["g1", "g2"]
    assert len(state.roster.left_due(BOT, 6_000, 1)) == 1
    state.roster.clear_left(BOT, "g1")
    assert state.roster.left_due(BOT, 10_000, 10) == ["g2"]
    assert state.roster.left_due("another-bot", 10_000, 10) == []


def test_the_roster_pages_from_after_a_server_and_drops_one(state: StatePort):
    state.roster.add(BOT, ["g3", "g1", "g2", "g1"])
    assert state.roster.page(BOT, None, 2) == ["g1", "g2"]
    assert state.roster.page(BOT, "g1", 5) == ["g2", "g3"]
    state.roster.drop(BOT, "g2")
    assert state.roster.page(BOT, None, 5) == ["g1", "g3"]
    state.roster.add(BOT, [])
    assert state.roster.page("bot2", None, 5) == []


def test_the_roster_mark_starts_fresh_and_is_kept_whole(state: StatePort):
    assert state.roster.mark(BOT) == RosterMark()
    mark = RosterMark(after="g2", turn=3, built=True, consents_after=None, every_server=True)
    state.roster.set_mark(BOT, mark)
    assert state.roster.mark(BOT) == mark


def test_a_backfill_run_counts_each_channel_done_once(state: StatePort):
    assert state.backfills.get(BOT, ALICE) is None
    state.backfills.start(BOT, ALICE, "r1", channels=2, issued_at=7)
    counted = state.backfills.count(BOT, ALICE, "r1", "c1", stored=5, finished=False)
    assert counted is not None and (counted.left, counted.count, counted.issued_at) == (2, 5, 7)
    assert state.backfills.count(BOT, ALICE, "r1", "c1", stored=1, finished=True) is not None
    assert state.backfills.count(BOT, ALICE, "r1", "c1", stored=1, finished=True) is None  # a duplicate
    run = state.backfills.get(BOT, ALICE)
    assert run is not None and (run.run, run.left, run.count, run.channels, run.done) == ("r1", 1, 6, 2, 1)
    assert state.backfills.count(BOT, ALICE, "other-run", "c2", stored=1, finished=True) is None


def test_planning_steps_add_channels_once_each(state: StatePort):
    state.backfills.start(BOT, ALICE, "r1", channels=1, issued_at=0, planning=1)
    counted = state.backfills.plan(BOT, ALICE, "r1", "servers#0", channels=3, planning=2)
    assert counted is not None and counted.left == 1 + 3 + 2
    assert state.backfills.plan(BOT, ALICE, "r1", "servers#0", channels=3, planning=2) is None
    run = state.backfills.get(BOT, ALICE)
    assert run is not None and (run.left, run.channels, run.done) == (6, 4, 0)
    assert state.backfills.plan(BOT, ALICE, "r0", "servers#1", channels=1, planning=0) is None


def test_the_final_message_is_claimed_by_one_job_once_nothing_is_left_and_can_be_given_back(state: StatePort):
    state.backfills.start(BOT, ALICE, "r1", channels=1, issued_at=9)
    assert state.backfills.claim_final(BOT, ALICE, "r1") is None  # a channel is still left
    state.backfills.count(BOT, ALICE, "r1", "c1", stored=4, finished=True)
    claimed = state.backfills.claim_final(BOT, ALICE, "r1")
    assert claimed is not None and (claimed.left, claimed.count, claimed.issued_at) == (0, 4, 9)
    assert state.backfills.claim_final(BOT, ALICE, "r1") is None
    state.backfills.release_final(BOT, ALICE, "r1")
    assert state.backfills.claim_final(BOT, ALICE, "r1") is not None
    assert state.backfills.claim_final(BOT, ALICE, "r2") is None


def test_a_run_s_token_is_handed_out_only_while_it_is_valid(state: StatePort):
    state.backfills.keep_token(BOT, ALICE, "r1", "tok", expires_s=1_000)
    assert state.backfills.token(BOT, ALICE, "r1", now_s=999) == "tok"
    assert state.backfills.token(BOT, ALICE, "r2", now_s=999) is None
    assert state.backfills.token(BOT, ALICE, "r1", now_s=1_000) is None
    assert state.backfills.token(BOT, ALICE, "r1", now_s=0) is None  # an expired one is deleted


def test_the_queued_mark_is_made_only_on_the_cursor_as_it_was_saved(state: StatePort):
    saved = Cursor(before="900", run="r1", step=1, queued=False)
    state.cursors.save(BOT, ALICE, "c1", saved)
    assert state.cursors.get(BOT, ALICE, "c1") == saved
    assert state.cursors.mark_queued(BOT, ALICE, "c1", saved)
    assert state.cursors.get(BOT, ALICE, "c1") == saved.moved(queued=True)
    moved = saved.moved(before="800", step=2)
    state.cursors.save(BOT, ALICE, "c1", moved)
    assert not state.cursors.mark_queued(BOT, ALICE, "c1", saved)
    assert state.cursors.get(BOT, ALICE, "c1") == moved
    assert not state.cursors.mark_queued(BOT, ALICE, "c2", saved)  # none saved there
    assert state.cursors.get(BOT, ALICE, "c2") is None


def test_what_catch_up_knows_of_a_channel_never_moves_back(state: StatePort):
    assert state.channels.seen(BOT, "c1") == ChannelSeen() and state.channels.newest(BOT, "c1") is None
    state.channels.see(BOT, "c1", ChannelSeen(newest="100", stored_at=5, window_at=7))
    state.channels.see(BOT, "c1", ChannelSeen(newest="90", stored_at=6))
    assert state.channels.seen(BOT, "c1") == ChannelSeen("100", stored_at=6, window_at=7)
    state.channels.remember_newest(BOT, "c1", "120")
    assert state.channels.newest(BOT, "c1") == "120"
    state.channels.remember_newest(BOT, "c2", "5")
    assert state.channels.seen_many(BOT, ["c1", "c2", "c3"]) == {
        "c1": ChannelSeen("120", stored_at=6, window_at=7),
        "c2": ChannelSeen("5"),
    }


def test_recent_messages_are_watched_until_they_expire_or_are_dropped(state: StatePort):
    state.channels.note_recent(BOT, "c1", [("m1", 11, "", 100), ("m2", 12, "e", 200)], stored_at=50)
    assert state.channels.recent(BOT, "c1", now_s=99) == {"m1": (11, ""), "m2": (12, "e")}
    assert state.channels.recent(BOT, "c1", now_s=150) == {"m2": (12, "e")}
    assert state.channels.seen(BOT, "c1").stored_at == 50
    state.channels.drop_recent(BOT, "c1", ["m2"])
    assert state.channels.recent(BOT, "c1", now_s=0) == {"m1": (11, "")}
    state.channels.note_recent(BOT, "c1", [], stored_at=60)  # nothing stored: nothing noted
    assert state.channels.seen(BOT, "c1").stored_at == 50


def test_unreadable_channels_are_marked_read_by_name_or_all_and_cleared(state: StatePort):
    assert state.channels.content_intent(BOT) is None
    state.channels.note_content_intent(BOT, False, "flags", 3)
    intent = state.channels.content_intent(BOT)
    assert intent is not None and (intent.on, intent.how, intent.at) == (False, "flags", 3)
    state.channels.mark_unreadable(BOT, "c1", "Discord answered 403", 500)
    state.channels.mark_unreadable(BOT, "c2", "no history", 600)
    assert state.channels.unreadable(BOT, ["c1", "c3"]) == {"c1": Unreadable("Discord answered 403", 500)}
    assert set(state.channels.unreadable(BOT)) == {"c1", "c2"}
    state.channels.mark_unreadable(BOT, "c2", "no history", 7800, strikes=3)  # refused again: longer
    assert state.channels.unreadable(BOT, ["c2"])["c2"] == Unreadable("no history", 7800, 3)
    state.channels.readable_again(BOT, "c1")
    assert set(state.channels.unreadable(BOT)) == {"c2"}
    assert state.channels.unreadable(BOT, []) == {}


def test_a_servers_active_threads_are_kept_for_its_next_visit(state: StatePort):
    assert state.channels.active_threads(BOT, ["g1"]) == {"g1": set()}
    state.channels.set_active_threads(BOT, "g1", {"t1:c1:0", "t2:c1:1"})
    state.channels.set_active_threads(BOT, "g2", {"t9:c9:0"})
    both = state.channels.active_threads(BOT, ["g1", "g2", "g3"])
    assert both == {"g1": {"t1:c1:0", "t2:c1:1"}, "g2": {"t9:c9:0"}, "g3": set()}
    state.channels.set_active_threads(BOT, "g1", set())  # every thread archived
    assert state.channels.active_threads(BOT, ["g1", "g2"]) == {"g1": set(), "g2": {"t9:c9:0"}}
    assert state.channels.active_threads(BOT, []) == {}


def test_marks_remember_the_last_change_and_the_sweep_only_moves_back_when_lowered(state: StatePort):
    assert state.marks.last_change(BOT) == 0 and state.marks.sweep_mark(BOT) is None
    state.marks.note_change(BOT, 77)
    assert state.marks.last_change(BOT) == 77
    state.marks.set_sweep_mark(BOT, 500, 10)
    state.marks.lower_sweep_mark(BOT, 600)
    assert state.marks.sweep_mark(BOT) == (500, 10)
    state.marks.lower_sweep_mark(BOT, 300)
    assert state.marks.sweep_mark(BOT) == (300, 10)
    state.marks.lower_sweep_mark(BOT, -5)
    assert state.marks.sweep_mark(BOT) == (0, 10)


def test_extraction_health_counts_failures_in_a_row_until_one_works(state: StatePort):
    assert not state.marks.extraction(BOT).failing and state.marks.extraction(BOT).failures == 0
    state.marks.note_extraction(BOT, 10)
    state.marks.note_extraction(BOT, 20, "HTTP 400: temperature unsupported")
    state.marks.note_extraction(BOT, 30, "HTTP 400: temperature unsupported")
    health = state.marks.extraction(BOT)
    assert health.failing and health.failures == 2 and health.failed_at == 30 and health.ok_at == 10
    assert health.why == "HTTP 400: temperature unsupported"
    state.marks.note_extraction(BOT, 40)
    health = state.marks.extraction(BOT)
    assert not health.failing and health.failures == 0 and health.ok_at == 40 and health.failed_at == 30
    assert state.marks.extraction("another-bot").failures == 0


def test_limits_let_one_through_where_one_may_pass(state: StatePort):
    assert [state.limits.take_rate_slot(BOT, 1, 2, 99) for _ in range(3)] == [True, True, False]
    assert state.limits.take_rate_slot(BOT, 2, 2, 99)  # a new window
    assert state.limits.first_sight(BOT, "i1", 99) and not state.limits.first_sight(BOT, "i1", 99)
    assert state.limits.seen(BOT, "i1") and not state.limits.seen(BOT, "i2")
    assert state.limits.take_export_slot(BOT, ALICE, 10_000, 5)
    assert not state.limits.take_export_slot(BOT, ALICE, 14_000, 5)
    assert state.limits.take_export_slot(BOT, ALICE, 15_001, 5)
    state.limits.release_export_slot(BOT, ALICE)
    assert state.limits.take_export_slot(BOT, ALICE, 15_002, 5)


def test_forget_user_deletes_everything_of_theirs_and_counts_it(state: StatePort):
    state.consents.give(BOT, ALICE, 1, guilds=["g1"])
    state.backfills.start(BOT, ALICE, "r1", 1, 1)
    state.backfills.keep_token(BOT, ALICE, "r1", "tok", 10**10)
    state.cursors.save(BOT, ALICE, "c1", Cursor(before="5"))
    state.cursors.save(BOT, ALICE, "c2", Cursor(before="6"))
    state.chat_settings.set(BOT, ALICE, "conv", False)
    state.limits.take_export_slot(BOT, ALICE, 1_000, 5)
    state.consents.give(BOT, BOB, 1)
    state.tombstones.mark(BOT, ALICE, 5)
    _, alice_token = access_keys.mint(state.user_keys, BOT, ALICE, "laptop", 1)
    bob_key, _ = access_keys.mint(state.user_keys, BOT, BOB, None, 1)
    gone = state.forget_user(BOT, ALICE)
    assert gone == {
        "consent": 1,
        "backfill": 1,
        "exportLimit": 1,
        "tokens": 1,
        "cursors": 2,
        "chatSettings": 1,
        "keys": 1,
    }
    assert access_keys.check(state.user_keys, alice_token) is None  # a forgotten user's key opens nothing
    assert state.user_keys.of_user(BOT, ALICE) == [] and state.user_keys.of_user(BOT, BOB) == [bob_key]
    assert state.consents.get(BOT, ALICE) is None and state.backfills.get(BOT, ALICE) is None
    assert state.cursors.get(BOT, ALICE, "c1") is None and state.chat_settings.of(BOT, ALICE) == {}
    assert state.backfills.token(BOT, ALICE, "r1", 0) is None
    assert state.consents.get(BOT, BOB) is not None  # someone else's stays
    assert state.tombstones.when(BOT, [ALICE]) == {ALICE: 5}  # the tombstone stays: it is what keeps them out
    assert state.roster.page(BOT, None, 5) == ["g1"]  # a server id names no one
    assert state.forget_user(BOT, ALICE) == dict.fromkeys(gone, 0)


def test_expiring_memories_come_due_in_time_order_up_to_now_and_go_when_dropped(state: StatePort):
    def expiring(memory_id: int, at: int) -> Record:
        return Record(
            bot="b",
            id=memory_id,
            kind="fact",
            text="t",
            saved_by="owner",
            created_at=1,
            updated_at=1,
            expires_at=at,
        )

    state.expiries.note([expiring(7, 3_000), expiring(5, 1_000), expiring(6, 2_000)])
    state.expiries.note(
        [Record(bot="b", id=8, kind="fact", text="t", saved_by="owner", created_at=1, updated_at=1)]
    )
    assert state.expiries.due("b", 2_000, 10) == [
        (1_000, 5),
        (2_000, 6),
    ]  # the one that never expires: not listed
    assert state.expiries.due("b", 2_000, 1) == [(1_000, 5)]
    assert state.expiries.due("other", 9_000, 10) == []
    state.expiries.drop("b", [(1_000, 5)])
    assert state.expiries.due("b", 9_000, 10) == [(2_000, 6), (3_000, 7)]


def test_a_user_key_is_found_by_its_token_listed_under_its_user_and_revoked_for_good(state: StatePort):
    key, token = access_keys.mint(state.user_keys, BOT, ALICE, "  Claude Desktop ", 7)
    assert token.startswith("egk_") and key.name == "Claude Desktop" and key.created_at == 7
    assert access_keys.check(state.user_keys, token) == key
    # the same id with another secret, a token cut short, someone else's shape: none of them is the key
    assert access_keys.check(state.user_keys, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert access_keys.check(state.user_keys, token.rsplit("_", 1)[0]) is None
    assert access_keys.check(state.user_keys, "not-a-key") is None
    assert state.user_keys.of_user(BOT, ALICE) == [key] and state.user_keys.of_user(BOT, BOB) == []
    assert not state.user_keys.revoke(BOT, BOB, key.key_id)  # not Bob's to revoke
    assert state.user_keys.revoke(BOT, ALICE, key.key_id)
    assert access_keys.check(state.user_keys, token) is None and state.user_keys.of_user(BOT, ALICE) == []
    assert not state.user_keys.revoke(BOT, ALICE, key.key_id)
