"""Qdrant reached through qdrant-client: a server or Qdrant Cloud by URL (or its local mode in tests)."""

from __future__ import annotations

from qdrant_client import QdrantClient
from qdrant_client import models as m

from ..errors import IndexUnavailable
from ..words import SparseVector
from . import SCOPE_FIELDS, WORDS, Fusion, Hit, IndexPoint, Scope


def _filter(scope: Scope) -> m.Filter:
    return m.Filter(
        must=[m.FieldCondition(key=k, match=m.MatchValue(value=v)) for k, v in scope.conditions().items()]
    )


def _sparse(vector: SparseVector) -> m.SparseVector:
    return m.SparseVector(indices=vector.indices, values=vector.values)


class QdrantServerIndex:
    """One collection: sparse `words` (IDF) and a dense named vector per embedding model."""

    def __init__(self, client: QdrantClient, collection: str):
        self.client = client
        self.collection = collection
        # Checked on first use, not here: a Qdrant that does not answer at cold start must degrade
        # exactly as a later outage does (writes kept pending, words search), not fail the process.
        self._collection_ready = False

    @classmethod
    def connect(cls, url: str, api_key: str | None, collection: str) -> "QdrantServerIndex":
        """Connect to a server by URL (`:memory:` gives qdrant-client's local mode)."""
        if url == ":memory:":
            return cls(QdrantClient(location=":memory:"), collection)
        # No version check: it is a request on a background thread at construction, which a frozen
        # Lambda sandbox may never finish and which costs a round trip at every cold start.
        return cls(QdrantClient(url=url, api_key=api_key, timeout=5, check_compatibility=False), collection)

    def _call(self, fn):
        try:
            if not self._collection_ready:
                self._ensure_collection()
                self._collection_ready = True
            return fn()
        except IndexUnavailable:
            raise
        except Exception as exc:  # connection refused, timeouts, 5xx: one kind for callers
            raise IndexUnavailable(f"Qdrant failed: {exc}") from exc

    def _ensure_collection(self) -> None:
        if self.client.collection_exists(self.collection):
            return
        self.client.create_collection(
            self.collection,
            vectors_config={},
            sparse_vectors_config={WORDS: m.SparseVectorParams(modifier=m.Modifier.IDF)},
        )
        for name in SCOPE_FIELDS:
            self.client.create_payload_index(self.collection, name, m.PayloadSchemaType.KEYWORD)
        self.client.create_payload_index(self.collection, "createdAt", m.PayloadSchemaType.INTEGER)

    def dense_names(self) -> set[str]:
        """The named dense vectors of the collection."""
        info = self._call(lambda: self.client.get_collection(self.collection))
        vectors = info.config.params.vectors
        return set(vectors.keys()) if isinstance(vectors, dict) else set()

    def ensure_dense(self, name: str, size: int) -> None:
        """Create the named dense vector (cosine) unless it exists."""
        if name in self.dense_names():
            return
        config = m.DenseVectorNameConfig(dense=m.DenseVectorConfig(size=size, distance=m.Distance.COSINE))
        self._call(lambda: self.client.create_vector_name(self.collection, name, config))

    def delete_dense(self, name: str) -> None:
        """Drop a named dense vector (every point's)."""
        if name in self.dense_names():
            self._call(lambda: self.client.delete_vector_name(self.collection, name))

    def upsert(self, points: list[IndexPoint]) -> None:
        """Write whole points."""
        if not points:
            return
        structs = [
            m.PointStruct(id=p.id, vector={WORDS: _sparse(p.words), **p.dense}, payload=p.payload) for p in points
        ]
        self._call(lambda: self.client.upsert(self.collection, structs, wait=True))

    def set_dense(self, name: str, vectors: dict[int, list[float]]) -> None:
        """Add or replace one dense vector on existing points."""
        if vectors:
            ops = [m.PointVectors(id=i, vector={name: v}) for i, v in vectors.items()]
            self._call(lambda: self.client.update_vectors(self.collection, ops, wait=True))

    def delete(self, ids: list[int]) -> None:
        """Delete points by id."""
        if ids:
            selector = m.PointIdsList(points=list(ids))
            self._call(lambda: self.client.delete(self.collection, selector, wait=True))

    def delete_scope(self, scope: Scope) -> int:
        """Delete every point in a scope; returns how many there were."""
        flt = _filter(scope)
        n = self.count(scope)
        self._call(lambda: self.client.delete(self.collection, m.FilterSelector(filter=flt), wait=True))
        return n

    def count(self, scope: Scope, dense: str | None = None) -> int:
        """Exact count in a scope, optionally only points that have a dense vector."""
        flt = _filter(scope)
        if dense:
            flt = m.Filter(must=[flt, m.HasVectorCondition(has_vector=dense)])
        return self._call(lambda: self.client.count(self.collection, count_filter=flt, exact=True).count)

    def search(self, scope, words, dense, limit, fusion: Fusion) -> list[Hit]:
        """Hybrid when both sides are given, else whichever one is."""
        flt = _filter(scope)
        legs = []
        if words is not None and words.indices:
            legs.append((_sparse(words), WORDS, fusion.words_weight))
        if dense is not None:
            legs.append((dense[1], dense[0], fusion.dense_weight))
        if not legs:
            return []
        if len(legs) == 1:
            query, using, _ = legs[0]
            run = lambda: self.client.query_points(  # noqa: E731
                self.collection, query=query, using=using, query_filter=flt, limit=limit, with_payload=True
            )
        else:
            prefetch = [
                m.Prefetch(query=q, using=u, filter=flt, limit=max(fusion.candidates, limit)) for q, u, _ in legs
            ]
            rrf = m.RrfQuery(rrf=m.Rrf(k=fusion.k, weights=[w for _, _, w in legs]))
            run = lambda: self.client.query_points(  # noqa: E731
                self.collection, prefetch=prefetch, query=rrf, query_filter=flt, limit=limit, with_payload=True
            )
        points = self._call(run).points
        return [Hit(int(p.id), float(p.score), dict(p.payload or {})) for p in points]

    def close(self) -> None:
        """Close the client."""
        self.client.close()
