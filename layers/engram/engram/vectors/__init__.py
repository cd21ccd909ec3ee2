"""The vector index port: Qdrant holds derived data (dense + sparse vectors and a render-ready payload).
Its two adapters are vectors/edge.py and vectors/server.py; engram.engine builds the one configured."""

from __future__ import annotations

from .base import (
    SCOPE_FIELDS,
    TIE_MARGIN,
    WORDS,
    Fusion,
    Hit,
    IndexPoint,
    Query,
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
    "Query",
    "Scope",
    "VectorIndex",
    "fuse",
    "ranked",
]
