"""A re-embedding's passes: how many chains of the current pass are still running."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from ...bookkeeping import ChainEnd
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get

FOLLOWED = "followed#"  # in a re-embed pass's members once what follows its last chain was done


class ReembedRuns:
    """One item per re-embedding (by its vector): the chains of its pass left, and those counted through."""

    def start(self, vector: str, chains: int) -> None:
        """A re-embedding for `vector` runs `chains` chains in parallel (an earlier plan's count replaced)."""
        guard(lambda: StateItem(*keys.reembed_run(vector), value=chains).save())

    def left(self, vector: str) -> int:
        """How many chains of a re-embedding's pass are still running (0: none on record)."""
        item = guard(lambda: get(*keys.reembed_run(vector), consistent=False))  # a progress figure
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
