"""Opt-in and backfill: consent, then a user's history in bounded, checkpointed jobs per channel."""

from __future__ import annotations

import logging
import uuid

from ..bookkeeping import Cursor, RunCount
from ..clock import now_ms
from ..jobs import BackfillJob, FindServersJob, PlanBackfillJob, RememberJob
from .core import TOKEN_LIFETIME_MS, DiscordCore
from .intents import INTENT_OFF, has_content_intent
from .objects import Message, position
from .rest import DiscordError, RateLimited
from .window import timestamp_ms

log = logging.getLogger(__name__)


class Backfill:
    """remember and backfill: consent, then a user's history in bounded, checkpointed jobs per channel."""

    def __init__(self, core: DiscordCore) -> None:
        self.core = core
        self.bot, self.settings = core.bot, core.settings
        self.state, self.service = core.state, core.service

    def remember(self, job: RememberJob) -> None:
        """Record consent (global per user) and start the backfill: the server the command came from at
        once (the interaction says the user is in it: no membership request), the bot's other servers in
        bounded find-servers jobs (a page of servers each, checked for the user's membership), each server
        of theirs in a plan-backfill job that queues its channels. A remember asked for before the user's
        last forget (a retry, a DLQ redrive) is dropped: only a new /memory remember opts them back in."""
        user = job.user
        here = [job.guild] if job.guild else []
        if self._cooling_down(job):
            return
        try:  # a 429 here sends the job back to the queue (DiscordMemory.run): nothing is written yet
            channels, skipped = self._channels_of(here)
            intent = self.check_content_intent()
        except DiscordError as exc:  # answered now, not after the queue's retries outlive the token
            log.warning("remember could not list the channels: %s", exc)
            self.core.reply(
                job.token,
                job.issued_at,
                user,
                "I couldn't reach Discord to plan your backfill "
                f"(it answered {exc.status}), so you're not opted in yet. "
                "Try /memory remember again in a minute.",
            )
            return
        if self.service.refused(self.bot, {user}, job.issued_at):
            log.info("dropping a remember asked for before the user was forgotten")
            return
        consented_at = now_ms()
        self.state.consents.give(self.bot, user, consented_at, guilds=here)
        run = uuid.uuid4().hex[:12]
        self.state.backfills.start(self.bot, user, run, len(channels), job.issued_at, planning=1)
        self._keep_token(user, run, job.token, job.issued_at)
        if self.service.refused(self.bot, {user}, job.issued_at):  # a forget landed meanwhile: it wins
            self.state.forget_user(self.bot, user)
            log.info("a remember undone: the user was forgotten while it ran")
            return
        self._queue_backfills(user, run, consented_at, channels)
        self.core.queue.send(FindServersJob(user=user, guild=job.guild, run=run, issued_at=consented_at))
        warning = "" if intent is not False else " " + INTENT_OFF
        unread = (
            f" ({skipped} more I may not read are skipped; /memory status counts them)" if skipped else ""
        )
        found = f"{len(channels)} channels here, and from " if here else ""
        self.core.reply(
            job.token,
            job.issued_at,
            user,
            f"You're opted in. Backfilling your history from {found}your other servers as I find them…"
            f"{unread}{warning}",
        )

    def _cooling_down(self, job: RememberJob) -> bool:
        """A remember while the user's last one is younger than DISCORD_REMEMBER_COOLDOWN_S is answered, not
        run: every run lists every server's channels again."""
        current = self.state.backfills.get(self.bot, job.user)
        if current is None:
            return False
        wait_ms = self.settings.remember_cooldown_s * 1000 - (now_ms() - current.issued_at)
        if wait_ms <= 0 or not self.core.consented(job.user):
            return False
        self.core.reply(
            job.token,
            job.issued_at,
            job.user,
            f"You're already opted in and your backfill started moments ago ({current.left} still to read); "
            f"/memory remember can run again in {max(1, wait_ms // 60_000)} min. /memory status shows how "
            "it goes.",
        )
        return True

    def find_servers(self, job: FindServersJob) -> None:
        """A page of the bot's servers (DISCORD_GUILDS_PER_JOB, one request) checked for the user (one Get
        Guild Member each): each server of theirs gets a plan-backfill job, and the next page a job of its
        own. Bounded by the page, however many servers the bot is in."""
        user, run = job.user, job.run
        if not self._running(user, run):
            return
        limit = self.settings.guilds_per_job
        # a 429 sends the job back to the queue (DiscordMemory.run): nothing is written before these reads
        page = self.core.client.guilds_page(job.after or "0", limit)
        theirs = self.core.member_guilds([g.id for g in page if g.id != job.guild], user)
        more = len(page) == limit
        nxt = [job.model_copy(update={"after": page[-1].id})] if more else []
        self.state.consents.add_guilds(self.bot, user, theirs)
        counted = self.state.backfills.plan(
            self.bot, user, run, f"servers#{job.after or 0}", 0, len(theirs) + len(nxt)
        )
        if not self._running(user, run):  # forgotten meanwhile: nothing more is queued
            return
        # queued after the run counts them (a redelivery, once counted, queues them again: each is
        # idempotent), so the run cannot look finished while they wait
        plans = [PlanBackfillJob(user=user, guild=g, run=run, issued_at=job.issued_at) for g in theirs]
        self.core.queue.send_many([*plans, *nxt])
        self._finished(user, run, counted)

    def plan_backfill(self, job: PlanBackfillJob) -> None:
        """One server of the user's: its readable channels (archived threads too), each a backfill chain."""
        user, run, guild = job.user, job.run, job.guild
        if not self._running(user, run):
            return
        try:
            channels, _ = self._channels_of([guild])  # a 429 here: back to the queue, nothing written yet
        except DiscordError as exc:
            if exc.status not in (403, 404):
                raise
            # the bot left the server since the remember began: nothing of it to read, and the run counts
            # it (a job raising here would be retried into the dead-letter queue and the run never end)
            log.info("server %s is gone for the bot (%s): nothing to back fill", guild, exc.status)
            channels = []
        counted = self.state.backfills.plan(self.bot, user, run, f"server#{guild}", len(channels), 0)
        if not self._running(user, run):
            return
        self._queue_backfills(user, run, job.issued_at, channels)
        self._finished(user, run, counted)

    def _channels_of(self, guilds: list[str]) -> tuple[list[tuple[str, str]], int]:
        """The channels of these servers a backfill reads (those Discord refused within the hour left out),
        and how many were left out."""
        fresh, due, skipped = self.core.split_unreadable(self.core.readable_channels(guilds, archived=True))
        return fresh + due, skipped

    def _running(self, user: str, run: str) -> bool:
        """Whether `run` is still the user's backfill (not replaced by a newer remember, not forgotten)."""
        current = self.state.backfills.get(self.bot, user)
        return current is not None and current.run == run and self.core.consented(user)

    def _queue_backfills(self, user: str, run: str, origin: int, channels: list[tuple[str, str]]) -> None:
        self.core.queue.send_many(
            [
                BackfillJob(
                    user=user,
                    run=run,
                    origin=origin,
                    **self.core.channels.carried(guild, channel),
                )
                for guild, channel in channels
            ]
        )

    def check_content_intent(self) -> bool | None:
        """Ask Discord whether the app has the Message Content intent (its application flags), and note
        it for /memory status; None when Discord would not say."""
        try:
            on = has_content_intent(self.core.client.application())
        except DiscordError as exc:
            log.warning("could not read the application's flags: %s", exc)
            return None
        self.state.channels.note_content_intent(self.bot, on, "flags", now_ms())
        return on

    def _keep_token(self, user: str, run: str, token: str | None, issued_at: int) -> None:
        """Keep the interaction token for the backfill's last word only while Discord honours it (15
        minutes): its own item, with a TTL, never in the long-lived backfill record."""
        if token:
            expires = (issued_at or now_ms()) // 1000 + TOKEN_LIFETIME_MS // 1000
            self.state.backfills.keep_token(self.bot, user, run, token, expires)

    def _token(self, user: str, run: str) -> str | None:
        """The run's interaction token if it is still valid (DynamoDB's TTL deletes late, dynalite never)."""
        return self.state.backfills.token(self.bot, user, run, now_ms() // 1000)

    def backfill(self, job: BackfillJob) -> None:
        """A few pages of one channel, older and older, checkpointed; continues itself until done.
        SQS may deliver a job twice: a link of the chain already run is dropped, and a channel is
        counted done once per run. A link of a run that is no longer the user's (a forget deleted it, or a
        newer remember replaced it) is dropped: without that, a forget's deleted cursor would start the
        channel over from its newest page."""
        if not self._running(job.user, job.run):
            log.info("dropping a backfill link of a run that is over (forgotten or replaced)")
            return
        self.core.channels.learn(job.channel, job.parent_id, job.private)
        cursor = self.state.cursors.get(self.bot, job.user, job.channel) or Cursor()
        if cursor.run == job.run and job.step < (cursor.step or 0):
            self._ran_already(job, cursor)
            return
        if cursor.run != job.run and cursor.done:
            # an earlier run of theirs read this channel to its start, and the catch-up has stored what they
            # wrote since (a forget deletes cursors: one that is here means consent stood): nothing to read
            self._move_on(job, cursor.moved(run=job.run, step=job.step + 1, stored=0), 0)
            return
        read, stored = self._read_pages(job, cursor.moved(run=job.run))
        self._move_on(job, read.moved(step=job.step + 1), stored)

    def _read_pages(self, job: BackfillJob, cursor: Cursor) -> tuple[Cursor, int]:
        """Up to pages_per_job pages of the channel, older and older from the cursor: where it then stands
        and how many messages were stored. When Discord asks to wait, the cursor is saved and the count made
        before RateLimited goes up (the job waits on the queue: DiscordMemory.backfill)."""
        stored = 0
        for _ in range(self.settings.pages_per_job if not cursor.done else 0):
            try:
                page = self.core.read_page(job.channel, before=cursor.before)
            except RateLimited:  # where it stands saved and counted; the job waits on the queue
                self.state.cursors.save(self.bot, job.user, job.channel, cursor)
                self._count(job, stored, finished=False)
                raise
            if page is None or self._no_history(job, cursor, page):  # that channel is done
                return cursor.moved(done=True, before=None), stored  # a done cursor keeps no message id
            if page:
                self._remember_newest(job.channel, page[0].id)
            stored += self.core.store_messages(
                job.guild, job.channel, page, {job.user}, origin=job.origin or 0, backfill=True
            )
            if len(page) < 100 or self._past_retention(page[-1]):
                return cursor.moved(done=True, before=None), stored  # a done cursor keeps no message id
            cursor = cursor.moved(before=page[-1].id)
        return cursor, stored

    def _past_retention(self, oldest: Message) -> bool:
        """Whether a page reached messages past DISCORD_RETENTION_DAYS: nothing older is read."""
        cutoff = self.settings.retention_cutoff_ms(now_ms())
        return cutoff is not None and (timestamp_ms(oldest.timestamp) or 0) < cutoff

    def _no_history(self, job: BackfillJob, cursor: Cursor, page: list[Message]) -> bool:
        """200 [] for the newest page of a channel that has messages: Read Message History is missing (the
        channel is marked unreadable, skipped for a while). A page Discord refused (None) was marked so by
        read_page already."""
        if page or cursor.before is not None or not job.last_message_id:
            return False
        self.core.unreadable_now(
            job.channel, "no Read Message History (an empty history of a channel with messages)"
        )
        return True

    def _ran_already(self, job: BackfillJob, cursor: Cursor) -> None:
        """A link the cursor says ran, delivered again: a duplicate (dropped), or a redelivery of a link cut
        off after it saved the cursor."""
        if job.step != (cursor.step or 0) - 1:
            log.info("dropping a duplicate backfill job (%s step %d)", job.channel, job.step)
            return
        # the link just before the cursor again: its earlier delivery saved the cursor and may have been cut
        # off after it; a plain duplicate of it adds nothing
        if cursor.done:
            # the channel's last link: it may have lost its count or the final message (counting is once
            # per channel)
            self._count(job, cursor.stored or 0, finished=True)
        elif not cursor.queued:
            # it counted, and was cut off before its next link was queued (the channel would stop there).
            # Once queued, the cursor says so: a duplicate queueing another would start a second chain
            # beside the first, doubling with every duplicate of its own links
            self._queue_next(job, cursor)

    def _move_on(self, job: BackfillJob, cursor: Cursor, stored: int) -> None:
        """Save where the channel's backfill stands and queue its next page, or count it finished."""
        if self.core.service.refused(self.bot, {job.user}, job.origin or 0):
            return  # forgotten while this page was read: no cursor naming them is written back
        # when done: what the last link stored, counted by its redelivery if its count was lost
        cursor = cursor.moved(stored=stored if cursor.done else cursor.stored, queued=False)
        self.state.cursors.save(self.bot, job.user, job.channel, cursor)
        if not cursor.done:
            # counted before the next link is queued: a delivery cut off between the two is redelivered,
            # and queues it (above)
            self._count(job, stored, finished=False)
            self._queue_next(job, cursor)
            return
        self._count(job, stored, finished=True)

    def _queue_next(self, job: BackfillJob, cursor: Cursor) -> None:
        """The channel's next link (a fresh invocation), then the cursor marked: it is queued (unless the
        link has run and moved it on meanwhile)."""
        self.core.queue.send(job.model_copy(update={"step": job.step + 1}))
        self.state.cursors.mark_queued(self.bot, job.user, job.channel, cursor)

    def _count(self, job: BackfillJob, stored: int, finished: bool) -> None:
        """Add to the run's count; the job that finishes the last channel sends the one final message.
        One conditional update, so a channel finished twice (a duplicate delivery) is counted once."""
        run = self.state.backfills.count(self.bot, job.user, job.run, job.channel, stored, finished)
        if finished:
            self._finished(job.user, job.run, run)

    def _finished(self, user: str, run: str, counted: RunCount | None) -> None:
        """The one final message, once the run has nothing left (`counted`: this job's count, None when it
        was made already, by this job's earlier delivery or a duplicate). Sent by the job that claims it;
        a send that raises gives the claim back, so the job's redelivery sends it."""
        if counted is not None and counted.left != 0:
            return
        claimed = self.state.backfills.claim_final(self.bot, user, run)
        if claimed is None:
            return
        intent = self.state.channels.content_intent(self.bot)
        warning = " " + INTENT_OFF if intent is not None and not intent.on else ""
        try:
            self.core.reply(
                self._token(user, run),
                claimed.issued_at,
                user,
                f"Backfill complete: {claimed.count} messages stored.{warning}",
            )
        except BaseException:
            self.state.backfills.release_final(self.bot, user, run)
            raise

    def _remember_newest(self, channel: str, message_id: str) -> None:
        """The newest position seen per channel (objects.position: no message id): where catch-up starts."""
        self.state.channels.remember_newest(self.bot, channel, position(message_id))
