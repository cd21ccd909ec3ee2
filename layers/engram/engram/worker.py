"""The job worker: one SQS record at a time, failures reported per record (partial batch response)."""

from __future__ import annotations

import time

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from .engine import get_engine
from .errors import Forgotten
from .jobs import (
    BackfillJob,
    DiscordJob,
    ExtractJob,
    ForgetJob,
    IndexJob,
    IndexMaintenanceJob,
    ReembedJob,
    SweepJob,
    parse_job,
)
from .observability import logger, timed
from .store import KINDS, READ_SHARDS

# A batch whose every job failed (Qdrant down, say) is reported record by record like any other, not
# raised: the jobs come back after the visibility timeout either way, and the function is not in error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


# A job is bounded (a few history pages, one re-embed page, <= 500 records); one started with less time
# left than this could be cut off by the function's timeout, so it goes back on the queue instead.
MIN_TIME_LEFT_MS = 45_000
# A reconcile or rebuild step stops taking pages after this long, and queues itself from where it stopped
# (a whole bot's pass in one job fit ~50,000 records in the 180 s timeout, then restarted from zero)
MAINTENANCE_STEP_S = 40.0
# A stamp pass not finished this long after it was queued (its job dead-lettered) is queued again
STAMP_AGAIN_MS = 3_600_000


def handle(record: SQSRecord, lambda_context=None) -> None:
    """Run one job; raising marks just this message failed, so SQS retries it and then dead-letters it."""
    job = parse_job(record.body)
    with timed(f"job-{job.kind}"):
        try:
            _run(job, lambda_context)
        except Forgotten:  # its user was forgotten after it was queued: deleted from the queue, never retried
            logger.info("dropped a job of a forgotten user", extra={"kind": job.kind})


def _maintain(engine, job: IndexMaintenanceJob) -> None:
    """A reconcile or rebuild: fanned out per bot and per part, each part a bounded step that queues its
    continuation (a failure raises, and SQS retries the step from its cursor)."""
    if job.action == "stamp":
        _stamp(engine, job)
        return
    if job.action == "spread":
        _spread(engine, job)
        return
    if job.bot is None:  # each bot its own jobs, retried on their own
        for bot in engine.keeper.bots():
            engine.queue.send(IndexMaintenanceJob(action=job.action, bot=bot))
        return
    if job.part is None:  # its facts and its messages, a part per key of each, and its points, in parallel
        parts = [job.model_copy(update={"part": "points"})] + [
            job.model_copy(update={"part": kind, "shard": shard})
            for kind in KINDS
            for shard in range(READ_SHARDS)
        ]
        engine.keeper.begin_parts(job.action, len(parts))
        engine.queue.send_many(parts)
        return
    cursor = engine.keeper.step(
        job.action, job.bot, job.part, job.cursor, budget_s=MAINTENANCE_STEP_S, shard=job.shard
    )
    logger.info(
        "index maintenance",
        extra={
            "action": job.action,
            "bot": job.bot,
            "part": job.part,
            "shard": job.shard,
            "done": cursor is None,
        },
    )
    if cursor is not None:
        engine.queue.send(job.model_copy(update={"cursor": cursor}))


def _stamp(engine, job: IndexMaintenanceJob) -> None:
    """Give an older bot's records their byScope key: one part per kind not ready yet, each a bounded step
    that queues its continuation; the kind's scoped listings use byScope once its part ends."""
    records = engine.service.records
    if job.bot is None:
        return
    if job.part is None:
        for kind in records.unscoped().get(job.bot, []):
            engine.queue.send(job.model_copy(update={"part": kind}))
        return
    if job.part == "points":
        return
    cursor = records.stamp_scopes(job.bot, job.part, job.cursor, budget_s=MAINTENANCE_STEP_S)
    logger.info("scope stamp", extra={"bot": job.bot, "part": job.part, "done": cursor is None})
    if cursor is None:
        records.mark_scopes_ready(job.bot, job.part)
    else:
        engine.queue.send(job.model_copy(update={"cursor": cursor}))


def _plain_keys(engine) -> list:
    """The kinds of state item once kept under one key per bot (store/spread.py)."""
    service = engine.service
    return [service.records.claim_keys, service.records.tail_keys, service.state.channels.spread_keys]


def _spread(engine, job: IndexMaintenanceJob) -> None:
    """Move a bot's claims, thread tails and channel states written before they were spread to their
    spread keys: a bounded step that queues the next one until none is left (a step cut off anywhere is
    run again: a move loses nothing)."""
    if job.bot is None:
        return
    deadline = time.monotonic() + MAINTENANCE_STEP_S
    done = all(kind.move_step(job.bot, budget_s=deadline - time.monotonic()) for kind in _plain_keys(engine))
    logger.info("spread pass", extra={"bot": job.bot, "done": done})
    if not done:
        engine.queue.send(job)


def queue_stamps(engine) -> int:
    """The sweep's share: queue the stamp pass of each bot whose records do not all carry their byScope
    key (an installation older than the index), and the spread pass of each bot with items still under a
    plain key (store/spread.py), each once an hour at most; returns how many were
    queued."""
    records = engine.service.records
    queued = 0
    for bot in records.unscoped():
        if records.claim_stamp(bot, again_after_ms=STAMP_AGAIN_MS):
            engine.queue.send(IndexMaintenanceJob(action="stamp", bot=bot))
            queued += 1
    for bot in records.bots():
        moving = any(kind.plain_left(bot) for kind in _plain_keys(engine))
        if moving and records.claim_spread_pass(bot, again_after_ms=STAMP_AGAIN_MS):
            engine.queue.send(IndexMaintenanceJob(action="spread", bot=bot))
            queued += 1
    return queued


def _run(job, lambda_context) -> None:
    engine = get_engine()
    if lambda_context is not None and lambda_context.get_remaining_time_in_millis() < MIN_TIME_LEFT_MS:
        engine.queue.send(job)  # at once, rather than after the visibility timeout a failure would cost
        logger.info("requeued: too little time left", extra={"kind": job.kind})
        return
    engine.refresh()
    service = engine.service
    if isinstance(job, IndexJob):
        done = service.indexer.fill_vectors(job.bot, job.ids)
        logger.info("index job", extra={"bot": job.bot, "ids": len(job.ids), "complete": done})
    elif isinstance(job, SweepJob):
        queued = service.indexer.sweep()
        resumed = service.forgetting.resume_stalled()
        stamps = queue_stamps(engine)
        logger.info("sweep", extra={"queued": queued, "forgetsResumed": resumed, "stampsQueued": stamps})
    elif isinstance(job, ForgetJob):
        from .forgetting import JOB_BUDGET_S

        outcome = service.forget_user(job.bot, job.user, at=job.at, budget_s=JOB_BUDGET_S)
        logger.info("forget job", extra={"bot": job.bot, "left": outcome["left"]})
    elif isinstance(job, ExtractJob):
        from .proxy.runtime import get_proxy

        proxy = get_proxy()
        stored = proxy.extractor().run(job)
        proxy.memory.forget_caches()
        logger.info("extraction", extra={"bot": job.bot, "stored": len(stored)})
    elif isinstance(job, DiscordJob):
        from .discord.runtime import get_discord

        get_discord().run(job)
        logger.info("discord", extra={"action": job.action})
    elif isinstance(job, ReembedJob):
        engine.embedding.reembed(job)
    elif isinstance(job, IndexMaintenanceJob):
        _maintain(engine, job)
    elif isinstance(job, BackfillJob):
        from .discord.runtime import get_discord

        get_discord().backfill(job)
