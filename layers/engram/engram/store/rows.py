"""A memory record's mapping to and from the table's rows (the record itself is engram.record): only
this package knows the rows."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pynamodb.expressions.update import Action

from ..record import Record, field_names
from . import keys
from .dynamo import update_if_exists
from .models import MemoryRecord

_FIELDS = tuple(f for f in field_names(Record) if f not in ("pending", "stored_line", "stored_scope"))


def _record(row: MemoryRecord) -> Record:
    values: dict[str, Any] = {f: getattr(row, f) for f in _FIELDS}
    values["bot"], values["id"] = keys.bot_of(row.bot), int(row.id)
    values["created_at"], values["updated_at"] = int(row.created_at), int(row.updated_at)
    if row.context_source is not None:
        values["context_source"] = int(row.context_source)
    if row.received_at is not None:
        values["received_at"] = int(row.received_at)
    if row.expires_at is not None:
        values["expires_at"] = int(row.expires_at)
    return Record(**values, pending=bool(row.pending_bot), stored_line=row.line, stored_scope=row.scope)


def _row(record: Record) -> MemoryRecord:
    return MemoryRecord(
        **{f: getattr(record, f) for f in _FIELDS if f != "bot"},
        bot=keys.record_pk(record.bot, int(record.id)),
        bot_user=keys.bot_user(record.bot, record.user),
        bot_kind=keys.bot_kind(record.bot, record.kind, int(record.id)),
        pending_bot=_pending_key(record) if record.pending else None,
        line=record.line,
        scope=record.scope,
    )


def _key(record: Record) -> MemoryRecord:
    """A row with only the record's key: enough to update or delete it."""
    return MemoryRecord(keys.record_pk(record.bot, int(record.id)), record.id)


def _keys(bot: str, ids: Iterable[int]) -> list[tuple[str, int]]:
    """The table keys of a bot's records, by id."""
    return [(keys.record_pk(bot, int(i)), int(i)) for i in ids]


def in_order(found: dict[int, Record], ids: list[int]) -> list[Record]:
    """The records found, in the order of `ids` (one not found, deleted since, left out)."""
    return [found[i] for i in ids if i in found]


def _pending_key(record: Record) -> str:
    return keys.pending_key(record.bot, int(record.id))


# A bot's kind is spread over keys.READ_SHARDS keys, and a merged read needs the first page of each before
# it can yield its first row: asked one after another, a listing waits for nine of DynamoDB's round trips;
# asked together, for about one. Its own pool: a page read there never waits on other work in it.
_FIRST_PAGES = ThreadPoolExecutor(max_workers=keys.READ_SHARDS, thread_name_prefix="first-page")


def _merged(
    queries: list[Any], newest_first: bool, read_at_most: int | None = None, page_size: int = 0
) -> Iterator[MemoryRecord]:
    """The rows of several queries of one index (a bot's shards), merged by id, read a page at a time
    as they are taken, every query's first page at once; with `read_at_most` (and the queries'
    `page_size`), no query asks for a page that could take the items read in all, matching a filter or
    not, past that many (and pages are asked in turn)."""
    scanned = [0]
    pages = [iter(query.page_iter) for query in queries]
    # with a budget a query may read past its first page (a filter that matched none of it) before the
    # next query's first page, which the budget may then forbid: those are asked in turn
    together = read_at_most is None and len(pages) > 1
    first: list[Future[Any] | None] = [
        _FIRST_PAGES.submit(next, p, None) if together else None for p in pages
    ]

    def rows(n: int) -> Iterator[MemoryRecord]:
        while read_at_most is None or scanned[0] + page_size <= read_at_most:
            ahead, first[n] = first[n], None
            page = ahead.result() if ahead is not None else next(pages[n], None)
            if page is None:
                return
            scanned[0] += int(page.get("ScannedCount") or 0)
            for item in page.get("Items") or []:
                yield MemoryRecord.from_raw_data(item)

    order = (lambda r: -int(r.id)) if newest_first else (lambda r: int(r.id))
    return heapq.merge(*(rows(n) for n in range(len(queries))), key=order)


def _update_if_exists(record: Record, actions: Sequence[Action]) -> bool:
    return update_if_exists(_key(record), MemoryRecord.id.exists(), actions)
