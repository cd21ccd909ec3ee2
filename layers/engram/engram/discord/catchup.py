"""Catch-up: what consenting users wrote since the newest message seen, one job per channel."""

from __future__ import annotations

import logging

from ..jobs import DiscordJob
from .rest import DiscordError, RateLimited

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
        fresh, due, _ = self.split_unreadable(channels)
        # Only channels whose newest message moved since the last read: the listing carries each channel's
        # last_message_id, so a quiet channel costs nothing more (no job, no read of its history)
        seen = self.state.channels_newest(self.bot, [c for _, c in fresh])
        fresh = [(g, c) for g, c in fresh if self._moved(self.last_message_ids.get(c), seen.get(c))]
        for (guild, channel), recheck in [(c, False) for c in fresh] + [(c, True) for c in due]:
            self.queue.send(DiscordJob(action="catchup", guild=guild, channel=channel, issued_at=job.issued_at,
                                       recheck=recheck, last_message_id=self.last_message_ids.get(channel),
                                       parent_id=self.thread_parents.get(channel)))
        return len(fresh) + len(due)

    @staticmethod
    def _moved(listed: str | None, seen: str | None) -> bool:
        """Whether a channel has messages newer than the newest one read. `last_message_id` is null for a
        channel without messages (resources/channel.mdx), so nothing to read there."""
        return listed is not None and (seen is None or int(listed) > int(seen))

    def catch_up(self, channels: list[tuple[str, str]] | None = None, recheck: bool = False,
                 last_message_id: str | None = None) -> int:
        """Fetch messages newer than the newest seen, per channel, and store those of consenting users.
        Idempotent: messages are keyed by their Discord id. A channel Discord refuses (403, 404), or whose
        history answers [] although it has messages (no Read Message History), is marked unreadable and
        skipped, never failed: failing would retry it into the DLQ every tick."""
        users = self.consenting_users()
        if not users:
            return 0
        if channels is None:
            channels = self.readable_channels()
        stored = 0
        for guild, channel in channels:
            newest = self.state.channel_newest(self.bot, channel)
            after = newest or "0"
            first = True
            while True:
                try:
                    page = self.client.messages(channel, after=after)
                except DiscordError as exc:
                    if exc.status not in (403, 404):
                        raise
                    self.unreadable_now(channel, f"Discord answered {exc.status}")
                    break
                if first and recheck:
                    self.state.readable_again(self.bot, channel)
                if first and not page and newest is None and last_message_id:
                    self.unreadable_now(channel, "no Read Message History (an empty history of a channel with messages)")
                    break
                first = False
                if not page:
                    break
                stored += self.store_messages(guild, channel, page, users)
                after = max(page, key=lambda m: int(m["id"]))["id"]
                self._remember_newest(channel, after)
                if len(page) < 100:
                    break
        return stored
