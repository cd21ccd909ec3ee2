"""The source is the truth: what Discord no longer has leaves memory. A recalled message is confirmed to
exist before the model is given it (REST has no delete events for a webhook bot, so a deletion of any age
is found where it matters: when the memory would be quoted); a deleted channel, thread or forum post takes
its memories with it; a server the bot left is deleted after its grace; messages past
DISCORD_RETENTION_DAYS are neither recalled nor kept."""

from __future__ import annotations

import logging
import time

from ..clock import now_ms
from ..jobs import RetentionJob, SourceGoneJob
from ..service import Memory
from .core import DiscordCore
from .errors import UNKNOWN_CHANNEL, UNKNOWN_MESSAGE, DiscordError
from .limits import RateLimited

log = logging.getLogger(__name__)
GONE_STEP = 200  # memories deleted a step
GONE_BUDGET_S = 20.0  # a job's steps stop here and the job continues itself


class Sources:
    """confirmed (before /ask quotes memories), gone (a channel or server Discord no longer has) and
    retention (what aged out)."""

    def __init__(self, core: DiscordCore) -> None:
        self.core = core
        self.bot, self.settings, self.service = core.bot, core.settings, core.service

    def confirmed(self, memories: list[Memory], k: int) -> list[Memory]:
        """The first `k` of these memories that Discord still holds and retention keeps: one Get Channel
        Message each (bounded by k plus those found gone). A message Discord answers Unknown Message for is
        deleted now; Unknown Channel, its whole channel (or thread) is. One that cannot be confirmed (no
        access, a rate limit) is left out of this answer and kept."""
        cutoff = self.settings.retention_cutoff_ms(now_ms())
        out: list[Memory] = []
        gone_channels: set[str] = set()
        for memory in memories:
            if len(out) == k:
                break
            channel = str((memory.content or {}).get("channelId") or "")
            if channel not in gone_channels and self._still_there(memory, channel, cutoff, gone_channels):
                out.append(memory)
        return out

    def _still_there(self, memory: Memory, channel: str, cutoff: int | None, gone_channels: set[str]) -> bool:
        """Whether a recalled memory may be given to the model; one gone at its source (or past retention) is
        deleted now, its channel noted in `gone_channels` when the whole channel is gone."""
        if cutoff is not None and memory.created_at < cutoff:
            self.service.remove_ids(self.bot, [memory.id])  # aged out before the sweep reached it
            return False
        if not _on_discord(memory) or not channel:
            return True  # an /ask prompt: said to engram, not a Discord message
        found = self._exists(channel, str(memory.source_id))
        if found == UNKNOWN_MESSAGE:
            log.info("a recalled message was deleted on Discord: removed")
            self.service.remove_ids(self.bot, [memory.id])
        elif found == UNKNOWN_CHANNEL:
            gone_channels.add(channel)
            self.channel_gone(channel)
        return found is True

    def _exists(self, channel: str, message: str) -> bool | int:
        """True: Discord has it; UNKNOWN_MESSAGE or UNKNOWN_CHANNEL: it is gone; False: not known now."""
        try:
            self.core.client.message(channel, message)
            return True
        except DiscordError as exc:
            if exc.gone:
                return exc.code
            log.info("a recalled message could not be confirmed (%s): left out", exc.status)
            return False
        except RateLimited:
            return False

    def channel_gone(self, channel: str) -> None:
        """A channel, thread or forum post deleted on Discord: its memories go (a step now, the rest by a
        job)."""
        if self.service.remove_thread(self.bot, channel, GONE_STEP) == GONE_STEP:
            self.core.queue.send(SourceGoneJob(channel=channel, issued_at=now_ms()))

    def server_left(self, guild: str) -> None:
        """The bot is no longer in a server: its memories are deleted after DISCORD_LEFT_SERVER_GRACE_HOURS
        (the server is marked; a catch-up tick queues the deletion once it is due). With no grace, at once."""
        grace_ms = int(self.settings.left_server_grace_hours * 3_600_000)
        self.core.state.roster.mark_left(self.bot, guild, now_ms() + grace_ms)
        if grace_ms == 0:
            self.core.queue.send(SourceGoneJob(guild=guild, issued_at=now_ms()))

    def due_servers(self, limit: int = 25) -> int:
        """Left servers whose grace is over: a deletion job each (a tick's part)."""
        due = self.core.state.roster.left_due(self.bot, now_ms(), limit)
        self.core.queue.send_many([SourceGoneJob(guild=g, issued_at=now_ms()) for g in due])
        return len(due)

    def gone(self, job: SourceGoneJob) -> None:
        """Delete what Discord no longer has, GONE_STEP memories a step within GONE_BUDGET_S; the job
        continues itself while more is left. A left server's deletion is called off if the bot is in the
        server again."""
        if job.guild and self._member_of(job.guild):
            log.info("the bot is back in server %s: its memories are kept", job.guild)
            self.core.state.roster.clear_left(self.bot, job.guild)
            return
        deadline = time.monotonic() + GONE_BUDGET_S
        while time.monotonic() < deadline:
            if job.channel:
                removed = self.service.remove_thread(self.bot, job.channel, GONE_STEP)
            else:
                removed = self.service.remove_server(self.bot, job.need("guild"), GONE_STEP)
            if removed < GONE_STEP:
                if job.guild:
                    self.core.state.roster.clear_left(self.bot, job.guild)
                return
        self.core.queue.send(job)

    def _member_of(self, guild: str) -> bool:
        """Whether the bot is in a server: the one guild of its list from just below that id (one request)."""
        listed = self.core.client.guilds_page(str(int(guild) - 1), 1)
        return bool(listed) and listed[0].id == guild

    def aged_out(self, channel: str) -> None:
        """A channel read now: its stored messages past retention go (one index read; a page at most). The
        retention job's walk by storing order misses a message stored late (a backfill, an import): this
        finds it by when it was written."""
        cutoff = self.settings.retention_cutoff_ms(now_ms())
        if cutoff is not None:
            self.service.remove_thread(self.bot, channel, GONE_STEP, written_before=cutoff)

    def retention(self, job: RetentionJob) -> None:
        """The oldest stored messages past DISCORD_RETENTION_DAYS deleted, a page a step while the oldest page
        was all received before the cutoff (what lies beyond it may have aged out too)."""
        cutoff = self.settings.retention_cutoff_ms(now_ms())
        if cutoff is None:
            return
        deadline = time.monotonic() + GONE_BUDGET_S
        while time.monotonic() < deadline:
            removed, more = self.service.remove_aged(self.bot, "message", cutoff, GONE_STEP)
            if removed:
                log.info("retention: %d messages past %d days deleted", removed, self.settings.retention_days)
            if not more:
                return
        self.core.queue.send(job)


def _on_discord(memory: Memory) -> bool:
    """Whether a memory is a Discord message (its source id a snowflake), not an /ask prompt."""
    return bool(memory.source_id) and str(memory.source_id).isdigit()
