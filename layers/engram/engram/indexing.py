"""Keeping the vector index a faithful copy of the records (DynamoDB is the system of record; Qdrant
holds derived data): reconcile both ways, and rebuild from the records, a page at a time."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .records import MemoryRecord, now_ms
from .service import KINDS, MemoryService
from .vectors import Scope

log = logging.getLogger(__name__)
PAGE = 200


@dataclass
class Progress:
    """What an index pass has done so far (for /healthz and the progress endpoint)."""

    action: str = "idle"  # idle | reconciling | rebuilding
    records: int = 0
    points: int = 0
    reindexed: int = 0
    orphans_deleted: int = 0
    error: str | None = None
    started_ms: int | None = None
    finished_ms: int | None = None

    def as_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class IndexKeeper:
    """Reconcile and rebuild, on one service. Pages are bounded, so each call fits a worker job."""

    service: MemoryService
    progress: Progress = field(default_factory=Progress)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bots(self) -> list[str]:
        """Every bot that has records."""
        return self.service.records.bots()

    def _pages(self, bot: str) -> Iterator[list[MemoryRecord]]:
        """Every record of a bot, a page at a time, each kind newest first."""
        for kind in KINDS:
            before = None
            while page := self.service.records.page(bot, kind, before, PAGE):
                self.progress.records += len(page)
                yield page
                if len(page) < PAGE:
                    break
                before = int(page[-1].id)

    def _reindex(self, records: list[MemoryRecord]) -> None:
        """Write these records' points again; pending first, so if the embedder is down the sweep finishes."""
        for record in records:
            self.service.records.mark_pending(record)
        if records:
            self.service.index_records(records)
        self.progress.reindexed += len(records)

    # ----- reconcile ----------------------------------------------------------------------------------

    def reconcile_points(self, bot: str) -> int:
        """Delete the bot's points that have no record (left by a crash between the two stores)."""
        deleted, after = 0, None
        while True:
            ids, after = self.service.index.scroll_ids(Scope(bot=bot), after, PAGE)
            if ids:
                present = self.service.records.batch_get(bot, ids)
                orphans = [i for i in ids if i not in present]
                if orphans:
                    self.service.index.delete(orphans)
                    deleted += len(orphans)
                self.progress.points += len(ids)
                self.progress.orphans_deleted += len(orphans)
            if after is None:
                return deleted

    def reconcile_records(self, bot: str) -> int:
        """Re-index the bot's records marked indexed whose point is missing; returns how many."""
        fixed = 0
        for page in self._pages(bot):
            indexed = [r for r in page if not r.pending_bot]
            held = self.service.index.existing([int(r.id) for r in indexed])
            missing = [r for r in indexed if int(r.id) not in held]
            self._reindex(missing)
            fixed += len(missing)
        return fixed

    def reconcile(self, bot: str | None = None) -> dict:
        """Both ways, for one bot or all: orphan points deleted, missing points written again."""
        return self._pass("reconciling", bot, lambda b: (self.reconcile_points(b), self.reconcile_records(b)))

    # ----- rebuild ------------------------------------------------------------------------------------

    def rebuild(self, bot: str | None = None) -> dict:
        """Write every record's point again from DynamoDB (the collection may be empty or gone)."""

        def one(b: str) -> None:
            for page in self._pages(b):
                self._reindex(page)
            self.reconcile_points(b)

        return self._pass("rebuilding", bot, one)

    def needs_rebuild(self) -> bool:
        """An empty index next to records: the index was lost (deleted, or a new Qdrant)."""
        if self.service.index.count(Scope(bot=None)) > 0:
            return False
        return any(self.service.records.page(b, k, None, 1) for b in self.bots() for k in KINDS)

    def _pass(self, action: str, bot: str | None, run: Callable[[str], object]) -> dict:
        with self._lock:
            self.progress = Progress(action=action, started_ms=now_ms())
            try:
                for b in [bot] if bot else self.bots():
                    run(b)
            except Exception as exc:  # Qdrant or DynamoDB down: say so, the next pass picks it up
                self.progress.error = str(exc)
                log.warning("index %s stopped: %s", action, exc)
            finally:
                self.progress.finished_ms = now_ms()
                done = self.progress.as_json()
                self.progress.action = "idle"
            return done
