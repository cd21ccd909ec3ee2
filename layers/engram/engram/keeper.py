"""The index kept a faithful copy of the records (DynamoDB is the system of record): reconcile both ways,
and rebuild from the records, a page at a time, inline (the local stack's check at start) or as bounded
job steps that queue their continuation."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .clock import now_ms
from .indexing import Indexer
from .line_spans import LineReader
from .record import Paging
from .store import KINDS, Record, walk_kind
from .vectors import Scope

log = logging.getLogger(__name__)
PAGE = 200


def _label(action: str) -> str:
    """What the progress calls a pass of a maintenance action."""
    return "rebuilding" if action == "rebuild" else "reconciling"


@dataclass
class Progress:
    """What an index pass has done so far (for /healthz and the progress endpoint)."""

    action: str = "idle"  # idle | reconciling | rebuilding
    last: str | None = None  # the pass that finished last (reconciling | rebuilding)
    records: int = 0
    points: int = 0
    reindexed: int = 0
    orphans_deleted: int = 0
    lined: int = 0  # records stored before windows given their line (and windows)
    parts_left: int = 0  # of a pass run as jobs (IndexKeeper.step): parts queued and not done yet
    error: str | None = None
    started_ms: int | None = None
    finished_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class IndexKeeper:
    """Reconcile and rebuild, through one indexer. Pages are bounded, so each call fits a worker job."""

    indexer: Indexer
    progress: Progress = field(default_factory=Progress)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # parts of passes run as jobs, queued here and not done yet, per pass ("rebuilding", "reconciling"):
    # a pass run inline meanwhile (the local stack's check at start) replaces `progress`, never these
    _parts: dict[str, int] = field(default_factory=dict)

    def _running(self) -> str:
        """What the progress says runs once a pass ends: a pass whose parts are still out, or nothing."""
        return next((label for label, left in self._parts.items() if left), "idle")

    def bots(self) -> list[str]:
        """Every bot that has records."""
        return self.indexer.records.bots()

    def _pages(self, bot: str) -> Iterator[list[Record]]:
        """Every record of a bot, a page at a time, each kind newest first."""
        for kind in KINDS:
            before = None
            while page := self.indexer.records.page(bot, kind, Paging(before, PAGE)):
                self.progress.records += len(page)
                yield page
                if len(page) < PAGE:
                    break
                before = int(page[-1].id)

    def _reindex(
        self, records: list[Record], reads: LineReader | None = None, whole_pass: bool = False
    ) -> None:
        """Write these records' points again (those left incomplete, the embedder down, are marked pending
        for the sweep; one deleted meanwhile has its point taken back); `whole_pass`: a rebuild's page."""
        records = self.indexer.unforgotten(records)
        if records:
            self.indexer.index_records(records, reads=reads, whole_pass=whole_pass)
        self.progress.reindexed += len(records)

    # ----- reconcile ----------------------------------------------------------------------------------

    def reconcile_points(self, bot: str) -> int:
        """Delete the bot's points that have no record (left by a crash between the two stores)."""
        before = self.progress.orphans_deleted
        after = self._orphans_page(bot, None)
        while after is not None:
            after = self._orphans_page(bot, after)
        return self.progress.orphans_deleted - before

    def reconcile_records(self, bot: str) -> int:
        """Re-index the bot's records marked indexed whose point is missing; returns how many. Records
        stored before windows get their line on the way, and they and the points around them their
        windows."""
        return sum(self._reconcile_page(page) for page in self._pages(bot))

    def _reconcile_page(self, page: list[Record], reads: LineReader | None = None) -> int:
        indexed = [r for r in page if not r.pending]
        held = self.indexer.index.existing([int(r.id) for r in indexed])
        missing = [r for r in indexed if int(r.id) not in held]
        self._reindex(missing, reads)
        unlined = [r for r in page if r.line and r.stored_line != r.line]
        if unlined:
            self.progress.lined += len(self._give_lines(unlined))
        return len(missing)

    # ----- bounded steps: a pass split into jobs that each end in time and carry on from a cursor --------

    def begin_parts(self, action: str, parts: int) -> None:
        """A pass run as jobs queued `parts` more parts (0: a part of it runs here): this process's
        progress counts them down. A part of the pass that finished here last carries on its counts."""
        label = _label(action)
        with self._lock:
            if self.progress.action != label:
                if parts or self.progress.last != label:
                    self.progress = Progress(action=label, started_ms=now_ms(), last=self.progress.last)
                self.progress.action = label
            self._parts[label] = self._parts.get(label, 0) + parts
            self.progress.parts_left = sum(self._parts.values())

    def step(
        self,
        action: str,
        bot: str,
        part: str,
        cursor: int | None,
        budget_s: float,
        shard: int | None = None,
    ) -> int | None:
        """One bounded step of a reconcile or rebuild of one part of a bot (a kind's records under one of
        its keys, or under all with no `shard`, newest first; or its points, in id order): pages until
        `budget_s` has passed; returns where the next step starts (None: the part is done). Each page is
        idempotent, so a step retried from its cursor is safe."""
        self.begin_parts(action, 0)  # a part resumed in a process that did not queue it shows too
        following = self._step(action, bot, part, cursor, budget_s, shard)
        if following is None:
            label = _label(action)
            with self._lock:
                self._parts[label] = max(0, self._parts.get(label, 0) - 1)
                self.progress.parts_left = sum(self._parts.values())
                if self._parts[label] == 0:
                    self.progress.last, self.progress.finished_ms = label, now_ms()
                    self.progress.action = self._running()
        return following

    def _step(
        self, action: str, bot: str, part: str, cursor: int | None, budget_s: float, shard: int | None
    ) -> int | None:
        if part == "points":
            deadline = time.monotonic() + budget_s
            after = cursor
            while True:
                after = self._orphans_page(bot, after)
                if after is None or time.monotonic() >= deadline:
                    return after

        reads = (
            self.indexer.records.line_reads()
        )  # the step's pages meet the same lines: each is read once for all of them

        def one(page: list[Record]) -> None:
            self.progress.records += len(page)
            if action == "rebuild":
                self._reindex(page, reads, whole_pass=True)
            else:
                self._reconcile_page(page, reads)

        return walk_kind(self.indexer.records.page, bot, part, (cursor, PAGE), budget_s, one, shard=shard)

    def _orphans_page(self, bot: str, after: int | None) -> int | None:
        """Delete the orphan points of one page of the bot's points; where the next page starts."""
        ids, following = self.indexer.index.scroll_ids(Scope(bot=bot), after, PAGE)
        if ids:
            present = self.indexer.records.batch_get(bot, ids)
            orphans = [i for i in ids if i not in present]
            if orphans:
                self.indexer.index.delete(orphans)
            self.progress.points += len(ids)
            self.progress.orphans_deleted += len(orphans)
        return following

    def _give_lines(self, records: list[Record]) -> list[Record]:
        lined = self.indexer.records.give_lines(self.indexer.unforgotten(records))
        self.indexer.rewindow(lined, with_self=True)
        return lined

    def reconcile(self, bot: str | None = None) -> dict[str, Any]:
        """Both ways, for one bot or all: orphan points deleted, missing points written again."""
        return self._pass("reconciling", bot, lambda b: (self.reconcile_points(b), self.reconcile_records(b)))

    # ----- rebuild ------------------------------------------------------------------------------------

    def rebuild(self, bot: str | None = None) -> dict[str, Any]:
        """Write every record's point again from DynamoDB (the collection may be empty or gone)."""

        def one(b: str) -> None:
            for page in self._pages(b):
                self._reindex(page, whole_pass=True)
            self.reconcile_points(b)

        return self._pass("rebuilding", bot, one)

    def needs_rebuild(self) -> bool:
        """An empty index next to records: the index was lost (deleted, or a new Qdrant)."""
        if self.indexer.index.count(Scope(bot=None)) > 0:
            return False
        return any(self.indexer.records.page(b, k, Paging(None, 1)) for b in self.bots() for k in KINDS)

    def _pass(self, action: str, bot: str | None, run: Callable[[str], object]) -> dict[str, Any]:
        with self._lock:
            self.progress = Progress(action=action, started_ms=now_ms(), parts_left=sum(self._parts.values()))
            try:
                for b in [bot] if bot else self.bots():
                    run(b)
            except Exception as exc:  # Qdrant or DynamoDB down: say so, the next pass picks it up
                self.progress.error = str(exc)
                log.warning("index %s stopped: %s", action, exc)
            finally:
                self.progress.finished_ms = now_ms()
                self.progress.last = action
                done = self.progress.as_json()
                self.progress.action = self._running()
            return done
