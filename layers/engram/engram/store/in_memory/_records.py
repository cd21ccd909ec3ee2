"""The memory records in memory (engram.ports.RecordsPort): the DynamoDB store's behaviour, its conditions
included (a change to a record deleted meanwhile is refused, a claim whose memory is gone is taken over),
held to it by tests/contracts/records.py. Every read is consistent: what the DynamoDB store's eventually
consistent indexes may miss for a moment, this one has at once."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from ...bookkeeping import JsonObject
from ...clock import now_ms
from ...errors import Unavailable
from ...line_spans import LineReader, Point, windows_of
from ...ports import RecordsPort, SpreadPass
from ...record import KINDS, NO_NARROWING, Duplicate, Listing, Paging, Record
from .. import keys
from ..budget import walk_kind
from ..claims import hold_key, let_go
from ..ids import MAX_ID, IdMaker
from ._ties import (
    MemoryCarriers,
    MemoryClaims,
    MemoryPending,
    MemoryScopeMarks,
    MemoryThreadTails,
    Table,
)


class _LineReads:
    """A step's line reads (ports.LineReader): exact here, every line held in memory."""

    def __init__(self, store: InMemoryRecords) -> None:
        self._store = store

    def around(self, line: str, points: list[Point], reach: int) -> list[int]:
        return windows_of(self._store.line_rows(line), points, reach)


def _span(rows: list[Point], low: int, high: int, reach: int) -> list[int]:
    """As the DynamoDB store reads a write's line: the rows from `low` to `high` and `reach` + 1 rows each
    side, each edge reaching on through the rows sharing its last one's millisecond."""
    before = _edge([r for r in rows if r[0] < low][::-1], reach)[::-1]
    after = _edge([r for r in rows if r[0] > high], reach)
    between = [r for r in rows if low <= r[0] <= high]
    return list(dict.fromkeys(i for _, i in [*before, *between, *after]))


def _edge(away: list[Point], reach: int) -> list[Point]:
    """The first `reach` + 1 rows going away from a span, and every row after them in the same millisecond
    as the last (the index orders a millisecond's rows by nothing: a window orders them by id)."""
    taken = away[: reach + 1]
    if len(taken) < reach + 1:
        return taken
    return taken + [r for r in away[reach + 1 :] if r[0] == taken[-1][0]]


def _listed(record: Record, kind: str, listing: Listing) -> bool:
    """Whether a listing of a kind holds this record (its id aside)."""
    return (
        record.kind == kind
        and listing.user in (None, record.user)
        and listing.server in (None, record.server)
        and listing.project in (None, record.project)
    )


def _shard(record: Record) -> int:
    """Which of its kind's listing keys a record sits under (a long pass reads one a part)."""
    every = keys.bot_kinds(record.bot, record.kind)
    return every.index(keys.bot_kind(record.bot, record.kind, int(record.id)))


