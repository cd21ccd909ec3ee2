"""Qdrant set up as its multitenancy guide says (issue 32), from the documented environment: a new
collection without a global graph but one per tenant value, int8 copies in RAM, payloads on disk, shards
and replicas as the operator sets them; searches whose legs carry ids and scores only."""

from __future__ import annotations

import pytest

from engram.config import Settings
from engram.engine import build_index
from engram.vectors import Fusion, IndexPoint, Query, Scope
from engram.words import WordVectorizer
from tests.fake_qdrant import FakeQdrant


@pytest.fixture
def qdrant():
    server = FakeQdrant().start()
    yield server
    server.stop()


def test_a_new_collection_is_made_for_tenants_with_the_operator_s_shards(qdrant, monkeypatch):
    monkeypatch.setenv("ENGRAM_QDRANT_URL", qdrant.url)
    monkeypatch.setenv("ENGRAM_QDRANT_SHARDS", "3")
    monkeypatch.setenv("ENGRAM_QDRANT_REPLICAS", "2")
    index = build_index(Settings())
    index.count(Scope(bot="b1"))  # the first use makes the collection
    made = qdrant.collections["engram"]
    assert (made.hnsw_config.m, made.hnsw_config.payload_m) == (0, 16)
    assert made.quantization_config.scalar.type == "int8" and made.quantization_config.scalar.always_ram
    assert made.on_disk_payload and (made.shard_number, made.replication_factor) == (3, 2)
    fields = qdrant.field_indexes["engram"]
    assert fields["bot"].is_tenant and fields["kind"].enable_hnsw is False
    assert fields["createdAt"].enable_hnsw is False
    index.close()


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
    index.close()
