"""Typed jobs on SQS: what a worker runs, how it is sent, and how a batch is processed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, get_args

from pydantic import BaseModel, Field, TypeAdapter

if TYPE_CHECKING:
    from .config import Settings


class IndexJob(BaseModel):
    """Write the points (words + current dense vector) of these records; idempotent by (bot, ids)."""

    kind: Literal["index"] = "index"
    bot: str
    ids: list[int] = Field(min_length=1, max_length=500)


class SweepJob(BaseModel):
    """Find records still waiting for vectors and queue index jobs for them."""

    kind: Literal["sweep"] = "sweep"


class ExtractJob(BaseModel):
    """After a LibreChat turn: extract durable facts from the exchange and store them."""

    kind: Literal["extract"] = "extract"
    bot: str
    user: str
    conversation: str
    project: str | None = None
    upstream: str | None = None
    model: str | None = None
    mode: Literal["llm", "explicit"] = "llm"
    user_text: str = Field(max_length=20_000)
    assistant_text: str = Field("", max_length=20_000)
    # When the turn happened: if its user is forgotten after that, nothing of it is stored (0: unknown,
    # which any forget of the user refuses).
    queued_at: int = 0
    # The chat's history up to this turn's words, hashed: LibreChat's regenerate sends the same again, and
    # is extracted once (on any worker); the same words later in the chat have another history.
    turn_key: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    # The message the turn's user message answers (LibreChat's {{LIBRECHAT_BODY_PARENTMESSAGEID}}): how
    # the worker finds the message LibreChat stored, which the facts keep as their source.
    parent_message: str | None = Field(None, max_length=200)
    # LibreChat's settings for the chat could not be read at the turn (a new chat not written yet, MongoDB
    # down): memory was off for it, and its facts wait until the chat is read and allows them.
    unconfirmed: bool = False
    # the user's LibreChat names (a display name, a username), kept with the facts (content)
    author: dict[str, str] | None = Field(None, max_length=2)
    attempt: int = Field(0, ge=0)  # how many times the worker looked for the chat already


class LibreChatReconcileJob(BaseModel):
    """A step of the pass that takes LibreChat's deletions and edits to the facts engram extracted
    (engram.proxy.reconcile): from `cursor` (a fact id; None: a new pass), for a bounded time."""

    kind: Literal["librechat-reconcile"] = "librechat-reconcile"
    bot: str = "librechat"
    cursor: int | None = None


class ForgetJob(BaseModel):
    """The rest of a forget that a front door (or an earlier job, or a crash) left unfinished; idempotent."""

    kind: Literal["forget"] = "forget"
    bot: str
    user: str
    at: int  # when the forget was asked for: records received after it are a new remember's and stay


class DiscordWork(BaseModel):
    """What every Discord job carries: when it was asked for (a forget since then wins)."""

    kind: Literal["discord"] = "discord"
    issued_at: int = 0

    def need(self, name: Literal["guild", "channel"]) -> str:
        """A field this job cannot run without where Discord may leave it out (a DM has no server): a job
        missing it is malformed (SQS retries it into the dead-letter queue, where it can be read)."""
        value = getattr(self, name, None)
        if not value:
            raise ValueError(f"a {getattr(self, 'action', 'discord')} job without {name}")
        return str(value)


class _Interaction(DiscordWork):
    """A slash or message command's slow part: who ran it, where, and the token its answer goes to."""

    user: str
    guild: str | None = None
    channel: str | None = None
    token: str | None = None
    interaction_id: str | None = None
    # the channel as the interaction gave it: a thread's parent and type (12: private thread), whose
    # permissions apply to an answer there, and the bot's own permissions in it (no read it cannot make)
    channel_type: int | None = None
    parent_id: str | None = None
    app_permissions: int | None = None


class RememberJob(_Interaction):
    """/memory remember: record consent and plan the user's backfill."""

    action: Literal["remember"] = "remember"


class ForgetMeJob(_Interaction):
    """/memory forget: everything of the user, everywhere."""

    action: Literal["forget"] = "forget"


