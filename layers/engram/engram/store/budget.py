"""The time budget of a bounded job step that works a page at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..record import Paging, Record

T = TypeVar("T")


class StepBudget:
    """A step pages on while another page, as long as the longest so far, would end inside its budget: a
    job's time is bounded by the budget plus one page, whatever the size of the installation."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._deadline = clock() + budget_s
        self._longest = 0.0
        self._began = self._deadline - budget_s

    def begin_page(self) -> None:
        self._began = self._clock()

    def another_fits(self) -> bool:
        """After a page: whether the next one may begin."""
        now = self._clock()
        self._longest = max(self._longest, now - self._began)
        return now + self._longest < self._deadline


def walk_pages(
    read: Callable[[int | None], Sequence[T]],
    before: int | None,
    page_size: int,
    budget_s: float,
    each: Callable[[list[T]], None],
    position: Callable[[T], int],
) -> int | None:
    """One bounded step of a pass: pages read newest first from `before` (`read(before)`), each handed to
    `each`, while another (as long as the longest so far) fits in `budget_s`; returns where the next step
    starts (`position` of the last item read; None: the pass is done)."""
    budget = StepBudget(budget_s)
    while True:
        budget.begin_page()
        page = list(read(before))
        if not page:
            return None
        each(page)
        if len(page) < page_size:
            return None
        before = position(page[-1])
        if not budget.another_fits():
            return before


def walk_kind(  # noqa: PLR0913 - a pass's where (bot, kind, shard), from where, how long, and what it does
    page: Callable[..., list[Record]],
    bot: str,
    kind: str,
    start: tuple[int | None, int],
    budget_s: float,
    each: Callable[[list[Record]], None],
    shard: int | None = None,
) -> int | None:
    """One bounded step of a pass over a bot's records of a kind (under one of its keys with `shard`), read
    with a record store's `page`:
    pages of `start`'s size, newest first from `start`'s id, each handed to `each`, while another (as long
    as the longest so far) fits in `budget_s`; returns where the next step starts (None: the kind is done)."""
    before, page_size = start
    return walk_pages(
        lambda cursor: page(bot, kind, Paging(cursor, page_size, shard=shard)),
        before,
        page_size,
        budget_s,
        each,
        lambda r: int(r.id),
    )
