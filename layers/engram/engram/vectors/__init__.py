"""The vector index port: Qdrant holds derived data (dense + sparse vectors and a render-ready payload)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import Settings
from ..words import SparseVector

WORDS = "words"
SCOPE_FIELDS = ("bot", "kind", "server", "project", "user")


@dataclass(frozen=True, slots=True)
class Scope:
    """Who may see a memory: always a bot, optionally narrowed by kind, server, project and user."""

    bot: str | None
    kind: str | None = None
    server: str | None = None
    project: str | None = None
    user: str | None = None

    def conditions(self) -> dict[str, str]:
        """The payload fields that must match, without the open ones."""
        return {name: getattr(self, name) for name in SCOPE_FIELDS if getattr(self, name) is not None}


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


@dataclass(frozen=True, slots=True)
class Fusion:
    """How word and meaning results are fused: weighted reciprocal rank fusion."""

    k: int = 60
    words_weight: float = 1.0
    dense_weight: float = 1.0
    candidates: int = 50


class VectorIndex(Protocol):
    """What engram needs from Qdrant; implemented by the embedded engine and by qdrant-client."""

    def ensure_dense(self, name: str, size: int) -> None:
        """Create the named dense vector if it does not exist yet."""

    def dense_names(self) -> set[str]:
        """The named dense vectors the collection has."""

    def upsert(self, points: list[IndexPoint]) -> None:
        """Write points whole (payload, words and whatever dense vectors they carry)."""

    def set_dense(self, name: str, vectors: dict[int, list[float]]) -> None:
        """Add or replace one named dense vector on existing points."""

    def delete(self, ids: list[int]) -> None:
        """Delete points by id (missing ids are fine)."""

    def delete_scope(self, scope: Scope) -> int:
        """Delete every point in a scope; returns how many there were."""

    def count(self, scope: Scope, dense: str | None = None) -> int:
        """Exact number of points in a scope (with that dense vector, when named)."""

    def search(
        self,
        scope: Scope,
        words: SparseVector | None,
        dense: tuple[str, list[float]] | None,
        limit: int,
        fusion: Fusion,
    ) -> list[Hit]:
        """Best first; the scope filter sits on every prefetch and on the root query."""

    def delete_dense(self, name: str) -> None:
        """Drop a named dense vector from every point (the records are untouched)."""

    def existing(self, ids: list[int]) -> set[int]:
        """Which of these point ids the index holds."""

    def with_dense(self, name: str, ids: list[int]) -> set[int]:
        """Which of these points have the named dense vector (the index, not the records, knows)."""

    def scroll_ids(self, scope: Scope, after: int | None, limit: int) -> tuple[list[int], int | None]:
        """One page of the point ids in a scope, in id order, and where the next page starts (None: done)."""

    def close(self) -> None:
        """Release files and connections."""


def build_index(settings: Settings) -> VectorIndex:
    """Qdrant at a URL when one is configured, else the embedded engine under the data dir."""
    if settings.qdrant_url:
        from .server import QdrantServerIndex

        return QdrantServerIndex.connect(settings.qdrant_url, settings.qdrant_api_key, settings.collection)
    from .edge import EdgeIndex

    return EdgeIndex(settings.data_dir / "qdrant" / settings.collection)
