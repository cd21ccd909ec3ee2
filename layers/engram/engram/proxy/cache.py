"""TTL caches with hit/miss counters (cachetools underneath), reported on /healthz."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from cachetools import TTLCache

_MISSING = object()


class StatsCache:
    """A bounded TTL cache that counts its hits and misses."""

    def __init__(self, ttl_ms: int, max_entries: int):
        self._cache: TTLCache[Any, Any] = TTLCache(maxsize=max(1, max_entries), ttl=max(ttl_ms, 1) / 1000)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The cached value, or load() stored for next time."""
        return self.lookup(key, load)[0]

    def lookup(self, key: Hashable, load: Callable[[], Any]) -> tuple[Any, bool]:
        """(the cached value, True), or (load() stored for next time, False)."""
        with self._lock:
            value = self._cache.get(key, _MISSING)
            if value is not _MISSING:
                self.hits += 1
                return value, True
            self.misses += 1
        value = load()
        with self._lock:
            self._cache[key] = value
        return value, False

    def discard(self, key: Hashable) -> None:
        """Forget one entry."""
        with self._lock:
            self._cache.pop(key, None)

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._cache.clear()

    def stats(self) -> dict[str, Any]:
        """Hits, misses, size and hit rate."""
        total = self.hits + self.misses
        return {
            "hits": self.hits,
            "misses": self.misses,
            "size": len(self._cache),
            "hitRate": round(self.hits / total, 3) if total else 0.0,
        }
