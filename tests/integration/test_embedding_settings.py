"""Embedder settings, switching models behind live traffic, re-embedding and its progress."""

import hashlib
import json
import math

import httpx
import pytest

from engram.embedders import own_vector_name
from engram.embedding import Providers
from engram.errors import InvalidInput
from engram.line_windows import mean_of, mix_meaning
from engram.service import ChatMessage
from infra.poller import SqsPoller, load_function_handler


class FakeEmbeddingServer:
    """An OpenAI-style /v1/embeddings server per model, that can be stopped."""

    def __init__(self):
        self.down = False
        self.calls = 0

    def handle(self, request: httpx.Request):
        if request.url.host == "noembed":
            return httpx.Response(404, json={"error": "Not Found"})
        if self.down:
            raise httpx.ConnectError("connection refused")
        self.calls += 1
        body = json.loads(request.content)
        dim = 16 if body["model"] == "m1" else 24
        data = []
        for i, text in enumerate(body["input"]):
            v = [0.0] * dim
            for w in text.lower().split():
                w = {"beverage": "tea", "drink": "tea"}.get(w.strip("?.,"), w.strip("?.,"))
                v[int(hashlib.md5(w.encode()).hexdigest(), 16) % dim] += 1
            n = math.sqrt(sum(x * x for x in v)) or 1
            data.append({"index": i, "embedding": [x / n for x in v]})
        return httpx.Response(200, json={"data": data})


@pytest.fixture
def fake(engine):
    server = FakeEmbeddingServer()
    engine.embedding.providers = Providers(
        engine.settings,
        {"fakeai": ("http://fakeai/v1", "k"), "noembed": ("http://noembed/v1", None)},
        httpx.MockTransport(server.handle),
    )
    engine.embedding.retry_delay_s = 0
    return server


@pytest.fixture
def m1_mixes(monkeypatch):
    """The fake model m1 mixes a window's meaning into each point's, as E5 does (its own settings:
    engram.retrieval.MODEL_SETTINGS): a re-embed then writes each point's own vector beside the searched
    one, and a second pass mixes them."""
    from engram.retrieval import MODEL_SETTINGS

    monkeypatch.setitem(MODEL_SETTINGS, "m1", {"meaning_window": 0.5})


def taken(aws) -> list:
    """Every job on the jobs queue, taken off it (received and deleted), as typed jobs."""
    from engram.jobs import parse_job

    jobs = []
    while (
        got := aws["sqs"].receive_message(QueueUrl=aws["queue_url"], MaxNumberOfMessages=10).get("Messages")
    ):
        for m in got:
            aws["sqs"].delete_message(QueueUrl=aws["queue_url"], ReceiptHandle=m["ReceiptHandle"])
            jobs.append(parse_job(m["Body"]))
    return jobs


def drain(aws):
    SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0).drain()


def test_bad_changes_answer_400_and_change_nothing(engine, fake):
    before = engine.embedding.current()
    name = engine.service.dense_name
    cases = [
        ({"embedder": "remote"}, "remote needs an embeddingProvider and an embeddingModel"),
        (
            {"embedder": "remote", "embeddingProvider": "nope", "embeddingModel": "m1"},
            "no provider named 'nope'",
        ),
        (
            {"embedder": "remote", "embeddingProvider": "noembed", "embeddingModel": "m1"},
            "that provider serves no embeddings",
        ),
        ({"colour": "blue"}, "unknown settings: colour"),
        ({"messageVectors": -1}, "greater than or equal to 0"),
    ]
    for patch, reason in cases:
        with pytest.raises(InvalidInput, match=reason):
            engine.embedding.change(patch)
    fake.down = True
    with pytest.raises(InvalidInput, match="the embedding model didn't answer"):
        engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    assert engine.embedding.current() == before and engine.service.dense_name == name


def test_switching_models_reembeds_in_the_background_and_drops_the_old_vectors(engine, fake, aws):
    service = engine.service
    # three owners: a fact saved right after another by the same author carries it as context
    facts = [
        service.add_fact("b1", t, user=f"owner{i}")[0]
        for i, t in enumerate(
            ("The owner drinks green tea.", "The owner's car is red.", "The cat is called Miso.")
        )
    ]
    service.add_fact("b2", "Another bot's fact about tea.")
    assert engine.embedding.progress()["memoriesWithVectors"] == 4
    chosen = engine.embedding.change(
        {"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"}
    )
    assert chosen.embeddingModel == "m1" and service.dense_name == "dense-fakeai-m1"
    progress = engine.embedding.progress()
    assert progress["model"] == "m1" and progress["memories"] == 4 and progress["memoriesWithVectors"] == 0
    assert service.search("b1", "green tea")[0].id == facts[0].id  # words answer meanwhile
    drain(aws)
    progress = engine.embedding.progress()
    assert progress["memoriesWithVectors"] == 4 and progress["error"] is None
    # one vector a point, its own meaning: a window's is mixed in (an own vector kept beside) only for a
    # model whose settings say so (E5: engram.retrieval.MODEL_SETTINGS), and the old model's are dropped
    assert service.index.dense_names() == {"dense-fakeai-m1"}
    assert service.search("b1", "beverage", limit=1)[0].id == facts[0].id  # by the new model's meaning
    assert [m.text for m in service.list("b1")] == [f.text for f in reversed(facts)]  # records untouched


