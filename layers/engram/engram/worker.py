"""The job worker: one SQS record at a time, failures reported per record (partial batch response)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ValidationError

from .embedding import STEP_S
from .engine_parts import Engine
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
    LibreChatReconcileJob,
    ReembedJob,
    SweepJob,
    job_class,
    parse_job,
    redelivery_of,
    retry_after_s,
)
from .observability import logger, timed
from .upkeep import MAINTENANCE_STEP_S, maintain, queue_stamps

if TYPE_CHECKING:  # handed by the wiring (functions/worker/app.py, the local stack), never looked up here
    from .discord.memory import DiscordMemory
    from .proxy.runtime import Proxy

# A batch whose every job failed (Qdrant down, say) is reported record by record like any other, not
# raised: the jobs come back after the visibility timeout either way, and the function is not in error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


# A job is bounded (a few history pages, one re-embed page, <= 500 records); one started with less time
# left than its kind needs could be cut off by the function's timeout (and the rest of its batch would wait
# out the visibility timeout), so it goes back on the queue instead. A stepped job's need is its step's
# budget, the page it may start just before that budget ends, and room to queue its next step.
LONGEST_PAGE_S = 20  # a re-embed page took up to ~17 s at 50,000 records; a rebuild page less
MIN_TIME_LEFT_MS = 45_000
TIME_NEEDED_MS: dict[type[BaseModel], int] = {
    ReembedJob: int((STEP_S + LONGEST_PAGE_S + 10) * 1000),
    IndexMaintenanceJob: int((MAINTENANCE_STEP_S + LONGEST_PAGE_S + 10) * 1000),
    ForgetJob: int((JOB_BUDGET_S + LONGEST_PAGE_S + 10) * 1000),
}


def time_needed_ms(job: BaseModel) -> int:
    """How much of the function's time a job must have left to be started."""
    return TIME_NEEDED_MS.get(type(job), MIN_TIME_LEFT_MS)


def _index(worker: Worker, job: IndexJob) -> None:
    done = worker.engine.service.indexer.fill_vectors(job.bot, job.ids)
    logger.info("index job", extra={"bot": job.bot, "ids": len(job.ids), "complete": done})


def _sweep(worker: Worker, job: SweepJob) -> None:
    engine = worker.engine
    queued = engine.service.indexer.sweep()
    resumed = engine.service.forgetting.resume_stalled()
    stamps = queue_stamps(engine)
    # memories whose time ran out (reads hide them already): a bounded page per bot of what came due
    expired = engine.service.expire_all()
    logger.info(
        "sweep",
        extra={"queued": queued, "forgetsResumed": resumed, "stampsQueued": stamps, "expired": expired},
    )


def _forget(worker: Worker, job: ForgetJob) -> None:
    outcome = worker.engine.service.forget_user(job.bot, job.user, at=job.at, budget_s=JOB_BUDGET_S)
    logger.info("forget job", extra={"bot": job.bot, "left": outcome["left"]})


def _extract(worker: Worker, job: ExtractJob) -> None:
    proxy = worker.proxy()
    stored = proxy.extractor().run(job)
    proxy.memory.forget_caches()
    logger.info("extraction", extra={"bot": job.bot, "stored": len(stored)})


def _librechat_reconcile(worker: Worker, job: LibreChatReconcileJob) -> None:
    worker.proxy().reconcile(job)


def _discord(worker: Worker, job: DiscordWork) -> None:
    worker.discord().run(job)
    logger.info("discord", extra={"action": getattr(job, "action", "")})


def _backfill(worker: Worker, job: BackfillJob) -> None:
    worker.discord().backfill(job)


def _reembed(worker: Worker, job: ReembedJob) -> None:
    worker.engine.embedding.reembed(job)


# Each job type's handler: a job the table does not know is a programming error, never a silent drop
def _maintain(worker: Worker, job: IndexMaintenanceJob) -> None:
    maintain(worker.engine, job)


HANDLERS: dict[type[BaseModel], Callable[[Worker, Any], None]] = {
    IndexJob: _index,
    SweepJob: _sweep,
    ForgetJob: _forget,
    ExtractJob: _extract,
    LibreChatReconcileJob: _librechat_reconcile,
    BackfillJob: _backfill,
    ReembedJob: _reembed,
    IndexMaintenanceJob: _maintain,
    **dict.fromkeys(DISCORD_JOBS, _discord),
}


class Worker:
    """The SQS door: runs each job on the parts the process's wiring hands it. The proxy's and Discord's parts
    are built only where a job needs them (an extraction, a Discord job): most jobs never touch them."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        proxy: Callable[[], Proxy] | None = None,
        discord: Callable[[], DiscordMemory] | None = None,
    ) -> None:
        self._engine = engine
        self._proxy = proxy
        self._discord = discord

    @property
    def engine(self) -> Engine:
        return self._engine()

    def proxy(self) -> Proxy:
        if self._proxy is None:
            raise RuntimeError("this worker was wired without the proxy's parts: it cannot run an extraction")
        return self._proxy()

    def discord(self) -> DiscordMemory:
        if self._discord is None:
            raise RuntimeError("this worker was wired without Discord's parts: it cannot run a Discord job")
        return self._discord()

    def handle(self, record: SQSRecord, lambda_context: LambdaContext | None = None) -> None:
        """Run one job; raising marks just this message failed, so SQS retries it (after a back-off that fits
        the job: `retry_after_s`) and then dead-letters it. A body that is no job goes to the dead-letter
        queue at once: every try would fail the same way."""
        try:
            job = parse_job(record.body)
        except ValidationError as exc:
            redelivery = redelivery_of(self.engine.queue)
            if redelivery is None:
                raise
            reason = f"not a job: {exc.errors()[0]['msg'] if exc.errors() else exc}"
            try:
                redelivery.dead_letter(record.event_source_arn, record.body, reason)
            except Exception:  # the queue's redrive takes it there after its tries instead
                logger.exception("could not dead-letter a message that is no job")
                raise exc from None
            logger.error("a message that is no job went to the dead-letter queue", extra={"reason": reason})
            return
        with timed(f"job-{job.kind}"):
            try:
                self.run(job, lambda_context)
            except (
                Forgotten
            ):  # its user was forgotten after it was queued: deleted from the queue, never retried
                logger.info("dropped a job of a forgotten user", extra={"kind": job.kind})
            except Exception:
                self._back_off(record, job)
                raise

    def _back_off(self, record: SQSRecord, job: AnyJob) -> None:
        """Hold a failed job back for as long as its class waits between tries (never masking its error)."""
        redelivery = redelivery_of(self.engine.queue)
        if redelivery is None:
            return
        receives = int(record.attributes.approximate_receive_count or 1)
        seconds = retry_after_s(job_class(job), receives)
        try:
            redelivery.hold(record.event_source_arn, record.receipt_handle, seconds)
        except Exception:  # the queue's own visibility timeout brings it back instead
            logger.exception("could not hold a failed job back", extra={"kind": job.kind})

    def run(self, job: AnyJob, lambda_context: LambdaContext | None = None) -> None:
        """One job by its type's handler, unless too little time is left to finish it."""
        engine = self.engine
        if lambda_context is not None and lambda_context.get_remaining_time_in_millis() < time_needed_ms(job):
            engine.queue.send(job)  # at once, rather than after the visibility timeout a failure would cost
            logger.info("requeued: too little time left", extra={"kind": job.kind})
            return
        engine.refresh()
        HANDLERS[type(job)](self, job)
