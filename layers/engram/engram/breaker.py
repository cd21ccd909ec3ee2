"""Dependencies that hang fail fast: a circuit breaker per dependency of a process.

A Qdrant, an embedder or a chat model that hangs (rather than refuses, which is quick) would add its whole
timeout (5-120 s, several calls) to every turn, every /ask and every job. So each client of one
(`guarded`) rests it after a call that timed out: for DEPENDENCY_PAUSE_S its calls fail at once, as if it
refused (each door already degrades on that: search by words, a turn or an answer without memory, a job
backed off); then one call tries again (half open) and closes it when it answers.

A LibreChat turn's memory has its own budget and breaker besides (engram.proxy.turn: MEMORY_BUDGET_MS,
MEMORY_PAUSE_S), as something slower than 1 s is already too slow there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

# How long a dependency rests after a call to it timed out
DEPENDENCY_PAUSE_S = 30.0


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


class GuardedTransport(httpx.BaseTransport):
    """An HTTP transport that rests its dependency after a timeout (a Breaker): while it rests, a request
    fails at once with ConnectError, which the client's owner already handles as "unavailable"."""

    def __init__(self, inner: httpx.BaseTransport, name: str, breaker: Breaker) -> None:
        self.inner, self.name, self.breaker = inner, name, breaker

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.breaker.allows():
            raise httpx.ConnectError(
                f"{self.name} is resting after a call to it timed out (tried again within "
                f"{self.breaker.pause_s:g} s)",
                request=request,
            )
        timed_out = True  # until it answers: anything else raised in between leaves no trial stuck
        try:
            response = self.inner.handle_request(request)
            response.read()  # a body that never comes is a timeout too, counted here
            timed_out = False
            return response
        except httpx.TransportError as exc:
            timed_out = isinstance(exc, httpx.TimeoutException)
            raise
        finally:
            if timed_out:
                self.breaker.failed()
            else:
                self.breaker.succeeded()

    def close(self) -> None:
        self.inner.close()


def guarded(
    transport: httpx.BaseTransport | None, name: str, pause_s: float = DEPENDENCY_PAUSE_S
) -> GuardedTransport:
    """`transport` (or a plain HTTP one) with a breaker of its own, for one dependency's client."""
    return GuardedTransport(transport or httpx.HTTPTransport(), name, Breaker(pause_s=pause_s))
