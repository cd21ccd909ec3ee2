"""The index is derived data: reconcile finds orphans and missing points both ways, rebuild restores a
lost index from the records; on both index engines."""

from engram.keeper import IndexKeeper
from engram.service import ChatMessage
from engram.vectors import IndexPoint, Scope
from engram.words import SparseVector


def test_reconcile_deletes_points_without_a_record_and_rewrites_missing_ones(service):
    kept, _ = service.add_fact("b1", "The owner drinks green tea.")
    lost, _ = service.add_fact("b1", "The garage code is 4417.")
    service.add_messages("b1", [ChatMessage(source_id="m1", text="we planted rowan trees", user="u1")])
    # a crash after the point, before the record: an orphan point
    service.index.upsert(
        [
            IndexPoint(
                id=9_999,
                payload={"bot": "b1", "kind": "fact", "text": "ghost"},
                words=SparseVector([1], [1.0]),
            )
        ]
    )
    # a point lost behind a record marked indexed
    service.index.delete([lost.id])
    keeper = IndexKeeper(service.indexer)
    done = keeper.reconcile()
    assert done["orphans_deleted"] == 1 and done["reindexed"] == 1 and done["error"] is None
    assert service.index.existing([kept.id, lost.id, 9_999]) == {kept.id, lost.id}
    assert service.search("b1", "garage code")[0].text == "The garage code is 4417."
    again = keeper.reconcile()
    assert again["orphans_deleted"] == 0 and again["reindexed"] == 0


def test_a_lost_index_is_noticed_and_rebuilt_from_the_records(service):
    for i in range(7):
        service.add_fact("b2", f"Fact number {i} about boats.", user="u1")
    service.add_messages(
        "b2", [ChatMessage(source_id=f"m{i}", text=f"message {i} about sails", user="u1") for i in range(5)]
    )
    keeper = IndexKeeper(service.indexer)
    assert not keeper.needs_rebuild()
    service.index.delete_scope(Scope(bot="b2"))  # the collection emptied (deleted directory, new Qdrant)
    assert keeper.needs_rebuild()
    done = keeper.rebuild()
    assert done["records"] == 12 and done["error"] is None
    assert service.index.count(Scope(bot="b2")) == 12
    assert (
        len(service.search("b2", "boats", limit=10)) == 7
        and len(service.search("b2", "sails", "message", 10)) == 5
    )
    assert not keeper.needs_rebuild()


def test_reconcile_pages_through_many_points(service):
    for i in range(450):
        service.index.upsert(
            [
                IndexPoint(
                    id=100_000 + i,
                    payload={"bot": "b3", "kind": "fact", "text": "x"},
                    words=SparseVector([1], [1.0]),
                )
            ]
        )
    service.records.register_bot("b3")
    done = IndexKeeper(service.indexer).reconcile("b3")
    assert done["points"] == 450 and done["orphans_deleted"] == 450
    assert service.index.count(Scope(bot="b3")) == 0


def test_with_qdrant_down_a_pass_says_so_and_changes_nothing(service, engine):
    service.add_fact("b4", "The owner drinks green tea.")
    engine.service.index.down = True
    done = IndexKeeper(service.indexer).reconcile()
    assert "Qdrant" in done["error"]
    engine.service.index.down = False


def test_a_rebuild_job_runs_in_bounded_steps_that_carry_on_from_their_cursor(
    service, engine, aws, monkeypatch
):
    """Issue 32: a whole bot's rebuild in one job fit ~50,000 records in the worker's timeout and then
    restarted from zero; each part (facts and messages, a part per key of each; points) now runs in its
    own jobs, in parallel, each a bounded step that queues its continuation, through real (moto) SQS and
    the worker function."""
    import engram.keeper
    import engram.upkeep
    from engram.jobs import IndexMaintenanceJob
    from engram.store import READ_SHARDS
    from infra.poller import SqsPoller, load_function_handler

    service.add_messages(
        "b5", [ChatMessage(source_id=f"m{i}", text=f"message {i} about sails") for i in range(450)]
    )
    service.add_fact("b5", "The owner drinks green tea.")
    service.index.delete(service.index.scroll_ids(Scope(bot="b5"), None, 1000)[0])  # the index lost
    service.index.upsert(  # and an orphan
        [
            IndexPoint(
                id=999_999, payload={"bot": "b5", "kind": "fact", "text": "x"}, words=SparseVector([1], [1.0])
            )
        ]
    )
    monkeypatch.setattr(engram.upkeep, "MAINTENANCE_STEP_S", 0.0)  # one page a step
    monkeypatch.setattr(engram.keeper, "PAGE", 20)  # ~56 messages a key: three pages, three steps
    steps = []
    send, send_many = engine.queue.send, engine.queue.send_many
    monkeypatch.setattr(engine.queue, "send", lambda job, **kw: (steps.append(job), send(job, **kw))[1])
    monkeypatch.setattr(engine.queue, "send_many", lambda jobs: (steps.extend(jobs), send_many(jobs))[1])
    engine.queue.send(IndexMaintenanceJob(action="rebuild", bot="b5"))
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0).drain()
    assert service.index.count(Scope(bot="b5")) == 451
    assert service.index.existing([999_999]) == set()
    parts = [j for j in steps if isinstance(j, IndexMaintenanceJob) and j.part and j.cursor is None]
    assert sorted((j.part, j.shard) for j in parts) == sorted(
        [("points", None)] + [(k, s) for k in ("fact", "message") for s in range(READ_SHARDS)]
    )
    continued = [j for j in steps if isinstance(j, IndexMaintenanceJob) and j.cursor is not None]
    # 450 messages over 8 keys, a page of 20: each key's part carries on from its cursor, on its own
    messages = [j.shard for j in continued if j.part == "message"]
    by_key = {s: messages.count(s) for s in range(READ_SHARDS)}
    assert by_key[0] == 0 and all(n >= 1 for s, n in by_key.items() if s), by_key
    assert all(j.bot == "b5" for j in continued)


