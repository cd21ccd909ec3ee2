"""Listing one server's (or project's) memories reads that scope's records through byScope, not the bot's
whole kind; an installation older than the index is stamped in bounded jobs the sweep queues, and lists
correctly before, during and after. On the template's tables under moto, jobs run by the worker handler
from the queue."""

from __future__ import annotations

import pytest

from engram.domain import ChatMessage
from engram.jobs import SweepJob
from engram.store import records as records_module
from engram.store.keys import bot_of, scopes_ready, stamp_queued
from engram.store.models import MemoryRecord, StateItem
from engram.upkeep import queue_stamps
from infra.poller import SqsPoller, load_function_handler


def drain(aws) -> None:
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0).drain()


def store(service, bot: str, server: str, count: int, start: int = 0) -> None:
    messages = [
        ChatMessage(f"{server}-{i}", f"message {i} in {server}", user="a", server=server, created_at=i + 1)
        for i in range(start, start + count)
    ]
    service.add_messages(bot, messages, defer_vectors=True)


@pytest.fixture
def kind_index_reads(monkeypatch):
    """How many times the bot-wide byKind (or byKindKeys) index is queried."""
    calls = []
    for index in (MemoryRecord.by_kind, MemoryRecord.by_kind_keys):  # whichever the table has ready
        original = index.query

        def counted(*args, original=original, **kwargs):
            calls.append(args[0] if args else kwargs.get("hash_key"))
            return original(*args, **kwargs)

        monkeypatch.setattr(index, "query", counted)
    return calls


def ids(memories) -> list[int]:
    return [m.id for m in memories]


def test_a_server_listing_reads_that_server_only(service, kind_index_reads):
    store(service, "bot1", "big", 120)
    store(service, "bot1", "small", 3)
    small = service.list("bot1", "message", 10, server="small")
    assert [m.text for m in small] == [f"message {i} in small" for i in (2, 1, 0)]
    assert kind_index_reads == []
    # pages by `before` as the bot-wide listing does, newest first
    first = service.list("bot1", "message", 50, server="big")
    second = service.list("bot1", "message", 50, server="big", before=first[-1].id)
    third = service.list("bot1", "message", 50, server="big", before=second[-1].id)
    assert len(first) == 50 and len(second) == 50 and len(third) == 20
    listed = ids(first + second + third)
    assert listed == sorted(listed, reverse=True) and len(set(listed)) == 120
    assert kind_index_reads == []


def test_a_project_listing_finds_records_that_also_name_a_server(service, kind_index_reads):
    only, _ = service.add_fact("bot1", "Works on the search page.", project="p1")
    assert ids(service.list("bot1", "fact", 10, project="p1")) == [only.id]
    assert kind_index_reads == []  # no record names both yet: byScope alone is exact
    both, _ = service.add_fact("bot1", "Ships on Fridays.", server="s1", project="p1")
    assert ids(service.list("bot1", "fact", 10, project="p1")) == [both.id, only.id]
    assert ids(service.list("bot1", "fact", 10, server="s1", project="p1")) == [both.id]
    assert ids(service.list("bot1", "fact", 10, server="s1", project="other")) == []


def rows_of(bot: str) -> list[MemoryRecord]:
    """Every row of a bot, whichever of its partition keys holds it."""
    return [row for row in MemoryRecord.scan() if bot_of(row.bot) == bot]


def make_old(bot: str) -> None:
    """What an installation older than byScope holds: records without the key, no ready marks."""
    for row in rows_of(bot):
        row.update(actions=[MemoryRecord.scope.remove()])
    for kind in ("fact", "message"):
        StateItem(*scopes_ready(bot, kind)).delete()


def new_process(service) -> None:
    """What a new process knows of the ready marks: nothing yet (the store reads them again)."""
    service.records.forget_known()


def test_an_older_installation_is_stamped_in_bounded_jobs_and_lists_right_throughout(
    engine, aws, monkeypatch, kind_index_reads
):
    service = engine.service
    store(service, "bot1", "big", 60)
    store(service, "bot1", "small", 4)
    fact, _ = service.add_fact("bot1", "Likes tea.", server="small")
    expected = ids(service.list("bot1", "message", 10, server="small"))
    make_old("bot1")
    new_process(service)

    # before the stamp: the listing filters the kind's index, and is still right
    kind_index_reads.clear()
    assert ids(service.list("bot1", "message", 10, server="small")) == expected
    assert kind_index_reads

    # the sweep queues one pass per bot, and not again while it runs
    monkeypatch.setattr(records_module, "STAMP_PAGE", 16)
    monkeypatch.setattr("engram.upkeep.MAINTENANCE_STEP_S", 0.0)  # one page a job: many bounded steps
    assert queue_stamps(engine) == 1
    assert queue_stamps(engine) == 0
    drain(aws)
    assert all(row.scope for row in rows_of("bot1"))
    assert StateItem.get(*scopes_ready("bot1", "message")) and StateItem.get(*scopes_ready("bot1", "fact"))

    # a new process reads the marks and lists through byScope
    new_process(service)
    kind_index_reads.clear()
    assert ids(service.list("bot1", "message", 10, server="small")) == expected
    assert ids(service.list("bot1", "fact", 10, server="small")) == [fact.id]
    assert kind_index_reads == []
    assert queue_stamps(engine) == 0  # nothing left to stamp


def test_the_sweep_job_queues_the_stamp_and_requeues_a_pass_that_died(engine, aws):
    store(engine.service, "bot1", "s1", 3)
    make_old("bot1")
    new_process(engine.service)
    engine.queue.send(SweepJob())
    drain(aws)
    assert all(row.scope for row in rows_of("bot1"))
    # a pass queued more than an hour ago whose jobs dead-lettered is queued again
    make_old("bot1")
    new_process(engine.service)
    StateItem(*stamp_queued("bot1"), value=1).save()
    assert queue_stamps(engine) == 1
