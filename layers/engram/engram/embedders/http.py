"""Embedders reached over HTTP: Ollama's /api/embed and OpenAI-style /v1/embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from ..breaker import guarded
from ..errors import EmbedderUnavailable


def _check(vectors: object, expected: int, where: str) -> list[list[float]]:
    if not isinstance(vectors, list) or len(vectors) != expected:
        raise EmbedderUnavailable(
            f"{where} answered {expected} texts with something other than {expected} vectors"
        )
    for vector in vectors:
        if not isinstance(vector, list) or not vector or not all(isinstance(x, (int, float)) for x in vector):
            raise EmbedderUnavailable(f"{where} answered with a vector that is not a list of numbers")
    return vectors


ONLINE_MAX = 8  # texts: a query, or a live turn's few records; more is a backfill's or a re-embed's batch


class OllamaEmbedder:
    """Ollama's batched `/api/embed`, at two endpoints that may be one: `base_url` for what someone waits
    on (a query, a live write: at most ONLINE_MAX texts), `bulk_url` for batches (a backfill, a re-embed),
    so a query embed never queues behind a batch of 64 on the same Ollama."""

    provider = "ollama"

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_s: float = 10.0,
        batch_size: int = 64,
        transport: httpx.BaseTransport | None = None,
        bulk_url: str | None = None,
    ) -> None:
        self.model = model
        self.batch_size = batch_size
        # an Ollama that hangs is rested, its calls failing at once (engram.breaker): each endpoint apart
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout_s, transport=guarded(transport, "Ollama")
        )
        self._bulk = (
            httpx.Client(
                base_url=bulk_url.rstrip("/"),
                timeout=timeout_s,
                transport=guarded(transport, "Ollama (bulk)"),
            )
            if bulk_url and bulk_url.rstrip("/") != base_url.rstrip("/")
            else self._client
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for texts, `batch_size` per request."""
        out: list[list[float]] = []
        client = self._client if len(texts) <= ONLINE_MAX else self._bulk
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                response = client.post("/api/embed", json={"model": self.model, "input": batch})
            except httpx.HTTPError as exc:
                raise EmbedderUnavailable(f"Ollama did not answer: {exc}") from exc
            if response.status_code != 200:
                raise EmbedderUnavailable(
                    f"Ollama answered {response.status_code} for model {self.model!r}: {response.text[:200]}"
                )
            try:
                vectors = response.json().get("embeddings")
            except ValueError as exc:
                raise EmbedderUnavailable("Ollama answered with something that is not JSON") from exc
            out.extend(_check(vectors, len(batch), "Ollama"))
        return out


class OpenAIEmbedder:
    """Any server that speaks OpenAI's `/v1/embeddings`."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        batch_size: int = 128,
        transport: httpx.BaseTransport | None = None,
        provider: str = "remote",
    ) -> None:
        self.provider = provider
        self.model = model
        self.batch_size = batch_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        base = base_url.rstrip("/")
        self._path = "/embeddings" if base.endswith("/v1") else "/v1/embeddings"
        self._client = httpx.Client(  # one that hangs is rested, its calls failing at once (engram.breaker)
            base_url=base,
            headers=headers,
            timeout=timeout_s,
            transport=guarded(transport, "the embeddings server"),
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for texts, `batch_size` per request, put back in input order."""
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                response = self._client.post(self._path, json={"model": self.model, "input": batch})
            except httpx.HTTPError as exc:
                raise EmbedderUnavailable(f"the embeddings server did not answer: {exc}") from exc
            if response.status_code != 200:
                raise EmbedderUnavailable(
                    f"the embeddings server answered {response.status_code} for model {self.model!r}: "
                    f"{response.text[:200]}"
                )
            try:
                data = sorted(response.json()["data"], key=lambda item: item["index"])
                vectors = [item["embedding"] for item in data]
            except (ValueError, KeyError, TypeError) as exc:
                raise EmbedderUnavailable("the embeddings server answered without a `data` list") from exc
            out.extend(_check(vectors, len(batch), "the embeddings server"))
        return out