def test_a_reembed_runs_a_chain_per_bot_and_kind_at_once_and_the_last_one_finishes_it(
    engine, fake, aws, m1_mixes
):
    """Issue 32, part 5: a serial chain of pages over every record took days at 100 M; the plan queues
    every bot's facts and messages as chains of their own, one per key of the kind, and the one that ends
    last drops the old model's vectors (a redelivered last page counts once)."""

    from engram.jobs import ReembedJob
    from engram.store import READ_SHARDS

    service = engine.service
    for bot in ("b1", "b2", "b3"):
        service.add_fact(bot, f"A fact of {bot} about tea.")
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})

    def queued() -> list:
        return taken(aws)

    plan = [j for j in queued() if isinstance(j, ReembedJob)]
    assert [j.bot for j in plan] == [None]
    engine.embedding.reembed(plan[0])
    chains = [j for j in queued() if isinstance(j, ReembedJob)]
    assert sorted((j.bot, j.phase, j.shard) for j in chains) == [  # a chain per key of each kind
        (b, k, s) for b in ("b1", "b2", "b3") for k in ("fact", "message") for s in range(READ_SHARDS)
    ]
    for job in chains[:-1]:
        engine.embedding.reembed(job)
    old = service.index.dense_names() - {"dense-fakeai-m1", "dense-fakeai-m1-own"}
    assert old, "the old model's vectors stay until the last chain ends"
    reembeds = engine.state.reembeds
    start = reembeds.start

    def cut_off(vector, chains):
        raise TimeoutError("the worker was stopped here")

    reembeds.start = cut_off  # the last chain's delivery is cut off before the second pass is planned
    with pytest.raises(TimeoutError):
        engine.embedding.reembed(chains[-1])
    reembeds.start = start
    assert queued() == []
    engine.embedding.reembed(chains[-1])  # redelivered: counted once, and it plans the second pass
    assert engine.embedding.progress()["memoriesWithVectors"] == 3
    assert engine.embedding.progress()["mixing"]
    # mixing on: the last chain of the first pass plans the second, the same chains mixing each point once
    mixes = [j for j in queued() if isinstance(j, ReembedJob)]
    assert sorted((j.bot, j.phase, j.shard, j.step) for j in mixes) == [
        (j.bot, j.phase, j.shard, "mix") for j in sorted(chains, key=lambda j: (j.bot, j.phase, j.shard))
    ]
    for job in mixes[:-1]:
        engine.embedding.reembed(job)
    assert service.index.dense_names() - {"dense-fakeai-m1", "dense-fakeai-m1-own"} == old
    engine.embedding.reembed(mixes[-1])
    engine.embedding.reembed(mixes[-1])  # redelivered: counted once
    engine.embedding.reembed(chains[-1])  # a first-pass chain delivered once more: nothing follows twice
    assert service.index.dense_names() == {"dense-fakeai-m1", "dense-fakeai-m1-own"}
    assert queued() == [] and not engine.embedding.progress()["mixing"]


def test_a_reembed_step_delivered_twice_queues_its_next_step_once(engine, fake, aws, m1_mixes, monkeypatch):
    """Issue 46: SQS delivers at least once. A step delivered twice (or redelivered after its follow-on was
    queued) used to queue its next step twice, and each copy went on to the chain's end, doubling with every
    duplicate. Each step now claims its follow-on first: every position is queued once, the re-embed ends."""
    import engram.embedding
    from engram.jobs import ReembedJob

    monkeypatch.setattr(engram.embedding, "PAGE", 2)  # a page of two, one page a step: many steps
    monkeypatch.setattr(engram.embedding, "STEP_S", 0.0)
    service = engine.service
    for n in range(24):
        service.add_fact("b1", f"Fact number {n} about the harbour.")
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})

    def queued() -> list[ReembedJob]:
        return [job for job in taken(aws) if isinstance(job, ReembedJob)]

    [plan] = queued()
    engine.embedding.reembed(plan)
    chains = queued()
    engine.embedding.reembed(plan)  # the plan delivered again: no chain is queued twice
    assert len(chains) == 2 * 9 and queued() == []
    pending, follow_ons, steps = chains, [], 0
    while pending:
        job = pending.pop()
        engine.embedding.reembed(job)
        engine.embedding.reembed(job)  # the same step delivered again
        steps += 1
        more = queued()
        follow_ons += [(j.bot, j.phase, j.shard, j.step, j.after_id) for j in more if j.after_id is not None]
        pending += more
    assert len(follow_ons) == len(set(follow_ons)) and len(follow_ons) >= 5, sorted(follow_ons)
    assert (
        steps == len(follow_ons) + 2 * 2 * 9
    )  # each follow-on once, and each chain's first step of both passes
    assert (
        engine.embedding.progress()["memoriesWithVectors"] == 24 and not engine.embedding.progress()["mixing"]
    )
    assert service.index.dense_names() == {"dense-fakeai-m1", "dense-fakeai-m1-own"}


