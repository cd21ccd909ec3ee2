"""Memory ids made without a shared counter (store/ids.py), on the template's tables under moto: a write
whose id another process already used is refused, never written over, and gives its claim back."""

from __future__ import annotations

import time

import pytest

from engram.errors import Unavailable
from engram.record import Paging
from engram.store import RecordStore, new_record
from engram.store.ids import EPOCH_MS, IdMaker, made_at_ms
from engram.store.keys import SPREAD_FROM_ID, bot_of, source_key
from engram.store.models import MemoryRecord


def same_worker(store: RecordStore) -> RecordStore:
    """Force a store onto worker 5 at one frozen millisecond: two such stores make the same ids."""
    store.ids = IdMaker(lambda: 5, clock=lambda: EPOCH_MS + 123_456)
    return store


def message(store: RecordStore, text: str, source: str):
    memory_id = store.next_id()
    return new_record(
        "bot1",
        memory_id,
        "message",
        text,
        user="alice",
        created_at=1,
        updated_at=1,
        source_id=source,
        unique_key=source_key(source),
    )


def test_an_id_taken_by_another_process_is_refused_and_nothing_is_overwritten(engine):
    first, second = same_worker(RecordStore()), same_worker(RecordStore())
    kept = message(first, "the first writer's words", "m1")
    assert first.create_many([kept]) == [kept]
    clash = message(second, "the second writer's words", "m2")
    assert clash.id == kept.id
    with pytest.raises(Unavailable, match="taken by another writer"):
        second.create_many([clash])
    assert first.get("bot1", kept.id).text == "the first writer's words"
    # the refused record's claim is given back: the next try (a new id) stores it
    assert first.claims.find_unique("bot1", source_key("m2")) is None
    retry = message(second, "the second writer's words", "m2")
    assert second.create_many([retry]) == [retry] and retry.id > kept.id


def test_service_writes_take_ids_in_time_order_with_no_counter_per_write(service, engine):
    a, _ = service.add_fact("bot1", "Likes tea.", user="alice")
    b, _ = service.add_fact("bot1", "Likes green tea.", user="alice")
    assert a.id < b.id
    assert all(abs(made_at_ms(i) - time.time() * 1000) < 60_000 for i in (a.id, b.id))
    newest = [m.id for m in service.list("bot1", "fact", 10)]
    assert newest == [b.id, a.id]


def test_records_made_before_the_spread_keys_are_read_beside_the_new_ones(service, engine):
    """A table written by the old counter keeps those rows where they are (plain keys); the same bot's new
    rows spread over its shards; every read path sees both, in id order, and a forget takes both."""
    records = service.records
    records.ids = IdMaker(lambda: 0, clock=lambda: EPOCH_MS + 1_000)  # ids below SPREAD_FROM_ID
    old = [service.add_fact("bot1", f"Old fact {i}.", user="alice", server="s1")[0] for i in range(3)]
    records.ids = IdMaker(lambda: 1, clock=lambda: int(time.time() * 1000))
    new = [service.add_fact("bot1", f"New fact {i}.", user="alice", server="s1")[0] for i in range(24)]
    assert all(m.id < SPREAD_FROM_ID for m in old) and all(m.id >= SPREAD_FROM_ID for m in new)
    rows = [r for r in MemoryRecord.scan() if bot_of(r.bot) == "bot1"]
    assert {r.bot for r in rows if int(r.id) in {m.id for m in old}} == {"bot1"}
    assert len({r.bot for r in rows if int(r.id) in {m.id for m in new}}) >= 6  # spread over the shards
    everyone = [m.id for m in new[::-1] + old[::-1]]
    # newest first through byKind (every shard and the plain key, merged), a page at a time
    first = service.list("bot1", "fact", 10)
    rest = service.list("bot1", "fact", 50, before=first[-1].id)
    assert [m.id for m in first + rest] == everyone
    assert [r.id for r in records.page("bot1", "fact", Paging(None, 100, oldest_first=True))] == everyone[
        ::-1
    ]
    assert [m.id for m in service.list("bot1", "fact", 50, user="alice")] == everyone
    assert service.get("bot1", old[0].id).text == "Old fact 0." and service.get("bot1", new[0].id)
    assert set(records.pending.ids("bot1", 100)) <= set(everyone)
    service.forget_user("bot1", "alice")
    assert [r for r in MemoryRecord.scan() if bot_of(r.bot) == "bot1"] == []
