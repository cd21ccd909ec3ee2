"""DynamoDB, the system of record (pynamodb): memory records, unique keys, counters, thread tails and
the index of which records carry whose words."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Any

from pynamodb.expressions.update import Action

from ..bookkeeping import JsonObject, ThreadTail
from ..errors import Unavailable
from . import keys
from .budget import StepBudget
from .dynamo import attempt, guard, update_if_exists
from .ids import IdMaker
from .lines import LineReads, span_ids
from .models import MemoryRecord, StateItem
from .spread import claim_keys, tail_keys
from .state._items import batch_get as _batch_get_state
from .state._items import get as _get_state

KINDS = ("fact", "message")


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, how records keep time."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Duplicate(Exception):
    """A unique key is already held by another memory."""

    memory_id: int


# A claim younger than this whose record is missing belongs to a write still in flight.
CLAIM_IN_FLIGHT_MS = 30_000
# Records read per page of a stamp pass (byScope keys given to records stored before it)
STAMP_PAGE = 500


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


def _tail(data: dict[str, Any]) -> ThreadTail:
    memory_id = data.get("id")
    return ThreadTail(
        text=data.get("text"),
        at=int(data.get("at") or 0),
        user=data.get("user"),
        id=int(memory_id) if memory_id is not None else None,
    )


class RecordStore:
    """Reads and writes memory records. No transactions (the local DynamoDB has none): every multi-item
    change is a sequence of conditional single-item writes that a crash can stop anywhere safely."""

    def __init__(self) -> None:
        # DynamoDB has no batch conditional write: per-item requests for a batch go out side by side.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dynamodb")
        self._bots: set[str] = set()
        self._ids = IdMaker(self._take_worker)
        self._scoped: set[tuple[str, str]] = set()  # scopes_ready / mixed_scopes keys known set (they stay)
        self.claim_keys = claim_keys()  # where claims sit (spread; older ones under the plain key)
        self.tail_keys = tail_keys()  # where thread tails sit (the same)

    _guard = staticmethod(guard)

    def register_bot(self, bot: str) -> None:
        """Remember that a bot has records (once per process), for jobs that walk every bot. A bot new
        here has every record written with its byScope key: its scoped listings use the index at once."""
        if bot in self._bots:
            return
        first = StateItem(*keys.bot_registered(bot))
        if attempt(lambda: first.save(condition=StateItem.pk.does_not_exist())):
            for kind in KINDS:
                self.mark_scopes_ready(bot, kind)
        self._bots.add(bot)

    def mark_scopes_ready(self, bot: str, kind: str) -> None:
        """Every record of the bot's kind carries its byScope key (see keys.scopes_ready)."""
        self._mark_scoped(keys.scopes_ready(bot, kind))

    def _mark_scoped(self, key: tuple[str, str]) -> None:
        if key not in self._scoped:
            self._guard(lambda: StateItem(*key, value=now_ms()).save())
            self._scoped.add(key)

    def _note_mixed(self, records: list[Record]) -> None:
        """A record naming a server and a project is listed under its server: say so before it is written
        (a project's listing then reads the kind's index as well, and misses nothing)."""
        for r in records:
            if r.server and r.project:
                self._mark_scoped(keys.mixed_scopes(r.bot))

    def _scoped_state(self, bot: str, kind: str) -> tuple[bool, bool]:
        """(every record of the kind carries its byScope key, some record names a server and a project)."""
        wanted = [keys.scopes_ready(bot, kind), keys.mixed_scopes(bot)]
        unknown = [k for k in wanted if k not in self._scoped]
        if unknown:
            found = self._guard(lambda: {(i.pk, i.sk) for i in StateItem.batch_get(unknown)})
            self._scoped.update(found)
        return wanted[0] in self._scoped, wanted[1] in self._scoped

    def bots(self) -> list[str]:
        """Every bot that has records (what register_bot wrote), for jobs that walk every bot."""
        return self._guard(lambda: sorted(i.sk for i in StateItem.query("bots")))

    def page(
        self,
        bot: str,
        kind: str,
        cursor: int | None,
        limit: int,
        oldest_first: bool = False,
        shard: int | None = None,
    ) -> list[Record]:
        """Up to `limit` records of a kind past `cursor` (all when None): newest first with ids below it,
        or with `oldest_first` ids above it; with `shard`, only those under that one of the kind's keys
        (keys.READ_SHARDS: a long pass reads them in parallel parts)."""
        condition = None
        if cursor:
            condition = MemoryRecord.id > cursor if oldest_first else MemoryRecord.id < cursor
        # each shard is read a quarter page at a time: the merged page costs about a page, not one a shard
        size = max(10, min(500, limit if shard is not None else limit // 4 + 1))
        queries = [
            MemoryRecord.by_kind.query(
                key, range_key_condition=condition, scan_index_forward=oldest_first, page_size=size
            )
            for key in keys.bot_kinds(bot, kind, shard)
        ]
        rows = self._guard(lambda: list(islice(_merged(queries, not oldest_first), limit)))
        return [_record(row) for row in rows]

    def line_around(
        self,
        records: list[Record],
        reach: int,
        reads: LineReads | None = None,
        beside: Sequence[Record] = (),
    ) -> dict[str, list[Record]]:
        """For each line (thread; a fact's author and scope) of these records, its records from `reach`
        before the first of them to `reach` after the last, in time order: what their windows, and their
        neighbours' windows, are made of. Read from the byLine index (eventually consistent: a record
        written a moment ago may be missing; the caller places the records it holds itself). `reads`: a
        maintenance step's reads, each line read once for all its pages, and only the records within `reach`
        of these (a page's records of a line lie far apart: the records between them are not read, and the
        line given holds gaps no window crosses; store/lines.py); `beside`: records the step read a moment
        ago (the pages either side of these), taken as they were read."""
        points: dict[str, list[tuple[int, int]]] = {}
        for r in records:
            if r.line:
                points.setdefault(r.line, []).append((int(r.created_at), int(r.id)))
        if not points:
            return {}
        bot = records[0].bot
        ids = {
            line: self._guard(partial(self._line_ids, line, at, reach, reads)) for line, at in points.items()
        }
        # the records given are current: only their neighbours are read
        found = {int(r.id): r for r in (*beside, *records)}
        wanted = {i for line_ids in ids.values() for i in line_ids} - set(found)
        found.update(self.batch_get(bot, sorted(wanted)) if wanted else {})
        return {
            line: sorted(
                (found[i] for i in line_ids if i in found), key=lambda r: (int(r.created_at), int(r.id))
            )
            for line, line_ids in ids.items()
        }

    @staticmethod
    def _line_ids(line: str, points: list[tuple[int, int]], reach: int, reads: LineReads | None) -> list[int]:
        """A write's line read afresh, the span of its records and `reach` + 1 turns each side; a step's,
        the windows of its records only (store/lines.py)."""
        if reads is not None:
            return reads.around(line, points, reach)
        return span_ids(line, min(c for c, _ in points), max(c for c, _ in points), reach)

    def user_ids_oldest_first(self, bot: str, user: str, after_id: int | None, limit: int) -> list[int]:
        """Up to `limit` ids of a user's records above `after_id`, oldest first (the user index)."""
        condition = MemoryRecord.id > after_id if after_id else None
        return self._guard(
            lambda: [
                int(r.id)
                for r in MemoryRecord.by_user.query(
                    keys.bot_user(bot, user),
                    range_key_condition=condition,
                    scan_index_forward=True,
                    limit=limit,
                )
            ][:limit]
        )

    def next_id(self) -> int:
        """A new memory id (time-ordered; see ids.py)."""
        return self._ids.take(1)[0]

    def next_ids(self, n: int) -> list[int]:
        """`n` new ascending memory ids, made in this process: no request, no shared counter."""
        return self._ids.take(n)

    def _take_worker(self) -> int:
        """This process's worker number for its ids: one atomic add, once per process."""

        def bump() -> int:
            item = StateItem(*keys.ID_WORKERS)
            item.update(actions=[StateItem.value.add(1)])
            return int(item.value)

        return self._guard(bump)

    def thread_tails(self, bot: str, threads: list[str]) -> dict[str, ThreadTail]:
        """The newest stored message of each thread."""
        newest: dict[str, StateItem] = {}
        for item in self._tail_items(bot, threads):
            # under the spread key and the plain one until the spread pass: the newer one is the tail
            if item.sk not in newest or int(item.value or 0) > int(newest[item.sk].value or 0):
                newest[item.sk] = item
        return {t: _tail(item.data or {}) for t, item in newest.items()}

    def _tail_items(self, bot: str, threads: list[str]) -> list[StateItem]:
        """Every tail item of these threads, under whichever of their keys."""
        wanted = [(pk, t) for t in dict.fromkeys(threads) for pk in self.tail_keys.lookups(bot, t)]
        out: list[StateItem] = []
        for start in range(0, len(wanted), 100):
            out += self._guard(partial(_batch_get_state, wanted[start : start + 100]))
        return out

    def advance_thread_tail(
        self, bot: str, thread: str, at: int, text: str, user: str | None = None, memory_id: int | None = None
    ) -> None:
        """Remember a thread's newest message (whose words, and which record), unless a newer one is."""
        item = StateItem(
            keys.thread_tail_pk(bot, thread),
            thread,
            value=at,
            data={"text": text, "at": at, "user": user, "id": memory_id},
        )
        attempt(lambda: item.save(condition=StateItem.value.does_not_exist() | (StateItem.value <= at)))

    def drop_thread_tails(
        self, bot: str, threads: list[str], user: str | None = None, memory_id: int | None = None
    ) -> int:
        """Forget the remembered newest text of these threads where that user wrote it (or where it is
        that record's text); returns how many were dropped."""
        # each item on its own (a plain one not moved yet may hold their words under a newer spread one)
        mine = [
            (i.pk, i.sk)
            for i in self._tail_items(bot, threads)
            if (user is not None and (i.data or {}).get("user") == user)
            or (memory_id is not None and (i.data or {}).get("id") == memory_id)
        ]

        def run() -> None:
            with StateItem.batch_write() as batch:
                for pk, thread in mine:
                    batch.delete(StateItem(pk, thread))

        if mine:
            self._guard(run)
        return len({thread for _, thread in mine})

    # ----- contexts: which records quote whose words -----------------------------------------------

    def note_carriers(self, records: list[Record]) -> None:
        """For every record whose context quotes someone else, an item under that author: so a forget, a
        delete or a change can find the records that carry those words."""
        # an imported context knows its author but not always its source record: noted all the same
        notes = [
            (r.context_author, r)
            for r in records
            if r.context and (r.context_source is not None or r.context_author)
        ]
        # a reply names whom it answers (content.replyTo.authorId): a forget of them clears that too
        notes += [
            (reply_author(r), r)
            for r in records
            if reply_author(r) not in (None, r.user)
            and not (r.context and reply_author(r) == r.context_author)
        ]
        # an /ask answer names whose words the model was given: a forget of any of them removes it
        noted = {(author, int(r.id)) for author, r in notes}
        notes += [(a, r) for r in records for a in drew_on(r) if a != r.user and (a, int(r.id)) not in noted]

        def run() -> None:
            with StateItem.batch_write() as batch:
                for author, r in notes:
                    batch.save(
                        StateItem(
                            keys.carriers_pk(r.bot, author),
                            keys.carrier_sk(int(r.id)),
                            memory_id=r.context_source if author == r.context_author else None,
                        )
                    )

        if notes:
            self._guard(run)

    def carriers(self, bot: str, author: str | None, source: int | None = None) -> list[int]:
        """Ids of records whose context quotes this author (only from this source record, if given)."""
        condition = StateItem.memory_id == source if source is not None else None
        return self._guard(
            lambda: [
                int(i.sk) for i in StateItem.query(keys.carriers_pk(bot, author), filter_condition=condition)
            ]
        )

    def drop_carriers(self, bot: str, author: str | None, carrier_ids: list[int]) -> None:
        """The carriers no longer quote this author."""

        def run() -> None:
            with StateItem.batch_write() as batch:
                for carrier in carrier_ids:
                    batch.delete(StateItem(keys.carriers_pk(bot, author), keys.carrier_sk(carrier)))

        if carrier_ids:
            self._guard(run)

    def clear_context(self, record: Record) -> bool:
        """Drop a record's context (and mark it pending: its point is made again without it); False when
        the record no longer exists."""
        cleared = _update_if_exists(
            record,
            [
                MemoryRecord.context.remove(),
                MemoryRecord.context_author.remove(),
                MemoryRecord.context_source.remove(),
                MemoryRecord.pending_bot.set(_pending_key(record)),
            ],
        )
        if cleared:
            record.drop_context()
            record.pending = True
        return cleared

    # ----- unique keys ---------------------------------------------------------------------------
    # A claim (StateTable item) says which memory holds a unique key: a fact's folded text in its scope,
    # or a message's source id. It is valid only while that memory exists and still holds the key, so
    # a claim left behind by a crash is simply taken over. No multi-item transactions: dynalite has
    # none, and on AWS they would double the write cost.

    def _holder(self, bot: str, key: str, memory_id: int) -> Record | None:
        record = self.get(bot, memory_id)
        return record if record is not None and record.unique_key == key else None

    def find_unique(self, bot: str, key: str) -> Record | None:
        """The memory that holds a unique key, if any."""
        return self._holders(bot, [key]).get(key)

    def find_uniques(self, bot: str, unique_keys: list[str]) -> dict[str, int]:
        """The memory ids holding any of these unique keys (batch reads; stale claims left out)."""
        return {k: int(r.id) for k, r in self._holders(bot, unique_keys).items()}

    def _holders(self, bot: str, unique_keys: list[str]) -> dict[str, Record]:
        """The records holding any of these unique keys, by key (stale claims left out)."""
        wanted = list(dict.fromkeys(unique_keys))
        if not wanted:
            return {}
        lookups = [(pk, k) for k in wanted for pk in self.claim_keys.lookups(bot, k)]
        found: dict[str, int] = {}
        for start in range(0, len(lookups), 100):
            chunk = lookups[start : start + 100]
            for i in self._guard(partial(_batch_get_state, chunk)):
                # under the spread key and the plain one only while a move is cut off: the same memory
                found.setdefault(i.sk, int(i.memory_id))
        records = self.batch_get(bot, list(set(found.values()))) if found else {}
        return {k: records[i] for k, i in found.items() if i in records and records[i].unique_key == k}

    def _plain_holder(self, bot: str, key: str) -> int | None:
        """A claim on `key` made before claims were spread, still under the bot's plain key: its memory's id
        while that memory holds the key (or is being written with it). A stale one is dropped, so the key
        can be claimed under its spread key."""
        if not self.claim_keys.plain_left(bot):
            return None
        pk = _unique_pk(bot)
        current = self._guard(partial(_get_state, pk, key))
        if current is None:
            return None
        holder = int(current.memory_id)
        in_flight = now_ms() - int(current.value or 0) < CLAIM_IN_FLIGHT_MS
        if in_flight or self._holder(bot, key, holder) is not None:
            return holder
        attempt(lambda: StateItem(pk, key).delete(condition=StateItem.memory_id == holder))
        return None

    def claim(self, bot: str, key: str, memory_id: int, user: str | None = None) -> int | None:
        """Claim a unique key for a memory written in a user's name; returns the id of the memory already
        holding it (or being written with it right now), else None."""
        # a claim made before the spread is looked for first: it is never written under the spread key
        # while it holds (and the claims pass writes the spread copy before it deletes the plain one)
        held = self._plain_holder(bot, key)
        if held is not None:
            return held
        pk, owner = keys.claim_pk(bot, key), keys.bot_user(bot, user)
        for _ in range(3):
            if attempt(
                lambda: StateItem(pk, key, memory_id=memory_id, value=now_ms(), owner=owner).save(
                    condition=StateItem.pk.does_not_exist()
                )
            ):
                return None
            current = self._guard(partial(_get_state, pk, key))
            if current is None:
                continue  # released meanwhile: try again (a miss was a 503 before, not a retry)
            holder = int(current.memory_id)
            if self._holder(bot, key, holder) is not None:
                return holder
            if now_ms() - int(current.value or 0) < CLAIM_IN_FLIGHT_MS:
                return holder  # its record is being written right now
            # a claim whose memory is gone or says something else now: take it over
            mine = StateItem(pk, key, memory_id=memory_id, value=now_ms(), owner=owner)
            if attempt(partial(mine.save, condition=StateItem.memory_id == holder)):
                return None
        raise Unavailable(f"could not settle which memory holds {key!r}; try again")

    def release(self, bot: str, key: str, memory_id: int) -> None:
        """Drop a claim if this memory still holds it."""
        for pk in self.claim_keys.lookups(bot, key):
            attempt(partial(StateItem(pk, key).delete, condition=StateItem.memory_id == memory_id))

    # ----- records -------------------------------------------------------------------------------

    def create(self, record: Record) -> None:
        """Claim the record's unique key, then write it; raises Duplicate if the key is held."""
        self._note_mixed([record])
        if record.unique_key:
            holder = self.claim(record.bot, record.unique_key, int(record.id), record.user)
            if holder is not None:
                raise Duplicate(holder)
        try:
            self._guard(lambda: _row(record).save(condition=MemoryRecord.id.does_not_exist()))
        except Exception:
            if record.unique_key:
                self.release(record.bot, record.unique_key, int(record.id))
            raise

    def create_many(self, records: list[Record]) -> list[Record]:
        """Claim each record's key, then write the records that got theirs in batches of 25.
        Returns the records written (duplicates left out)."""
        self._note_mixed(records)
        held = list(
            self._pool.map(
                lambda r: r.unique_key and self.claim(r.bot, r.unique_key, int(r.id), r.user), records
            )
        )
        claimed = [r for r, holder in zip(records, held, strict=False) if not holder]
        # One conditional put per record, side by side (a batch write cannot refuse an existing id): an id
        # taken by another process (see ids.py) is refused, never overwritten
        written = list(self._pool.map(self._put_new, claimed))
        refused = [r for r, ok in zip(claimed, written, strict=True) if not ok]
        if refused:
            for record in refused:
                if record.unique_key:
                    self.release(record.bot, record.unique_key, int(record.id))
            raise Unavailable(f"{len(refused)} memory ids were taken by another writer; try again")
        return claimed

    def _put_new(self, record: Record) -> bool:
        return attempt(lambda: _row(record).save(condition=MemoryRecord.id.does_not_exist()))

    def get(self, bot: str, memory_id: int) -> Record | None:
        """One record, or None."""

        def get() -> Record | None:
            try:
                return _record(MemoryRecord.get(keys.record_pk(bot, memory_id), memory_id))
            except MemoryRecord.DoesNotExist:
                return None

        return self._guard(get)

    def batch_get(self, bot: str, ids: list[int]) -> dict[int, Record]:
        """Records by id (missing ones left out)."""
        rows = self._guard(lambda: list(MemoryRecord.batch_get(_keys(bot, ids))))
        return {int(r.id): _record(r) for r in rows}

    def existing(self, bot: str, ids: list[int]) -> set[int]:
        """Which of these records exist now: a strongly consistent read of their keys, so one deleted a
        moment ago is not among them (as a conditional write would have found it gone)."""
        if not ids:
            return set()
        rows = self._guard(
            lambda: list(
                MemoryRecord.batch_get(_keys(bot, ids), consistent_read=True, attributes_to_get=["bot", "id"])
            )
        )
        return {int(r.id) for r in rows}

    def change_text(self, record: Record, text: str, unique_key: str | None) -> None:
        """Give a record new text, moving its unique key; raises Duplicate if the new key is held."""
        old_key = record.unique_key
        stamp = now_ms()
        if unique_key and unique_key != old_key:
            holder = self.claim(record.bot, unique_key, int(record.id), record.user)
            if holder is not None:
                raise Duplicate(holder)
        actions: list[Action] = [
            MemoryRecord.text.set(text),
            MemoryRecord.unique_key.set(unique_key) if unique_key else MemoryRecord.unique_key.remove(),
            MemoryRecord.updated_at.set(stamp),
            MemoryRecord.vector_model.remove(),
            MemoryRecord.pending_bot.set(_pending_key(record)),
        ]
        self._guard(lambda: _key(record).update(actions=actions, condition=MemoryRecord.id.exists()))
        record.text, record.unique_key, record.updated_at = text, unique_key, stamp
        record.vector_model, record.pending = None, True
        if old_key and old_key != unique_key:
            self.release(record.bot, old_key, int(record.id))

    def change_message(self, record: Record, text: str, content: JsonObject | None) -> bool:
        """A chat message edited where it was written: new text and content, its point to be made again;
        False when the record is gone (forgotten or deleted meanwhile)."""
        stamp = now_ms()
        actions = [
            MemoryRecord.text.set(text),
            MemoryRecord.updated_at.set(stamp),
            MemoryRecord.vector_model.remove(),
            MemoryRecord.pending_bot.set(_pending_key(record)),
        ]
        if content is not None:
            actions.append(MemoryRecord.content.set(content))
        if not _update_if_exists(record, actions):
            return False
        record.text, record.updated_at, record.vector_model, record.pending = text, stamp, None, True
        if content is not None:
            record.content = content
        return True

    def delete(self, records: list[Record]) -> None:
        """Delete records (25 per batch), then the unique keys they held."""

        def run() -> None:
            with MemoryRecord.batch_write() as batch:
                for record in records:
                    batch.delete(_key(record))
            with StateItem.batch_write() as batch:
                for record in records:
                    if record.unique_key:
                        for pk in self.claim_keys.lookups(record.bot, record.unique_key):
                            batch.delete(StateItem(pk, record.unique_key))

        self._guard(run)

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
        unchanged = [r for r, model in done if not r.pending and r.vector_model == model]
        changed = [(r, model) for r, model in done if r.pending or r.vector_model != model]
        marked = list(self._pool.map(lambda pair: self.mark_indexed(*pair), changed))
        gone = [record for (record, _), ok in zip(changed, marked, strict=True) if not ok]
        if unchanged:
            present = self.existing(unchanged[0].bot, [int(r.id) for r in unchanged])
            gone += [r for r in unchanged if int(r.id) not in present]
        return gone

    def give_lines(self, records: list[Record]) -> list[Record]:
        """Records stored before windows get the line their window is read along (byLine); returns those
        that still exist."""
        lined = []
        for r in records:
            if r.line and _update_if_exists(r, [MemoryRecord.line.set(r.line)]):
                r.stored_line = r.line
                lined.append(r)
        return lined

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

    def pending_ids(self, bot: str, limit: int, after: int | None = None) -> list[int]:
        """Ids of a bot's records waiting for vectors (above `after`), oldest first."""
        condition = MemoryRecord.id > after if after else None
        size = max(10, min(500, limit // 4 + 1))
        queries = [
            MemoryRecord.pending.query(key, condition, page_size=size) for key in keys.pending_keys(bot)
        ]
        return self._guard(lambda: [int(r.id) for r in islice(_merged(queries, newest_first=False), limit)])

    def bots_with_pending(self) -> list[str]:
        """Bots that have records waiting for vectors (a scan of the sparse index: small by design)."""
        return self._guard(lambda: sorted({keys.bot_of(r.pending_bot) for r in MemoryRecord.pending.scan()}))

    def newest(
        self,
        bot: str,
        kind: str,
        limit: int,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
        before: int | None = None,
        read_at_most: int | None = None,
    ) -> list[Record]:
        """Up to `limit` records of a kind, newest first, narrowed by scope; with `before`, only ids below
        it (the next page); with `read_at_most`, a narrowed scope stops after reading that many of the
        kind's records, matching or not (the search fallback: bounded, not a walk of a bot's 100 M). A
        user's records are read through byUser, a server's (or project's) through byScope once the bot's
        records all carry that key; only a listing of a bot's whole kind reads byKind."""
        below = MemoryRecord.id < before if before else None
        if user is not None:
            rows = MemoryRecord.by_user.query(
                keys.bot_user(bot, user), range_key_condition=below, scan_index_forward=False, page_size=500
            )
            return self._guard(partial(self._newest_by_key, bot, rows, limit, kind, server, project))
        scope = self._listed_scope(bot, kind, server, project)
        if scope is not None:
            rows = MemoryRecord.by_scope.query(
                scope, range_key_condition=below, scan_index_forward=False, page_size=min(limit, 500)
            )
            return self._guard(partial(self._newest_by_key, bot, rows, limit, kind, server, project))
        condition = None
        for attr, value in ((MemoryRecord.server, server), (MemoryRecord.project, project)):
            if value is not None:
                condition = attr == value if condition is None else condition & (attr == value)

        # A filter is applied after a page is read: read full pages when one is set (a narrow scope would
        # walk the kind's index 50 items per round trip), each shard's first page within `read_at_most`
        shards = len(keys.bot_kinds(bot, kind))
        size = max(10, min(500, limit // 4 + 1))
        if condition is not None:
            size = max(10, min(500, (read_at_most or 500 * shards) // shards))
        queries = [
            MemoryRecord.by_kind.query(
                key,
                range_key_condition=below,
                filter_condition=condition,
                scan_index_forward=False,
                page_size=size,
            )
            for key in keys.bot_kinds(bot, kind)
        ]
        merged = _merged(queries, True, read_at_most, size)
        return self._guard(lambda: [_record(r) for r in islice(merged, limit)])

    def unscoped(self) -> dict[str, list[str]]:
        """The bots (and their kinds) whose records do not all carry their byScope key yet: older bots,
        until their stamp pass ends (one batch read; nothing once this process has seen them ready)."""
        bots = self.bots()
        wanted = [keys.scopes_ready(b, k) for b in bots for k in KINDS]
        unknown = [k for k in wanted if k not in self._scoped]
        if unknown:
            self._scoped.update(self._guard(lambda: {(i.pk, i.sk) for i in StateItem.batch_get(unknown)}))
        out: dict[str, list[str]] = {}
        for bot in bots:
            for kind in KINDS:
                if keys.scopes_ready(bot, kind) not in self._scoped:
                    out.setdefault(bot, []).append(kind)
        return out

    def claim_stamp(self, bot: str, again_after_ms: int) -> bool:
        """Whether this caller queues the bot's stamp pass: once, and again only after `again_after_ms` (a
        pass whose job dead-lettered is started again, from the newest record: stamping is idempotent)."""
        return self._claim_pass(keys.stamp_queued(bot), again_after_ms)

    def claim_spread_pass(self, bot: str, again_after_ms: int) -> bool:
        """Whether this caller queues the bot's spread pass (store/spread.py): as claim_stamp."""
        return self._claim_pass(keys.spread_queued(bot), again_after_ms)

    def _claim_pass(self, key: tuple[str, str], again_after_ms: int) -> bool:
        now = now_ms()
        item = StateItem(*key, value=now)
        return attempt(
            lambda: item.save(
                condition=StateItem.value.does_not_exist() | (StateItem.value < now - again_after_ms)
            )
        )

    def stamp_scopes(self, bot: str, kind: str, before: int | None, budget_s: float) -> int | None:
        """Give a bot's records of a kind stored before byScope their key, a page at a time, newest first
        from `before`, until `budget_s` has passed; returns where the next step starts (None: done).
        Records written meanwhile carry their key already."""

        def stamp(page: list[Record]) -> None:
            todo = [r for r in page if r.scope and r.stored_scope != r.scope]
            self._note_mixed(todo)
            list(self._pool.map(lambda r: _update_if_exists(r, [MemoryRecord.scope.set(r.scope)]), todo))

        return self.walk(bot, kind, before, STAMP_PAGE, budget_s, stamp)

    def walk(
        self,
        bot: str,
        kind: str,
        before: int | None,
        page_size: int,
        budget_s: float,
        each: Callable[[list[Record]], None],
        shard: int | None = None,
    ) -> int | None:
        """One bounded step of a pass over a bot's records of a kind (under one of its keys with `shard`):
        pages newest first from `before`, each handed to `each`, while another (as long as the longest so
        far) fits in `budget_s`; returns where the next step starts (None: the kind is done)."""
        budget = StepBudget(budget_s)
        while True:
            budget.begin_page()
            page = self.page(bot, kind, before, page_size, shard=shard)
            if not page:
                return None
            each(page)
            if len(page) < page_size:
                return None
            before = int(page[-1].id)
            if not budget.another_fits():
                return before

    def _listed_scope(self, bot: str, kind: str, server: str | None, project: str | None) -> str | None:
        """The byScope key a scoped listing can read alone, if any: not before the bot's records all carry
        their key, nor for a project alone once some record names a server as well."""
        if not server and (server is not None or not project):
            return None
        ready, mixed = self._scoped_state(bot, kind)
        if not ready or (not server and mixed):
            return None
        return keys.record_scope(bot, kind, server, project)

    @staticmethod
    def _newest_by_key(
        bot: str,
        rows: Iterable[MemoryRecord],
        limit: int,
        kind: str,
        server: str | None,
        project: str | None,
    ) -> list[Record]:
        """Records read by key from an index's keys (newest id first), narrowed by kind and scope: the
        cost follows the index's entries (a user's records, a server's), not the bot's 100 M."""
        out: list[Record] = []
        ids: list[int] = []

        def take(chunk: list[int]) -> bool:
            found = MemoryRecord.batch_get(_keys(bot, chunk))
            for r in sorted(found, key=lambda r: -int(r.id)):
                if (
                    r.kind == kind
                    and (server is None or r.server == server)
                    and (project is None or r.project == project)
                ):
                    out.append(_record(r))
            return len(out) >= limit

        for row in rows:
            ids.append(int(row.id))
            if len(ids) == min(100, max(limit, 1)):
                if take(ids):
                    return out[:limit]
                ids = []
        if ids:
            take(ids)
        return out[:limit]

    def iter_user(self, bot: str, user: str) -> list[int]:
        """Ids of every record of a bot attributed to a user."""
        return self._guard(lambda: [int(r.id) for r in MemoryRecord.by_user.query(keys.bot_user(bot, user))])

    @staticmethod
    def count_user_of(bot: str, user: str) -> int:
        """How many records of a bot are attributed to a user (the user index, keys only); static, so the
        lean interactions function needs no store object."""
        return guard(lambda: MemoryRecord.by_user.count(keys.bot_user(bot, user)))

    def stale_claims(self, bot: str, user: str) -> list[str]:
        """The claims made in a user's name whose memory no longer holds them: what a crash between a
        claim and its record leaves, and what a forget releases once the user's records are gone. Read
        through the byOwner index, so the work is the user's claims, never the bot's."""
        claims = self._guard(
            lambda: {
                i.sk: int(i.memory_id or 0)
                for i in StateItem.by_owner.query(keys.bot_user(bot, user))
                if keys.is_claim_pk(bot, i.pk)
            }
        )
        if not claims:
            return []
        records = self.batch_get(bot, list(set(claims.values())))
        # a record the user wrote after the forget (a new remember) keeps its claim, or a duplicate gets in
        return [k for k, i in claims.items() if i not in records or records[i].unique_key != k]

    def drop_claims(self, bot: str, claim_keys: list[str]) -> None:
        """Delete these claims outright."""

        def run() -> None:
            with StateItem.batch_write() as batch:
                for key in claim_keys:
                    for pk in self.claim_keys.lookups(bot, key):
                        batch.delete(StateItem(pk, key))

        if claim_keys:
            self._guard(run)
