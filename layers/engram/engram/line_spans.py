"""How a line's records are gathered around some of them, the same for every store: which ids lie within
`reach` turns of a set of points on a line (a store's `line_ids` says which), and the records of each line
put in time order."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

from .record import Record

Point = tuple[int, int]  # (createdAt, id): a record's place on its line


def points_by_line(records: Sequence[Record]) -> dict[str, list[Point]]:
    """Each line of these records, and their places on it (records on no line left out)."""
    points: dict[str, list[Point]] = {}
    for r in records:
        if r.line:
            points.setdefault(r.line, []).append((int(r.created_at), int(r.id)))
    return points


def windows_of(rows: list[Point], points: list[Point], reach: int) -> list[int]:
    """Ids of a line's rows (all of them known, in order) within `reach` turns of each point: what the
    points' windows are made of, and nothing between them (a point not among the rows, written a moment
    ago, is placed where it belongs)."""
    keep: set[int] = set()
    for point in points:
        first = max(0, bisect.bisect_left(rows, point) - reach)
        keep.update(range(first, min(len(rows), bisect.bisect_right(rows, point) + reach)))
    return [rows[n][1] for n in sorted(keep)]


class LineReader(Protocol):
    """A maintenance step's reads of lines, each line read once for all the step's pages."""

    def around(self, line: str, points: list[Point], reach: int) -> list[int]: ...


class LineSource(Protocol):
    """What gathering lines reads of a record store."""

    def line_ids(self, line: str, at: list[Point], reach: int, reads: LineReader | None) -> list[int]: ...
    def batch_get(self, bot: str, ids: list[int]) -> dict[int, Record]: ...


def line_around(
    store: LineSource,
    records: list[Record],
    reach: int,
    reads: LineReader | None = None,
    beside: Sequence[Record] = (),
) -> dict[str, list[Record]]:
    """For each line (thread; a fact's author and scope) of these records, its records from `reach` before
    the first of them to `reach` after the last, in time order: what their windows, and their neighbours'
    windows, are made of (the store's index may be eventually consistent: a record written a moment ago may
    be missing; the records given are placed by the caller itself). `reads`: a maintenance step's reads, each
    line read once for all its pages, and only the records within `reach` of these; `beside`: records the
    step read a moment ago (the pages either side of these), taken as they were read."""
    if not records:
        return {}
    line_ids = partial(store.line_ids, reach=reach, reads=reads)
    return gather(records, beside, line_ids, partial(store.batch_get, records[0].bot))


def gather(
    records: list[Record],
    beside: Sequence[Record],
    line_ids: Callable[[str, list[Point]], list[int]],
    fetch: Callable[[list[int]], dict[int, Record]],
) -> dict[str, list[Record]]:
    """For each line of these records, the records `line_ids` names on it, in time order: the records
    given (and `beside` them) taken as they are, only the others fetched."""
    ids = {line: line_ids(line, at) for line, at in points_by_line(records).items()}
    found = {int(r.id): r for r in (*beside, *records)}
    wanted = {i for on in ids.values() for i in on} - set(found)
    found.update(fetch(sorted(wanted)) if wanted else {})
    return {
        line: sorted(
            (found[i] for i in line_ids_ if i in found), key=lambda r: (int(r.created_at), int(r.id))
        )
        for line, line_ids_ in ids.items()
    }
