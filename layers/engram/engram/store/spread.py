"""State items a bot once kept under one partition key, now spread over keys.SPREAD_SHARDS keys by their
sort key (keys.spread_by): unique claims (one per stored message or fact), thread tails (one write per
stored message) and Discord channels' catch-up state. Each was read by key only, so who reads one knows
where it is; one key per bot held every bot's writes to ~1,000 write units a second.

Items written before stay under the plain key until the spread pass (queued by the sweep) moves them, a
bounded step at a time; until then, readers look there too. A process that finds a bot's plain key empty
trusts that for an hour (nothing of this code writes there): what an older version of the code still
running through a deploy wrote there after the check is found on the next one, and moved by the pass the
sweep queues then."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from . import keys
from .budget import StepBudget
from .dynamo import attempt, guard
from .models import StateItem

# How long a process trusts "this bot still has items under its plain key" before asking again (the pass
# may have emptied it meanwhile), and "none left" (a deploy's old code may write there for a few minutes
# after a new process looked): one query of one item a kind per bot and process each time
RECHECK_S = 300.0
NONE_LEFT_TRUSTED_S = 3600.0
MOVE_PAGE = 100


class PlainKey:
    """One kind of spread item: which keys an item is looked for under, and the pass that moves what is
    left under the plain key. `move(spread_pk, item)` writes a plain item's copy under its spread key and
    deletes it, so that a move cut off anywhere, or made twice, loses nothing."""

    def __init__(
        self,
        plain: Callable[[str], str],
        move: Callable[[str, StateItem], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `mover`: public, so a test can cut a move off between its two writes
        self.plain, self.mover, self._clock = plain, move, clock
        self._lock = threading.Lock()
        self._none_left: dict[str, float] = {}  # bot -> when its plain key was last found empty
        self._some_left: dict[str, float] = {}  # bot -> when the plain key was last found holding items
        self.plain_checks = 0  # queries of the plain key made (tests, the bench)

    def spread(self, bot: str, sk: str) -> str:
        return keys.spread_by(self.plain(bot), sk)

    def plain_left(self, bot: str) -> bool:
        """Whether the bot may still have items under its plain key (one query of one item, then cached)."""
        with self._lock:
            empty = self._none_left.get(bot)
            if empty is not None and self._clock() - empty < NONE_LEFT_TRUSTED_S:
                return False
            seen = self._some_left.get(bot)
            if seen is not None and self._clock() - seen < RECHECK_S:
                return True
        left = bool(self._plain_page(bot, 1))
        with self._lock:
            if left:
                self._some_left[bot] = self._clock()
            else:
                self._none_left[bot] = self._clock()
                self._some_left.pop(bot, None)
        return left

    def lookups(self, bot: str, sk: str) -> list[str]:
        """The partition keys an item may sit under, its spread key first."""
        spread = self.spread(bot, sk)
        return [spread, self.plain(bot)] if self.plain_left(bot) else [spread]

    def _plain_page(self, bot: str, limit: int) -> list[StateItem]:
        self.plain_checks += 1
        return guard(lambda: list(StateItem.query(self.plain(bot), limit=limit, consistent_read=True)))

    def move_step(self, bot: str, budget_s: float) -> bool:
        """One bounded step of the spread pass: move the items under the bot's plain key, a page at a
        time, while another page fits in `budget_s`; True when none is left. No cursor: what is moved is
        gone from the plain key."""
        budget = StepBudget(budget_s, self._clock)
        while True:
            budget.begin_page()
            page = self._plain_page(bot, MOVE_PAGE)
            if not page:
                with self._lock:
                    self._none_left[bot] = self._clock()
                    self._some_left.pop(bot, None)
                return True
            for item in page:
                self.mover(self.spread(bot, item.sk), item)
            if not budget.another_fits():
                return False


def move_claim(spread_pk: str, item: StateItem) -> None:
    """The spread copy first (kept if one is there: a claim made since, or a move cut off before its
    delete), then the plain one deleted only while it still names the same memory."""
    spread = StateItem(spread_pk, item.sk, memory_id=item.memory_id, value=item.value, owner=item.owner)
    attempt(lambda: spread.save(condition=StateItem.pk.does_not_exist()))
    plain = StateItem(item.pk, item.sk)
    attempt(lambda: plain.delete(condition=StateItem.memory_id == item.memory_id))


def move_newer(spread_pk: str, item: StateItem) -> None:
    """A thread tail: the spread item takes the plain one's unless it holds a newer one (`value` is the
    tail's time); then the plain one is deleted while it is unchanged."""
    spread = StateItem(spread_pk, item.sk, value=item.value, data=item.data)
    attempt(
        lambda: spread.save(
            condition=StateItem.value.does_not_exist() | (StateItem.value < int(item.value or 0))
        )
    )
    plain = StateItem(item.pk, item.sk)
    attempt(lambda: plain.delete(condition=StateItem.value == item.value))


def claim_keys() -> PlainKey:
    return PlainKey(keys.unique_pk, move_claim)


def tail_keys() -> PlainKey:
    return PlainKey(keys.thread_pk, move_newer)
