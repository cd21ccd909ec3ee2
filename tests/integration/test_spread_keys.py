"""State items every stored message writes — unique claims, thread tails, channels' catch-up state — spread
over SPREAD_SHARDS partition keys per bot instead of one; an installation whose items sit under the bot's
plain keys keeps refusing duplicates, quoting the right context and catching up from the right message
while the spread pass, queued by the sweep, moves them in bounded jobs, and after. On the template's
tables under moto, jobs run by the worker handler from the queue."""

from __future__ import annotations

import pytest

from engram.bookkeeping import ChannelSeen
from engram.domain import ChatMessage
from engram.store import spread as spread_module
from engram.store.keys import (
    SPREAD_SHARDS,
    channel_seen,
    channels_pk,
    claim_pk,
    is_claim_pk,
    source_key,
    thread_pk,
    thread_tail_pk,
    unique_pk,
)
from engram.store.models import StateItem
from engram.store.state import move_channel
from engram.upkeep import queue_stamps
from infra.poller import SqsPoller, load_function_handler


def drain(aws) -> None:
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0).drain()


def claims_of(aws, bot: str) -> dict[str, list[tuple[str, int, str | None]]]:
    """Every claim item of a bot, by its key: [(partition key, memory id, owner)]."""
    out: dict[str, list[tuple[str, int, str | None]]] = {}
    for item in aws["dynamodb"].scan(TableName="t-state")["Items"]:
        if is_claim_pk(bot, item["pk"]["S"]):
            owner = item.get("owner", {}).get("S")
            out.setdefault(item["sk"]["S"], []).append((item["pk"]["S"], int(item["memoryId"]["N"]), owner))
    return out


def store(service, bot: str, count: int, start: int = 0, user: str = "a") -> None:
    messages = [
        ChatMessage(f"m{i}", f"message number {i} about boats", user=user, server="s1", created_at=i + 1)
        for i in range(start, start + count)
    ]
    service.add_messages(bot, messages, defer_vectors=True)


def make_old(aws, bot: str) -> None:
    """What an installation older than spread claims holds: every claim under the bot's plain key."""
    for key, items in claims_of(aws, bot).items():
        for pk, memory_id, owner in items:
            StateItem(pk, key).delete()
            StateItem(unique_pk(bot), key, memory_id=memory_id, value=1, owner=owner).save()


def new_process(service, monkeypatch=None) -> None:
    """What a new process knows of the plain keys: nothing yet (it asks again)."""
    service.records.claims.claim_keys = spread_module.claim_keys()
    service.records.tails.tail_keys = spread_module.tail_keys()
    if monkeypatch is not None:
        monkeypatch.setattr(
            type(service.state.channels), "spread_keys", spread_module.PlainKey(channels_pk, move_channel)
        )


def test_claims_spread_over_the_bot_s_claim_keys_and_none_lands_on_the_plain_key(service, aws):
    store(service, "bot1", 200)
    service.add_fact("bot1", "Keeps a rowing boat on the lake.", user="a")
    held = claims_of(aws, "bot1")
    assert len(held) == 201 and all(len(items) == 1 for items in held.values())
    pks = {items[0][0] for items in held.values()}
    assert unique_pk("bot1") not in pks
    assert pks == {claim_pk("bot1", key) for key in held}
    assert len(pks) == SPREAD_SHARDS  # 201 claims over 16 keys: every key takes some
    # one query of the plain key a process, then never again (nothing is written there)
    checks = service.records.claims.claim_keys.plain_checks
    store(service, "bot1", 20, start=200)
    assert service.records.claims.claim_keys.plain_checks == checks == 1
    # a duplicate is still refused, through the spread key
    again = service.add_messages("bot1", [ChatMessage("m3", "message number 3 about boats", user="a")])
    assert (
        again.created == 0
        and again.memories[0].id == service.records.claims.find_unique("bot1", source_key("m3")).id
    )
    assert len(claims_of(aws, "bot1")) == 221


