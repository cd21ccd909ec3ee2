"""A memory's life after it is written: the caller's metadata and expiry changed, and memories whose time
ran out deleted by the sweep (as a single delete deletes one: records, points, the contexts that quoted
them, the words on disk). Reads never show an expired memory meanwhile (engram.reads)."""

from __future__ import annotations

from .clock import now_ms
from .domain import Memory, Terms, Version
from .errors import NotFound
from .reads import MemoryReads
from .text import format_memory_id
from .writes import MemoryWrites

# Expired memories deleted per bot per sweep: the rest wait for the next (reads hide them already)
EXPIRED_PER_SWEEP = 500


class Lifecycle:
    """relabel: a memory's metadata and expiry; history: what it said before; expire: the sweep's deletion
    of what ran out."""

    def __init__(self, writes: MemoryWrites, reads: MemoryReads) -> None:
        self.writes, self.reads = writes, reads
        self.records, self.state, self.indexer = writes.records, writes.state, writes.indexer

    def relabel(self, bot: str, memory_id: int, terms: Terms) -> Memory:
        """Replace a memory's metadata and expiry (an expiry must be ahead); its point carries them next."""
        terms = terms.checked(now_ms())
        record = self.records.get(bot, memory_id)
        if record is None or not self.records.change_terms(record, terms.metadata, terms.expires_at):
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        self.state.expiries.note([record])
        self.indexer.index_or_defer(bot, [record])
        return Memory.from_record(record)

    def history(self, bot: str, memory_id: int) -> list[Version]:
        """What a memory said before, newest first (its words withheld where the source withdrew them)."""
        record = self.records.get(bot, memory_id)
        if record is None or self.reads.hider(bot).record(record):
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        return [
            Version(text=v.get("text"), at=int(v.get("at") or 0), by=str(v.get("by") or ""))
            for v in reversed(record.versions or [])
        ]

    def clear_history(self, bot: str, memory_id: int) -> int:
        """Forget what a memory said before (its versions), keeping the memory; returns how many went. The
        old words leave the files on disk too (the local purge)."""
        record = self.records.get(bot, memory_id)
        if record is None or self.reads.hider(bot).record(record):
            raise NotFound(f"bot {bot!r} has no memory {format_memory_id(memory_id)}")
        cleared, record.versions = len(record.versions or []), None
        if cleared and self.records.change_terms(record, record.metadata, record.expires_at):
            self.writes.changed(bot)
        return cleared

    def expire_all(self) -> int:
        """The sweep's share: each bot's memories whose expiry came, a bounded page per bot."""
        now = now_ms()
        return sum(self.expire(bot, now) for bot in self.records.bots())

    def expire(self, bot: str, now: int | None = None, limit: int = EXPIRED_PER_SWEEP) -> int:
        """Delete the bot's memories whose expiry came by `now` (a bounded page of what came due); returns
        how many went. An entry whose memory is gone, or was given a later expiry, is only dropped."""
        now = now_ms() if now is None else now
        due = self.state.expiries.due(bot, now, limit)
        if not due:
            return 0
        found = self.records.batch_get(bot, [memory_id for _, memory_id in due])
        expired = [i for i, r in found.items() if r.expired(now)]
        removed = self.writes.remove_ids(bot, expired) if expired else 0
        self.state.expiries.drop(bot, due)
        return removed
