"""Qdrant's REST API on 127.0.0.1, answered by qdrant-client's local engine. Every request body is
validated with qdrant-client's own request models (generated from the server's OpenAPI schema, extra
fields forbidden), so a body the real server would refuse is refused here too. Has an API key and a
switch to take it down."""

from __future__ import annotations

import json
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from qdrant_client import QdrantClient
from qdrant_client.http import models as m

from tests.support import ServedApp


def _ok(result) -> JSONResponse:
    return JSONResponse({"result": result, "status": "ok", "time": 0.0})


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"status": {"error": message}, "time": 0.0}, status_code=status)


class FakeQdrant(ServedApp):
    """`.requests` holds (method, path) of everything received; `.down = True` answers 503."""

    def __init__(self, api_key: str | None = None, version: str = "1.18.0"):
        self.api_key = api_key
        self.version = version  # what `GET /` says the server is
        self.down = False
        self.requests: list[tuple[str, str]] = []
        # what a real server would be told to set up, which the local engine does not model: each
        # collection's create body and each payload index's schema, as validated
        self.collections: dict[str, m.CreateCollection] = {}
        self.field_indexes: dict[str, dict[str, object]] = {}
        self.named_vectors: dict[str, dict[str, m.DenseVectorConfig]] = {}  # per collection, as created
        # ... how each is stored (what PATCHes of the collection set: the local engine keeps none of it,
        # so it is kept here and shown in the collection's info as a server shows it)
        self.vector_storage: dict[str, dict[str, dict]] = {}
        self.patches: list[m.UpdateCollection] = []
        self.answered_bytes = 0  # of search answers (query batches)
        self.vectors_asked: list[object] = []  # each retrieve's and each search leg's `with_vector`
        # snapshots as a server with `snapshots_config` on S3 keeps them: each collection's, newest last,
        # and, with `snapshot_store` (an S3 client and a bucket), the object under snapshots/<collection>/
        self.snapshots: dict[str, list[dict]] = {}
        self.snapshot_store: tuple[object, str] | None = None
        self.engine = QdrantClient(location=":memory:")
        self._lock = threading.Lock()
        self.app = FastAPI()
        self._routes()

    def _routes(self) -> None:
        app, engine = self.app, self.engine

        @app.middleware("http")
        async def gate(request: Request, call_next):
            self.requests.append((request.method, request.url.path))
            if self.down:
                return _error(503, "service unavailable")
            if self.api_key and request.headers.get("api-key") != self.api_key:
                return _error(401, "Must provide an API key or an Authorization bearer token")
            try:
                return await call_next(request)
            except ValidationError as exc:  # what the server calls a format error in the JSON body
                return _error(400, f"Format error in JSON body: {exc}")
            except ValueError as exc:  # the local engine's "not found" and friends
                return _error(404 if "not found" in str(exc).lower() else 400, str(exc))

        def run(fn):
            with self._lock:
                return fn()

        @app.get("/")
        async def root():  # the server's own answer has no `result`
            return JSONResponse({"title": "qdrant - vector search engine", "version": self.version})

        @app.get("/collections/{c}/exists")
        async def exists(c: str):
            return _ok({"exists": run(lambda: engine.collection_exists(c))})

        @app.put("/collections/{c}")
        async def create(c: str, request: Request):
            body = m.CreateCollection.model_validate(await request.json())
            self.collections[c] = body
            run(
                lambda: engine.create_collection(
                    c, vectors_config=body.vectors, sparse_vectors_config=body.sparse_vectors
                )
            )
            return _ok(True)

        @app.get("/collections/{c}")
        async def info(c: str):
            shown = run(lambda: engine.get_collection(c)).model_dump(mode="json")
            vectors = shown["config"]["params"].get("vectors")
            for name, storage in self.vector_storage.get(c, {}).items():
                if isinstance(vectors, dict) and name in vectors:
                    vectors[name].update(storage)
            if c in self.collections and self.collections[c].quantization_config is not None:
                shown["config"]["quantization_config"] = self.collections[c].quantization_config.model_dump(
                    mode="json"
                )
            return _ok(shown)

        @app.patch("/collections/{c}")
        async def update(c: str, request: Request):
            body = m.UpdateCollection.model_validate(await request.json())
            self.patches.append(body)
            run(
                lambda: engine.update_collection(
                    c, vectors_config=body.vectors, sparse_vectors_config=body.sparse_vectors
                )
            )
            for name, diff in (body.vectors or {}).items():
                self.vector_storage.setdefault(c, {}).setdefault(name, {}).update(
                    diff.model_dump(mode="json", exclude_none=True)
                )
            if body.quantization_config == m.Disabled.DISABLED and c in self.collections:
                self.collections[c].quantization_config = None
            return _ok(True)

        @app.put("/collections/{c}/index")
        async def index(c: str, request: Request):
            body = m.CreateFieldIndex.model_validate(await request.json())
            self.field_indexes.setdefault(c, {})[body.field_name] = body.field_schema
            run(lambda: engine.create_payload_index(c, body.field_name, body.field_schema))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.put("/collections/{c}/vectors/{name}")
        async def create_vector(c: str, name: str, request: Request):
            body = m.DenseVectorNameConfig.model_validate(await request.json())
            self.named_vectors.setdefault(c, {})[name] = body.dense
            run(lambda: engine.create_vector_name(c, name, body))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.delete("/collections/{c}/vectors/{name}")
        async def delete_vector(c: str, name: str):
            run(lambda: engine.delete_vector_name(c, name))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.put("/collections/{c}/points")
        async def upsert(c: str, request: Request):
            body = m.PointsList.model_validate(await request.json())
            run(lambda: engine.upsert(c, points=body.points))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.put("/collections/{c}/points/vectors")
        async def update_vectors(c: str, request: Request):
            body = m.UpdateVectors.model_validate(await request.json())
            run(lambda: engine.update_vectors(c, points=body.points))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.post("/collections/{c}/points")
        async def retrieve(c: str, request: Request):
            body = m.PointRequest.model_validate(await request.json())
            self.vectors_asked.append(body.with_vector)
            found = run(
                lambda: engine.retrieve(
                    c, ids=body.ids, with_payload=body.with_payload, with_vectors=body.with_vector
                )
            )
            return _ok([p.model_dump(mode="json") for p in found])

        @app.post("/collections/{c}/points/scroll")
        async def scroll(c: str, request: Request):
            body = m.ScrollRequest.model_validate(await request.json())
            points, following = run(
                lambda: engine.scroll(
                    c,
                    scroll_filter=body.filter,
                    limit=body.limit,
                    offset=body.offset,
                    with_payload=body.with_payload,
                    with_vectors=body.with_vector,
                )
            )
            return _ok({"points": [p.model_dump(mode="json") for p in points], "next_page_offset": following})

        @app.post("/collections/{c}/points/delete")
        async def delete(c: str, request: Request):
            raw = await request.json()
            selector = (
                m.PointIdsList.model_validate(raw)
                if "points" in raw
                else m.FilterSelector.model_validate(raw)
            )
            run(lambda: engine.delete(c, points_selector=selector))
            return _ok({"operation_id": 0, "status": "completed"})

        @app.post("/collections/{c}/points/count")
        async def count(c: str, request: Request):
            body = m.CountRequest.model_validate(await request.json())
            return _ok(
                {"count": run(lambda: engine.count(c, count_filter=body.filter, exact=body.exact)).count}
            )

        @app.post("/collections/{c}/points/query")
        async def query(c: str, request: Request):
            body = m.QueryRequest.model_validate(await request.json())
            found = run(
                lambda: engine.query_points(
                    c,
                    query=body.query,
                    using=body.using,
                    prefetch=body.prefetch,
                    query_filter=body.filter,
                    limit=body.limit,
                    with_payload=body.with_payload,
                    with_vectors=body.with_vector or False,
                )
            )
            return _ok(found.model_dump(mode="json"))

        @app.post("/collections/{c}/points/query/batch")
        async def query_batch(c: str, request: Request):
            body = m.QueryRequestBatch.model_validate(await request.json())
            self.vectors_asked += [search.with_vector for search in body.searches]
            found = run(lambda: engine.query_batch_points(c, requests=body.searches))
            answer = [f.model_dump(mode="json") for f in found]
            self.answered_bytes += len(json.dumps(answer))
            return _ok(answer)

        @app.post("/collections/{c}/snapshots")
        async def take_snapshot(c: str):
            made = run(lambda: self._snapshot(c))
            return _ok({k: v for k, v in made.items() if k != "data"})

        @app.get("/collections/{c}/snapshots")
        async def list_snapshots(c: str):
            return _ok([{k: v for k, v in s.items() if k != "data"} for s in self.snapshots.get(c, [])])

        @app.delete("/collections/{c}/snapshots/{name}")
        async def drop_snapshot(c: str, name: str):
            self.snapshots[c] = [s for s in self.snapshots.get(c, []) if s["name"] != name]
            if self.snapshot_store is not None:
                s3, bucket = self.snapshot_store
                s3.delete_object(Bucket=bucket, Key=f"snapshots/{c}/{name}")
            return _ok(True)

        @app.put("/collections/{c}/snapshots/recover")
        async def recover(c: str, request: Request):
            import httpx

            body = m.SnapshotRecover.model_validate(await request.json())
            async with httpx.AsyncClient() as fetch:
                got = await fetch.get(body.location)
            if got.status_code != 200:
                return _error(400, f"Failed to download snapshot from {body.location}: {got.status_code}")
            run(lambda: self._restore(c, json.loads(got.content)))
            return _ok(True)

    def _snapshot(self, c: str) -> dict:
        """The collection's points, whole, as this stand-in's snapshot format (a real one is a tar)."""
        points, after = [], None
        while True:
            page, after = self.engine.scroll(c, limit=256, offset=after, with_payload=True, with_vectors=True)
            points += [p.model_dump(mode="json") for p in page]
            if after is None:
                break
        taken = self.snapshots.setdefault(c, [])
        data = json.dumps({"points": points}).encode()
        name = f"{c}-{len(taken) + 1:04d}.snapshot"
        made = {"name": name, "creation_time": f"2026-12-05T00:00:{len(taken):02d}", "size": len(data)}
        taken.append({**made, "data": data})
        if self.snapshot_store is not None:
            s3, bucket = self.snapshot_store
            s3.put_object(Bucket=bucket, Key=f"snapshots/{c}/{name}", Body=data)
        return made

    def _restore(self, c: str, snapshot: dict) -> None:
        """The collection as the snapshot had it: every point now not in it gone, every one in it back."""
        self.engine.delete(c, points_selector=m.FilterSelector(filter=m.Filter()))
        points = [
            m.PointStruct(id=p["id"], vector=p.get("vector") or {}, payload=p.get("payload"))
            for p in snapshot["points"]
        ]
        if points:
            self.engine.upsert(c, points=points)

    def stop(self) -> None:
        super().stop()
        self.engine.close()