def test_a_reembed_page_that_failed_is_tried_again_once_however_often_it_was_delivered(engine, fake, aws):
    """Issue 46: a page whose embedder was down is queued again to be tried in a minute; a step delivered
    twice while it was down queued two tries, and each went on to its chain's end."""
    from engram.jobs import ReembedJob

    for n in range(3):
        engine.service.add_fact("b1", f"Fact number {n} about the harbour.")
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    [plan] = [job for job in taken(aws) if isinstance(job, ReembedJob)]
    engine.embedding.reembed(plan)
    from engram.record import Paging

    chain = next(  # a chain with a fact to embed
        j
        for j in taken(aws)
        if isinstance(j, ReembedJob)
        and j.phase == "fact"
        and engine.service.records.page("b1", "fact", Paging(None, 10, shard=j.shard))
    )
    fake.down = True
    for _ in range(2):
        engine.embedding.reembed(chain)  # delivered twice while the embedder is down
    [again] = [job for job in taken(aws) if isinstance(job, ReembedJob)]
    assert (again.after_id, again.attempt) == (chain.after_id, 1)
    engine.embedding.reembed(again)  # still down: tried again once more, and once only
    engine.embedding.reembed(again)
    [third] = [job for job in taken(aws) if isinstance(job, ReembedJob)]
    assert third.attempt == 2
    fake.down = False
    engine.embedding.reembed(third)
    assert [job for job in taken(aws) if isinstance(job, ReembedJob)] == []


def test_switching_back_reuses_vectors_that_still_exist(engine, fake, aws, m1_mixes):
    service = engine.service
    service.add_fact("b1", "The owner drinks green tea.")
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    drain(aws)
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m2"})
    calls = fake.calls
    engine.embedding.change(
        {"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"}
    )  # before m2 ran
    assert engine.embedding.progress()["memoriesWithVectors"] == 1
    drain(aws)
    assert fake.calls - calls <= 3  # test strings and the progress ping only: nothing re-embedded
    assert service.index.dense_names() == {"dense-fakeai-m1", "dense-fakeai-m1-own"}


def test_reembedding_mixes_each_new_vector_with_its_window_s(engine, fake, aws, m1_mixes):
    """A new model's own vectors arrive a page at a time; each page mixes them with the turns around."""
    service = engine.service
    turns = ["Shall we stop for a break?", "I want tea.", "A coffee for me."]
    ids = [
        service.add_messages(
            "b1", [ChatMessage(source_id=f"t-{n}", text=t, user=f"u{n}", thread="t", created_at=1_000 + n)]
        )
        .memories[0]
        .id
        for n, t in enumerate(turns)
    ]
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    drain(aws)
    name = "dense-fakeai-m1"
    vectors = service.index.dense_of([name, own_vector_name(name)], ids)
    own = {i: v[own_vector_name(name)] for i, v in vectors.items()}
    weight = service.retrieval.meaning_window
    assert weight and set(vectors) == set(ids)
    for at, around in ((ids[0], ids[1:]), (ids[1], [ids[0], ids[2]]), (ids[2], ids[:2])):
        expected = mix_meaning(own[at], mean_of([own[i] for i in around]), weight)
        assert max(abs(a - b) for a, b in zip(vectors[at][name], expected, strict=True)) < 1e-5


