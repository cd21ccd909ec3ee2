"""A model loaded once, on first use, by either local embedder: one load however many threads ask, and a
package that is not installed said as such (EmbedderUnavailable), never an ImportError mid-request."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import EmbedderUnavailable


class LazyModel:
    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def warm(self) -> bool:
        """Whether the model is loaded."""
        return self._model is not None

    def get(self) -> Any:
        """The model, loaded the first time."""
        with self._lock:
            if self._model is None:
                try:
                    self._model = self._load()
                except ImportError as exc:
                    raise EmbedderUnavailable(
                        f"no local embedder here ({exc.name} is not installed)"
                    ) from exc
            return self._model


class LoadedOnFirstUse:
    """A local embedder whose model is a LazyModel: whether it is loaded yet, and loading it."""

    _model: LazyModel

    @property
    def warm(self) -> bool:
        """Whether the model is loaded (a write never waits for it: its vector follows by a job)."""
        return self._model.warm

    def load(self) -> Any:
        """Load the model once; later calls return it."""
        return self._model.get()
