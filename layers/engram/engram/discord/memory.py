"""Discord memory rules: consent (global per user), backfill in checkpointed jobs, catch-up, forget,
status and /ask with server-scoped recall. Everything slow runs here, in the worker: `DiscordMemory`
composes the parts and runs one job."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config.discord import DiscordSettings
from ..forgetting import JOB_BUDGET_S
from ..jobs import (
    AskJob,
    BackfillJob,
    CatchUpJob,
    DiscordWork,
    ExportJob,
    FindServersJob,
    ForgetMeJob,
    ForgetMessageJob,
    GatewayJob,
    PlanBackfillJob,
    RememberJob,
    RetentionJob,
    SourceGoneJob,
)
from .ask import Ask
from .backfill import Backfill
from .catchup import CatchUp
from .core import DiscordCore
from .events import GatewayEvents
from .export import Export
from .rest import RateLimited
from .sources import Sources
from .window import Window

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Route:
    """How a type of Discord job is run: its handler, and whether a 429 sends the job back to the queue
    for retry_after (nothing of it done yet that cannot be done again) rather than failing it."""

    handle: Callable[[Any], None]
    waits_out_limits: bool = False


class DiscordMemory:
    """Consent, backfill, catch-up, forget, status and /ask for one Discord application, each a part
    built on the shared core."""

    def __init__(self, core: DiscordCore) -> None:
        self.core = core
        self.backfills = Backfill(self.core)
        self.window = Window(self.core)
        self.sources = Sources(self.core)
        self.catch_up = CatchUp(self.core, self.window, self.sources)
        self.exports = Export(self.core)
        self.events = GatewayEvents(self.core, self.window, self.sources)
        self.asks = Ask(self.core, self.catch_up, self.sources)
        self._routes: dict[type[DiscordWork], _Route] = {
            RememberJob: _Route(self.backfills.remember, waits_out_limits=True),
            ForgetMeJob: _Route(self.forget),
            AskJob: _Route(self.asks.ask),
            ExportJob: _Route(self.exports.export),
            ForgetMessageJob: _Route(self.forget_message),
            FindServersJob: _Route(self.backfills.find_servers, waits_out_limits=True),
            PlanBackfillJob: _Route(self.backfills.plan_backfill, waits_out_limits=True),
            CatchUpJob: _Route(self.catch_up_job, waits_out_limits=True),
            SourceGoneJob: _Route(self.sources.gone, waits_out_limits=True),
            RetentionJob: _Route(self.sources.retention),
            GatewayJob: _Route(self.events.apply),
        }

    @property
    def settings(self) -> DiscordSettings:
        return self.core.settings

    @property
    def bot(self) -> str:
        return self.core.bot

    def run(self, job: DiscordWork) -> None:
        """One Discord job, by its type. Where Discord asks to wait (429) before the job has done anything
        that cannot be done again, the job goes back on the queue for retry_after (never a sleep in
        Lambda); elsewhere the 429 fails the job and SQS retries it."""
        route = self._routes[type(job)]
        try:
            route.handle(job)
        except RateLimited as limited:
            if not route.waits_out_limits:
                raise
            self.core.queue.send(job, delay_s=limited.delay_s)

    def backfill(self, job: BackfillJob) -> None:
        """A link of a user's backfill of one channel (a 429 saves its cursor, then waits on the queue)."""
        try:
            self.backfills.backfill(job)
        except RateLimited as limited:
            self.core.queue.send(job, delay_s=limited.delay_s)

    def catch_up_job(self, job: CatchUpJob) -> None:
        """A tick's fan-out over the roster, a page of servers' visit, or one channel's catch-up."""
        if job.channel:
            self.catch_up_channel(job)
        elif job.guild or job.guilds:
            self.catch_up.catch_up_servers(job)
        else:
            self.catch_up.fan_out_catch_up(job)

    def catch_up_channel(self, job: CatchUpJob) -> None:
        """One channel's catch-up (or a few pages of its gap)."""
        self.core.channels.learn(job.channel, job.parent_id, job.private)
        if self.settings.disallowed(job.channel, job.parent_id):
            return  # queued before the channel was disallowed: not read
        if job.before:
            self.catch_up.catch_up_gap(job)
        else:
            self.catch_up.catch_up(
                [(job.need("guild"), job.need("channel"))],
                recheck=job.recheck,
                last_message_id=job.last_message_id,
            )

    def forget_message(self, job: ForgetMessageJob) -> None:
        """The "Forget this message" command: one stored message gone at once, if it is the user's (theirs,
        or the bot's reply attributed to them), or any of its server's for a moderator (Manage Messages).
        Works without the Message Content intent: it needs only the message id."""
        service = self.core.service
        memory = service.by_source(self.bot, job.target_id)
        if memory is None:
            said = "I don't remember that message."
        elif memory.user == job.user or (job.moderator and job.guild and memory.server == job.guild):
            service.remove(self.bot, memory.id)
            said = "Forgotten: I no longer remember that message."
        else:
            said = "That message isn't yours to forget: I keep it as someone else's."
        self.core.reply(job.token, job.issued_at, job.user, said)

    def forget(self, job: ForgetMeJob) -> None:
        """Delete everything of the user, everywhere: the same forget_user the Memory API runs."""
        deleted = self.core.service.forget_user(self.bot, job.user, budget_s=JOB_BUDGET_S)
        said = (
            f"Forgotten: {deleted['messages']} messages and {deleted['facts']} facts deleted, "
            "and your consent removed."
            if deleted["done"]
            else f"Forgetting — {deleted['left']} left. Your consent is removed, nothing of yours is shown "
            "to anyone from now on, and the rest is being deleted in the background."
        )
        self.core.reply(job.token, job.issued_at, job.user, said)
