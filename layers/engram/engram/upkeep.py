"""Index upkeep run as jobs: a reconcile or rebuild fanned out per bot and part in bounded steps, the stamp
pass that gives older records their byScope key, and the spread pass that moves state items written under a
plain key to their spread keys (both queued by the sweep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .clock import now_ms
from .follow_on import queue_once
from .jobs import IndexMaintenanceJob
from .observability import logger
from .ports import SpreadPass
from .store import KINDS, READ_SHARDS

if TYPE_CHECKING:
    from .engine_parts import Engine

# A reconcile or rebuild step stops taking pages after this long, and queues itself from where it stopped
# (a whole bot's pass in one job fit ~50,000 records in the 180 s timeout, then restarted from zero)
MAINTENANCE_STEP_S = 40.0
# A stamp pass not finished this long after it was queued (its job dead-lettered) is queued again
STAMP_AGAIN_MS = 3_600_000


def maintain(engine: Engine, job: IndexMaintenanceJob) -> None:
    """A reconcile or rebuild: fanned out per bot and per part, each part a bounded step that queues its
    continuation once (a failure raises, and SQS retries the step from its cursor)."""
    if job.action == "stamp":
        _stamp(engine, job)
        return
    if job.action == "spread":
        _spread(engine, job)
        return
    if job.action == "snapshot":
        kept = engine.settings.qdrant_snapshots_kept
        taken = engine.service.index.take_snapshot(kept)
        logger.info("index snapshot", extra={"started": taken, "kept": kept})
        return
    if job.bot is None:  # each bot its own jobs, retried on their own
        bots = [job.model_copy(update={"bot": bot}) for bot in engine.keeper.bots()]
        _fan_out(engine, job, lambda: engine.queue.send_many(bots))
        return
    if job.part is None:  # its facts and its messages, a part per key of each, and its points, in parallel
        parts = [job.model_copy(update={"part": "points"})] + [
            job.model_copy(update={"part": kind, "shard": shard})
            for kind in KINDS
            for shard in range(READ_SHARDS)
        ]

        def send_parts() -> None:
            engine.keeper.begin_parts(job.action, len(parts))
            engine.queue.send_many(parts)

        _fan_out(engine, job, send_parts)
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
        _continue(engine, job.model_copy(update={"cursor": cursor}))


def _chain(job: IndexMaintenanceJob) -> str:
    """The chain a step belongs to: its pass (action, when asked for), bot and part."""
    return f"maintain#{job.action}#{job.started}#{job.bot}#{job.part}#{job.shard}"


def _continue(engine: Engine, following: IndexMaintenanceJob) -> None:
    """Queue a step's continuation once however often the step is delivered (engram.follow_on)."""
    if not following.started:  # a job queued before steps carried their pass: as it was
        engine.queue.send(following)
        return
    step = following.model_copy(update={"link": following.link + 1})
    queue_once(engine.state.follow_ons, _chain(following), step.link, lambda: engine.queue.send(step))


def _fan_out(engine: Engine, job: IndexMaintenanceJob, send: Callable[[], None]) -> None:
    """A pass's jobs per bot, or a bot's per part, queued once however often the job is delivered."""
    if not job.started:
        send()
        return
    queue_once(engine.state.follow_ons, _chain(job), 1, send)


def _stamp(engine: Engine, job: IndexMaintenanceJob) -> None:
    """Give an older bot's records their byScope key: one part per kind not ready yet, each a bounded step
    that queues its continuation; the kind's scoped listings use byScope once its part ends."""
    records = engine.service.records
    if job.bot is None:
        return
    if job.part is None:
        kinds = [job.model_copy(update={"part": kind}) for kind in records.scopes.unscoped().get(job.bot, [])]
        _fan_out(engine, job, lambda: engine.queue.send_many(kinds))
        return
    if job.part == "points":
        return
    cursor = records.stamp_scopes(job.bot, job.part, job.cursor, budget_s=MAINTENANCE_STEP_S)
    logger.info("scope stamp", extra={"bot": job.bot, "part": job.part, "done": cursor is None})
    if cursor is None:
        records.scopes.mark_ready(job.bot, job.part)
    else:
        _continue(engine, job.model_copy(update={"cursor": cursor}))


def _plain_keys(engine: Engine) -> list[SpreadPass]:
    """The kinds of state item once kept under one key per bot (store/spread.py)."""
    return [*engine.service.records.spread_passes(), *engine.state.spread_passes()]


def _spread(engine: Engine, job: IndexMaintenanceJob) -> None:
    """Move a bot's claims, thread tails and channel states written before they were spread to their
    spread keys: a bounded step that queues the next one until none is left (a step cut off anywhere is
    run again: a move loses nothing)."""
    if job.bot is None:
        return
    deadline = time.monotonic() + MAINTENANCE_STEP_S
    done = all(kind.move_step(job.bot, budget_s=deadline - time.monotonic()) for kind in _plain_keys(engine))
    logger.info("spread pass", extra={"bot": job.bot, "done": done})
    if not done:
        _continue(engine, job)


def queue_stamps(engine: Engine) -> int:
    """The sweep's share: queue the stamp pass of each bot whose records do not all carry their byScope
    key (an installation older than the index), and the spread pass of each bot with items still under a
    plain key (store/spread.py), each once an hour at most; returns how many were
    queued."""
    records = engine.service.records
    queued = 0
    for bot in records.scopes.unscoped():
        if records.scopes.claim_stamp(bot, again_after_ms=STAMP_AGAIN_MS):
            engine.queue.send(IndexMaintenanceJob(action="stamp", bot=bot, started=now_ms()))
            queued += 1
    for bot in records.bots():
        moving = any(kind.plain_left(bot) for kind in _plain_keys(engine))
        if moving and records.scopes.claim_spread_pass(bot, again_after_ms=STAMP_AGAIN_MS):
            engine.queue.send(IndexMaintenanceJob(action="spread", bot=bot, started=now_ms()))
            queued += 1
    return queued
