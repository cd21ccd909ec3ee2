"""Schedule function: every five minutes, queue a sweep for records still waiting for vectors."""

from engram.config import get_settings
from engram.jobs import SweepJob, build_queue

queue = build_queue(get_settings())


def handler(event, context):
    """EventBridge schedule in, one sweep job out (no index or embedder needed here)."""
    queue.send(SweepJob())
    return {"queued": "sweep"}
