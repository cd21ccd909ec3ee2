"""Catch-up: what consenting users wrote since the newest message seen, one job per channel that moved (or
whose recent window is due a re-read for edits and deletions); a gap is paged in bounded jobs."""

from __future__ import annotations

import logging

from ..jobs import DiscordJob
from ..store import now_ms
from .core import DiscordCore
from .rest import RateLimited
from .window import WINDOW_DAYS, Window

log = logging.getLogger(__name__)
PAGE = 100  # Discord's largest page of messages (resources/message.mdx, Get Channel Messages)


class CatchUp:
    """fan_out_catch_up, catch_up and catch_up_gap: what consenting users wrote since the newest message
    read."""

    def __init__(self, core: DiscordCore, window: Window) -> None:
        self.core = core
        self.bot, self.settings = core.bot, core.settings
        self.state, self.service = core.state, core.service
        self.window = window

    def fan_out_catch_up(self, job: DiscordJob) -> int:
        """One catch-up job per readable channel that moved or is due a window re-read (each its own
        invocation, retried on its own)."""
        if not self.core.anyone_consents():
            return 0
        try:  # only the servers some consenting user is in: nothing of theirs is anywhere else
            channels = self.core.readable_channels(only=self.state.consenting_guilds(self.bot))
        except RateLimited as limited:
            self.core.queue.send(job, delay_s=int(limited.retry_after) + 1)
            return 0
        fresh, due, _ = self.core.split_unreadable(channels)
        # Only channels whose newest message moved since the last read (the listing carries each channel's
        # last_message_id, so a quiet channel costs no job and no read), and quiet channels holding messages
        # stored lately whose window is due: an edit or a deletion moves no last_message_id
        seen = self.state.channels_seen(self.bot, [c for _, c in fresh])
        now = now_ms()
        moved = [
            (g, c)
            for g, c in fresh
            if self._moved(self.core.last_message_ids.get(c), (seen.get(c) or {}).get("newest"))
        ]
        held = set(moved)
        quiet = [(g, c) for g, c in fresh if (g, c) not in held and self._window_due(seen.get(c) or {}, now)]
        # a tick re-reads a bounded number of quiet windows, those re-read longest ago first
        quiet.sort(key=lambda gc: int((seen.get(gc[1]) or {}).get("windowAt") or 0))
        fresh = moved + quiet[: self.settings.window_budget]
        for (guild, channel), recheck in [(c, False) for c in fresh] + [(c, True) for c in due]:
            self.core.queue.send(
                DiscordJob(
                    action="catchup",
                    guild=guild,
                    channel=channel,
                    issued_at=job.issued_at,
                    recheck=recheck,
                    last_message_id=self.core.last_message_ids.get(channel),
                    parent_id=self.core.thread_parents.get(channel),
                    private=channel in self.core.private_threads,
                )
            )
        return len(fresh) + len(due)

    @staticmethod
    def _moved(listed: str | None, seen: str | None) -> bool:
        """Whether a channel has messages newer than the newest one read. `last_message_id` is null for a
        channel without messages (resources/channel.mdx), so nothing to read there."""
        return listed is not None and (seen is None or int(listed) > int(seen))

    def _window_due(self, seen: dict, now: int) -> bool:
        """A quiet channel is re-read while it holds messages stored in the last WINDOW_DAYS, at most every
        `window_every_s`."""
        stored_at = int(seen.get("storedAt") or 0)
        return (
            stored_at > now - WINDOW_DAYS * 86_400_000
            and int(seen.get("windowAt") or 0) <= now // 1000 - self.settings.window_every_s
        )

    def catch_up(
        self,
        channels: list[tuple[str, str]] | None = None,
        recheck: bool = False,
        last_message_id: str | None = None,
    ) -> int:
        """Read each channel's newest page: store what consenting users wrote since the newest message seen,
        apply edits and deletions to what is stored from that window, and queue a bounded job for any older
        unread gap (never walked here: /ask calls this). Idempotent: messages are keyed by their Discord id.
        A channel Discord refuses (403, 404), or whose history answers [] although it has messages (no Read
        Message History), is marked unreadable and skipped, never failed: failing would retry it into the
        DLQ every tick."""
        if not self.core.anyone_consents():
            return 0
        if channels is None:
            channels = self.core.readable_channels(only=self.state.consenting_guilds(self.bot))
        stored = 0
        for guild, channel in channels:
            newest = self.state.channel_newest(self.bot, channel)
            page = self.core.read_page(channel, limit=PAGE)
            if page is None:
                continue
            if recheck:
                self.state.readable_again(self.bot, channel)
            if not page:
                if newest is None and last_message_id:
                    self.core.unreadable_now(
                        channel, "no Read Message History (an empty history of a channel with messages)"
                    )
                continue  # an empty page never deletes: it is also what a lost permission looks like
            self.window.apply_window(guild, channel, page, whole=len(page) < PAGE)
            new = [m for m in page if newest is None or int(m["id"]) > int(newest)]
            stored += self.core.store_messages(guild, channel, new)  # consent of the page's people only
            self.state.see_channel(
                self.bot,
                channel,
                newest=max(page, key=lambda m: int(m["id"]))["id"],
                windowAt=now_ms() // 1000,
            )
            oldest = min(page, key=lambda m: int(m["id"]))["id"]
            if len(page) == PAGE and (newest is None or int(oldest) > int(newest)):
                # older unread messages remain (a new channel, or a burst of more than a page): bounded jobs
                self.core.queue.send(
                    DiscordJob(
                        action="catchup",
                        guild=guild,
                        channel=channel,
                        before=oldest,
                        until=newest,
                        issued_at=now_ms(),
                        parent_id=self.core.thread_parents.get(channel),
                        private=channel in self.core.private_threads,
                    )
                )
        return stored

    def catch_up_gap(self, job: DiscordJob) -> int:
        """A few pages of a catch-up gap, older and older from `before` down to `until`; continues itself."""
        if not self.core.anyone_consents():
            return 0
        before, stored = job.before, 0
        for _ in range(self.settings.pages_per_job):
            page = self.core.read_page(job.need("channel"), before=before, limit=PAGE)
            if page is None:
                return stored
            older = [m for m in page if job.until is None or int(m["id"]) > int(job.until)]
            stored += self.core.store_messages(
                job.need("guild"),
                job.need("channel"),
                older,
                origin=job.issued_at or None,
                backfill=True,
            )
            if len(page) < PAGE or len(older) < len(page):
                return stored  # the channel's first message, or the newest one read before: done
            before = min(page, key=lambda m: int(m["id"]))["id"]
        self.core.queue.send(job.model_copy(update={"before": before}))
        return stored
