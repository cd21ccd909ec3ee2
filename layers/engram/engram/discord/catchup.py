"""Catch-up: what consenting users wrote since the newest message seen, one job per channel that moved (or
whose recent window is due a re-read for edits and deletions); a gap is paged in bounded jobs."""

from __future__ import annotations

import logging

from ..bookkeeping import ChannelSeen, RosterMark
from ..clock import now_ms
from ..follow_on import queue_once
from ..jobs import CatchUpJob, RetentionJob
from ..observability import record_value
from .core import DiscordCore
from .objects import position, sent_after
from .rest import DiscordError, RateLimited
from .sources import Sources
from .window import WINDOW_DAYS, Window

log = logging.getLogger(__name__)
PAGE = 100  # Discord's largest page of messages (resources/message.mdx, Get Channel Messages)
ROSTER_PAGE, ROSTER_PAGES = 500, 10  # consents read into the roster a tick, while it is built
SERVERS_PER_JOB = 25  # servers a catch-up job visits: 50 requests, about a second at Discord's 50 a second


class CatchUp:
    """fan_out_catch_up, catch_up and catch_up_gap: what consenting users wrote since the newest message
    read."""

    def __init__(self, core: DiscordCore, window: Window, sources: Sources) -> None:
        self.core = core
        self.sources = sources
        self.bot, self.settings = core.bot, core.settings
        self.state, self.service = core.state, core.service
        self.window = window

    def fan_out_catch_up(self, job: CatchUpJob) -> int:
        """A tick: catch-up jobs of SERVERS_PER_JOB servers each for the next DISCORD_GUILDS_PER_TICK servers
        of the roster (the servers someone opted in is in), in turn from where the last tick stopped,
        queued ten a request.
        Its work is one page of the roster, however many servers and people there are; a quiet server is
        visited every (roster / DISCORD_GUILDS_PER_TICK) ticks."""
        if not self.core.anyone_consents():
            return 0
        if self.settings.retention_days is not None:
            self.core.queue.send(RetentionJob(issued_at=job.issued_at))
        self.sources.due_servers()  # servers the bot left whose grace is over
        mark = self.state.roster.mark(self.bot)
        if not mark.built:
            mark = self._build_roster(mark)
        guilds, wrapped = self._next_servers(mark.after)
        turn = mark.turn
        last = guilds[-1] if guilds else None
        mark, lag_s = mark.visited(now_ms(), wrapped)
        if lag_s is not None:  # the most a quiet server has waited for its visit: the catch-up lag
            record_value("catchUpLagS", lag_s)
        self.state.roster.set_mark(self.bot, mark.moved(after=last, turn=turn + 1))
        shares = self._window_shares(len(guilds), turn)
        pages = range(0, len(guilds), SERVERS_PER_JOB)
        self.core.queue.send_many(
            [
                CatchUpJob(
                    guilds=guilds[at : at + SERVERS_PER_JOB],
                    issued_at=job.issued_at,
                    budget=sum(shares[at : at + SERVERS_PER_JOB]),
                )
                for at in pages
            ]
        )
        return len(guilds)

    def _next_servers(self, after: str | None) -> tuple[list[str], bool]:
        """The tick's page of the roster after `after`, and whether it reached the roster's start again
        (at its end, it goes on from the start)."""
        limit = self.settings.guilds_per_tick
        guilds = self.state.roster.page(self.bot, after, limit)
        wrapped = after is None or len(guilds) < limit
        if len(guilds) < limit and after is not None:
            again = self.state.roster.page(self.bot, None, limit - len(guilds))
            guilds += [g for g in again if g not in guilds]
        return guilds, wrapped

    def _window_shares(self, servers: int, turn: int) -> list[int]:
        """The tick's DISCORD_WINDOW_BUDGET split over the servers it visits; what does not divide evenly
        goes to different servers each tick (`turn`), so every server's windows get their turn."""
        if not servers:
            return []
        each, extra = divmod(self.settings.window_budget, servers)
        return [each + int((i - turn) % servers < extra) for i in range(servers)]

    def _build_roster(self, mark: RosterMark) -> RosterMark:
        """Consents given before the roster existed: their servers into it, ROSTER_PAGES pages of
        ROSTER_PAGE a tick (the tick visits what the roster holds meanwhile). A consent that names no
        servers (older still) puts every server of the bot in, once."""
        after = mark.consents_after
        for _ in range(ROSTER_PAGES):
            lists, after = self.state.consents.guilds_page(self.bot, after, ROSTER_PAGE)
            guilds = {g for listed in lists if listed is not None for g in listed}
            if None in lists and not mark.every_server:
                guilds |= {g.id for g in self.core.client.guilds()}
                mark = mark.moved(every_server=True)
            self.state.roster.add(self.bot, sorted(guilds))
            if after is None:
                return mark.moved(built=True, consents_after=None)
        return mark.moved(consents_after=after)

    def catch_up_servers(self, job: CatchUpJob) -> int:
        """A page of servers' visit (SERVERS_PER_JOB at most: 2 requests each, about a second at Discord's
        50 a second): their channels and active threads listed, then one catch-up job per channel that
        moved (the listing carries each channel's last_message_id, so a quiet channel costs no job and no
        read), and per quiet channel whose edit/delete window is due, within the page's share of the tick's
        budget (those re-read longest ago first)."""
        channels = self._list_servers(job)
        archived = self._archived_since(channels)
        fresh, due, _ = self.core.split_unreadable(channels)
        seen = self.state.channels.seen_many(self.bot, [c for _, c in fresh])
        now = now_ms()
        moved = [
            (g, c)
            for g, c in fresh
            if self._moved(self.core.channels.last_message(c), seen.get(c, ChannelSeen()).newest)
        ]
        held = set(moved)
        quiet = [
            (g, c)
            for g, c in fresh
            if (g, c) not in held and self._window_due(seen.get(c, ChannelSeen()), now)
        ]
        quiet.sort(key=lambda gc: window_at_ms(seen.get(gc[1], ChannelSeen())))
        budget = self.settings.window_budget if job.budget is None else job.budget
        fresh = moved + [c for c in archived if c not in held] + quiet[:budget]
        self.core.queue.send_many(
            [
                CatchUpJob(
                    issued_at=job.issued_at,
                    recheck=recheck,
                    **self.core.channels.carried(g, channel),
                )
                for (g, channel), recheck in [(c, False) for c in fresh] + [(c, True) for c in due]
            ]
        )
        return len(fresh) + len(due)

    def _archived_since(self, channels: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Threads a server's last visit found active that are no longer listed: archived (or deleted) since,
        perhaps with messages written before that no visit read. Each is read once more (a job each, its
        parent and privacy remembered from that visit); the visit's active threads are kept for the next
        (a write only when they changed)."""
        threads: dict[str, set[str]] = {}
        for guild, channel in channels:
            parent = self.core.channels.parent(channel)
            kept = threads.setdefault(guild, set())
            if parent:
                kept.add(f"{channel}:{parent}:{int(self.core.channels.is_private(channel))}")
        out: list[tuple[str, str]] = []
        seen_before = self.state.channels.active_threads(self.bot, sorted(threads))
        for guild, now in threads.items():
            before = seen_before[guild]
            listed = {t.split(":")[0] for t in now}
            for gone in sorted(before - now):
                thread, parent, private = gone.split(":")
                if thread not in listed:
                    self.core.channels.learn(thread, parent, private == "1")
                    out.append((guild, thread))
            if before != now:
                self.state.channels.set_active_threads(self.bot, guild, now)
        return out

    def _list_servers(self, job: CatchUpJob) -> list[tuple[str, str]]:
        """The channels of the job's servers; a server the bot left (403/404) leaves the roster, and a 429
        queues the servers not yet listed again, after its retry_after."""
        guilds = job.guilds or [job.need("guild")]
        channels: list[tuple[str, str]] = []
        for n, guild in enumerate(guilds):
            try:
                channels += self.core.readable_channels([guild])
            except RateLimited as limited:
                rest = job.model_copy(update={"guild": None, "guilds": guilds[n:]})
                self.core.queue.send(rest, delay_s=limited.delay_s)
                return channels
            except DiscordError as exc:
                if exc.status not in (403, 404):
                    raise
                log.info("server %s is gone for the bot (%s): out of the roster", guild, exc.status)
                self.state.roster.drop(self.bot, guild)
                self.sources.server_left(guild)
        return channels

    @staticmethod
    def _moved(listed: str | None, seen: str | None) -> bool:
        """Whether a channel has messages newer than the newest one read (its position). `last_message_id`
        is null for a channel without messages (resources/channel.mdx), so nothing to read there."""
        return listed is not None and (seen is None or sent_after(listed, seen))

    def _window_due(self, seen: ChannelSeen, now: int) -> bool:
        """A quiet channel is re-read while it holds messages stored in the last WINDOW_DAYS, at most every
        `window_every_s`."""
        stored_at = seen.stored_at or 0
        return (
            stored_at > now - WINDOW_DAYS * 86_400_000
            and window_at_ms(seen) <= now - self.settings.window_every_s * 1000
        )

    def catch_up(
        self,
        channels: list[tuple[str, str]],
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
        stored = 0
        for guild, channel in channels:
            self.sources.aged_out(channel)
            newest = self.state.channels.newest(self.bot, channel)
            page = self.core.read_page(channel, limit=PAGE)
            if page is None:
                continue
            if recheck:
                self.state.channels.readable_again(self.bot, channel)
            if not page:
                if newest is None and last_message_id:
                    self.core.unreadable_now(
                        channel, "no Read Message History (an empty history of a channel with messages)"
                    )
                continue  # an empty page never deletes: it is also what a lost permission looks like
            self.window.apply_window(guild, channel, page, whole=len(page) < PAGE)
            new = [m for m in page if newest is None or int(m.id) > int(newest)]
            stored += self.core.store_messages(guild, channel, new)  # consent of the page's people only
            newest_read = position(max(page, key=lambda m: int(m.id)).id)  # no one's message id
            self.state.channels.see(self.bot, channel, ChannelSeen(newest=newest_read, window_at=now_ms()))
            oldest = min(page, key=lambda m: int(m.id)).id
            if len(page) == PAGE and (newest is None or int(oldest) > int(newest)):
                # older unread messages remain (a new channel, or a burst of more than a page): bounded jobs
                self.core.queue.send(
                    CatchUpJob(
                        before=oldest,
                        until=newest,
                        issued_at=now_ms(),
                        **self.core.channels.carried(guild, channel),
                    )
                )
        return stored

    def catch_up_gap(self, job: CatchUpJob) -> int:
        """A few pages of a catch-up gap, older and older from `before` down to `until`; continues itself."""
        if not self.core.anyone_consents():
            return 0
        before, stored = job.before, 0
        for _ in range(self.settings.pages_per_job):
            page = self.core.read_page(job.need("channel"), before=before, limit=PAGE)
            if page is None:
                return stored
            older = [m for m in page if job.until is None or int(m.id) > int(job.until)]
            stored += self.core.store_messages(
                job.need("guild"),
                job.need("channel"),
                older,
                origin=job.issued_at or None,
                backfill=True,
            )
            if len(page) < PAGE or len(older) < len(page):
                return stored  # the channel's first message, or the newest one read before: done
            before = min(page, key=lambda m: int(m.id)).id
        following = job.model_copy(update={"before": before, "link": job.link + 1})
        chain = f"gap#{self.bot}#{job.channel}#{job.until}#{job.issued_at}"
        queue_once(self.state.follow_ons, chain, following.link, lambda: self.core.queue.send(following))
        return stored


def window_at_ms(seen: ChannelSeen) -> int:
    """When a channel's window was last re-read, in ms. Kept in ms since two ticks in one second must still
    tell which channel was read last; values from before (seconds, below 10**11) are read as seconds."""
    at = seen.window_at or 0
    return at * 1000 if at < 10**11 else at