@pytest.mark.parametrize(
    "page, step_s", [(2, 0), (12, 60)], ids=["a step a page, windows pages apart", "one step, read ahead"]
)
def test_a_reembed_over_many_pages_mixes_every_point_as_a_live_write_would(
    engine, fake, aws, monkeypatch, m1_mixes, page, step_s
):
    """Two interleaved threads of nine turns, paged `page` records at a time under one key of the kind: the
    first pass writes own vectors only, the second mixes each point from its whole window, pages apart —
    what a write with every vector at hand gives (the window's turns either side, in the line's order).
    In one step, the second pass reads a page ahead: with twelve records a page, every window lies within
    the pages either side (a line is read as far as a window may reach, MOST_WINDOW_RECORDS = 6 turns, 12
    records of the two threads), and no record is read again for its neighbours' windows."""
    import engram.embedding
    import engram.store.keys

    monkeypatch.setattr(engram.embedding, "PAGE", page)
    monkeypatch.setattr(engram.embedding, "STEP_S", step_s)
    monkeypatch.setattr(engram.store.keys, "record_shard", lambda memory_id: 1)  # one chain of pages
    service = engine.service
    mixing, read_again = [False], []
    mix_own, batch_get = service.indexer.mix_own, service.records.batch_get

    def counted_mix(*args, **kwargs):
        mixing[0] = True
        try:
            return mix_own(*args, **kwargs)
        finally:
            mixing[0] = False

    def counted_get(bot, ids):
        if mixing[0]:
            read_again.extend(ids)
        return batch_get(bot, ids)

    monkeypatch.setattr(service.indexer, "mix_own", counted_mix)
    monkeypatch.setattr(service.records, "batch_get", counted_get)
    words = ["tea", "boat", "violin", "garden", "river", "bakery", "train", "rain", "music"]
    lines: dict[str, list[int]] = {"a": [], "b": []}
    for n in range(9):
        for thread in ("a", "b"):
            message = ChatMessage(
                source_id=f"{thread}-{n}",
                text=f"{words[n]} {words[(n + 3) % 9]} in {thread}",
                user=f"u{n % 3}",
                thread=thread,
                created_at=1_000 + n,
            )
            lines[thread].append(service.add_messages("b1", [message]).memories[0].id)
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    drain(aws)
    # each turn is another author's: a window is `window_turns` records each side
    name, weight, turns = "dense-fakeai-m1", service.retrieval.meaning_window, service.retrieval.window_turns
    assert weight and turns
    for ids in lines.values():
        vectors = service.index.dense_of([name, own_vector_name(name)], ids)
        own = {i: v[own_vector_name(name)] for i, v in vectors.items()}
        for at, memory_id in enumerate(ids):
            around = ids[max(0, at - turns) : at] + ids[at + 1 : at + 1 + turns]
            expected = mix_meaning(own[memory_id], mean_of([own[i] for i in around]), weight)
            assert max(abs(a - b) for a, b in zip(vectors[memory_id][name], expected, strict=True)) < 1e-5
    if step_s:
        assert read_again == []
    else:  # a step a page: the windows' records from other pages are read by key
        assert read_again


def test_off_keeps_words_and_the_embedder_stopping_mid_reembed(engine, fake, aws, monkeypatch):
    import engram.embedding
    import engram.store.keys

    monkeypatch.setattr(engram.embedding, "PAGE", 2)  # several pages, so it can stop mid-way
    monkeypatch.setattr(engram.embedding, "STEP_S", 0)  # a page a job: each job's end is looked at
    # every fact under one key of the kind, so its chain has three pages (not five chains of one)
    monkeypatch.setattr(engram.store.keys, "record_shard", lambda memory_id: 1)
    service = engine.service
    for i in range(5):
        service.add_fact("b1", f"Fact number {i} about sailing boats.")
    engine.embedding.change({"embedder": "off"})
    assert engine.embedding.progress()["model"] is None
    assert len(service.search("b1", "sailing")) == 5
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m2"})
    poller = SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0)
    poller.poll_once(wait_s=0)  # the plan: b1's facts and b1's messages, a chain per key of each
    poller.poll_once(wait_s=0)  # the first page of the first ten (the facts' key 1 among them)
    assert engine.embedding.progress()["memoriesWithVectors"] == 2
    fake.down = True  # stopped mid-way
    poller.poll_once(wait_s=0)
    progress = engine.embedding.progress()
    assert (
        progress["memoriesWithVectors"] == 2
        and progress["model"] is None
        and "did not answer" in progress["error"]
    )
    assert len(service.search("b1", "sailing")) == 5  # words keep answering
    fake.down = False
    drain(aws)
    progress = engine.embedding.progress()
    assert progress["memoriesWithVectors"] == 5 and progress["model"] == "m2" and progress["error"] is None


def test_a_record_written_while_the_embedder_is_down_is_filled_by_the_sweep(engine, fake, aws):
    engine.embedding.change({"embedder": "remote", "embeddingProvider": "fakeai", "embeddingModel": "m1"})
    drain(aws)
    fake.down = True
    memory, _ = engine.service.add_fact("b1", "The spare key is under the flowerpot.")
    assert engine.service.search("b1", "spare key")[0].id == memory.id  # by words at once
    fake.down = False
    assert engine.service.indexer.sweep(grace_ms=0) == 1
    drain(aws)
    progress = engine.embedding.progress()
    assert progress["memoriesWithVectors"] == progress["memories"] == 1
