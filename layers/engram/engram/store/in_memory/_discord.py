"""Discord's state in memory: consent and the roster, backfill runs and cursors, channels."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ...bookkeeping import (
    BackfillRun,
    ChannelSeen,
    Consent,
    ContentIntent,
    Cursor,
    RosterMark,
    RunCount,
    Unreadable,
)
from .. import keys
from ..state.backfill import FINAL_SAID, PLAN_PREFIX


class MemoryRoster:
    def __init__(self) -> None:
        self._guilds: dict[str, set[str]] = {}
        self._marks: dict[str, RosterMark] = {}
        self._left: dict[str, dict[str, int]] = {}

    def add(self, bot: str, guilds: list[str]) -> None:
        self._guilds.setdefault(bot, set()).update(guilds)

    def drop(self, bot: str, guild: str) -> None:
        self._guilds.get(bot, set()).discard(guild)

    def page(self, bot: str, after: str | None, limit: int) -> list[str]:
        ordered = sorted(self._guilds.get(bot, set()))
        return [g for g in ordered if after is None or g > after][:limit]

    def mark(self, bot: str) -> RosterMark:
        return self._marks.get(bot, RosterMark())

    def set_mark(self, bot: str, mark: RosterMark) -> None:
        self._marks[bot] = mark

    def mark_left(self, bot: str, guild: str, due: int) -> None:
        self._left.setdefault(bot, {}).setdefault(guild, due)

    def left_due(self, bot: str, now: int, limit: int) -> list[str]:
        return sorted(g for g, due in self._left.get(bot, {}).items() if due <= now)[:limit]

    def clear_left(self, bot: str, guild: str) -> None:
        self._left.get(bot, {}).pop(guild, None)


class MemoryConsents:
    def __init__(self, roster: MemoryRoster) -> None:
        self._roster = roster
        self._lock = threading.Lock()
        self.held: dict[tuple[str, str], Consent] = {}

    def get(self, bot: str, user: str) -> Consent | None:
        return self.held.get((bot, user))

    def consenting(self, bot: str, users: set[str]) -> set[str]:
        return {u for u in users if u and (bot, u) in self.held}

    def _ordered(self, bot: str) -> list[tuple[str, Consent]]:
        # in the DynamoDB store's key order: by the consent's sort key
        return sorted((keys.consent(b, u)[1], c) for (b, u), c in list(self.held.items()) if b == bot)

    def anyone(self, bot: str) -> bool:
        return bool(self._ordered(bot))

    def guilds_page(
        self, bot: str, after: str | None, limit: int
    ) -> tuple[list[list[str] | None], str | None]:
        page = [(sk, c) for sk, c in self._ordered(bot) if after is None or sk > after][:limit]
        lists = [list(c.guilds) if c.guilds is not None else None for _, c in page]
        return lists, (page[-1][0] if len(page) == limit else None)

    def give(self, bot: str, user: str, at: int, guilds: list[str] | None = None) -> None:
        self.held[bot, user] = Consent(at, tuple(sorted(guilds)) if guilds is not None else None)
        self._roster.add(bot, guilds or [])

    def add_guilds(self, bot: str, user: str, guilds: list[str]) -> None:
        with self._lock:
            held = self.held.get((bot, user))
            if held is None or held.guilds is None or set(guilds) <= set(held.guilds):
                return
            self.held[bot, user] = Consent(held.consented_at, tuple(sorted({*held.guilds, *guilds})))
        self._roster.add(bot, guilds)


@dataclass
class _Run:
    run: str
    left: int
    planned: int
    count: int
    issued_at: int
    members: set[str] = field(default_factory=set)

    def counted(self) -> RunCount:
        return RunCount(self.left, self.count, self.issued_at)


class MemoryBackfillRuns:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[tuple[str, str], _Run] = {}
        self.tokens: dict[tuple[str, str, str], tuple[str, int]] = {}

    def get(self, bot: str, user: str) -> BackfillRun | None:
        held = self.runs.get((bot, user))
        if held is None:
            return None
        done = [m for m in held.members if not m.startswith(PLAN_PREFIX) and m != FINAL_SAID]
        return BackfillRun(held.run, held.left, held.count, held.planned, len(done), held.issued_at)

    def start(self, bot: str, user: str, run: str, channels: int, issued_at: int, planning: int = 0) -> None:
        self.runs[bot, user] = _Run(run, channels + planning, channels, 0, issued_at)

    def _once(self, bot: str, user: str, run: str, once: str | None) -> _Run | None:
        held = self.runs.get((bot, user))
        if held is None or held.run != run or (once is not None and once in held.members):
            return None
        if once is not None:
            held.members.add(once)
        return held

    def plan(self, bot: str, user: str, run: str, step: str, channels: int, planning: int) -> RunCount | None:
        with self._lock:
            held = self._once(bot, user, run, PLAN_PREFIX + step)
            if held is None:
                return None
            held.left += channels + planning - 1
            held.planned += channels
            return held.counted()

    def count(
        self, bot: str, user: str, run: str, channel: str, stored: int, finished: bool
    ) -> RunCount | None:
        with self._lock:
            held = self._once(bot, user, run, channel if finished else None)
            if held is None:
                return None
            held.count += stored
            held.left -= int(finished)
            return held.counted()

    def claim_final(self, bot: str, user: str, run: str) -> RunCount | None:
        with self._lock:
            held = self.runs.get((bot, user))
            if held is None or held.run != run or held.left != 0 or FINAL_SAID in held.members:
                return None
            held.members.add(FINAL_SAID)
            return RunCount(0, held.count, held.issued_at)

    def release_final(self, bot: str, user: str, run: str) -> None:
        with self._lock:
            held = self.runs.get((bot, user))
            if held is not None and held.run == run:
                held.members.discard(FINAL_SAID)

    def keep_token(self, bot: str, user: str, run: str, token: str, expires_s: int) -> None:
        self.tokens[bot, user, run] = (token, expires_s)

    def token(self, bot: str, user: str, run: str, now_s: int) -> str | None:
        held = self.tokens.get((bot, user, run))
        if held is None:
            return None
        if held[1] <= now_s:
            del self.tokens[bot, user, run]
            return None
        return held[0]


class MemoryCursors:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held: dict[tuple[str, str, str], Cursor] = {}

    def get(self, bot: str, user: str, channel: str) -> Cursor | None:
        return self.held.get((bot, user, channel))

    def save(self, bot: str, user: str, channel: str, cursor: Cursor) -> None:
        self.held[bot, user, channel] = cursor

    def mark_queued(self, bot: str, user: str, channel: str, saved: Cursor) -> bool:
        with self._lock:
            if self.held.get((bot, user, channel)) != saved:
                return False
            self.held[bot, user, channel] = saved.moved(queued=True)
            return True


class MemoryChannels:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], ChannelSeen] = {}
        self._recent: dict[tuple[str, str], dict[str, tuple[int, str, int]]] = {}
        self._intent: dict[str, ContentIntent] = {}
        self._unreadable: dict[str, dict[str, Unreadable]] = {}
        self._active: dict[tuple[str, str], set[str]] = {}

    def newest(self, bot: str, channel: str) -> str | None:
        return self.seen(bot, channel).newest

    def seen(self, bot: str, channel: str) -> ChannelSeen:
        return self._seen.get((bot, channel), ChannelSeen())

    def seen_many(self, bot: str, channels: list[str], consistent: bool = False) -> dict[str, ChannelSeen]:
        return {c: self._seen[bot, c] for c in channels if (bot, c) in self._seen}

    def see(self, bot: str, channel: str, learnt: ChannelSeen) -> None:
        with self._lock:
            self._seen[bot, channel] = self.seen(bot, channel).merged(learnt)

    def remember_newest(self, bot: str, channel: str, message_id: str) -> None:
        self.see(bot, channel, ChannelSeen(newest=message_id))

    def note_recent(
        self, bot: str, channel: str, entries: list[tuple[str, int, str, int]], stored_at: int
    ) -> None:
        if not entries:
            return
        watched = self._recent.setdefault((bot, channel), {})
        for message, record, edited, expires in entries:
            watched[message] = (record, edited, expires)
        self.see(bot, channel, ChannelSeen(stored_at=stored_at))

    def recent(self, bot: str, channel: str, now_s: int) -> dict[str, tuple[int, str]]:
        watched = self._recent.get((bot, channel), {})
        return {m: (record, edited) for m, (record, edited, expires) in watched.items() if expires > now_s}

    def drop_recent(self, bot: str, channel: str, messages: list[str]) -> None:
        watched = self._recent.get((bot, channel), {})
        for message in messages:
            watched.pop(message, None)

    def note_content_intent(self, bot: str, on: bool, how: str, at: int) -> None:
        self._intent[bot] = ContentIntent(on, how, at)

    def content_intent(self, bot: str) -> ContentIntent | None:
        return self._intent.get(bot)

    def mark_unreadable(self, bot: str, channel: str, reason: str, retry_at_s: int, strikes: int = 1) -> None:
        self._unreadable.setdefault(bot, {})[channel] = Unreadable(reason, retry_at_s, strikes)

    def unreadable(self, bot: str, channels: list[str] | None = None) -> dict[str, Unreadable]:
        marked = self._unreadable.get(bot, {})
        wanted = marked if channels is None else channels
        return {c: marked[c] for c in wanted if c in marked}

    def active_threads(self, bot: str, guilds: list[str]) -> dict[str, set[str]]:
        return {g: set(self._active.get((bot, g), set())) for g in guilds}

    def set_active_threads(self, bot: str, guild: str, threads: set[str]) -> None:
        self._active[(bot, guild)] = set(threads)

    def readable_again(self, bot: str, channel: str) -> None:
        self._unreadable.get(bot, {}).pop(channel, None)
