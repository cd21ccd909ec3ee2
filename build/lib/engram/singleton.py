"""One object per process (a Lambda container, the local stack), built on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessSingleton(Generic[T]):
    """Builds its object once, on first use; the local stack and tests install their own with set()."""

    def __init__(self, build: Callable[[], T]):
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        """The object, built now if this is the first use."""
        with self._lock:
            if self._value is None:
                self._value = self._build()
            return self._value

    def set(self, value: T | None) -> None:
        """Install an object (None: build again on next use)."""
        with self._lock:
            self._value = value
