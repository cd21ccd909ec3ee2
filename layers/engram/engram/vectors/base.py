"""What both vector index implementations share: scopes, points, hits, fusion of the words and meaning
legs, and the VectorIndex protocol the memory rules write and search through."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from ..words import SparseVector

WORDS = "words"
# Each side is read this many past what fusion needs, so equal scores at the cut are ordered by
# `ranked`, not by where the engine stored them (a longer run of equal scores is cut where it cuts it)
TIE_MARGIN = 10
SCOPE_FIELDS = ("bot", "kind", "server", "project", "user")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who may see a memory: always a bot, optionally narrowed by kind, server, project and user."""

    bot: str | None
    kind: str | None = None
    server: str | None = None
    project: str | None = None
    user: str | None = None
    # a search's narrowing beyond who may see: metadata values every hit has ((key, text) pairs), the
    # time (ms) by which a hit's expiry must not have come, and spans of createdAt (ms, [from, to)) one of
    # which a hit was written in (the days a question names: engram.when)
    metadata: tuple[tuple[str, str], ...] = ()
    alive_at: int | None = None
    created: tuple[tuple[int, int], ...] = ()

    def conditions(self) -> dict[str, str]:
        """The payload fields that must match, without the open ones."""
        return {name: getattr(self, name) for name in SCOPE_FIELDS if getattr(self, name) is not None}

    def metadata_options(self) -> list[tuple[str, list[Any]]]:
        """Per metadata filter, its payload key and what matches its text: the text itself, the boolean it
        names, or (a float) the number it is."""
        out = []
        for key, text in self.metadata:
            options: list[Any] = [text]
            if text in ("true", "false"):
                options.append(text == "true")
            with contextlib.suppress(ValueError):  # not a number: matched as text and boolean only
                options.append(float(text))
            out.append((f"metadata.{key}", options))
        return out


@dataclass(slots=True)
class IndexPoint:
    """One memory as the index stores it; its id is the memory id, so a retried write overwrites."""

    id: int
    payload: dict[str, Any]
    words: SparseVector
    dense: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """A scored search result with the payload needed to render it."""

    id: int
    score: float
    payload: dict[str, Any]
    vector: list[float] | None = None  # the dense vector, when asked for
    # the meaning leg's own score of this point (the cosine with the query), when it was among that
    # leg's candidates: what its relevance is judged by (engram.relevance), with no vector sent back
    cosine: float | None = None


@dataclass(frozen=True, slots=True)
class Fusion:
    """How word and meaning results are fused: weighted reciprocal rank fusion ("rrf"), or a weighted
    blend of each side's scores, min-max normalised over its candidates ("blend")."""

    k: int = 60
    words_weight: float = 1.0
    dense_weight: float = 1.0
    candidates: int = 50
    mode: str = "rrf"


def _close(score: float) -> float:
    # Scores are compared to 5 significant digits: the engine's float sums differ in the last bits
    # between two builds of the same index, which would otherwise reorder equal matches
    return float(f"{score:.5g}")


def ranked(hits: list[Hit], second: dict[int, float] | None = None) -> list[Hit]:
    """Best first; equal scores by the other side's score when given (a tie on words is settled by
    meaning), then by id, newest first: one order for the same question, every time."""
    second = second or {}
    return sorted(hits, key=lambda h: (-_close(h.score), -second.get(h.id, float("-inf")), -h.id))


def fuse(
    legs: list[tuple[list[Hit], float]], fusion: Fusion, limit: int, meaning: int | None = None
) -> list[Hit]:
    """Weighted reciprocal rank fusion of each side's hits (Qdrant's formula: weight / (k + rank), the best
    at rank 0), done here rather than by the engine so that equal scores on one side are ranked by the
    other side, then by id, not by where the engine happened to store them. `meaning`: which leg is the
    meaning one, whose score each hit keeps as its `cosine`."""
    sides = [{h.id: h.score for h in hits} for hits, _ in legs]
    cosines = sides[meaning] if meaning is not None else {}
    if len(legs) == 1:
        return [replace(h, cosine=cosines.get(h.id)) for h in ranked(legs[0][0])[:limit]]
    scores: dict[int, float] = {}
    best: dict[int, Hit] = {}
    depth = max(fusion.candidates, limit)  # as Qdrant's prefetch: a long page reads deeper
    for n, (hits, weight) in enumerate(legs):
        top = ranked(hits, sides[1 - n])[:depth]
        for rank, (hit, part) in enumerate(zip(top, _parts(top, fusion), strict=True)):
            share = part if part is not None else 1 / (fusion.k + rank)
            scores[hit.id] = scores.get(hit.id, 0.0) + weight * share
            best[hit.id] = _fuller(best.get(hit.id), hit)
    fused = [Hit(i, score, best[i].payload, best[i].vector, cosines.get(i)) for i, score in scores.items()]
    return ranked(fused)[:limit]


