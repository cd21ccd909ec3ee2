"""What ties the in-memory records together: the table they sit in, their unique keys' claims, each
thread's tail, the carriers of others' words and the scope marks (engram.ports' ClaimsPort,
ThreadTailsPort, CarriersPort and ScopeMarksPort)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ...bookkeeping import ThreadTail
from ...clock import now_ms
from ...record import KINDS, Record, carrier_notes
from ..claims import CLAIM_IN_FLIGHT_MS


@dataclass
class _Claim:
    memory_id: int
    at: int
    owner: str | None


class Table:
    """The records, by bot and id, copied in and out (a caller's record never aliases a stored one)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.rows: dict[tuple[str, int], Record] = {}

    def get(self, bot: str, memory_id: int) -> Record | None:
        row = self.rows.get((bot, int(memory_id)))
        return copy.copy(row) if row is not None else None

    def of_bot(self, bot: str) -> list[Record]:
        """Copies of a bot's records, newest id first."""
        with self.lock:
            mine = [copy.copy(r) for (b, _), r in self.rows.items() if b == bot]
        return sorted(mine, key=lambda r: -int(r.id))

    def update(self, record: Record, change: Callable[[Record], None]) -> bool:
        """Change a stored record while it exists; False when it is gone."""
        with self.lock:
            row = self.rows.get((record.bot, int(record.id)))
            if row is None:
                return False
            change(row)
            return True


class MemoryClaims:
    def __init__(self, table: Table) -> None:
        self._table = table
        self._held: dict[tuple[str, str], _Claim] = {}

    def _holder(self, bot: str, key: str, memory_id: int) -> Record | None:
        record = self._table.get(bot, memory_id)
        return record if record is not None and record.unique_key == key else None

    def find_unique(self, bot: str, key: str) -> Record | None:
        held = self._held.get((bot, key))
        return self._holder(bot, key, held.memory_id) if held is not None else None

    def find_uniques(self, bot: str, unique_keys: list[str]) -> dict[str, int]:
        found = {k: self.find_unique(bot, k) for k in dict.fromkeys(unique_keys)}
        return {k: int(r.id) for k, r in found.items() if r is not None}

    def claim(self, bot: str, key: str, memory_id: int, user: str | None = None) -> int | None:
        with self._table.lock:
            held = self._held.get((bot, key))
            if held is not None and (
                self._holder(bot, key, held.memory_id) is not None or now_ms() - held.at < CLAIM_IN_FLIGHT_MS
            ):
                return held.memory_id
            self._held[bot, key] = _Claim(memory_id, now_ms(), user)
            return None

    def release(self, bot: str, key: str, memory_id: int) -> None:
        with self._table.lock:
            held = self._held.get((bot, key))
            if held is not None and held.memory_id == memory_id:
                del self._held[bot, key]

    def stale(self, bot: str, user: str) -> list[str]:
        mine = {k: c.memory_id for (b, k), c in list(self._held.items()) if b == bot and c.owner == user}
        return [k for k, memory_id in mine.items() if self._holder(bot, k, memory_id) is None]

    def drop(self, bot: str, claim_keys: list[str]) -> None:
        for key in claim_keys:
            self._held.pop((bot, key), None)

    def drop_held_by(self, record: Record) -> None:
        """What deleting a record does to its claim: gone, whoever holds it (as the DynamoDB store)."""
        if record.unique_key:
            self._held.pop((record.bot, record.unique_key), None)


class MemoryThreadTails:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], ThreadTail] = {}

    def of(self, bot: str, threads: list[str]) -> dict[str, ThreadTail]:
        return {t: self._held[bot, t] for t in dict.fromkeys(threads) if (bot, t) in self._held}

    def advance(
        self, bot: str, thread: str, at: int, text: str, user: str | None = None, memory_id: int | None = None
    ) -> None:
        with self._lock:
            held = self._held.get((bot, thread))
            if held is None or held.at <= at:
                self._held[bot, thread] = ThreadTail(text=text, at=at, user=user, id=memory_id)

    def drop(
        self, bot: str, threads: list[str], user: str | None = None, memory_id: int | None = None
    ) -> int:
        mine = [
            t
            for t, tail in self.of(bot, threads).items()
            if (user is not None and tail.user == user) or (memory_id is not None and tail.id == memory_id)
        ]
        for thread in mine:
            self._held.pop((bot, thread), None)
        return len(mine)


