"""Schedule function: every five minutes, queue a sweep for records still waiting for vectors."""

from engram.engine import get_engine
from engram.jobs import SweepJob


def handler(event, context):
    """EventBridge schedule in, one sweep job out."""
    get_engine().queue.send(SweepJob())
    return {"queued": "sweep"}
