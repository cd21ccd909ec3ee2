"""How engram keeps time: wall-clock epoch milliseconds, the unit of every stored time."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, how records keep time."""
    return int(time.time() * 1000)
