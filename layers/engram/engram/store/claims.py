"""Where a bot's unique claims sit: under CLAIM_SHARDS spread keys (keys.claim_pk), and, for claims made
before those, under the bot's plain key (keys.unique_pk) until the claims pass moves them. While a bot has
any claim left under the plain key, every lookup looks there too; the pass empties it a bounded step at a
time, and a process that finds it empty never looks again (nothing writes there any more)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from . import keys
from .dynamo import attempt, guard
from .models import StateItem

# How long a process trusts "this bot still has claims under its plain key" before asking again (the pass
# may have emptied it meanwhile); "none left" is trusted for good
RECHECK_S = 300.0
MOVE_PAGE = 100


class ClaimKeys:
    """Which keys a claim on a key is looked for under, and the pass that moves plain-key claims."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._none_left: set[str] = set()  # bots with nothing under the plain key
        self._some_left: dict[str, float] = {}  # bot -> when the plain key was last found holding claims
        self.plain_checks = 0  # queries of the plain key made (tests, the bench)

    def plain_left(self, bot: str) -> bool:
        """Whether the bot may still have claims under its plain key (one query of one item, then cached)."""
        with self._lock:
            if bot in self._none_left:
                return False
            seen = self._some_left.get(bot)
            if seen is not None and self._clock() - seen < RECHECK_S:
                return True
        left = bool(self._plain_page(bot, 1))
        with self._lock:
            if left:
                self._some_left[bot] = self._clock()
            else:
                self._none_left.add(bot)
                self._some_left.pop(bot, None)
        return left

    def lookups(self, bot: str, key: str) -> list[str]:
        """The partition keys a claim on `key` may sit under, its own spread key first."""
        spread = keys.claim_pk(bot, key)
        return [spread, keys.unique_pk(bot)] if self.plain_left(bot) else [spread]

    def _plain_page(self, bot: str, limit: int) -> list[StateItem]:
        self.plain_checks += 1
        return guard(lambda: list(StateItem.query(keys.unique_pk(bot), limit=limit, consistent_read=True)))

    def move_step(self, bot: str, budget_s: float) -> bool:
        """The claims pass, one bounded step: move the claims under the bot's plain key to their spread
        keys, a page at a time, while another page fits in `budget_s`; True when none is left. Each move
        writes the spread item first (kept if one is there: a claim made since, or a move cut off before
        its delete), then deletes the plain one only if it still names the same memory, so a step cut off
        anywhere, or run twice, loses no claim. No cursor: what is moved is gone from the plain key."""
        deadline, longest = self._clock() + budget_s, 0.0
        while True:
            began = self._clock()
            page = self._plain_page(bot, MOVE_PAGE)
            if not page:
                with self._lock:
                    self._none_left.add(bot)
                    self._some_left.pop(bot, None)
                return True
            for item in page:
                self._move(bot, item)
            longest = max(longest, self._clock() - began)
            if self._clock() + longest > deadline:
                return False

    @staticmethod
    def _move(bot: str, item: StateItem) -> None:
        spread = StateItem(
            keys.claim_pk(bot, item.sk),
            item.sk,
            memory_id=item.memory_id,
            value=item.value,
            owner=item.owner,
        )
        attempt(lambda: spread.save(condition=StateItem.pk.does_not_exist()))
        plain = StateItem(keys.unique_pk(bot), item.sk)
        attempt(lambda: plain.delete(condition=StateItem.memory_id == item.memory_id))
