"""The vector index port: Qdrant holds derived data (dense + sparse vectors and a render-ready payload)."""

from __future__ import annotations

from ..config import Settings
from .base import (
    SCOPE_FIELDS,
    TIE_MARGIN,
    WORDS,
    Fusion,
    Hit,
    IndexPoint,
    Scope,
    VectorIndex,
    fuse,
    ranked,
)

__all__ = [
    "SCOPE_FIELDS",
    "TIE_MARGIN",
    "WORDS",
    "Fusion",
    "Hit",
    "IndexPoint",
    "Scope",
    "VectorIndex",
    "build_index",
    "fuse",
    "ranked",
]


def build_index(settings: Settings) -> VectorIndex:
    """Qdrant at a URL when one is configured, else the embedded engine under the data dir."""
    if settings.qdrant_url:
        from .server import QdrantServerIndex

        return QdrantServerIndex.connect(
            settings.qdrant_url,
            settings.qdrant_api_key,
            settings.collection,
            shards=settings.qdrant_shards,
            replicas=settings.qdrant_replicas,
        )
    from .edge import EdgeIndex

    return EdgeIndex(settings.data_dir / "qdrant" / settings.collection)
