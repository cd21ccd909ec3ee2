"""The job worker: one SQS record at a time, failures reported per record (partial batch response)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from .engine import Engine, get_engine
from .errors import Forgotten
from .forgetting import JOB_BUDGET_S
from .jobs import (
    DISCORD_JOBS,
    AnyJob,
    BackfillJob,
    DiscordWork,
    ExtractJob,
    ForgetJob,
    IndexJob,
    IndexMaintenanceJob,
    ReembedJob,
    SweepJob,
    parse_job,
)
from .observability import logger, timed
from .upkeep import maintain, queue_stamps

# A batch whose every job failed (Qdrant down, say) is reported record by record like any other, not
# raised: the jobs come back after the visibility timeout either way, and the function is not in error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


# A job is bounded (a few history pages, one re-embed page, <= 500 records); one started with less time
# left than this could be cut off by the function's timeout, so it goes back on the queue instead.
MIN_TIME_LEFT_MS = 45_000


def handle(record: SQSRecord, lambda_context: LambdaContext | None = None) -> None:
    """Run one job; raising marks just this message failed, so SQS retries it and then dead-letters it."""
    job = parse_job(record.body)
    with timed(f"job-{job.kind}"):
        try:
            _run(job, lambda_context)
        except Forgotten:  # its user was forgotten after it was queued: deleted from the queue, never retried
            logger.info("dropped a job of a forgotten user", extra={"kind": job.kind})


def _index(engine: Engine, job: IndexJob) -> None:
    done = engine.service.indexer.fill_vectors(job.bot, job.ids)
    logger.info("index job", extra={"bot": job.bot, "ids": len(job.ids), "complete": done})


def _sweep(engine: Engine, job: SweepJob) -> None:
    queued = engine.service.indexer.sweep()
    resumed = engine.service.forgetting.resume_stalled()
    stamps = queue_stamps(engine)
    logger.info("sweep", extra={"queued": queued, "forgetsResumed": resumed, "stampsQueued": stamps})


def _forget(engine: Engine, job: ForgetJob) -> None:
    outcome = engine.service.forget_user(job.bot, job.user, at=job.at, budget_s=JOB_BUDGET_S)
    logger.info("forget job", extra={"bot": job.bot, "left": outcome["left"]})


def _extract(engine: Engine, job: ExtractJob) -> None:
    from .proxy.runtime import get_proxy  # the proxy's settings and clients: only where it extracts

    proxy = get_proxy()
    stored = proxy.extractor().run(job)
    proxy.memory.forget_caches()
    logger.info("extraction", extra={"bot": job.bot, "stored": len(stored)})


def _discord(engine: Engine, job: DiscordWork) -> None:
    from .discord.runtime import get_discord  # Discord's client and settings: only where it runs

    get_discord().run(job)
    logger.info("discord", extra={"action": getattr(job, "action", "")})


def _backfill(engine: Engine, job: BackfillJob) -> None:
    from .discord.runtime import get_discord

    get_discord().backfill(job)


def _reembed(engine: Engine, job: ReembedJob) -> None:
    engine.embedding.reembed(job)


# Each job type's handler: a job the table does not know is a programming error, never a silent drop
HANDLERS: dict[type[BaseModel], Callable[[Engine, Any], None]] = {
    IndexJob: _index,
    SweepJob: _sweep,
    ForgetJob: _forget,
    ExtractJob: _extract,
    BackfillJob: _backfill,
    ReembedJob: _reembed,
    IndexMaintenanceJob: maintain,
    **dict.fromkeys(DISCORD_JOBS, _discord),
}


def _run(job: AnyJob, lambda_context: LambdaContext | None) -> None:
    engine = get_engine()
    if lambda_context is not None and lambda_context.get_remaining_time_in_millis() < MIN_TIME_LEFT_MS:
        engine.queue.send(job)  # at once, rather than after the visibility timeout a failure would cost
        logger.info("requeued: too little time left", extra={"kind": job.kind})
        return
    engine.refresh()
    HANDLERS[type(job)](engine, job)
