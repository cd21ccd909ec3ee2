"""Catch-up: what consenting users wrote since the newest message seen, one job per channel."""

from __future__ import annotations

import logging

from ..jobs import DiscordJob
from .rest import RateLimited

log = logging.getLogger(__name__)


class CatchUp:
    """fan_out_catch_up and catch_up, for DiscordMemory."""

    def fan_out_catch_up(self, job: DiscordJob) -> int:
        """One catch-up job per readable channel (each its own invocation, retried on its own)."""
        if not self.consenting_users():
            return 0
        try:
            channels = self.readable_channels()
        except RateLimited as limited:
            self.queue.send(job, delay_s=int(limited.retry_after) + 1)
            return 0
        for guild, channel in channels:
            self.queue.send(DiscordJob(action="catchup", guild=guild, channel=channel, issued_at=job.issued_at))
        return len(channels)

    def catch_up(self, channels: list[tuple[str, str]] | None = None) -> int:
        """Fetch messages newer than the newest seen, per channel, and store those of consenting users.
        Idempotent: messages are keyed by their Discord id."""
        users = self.consenting_users()
        if not users:
            return 0
        if channels is None:
            channels = self.readable_channels()
        stored = 0
        for guild, channel in channels:
            after = self.state.channel_newest(self.bot, channel) or "0"
            while True:
                page = self.client.messages(channel, after=after)
                if not page:
                    break
                stored += self.store_messages(guild, channel, page, users)
                after = max(page, key=lambda m: int(m["id"]))["id"]
                self._remember_newest(channel, after)
                if len(page) < 100:
                    break
        return stored
