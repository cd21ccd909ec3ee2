"""A chain of jobs queues each next step once, however often SQS delivers the step before it.

A bounded job that has more to do queues its continuation (a re-embed chain's next page, a reconcile or
rebuild part's next step, a catch-up gap's older pages). SQS delivers at least once: a step delivered
twice would queue two continuations, each of which queues its own, and the chain forks for good. So the
continuation is claimed first (one conditional update per chain: the first delivery wins, a duplicate finds
it taken), queued, then marked sent; a send that fails gives the claim back, and a claim whose claimer was
cut off before the send is taken over by the step's redelivery once it is stale."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .clock import now_ms
from .ports import FollowOnsPort

log = logging.getLogger(__name__)


def queue_once(follow_ons: FollowOnsPort, chain: str, position: int, send: Callable[[], None]) -> bool:
    """Queue (`send`) the step of `chain` at `position` unless it was queued already; positions rise along
    a chain. True when this call queued it."""
    if not follow_ons.claim(chain, position, now_ms()):
        log.info("the step at %s of %s was queued already (a duplicate delivery)", position, chain)
        return False
    try:
        send()
    except Exception:
        follow_ons.release(chain, position)
        raise
    follow_ons.sent(chain, position)
    return True
