"""Discord memory rules: consent (global per user), backfill in checkpointed jobs, catch-up, forget,
status and /ask with server-scoped recall. Everything slow runs here, in the worker: `DiscordMemory`
composes the parts and runs one job."""

from __future__ import annotations

import logging

import httpx

from ..forgetting import JOB_BUDGET_S
from ..jobs import BackfillJob, DiscordJob, JobQueue
from ..ports import StatePort
from ..service import MemoryService
from .ask import Ask
from .attachments import Interpreter
from .backfill import Backfill
from .catchup import CatchUp
from .core import DiscordCore
from .export import Export
from .rest import DiscordClient, RateLimited
from .settings import DiscordSettings
from .window import Window

log = logging.getLogger(__name__)


class DiscordMemory:
    """Consent, backfill, catch-up, forget, status and /ask for one Discord application, each a part
    built on the shared core."""

    def __init__(
        self,
        settings: DiscordSettings,
        service: MemoryService,
        queue: JobQueue,
        client: DiscordClient,
        state: StatePort,
        ollama: httpx.Client | None = None,
        interpreter: Interpreter | None = None,
    ) -> None:
        self.core = DiscordCore(
            settings, service, queue, client, state, ollama=ollama, interpreter=interpreter
        )
        self.backfills = Backfill(self.core)
        self.window = Window(self.core)
        self.catch_up = CatchUp(self.core, self.window)
        self.exports = Export(self.core)
        self.asks = Ask(self.core, self.catch_up)

    @property
    def settings(self) -> DiscordSettings:
        return self.core.settings

    @property
    def bot(self) -> str:
        return self.core.bot

    def run(self, job: DiscordJob) -> None:
        """One interaction's slow part."""
        if job.action == "remember":
            self.backfills.remember(job)
        elif job.action == "forget":
            self.forget(job)
        elif job.action == "ask":
            self.asks.ask(job)
        elif job.action == "export":
            self.exports.export(job)
        elif job.action == "forget-message":
            self.forget_message(job)
        elif job.action == "find-servers":
            self.backfills.find_servers(job)
        elif job.action == "plan-backfill":
            self.backfills.plan_backfill(job)
        elif job.action == "catchup" and job.channel:
            self.catch_up_channel(job)
        elif job.action == "catchup" and (job.guild or job.guilds):
            self.catch_up.catch_up_servers(job)
        elif job.action == "catchup":
            self.catch_up.fan_out_catch_up(job)

    def backfill(self, job: BackfillJob) -> None:
        """A link of a user's backfill of one channel."""
        self.backfills.backfill(job)

    def catch_up_channel(self, job: DiscordJob) -> None:
        """One channel's catch-up (or a few pages of its gap)."""
        if job.parent_id and job.channel:
            self.core.thread_parents[job.channel] = job.parent_id
        if job.private and job.channel:
            self.core.private_threads.add(job.channel)
        try:
            if job.before:
                self.catch_up.catch_up_gap(job)
            else:
                self.catch_up.catch_up(
                    [(job.need("guild"), job.need("channel"))],
                    recheck=job.recheck,
                    last_message_id=job.last_message_id,
                )
        except RateLimited as limited:  # delay this channel's job on the queue; never sleep in Lambda
            self.core.queue.send(job, delay_s=int(limited.retry_after) + 1)

    def forget_message(self, job: DiscordJob) -> None:
        """The "Forget this message" command: one stored message gone at once, if it is the user's (theirs,
        or the bot's reply attributed to them). Works without the Message Content intent: it needs only
        the message id."""
        service = self.core.service
        memory = service.by_source(self.bot, job.need("target_id"))
        if memory is None:
            said = "I don't remember that message."
        elif memory.user != job.user:
            said = "That message isn't yours to forget: I keep it as someone else's."
        else:
            service.remove(self.bot, memory.id)
            said = "Forgotten: I no longer remember that message."
        self.core.reply(job.token, job.issued_at, job.user, said)

    def forget(self, job: DiscordJob) -> None:
        """Delete everything of the user, everywhere: the same forget_user the Memory API runs."""
        deleted = self.core.service.forget_user(self.bot, job.need("user"), budget_s=JOB_BUDGET_S)
        said = (
            f"Forgotten: {deleted['messages']} messages and {deleted['facts']} facts deleted, "
            "and your consent removed."
            if deleted["done"]
            else f"Forgetting — {deleted['left']} left. Your consent is removed, nothing of yours is shown "
            "to anyone from now on, and the rest is being deleted in the background."
        )
        self.core.reply(job.token, job.issued_at, job.user, said)