class ExportJob(_Interaction):
    """/memory export: what engram keeps of the user, as a file."""

    action: Literal["export"] = "export"


class ForgetMessageJob(_Interaction):
    """ "Forget this message": one stored message, if it is the user's, or any of the server's when a
    moderator (Manage Messages) asks."""

    action: Literal["forget-message"] = "forget-message"
    target_id: str  # the Discord message id
    moderator: bool = False  # the invoker holds Manage Messages in the channel


class AskJob(_Interaction):
    """/ask: answer from the server's memories everyone in the channel may read."""

    action: Literal["ask"] = "ask"
    prompt: str = Field(min_length=1, max_length=6000)


class FindServersJob(DiscordWork):
    """A remember's later step: a page of the bot's servers, from after `after`, checked for the user."""

    action: Literal["find-servers"] = "find-servers"
    user: str
    run: str  # the backfill run it belongs to
    guild: str | None = None  # the server the remember came from (already planned)
    after: str | None = None


class PlanBackfillJob(DiscordWork):
    """A remember's later step: one server of the user's, its channels queued as backfill chains."""

    action: Literal["plan-backfill"] = "plan-backfill"
    user: str
    run: str
    guild: str


class CatchUpJob(DiscordWork):
    """Catch-up: without a server, a tick fanning out over the roster; with servers (`guilds`, or one
    `guild`), their visit; with a channel, that channel's newest page (or, with `before`, a few pages of an
    older gap)."""

    action: Literal["catchup"] = "catchup"
    guild: str | None = None
    channel: str | None = None
    # catch-up of a channel marked unreadable, tried again: readable now means unmarked
    recheck: bool = False
    # the channel's newest message id when it was listed: history answering [] then means no permission
    last_message_id: str | None = None
    parent_id: str | None = None  # a thread's channel, stored with its messages (whose permissions apply)
    private: bool = False  # the channel is a private thread
    # a gap older than the newest page (a new channel, or more than 100 new messages): paged backwards
    # from `before` down to `until` (exclusive; None: the channel's first message), a few pages a job
    before: str | None = None
    until: str | None = None
    link: int = Field(0, ge=0)  # which job of a gap's chain: each queues the next once (engram.follow_on)
    # a server's visit: how many of its quiet channels' windows it may re-read for edits and deletions
    # (its share of the tick's DISCORD_WINDOW_BUDGET; None: the whole)
    budget: int | None = Field(None, ge=0)
    guilds: list[str] = Field(default_factory=list, max_length=100)  # a page of servers


class SourceGoneJob(DiscordWork):
    """What Discord no longer has, leaving memory: a deleted channel, thread or forum post (`channel`), or a
    server the bot left (`guild`, queued by a tick once its grace is over); a few hundred memories a job,
    continuing itself."""

    action: Literal["gone"] = "gone"
    guild: str | None = None
    channel: str | None = None


class RetentionJob(DiscordWork):
    """DISCORD_RETENTION_DAYS: the oldest stored messages, past retention, deleted a page a job while the
    oldest page holds any (its work is what aged out, never the store's size)."""

    action: Literal["retention"] = "retention"


class GatewayJob(DiscordWork):
    """Events the gateway process heard (engram.discord.gateway), applied in order by the worker
    (engram.discord.events): each `{"t": event name, "d": its payload}`, a message's with its thread's
    `parent_id` and `private` where known."""

    action: Literal["gateway"] = "gateway"
    events: list[dict[str, Any]] = Field(default_factory=list, max_length=100)


# One model per action, told apart by `action` within the jobs of kind "discord"
DiscordAction = (
    RememberJob
    | ForgetMeJob
    | ExportJob
    | ForgetMessageJob
    | AskJob
    | FindServersJob
    | PlanBackfillJob
    | CatchUpJob
    | SourceGoneJob
    | RetentionJob
    | GatewayJob
)
DiscordJob = Annotated[DiscordAction, Field(discriminator="action")]
INTERACTIONS = (RememberJob, ForgetMeJob, ExportJob, ForgetMessageJob, AskJob)
DISCORD_JOBS: tuple[type[DiscordWork], ...] = get_args(DiscordAction)


