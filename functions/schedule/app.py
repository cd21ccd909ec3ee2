"""Schedule function: queues the sweep (records still waiting for vectors) and the Discord catch-up
(only where Discord is set up: an application id)."""

from engram.config import get_settings
from engram.jobs import CatchUpJob, SweepJob, build_queue
from engram.observability import instrumented

settings = get_settings()
queue = build_queue(settings)


@instrumented
def handler(event, context):
    """EventBridge schedule in ({"job": "sweep"} or {"job": "discord-catchup"}), one job out."""
    if (event or {}).get("job") == "discord-catchup":
        if not settings.discord.application_id:
            return {"queued": None}
        queue.send(CatchUpJob())
        return {"queued": "discord-catchup"}
    queue.send(SweepJob())
    return {"queued": "sweep"}