def test_an_older_installation_refuses_duplicates_before_during_and_after_its_claims_pass(
    engine, aws, monkeypatch
):
    service = engine.service
    store(service, "bot1", 30)
    fact, _ = service.add_fact("bot1", "Keeps a rowing boat on the lake.", user="a")
    make_old(aws, "bot1")
    new_process(service)
    records_before = len(service.list("bot1", "message", 100))

    def no_duplicates() -> None:
        again, created = service.add_fact("bot1", "keeps a ROWING boat on the lake.", user="a")
        assert not created and again.id == fact.id
        store(service, "bot1", 30)  # the same source ids: nothing new
        assert service.add_messages("bot1", [ChatMessage("m7", "message number 7 about boats")]).created == 0
        assert len(service.list("bot1", "message", 100)) == records_before
        assert service.records.claims.find_unique("bot1", source_key("m7")) is not None

    no_duplicates()  # before the pass: found under the plain key
    # the sweep queues one pass per bot with claims under its plain key, and not again while it runs
    monkeypatch.setattr(spread_module, "MOVE_PAGE", 4)
    monkeypatch.setattr("engram.upkeep.MAINTENANCE_STEP_S", 0.0)  # one page a job: many bounded steps
    assert queue_stamps(engine) == 1
    assert queue_stamps(engine) == 0
    # during: a move cut off after its spread write, before its plain delete
    key, items = next(iter(claims_of(aws, "bot1").items()))
    _, memory_id, owner = items[0]
    StateItem(claim_pk("bot1", key), key, memory_id=memory_id, value=1, owner=owner).save()
    no_duplicates()
    drain(aws)
    held = claims_of(aws, "bot1")
    assert len(held) == 31
    assert all(items == [(claim_pk("bot1", k), items[0][1], "bot1#a")] for k, items in held.items())
    # after: a new process asks the plain key once, finds it empty, and never asks again
    new_process(service)
    no_duplicates()
    no_duplicates()
    assert service.records.claims.claim_keys.plain_checks == 1
    assert queue_stamps(engine) == 0


def test_a_stale_claim_under_the_plain_key_is_taken_over_under_the_spread_key(service, aws):
    from engram.store import fact_key, now_ms

    key = fact_key(None, None, None, "Crash-proof fact.")
    # an older installation's claim whose record never landed
    StateItem(unique_pk("bot1"), key, memory_id=424242, value=now_ms() - 60_000).save()
    memory, created = service.add_fact("bot1", "Crash-proof fact.")
    assert created and memory.id != 424242
    assert claims_of(aws, "bot1")[key] == [(claim_pk("bot1", key), memory.id, None)]
    # one still in flight (younger than CLAIM_IN_FLIGHT_MS) is respected
    other = fact_key(None, None, None, "Being written right now.")
    StateItem(unique_pk("bot1"), other, memory_id=525252, value=now_ms()).save()
    new_process(service)
    assert service.records.claims.claim("bot1", other, 1) == 525252


def test_a_forget_releases_the_user_s_claims_under_either_key(service, aws):
    store(service, "bot1", 5, user="alice")
    store(service, "bot1", 5, start=5, user="bob")
    make_old(aws, "bot1")
    new_process(service)
    store(service, "bot1", 5, start=10, user="alice")  # spread claims beside the plain ones
    service.records.claims.claim("bot1", source_key("crash-msg"), 777001, "alice")  # its record never landed
    deleted = service.forget_user("bot1", "alice")
    assert deleted["claims"] == 1
    left = claims_of(aws, "bot1")
    assert sorted(left) == sorted(source_key(f"m{i}") for i in range(5, 10))
    assert all(owner == "bot1#bob" for items in left.values() for _, _, owner in items)


