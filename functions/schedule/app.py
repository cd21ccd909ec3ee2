"""Schedule function: queues the sweep (records still waiting for vectors), the Discord catch-up (only where
Discord is set up: an application id), the LibreChat reconcile (only where LibreChat's MongoDB is), and a
snapshot of the Qdrant collection (only on a Qdrant server)."""

from engram.config import get_settings
from engram.jobs import CatchUpJob, IndexMaintenanceJob, LibreChatReconcileJob, SweepJob, build_queue
from engram.observability import instrumented

settings = get_settings()
queue = build_queue(settings)


@instrumented
def handler(event, context):
    """EventBridge schedule in ({"job": "sweep"}, "discord-catchup", "librechat-reconcile" or
    "qdrant-snapshot"), one job out."""
    if (event or {}).get("job") == "qdrant-snapshot":
        if not settings.qdrant_url:
            return {"queued": None}
        queue.send(IndexMaintenanceJob(action="snapshot"))
        return {"queued": "qdrant-snapshot"}
    if (event or {}).get("job") == "librechat-reconcile":
        proxy = settings.proxy
        if not (proxy.mongo_uri or proxy.mongo_uri_parameter):
            return {"queued": None}
        queue.send(LibreChatReconcileJob(bot=proxy.bot))
        return {"queued": "librechat-reconcile"}
    if (event or {}).get("job") == "discord-catchup":
        if not settings.discord.application_id:
            return {"queued": None}
        queue.send(CatchUpJob())
        return {"queued": "discord-catchup"}
    queue.send(SweepJob())
    return {"queued": "sweep"}
