"""Forgetting's own rules on the in-memory stores (the ones every seam runs are in tests/rules/forgetting.py):
what a forget counts, whom it calls afterwards, what it leaves of others, and the Discord door's status
answer, read through the ports with no engine built."""

from __future__ import annotations

from engram.clock import now_ms
from engram.config.discord import DiscordSettings
from engram.discord.interactions import consent_status, seen_once
from engram.service import ChatMessage
from engram.store.in_memory import InMemoryRecords, InMemoryState
from engram.vectors import Scope


def test_a_forget_counts_what_it_deleted_by_kind(service):
    service.add_fact("b", "Alice's fact.", user="alice")
    service.add_fact("b", "Alice's other fact.", user="alice")
    service.add_messages("b", [ChatMessage(source_id="m1", text="Alice's message.", user="alice")])
    outcome = service.forget_user("b", "alice")
    assert (outcome["facts"], outcome["messages"], outcome["done"], outcome["left"]) == (2, 1, True, 0)
    assert outcome["vectors"] == 3


def test_a_forget_of_someone_never_written_is_done_and_counts_nothing(service):
    outcome = service.forget_user("b", "nobody")
    assert outcome["done"] and outcome["facts"] == outcome["messages"] == 0


def test_every_registered_hook_is_called_once_a_forget_is_done(service):
    called: list[tuple[str, str]] = []
    service.on_forget(lambda bot, user: called.append((bot, user)))
    service.on_forget(lambda bot, user: called.append((bot, user + "!")))
    service.forget_user("b", "alice")
    assert called == [("b", "alice"), ("b", "alice!")]


def test_a_forget_leaves_other_people_and_other_bots_whole(service):
    service.add_fact("b", "Alice's fact.", user="alice")
    bob, _ = service.add_fact("b", "Bob's fact.", user="bob")
    elsewhere, _ = service.add_fact("other", "Alice's fact.", user="alice")
    service.forget_user("b", "alice")
    assert [m.id for m in service.list("b")] == [bob.id]
    assert [m.id for m in service.list("other")] == [elsewhere.id]
    assert service.index.count(Scope(bot="other", user="alice")) == 1


def test_a_forget_deletes_the_user_s_state_everywhere_it_is_kept(service, engine):
    state = engine.state
    state.consents.give("b", "alice", at=1, guilds=["g1"])
    state.chat_settings.set("b", "alice", "c1", False)
    state.backfills.start("b", "alice", "run-1", channels=2, issued_at=1)
    service.forget_user("b", "alice")
    assert state.consents.get("b", "alice") is None
    assert state.chat_settings.of("b", "alice") == {}
    assert state.backfills.get("b", "alice") is None


def test_the_words_someone_else_quoted_leave_the_reply_but_the_reply_stays(service, embedder):
    service.add_messages(
        "b",
        [
            ChatMessage(source_id="1", text="My code is 4417.", user="alice", thread="t", created_at=1_000),
            ChatMessage(source_id="2", text="Got it, thanks.", user="bob", thread="t", created_at=2_000),
        ],
    )
    reply = service.by_source("b", "2")
    assert service.records.get("b", reply.id).context == "My code is 4417."
    embedder.down = True
    assert reply.id in [m.id for m in service.search("b", "4417", kind="message")]  # her words, in his point
    embedder.down = False
    service.forget_user("b", "alice")
    record = service.records.get("b", reply.id)
    assert record is not None and record.context is None and record.context_author is None
    embedder.down = True  # words alone: a hit can only come from the words a point holds
    assert service.search("b", "4417", kind="message") == []


def test_a_write_asked_for_after_a_forget_is_kept(service):
    service.forget_user("b", "alice", at=now_ms() - 1)  # a write in the forget's own millisecond is refused
    again, created = service.add_fact("b", "Alice opted in again.", user="alice")
    assert created and service.get("b", again.id).user == "alice"


def test_a_batch_asked_for_before_a_forget_drops_the_forgotten_user_s_messages_only(service):
    service.forget_user("b", "alice")
    added = service.add_messages(
        "b",
        [
            ChatMessage(source_id="old", text="Before the forget.", user="alice"),
            ChatMessage(source_id="bob", text="Bob's, kept.", user="bob"),
        ],
        origin=1,
    )
    assert [m.text for m in added.fresh] == ["Bob's, kept."]
    assert service.by_source("b", "old") is None


def _discord() -> DiscordSettings:
    return DiscordSettings(DISCORD_APPLICATION_ID="1", DISCORD_PUBLIC_KEY="00" * 32, DISCORD_BOT_TOKEN="t")


def test_the_status_answer_reads_consent_records_and_backfill_through_the_ports():
    settings, state, records = _discord(), InMemoryState(), InMemoryRecords()
    status = consent_status(settings, state, records)
    assert status("alice").startswith("Long-term memory is off for you.")
    state.consents.give(settings.bot, "alice", at=1)
    assert "Backfill: not started." in status("alice") and "Memories stored: 0." in status("alice")
    state.backfills.start(settings.bot, "alice", "r1", channels=3, issued_at=1)
    state.backfills.count(settings.bot, "alice", "r1", "c1", stored=4, finished=True)
    assert "1 of 3 channels done" in status("alice")


def test_an_interaction_is_seen_once_through_the_limits_port():
    settings, state = _discord(), InMemoryState()
    first_time = seen_once(settings, state.limits)
    assert first_time("i-1") and not first_time("i-1") and first_time("i-2")
