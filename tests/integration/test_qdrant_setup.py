"""Qdrant set up as its multitenancy guide says (issues 32 and 46), from the documented environment: a new
collection without a global graph but one per tenant value, payloads and the words index on disk; the
searched vector's originals on disk with int8 copies in RAM, a point's own vector on disk with no graph and
no copy; shards, replicas and write consistency as the operator sets them; a server too old refused in one
line; searches whose legs carry ids and scores only, and no vectors back."""

from __future__ import annotations

import math

import pytest

from engram.config import Settings
from engram.engine import build_index
from engram.vectors import Fusion, IndexPoint, Query, Scope
from engram.words import WordVectorizer
from tests.fake_qdrant import FakeQdrant

INT8_IN_RAM = {"type": "int8", "quantile": 0.99, "always_ram": True}
NO_GRAPH = {"m": 0, "payload_m": 0}


@pytest.fixture
def qdrant():
    server = FakeQdrant().start()
    yield server
    server.stop()


def test_a_new_collection_is_made_for_tenants_with_the_operator_s_shards(qdrant, monkeypatch):
    monkeypatch.setenv("ENGRAM_QDRANT_URL", qdrant.url)
    monkeypatch.setenv("ENGRAM_QDRANT_SHARDS", "3")
    monkeypatch.setenv("ENGRAM_QDRANT_REPLICAS", "2")
    monkeypatch.setenv("ENGRAM_QDRANT_WRITE_CONSISTENCY", "2")
    index = build_index(Settings())
    index.count(Scope(bot="b1"))  # the first use makes the collection
    made = qdrant.collections["engram"]
    assert (made.hnsw_config.m, made.hnsw_config.payload_m) == (0, 16)
    assert made.quantization_config is None  # per vector: the own vector has no copy in RAM
    assert made.sparse_vectors["words"].index.on_disk and made.sparse_vectors["words"].modifier == "idf"
    assert made.on_disk_payload and (made.shard_number, made.replication_factor) == (3, 2)
    assert made.write_consistency_factor == 2
    fields = qdrant.field_indexes["engram"]
    assert fields["bot"].is_tenant and fields["kind"].enable_hnsw is False
    assert fields["createdAt"].enable_hnsw is False
    index.close()


def test_the_searched_vector_is_quantized_in_ram_and_the_own_vector_is_on_disk_alone(qdrant):
    from engram.embedders import own_vector_name
    from engram.vectors.server import QdrantServerIndex

    index = QdrantServerIndex.connect(qdrant.url, None, "engram")
    index.ensure_dense("dense-test", 4)
    index.ensure_dense(own_vector_name("dense-test"), 4)
    made = qdrant.named_vectors["engram"]["dense-test"]
    assert (made.size, made.distance) == (4, "Cosine")
    searched, own = (qdrant.vector_storage["engram"][n] for n in ("dense-test", "dense-test-own"))
    assert searched == {"on_disk": True, "quantization_config": {"scalar": INT8_IN_RAM}}
    assert "hnsw_config" not in searched  # the collection's: a graph per tenant
    assert own == {"on_disk": True, "hnsw_config": NO_GRAPH, "quantization_config": "Disabled"}
    # read back as the server reports them: a second process finds nothing to change
    patches = len(qdrant.patches)
    again = QdrantServerIndex.connect(qdrant.url, None, "engram")
    again.count(Scope(bot="b1"))
    assert len(qdrant.patches) == patches
    index.close()
    again.close()


