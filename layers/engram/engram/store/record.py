"""A memory record as the rest of engram holds it (a plain dataclass), and its mapping to and from the
table's rows: only this package knows the rows."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pynamodb.expressions.update import Action

from ..clock import now_ms
from . import keys
from .dynamo import update_if_exists
from .models import MemoryRecord

KINDS = ("fact", "message")


@dataclass(frozen=True, slots=True)
class Duplicate(Exception):
    """A unique key is already held by another memory."""

    memory_id: int


_unique_pk = keys.unique_pk


@dataclass(slots=True)
class Record:
    """One memory as the store holds it: a fact, or a stored chat message with its whole content. A plain
    object: what the rest of engram reads and hands back; only this package knows the table's rows."""

    bot: str
    id: int
    kind: str
    text: str
    saved_by: str
    created_at: int
    updated_at: int
    user: str | None = None
    server: str | None = None
    project: str | None = None
    content: Any = None
    source_id: str | None = None
    unique_key: str | None = None
    thread: str | None = None
    context: str | None = None
    # whose words the context is, and from which record: what a forget, delete or change clears
    context_author: str | None = None
    context_source: int | None = None
    # the model of the dense vector its point was written with (re-embedding asks the index, not this)
    vector_model: str | None = None
    # when engram received it (ms): what a forget is compared with, never a time the caller gave
    received_at: int | None = None
    pending: bool = True  # its point (or its dense vector) is still to be written
    # the line its row holds: None for a record stored before windows (a reconcile gives it its line)
    stored_line: str | None = None
    # the byScope key its row holds: None for a record stored before byScope (the stamp pass gives it)
    stored_scope: str | None = None

    @property
    def scope(self) -> str | None:
        """The key it is listed under in its server (or project): byScope."""
        return keys.record_scope(self.bot, self.kind, self.server, self.project)

    @property
    def arrived(self) -> int:
        """When engram received it; records written before `received_at` existed fall back to created_at."""
        return self.received_at if self.received_at is not None else int(self.created_at)

    @property
    def line(self) -> str | None:
        """The line its window is read along: its thread, or a fact's author and scope (byLine)."""
        return keys.record_line(self.bot, self.kind, self.thread, self.server, self.project, self.user)

    def drop_context(self) -> None:
        """The context is cleared (in the table too: see RecordStore.clear_context)."""
        self.context = self.context_author = None
        self.context_source = None


_FIELDS = tuple(f for f in Record.__slots__ if f not in ("pending", "stored_line", "stored_scope"))


def drew_on(record: Record) -> list[str]:
    """Whose words an /ask answer was made from (its content's drewOn), if it is one."""
    users = record.content.get("drewOn") if isinstance(record.content, dict) else None
    return [str(u) for u in users if u] if isinstance(users, list) else []


def reply_author(record: Record) -> str | None:
    """Whom a stored chat message replies to (its content's replyTo.authorId), if anyone."""
    reply = record.content.get("replyTo") if isinstance(record.content, dict) else None
    author = reply.get("authorId") if isinstance(reply, dict) else None
    return str(author) if author else None


def _record(row: MemoryRecord) -> Record:
    values: dict[str, Any] = {f: getattr(row, f) for f in _FIELDS}
    values["bot"], values["id"] = keys.bot_of(row.bot), int(row.id)
    values["created_at"], values["updated_at"] = int(row.created_at), int(row.updated_at)
    if row.context_source is not None:
        values["context_source"] = int(row.context_source)
    if row.received_at is not None:
        values["received_at"] = int(row.received_at)
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


def _pending_key(record: Record) -> str:
    return keys.pending_key(record.bot, int(record.id))


def _merged(
    queries: list[Any], newest_first: bool, read_at_most: int | None = None, page_size: int = 0
) -> Iterator[MemoryRecord]:
    """The rows of several queries of one index (a bot's shards), merged by id, read a page at a time
    as they are taken; with `read_at_most` (and the queries' `page_size`), no query asks for a page that
    could take the items read in all, matching a filter or not, past that many."""
    scanned = [0]

    def rows(query: Any) -> Iterator[MemoryRecord]:
        pages = iter(query.page_iter)
        while read_at_most is None or scanned[0] + page_size <= read_at_most:
            page = next(pages, None)
            if page is None:
                return
            scanned[0] += int(page.get("ScannedCount") or 0)
            for item in page.get("Items") or []:
                yield MemoryRecord.from_raw_data(item)

    order = (lambda r: -int(r.id)) if newest_first else (lambda r: int(r.id))
    return heapq.merge(*(rows(q) for q in queries), key=order)


def _update_if_exists(record: Record, actions: Sequence[Action]) -> bool:
    return update_if_exists(_key(record), MemoryRecord.id.exists(), actions)


def new_record(
    bot: str,
    memory_id: int,
    kind: str,
    text: str,
    *,
    user: str | None = None,
    saved_by: str = "owner",
    created_at: int,
    updated_at: int,
    **fields: Any,
) -> Record:
    """A record not yet written (marked pending: its point comes next)."""
    return Record(
        bot=bot,
        id=memory_id,
        kind=kind,
        text=text,
        user=user,
        saved_by=saved_by,
        created_at=created_at,
        updated_at=updated_at,
        received_at=now_ms(),
        **fields,
    )