class BackfillJob(BaseModel):
    """A bounded number of history pages of one channel for one user; continues itself until done.
    Idempotent by the Discord message id of every message it stores."""

    kind: Literal["discord-backfill"] = "discord-backfill"
    user: str
    guild: str
    channel: str
    run: str
    # Which link of the channel's chain this is: a duplicate delivery of a link already run is dropped.
    step: int = 0
    # When the run began (consent): a user forgotten since then has nothing of theirs stored by it.
    origin: int = 0
    last_message_id: str | None = None  # as listed: a first page of [] then means no Read Message History
    parent_id: str | None = None  # a thread's channel, stored with its messages (whose permissions apply)
    private: bool = False  # a private thread: its messages reach no one outside it (visibility)


class ReembedJob(BaseModel):
    """Re-embedding for a model. Without a bot, the plan: one chain per bot, kind (its facts, its
    messages) and key of the kind (`shard`), queued at once and run in parallel; with one, a page of that
    chain, newest first, which queues the next page (`after_id`). The chain that finishes last drops the
    other models' vectors."""

    kind: Literal["reembed"] = "reembed"
    vector: str
    phase: Literal["fact", "message"] = "fact"
    # "vectors": each record's own vector from the model; "mix" (mixing on, once every chain of the first
    # pass has ended): each point's searched meaning mixed from its window's own vectors, all there by then
    step: Literal["vectors", "mix"] = "vectors"
    bot: str | None = None
    shard: int | None = Field(None, ge=0)  # one of the kind's keys (store.keys.READ_SHARDS); None: all
    bot_index: int = 0  # a job queued before chains (a serial pass): planned again as chains
    after_id: int | None = None
    # When its pass was planned (ms): a chain's follow-ons are claimed under it, so a later pass of the same
    # model starts its chains afresh (engram.embedding: each step queues its next once)
    planned: int = 0
    # how often this page was queued again because the index or the embedder was down (0: a step's first)
    attempt: int = Field(0, ge=0)


class IndexMaintenanceJob(BaseModel):
    """Reconcile the index with the records (both ways), or rebuild it from them; or have a Qdrant server
    snapshot the collection (scheduled: `snapshot`, no bot); or stamp a bot's older
    records with their byScope key, or move its older claims, thread tails and channel states to their
    spread keys (both queued by the sweep). Without a bot, one job per bot is queued;
    without a part, one job per part of the bot (its facts and its messages, each per key of the kind, and
    for a reconcile or rebuild its points), which run in parallel; a part runs for a bounded time and
    queues itself again from its `cursor`."""

    kind: Literal["index-maintenance"] = "index-maintenance"
    action: Literal["reconcile", "rebuild", "stamp", "spread", "snapshot"]
    bot: str | None = None
    part: Literal["fact", "message", "points"] | None = None
    shard: int | None = Field(None, ge=0)  # a kind's part: one of its keys (store.keys.READ_SHARDS)
    cursor: int | None = None
    # when the pass was asked for (ms), and which step of its part's chain this is: each step queues its
    # next once however often it is delivered (engram.follow_on); 0: a job queued before steps carried them
    started: int = Field(0, ge=0)
    link: int = Field(0, ge=0)


AnyJob = (
    IndexJob
    | SweepJob
    | ExtractJob
    | ForgetJob
    | DiscordAction
    | BackfillJob
    | ReembedJob
    | IndexMaintenanceJob
    | LibreChatReconcileJob
)
# Told apart by `kind`, and Discord's jobs by `action` within their kind (SQS bodies keep their shape)
Job = Annotated[
    IndexJob
    | SweepJob
    | ExtractJob
    | ForgetJob
    | DiscordJob
    | BackfillJob
    | ReembedJob
    | IndexMaintenanceJob
    | LibreChatReconcileJob,
    Field(discriminator="kind"),
]
_JOB: TypeAdapter[AnyJob] = TypeAdapter(Job)