def test_a_rebuild_writes_no_record_it_finds_whole_and_leaves_what_it_cannot_finish_to_the_sweep(
    service, monkeypatch
):
    """Issue 32: a rebuild marked every record pending, then indexed (two writes a record, 200 M at 100 M
    records); now a record already marked indexed with the model is only read back (is it still there?), and
    one the embedder could not finish is marked pending after, for the sweep."""
    facts = [service.add_fact("b6", f"Fact number {i} about lanterns.")[0] for i in range(6)]
    model = service.indexer.dense_name
    assert model and all(service.records.get("b6", f.id).vector_model == model for f in facts)
    marks = []
    for name in ("mark_indexed", "mark_pending"):
        real = getattr(service.records.pending, name)
        monkeypatch.setattr(
            service.records.pending,
            name,
            lambda r, *a, _real=real, _n=name: (marks.append(_n), _real(r, *a))[1],
        )
    keeper = IndexKeeper(service.indexer)
    service.index.delete_scope(Scope(bot="b6"))
    assert keeper.rebuild("b6")["error"] is None
    assert service.index.count(Scope(bot="b6")) == 6 and service.index.count(Scope(bot="b6"), model) == 6
    assert marks == []  # every record was whole: nothing written to the table
    service.index.delete_scope(Scope(bot="b6"))
    service.indexer.embedder.down = True
    assert keeper.rebuild("b6")["error"] is None
    assert marks == ["mark_pending"] * 6  # words now; the meaning waits for the sweep
    assert service.index.count(Scope(bot="b6")) == 6 and service.index.count(Scope(bot="b6"), model) == 0
    assert sorted(service.records.pending.ids("b6", 10)) == sorted(f.id for f in facts)
    service.indexer.embedder.down = False
    assert service.indexer.fill_vectors("b6", [f.id for f in facts]) == 6
    assert service.index.count(Scope(bot="b6"), model) == 6 and service.records.pending.ids("b6", 10) == []


def test_a_rebuild_whose_every_job_is_delivered_twice_queues_each_step_once(
    service, engine, aws, monkeypatch
):
    """Issue 46: SQS delivers at least once. A rebuild step delivered twice used to queue its continuation
    twice, and each copy carried on to its part's end, doubling with every duplicate of its own. Every job
    of the rebuild is sent twice here (the fan-outs too); each step is still queued once."""
    from collections import Counter

    import engram.keeper
    import engram.upkeep
    from engram.jobs import IndexMaintenanceJob
    from infra.poller import SqsPoller, load_function_handler

    service.add_messages(
        "b6", [ChatMessage(source_id=f"m{i}", text=f"message {i} about oars") for i in range(300)]
    )
    service.index.delete(service.index.scroll_ids(Scope(bot="b6"), None, 1000)[0])  # the index lost
    monkeypatch.setattr(engram.upkeep, "MAINTENANCE_STEP_S", 0.0)  # one page a step
    monkeypatch.setattr(engram.keeper, "PAGE", 20)
    queued: Counter = Counter()
    send = engine.queue.send

    def twice(job, **kw):
        if isinstance(job, IndexMaintenanceJob):
            queued[job.bot, job.part, job.shard, job.cursor] += 1
            send(job, **kw)
        send(job, **kw)

    monkeypatch.setattr(engine.queue, "send", twice)
    monkeypatch.setattr(engine.queue, "send_many", lambda jobs: [twice(j) for j in jobs] and None)
    engine.queue.send(IndexMaintenanceJob(action="rebuild", started=1_800_000_000_000))
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0).drain()
    assert service.index.count(Scope(bot="b6")) == 300
    continued = {k: n for k, n in queued.items() if k[3] is not None}
    assert len(continued) >= 8 and set(queued.values()) == {1}, queued
