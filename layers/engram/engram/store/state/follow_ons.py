"""Follow-on steps queued once: a chain of jobs (a re-embed chain's pages, a reconcile or rebuild part's
steps, a catch-up gap's pages) has each step queue the next; SQS delivers at least once, so a step may run
twice, and without a claim each delivery queues its own next step: the chain forks, and every duplicate of
either fork forks it again."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from .. import keys
from ..dynamo import attempt
from ..models import StateItem

SENT = "sent"  # the claimed follow-on was queued (tag of its item); "claimed" until then
# A claimed follow-on not marked sent this long after: its claimer was cut off between the two (a step runs
# for at most its budget and a page), so a redelivery of the step sends it
CLAIM_STALE_MS = 5 * 60_000
CHAIN_ITEM_DAYS = 14  # the chain's item outlives any redelivery (SQS keeps a message 4 days at most)


class FollowOns:
    """One item per chain: the position of the follow-on it last claimed, and whether that was sent."""

    def claim(self, chain: str, position: int, now: int) -> bool:
        """The right to queue a chain's step at `position` (positions only rise along a chain). One
        conditional update, won by the first delivery of the step before it: a duplicate, or a redelivery of
        a step whose follow-on was queued, finds it taken; a redelivery of one cut off between the claim and
        the send takes it over once that claim is stale."""
        item = StateItem(*keys.follow_on(chain))
        condition = (
            StateItem.pk.does_not_exist()
            | (StateItem.value < position)
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

    def sent(self, chain: str, position: int) -> None:
        """The claimed follow-on was queued."""
        item = StateItem(*keys.follow_on(chain))
        sent: list[Action] = [StateItem.tag.set(SENT)]
        attempt(lambda: item.update(actions=sent, condition=StateItem.value == position))

    def release(self, chain: str, position: int) -> None:
        """The follow-on could not be queued: the step's redelivery may claim it again."""
        item = StateItem(*keys.follow_on(chain))
        attempt(lambda: item.delete(condition=(StateItem.value == position) & (StateItem.tag != SENT)))
