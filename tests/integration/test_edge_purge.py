"""The embedded index keeps no deleted point's bytes once purged (a forget asks for it locally): qdrant-edge
only marks a deleted point deleted in its segment and keeps its updates in a 32 MB write-ahead log, so
`EdgeIndex.purge_deleted` rewrites the shard from its live points; a purge cut off anywhere loses nothing."""

from __future__ import annotations

import shutil

from engram.vectors import Fusion, IndexPoint, Query, Scope
from engram.vectors.edge import EdgeIndex
from engram.words import WordVectorizer

CANARY = "quillowmarsh"
WORDS = WordVectorizer()


def point(i: int) -> IndexPoint:
    user = "alice" if i % 10 == 0 else "bob"
    text = f"{CANARY} note {i}" if user == "alice" else f"plain note {i}"
    payload = {"bot": "b1", "kind": "message", "user": user, "text": text, "createdAt": i}
    return IndexPoint(i, payload, WORDS.document(text), {"dense-test": [1.0, float(i % 7), 0.5]})


def raw(path) -> bytes:
    return b"".join(f.read_bytes() for f in path.rglob("*") if f.is_file())


def filled(path) -> EdgeIndex:
    index = EdgeIndex(path)
    index.ensure_dense("dense-test", 3)
    for start in range(0, 300, 100):
        index.upsert([point(i) for i in range(start, start + 100)])
    return index


def test_a_purge_leaves_no_deleted_point_on_disk_and_keeps_the_rest_whole(tmp_path):
    path = tmp_path / "qdrant" / "engram"
    index = filled(path)
    assert index.delete_scope(Scope(bot="b1", user="alice")) == 30
    index.close()
    assert CANARY.encode() in raw(path)  # what the purge is for: deleted, yet in the files
    index = EdgeIndex(path)
    assert index.purge_deleted() == 270
    index.upsert([point(301)])  # writes after the purge land (the fresh WAL's numbers are its own)
    index.upsert(
        [
            IndexPoint(
                1,
                {**point(1).payload, "text": "changed after the purge"},
                WORDS.document("changed after the purge"),
            )
        ]
    )
    index.close()
    assert CANARY.encode() not in raw(path)
    assert not path.with_name("engram.purged").exists() and not path.with_name("engram.old").exists()

    index = EdgeIndex(path)
    try:
        assert index.count(Scope(bot="b1")) == 271 and index.count(Scope(bot="b1", user="bob")) == 271
        # vectors copied with the points (point 1 was written again without one)
        assert index.count(Scope(bot="b1"), dense="dense-test") == 270
        hits = index.search(
            Scope(bot="b1", user="bob"), Query(WORDS.query("plain note 7"), None, 3, Fusion())
        )
        assert hits and hits[0].payload["text"] == "plain note 7"
        changed = index.search(Scope(bot="b1"), Query(WORDS.query("changed purge"), None, 1, Fusion()))
        assert [h.id for h in changed] == [1]
    finally:
        index.close()


def test_a_purge_cut_off_before_its_copy_was_finished_keeps_the_shard_as_it_was(tmp_path):
    path = tmp_path / "engram"
    filled(path).close()
    shutil.copytree(path, path.with_name("engram.purged"))  # a copy with no "complete" mark
    index = EdgeIndex(path)
    try:
        assert index.count(Scope(bot="b1")) == 300
        assert not path.with_name("engram.purged").exists()
    finally:
        index.close()


def test_a_purge_cut_off_after_its_copy_was_finished_swaps_it_in(tmp_path):
    path = tmp_path / "engram"
    index = filled(path)
    index.delete_scope(Scope(bot="b1", user="alice"))
    index.purge_deleted()
    index.close()
    # as if the process died between moving the old shard aside and moving the copy in
    path.rename(path.with_name("engram.purged"))
    (path.with_name("engram.purged") / "complete").touch()
    shutil.copytree(path.with_name("engram.purged"), path.with_name("engram.old"))
    index = EdgeIndex(path)
    try:
        assert index.count(Scope(bot="b1")) == 270
        assert not path.with_name("engram.purged").exists() and not path.with_name("engram.old").exists()
    finally:
        index.close()
