"""Reading a line (a thread; a fact's author and scope) from the byLine index: which records sit around a
span of it, by id, in time order.

A write reads its records' lines afresh (three queries a line: the turns before, the span, the turns
after). A maintenance step (a rebuild, a reconcile, a re-embed page) walks thousands of records whose lines
it meets again and again, page after page: `LineReads` reads each line once, further than one page needs,
and later pages take from what it read the ids of their records' windows. Only ids are kept (the index is
keys only): the records themselves are read fresh for every page, so one deleted meanwhile is not brought
back, and the forgotten are left out by the caller on every read. A record written into a line during the
step may be missing from its neighbours' windows until it is written next; its own write gives it its
window."""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass, field

from pynamodb.expressions.condition import Condition

from ..line_spans import windows_of
from .models import MemoryRecord

# Rows read beyond what a page needs when a line is extended: the next pages of a step find them known.
READ_AHEAD = 128


def span_ids(line: str, low: int, high: int, reach: int) -> list[int]:
    """Ids of a line's records from `reach` before `low` to `reach` after `high` (createdAt), each edge
    reaching on through records sharing its last one's millisecond; the span itself, its ends included."""
    index, created = MemoryRecord.by_line, MemoryRecord.created_at

    def edge(condition: Condition, forward: bool) -> list[MemoryRecord]:
        # the index orders ties by nothing, and a window orders them by id (reach + 1 read tells)
        rows = list(index.query(line, condition, scan_index_forward=forward, limit=reach + 1))[: reach + 1]
        if len(rows) == reach + 1 and int(rows[-1].created_at) == int(rows[-2].created_at):
            rows += list(index.query(line, created == int(rows[-1].created_at)))
        return rows

    before, after = edge(created < low, False), edge(created > high, True)
    between = index.query(line, created.between(low, high))
    return list(dict.fromkeys(int(row.id) for row in [*before, *between, *after]))


@dataclass
class _Known:
    """A line's rows, (createdAt, id) in order, known to be all of them from `low` to `high` inclusive
    (-inf / +inf: to the line's start / end)."""

    low: float
    high: float
    rows: list[tuple[int, int]] = field(default_factory=list)

    def below(self, at: int) -> int:
        """How many known rows are older than `at`."""
        return bisect.bisect_left(self.rows, (at, -1))

    def above(self, at: int) -> int:
        """How many known rows are newer than `at`."""
        return len(self.rows) - bisect.bisect_right(self.rows, (at, math.inf))

    def add(self, rows: list[tuple[int, int]]) -> None:
        self.rows = sorted(set(self.rows).union(rows))


def _read(line: str, condition: Condition, forward: bool, limit: int) -> tuple[list[tuple[int, int]], bool]:
    """Up to `limit` rows of a line from a condition, in the direction asked; and whether the line ended."""
    query = MemoryRecord.by_line.query(
        line, condition, scan_index_forward=forward, limit=limit, page_size=limit
    )
    rows = [(int(r.created_at), int(r.id)) for r in query]
    return rows, len(rows) < limit


def _all_at(line: str, at: int) -> list[tuple[int, int]]:
    """Every row of a line in one millisecond."""
    return [
        (int(r.created_at), int(r.id))
        for r in MemoryRecord.by_line.query(line, MemoryRecord.created_at == at)
    ]


class LineReads:
    """byLine reads shared by the pages of one maintenance step (see the module): `around` gives a page's
    records' windows, reading a line only where what is known of it falls short. Safe to share between the
    threads of one step; meant to live no longer than the step."""

    def __init__(self, ahead: int | None = None):
        self.ahead = ahead or READ_AHEAD
        self.queries = 0  # how many byLine queries it made (tests and benches)
        self._known: dict[str, _Known] = {}
        self._lock = threading.Lock()

    def around(self, line: str, points: list[tuple[int, int]], reach: int) -> list[int]:
        """Ids of a line's records within `reach` turns of each of these (createdAt, id) points, in time
        order (a point missing from the index, written a moment ago, is placed where it belongs): what
        their windows are made of, and nothing between them. A step's page holds a few records of a line
        with many of its other keys' records between them; only the byLine keys of those are read (the
        known rows are every row, in the windows' own order, so a position is exact)."""
        with self._lock:
            known = self._cover(line, min(c for c, _ in points), max(c for c, _ in points), reach)
            return windows_of(known.rows, points, reach)

    def _cover(self, line: str, low: int, high: int, reach: int) -> _Known:
        """What is known of a line, read on until it holds `low` to `high` and `reach` + 1 rows each side."""
        known = self._known.get(line)
        if known is None or high < known.low or low > known.high:
            # nothing known near: read older from the span's newest end (the span and the turns before it,
            # one query while the span is short), then newer
            known = self._known[line] = _Known(low=high + 1, high=high)
        self._older(line, known, low, reach)
        self._newer(line, known, high, reach)
        return known

    def _older(self, line: str, known: _Known, low: int, reach: int) -> None:
        """Read on, older, until `reach` + 1 rows before `low` are known (or the line's start)."""
        while known.low > -math.inf and known.below(low) < reach + 1:
            self._extend(line, known, older=True)

    def _newer(self, line: str, known: _Known, high: int, reach: int) -> None:
        """Read on, newer, until `reach` + 1 rows after `high` are known (or the line's end)."""
        while known.high < math.inf and known.above(high) < reach + 1:
            self._extend(line, known, older=False)

    def _extend(self, line: str, known: _Known, older: bool) -> None:
        """One read past the known interval's older (or newer) edge, the edge moved to what it covers."""
        self.queries += 1
        created = MemoryRecord.created_at
        condition = created < int(known.low) if older else created > int(known.high)
        rows, ended = _read(line, condition, not older, self.ahead)
        if ended:
            known.add(rows)
            edge = -math.inf if older else math.inf
        elif rows[-1][0] == rows[0][0]:  # a whole read within one millisecond: take all of it
            self.queries += 1
            known.add(_all_at(line, rows[-1][0]))
            edge = rows[-1][0]
        else:  # the farthest millisecond read may have more rows: known up to the one before it
            farthest = rows[-1][0]
            known.add([r for r in rows if r[0] != farthest])
            edge = farthest + 1 if older else farthest - 1
        if older:
            known.low = edge
        else:
            known.high = edge
