"""DynamoDB, the system of record (pynamodb): memory records, read and written by `RecordStore`, which
holds the stores of what ties them together: unique keys (claims.py), thread tails and carriers
(threads.py). The record itself and its row mapping are in record.py."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING

from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action

from ..bookkeeping import JsonObject
from ..clock import now_ms
from ..errors import Unavailable
from ..line_spans import LineReader, Point
from ..ports import RecordsPort, SpreadPass
from ..record import KINDS, NO_NARROWING, Duplicate, Listing, Paging, Record, record_scope
from . import keys
from .budget import walk_kind
from .claims import Claims, hold_key, let_go
from .dynamo import attempt, guard
from .ids import IdMaker
from .kinds import KindIndex
from .lines import LineReads, span_ids
from .models import MemoryRecord, StateItem
from .pending import PendingMarks
from .rows import (
    _key,
    _keys,
    _merged,
    _pending_key,
    _record,
    _row,
    _update_if_exists,
    in_order,
)
from .scoping import ScopeMarks
from .threads import Carriers, ThreadTails


def _scope_filter(server: str | None, project: str | None) -> Condition | None:
    """The filter narrowing a kind's listing to a server and a project (None: neither is named)."""
    condition: Condition | None = None
    for attr, value in ((MemoryRecord.server, server), (MemoryRecord.project, project)):
        if value is not None:
            condition = attr == value if condition is None else condition & (attr == value)
    return condition


# Records read per page of a stamp pass (byScope keys given to records stored before it)
STAMP_PAGE = 500


