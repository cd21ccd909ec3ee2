"""Memory ids: time-ordered, made without a shared counter.

An id is a snowflake of our own, 53 bits so that any JSON reader (a browser's, LibreChat's) holds it exactly:

    41 bits  milliseconds since 2025-01-01 (until 2094)
     8 bits  the process's worker number
     4 bits  a sequence within the millisecond

Newer ids are larger across every process (to the millisecond), as the old counter's were, and every
counter-made id is far below the first of these, so an existing table needs no migration: "newest first"
keeps meaning highest id first. A process takes its worker number once, the first time it makes an id (one
atomic add on a state item per process, never per write): two live processes share one only when more than
256 processes have started between them and both still write in the same millisecond, and then the record
write's own condition (no item with that id) refuses the second, so nothing is ever overwritten. A burst of
more than 16 ids in a millisecond borrows the next milliseconds' sequences: ids stay unique and ordered
within the process, a few milliseconds ahead at most.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
WORKER_BITS = 8
SEQUENCE_BITS = 4
TIME_BITS = 41
MAX_ID = (1 << (TIME_BITS + WORKER_BITS + SEQUENCE_BITS)) - 1  # 2**53 - 1


def _clock_ms() -> int:
    return int(time.time() * 1000)


class IdMaker:
    """Makes memory ids for one process; `take_worker` is called once, lazily (not at import: a process
    restored from a snapshot must not reuse the snapshot's number)."""

    def __init__(self, take_worker: Callable[[], int], clock: Callable[[], int] = _clock_ms) -> None:
        self._take_worker = take_worker
        self._clock = clock
        self._lock = threading.Lock()
        self._worker: int | None = None
        self._last_slot = 0  # (milliseconds << SEQUENCE_BITS) | sequence of the last id made

    def take(self, n: int) -> list[int]:
        """`n` new ids, ascending."""
        with self._lock:
            if self._worker is None:
                self._worker = self._take_worker() % (1 << WORKER_BITS)
            now = (self._clock() - EPOCH_MS) << SEQUENCE_BITS
            first = max(self._last_slot + 1, now, 1)
            self._last_slot = first + n - 1
            worker = self._worker
        return [compose(slot, worker) for slot in range(first, first + n)]


def compose(slot: int, worker: int) -> int:
    """The id of a (millisecond, sequence) slot made by a worker."""
    millis, sequence = slot >> SEQUENCE_BITS, slot & ((1 << SEQUENCE_BITS) - 1)
    if millis >= 1 << TIME_BITS:
        raise OverflowError("memory ids ran out of time bits (the year 2094)")
    return (millis << (WORKER_BITS + SEQUENCE_BITS)) | (worker << SEQUENCE_BITS) | sequence


def made_at_ms(memory_id: int) -> int:
    """When an id was made (epoch milliseconds); meaningless for a counter-made id (below 2**12)."""
    return (memory_id >> (WORKER_BITS + SEQUENCE_BITS)) + EPOCH_MS
