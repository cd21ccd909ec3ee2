"""Which records still wait for their point (or their dense vector): the sparse `pending` index, marked
as the indexer writes points and read by the sweep that queues what waits."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Protocol

from ..record import Record
from . import keys
from .dynamo import guard
from .models import MemoryRecord
from .rows import _merged, _pending_key, _update_if_exists


def _marked_so(record: Record, vector_model: str | None) -> bool:
    """Whether the record is marked indexed with that model already (nothing to write)."""
    return not record.pending and record.vector_model == vector_model


class Existing(Protocol):
    """What marking reads of the records (the record store)."""

    def existing(self, bot: str, ids: list[int]) -> set[int]: ...


class PendingMarks:
    """The records waiting for vectors, marked and read."""

    def __init__(self, records: Existing, pool: ThreadPoolExecutor) -> None:
        self._records = records
        self._pool = pool

    _guard = staticmethod(guard)

    def mark_indexed(self, record: Record, vector_model: str | None) -> bool:
        """The record's point is written (with a dense vector of that model, when given);
        False when the record no longer exists."""
        marked = _update_if_exists(
            record,
            [
                MemoryRecord.pending_bot.remove(),
                MemoryRecord.vector_model.set(vector_model)
                if vector_model
                else MemoryRecord.vector_model.remove(),
            ],
        )
        if marked:
            record.pending, record.vector_model = False, vector_model
        return marked

    def mark_indexed_many(self, done: list[tuple[Record, str | None]]) -> list[Record]:
        """mark_indexed for many records, several requests in flight; returns the records that no longer
        exist. A record already marked so (a rebuild, a reconcile, a re-index of an indexed record) needs
        no write: whether it still exists is read instead, a hundred keys a request."""
        unchanged = [r for r, model in done if _marked_so(r, model)]
        changed = [(r, model) for r, model in done if not _marked_so(r, model)]
        marked = list(self._pool.map(lambda pair: self.mark_indexed(*pair), changed))
        gone = [record for (record, _), ok in zip(changed, marked, strict=True) if not ok]
        if unchanged:
            present = self._records.existing(unchanged[0].bot, [int(r.id) for r in unchanged])
            gone += [r for r in unchanged if int(r.id) not in present]
        return gone

    def mark_pending(self, record: Record) -> bool:
        """The record still needs its point (or its dense vector) written; False when it no longer exists
        (an update without the condition would write a stub of a deleted memory back)."""
        if not _update_if_exists(record, [MemoryRecord.pending_bot.set(_pending_key(record))]):
            return False
        record.pending = True
        return True

    def mark_pending_many(self, records: list[Record]) -> list[Record]:
        """mark_pending for each, several requests in flight (as mark_indexed_many); returns the records
        that still exist."""
        marked = list(self._pool.map(self.mark_pending, records))
        return [r for r, still in zip(records, marked, strict=True) if still]

    def ids(self, bot: str, limit: int, after: int | None = None) -> list[int]:
        """Ids of a bot's records waiting for vectors (above `after`), oldest first."""
        condition = MemoryRecord.id > after if after else None
        size = max(10, min(500, limit // 4 + 1))
        queries = [
            MemoryRecord.pending.query(key, condition, page_size=size) for key in keys.pending_keys(bot)
        ]
        return self._guard(lambda: [int(r.id) for r in islice(_merged(queries, newest_first=False), limit)])

    def bots(self) -> list[str]:
        """Bots that have records waiting for vectors (a scan of the sparse index: small by design)."""
        return self._guard(lambda: sorted({keys.bot_of(r.pending_bot) for r in MemoryRecord.pending.scan()}))
