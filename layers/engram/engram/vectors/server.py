"""Qdrant reached over its REST API: a server or Qdrant Cloud by URL.

Plain httpx rather than qdrant-client: the client's import alone (pydantic schemas for ~900 models)
costs 0.5-0.9 s of every Lambda cold start, more than the whole first request may take, for the ten
calls engram makes. tests/fake_qdrant.py checks every body sent here against qdrant-client's own
request models (the server's OpenAPI schema, extra fields forbidden) and runs it on qdrant-client's
local engine, so the wire format cannot drift from what the official client sends."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from ..breaker import guarded
from ..embedders import own_vector_name
from ..errors import IndexUnavailable
from ..words import SparseVector
from .base import SCOPE_FIELDS, TIE_MARGIN, WORDS, Hit, IndexPoint, Query, Scope, fuse
from .base import by_point as vectors_by_point

# The oldest server engram works with: a named vector is added to an existing collection (a new embedding
# model, a point's own vector) by `PUT /collections/{c}/vectors/{name}`, which Qdrant has from 1.18 on
MINIMUM_VERSION = (1, 18, 0)
# How each named vector is stored, set by a PATCH of the collection once it exists (a new named vector
# takes only its size and distance). The vector a search ranks by: its originals on disk, int8 copies of
# them in RAM (a quarter of the size) that the search reads, rescored from the originals; its graphs are
# the collection's, one per tenant (m 0, payload_m 16).
INT8_IN_RAM: dict[str, Any] = {"scalar": {"type": "int8", "quantile": 0.99, "always_ram": True}}
SEARCHED_VECTOR: dict[str, Any] = {"on_disk": True, "quantization_config": INT8_IN_RAM}
# A point's own meaning beside its mixed one (engram.line_windows): read by id, never searched, so on
# disk with no graph at all and no copy in RAM
OWN_VECTOR: dict[str, Any] = {
    "on_disk": True,
    "hnsw_config": {"m": 0, "payload_m": 0},
    "quantization_config": "Disabled",
}
WORDS_ON_DISK: dict[str, Any] = {"modifier": "idf", "index": {"on_disk": True}}

# Every search is filtered by bot: its index is the tenant one (its points stored together); kind has two
# values, so a graph per value would be a second global graph (none is built for it)
KEYWORD_INDEX: dict[str, dict[str, Any]] = {
    "bot": {"type": "keyword", "is_tenant": True},
    "kind": {"type": "keyword", "enable_hnsw": False},
    "server": {"type": "keyword"},
    "project": {"type": "keyword"},
    "user": {"type": "keyword"},
}


def _named(point: dict[str, Any], name: str | None) -> list[float] | None:
    """The named dense vector a retrieved point came back with, if it was asked for."""
    vector = point.get("vector")
    return vector.get(name) if name and isinstance(vector, dict) else None


def _filter(scope: Scope) -> dict[str, Any]:
    must: list[dict[str, Any]] = [{"key": k, "match": {"value": v}} for k, v in scope.conditions().items()]
    for key, options in scope.metadata_options():
        must.append({"should": [_matching(key, option) for option in options]})
    if scope.created:
        must.append(
            {"should": [{"key": "createdAt", "range": {"gte": a, "lt": b}} for a, b in scope.created]}
        )
    if scope.alive_at is None:
        return {"must": must}
    return {"must": must, "must_not": [{"key": "expiresAt", "range": {"lte": scope.alive_at}}]}


def _matching(key: str, option: Any) -> dict[str, Any]:
    """A metadata value as one option matches it: a number by its range of one, text and booleans as is."""
    if isinstance(option, float):
        return {"key": key, "range": {"gte": option, "lte": option}}
    return {"key": key, "match": {"value": option}}


def _stored_as(now: dict[str, Any], name: str, inherited: Any) -> bool:
    """Whether a named vector's reported params are already stored as `QdrantServerIndex.storage` says."""
    wanted = QdrantServerIndex.storage(name)
    graph = wanted.get("hnsw_config") or {}
    graph_right = all((now.get("hnsw_config") or {}).get(k) == v for k, v in graph.items())
    return bool(now.get("on_disk")) and _quantized_as(now, wanted, inherited) and graph_right


def _words_on_disk(params: dict[str, Any]) -> bool:
    """Whether a collection's words index is on disk, by its reported params."""
    words = (params.get("sparse_vectors") or {}).get(WORDS) or {}
    return bool((words.get("index") or {}).get("on_disk"))


def _quantized_as(now: dict[str, Any], wanted: dict[str, Any], inherited: Any) -> bool:
    """Whether a named vector's quantization (its own, else the collection's) is the one wanted."""
    quantization = now.get("quantization_config") or inherited
    if quantization == "Disabled":  # a vector's own "none", whatever the collection's
        quantization = None
    if wanted["quantization_config"] == "Disabled":
        return not quantization
    scalar = (quantization or {}).get("scalar") or {}
    return scalar.get("type") == "int8" and bool(scalar.get("always_ram"))


