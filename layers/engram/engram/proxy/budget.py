"""How long a LibreChat turn waits for its memory, and what happens when memory is slow.

A Qdrant or an embedder that hangs (rather than refuses) would add its whole timeout (5-10 s, several
calls) to every turn. So a turn's memory — its settings read and its recall — has a budget
(MEMORY_BUDGET_MS, 1 s): past it the turn goes on without memory and says so (the `x-engram-memory`
header, a `memorySkipped` count and metric). One turn over budget opens the breaker: for MEMORY_PAUSE_S the
turns that follow do not wait at all; then one turn tries again (half open), and closes it if it is on time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Breaker:
    """Open for `pause_s` after a failure; the first call after that is a trial, the rest wait for it."""

    pause_s: float
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _open_until: float = 0.0
    _trial: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allows(self) -> bool:
        """Whether a call may go ahead now: closed, or the one trial once the pause is over."""
        with self._lock:
            if self._open_until == 0.0:
                return True
            if self._now() < self._open_until or self._trial:
                return False
            self._trial = True
            return True

    def failed(self) -> None:
        """A call went over its budget (or failed): open for the pause."""
        with self._lock:
            self._open_until, self._trial = self._now() + self.pause_s, False

    def succeeded(self) -> None:
        """A call came back in time: closed."""
        with self._lock:
            self._open_until, self._trial = 0.0, False

    @property
    def open(self) -> bool:
        """Whether calls are being turned away (for /healthz)."""
        return self._open_until != 0.0

    def _now(self) -> float:
        return self.clock()
