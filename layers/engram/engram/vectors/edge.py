"""The embedded engine: qdrant-edge-py, Qdrant's Rust engine in-process (~1 ms filtered hybrid query)."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from ..errors import IndexUnavailable
from ..words import SparseVector
from .base import TIE_MARGIN, WORDS, Hit, IndexPoint, Query, Scope, fuse
from .base import by_point as vectors_by_point

T = TypeVar("T")


def _query(shard: Any, request: Any) -> list[Any]:
    found: list[Any] = shard.query(request)
    return found


_KEYWORD_FIELDS = ("bot", "kind", "server", "project", "user")


def _filter(scope: Scope) -> qe.Filter:
    must: list[Any] = [qe.FieldCondition(k, match=qe.MatchValue(v)) for k, v in scope.conditions().items()]
    for key, options in scope.metadata_options():
        must.append(qe.Filter(should=[_matching(key, option) for option in options]))
    if scope.created:
        must.append(
            qe.Filter(
                should=[
                    qe.FieldCondition("createdAt", range=qe.RangeFloat(gte=float(a), lt=float(b)))
                    for a, b in scope.created
                ]
            )
        )
    if scope.alive_at is None:
        return qe.Filter(must=must)
    expired = qe.FieldCondition("expiresAt", range=qe.RangeFloat(lte=float(scope.alive_at)))
    return qe.Filter(must=must, must_not=[expired])


def _matching(key: str, option: Any) -> qe.FieldCondition:
    """A metadata value as one option matches it: a number by its range of one, text and booleans as is."""
    if isinstance(option, float):
        return qe.FieldCondition(key, range=qe.RangeFloat(gte=option, lte=option))
    return qe.FieldCondition(key, match=qe.MatchValue(option))


def _scroll(shard: Any, request: Any) -> tuple[list[Any], Any]:
    page, after = shard.scroll(request)
    return list(page), after


def _whole(point: Any) -> IndexPoint:
    """A point as the shard holds it, as engram's IndexPoint."""
    vectors = dict(point.vector or {})
    words = vectors.pop(WORDS, None)
    sparse = (
        SparseVector(list(words.indices), list(words.values)) if words is not None else SparseVector([], [])
    )
    return IndexPoint(
        int(point.id), dict(point.payload or {}), sparse, {k: list(v) for k, v in vectors.items()}
    )


def _sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(vector.indices, vector.values)


def _dense_of(vector: Any, names: list[str] | None) -> list[float] | None:
    """The one named dense vector a point came back with, if it was asked for and has it."""
    if not names or not isinstance(vector, dict) or names[0] not in vector:
        return None
    return list(vector[names[0]])


# Edge has no background optimizer: every 5,000 writes it merges inline, and without a cap it merged every
# segment into one, a pause that grew with the collection (~3.4 s more per 100,000 points: a rebuild job of
# 71 s at 1,000,000). Capped, a merge takes the small segments only (400,000 points written 1,000 at a
# time: longest merge 13.4 s uncapped, 4.9 s capped; the whole write 153 s and 75 s). Shards made before
# keep their config.
MAX_SEGMENT_KB = 50_000
# ... and it builds no graph: every segment stays plain, a filtered search an exact scan of its points
# (at 100,000 384-d points 6.6 ms p50 for a tenant of all of them, 1.9 ms with graphs). A re-embed writes
# every point twice, and with graphs each inline merge rebuilt them: 100,000 points given two vectors took
# 141 s of merges (longest 33 s, a job past 60 s), 0.03 s plain. Past a few hundred thousand memories in one
# bot, Qdrant's server builds per-tenant graphs in the background. Shards made before keep their graphs.
INDEXING_THRESHOLD_KB = 1_000_000_000  # no segment reaches it