def parse_job(body: str) -> AnyJob:
    """A job from an SQS message body (raises pydantic.ValidationError on a malformed one)."""
    return _JOB.validate_json(body)


class JobQueue(Protocol):
    """Where jobs go."""

    def send(self, job: BaseModel, delay_s: int = 0) -> None:
        """Queue one job."""

    def send_many(self, jobs: Sequence[BaseModel]) -> None:
        """Queue many jobs at once (SQS: ten a request)."""


SQS_BATCH = 10  # the most entries one SendMessageBatch takes


class SqsQueue:
    """Jobs as SQS messages (standard queue with a DLQ behind it)."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self.queue_url = queue_url
        # one per queue, kept: it remembers the queue URLs it looked up (one GetQueueUrl per queue, not one
        # per failed job)
        self._redelivery = SqsRedelivery(client)

    def redelivery(self) -> SqsRedelivery:
        """The worker's side of this queue's client (engram.worker: back-off, dead letters)."""
        return self._redelivery

    def send(self, job: BaseModel, delay_s: int = 0) -> None:
        """Send one job; delays beyond SQS's 15 minutes are capped."""
        self._client.send_message(
            QueueUrl=self.queue_url, MessageBody=job.model_dump_json(), DelaySeconds=min(max(delay_s, 0), 900)
        )

    def send_many(self, jobs: Sequence[BaseModel]) -> None:
        """SendMessageBatch, ten jobs a request (SQS's most); an entry SQS failed is sent again on its own,
        so a fan-out over thousands of servers is a hundredth of the requests and loses none."""
        for start in range(0, len(jobs), SQS_BATCH):
            chunk = jobs[start : start + SQS_BATCH]
            answer = self._client.send_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "MessageBody": j.model_dump_json()} for i, j in enumerate(chunk)],
            )
            for failed in answer.get("Failed") or []:
                self.send(chunk[int(failed["Id"])])


def retry_after_s(job_class_name: str, receives: int) -> int:
    """How long a failed job waits before SQS hands it out again: seconds where someone waits for it (5,
    10, 20: three tries within a minute, then the dead-letter queue), minutes for bulk work (30 s doubling
    to 15 min: a dependency down has time to come back; five tries in ~8 minutes, not the 90 the queue's
    visibility timeout alone would take)."""
    n = max(1, receives)
    if job_class_name == "interactive":
        return min(60, 5 << min(n - 1, 10))
    return min(900, 30 << min(n - 1, 10))


class SqsRedelivery:
    """What the worker may do with a message it was handed: hold it back for a while before SQS hands it out
    again (ChangeMessageVisibility: a retry's back-off), or send it to its queue's dead-letter queue at
    once (a body that is no job at all would fail every try). Queues are known by the ARN on the record."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._urls: dict[str, str] = {}
        self._dead_letters: dict[str, str] = {}

    def _url(self, arn: str) -> str:
        if arn not in self._urls:
            _, _, _, _, account, name = arn.split(":", 5)
            answer = self._client.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)
            self._urls[arn] = answer["QueueUrl"]
        return self._urls[arn]

    def hold(self, arn: str, receipt: str, seconds: int) -> None:
        """Keep a received message out of sight for `seconds` (from now)."""
        self._client.change_message_visibility(
            QueueUrl=self._url(arn), ReceiptHandle=receipt, VisibilityTimeout=seconds
        )

    def dead_letter(self, arn: str, body: str, reason: str) -> None:
        """Send a message's body to the dead-letter queue its queue's redrive policy names, with why."""
        if arn not in self._dead_letters:
            attributes = self._client.get_queue_attributes(
                QueueUrl=self._url(arn), AttributeNames=["RedrivePolicy"]
            )["Attributes"]
            self._dead_letters[arn] = self._url(
                json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"]
            )
        self._client.send_message(
            QueueUrl=self._dead_letters[arn],
            MessageBody=body,
            MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:1000]}},
        )


class DroppingQueue:
    """No queue configured: jobs are dropped, and the sweep finds their records later."""

    def __init__(self) -> None:
        self.dropped: list[str] = []

    def send(self, job: BaseModel, delay_s: int = 0) -> None:
        """Remember what was dropped (for status and tests)."""
        self.dropped.append(json.dumps(job.model_dump()))

    def send_many(self, jobs: Sequence[BaseModel]) -> None:
        for job in jobs:
            self.send(job)


# Each class of job has its own queue, and so its own pollers and concurrency on AWS (template.yaml): an
# /ask never waits behind a backfill, an extraction behind a re-embed, a turn's vectors behind a rebuild.
QUEUE_OF_CLASS = {
    "interactive": "InteractiveQueue",  # someone waits: /ask, remember, forget, export; a forget's rest
    "ingest": "JobsQueue",  # Discord backfill and catch-up (and anything unclassed)
    "extract": "ExtractQueue",  # facts from a LibreChat turn (the extraction model)
    "index": "IndexQueue",  # vectors: index jobs, the sweep, re-embedding (the embedder, Qdrant)
    "maintenance": "MaintenanceQueue",  # reconcile and rebuild steps
}


def is_interactive(job: BaseModel) -> bool:
    """Whether someone is waiting on this job's answer (it goes on the interactive queue)."""
    return isinstance(job, INTERACTIONS)