@pytest.mark.parametrize("cut_after", ["spread", "nothing"])
def test_a_move_step_cut_off_anywhere_loses_no_claim(service, aws, monkeypatch, cut_after):
    store(service, "bot1", 6)
    make_old(aws, "bot1")
    new_process(service)
    before = {k: items[0][1] for k, items in claims_of(aws, "bot1").items()}
    keys = service.records.claims.claim_keys
    original = keys.mover

    def cut(bot, item):
        if cut_after == "spread":
            StateItem(claim_pk(bot, item.sk), item.sk, memory_id=item.memory_id, value=item.value).save()
        raise RuntimeError("cut off")

    keys.mover = cut
    with pytest.raises(RuntimeError):
        keys.move_step("bot1", budget_s=30)
    keys.mover = original
    assert keys.move_step("bot1", budget_s=30) is True
    after = claims_of(aws, "bot1")
    assert {k: items[0][1] for k, items in after.items()} == before
    assert all(len(items) == 1 and items[0][0] == claim_pk("bot1", k) for k, items in after.items())


def items_under(aws, plain: str) -> dict[str, list[tuple[str, dict]]]:
    """Every item under a plain key or its spread keys, by sort key: [(partition key, item)]."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for item in aws["dynamodb"].scan(TableName="t-state")["Items"]:
        if item["pk"]["S"] == plain or item["pk"]["S"].startswith(f"{plain}~"):
            out.setdefault(item["sk"]["S"], []).append((item["pk"]["S"], item))
    return out


def to_plain(aws, plain: str) -> None:
    """What an older installation holds: every item of the kind under the plain key."""
    for sk, items in items_under(aws, plain).items():
        for pk, item in items:
            aws["dynamodb"].delete_item(TableName="t-state", Key={"pk": {"S": pk}, "sk": {"S": sk}})
            aws["dynamodb"].put_item(TableName="t-state", Item={**item, "pk": {"S": plain}})


def say(service, source: str, text: str, user: str, at: int, thread: str = "c1"):
    added = service.add_messages(
        "bot1", [ChatMessage(source, text, user=user, server="s1", thread=thread, created_at=at)]
    )
    return service.records.get("bot1", added.memories[0].id)


def test_thread_tails_under_the_plain_key_give_their_context_and_a_forget_reaches_them(
    engine, aws, monkeypatch
):
    service = engine.service
    say(service, "a1", "The ferry leaves at nine.", "alice", 1_000)
    say(service, "a2", "The museum shuts at five.", "alice", 1_000, thread="c2")
    assert set(items_under(aws, thread_pk("bot1"))) == {"c1", "c2"}
    assert all(
        pk == thread_tail_pk("bot1", t)
        for t, its in items_under(aws, thread_pk("bot1")).items()
        for pk, _ in its
    )
    to_plain(aws, thread_pk("bot1"))
    new_process(service, monkeypatch)

    # the next message of the thread quotes the tail under the plain key; its own tail is spread
    reply = say(service, "b1", "Thanks, I will be there.", "bob", 2_000)
    assert reply.context == "The ferry leaves at nine." and reply.context_author == "alice"
    assert sorted(pk for pk, _ in items_under(aws, thread_pk("bot1"))["c1"]) == sorted(
        [thread_pk("bot1"), thread_tail_pk("bot1", "c1")]
    )
    assert service.records.tails.of("bot1", ["c1"])["c1"].text == "Thanks, I will be there."
    # an older message stored late does not move the tail back
    say(service, "a0", "Is there a ferry?", "carol", 500)
    assert service.records.tails.of("bot1", ["c1"])["c1"].text == "Thanks, I will be there."

    # a forget of alice drops her words under the plain key, though a newer tail stands beside them
    service.forget_user("bot1", "alice")
    assert "ferry leaves" not in str(items_under(aws, thread_pk("bot1")))
    assert "museum" not in str(items_under(aws, thread_pk("bot1")))
    assert service.records.tails.of("bot1", ["c1"])["c1"].text == "Thanks, I will be there."


def test_the_spread_pass_moves_tails_and_channel_states_keeping_the_newer_of_each(engine, aws, monkeypatch):
    service, state = engine.service, engine.service.state
    say(service, "a1", "Old words in c1.", "alice", 1_000)
    say(service, "a2", "Words in c2.", "alice", 1_000, thread="c2")
    state.channels.see("bot1", "ch1", ChannelSeen(newest="100", stored_at=5_000, window_at=7_000))
    state.channels.see("bot1", "ch2", ChannelSeen(newest="300"))
    to_plain(aws, thread_pk("bot1"))
    to_plain(aws, channels_pk("bot1"))
    new_process(service, monkeypatch)
    state = service.state

    # a newer tail and newer channel state beside the plain ones; older parts of neither win
    say(service, "b1", "New words in c1.", "bob", 2_000)
    assert state.channels.seen("bot1", "ch1") == ChannelSeen("100", stored_at=5_000, window_at=7_000)
    state.channels.see("bot1", "ch1", ChannelSeen(newest="90", stored_at=6_000))
    assert state.channels.seen("bot1", "ch1") == ChannelSeen("100", stored_at=6_000, window_at=7_000)
    assert state.channels.seen_many("bot1", ["ch1", "ch2", "ch3"]) == {
        "ch1": ChannelSeen("100", stored_at=6_000, window_at=7_000),
        "ch2": ChannelSeen("300"),
    }

    assert queue_stamps(engine) == 1
    assert queue_stamps(engine) == 0
    drain(aws)
    tails = items_under(aws, thread_pk("bot1"))
    assert {t: [pk for pk, _ in its] for t, its in tails.items()} == {
        "c1": [thread_tail_pk("bot1", "c1")],
        "c2": [thread_tail_pk("bot1", "c2")],
    }
    moved = service.records.tails.of("bot1", ["c1", "c2"])
    assert {t: (d.text, d.at, d.user) for t, d in moved.items()} == {
        "c1": ("New words in c1.", 2_000, "bob"),
        "c2": ("Words in c2.", 1_000, "alice"),
    }
    channels = items_under(aws, channels_pk("bot1"))
    assert {c: [pk for pk, _ in its] for c, its in channels.items()} == {
        "ch1": [channel_seen("bot1", "ch1")[0]],
        "ch2": [channel_seen("bot1", "ch2")[0]],
    }
    new_process(service, monkeypatch)
    assert service.state.channels.seen_many("bot1", ["ch1", "ch2"]) == {
        "ch1": ChannelSeen("100", stored_at=6_000, window_at=7_000),
        "ch2": ChannelSeen("300"),
    }
    assert service.state.channels.spread_keys.plain_checks == 1 and queue_stamps(engine) == 0


def test_a_claim_an_older_version_writes_under_the_plain_key_during_a_deploy_is_found_within_the_hour(
    service, aws, monkeypatch
):
    """A deploy's old code runs for a few minutes beside the new: a claim it writes under the plain key
    after a new process found that key empty is looked for again once "none left" is an hour old — the
    duplicate refused, and the sweep's pass queued again — rather than never."""
    now = [1_000.0]
    service.records.claims.claim_keys = spread_module.PlainKey(
        unique_pk, spread_module.move_claim, lambda: now[0]
    )
    store(service, "bot1", 3)
    assert service.records.claims.claim_keys.plain_checks == 1  # found empty
    old, _ = service.add_fact("bot1", "Sails on Sundays.", user="a")
    make_old(aws, "bot1")  # as the old code would have written its claims (the fact's among them)
    now[0] += 60  # a minute on: "none left" is trusted, and the old claim is not looked for
    assert not service.records.claims.claim_keys.plain_left("bot1")
    now[0] += 3600
    again, created = service.add_fact("bot1", "sails on SUNDAYS.", user="a")
    assert not created and again.id == old.id
    assert service.records.claims.claim_keys.plain_checks == 2
    # and the spread pass moves it: the sweep sees a plain key with something left
    assert service.records.claims.claim_keys.plain_left("bot1")