class EdgeIndex:
    """One Edge shard on local disk; a lock serialises access since one process owns the shard."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._writes_since_optimize = 0
        self._finish_purge()
        if (self.path / "edge_config.json").exists() or (self.path / "segments").exists():
            try:
                self._shard = qe.EdgeShard.load(str(self.path))
            except Exception as exc:  # the WAL lock: one process owns a shard
                raise IndexUnavailable(
                    f"cannot open the embedded index at {self.path} (is another engram running on it?): {exc}"
                ) from exc
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            config = qe.EdgeConfig(
                vectors={},
                sparse_vectors={WORDS: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
                optimizers=qe.EdgeOptimizersConfig(
                    max_segment_size=MAX_SEGMENT_KB, indexing_threshold=INDEXING_THRESHOLD_KB
                ),
            )
            self._shard = qe.EdgeShard.create(str(self.path), config)
            self._index_fields(self._shard)

    @staticmethod
    def _index_fields(shard: qe.EdgeShard) -> None:
        for name in _KEYWORD_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        shard.update(qe.UpdateOperation.create_field_index("createdAt", qe.PayloadSchemaType.Integer))
        shard.update(qe.UpdateOperation.create_field_index("expiresAt", qe.PayloadSchemaType.Integer))

    # ----- purging: no deleted point's bytes left on disk -------------------------------------------
    # qdrant-edge marks a deleted point deleted in its segment (its payload stays in the segment's
    # payload storage until the segment is rewritten) and keeps every update in its write-ahead log, a
    # preallocated 32 MB file kept until it fills. Its WAL cannot be replaced under a shard (later updates
    # of existing points would be ignored as older than them), so a purge copies the live points into a
    # fresh shard and swaps the directories: `.purged` is the finished copy, `.old` the shard it replaces.

    def _sibling(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _finish_purge(self) -> None:
        """A purge cut off anywhere: a finished copy is swapped in, an unfinished one thrown away."""
        fresh, old = self._sibling(".purged"), self._sibling(".old")
        if fresh.exists() and not (fresh / "complete").exists():
            shutil.rmtree(fresh)
        if fresh.exists():
            if self.path.exists() and not old.exists():
                self.path.rename(old)
            (fresh / "complete").unlink()
            fresh.rename(self.path)
        elif old.exists() and not self.path.exists():
            old.rename(self.path)
        if old.exists():
            shutil.rmtree(old)

    def _copy_points(self, copy: qe.EdgeShard) -> int:
        """Every live point (vectors and payload) written into another shard; returns how many."""
        kept, after = 0, None
        while True:
            request = qe.ScrollRequest(
                offset=after, limit=1000, filter=None, with_payload=True, with_vector=True
            )
            page, after = self._shard.scroll(request)
            if page:
                copy.update(
                    qe.UpdateOperation.upsert_points(
                        [qe.Point(p.id, p.vector or {}, p.payload) for p in page]
                    )
                )
                kept += len(page)
            if after is None:
                return kept

    def purge_deleted(self) -> int:
        """Rewrite the shard from its live points so no deleted point's payload, vectors or update is left
        in any file (after a forget); returns how many points were kept. Blocks the index meanwhile."""
        with self._lock:
            fresh = self._sibling(".purged")
            if fresh.exists():
                shutil.rmtree(fresh)
            fresh.mkdir(parents=True)
            self._shard.flush()
            shutil.copy(self.path / "edge_config.json", fresh / "edge_config.json")
            copy = qe.EdgeShard.load(str(fresh))
            try:
                self._index_fields(copy)
                kept = self._copy_points(copy)
                copy.flush()
                copy.optimize()
            finally:
                copy.close()
            (fresh / "complete").touch()
            self._shard.close()
            self._finish_purge()
            self._shard = qe.EdgeShard.load(str(self.path))
            self._writes_since_optimize = 0
            return kept

    def _run(self, fn: Callable[[Any], T]) -> T:
        with self._lock:
            try:
                return fn(self._shard)
            except Exception as exc:  # the engine raises plain exceptions; callers see one kind
                raise IndexUnavailable(f"the embedded index failed: {exc}") from exc

    def dense_names(self) -> set[str]:
        """The named dense vectors the shard has (its persisted config lists them)."""
        with self._lock:
            self._shard.flush()
            config = json.loads((self.path / "edge_config.json").read_text())
            return set((config.get("vectors") or {}).keys())

    def ensure_dense(self, name: str, size: int) -> None:
        """Create the named dense vector (cosine) unless it exists."""
        with self._lock:
            if name not in self.dense_names():
                self._run(
                    lambda s: s.update(qe.UpdateOperation.create_dense_vector(name, size, qe.Distance.Cosine))
                )
                self._shard.flush()

    def delete_dense(self, name: str) -> None:
        """Drop a named dense vector (every point's)."""
        with self._lock:
            if name in self.dense_names():
                self._run(lambda s: s.update(qe.UpdateOperation.delete_vector_name(name)))
                self._shard.flush()

    def upsert(self, points: list[IndexPoint]) -> None:
        """Write whole points."""
        if not points:
            return
        edge_points = [qe.Point(p.id, {WORDS: _sparse(p.words), **p.dense}, p.payload) for p in points]
        self._run(lambda s: s.update(qe.UpdateOperation.upsert_points(edge_points)))
        self._after_writes(len(points))

    def set_vectors(self, words: dict[int, SparseVector], dense: dict[str, dict[int, list[float]]]) -> None:
        """Replace words and named dense vectors of existing points in one update."""
        by_point = vectors_by_point(words, dense, _sparse)
        if by_point:
            ops = [qe.PointVectors(i, named) for i, named in by_point.items()]
            self._run(lambda s: s.update(qe.UpdateOperation.update_vectors(ops)))
            self._after_writes(len(by_point))

    def dense_of(self, names: list[str], ids: list[int]) -> dict[int, dict[str, list[float]]]:
        """Every one of these points the shard holds, with those of the named dense vectors it has."""
        if not ids:
            return {}
        vectors: list[str] | bool = list(names) or False
        found = self._run(lambda s: s.retrieve(list(ids), False, vectors))
        return {
            int(p.id): {n: list(v) for n, v in p.vector.items() if n in names}
            if isinstance(p.vector, dict)
            else {}
            for p in found
        }

    def delete(self, ids: list[int]) -> None:
        """Delete points by id."""
        if ids:
            self._run(lambda s: s.update(qe.UpdateOperation.delete_points(list(ids))))

    def delete_scope(self, scope: Scope) -> int:
        """Delete every point in a scope; returns how many there were."""
        flt = _filter(scope)

        def run(shard: Any) -> int:
            n = int(shard.count(qe.CountRequest(exact=True, filter=flt)))
            shard.update(qe.UpdateOperation.delete_points_by_filter(flt))
            return n

        return self._run(run)

    def count(self, scope: Scope, dense: str | None = None) -> int:
        """Exact count in a scope, optionally only points that have a dense vector."""
        flt = _filter(scope)
        if dense:
            flt = qe.Filter(must=[flt, qe.HasVectorCondition(dense)])
        return int(self._run(lambda s: s.count(qe.CountRequest(exact=True, filter=flt))))

    def search(self, scope: Scope, query: Query) -> list[Hit]:
        """Each side's best (words, meaning) as ids and scores, fused here (see `fuse`), then the
        payloads (and asked-for vectors) of just the hits returned."""
        words, dense, limit, fusion, with_vector = query
        flt = _filter(scope)
        legs = []
        if words is not None and words.indices:
            legs.append((qe.Query.Nearest(_sparse(words), using=WORDS), fusion.words_weight))
        if dense is not None:
            legs.append((qe.Query.Nearest(dense[1], using=dense[0]), fusion.dense_weight))
        if not legs:
            return []
        size = (max(fusion.candidates, limit) if len(legs) > 1 else limit) + TIE_MARGIN
        out = []
        for nearest, weight in legs:
            request = qe.QueryRequest(
                limit=size, query=nearest, filter=flt, with_payload=False, with_vector=False
            )
            points: list[Any] = self._run(partial(_query, request=request))
            out.append(([Hit(int(p.id), float(p.score), {}) for p in points], weight))
        hits = fuse(out, fusion, limit, len(out) - 1 if dense is not None else None)
        names = [dense[0]] if with_vector and dense is not None else None
        vectors: list[str] | bool = names or False
        records = {int(r.id): r for r in self._run(lambda s: s.retrieve([h.id for h in hits], True, vectors))}
        return [
            Hit(
                h.id,
                h.score,
                dict(records[h.id].payload or {}),
                _dense_of(records[h.id].vector, names),
                h.cosine,
            )
            for h in hits
            if h.id in records
        ]

    def existing(self, ids: list[int]) -> set[int]:
        """Which of these point ids the shard holds."""
        if not ids:
            return set()
        return {int(p.id) for p in self._run(lambda s: s.retrieve(list(ids), False, False))}

    def with_dense(self, name: str, ids: list[int]) -> set[int]:
        """Which of these points have the named dense vector."""
        if not ids:
            return set()
        flt = qe.Filter(must=[qe.HasIdCondition(set(ids)), qe.HasVectorCondition(name)])
        request = qe.ScrollRequest(
            offset=None, limit=len(ids), filter=flt, with_payload=False, with_vector=False
        )
        records, _ = self._run(lambda s: s.scroll(request))
        return {int(r.id) for r in records}

    def scroll_ids(self, scope: Scope, after: int | None, limit: int) -> tuple[list[int], int | None]:
        """One page of point ids in a scope, in id order, and the next page's first id (None: done)."""
        request = qe.ScrollRequest(
            offset=after, limit=limit, filter=_filter(scope), with_payload=False, with_vector=False
        )
        records, following = self._run(lambda s: s.scroll(request))
        return [int(r.id) for r in records], (int(following) if following is not None else None)

    def every_point(self) -> list[IndexPoint]:
        """Every point whole (payload, words, dense vectors), whatever its scope: what an audit reads (the
        residue suite; an operator checking that a forgotten person's words are gone)."""
        out: list[IndexPoint] = []
        after = None
        while True:
            request = qe.ScrollRequest(offset=after, limit=500, with_payload=True, with_vector=True)
            page, after = self._run(partial(_scroll, request=request))
            out += [_whole(p) for p in page]
            if after is None:
                return out

    def _after_writes(self, n: int) -> None:
        # Edge has no background optimizer: merge small segments now and then so queries stay fast.
        self._writes_since_optimize += n
        if self._writes_since_optimize >= 5000:
            self.optimize()

    def optimize(self) -> None:
        """Merge segments and build indexes (blocking)."""
        with self._lock:
            self._writes_since_optimize = 0
            self._shard.optimize()

    def take_snapshot(self, keep: int) -> bool:
        """The embedded engine keeps no snapshots: its data dir is the backup (and a rebuild remakes it)."""
        return False

    def close(self) -> None:
        """Flush and release the shard."""
        with self._lock:
            try:
                self._shard.flush()
            finally:
                self._shard.close()