class InMemoryRecords:
    """Every record in memory, and the claims, tails, carriers and scope marks beside them."""

    def __init__(self) -> None:
        self._table = Table()
        self._bots: set[str] = set()
        self.ids = IdMaker(lambda: 0)  # this store's id maker (public: a test pins its clock)
        self.claims = MemoryClaims(self._table)
        self.tails = MemoryThreadTails()
        self.carriers = MemoryCarriers()
        self.scopes = MemoryScopeMarks(self.bots)
        self.pending = MemoryPending(self._table)

    def register_bot(self, bot: str) -> None:
        if bot not in self._bots:
            self._bots.add(bot)
            for kind in KINDS:
                self.scopes.mark_ready(bot, kind)

    def bots(self) -> list[str]:
        return sorted(self._bots)

    def page(self, bot: str, kind: str, at: Paging) -> list[Record]:
        cursor, limit, shard = at.cursor, at.limit, at.shard
        rows = [r for r in self._table.of_bot(bot) if r.kind == kind and shard in (None, _shard(r))]
        if at.oldest_first:
            return [r for r in reversed(rows) if int(r.id) > (cursor or 0)][:limit]
        return [r for r in rows if int(r.id) < (cursor or MAX_ID + 1)][:limit]

    def line_rows(self, line: str) -> list[tuple[int, int]]:
        """A line's (createdAt, id), in order: what the byLine index holds of it."""
        with self._table.lock:
            return sorted(
                (int(r.created_at), int(r.id)) for r in self._table.rows.values() if r.stored_line == line
            )

    def line_reads(self) -> LineReader:
        return _LineReads(self)

    def line_ids(self, line: str, at: list[Point], reach: int, reads: LineReader | None) -> list[int]:
        """As the DynamoDB store: a step's windows through its reads; a write's span read afresh."""
        if reads is not None:
            return reads.around(line, at, reach)
        return _span(self.line_rows(line), min(c for c, _ in at), max(c for c, _ in at), reach)

    def line_first_ids(self, line: str, limit: int, written_before: int | None = None) -> list[int]:
        rows = self.line_rows(line)
        if written_before is not None:
            rows = [(at, i) for at, i in rows if at < written_before]
        return [memory_id for _, memory_id in rows[:limit]]

    def user_ids_oldest_first(self, bot: str, user: str, after_id: int | None, limit: int) -> list[int]:
        mine = sorted(int(r.id) for r in self._table.of_bot(bot) if r.user == user)
        return [i for i in mine if not after_id or i > after_id][:limit]

    def next_id(self) -> int:
        return self.ids.take(1)[0]

    def next_ids(self, n: int) -> list[int]:
        return self.ids.take(n)

    def clear_context(self, record: Record) -> bool:
        def clear(row: Record) -> None:
            row.drop_context()
            row.pending = True

        if not self._table.update(record, clear):
            return False
        record.drop_context()
        record.pending = True
        return True

    def _put_new(self, record: Record) -> bool:
        with self._table.lock:
            if (record.bot, int(record.id)) in self._table.rows:
                return False
            stored = copy.copy(record)
            stored.stored_line, stored.stored_scope = record.line, record.scope
            self._table.rows[record.bot, int(record.id)] = stored
            return True

    def create(self, record: Record) -> None:
        self.scopes.note_mixed([record])
        hold_key(self.claims, record)
        if not self._put_new(record):
            let_go(self.claims, [record])
            raise Unavailable(f"memory id {record.id} is taken by another writer; try again")
        record.stored_line, record.stored_scope = record.line, record.scope

    def create_many(self, records: list[Record]) -> list[Record]:
        self.scopes.note_mixed(records)
        claimed = [r for r in records if not (r.unique_key and self._claimed_by_another(r))]
        refused = [r for r in claimed if not self._put_new(r)]
        let_go(self.claims, refused)
        if refused:
            raise Unavailable(f"{len(refused)} memory ids were taken by another writer; try again")
        for r in claimed:
            r.stored_line, r.stored_scope = r.line, r.scope
        return claimed

    def _claimed_by_another(self, record: Record) -> bool:
        assert record.unique_key is not None
        return self.claims.claim(record.bot, record.unique_key, int(record.id), record.user) is not None

    def get(self, bot: str, memory_id: int) -> Record | None:
        return self._table.get(bot, memory_id)

    def batch_get(self, bot: str, ids: list[int]) -> dict[int, Record]:
        found = {int(i): self._table.get(bot, i) for i in ids}
        return {i: r for i, r in found.items() if r is not None}

    def existing(self, bot: str, ids: list[int]) -> set[int]:
        return {int(i) for i in ids if (bot, int(i)) in self._table.rows}

    def change_text(self, record: Record, text: str, unique_key: str | None) -> None:
        old_key, stamp = record.unique_key, now_ms()
        if unique_key and unique_key != old_key:
            holder = self.claims.claim(record.bot, unique_key, int(record.id), record.user)
            if holder is not None:
                raise Duplicate(holder)

        def change(row: Record) -> None:
            row.text, row.unique_key, row.updated_at, row.vector_model, row.pending = (
                text,
                unique_key,
                stamp,
                None,
                True,
            )
            row.versions = copy.deepcopy(record.versions)

        if not self._table.update(record, change):
            raise Unavailable(f"memory {record.id} was deleted meanwhile")
        change(record)
        if old_key and old_key != unique_key:
            self.claims.release(record.bot, old_key, int(record.id))

    def change_terms(self, record: Record, metadata: JsonObject | None, expires_at: int | None) -> bool:
        stamp = now_ms()

        def change(row: Record) -> None:
            row.metadata, row.expires_at = copy.deepcopy(metadata) or None, expires_at
            row.updated_at, row.pending = stamp, True
            row.versions = copy.deepcopy(record.versions)

        if not self._table.update(record, change):
            return False
        change(record)
        return True

    def change_message(self, record: Record, text: str, content: JsonObject | None) -> bool:
        stamp = now_ms()

        def change(row: Record) -> None:
            row.text, row.updated_at, row.vector_model, row.pending = text, stamp, None, True
            row.versions = copy.deepcopy(record.versions)
            if content is not None:
                row.content = copy.deepcopy(content)

        if not self._table.update(record, change):
            return False
        change(record)
        return True

    def delete(self, records: list[Record]) -> None:
        with self._table.lock:
            for record in records:
                self._table.rows.pop((record.bot, int(record.id)), None)
                self.claims.drop_held_by(record)

    def give_lines(self, records: list[Record]) -> list[Record]:
        def give(row: Record) -> None:
            row.stored_line = row.line

        lined = [r for r in records if r.line and self._table.update(r, give)]
        for r in lined:
            r.stored_line = r.line
        return lined

    def newest(self, bot: str, kind: str, limit: int, listing: Listing = NO_NARROWING) -> list[Record]:
        """As the DynamoDB store, every index at hand: `read_at_most` bounds nothing here (it bounds the
        work of a listing no index serves there)."""
        below = listing.before or MAX_ID + 1
        listed = [r for r in self._table.of_bot(bot) if _listed(r, kind, listing) and int(r.id) < below]
        return listed[:limit]

    def stamp_scopes(self, bot: str, kind: str, before: int | None, budget_s: float) -> int | None:
        def stamp(page: list[Record]) -> None:
            todo = [r for r in page if r.scope and r.stored_scope != r.scope]
            self.scopes.note_mixed(todo)
            for r in todo:
                self._table.update(r, lambda row: setattr(row, "stored_scope", row.scope))

        return walk_kind(self.page, bot, kind, (before, 500), budget_s, stamp)

    def iter_user(self, bot: str, user: str) -> list[int]:
        return sorted(int(r.id) for r in self._table.of_bot(bot) if r.user == user)

    def count_user(self, bot: str, user: str) -> int:
        return len(self.iter_user(bot, user))

    def spread_passes(self) -> list[SpreadPass]:
        """Nothing here was ever kept under one key per bot."""
        return []


# mypy holds InMemoryRecords to engram.ports.RecordsPort here (a Protocol is checked where it is used)
if TYPE_CHECKING:
    _conforms: RecordsPort = InMemoryRecords()