def _sparse(vector: SparseVector) -> dict[str, Any]:
    return {"indices": list(vector.indices), "values": list(vector.values)}


def _error_of(response: httpx.Response) -> str:
    """What a refusing Qdrant said: its `status.error`, or the body as it came."""
    try:
        return str(response.json().get("status", {}).get("error") or response.text)
    except ValueError:
        return response.text


class QdrantServerIndex:
    """One collection: sparse `words` (IDF) and a dense named vector per embedding model."""

    def __init__(  # noqa: PLR0913 - a collection's documented parameters, each named
        self,
        client: httpx.Client,
        collection: str,
        shards: int = 1,
        replicas: int = 1,
        write_consistency: int = 1,
    ):
        self.client = client
        self.collection = collection
        self.shards, self.replicas, self.write_consistency = shards, replicas, write_consistency
        # Checked on first use, not here: a Qdrant that does not answer at cold start must degrade
        # exactly as a later outage does (writes kept pending, words search), not fail the process.
        self._collection_ready = False
        # A write reads the index from two threads at once (its windows while it embeds): the first use
        # makes the collection once, not twice (the second PUT would fail with 409)
        self._ready_lock = threading.Lock()

    @classmethod
    def connect(
        cls,
        url: str,
        api_key: str | None,
        collection: str,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        shards: int = 1,
        replicas: int = 1,
        write_consistency: int = 1,
    ) -> QdrantServerIndex:
        """A client for the server at `url` (no request is made until the index is first used)."""
        headers = {"api-key": api_key} if api_key else {}
        client = httpx.Client(  # a Qdrant that hangs is rested, its calls failing at once (engram.breaker)
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=timeout_s,
            transport=guarded(transport, "Qdrant"),
        )
        return cls(client, collection, shards, replicas, write_consistency)

    # ----- the wire --------------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        wait: bool = False,
        root: bool = False,
        missing: bool = False,
        timeout_s: float | None = None,
    ) -> Any:
        """One REST call (of the collection; `root`: of the server); its `result`, or the whole answer where
        it has none; with `missing`, None for a 404; `timeout_s` for a call longer than the client's. Every
        failure (refused, timed out, 4xx/5xx) is IndexUnavailable."""
        try:
            response = self.client.request(
                method,
                path if root else f"/collections/{self.collection}{path}",
                json=body,
                params={"wait": "true"} if wait else None,
                timeout=httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s,
            )
        except httpx.HTTPError as exc:
            raise IndexUnavailable(f"Qdrant failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 404 and missing:
            return None
        if response.status_code >= 400:
            if response.status_code == 404:
                self._collection_ready = False  # deleted behind our back: made again on the next call
            raise IndexUnavailable(f"Qdrant answered {response.status_code}: {_error_of(response)[:300]}")
        try:
            answer = response.json()
            return answer.get("result", answer)
        except ValueError as exc:
            raise IndexUnavailable(
                f"Qdrant answered something that is not JSON: {response.text[:200]}"
            ) from exc

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, wait: bool = False) -> Any:
        if not self._collection_ready:
            with self._ready_lock:
                if not self._collection_ready:
                    self._ensure_collection()
                    self._collection_ready = True
        return self._request(method, path, body, wait)

    def check_version(self) -> str:
        """The server's version; IndexUnavailable saying so in one line when it is older than engram needs."""
        version = str(self._request("GET", "/", root=True).get("version", ""))
        parts = tuple(int(p) for p in version.split("-")[0].split(".")[:3] if p.isdigit())
        if parts < MINIMUM_VERSION:
            least = ".".join(map(str, MINIMUM_VERSION))
            raise IndexUnavailable(
                f"Qdrant {version or '(no version)'} is older than {least}, the least engram works with "
                "(it adds named vectors to a collection): upgrade the server"
            )
        return version

    def _ensure_collection(self) -> None:
        self.check_version()
        found = self._request(
            "GET", "", missing=True
        )  # its settings, or None: made below (two calls a start)
        if found is not None:
            self._settle_storage(found["config"])
            return
        self._request("PUT", "", self.collection_config())
        for name in SCOPE_FIELDS:
            self._request(
                "PUT", "/index", {"field_name": name, "field_schema": KEYWORD_INDEX[name]}, wait=True
            )
        # createdAt is only ordered and ranged by, never a tenant: no graph of its own
        integer = {"type": "integer", "lookup": False, "range": True, "enable_hnsw": False}
        self._request("PUT", "/index", {"field_name": "createdAt", "field_schema": integer}, wait=True)
        self._request("PUT", "/index", {"field_name": "expiresAt", "field_schema": integer}, wait=True)

    def collection_config(self) -> dict[str, Any]:
        """A new collection as Qdrant's multitenancy guide sets one up (every search is filtered by bot
        and narrower keys): no global graph (m 0) but one per value of each keyword field (payload_m 16);
        the words index and the payloads on disk; each dense vector stored as its use needs
        (`dense_config`); shards, replicas and write consistency as the operator sets them."""
        return {
            "vectors": {},
            "sparse_vectors": {WORDS: WORDS_ON_DISK},
            "hnsw_config": {"m": 0, "payload_m": 16},
            "on_disk_payload": True,
            "shard_number": self.shards,
            "replication_factor": self.replicas,
            "write_consistency_factor": self.write_consistency,
        }

    @staticmethod
    def storage(name: str) -> dict[str, Any]:
        """How a named dense vector is stored: a searched one with int8 copies in RAM over originals on disk;
        a point's own vector (never searched) on disk only, with no graph."""
        return OWN_VECTOR if name.endswith(own_vector_name("")) else SEARCHED_VECTOR

    def _settle_storage(self, config: dict[str, Any]) -> None:
        """An existing collection's vectors stored as `storage` says, and its words index on disk (`config`:
        as the server reports it): one PATCH of what differs (none when all is as it should be, so a cold
        start changes nothing)."""
        params, inherited = config["params"], config.get("quantization_config")
        vectors = params.get("vectors") if isinstance(params.get("vectors"), dict) else {}
        diff = {
            name: self.storage(name) for name, now in vectors.items() if not _stored_as(now, name, inherited)
        }
        body: dict[str, Any] = {"vectors": diff} if diff else {}
        if inherited:  # a collection made by an older engram: quantization per vector, not for all
            body["quantization_config"] = "Disabled"
        if not _words_on_disk(params):
            body["sparse_vectors"] = {WORDS: WORDS_ON_DISK}
        if body:
            self._request("PATCH", "", body, wait=True)

    # ----- the port ----------------------------------------------------------------------------------

    def dense_names(self) -> set[str]:
        """The named dense vectors of the collection."""
        vectors = self._call("GET", "")["config"]["params"].get("vectors")
        return set(vectors.keys()) if isinstance(vectors, dict) else set()

    def ensure_dense(self, name: str, size: int) -> None:
        """Create the named dense vector (cosine) unless it exists."""
        if name not in self.dense_names():
            self._call("PUT", f"/vectors/{name}", {"dense": {"size": size, "distance": "Cosine"}}, wait=True)
            self._call("PATCH", "", {"vectors": {name: self.storage(name)}}, wait=True)

    def delete_dense(self, name: str) -> None:
        """Drop a named dense vector (every point's)."""
        if name in self.dense_names():
            self._call("DELETE", f"/vectors/{name}", wait=True)

    def upsert(self, points: list[IndexPoint]) -> None:
        """Write whole points."""
        if points:
            body = [
                {"id": p.id, "vector": {WORDS: _sparse(p.words), **p.dense}, "payload": p.payload}
                for p in points
            ]
            self._call("PUT", "/points", {"points": body}, wait=True)

    def set_vectors(self, words: dict[int, SparseVector], dense: dict[str, dict[int, list[float]]]) -> None:
        """Replace words and named dense vectors of existing points in one request."""
        by_point = vectors_by_point(words, dense, _sparse)
        if by_point:
            body = [{"id": i, "vector": named} for i, named in by_point.items()]
            self._call("PUT", "/points/vectors", {"points": body}, wait=True)

    def dense_of(self, names: list[str], ids: list[int]) -> dict[int, dict[str, list[float]]]:
        """Every one of these points the collection holds, with those of the named dense vectors it has."""
        if not ids:
            return {}
        body = {"ids": list(ids), "with_payload": False, "with_vector": list(names) or False}
        out = {}
        for p in self._call("POST", "/points", body):
            vector = p.get("vector")
            out[int(p["id"])] = (
                {n: v for n, v in vector.items() if n in names} if isinstance(vector, dict) else {}
            )
        return out

    def delete(self, ids: list[int]) -> None:
        """Delete points by id."""
        if ids:
            self._call("POST", "/points/delete", {"points": list(ids)}, wait=True)

    def delete_scope(self, scope: Scope) -> int:
        """Delete every point in a scope; returns how many there were."""
        n = self.count(scope)
        self._call("POST", "/points/delete", {"filter": _filter(scope)}, wait=True)
        return n

    def count(self, scope: Scope, dense: str | None = None) -> int:
        """Exact count in a scope, optionally only points that have a dense vector."""
        flt = _filter(scope)
        if dense:
            flt = {"must": [flt, {"has_vector": dense}]}
        return int(self._call("POST", "/points/count", {"filter": flt, "exact": True})["count"])

    def search(self, scope: Scope, query: Query) -> list[Hit]:
        """Each side's best (words, meaning) as ids and scores in one batch request, fused here (see
        `fuse`), then the payloads (and asked-for vectors) of just the hits returned: a leg's 60 candidates
        with their texts and vectors were 0.3-0.5 MB a search, through the VPC's NAT."""
        words, dense, limit, fusion, with_vector = query
        flt = _filter(scope)
        legs: list[tuple[dict[str, Any], float]] = []
        if words is not None and words.indices:
            legs.append(({"query": _sparse(words), "using": WORDS}, fusion.words_weight))
        if dense is not None:
            legs.append(({"query": list(dense[1]), "using": dense[0]}, fusion.dense_weight))
        if not legs:
            return []
        size = (max(fusion.candidates, limit) if len(legs) > 1 else limit) + TIE_MARGIN
        searches = [
            {**leg, "filter": flt, "limit": size, "with_payload": False, "with_vector": False}
            for leg, _ in legs
        ]
        results = self._call("POST", "/points/query/batch", {"searches": searches})
        hits = fuse(
            [
                ([Hit(int(p["id"]), float(p["score"]), {}) for p in result["points"]], weight)
                for result, (_, weight) in zip(results, legs, strict=False)
            ],
            fusion,
            limit,
            len(legs) - 1 if dense is not None else None,
        )
        if not hits:
            return []
        name = dense[0] if with_vector and dense is not None else None
        body = {"ids": [h.id for h in hits], "with_payload": True, "with_vector": [name] if name else False}
        found = {int(p["id"]): p for p in self._call("POST", "/points", body)}
        return [
            Hit(h.id, h.score, dict(found[h.id].get("payload") or {}), _named(found[h.id], name), h.cosine)
            for h in hits
            if h.id in found  # deleted between the two requests
        ]

    def existing(self, ids: list[int]) -> set[int]:
        """Which of these point ids the collection holds."""
        if not ids:
            return set()
        found = self._call("POST", "/points", {"ids": list(ids), "with_payload": False, "with_vector": False})
        return {int(p["id"]) for p in found}

    def with_dense(self, name: str, ids: list[int]) -> set[int]:
        """Which of these points have the named dense vector."""
        if not ids:
            return set()
        body = {
            "filter": {"must": [{"has_id": list(ids)}, {"has_vector": name}]},
            "limit": len(ids),
            "with_payload": False,
            "with_vector": False,
        }
        return {int(p["id"]) for p in self._call("POST", "/points/scroll", body)["points"]}

    def scroll_ids(self, scope: Scope, after: int | None, limit: int) -> tuple[list[int], int | None]:
        """One page of point ids in a scope, in id order, and the next page's first id (None: done)."""
        body = {"filter": _filter(scope), "limit": limit, "with_payload": False, "with_vector": False}
        if after is not None:
            body["offset"] = after
        page = self._call("POST", "/points/scroll", body)
        following = page.get("next_page_offset")
        return [int(p["id"]) for p in page["points"]], (int(following) if following is not None else None)

    # ----- snapshots ------------------------------------------------------------------------------

    def take_snapshot(self, keep: int) -> bool:
        """Start a snapshot of the collection (in the background: at 100 M points it takes a while) and drop
        all but the `keep` newest of those already made. Where they are kept is the server's setting
        (`storage.snapshots_config`: S3 for engram on AWS, docs/operating.md). A snapshot holds what was in
        the collection when it was made, forgotten users' words included, until it is dropped: `keep` bounds
        how long (a restore reconciles with the records, which deletes them again)."""
        self._call("POST", "/snapshots", wait=False)
        made = self._request("GET", "/snapshots") or []
        newest_first = sorted(made, key=lambda s: str(s.get("creation_time") or ""), reverse=True)
        for old in newest_first[max(keep, 1) :]:
            self._request("DELETE", f"/snapshots/{old['name']}", wait=True)
        return True

    def recover(self, location: str, timeout_s: float = 3_600.0) -> None:
        """Replace the collection with the snapshot at `location` (a URL the server can fetch: a pre-signed
        S3 URL, or file:// on the server), made if missing; waits until it is done (the recovery of a big
        collection takes minutes: its own timeout, not the client's)."""
        body = {"location": location, "priority": "snapshot"}
        self._request("PUT", "/snapshots/recover", body, wait=True, timeout_s=timeout_s)
        self._collection_ready = False  # its settings are the snapshot's: settled again on the next call

    def close(self) -> None:
        """Close the HTTP client."""
        self.client.close()