def job_class(job: BaseModel) -> str:
    """Which queue a job belongs on (a key of QUEUE_OF_CLASS)."""
    if is_interactive(job) or isinstance(job, ForgetJob):
        return "interactive"
    if isinstance(job, ExtractJob):
        return "extract"
    if isinstance(job, IndexJob | SweepJob | ReembedJob):
        return "index"
    if isinstance(job, IndexMaintenanceJob | LibreChatReconcileJob):
        return "maintenance"
    return "ingest"


class RoutedQueue:
    """Each job on its class's queue (`routes`), the classes without one on the jobs queue."""

    def __init__(self, jobs: JobQueue, routes: dict[str, JobQueue]):
        self.jobs = jobs
        self.routes = routes

    def _queue(self, job: BaseModel) -> JobQueue:
        return self.routes.get(job_class(job), self.jobs)

    def redelivery(self) -> SqsRedelivery | None:
        """The worker's side of the queues' client, when they are SQS's."""
        return self.jobs.redelivery() if isinstance(self.jobs, SqsQueue) else None

    def send(self, job: BaseModel, delay_s: int = 0) -> None:
        """Queue one job on the queue its class belongs to."""
        self._queue(job).send(job, delay_s)

    def send_many(self, jobs: Sequence[BaseModel]) -> None:
        by_queue: dict[int, tuple[JobQueue, list[BaseModel]]] = {}
        for job in jobs:
            queue = self._queue(job)
            by_queue.setdefault(id(queue), (queue, []))[1].append(job)
        for queue, batch in by_queue.values():
            queue.send_many(batch)


def redelivery_of(queue: JobQueue) -> SqsRedelivery | None:
    """The worker's side of a queue: SQS's, or None (no queue: nothing to hold back or dead-letter)."""
    if isinstance(queue, SqsQueue | RoutedQueue):
        return queue.redelivery()
    return None


def build_queue(settings: Settings, sqs_client: Any = None) -> JobQueue:
    """SQS when a queue URL is configured (each class of job on its own queue where one is configured),
    else a queue that drops (the sweep recovers)."""
    if not settings.jobs_queue_url:
        return DroppingQueue()
    if sqs_client is None:
        import boto3

        sqs_client = boto3.client("sqs", region_name=settings.aws_region, endpoint_url=settings.sqs_endpoint)
    jobs = SqsQueue(sqs_client, settings.jobs_queue_url)
    urls = {
        "interactive": settings.interactive_queue_url,
        "extract": settings.extract_queue_url,
        "index": settings.index_queue_url,
        "maintenance": settings.maintenance_queue_url,
    }
    routes: dict[str, JobQueue] = {c: SqsQueue(sqs_client, url) for c, url in urls.items() if url}
    return RoutedQueue(jobs, routes) if routes else jobs
