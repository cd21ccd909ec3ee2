"""The embedded index merges inline (qdrant-edge has no background optimizer); its merges are capped at
MAX_SEGMENT_KB, so a merge takes the small segments only and its pause stays flat as the collection grows
(uncapped, it merged everything into one: a 71 s rebuild job at 1,000,000 records). No segment reaches
the indexing threshold: a merge builds no graph (with graphs, a re-embed's merges of 100,000 points took
141 s, the longest 33 s)."""

from __future__ import annotations

import json

import engram.vectors.edge as edge
from engram.vectors import IndexPoint, Scope
from engram.vectors.edge import EdgeIndex
from engram.words import WordVectorizer

WORDS = WordVectorizer()


def test_a_new_shard_caps_its_segments_builds_no_graph_and_a_purge_keeps_both(tmp_path):
    path = tmp_path / "engram"
    index = EdgeIndex(path)
    index.purge_deleted()
    index.close()
    config = json.loads((path / "edge_config.json").read_text())
    optimizers = config["optimizers"]
    assert optimizers["max_segment_size"] == edge.MAX_SEGMENT_KB
    assert optimizers["indexing_threshold"] == edge.INDEXING_THRESHOLD_KB > 1000 * edge.MAX_SEGMENT_KB


def test_a_shard_with_a_small_cap_merges_and_keeps_every_point(tmp_path, monkeypatch):
    monkeypatch.setattr(edge, "MAX_SEGMENT_KB", 100)  # 100 KB of vectors: a few thousand points a segment
    index = EdgeIndex(tmp_path / "engram")
    for start in range(0, 20_000, 1_000):
        index.upsert(
            [
                IndexPoint(
                    i + 1,
                    {"bot": "b1", "kind": "message", "user": f"u{i % 9}", "text": f"note {i} " * 8},
                    WORDS.document(f"note {i} about boats and tea number {i % 97}"),
                )
                for i in range(start, start + 1_000)
            ]
        )
    index.optimize()  # (how many segments the engine keeps at this size is its own choice: one, here)
    assert index.count(Scope(bot="b1")) == 20_000
    assert index.count(Scope(bot="b1", user="u3")) == len([i for i in range(20_000) if i % 9 == 3])
    index.close()