class RecordStore:
    """Reads and writes memory records. No transactions (the local DynamoDB has none): every multi-item
    change is a sequence of conditional single-item writes that a crash can stop anywhere safely."""

    def __init__(self) -> None:
        # DynamoDB has no batch conditional write: per-item requests for a batch go out side by side.
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dynamodb")
        self._bots: set[str] = set()
        # this process's id maker (public: a tool or a test pins its worker number and clock)
        self.ids = IdMaker(self._take_worker)
        self.claims = Claims(self)
        self.tails = ThreadTails()
        self.carriers = Carriers()
        self.scopes = ScopeMarks(self)
        self.pending = PendingMarks(self, self._pool)
        self.kinds = KindIndex()  # byKindKeys once the table has it, byKind before (kinds.py)

    _guard = staticmethod(guard)

    def register_bot(self, bot: str) -> None:
        """Remember that a bot has records (once per process), for jobs that walk every bot. A bot new
        here has every record written with its byScope key: its scoped listings use the index at once."""
        if bot in self._bots:
            return
        first = StateItem(*keys.bot_registered(bot))
        if attempt(lambda: first.save(condition=StateItem.pk.does_not_exist())):
            for kind in KINDS:
                self.scopes.mark_ready(bot, kind)
        self._bots.add(bot)

    def forget_known(self) -> None:
        """Know nothing of which bots are registered and how their records are listed, as a new process
        does (each is read again when needed)."""
        self._bots.clear()
        self.scopes.forget_known()

    def bots(self) -> list[str]:
        """Every bot that has records (what register_bot wrote), for jobs that walk every bot."""
        return self._guard(lambda: sorted(i.sk for i in StateItem.query("bots")))

    def page(self, bot: str, kind: str, at: Paging) -> list[Record]:
        """Up to `limit` records of a kind past `cursor` (all when None): newest first with ids below it,
        or with `oldest_first` ids above it; with `shard`, only those under that one of the kind's keys
        (keys.READ_SHARDS: a long pass reads them in parallel parts)."""
        cursor, limit, oldest_first, shard = at.cursor, at.limit, at.oldest_first, at.shard
        condition = None
        if cursor:
            condition = MemoryRecord.id > cursor if oldest_first else MemoryRecord.id < cursor
        # each shard is read a quarter page at a time: the merged page costs about a page, not one a shard
        size = max(10, min(500, limit if shard is not None else limit // 4 + 1))
        index = self.kinds.index()
        queries = [
            index.query(key, range_key_condition=condition, scan_index_forward=oldest_first, page_size=size)
            for key in keys.bot_kinds(bot, kind, shard)
        ]
        rows = self._guard(lambda: list(islice(_merged(queries, not oldest_first), limit)))
        if index is MemoryRecord.by_kind:
            return [_record(row) for row in rows]
        # the index holds keys: the records themselves, by key, in the page's order
        ids = [int(row.id) for row in rows]
        return in_order(self.batch_get(bot, ids), ids)

    def line_reads(self) -> LineReads:
        """The byLine reads of one maintenance step: each line read once for all the step's pages."""
        return LineReads()

    def line_ids(self, line: str, at: list[Point], reach: int, reads: LineReader | None) -> list[int]:
        """Ids of a line's records around these points (`at`), in time order, from the byLine index: a
        write's line read afresh, the span of its records and `reach` + 1 turns each side (store/lines.py); a
        maintenance step's, through its reads, only the windows of its records (a page's records of a line
        lie far apart: the records between them are not read)."""
        if reads is not None:
            return self._guard(partial(reads.around, line, at, reach))
        low, high = min(c for c, _ in at), max(c for c, _ in at)
        return self._guard(partial(span_ids, line, low, high, reach))

    def line_first_ids(self, line: str, limit: int, written_before: int | None = None) -> list[int]:
        """Up to `limit` ids of a line's oldest records (byLine, by createdAt), those written before
        `written_before` (ms) only when given: a deleted thread's, or what aged out of one."""
        condition = MemoryRecord.created_at < written_before if written_before is not None else None
        return self._guard(
            lambda: [
                int(r.id)
                for r in MemoryRecord.by_line.query(
                    line, range_key_condition=condition, scan_index_forward=True, limit=limit
                )
            ][:limit]
        )

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
        return self.ids.take(1)[0]

    def next_ids(self, n: int) -> list[int]:
        """`n` new ascending memory ids, made in this process: no request, no shared counter."""
        return self.ids.take(n)

    def _take_worker(self) -> int:
        """This process's worker number for its ids: one atomic add, once per process."""

        def bump() -> int:
            item = StateItem(*keys.ID_WORKERS)
            item.update(actions=[StateItem.value.add(1)])
            return int(item.value)

        return self._guard(bump)

    # ----- records -------------------------------------------------------------------------------

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

    def create(self, record: Record) -> None:
        """Claim the record's unique key, then write it; raises Duplicate if the key is held."""
        self.scopes.note_mixed([record])
        hold_key(self.claims, record)
        try:
            self._guard(lambda: _row(record).save(condition=MemoryRecord.id.does_not_exist()))
        except Exception:
            let_go(self.claims, [record])
            raise

    def create_many(self, records: list[Record]) -> list[Record]:
        """Claim each record's key, then write the records that got theirs in batches of 25.
        Returns the records written (duplicates left out)."""
        self.scopes.note_mixed(records)
        held = list(
            self._pool.map(
                lambda r: r.unique_key and self.claims.claim(r.bot, r.unique_key, int(r.id), r.user), records
            )
        )
        claimed = [r for r, holder in zip(records, held, strict=False) if not holder]
        # One conditional put per record, side by side (a batch write cannot refuse an existing id): an id
        # taken by another process (see ids.py) is refused, never overwritten
        written = list(self._pool.map(_put_new, claimed))
        refused = [r for r, ok in zip(claimed, written, strict=True) if not ok]
        if refused:
            let_go(self.claims, refused)
            raise Unavailable(f"{len(refused)} memory ids were taken by another writer; try again")
        return claimed

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
        """Give a record new text, moving its unique key; raises Duplicate if the new key is held. Its
        versions are written as the record holds them (the caller adds the old text)."""
        old_key = record.unique_key
        stamp = now_ms()
        if unique_key and unique_key != old_key:
            holder = self.claims.claim(record.bot, unique_key, int(record.id), record.user)
            if holder is not None:
                raise Duplicate(holder)
        actions: list[Action] = [
            MemoryRecord.text.set(text),
            MemoryRecord.unique_key.set(unique_key) if unique_key else MemoryRecord.unique_key.remove(),
            MemoryRecord.updated_at.set(stamp),
            MemoryRecord.vector_model.remove(),
            MemoryRecord.pending_bot.set(_pending_key(record)),
            _versions(record),
        ]
        self._guard(lambda: _key(record).update(actions=actions, condition=MemoryRecord.id.exists()))
        record.text, record.unique_key, record.updated_at = text, unique_key, stamp
        record.vector_model, record.pending = None, True
        if old_key and old_key != unique_key:
            self.claims.release(record.bot, old_key, int(record.id))

    def change_message(self, record: Record, text: str, content: JsonObject | None) -> bool:
        """A chat message edited where it was written: new text and content, its point to be made again
        (its versions written as the record holds them); False when the record is gone (forgotten or
        deleted meanwhile)."""
        stamp = now_ms()
        actions = [
            MemoryRecord.text.set(text),
            MemoryRecord.updated_at.set(stamp),
            MemoryRecord.vector_model.remove(),
            MemoryRecord.pending_bot.set(_pending_key(record)),
            _versions(record),
        ]
        if content is not None:
            actions.append(MemoryRecord.content.set(content))
        if not _update_if_exists(record, actions):
            return False
        record.text, record.updated_at, record.vector_model, record.pending = text, stamp, None, True
        if content is not None:
            record.content = content
        return True

    def change_terms(self, record: Record, metadata: JsonObject | None, expires_at: int | None) -> bool:
        """A memory's metadata and expiry replaced (None: none), and its versions written as the record
        holds them; its point to be written again; False when the record is gone."""
        stamp = now_ms()
        actions = [
            MemoryRecord.metadata.set(metadata) if metadata else MemoryRecord.metadata.remove(),
            MemoryRecord.expires_at.set(expires_at) if expires_at else MemoryRecord.expires_at.remove(),
            _versions(record),
            MemoryRecord.updated_at.set(stamp),
            MemoryRecord.pending_bot.set(_pending_key(record)),
        ]
        if not _update_if_exists(record, actions):
            return False
        record.metadata, record.expires_at, record.pending = metadata or None, expires_at, True
        record.updated_at = stamp
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
                        for pk in self.claims.claim_keys.lookups(record.bot, record.unique_key):
                            batch.delete(StateItem(pk, record.unique_key))

        self._guard(run)

    def give_lines(self, records: list[Record]) -> list[Record]:
        """Records stored before windows get the line their window is read along (byLine); returns those
        that still exist."""
        lined = []
        for r in records:
            if r.line and _update_if_exists(r, [MemoryRecord.line.set(r.line)]):
                r.stored_line = r.line
                lined.append(r)
        return lined

    def newest(self, bot: str, kind: str, limit: int, listing: Listing = NO_NARROWING) -> list[Record]:
        """Up to `limit` records of a kind, newest first, narrowed by scope; with `before`, only ids below
        it (the next page); with `read_at_most`, a narrowed scope stops after reading that many of the
        kind's records, matching or not (the search fallback: bounded, not a walk of a bot's 100 M). A
        user's records are read through byUser, a server's (or project's) through byScope once the bot's
        records all carry that key; only a listing of a bot's whole kind reads byKind."""
        server, project, user, before = listing.server, listing.project, listing.user, listing.before
        read_at_most = listing.read_at_most
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
        condition = _scope_filter(server, project)
        # A filter is applied after a page is read: read full pages when one is set (a narrow scope would
        # walk the kind's index 50 items per round trip), each shard's first page within `read_at_most`
        shards = len(keys.bot_kinds(bot, kind))
        size = max(10, min(500, limit // 4 + 1))
        if condition is not None:
            size = max(10, min(500, (read_at_most or 500 * shards) // shards))
        index = self.kinds.index()
        queries = [
            index.query(
                key,
                range_key_condition=below,
                filter_condition=condition,  # on serverId and project: in both indexes
                scan_index_forward=False,
                page_size=size,
            )
            for key in keys.bot_kinds(bot, kind)
        ]
        merged = _merged(queries, True, read_at_most, size)
        if index is not MemoryRecord.by_kind:  # keys: the records read by key
            return self._guard(partial(self._newest_by_key, bot, merged, limit, kind, server, project))
        return self._guard(lambda: [_record(r) for r in islice(merged, limit)])

    def stamp_scopes(self, bot: str, kind: str, before: int | None, budget_s: float) -> int | None:
        """Give a bot's records of a kind stored before byScope their key, a page at a time, newest first
        from `before`, until `budget_s` has passed; returns where the next step starts (None: done).
        Records written meanwhile carry their key already."""

        def stamp(page: list[Record]) -> None:
            todo = [r for r in page if r.scope and r.stored_scope != r.scope]
            self.scopes.note_mixed(todo)
            list(self._pool.map(lambda r: _update_if_exists(r, [MemoryRecord.scope.set(r.scope)]), todo))

        return walk_kind(self.page, bot, kind, (before, STAMP_PAGE), budget_s, stamp)

    def _listed_scope(self, bot: str, kind: str, server: str | None, project: str | None) -> str | None:
        """The byScope key a scoped listing can read alone, if any: not before the bot's records all carry
        their key, nor for a project alone once some record names a server as well."""
        if not server and (server is not None or not project):
            return None
        ready, mixed = self.scopes.state(bot, kind)
        if not ready or (not server and mixed):
            return None
        return record_scope(bot, kind, server, project)

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

    def count_user(self, bot: str, user: str) -> int:
        """How many records of a bot are attributed to a user (the user index, keys only)."""
        return self._guard(lambda: MemoryRecord.by_user.count(keys.bot_user(bot, user)))

    def spread_passes(self) -> list[SpreadPass]:
        """The kinds of item once kept under one key per bot that this store moves (store/spread.py)."""
        return [self.claims.claim_keys, self.tails.tail_keys]


# mypy holds RecordStore to engram.ports.RecordsPort here (a Protocol is checked where it is used)
if TYPE_CHECKING:
    _conforms: RecordsPort = RecordStore()


def _put_new(record: Record) -> bool:
    """Write a record's row unless one with its id exists (whether it was written)."""
    return attempt(lambda: _row(record).save(condition=MemoryRecord.id.does_not_exist()))


def _versions(record: Record) -> Action:
    """The update of a record's versions to what it holds."""
    return MemoryRecord.versions.set(record.versions) if record.versions else MemoryRecord.versions.remove()
