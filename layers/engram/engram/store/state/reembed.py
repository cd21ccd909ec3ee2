"""A re-embedding's passes: how many chains of the current pass are still running."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from ...bookkeeping import ChainEnd
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get

FOLLOWED = "followed#"  # in a re-embed pass's members once what follows its last chain was done
SENT = "sent"  # a chain's follow-on was queued (tag of its item); "claimed" until then
# A claimed follow-on not marked sent this long after: its claimer was cut off between the two (a step runs
# for at most its 30 s budget and a page), so a redelivery of the step sends it
CLAIM_STALE_MS = 5 * 60_000
CHAIN_ITEM_DAYS = 14  # the chain's item outlives any redelivery (SQS keeps a message 4 days)


class ReembedRuns:
    """One item per re-embedding (by its vector): the chains of its pass left, and those counted through."""

    def start(self, vector: str, chains: int) -> None:
        """A re-embedding for `vector` runs `chains` chains in parallel (an earlier plan's count replaced)."""
        guard(lambda: StateItem(*keys.reembed_run(vector), value=chains).save())

    def left(self, vector: str) -> int:
        """How many chains of a re-embedding's pass are still running (0: none on record)."""
        item = guard(lambda: get(*keys.reembed_run(vector)))
        return int(item.value or 0) if item is not None else 0

    def end_chain(self, vector: str, chain: str) -> ChainEnd | None:
        """One chain is through: how many are left, counting it once (a redelivery is told how many are
        left, its count made already), and whether what follows the pass's last chain (the next pass
        planned, or the change finished) was done: the last chain's redelivery does it when its first
        delivery was cut off. None: no plan is on record. One conditional update."""
        item = StateItem(*keys.reembed_run(vector))
        done = attempt(
            lambda: item.update(
                actions=[StateItem.value.add(-1), StateItem.members.add({chain})],
                condition=StateItem.pk.exists() & ~StateItem.members.contains(chain),
            )
        )
        held = item if done else guard(lambda: get(*keys.reembed_run(vector)))
        if held is None or chain not in (held.members or ()):
            return None
        return ChainEnd(int(held.value or 0), FOLLOWED in (held.members or ()))

    def mark_followed(self, vector: str) -> None:
        item = StateItem(*keys.reembed_run(vector))
        followed: list[Action] = [StateItem.members.add({FOLLOWED})]
        attempt(lambda: item.update(actions=followed, condition=StateItem.pk.exists()))

    def claim_next(self, run: str, chain: str, position: int, now: int) -> bool:
        """The right to queue a chain's next step, which starts below `position` (a chain walks its records
        newest first: positions only fall). One conditional update, won by the first delivery of a step: a
        duplicate, or a redelivery of a step whose follow-on was queued, finds it taken; a redelivery of one
        cut off between the claim and the send takes it over once that claim is stale."""
        item = StateItem(*keys.reembed_chain(run, chain))
        condition = (
            StateItem.pk.does_not_exist()
            | (StateItem.value > position)
            | (
                (StateItem.value == position)
                & (StateItem.tag != SENT)
                & (StateItem.tally < now - CLAIM_STALE_MS)
            )
        )
        claim: list[Action] = [
            StateItem.value.set(position),
            StateItem.tag.set("claimed"),
            StateItem.tally.set(now),
            StateItem.expires_at.set(now // 1000 + CHAIN_ITEM_DAYS * 86_400),
        ]
        return attempt(lambda: item.update(actions=claim, condition=condition))

    def next_sent(self, run: str, chain: str, position: int) -> None:
        """The claimed follow-on was queued."""
        item = StateItem(*keys.reembed_chain(run, chain))
        sent: list[Action] = [StateItem.tag.set(SENT)]
        attempt(lambda: item.update(actions=sent, condition=StateItem.value == position))

    def release_next(self, run: str, chain: str, position: int) -> None:
        """The follow-on could not be queued: the step's redelivery may claim it again."""
        item = StateItem(*keys.reembed_chain(run, chain))
        attempt(lambda: item.delete(condition=(StateItem.value == position) & (StateItem.tag != SENT)))