def _fuller(held: Hit | None, hit: Hit) -> Hit:
    """The hit to keep of two for one point: the first seen, unless only the second carries its vector."""
    return hit if held is None or (hit.vector is not None and held.vector is None) else held


def _parts(top: list[Hit], fusion: Fusion) -> list[float | None]:
    """Each hit's share of its side's weight in a blend: its score min-max normalised over the side's
    candidates (a side whose candidates all score alike gives each its whole weight); None for rank
    fusion, which counts ranks, not scores."""
    if fusion.mode != "blend" or not top:
        return [None] * len(top)
    high, low = top[0].score, min(h.score for h in top)
    if high - low <= 1e-12:
        return [1.0] * len(top)
    return [(h.score - low) / (high - low) for h in top]


def by_point(
    words: dict[int, SparseVector],
    dense: dict[str, dict[int, list[float]]],
    sparse: Callable[[SparseVector], Any],
) -> dict[int, dict[str, Any]]:
    """Each point's new vectors, named, for one update of many points: its words (as the engine's `sparse`
    takes them) and each named dense vector it is given."""
    out: dict[int, dict[str, Any]] = {i: {WORDS: sparse(v)} for i, v in words.items()}
    for name, vectors in dense.items():
        for i, v in vectors.items():
            out.setdefault(i, {})[name] = list(v)
    return out


class Query(NamedTuple):
    """One search of the index: the words leg, the meaning leg (a named dense vector), how many hits, how the
    legs are fused, and whether each hit carries its dense vector of the model asked with (a tuple: an
    engine takes it apart in one line)."""

    words: SparseVector | None
    dense: tuple[str, list[float]] | None
    limit: int
    fusion: Fusion = Fusion()
    with_vector: bool = False


class VectorIndex(Protocol):
    """What engram needs from Qdrant; implemented by the embedded engine and by qdrant-client."""

    def ensure_dense(self, name: str, size: int) -> None:
        """Create the named dense vector if it does not exist yet."""

    def dense_names(self) -> set[str]:
        """The named dense vectors the collection has."""

    def upsert(self, points: list[IndexPoint]) -> None:
        """Write points whole (payload, words and whatever dense vectors they carry)."""

    def set_vectors(self, words: dict[int, SparseVector], dense: dict[str, dict[int, list[float]]]) -> None:
        """Replace words and named dense vectors of existing points in one update (payloads untouched)."""

    def dense_of(self, names: list[str], ids: list[int]) -> dict[int, dict[str, list[float]]]:
        """Every one of these points the index holds, with those of the named dense vectors it has ({}:
        none of them; no names: which points exist)."""

    def delete(self, ids: list[int]) -> None:
        """Delete points by id (missing ids are fine)."""

    def delete_scope(self, scope: Scope) -> int:
        """Delete every point in a scope; returns how many there were."""

    def count(self, scope: Scope, dense: str | None = None) -> int:
        """Exact number of points in a scope (with that dense vector, when named)."""

    def search(self, scope: Scope, query: Query) -> list[Hit]:
        """Best first; the scope filter sits on every prefetch and on the root query; `with_vector`: each
        hit carries its dense vector of the model asked with."""

    def delete_dense(self, name: str) -> None:
        """Drop a named dense vector from every point (the records are untouched)."""

    def existing(self, ids: list[int]) -> set[int]:
        """Which of these point ids the index holds."""

    def with_dense(self, name: str, ids: list[int]) -> set[int]:
        """Which of these points have the named dense vector (the index, not the records, knows)."""

    def scroll_ids(self, scope: Scope, after: int | None, limit: int) -> tuple[list[int], int | None]:
        """One page of the point ids in a scope, in id order, and where the next page starts (None: done)."""

    def take_snapshot(self, keep: int) -> bool:
        """Have the server snapshot the collection (where it keeps snapshots: S3 when configured), and drop
        all but the `keep` newest; False where the engine keeps none (the embedded engine: its data dir is
        its own backup, and the index is derived from the records either way)."""
        ...

    def close(self) -> None:
        """Release files and connections."""
