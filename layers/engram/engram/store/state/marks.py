"""Small per-bot marks and limits: when a memory last changed, how far the pending sweep has queued, the
Discord request windows shared by every process, interactions already seen, and export slots."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from ...bookkeeping import ExtractionHealth
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get


class Marks:
    """When a bot's memories last changed (recall caches compare with it) and where its sweep stands."""

    def note_change(self, bot: str, at: int) -> None:
        """A memory of the bot was removed or changed at `at` (ms): caches of recalls made before are stale,
        on every instance."""
        guard(lambda: StateItem(*keys.last_change(bot), value=at).save())

    def last_change(self, bot: str) -> int:
        """When a memory of the bot was last removed or changed (0: never)."""
        item = guard(lambda: get(*keys.last_change(bot)))
        return int(item.value) if item is not None and item.value is not None else 0

    def sweep_mark(self, bot: str) -> tuple[int, int] | None:
        """(the last pending id the sweep queued, when its pass over the bot's pending records began)."""
        # stale: the sweep queues a few pending records again, whose vectors are written once anyway
        item = guard(lambda: get(*keys.sweep_mark(bot), consistent=False))
        if item is None or item.value is None:
            return None
        return int(item.value), int((item.data or {}).get("since") or 0)

    def set_sweep_mark(self, bot: str, through: int, since: int) -> None:
        """The sweep has queued the bot's pending records up to `through`, in a pass begun at `since`."""
        guard(lambda: StateItem(*keys.sweep_mark(bot), value=through, data={"since": since}).save())

    def note_extraction(self, bot: str, at: int, failed: str | None = None) -> None:
        """An extraction ended at `at` (ms): fine, or failed and why. Updated in place (one write), the
        failures in a row counted by DynamoDB itself, so workers running side by side never lose one."""
        key = keys.extraction(bot)
        actions: list[Action]
        if failed is None:
            actions = [StateItem.value.set(at), StateItem.tally.set(0)]
        else:
            actions = [
                StateItem.tag.set(failed[:300]),
                StateItem.tally.add(1),
                StateItem.data.set({"failedAt": at}),
            ]
        guard(lambda: StateItem(*key).update(actions=actions))

    def extraction(self, bot: str) -> ExtractionHealth:
        """As last noted (nothing yet: all zero)."""
        item = guard(lambda: get(*keys.extraction(bot), consistent=False))  # shown to operators
        if item is None:
            return ExtractionHealth()
        return ExtractionHealth(
            ok_at=int(item.value or 0),
            failed_at=int((item.data or {}).get("failedAt") or 0),
            why=str(item.tag or ""),
            failures=int(item.tally or 0),
        )

    def lower_sweep_mark(self, bot: str, through: int) -> None:
        """Records above `through` go back to the sweep (an index job ran and could not finish them)."""
        mark = self.sweep_mark(bot)
        if mark is not None and mark[0] > through:
            self.set_sweep_mark(bot, max(through, 0), mark[1])


class Limits:
    """Conditional writes that let one of many through: a Discord request window, an interaction seen the
    first time, one export per while."""

    def take_rate_slot(self, bot: str, window: int, limit: int, expires_s: int) -> bool:
        """Count one Discord request in a window shared by every process of the bot: False when the window
        already holds `limit` (one conditional update; the item expires with the window)."""
        item = StateItem(*keys.rate_window(bot, window))
        return attempt(
            lambda: item.update(
                actions=[StateItem.tally.add(1), StateItem.expires_at.set(expires_s)],
                condition=StateItem.tally.does_not_exist() | (StateItem.tally < limit),
            )
        )

    def first_sight(self, bot: str, interaction_id: str, expires_s: int) -> bool:
        """True the first time an interaction id is seen (a conditional write of a short-lived item)."""
        return attempt(
            lambda: StateItem(*keys.seen_interaction(bot, interaction_id), expires_at=expires_s).save(
                condition=StateItem.pk.does_not_exist()
            )
        )

    def seen(self, bot: str, interaction_id: str) -> bool:
        """Whether an id was seen already (one strongly consistent read)."""
        return guard(lambda: get(*keys.seen_interaction(bot, interaction_id))) is not None

    def take_export_slot(self, bot: str, user: str, now: int, every_s: int) -> bool:
        """At most one export per `every_s` per user: False when one was taken too recently."""
        return attempt(
            lambda: StateItem(
                *keys.export_limit(bot, user), value=now, expires_at=now // 1000 + every_s
            ).save(condition=StateItem.sk.does_not_exist() | (StateItem.value < now - every_s * 1000))
        )

    def release_export_slot(self, bot: str, user: str) -> None:
        """Give the export slot back (the export could not be delivered)."""
        guard(StateItem(*keys.export_limit(bot, user)).delete)
