"""The worker's job handlers run the memory rules: each job type sent by a rule, parsed from its message body
as the worker parses it, and handled on the in-memory stores and the embedded index (conftest.py). SQS's
own semantics (visibility, redelivery, the DLQ) are tested on moto and the local queue in integration."""

from __future__ import annotations

import pytest

import engram.indexing
from engram.clock import now_ms
from engram.errors import Forgotten
from engram.jobs import ForgetJob, IndexJob, IndexMaintenanceJob, SweepJob
from engram.service import ChatMessage
from engram.vectors import Scope
from engram.worker import HANDLERS
from tests.support import process_worker


def test_a_write_with_the_embedder_down_queues_nothing_and_the_sweep_s_job_fills_its_vector(
    service, engine, embedder, jobs, monkeypatch
):
    embedder.down = True
    tea, _ = service.add_fact("b", "The owner drinks green tea.")
    assert service.records.pending.ids("b", 10) == [tea.id]
    embedder.down = False
    HANDLERS[SweepJob](process_worker(engine), SweepJob())
    assert jobs.kinds() == []  # a minute's grace: its own write may still be indexing it
    later = now_ms() + 120_000
    monkeypatch.setattr(engram.indexing, "now_ms", lambda: later)
    HANDLERS[SweepJob](process_worker(engine), SweepJob())
    assert jobs.kinds() == ["index"]
    jobs.run(engine)
    assert service.records.pending.ids("b", 10) == []
    assert service.records.get("b", tea.id).vector_model == service.dense_name
    assert service.search("b", "favourite beverage?")[0].id == tea.id  # found by meaning: its vector is there


def test_a_deferred_write_queues_its_index_job_and_the_job_writes_the_point(service, engine, jobs):
    memory, _ = service.add_fact("b", "Parks the bike by the bakery.", defer_vectors=True)
    assert jobs.kinds() == ["index"]
    jobs.run(engine)
    assert service.index.count(Scope(bot="b"), service.dense_name) == 1
    assert service.records.get("b", memory.id).pending is False


def test_an_index_job_for_records_deleted_meanwhile_writes_nothing_back(service, engine):
    memory, _ = service.add_fact("b", "Gone before its job ran.", defer_vectors=True)
    service.remove("b", memory.id)
    HANDLERS[IndexJob](process_worker(engine), IndexJob(bot="b", ids=[memory.id]))
    assert service.records.get("b", memory.id) is None
    assert service.index.count(Scope(bot="b")) == 0


def test_a_forget_job_finishes_a_forget_the_door_left_under_way(service, engine, jobs):
    for n in range(30):
        service.add_fact("b", f"Alice's fact number {n}.", user="alice")
    service.add_fact("b", "Bob's fact.", user="bob")
    outcome = service.forget_user("b", "alice", budget_s=0.0)
    assert outcome["left"] > 0 and not outcome["done"]
    assert jobs.kinds().count("forget") == 1
    assert service.list("b", user="alice") == []  # hidden at once, while jobs delete
    jobs.run(engine)
    assert service.records.iter_user("b", "alice") == []
    assert engine.state.tombstones.under_way("b") == {}
    assert [m.text for m in service.list("b")] == ["Bob's fact."]


def test_a_forget_job_run_twice_changes_nothing_more(service, engine):
    service.add_fact("b", "Alice likes rowing.", user="alice")
    at = service.forget_user("b", "alice")["done"]
    assert at
    HANDLERS[ForgetJob](process_worker(engine), ForgetJob(bot="b", user="alice", at=1))
    HANDLERS[ForgetJob](process_worker(engine), ForgetJob(bot="b", user="alice", at=1))
    assert service.records.iter_user("b", "alice") == []


def test_a_job_asked_for_before_its_user_was_forgotten_is_refused(service):
    service.forget_user("b", "alice")
    with pytest.raises(Forgotten):
        service.add_fact("b", "Asked for long ago.", user="alice", origin=1)
    assert service.list("b") == []


def test_a_rebuild_fans_out_per_bot_and_part_and_restores_every_point(service, engine, jobs):
    facts = [service.add_fact("b", f"Fact {n} about gardening.")[0] for n in range(5)]
    service.add_messages("b", [ChatMessage(source_id="m1", text="A message about tomatoes.", thread="t")])
    service.index.delete([f.id for f in facts])
    assert service.index.count(Scope(bot="b")) == 1
    HANDLERS[IndexMaintenanceJob](process_worker(engine), IndexMaintenanceJob(action="rebuild"))
    assert jobs.kinds() == ["index-maintenance"]
    jobs.run(engine)
    assert service.index.count(Scope(bot="b")) == 6


def test_a_reconcile_removes_points_whose_records_are_gone(service, engine, jobs):
    kept, _ = service.add_fact("b", "Kept.")
    gone, _ = service.add_fact("b", "Gone from the records only.")
    service.records.delete([service.records.get("b", gone.id)])
    assert service.index.count(Scope(bot="b")) == 2
    HANDLERS[IndexMaintenanceJob](process_worker(engine), IndexMaintenanceJob(action="reconcile", bot="b"))
    jobs.run(engine)
    assert service.index.existing([kept.id, gone.id]) == {kept.id}


def test_the_sweep_resumes_a_forget_whose_job_was_lost(service, engine, jobs):
    for n in range(20):
        service.add_fact("b", f"Alice's note {n}.", user="alice")
    service.forget_user("b", "alice", budget_s=0.0)
    jobs.bodies.clear()  # the forget job was lost (dead-lettered)
    jobs.delays.clear()
    assert service.forgetting.resume_stalled(stalled_ms=0) == 1
    jobs.run(engine)
    assert service.records.iter_user("b", "alice") == []
    assert engine.state.tombstones.under_way("b") == {}


def test_every_job_a_rule_sends_is_one_the_worker_can_parse_and_handle(service, engine, jobs, embedder):
    embedder.down = True
    service.add_fact("b", "Queued while the embedder is down.", defer_vectors=True)
    for n in range(10):
        service.add_fact("b", f"Alice {n}.", user="alice")
    service.forget_user("b", "alice", budget_s=0.0)
    HANDLERS[SweepJob](process_worker(engine), SweepJob())
    embedder.down = False
    kinds = set(jobs.kinds())
    assert {"index", "forget"} <= kinds
    jobs.run(engine)
    assert jobs.bodies == []