class MemoryCarriers:
    def __init__(self) -> None:
        # (bot, author) -> {carrier id: the source record it quotes, when it is the context's}
        self._held: dict[tuple[str, str | None], dict[int, int | None]] = {}

    def note(self, records: list[Record]) -> None:
        for author, r in carrier_notes(records):
            source = r.context_source if author == r.context_author else None
            self._held.setdefault((r.bot, author), {})[int(r.id)] = source

    def of(self, bot: str, author: str | None, source: int | None = None) -> list[int]:
        held = self._held.get((bot, author), {})
        return sorted(i for i, s in held.items() if source is None or s == source)

    def drop(self, bot: str, author: str | None, carrier_ids: list[int]) -> None:
        held = self._held.get((bot, author), {})
        for carrier in carrier_ids:
            held.pop(int(carrier), None)


class MemoryScopeMarks:
    def __init__(self, bots: Callable[[], list[str]]) -> None:
        self._bots = bots
        self._ready: set[tuple[str, str]] = set()
        self._mixed: set[str] = set()
        self._passes: dict[tuple[str, str], int] = {}

    def forget_known(self) -> None:
        """Nothing is cached here: every mark is read where it is kept."""

    def mark_ready(self, bot: str, kind: str) -> None:
        self._ready.add((bot, kind))

    def note_mixed(self, records: list[Record]) -> None:
        self._mixed.update(r.bot for r in records if r.server and r.project)

    def state(self, bot: str, kind: str) -> tuple[bool, bool]:
        return (bot, kind) in self._ready, bot in self._mixed

    def unscoped(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for bot in self._bots():
            for kind in KINDS:
                if (bot, kind) not in self._ready:
                    out.setdefault(bot, []).append(kind)
        return out

    def claim_stamp(self, bot: str, again_after_ms: int) -> bool:
        return self._claim_pass(bot, "stamp", again_after_ms)

    def claim_spread_pass(self, bot: str, again_after_ms: int) -> bool:
        return self._claim_pass(bot, "spread", again_after_ms)

    def _claim_pass(self, bot: str, which: str, again_after_ms: int) -> bool:
        now = now_ms()
        last = self._passes.get((bot, which))
        if last is not None and last >= now - again_after_ms:
            return False
        self._passes[bot, which] = now
        return True


class MemoryPending:
    def __init__(self, table: Table) -> None:
        self._table = table

    def mark_indexed(self, record: Record, vector_model: str | None) -> bool:
        def mark(row: Record) -> None:
            row.pending, row.vector_model = False, vector_model

        if not self._table.update(record, mark):
            return False
        mark(record)
        return True

    def mark_indexed_many(self, done: list[tuple[Record, str | None]]) -> list[Record]:
        return [record for record, model in done if not self.mark_indexed(record, model)]

    def mark_pending(self, record: Record) -> bool:
        if not self._table.update(record, lambda row: setattr(row, "pending", True)):
            return False
        record.pending = True
        return True

    def mark_pending_many(self, records: list[Record]) -> list[Record]:
        return [r for r in records if self.mark_pending(r)]

    def ids(self, bot: str, limit: int, after: int | None = None) -> list[int]:
        waiting = sorted(int(r.id) for r in self._table.of_bot(bot) if r.pending)
        return [i for i in waiting if not after or i > after][:limit]

    def bots(self) -> list[str]:
        with self._table.lock:
            return sorted({b for (b, _), r in self._table.rows.items() if r.pending})