def test_a_collection_an_older_engram_made_is_settled_in_one_patch(qdrant):
    """Quantization for the whole collection (own vectors included) and the words index in RAM, as engram
    made collections before: one PATCH moves both, then nothing more."""
    from qdrant_client.http import models as m

    from engram.vectors.server import QdrantServerIndex

    old = {
        "vectors": {},
        "sparse_vectors": {"words": {"modifier": "idf"}},
        "hnsw_config": {"m": 0, "payload_m": 16},
        "quantization_config": {"scalar": INT8_IN_RAM},
    }
    import httpx

    assert httpx.put(f"{qdrant.url}/collections/engram", json=old).status_code == 200
    for name in ("dense-old", "dense-old-own"):
        body = {"dense": {"size": 4, "distance": "Cosine"}}
        assert httpx.put(f"{qdrant.url}/collections/engram/vectors/{name}", json=body).status_code == 200
    index = QdrantServerIndex.connect(qdrant.url, None, "engram")
    index.count(Scope(bot="b1"))
    [patch] = qdrant.patches
    assert patch.quantization_config == m.Disabled.DISABLED
    assert patch.sparse_vectors["words"].index.on_disk
    assert set(patch.vectors) == {"dense-old", "dense-old-own"}
    before = len(qdrant.requests)
    QdrantServerIndex.connect(qdrant.url, None, "engram").count(Scope(bot="b1"))
    assert len(qdrant.patches) == 1
    # a later cold start asks two things before its work: the server's version and the collection's
    # settings (a missing collection is a 404 there, then made: no separate `exists` call)
    assert qdrant.requests[before:] == [
        ("GET", "/"),
        ("GET", "/collections/engram"),
        ("POST", "/collections/engram/points/count"),
    ]
    index.close()


@pytest.mark.parametrize("version", ["1.17.2", "1.9.0", ""])
def test_a_server_older_than_the_least_engram_works_with_is_refused_in_one_line(version):
    from engram.errors import IndexUnavailable
    from engram.vectors.server import QdrantServerIndex

    server = FakeQdrant(version=version).start()
    try:
        index = QdrantServerIndex.connect(server.url, None, "engram")
        with pytest.raises(IndexUnavailable) as refused:
            index.count(Scope(bot="b1"))
        assert "older than 1.18.0" in refused.value.message and "\n" not in refused.value.message
        assert "engram" not in server.collections  # nothing made on it
    finally:
        server.stop()


def test_search_legs_answer_ids_and_scores_and_only_the_hits_returned_carry_payloads(qdrant):
    from engram.vectors.server import QdrantServerIndex

    index = QdrantServerIndex.connect(qdrant.url, None, "engram")
    index.ensure_dense("dense-test", 4)
    words = WordVectorizer()
    text = "the harbour ferry leaves at noon " + "and a long tail of words " * 40
    index.upsert(
        [
            IndexPoint(
                id=i,
                payload={"bot": "b1", "kind": "fact", "text": f"{text} {i}"},
                words=words.document(f"{text} {i}"),
                dense={"dense-test": [1.0, 0.1 * i, 0.0, 0.0]},
            )
            for i in range(1, 61)
        ]
    )
    query = Query(
        words.query("harbour ferry"),
        ("dense-test", [1.0, 0.0, 0.0, 0.0]),
        limit=5,
        fusion=Fusion(candidates=50),
        with_vector=True,
    )
    hits = index.search(Scope(bot="b1"), query)
    assert len(hits) == 5 and all(h.payload["text"].startswith("the harbour") for h in hits)
    assert all(h.vector is not None and len(h.vector) == 4 for h in hits)
    # two legs of 60 candidates each as ids and scores: ~15 KB (with their texts, ~1.2 KB a candidate,
    # and vectors they were 150 KB and more)
    assert qdrant.answered_bytes < 30_000, qdrant.answered_bytes
    # a search that does not ask for vectors gets none: neither legs nor the hits' payloads carry them,
    # and each hit keeps the meaning leg's cosine
    qdrant.vectors_asked.clear()
    hits = index.search(Scope(bot="b1"), Query(query.words, query.dense, 5, query.fusion))
    assert qdrant.vectors_asked == [False, False, False]
    assert all(h.vector is None for h in hits)
    assert [h.cosine for h in hits] == pytest.approx([1 / math.sqrt(1 + (0.1 * h.id) ** 2) for h in hits])
    index.close()
