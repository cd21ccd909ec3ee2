"""Discord backfill runs: a user's latest run (counted once per channel and planning step), the token
for its last word, and the cursors of its channels."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from ...bookkeeping import BackfillRun, Cursor, RunCount
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get

PLAN_PREFIX = "plan#"  # a backfill run's planning steps, kept with its channels counted done
FINAL_SAID = "final#said"  # in a run's members while its final message is being (or has been) sent


def _whole(value: float | int | str | None) -> int:
    return int(value) if value is not None else 0


def _run(item: StateItem) -> BackfillRun:
    data = item.data or {}
    # channels finished: the members that are not planning steps nor the final message's claim
    done = [m for m in item.members or () if not m.startswith(PLAN_PREFIX) and m != FINAL_SAID]
    return BackfillRun(
        run=item.tag or "",
        left=_whole(item.value),
        count=_whole(item.tally),
        channels=_whole(item.planned) if item.planned is not None else _whole(data.get("channels")),
        done=len(done),
        issued_at=_whole(data.get("issuedAt")),
    )


class BackfillRuns:
    """A user's latest backfill run: what is left, what was stored, and who sends its final message."""

    def get(self, bot: str, user: str) -> BackfillRun | None:
        """The user's latest run, or None."""
        item = guard(lambda: get(*keys.backfill_run(bot, user)))
        return _run(item) if item is not None else None

    def start(self, bot: str, user: str, run: str, channels: int, issued_at: int, planning: int = 0) -> None:
        """A new run (replacing the last): `channels` to read, and `planning` jobs still to find more."""
        guard(
            lambda: StateItem(
                *keys.backfill_run(bot, user),
                value=channels + planning,
                planned=channels,
                tally=0,
                tag=run,
                data={"issuedAt": issued_at},
            ).save()
        )

    def plan(self, bot: str, user: str, run: str, step: str, channels: int, planning: int) -> RunCount | None:
        """A planning job of a run is done: it found `channels` more to read and queued `planning` more
        planning jobs. One conditional update (a duplicate delivery counts nothing twice), made before the
        jobs it found are queued: the run cannot look finished while they wait. None when the run is not
        this one any more (replaced, forgotten) or this step was counted already."""
        return self._count(
            bot,
            user,
            run,
            PLAN_PREFIX + step,
            [StateItem.value.add(channels + planning - 1), StateItem.planned.add(channels)],
        )

    def count(
        self, bot: str, user: str, run: str, channel: str, stored: int, finished: bool
    ) -> RunCount | None:
        """Add to a run's count (and, once per channel, count the channel done): one conditional update.
        None when a newer run (or a forget) replaced it, or this channel was counted already."""
        actions: list[Action] = [StateItem.tally.add(stored)]
        if not finished:
            return self._count(bot, user, run, None, actions)
        return self._count(bot, user, run, channel, actions + [StateItem.value.add(-1)])

    def _count(
        self, bot: str, user: str, run: str, once: str | None, actions: list[Action]
    ) -> RunCount | None:
        """An update of the run, made at most once per name `once` (kept in the run's members)."""
        item = StateItem(*keys.backfill_run(bot, user))
        condition = StateItem.tag == run
        if once is not None:
            actions = actions + [StateItem.members.add({once})]
            condition &= ~StateItem.members.contains(once)
        if not attempt(lambda: item.update(actions=actions, condition=condition)):
            return None
        return RunCount(
            int(item.value or 0), int(item.tally or 0), int((item.data or {}).get("issuedAt") or 0)
        )

    def claim_final(self, bot: str, user: str, run: str) -> RunCount | None:
        """The right to send a finished run's one final message: one conditional update, made while the run
        is this one, has nothing left and no job holds that right. Counting and saying are apart, so a job
        whose count finished the run but whose message failed (a timeout on the way to Discord) leaves the
        message to its redelivery, which finds its count made already. None when it is not this job's."""
        item = StateItem(*keys.backfill_run(bot, user))
        condition = (StateItem.tag == run) & (StateItem.value == 0) & ~StateItem.members.contains(FINAL_SAID)
        claim: list[Action] = [StateItem.members.add({FINAL_SAID})]
        if not attempt(lambda: item.update(actions=claim, condition=condition)):
            return None
        return RunCount(0, int(item.tally or 0), int((item.data or {}).get("issuedAt") or 0))

    def release_final(self, bot: str, user: str, run: str) -> None:
        """The final message was not sent: the next delivery of the job may claim it again."""
        item = StateItem(*keys.backfill_run(bot, user))
        give_back: list[Action] = [StateItem.members.delete({FINAL_SAID})]
        attempt(lambda: item.update(actions=give_back, condition=StateItem.tag == run))

    def keep_token(self, bot: str, user: str, run: str, token: str, expires_s: int) -> None:
        """An interaction token for a run's last word, in its own item with a TTL."""
        guard(
            lambda: StateItem(*keys.token(bot, user, run), data={"token": token}, expires_at=expires_s).save()
        )

    def token(self, bot: str, user: str, run: str, now_s: int) -> str | None:
        """The run's token while it is valid (DynamoDB's TTL deletes late, dynalite never)."""
        item = guard(lambda: get(*keys.token(bot, user, run)))
        if item is None:
            return None
        if int(item.expires_at or 0) <= now_s:
            guard(item.delete)
            return None
        token = (item.data or {}).get("token")
        return str(token) if token is not None else None


class Cursors:
    """Where each of a user's channels' backfill stands."""

    def get(self, bot: str, user: str, channel: str) -> Cursor | None:
        """A user's backfill cursor in one channel, or None."""
        item = guard(lambda: get(keys.cursors_pk(bot, user), channel))
        return Cursor.from_data(dict(item.data or {})) if item is not None else None

    def save(self, bot: str, user: str, channel: str, cursor: Cursor) -> None:
        guard(lambda: StateItem(keys.cursors_pk(bot, user), channel, data=cursor.to_data()).save())

    def mark_queued(self, bot: str, user: str, channel: str, saved: Cursor) -> bool:
        """The cursor marked: its next link is queued. Only while it is still the one `saved` (the next link
        may have moved it on already, a forget deleted it): False when it is not."""
        item = StateItem(keys.cursors_pk(bot, user), channel, data=saved.moved(queued=True).to_data())
        return attempt(lambda: item.save(condition=StateItem.data == saved.to_data()))
