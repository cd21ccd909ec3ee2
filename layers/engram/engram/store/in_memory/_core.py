"""Settings, re-embed runs, tombstones, marks and limits, in memory."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ...bookkeeping import (
    ChainEnd,
    EmbeddingSettings,
    ExtractionHealth,
    ForgetUnderWay,
    UserKey,
)
from ...record import Record
from ..state.follow_ons import CLAIM_STALE_MS
from ..state.reembed import FOLLOWED


class MemoryEmbedderSettings:
    def __init__(self) -> None:
        self._held: EmbeddingSettings | None = None

    def get(self) -> EmbeddingSettings | None:
        return self._held

    def save(self, settings: EmbeddingSettings) -> None:
        self._held = settings.model_copy()


class MemoryChatSettings:
    def __init__(self) -> None:
        self.held: dict[tuple[str, str], dict[str | None, bool]] = {}

    def of(self, bot: str, user: str) -> dict[str | None, bool]:
        return dict(self.held.get((bot, user), {}))

    def set(self, bot: str, user: str, conversation: str | None, enabled: bool | None) -> None:
        mine = self.held.setdefault((bot, user), {})
        if enabled is None:
            mine.pop(conversation, None)
        else:
            mine[conversation] = enabled


@dataclass
class _Pass:
    left: int
    members: set[str] = field(default_factory=set)


class MemoryFollowOns:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, bool, int]] = {}  # chain: (position, sent, claimed at)

    def claim(self, chain: str, position: int, now: int) -> bool:
        with self._lock:
            held = self._held.get(chain)
            if held is not None:
                at, sent, claimed = held
                stale = at == position and not sent and claimed < now - CLAIM_STALE_MS
                if not (at < position or stale):
                    return False
            self._held[chain] = (position, False, now)
            return True

    def sent(self, chain: str, position: int) -> None:
        with self._lock:
            held = self._held.get(chain)
            if held is not None and held[0] == position:
                self._held[chain] = (position, True, held[2])

    def release(self, chain: str, position: int) -> None:
        with self._lock:
            held = self._held.get(chain)
            if held is not None and held[0] == position and not held[1]:
                del self._held[chain]


class MemoryReembedRuns:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, _Pass] = {}

    def start(self, vector: str, chains: int) -> None:
        with self._lock:
            self._runs[vector] = _Pass(chains)

    def left(self, vector: str) -> int:
        held = self._runs.get(vector)
        return held.left if held is not None else 0

    def end_chain(self, vector: str, chain: str) -> ChainEnd | None:
        with self._lock:
            held = self._runs.get(vector)
            if held is None:
                return None
            if chain not in held.members:
                held.left -= 1
                held.members.add(chain)
            return ChainEnd(held.left, FOLLOWED in held.members)

    def mark_followed(self, vector: str) -> None:
        with self._lock:
            held = self._runs.get(vector)
            if held is not None:
                held.members.add(FOLLOWED)


class MemoryTombstones:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[tuple[str, str], int] = {}
        self._under_way: dict[tuple[str, str], ForgetUnderWay] = {}

    def mark(self, bot: str, user: str, at: int) -> None:
        self._marks[bot, user] = at

    def when(self, bot: str, users: Iterable[str]) -> dict[str, int]:
        return {u: self._marks[bot, u] for u in dict.fromkeys(users) if u and (bot, u) in self._marks}

    def page(self, bot: str, after: str | None, limit: int) -> list[tuple[str, int]]:
        users = sorted(u for b, u in self._marks if b == bot and (after is None or u > after))
        return [(u, self._marks[bot, u]) for u in users[:limit]]

    def begin(self, bot: str, user: str, at: int, touched: int) -> None:
        self._under_way[bot, user] = ForgetUnderWay(at, touched)

    def under_way(self, bot: str) -> dict[str, ForgetUnderWay]:
        return {u: held for (b, u), held in list(self._under_way.items()) if b == bot}

    def end(self, bot: str, user: str, at: int) -> None:
        with self._lock:
            held = self._under_way.get((bot, user))
            if held is not None and held.at <= at:
                del self._under_way[bot, user]


class MemoryMarks:
    def __init__(self) -> None:
        self._changes: dict[str, int] = {}
        self._sweeps: dict[str, tuple[int, int]] = {}
        self._extractions: dict[str, ExtractionHealth] = {}

    def note_change(self, bot: str, at: int) -> None:
        self._changes[bot] = at

    def last_change(self, bot: str) -> int:
        return self._changes.get(bot, 0)

    def sweep_mark(self, bot: str) -> tuple[int, int] | None:
        return self._sweeps.get(bot)

    def set_sweep_mark(self, bot: str, through: int, since: int) -> None:
        self._sweeps[bot] = (through, since)

    def note_extraction(self, bot: str, at: int, failed: str | None = None) -> None:
        was = self._extractions.get(bot, ExtractionHealth())
        if failed is None:
            self._extractions[bot] = replace(was, ok_at=at, failures=0)
        else:
            self._extractions[bot] = replace(was, failed_at=at, why=failed[:300], failures=was.failures + 1)

    def extraction(self, bot: str) -> ExtractionHealth:
        return self._extractions.get(bot, ExtractionHealth())

    def lower_sweep_mark(self, bot: str, through: int) -> None:
        mark = self.sweep_mark(bot)
        if mark is not None and mark[0] > through:
            self.set_sweep_mark(bot, max(through, 0), mark[1])


class MemoryLimits:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, int], int] = {}
        self._seen: set[tuple[str, str]] = set()
        self.exports: dict[tuple[str, str], int] = {}

    def take_rate_slot(self, bot: str, window: int, limit: int, expires_s: int) -> bool:
        with self._lock:
            taken = self._windows.get((bot, window), 0)
            if taken >= limit:
                return False
            self._windows[bot, window] = taken + 1
            return True

    def first_sight(self, bot: str, interaction_id: str, expires_s: int) -> bool:
        with self._lock:
            if (bot, interaction_id) in self._seen:
                return False
            self._seen.add((bot, interaction_id))
            return True

    def seen(self, bot: str, interaction_id: str) -> bool:
        with self._lock:
            return (bot, interaction_id) in self._seen

    def take_export_slot(self, bot: str, user: str, now: int, every_s: int) -> bool:
        with self._lock:
            last = self.exports.get((bot, user))
            if last is not None and last >= now - every_s * 1000:
                return False
            self.exports[bot, user] = now
            return True

    def release_export_slot(self, bot: str, user: str) -> None:
        self.exports.pop((bot, user), None)


class MemoryExpiries:
    def __init__(self) -> None:
        self._due: dict[str, set[tuple[int, int]]] = {}

    def note(self, records: list[Record]) -> None:
        for r in records:
            if r.expires_at is not None:
                self._due.setdefault(r.bot, set()).add((int(r.expires_at), int(r.id)))

    def due(self, bot: str, now: int, limit: int) -> list[tuple[int, int]]:
        return sorted(e for e in self._due.get(bot, set()) if e[0] <= now)[:limit]

    def drop(self, bot: str, entries: list[tuple[int, int]]) -> None:
        self._due.get(bot, set()).difference_update(entries)


class MemoryUserKeys:
    def __init__(self) -> None:
        self.held: dict[str, tuple[UserKey, str]] = {}

    def add(self, key: UserKey, digest: str) -> None:
        self.held[key.key_id] = (key, digest)

    def find(self, key_id: str) -> tuple[UserKey, str] | None:
        return self.held.get(key_id)

    def of_user(self, bot: str, user: str) -> list[UserKey]:
        mine = [k for k, _ in self.held.values() if (k.bot, k.user) == (bot, user)]
        return sorted(mine, key=lambda k: (k.created_at, k.key_id))

    def revoke(self, bot: str, user: str, key_id: str) -> bool:
        held = self.held.get(key_id)
        if held is None or (held[0].bot, held[0].user) != (bot, user):
            return False
        del self.held[key_id]
        return True

    def forget(self, bot: str, user: str) -> int:
        mine = self.of_user(bot, user)
        for key in mine:
            del self.held[key.key_id]
        return len(mine)
