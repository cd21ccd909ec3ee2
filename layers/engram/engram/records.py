"""DynamoDB, the system of record (pynamodb): memory records, unique keys and counters."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import PynamoDBException, TransactWriteError, UpdateError
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from .config import Settings
from .errors import Unavailable


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, how records keep time."""
    return int(time.time() * 1000)


class ByUser(GlobalSecondaryIndex):
    """Every record a user is attributed to, per bot: what forget walks."""

    class Meta:
        index_name = "byUser"
        projection = KeysOnlyProjection()

    bot_user = UnicodeAttribute(hash_key=True, attr_name="botUser")
    id = NumberAttribute(range_key=True)


class ByKind(GlobalSecondaryIndex):
    """Records of one kind per bot, newest (highest id) first when read backwards."""

    class Meta:
        index_name = "byKind"
        projection = AllProjection()

    bot_kind = UnicodeAttribute(hash_key=True, attr_name="botKind")
    id = NumberAttribute(range_key=True)


class Pending(GlobalSecondaryIndex):
    """Sparse: only records whose vectors still have to be written appear here."""

    class Meta:
        index_name = "pending"
        projection = KeysOnlyProjection()

    pending_bot = UnicodeAttribute(hash_key=True, attr_name="pendingBot")
    id = NumberAttribute(range_key=True)


class MemoryRecord(Model):
    """One memory: a fact, or a stored chat message with its whole content."""

    class Meta:
        table_name = "engram-memories"
        region = "us-east-1"

    bot = UnicodeAttribute(hash_key=True)
    id = NumberAttribute(range_key=True)
    kind = UnicodeAttribute()
    text = UnicodeAttribute()
    content = JSONAttribute(null=True)
    server = UnicodeAttribute(null=True, attr_name="serverId")
    project = UnicodeAttribute(null=True)
    user = UnicodeAttribute(null=True, attr_name="userId")
    saved_by = UnicodeAttribute(attr_name="savedBy")
    source_id = UnicodeAttribute(null=True, attr_name="sourceId")
    unique_key = UnicodeAttribute(null=True, attr_name="uniqueKey")
    thread = UnicodeAttribute(null=True)
    context = UnicodeAttribute(null=True)
    vector_model = UnicodeAttribute(null=True, attr_name="vectorModel")
    created_at = NumberAttribute(attr_name="createdAt")
    updated_at = NumberAttribute(attr_name="updatedAt")
    bot_user = UnicodeAttribute(null=True, attr_name="botUser")
    bot_kind = UnicodeAttribute(attr_name="botKind")
    pending_bot = UnicodeAttribute(null=True, attr_name="pendingBot")

    by_user = ByUser()
    by_kind = ByKind()
    pending = Pending()


class StateItem(Model):
    """Everything that is not a memory: unique keys, counters, settings, consent, cursors."""

    class Meta:
        table_name = "engram-state"
        region = "us-east-1"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    memory_id = NumberAttribute(null=True, attr_name="memoryId")
    value = NumberAttribute(null=True)
    data = JSONAttribute(null=True)
    expires_at = NumberAttribute(null=True, attr_name="expiresAt")


@dataclass(frozen=True, slots=True)
class Duplicate(Exception):
    """A unique key is already held by another memory."""

    memory_id: int


def _unique_pk(bot: str) -> str:
    return f"unique#{bot}"


class RecordStore:
    """Reads and writes memory records; every multi-item change is one DynamoDB transaction."""

    def __init__(self, settings: Settings):
        for model, table in ((MemoryRecord, settings.memories_table), (StateItem, settings.state_table)):
            model.Meta.table_name = table
            model.Meta.region = settings.aws_region
            model.Meta.host = settings.dynamodb_endpoint
            model._connection = None  # the connection caches its host: rebuild it for these settings
        self._connection = Connection(region=settings.aws_region, host=settings.dynamodb_endpoint)

    def _guard(self, fn):
        try:
            return fn()
        except (Duplicate, TransactWriteError):
            raise
        except PynamoDBException as exc:
            raise Unavailable(f"DynamoDB failed: {exc.msg}") from exc

    def next_id(self) -> int:
        """A new memory id from an atomic counter."""
        return self.next_ids(1)[0]

    def next_ids(self, n: int) -> list[int]:
        """`n` new consecutive memory ids from one atomic counter update."""

        def bump():
            counter = StateItem("counter", "memory")
            counter.update(actions=[StateItem.value.add(n)])
            top = int(counter.value)
            return list(range(top - n + 1, top + 1))

        return self._guard(bump)

    def find_uniques(self, bot: str, keys: list[str]) -> dict[str, int]:
        """The memory ids holding any of these unique keys (one batch read)."""
        if not keys:
            return {}
        pk = _unique_pk(bot)
        return self._guard(
            lambda: {i.sk: int(i.memory_id) for i in StateItem.batch_get([(pk, k) for k in dict.fromkeys(keys)])}
        )

    def thread_tails(self, bot: str, threads: list[str]) -> dict[str, dict]:
        """The newest stored message text of each thread: {"text", "at"}."""
        if not threads:
            return {}
        pk = f"thread#{bot}"
        return self._guard(lambda: {i.sk: i.data for i in StateItem.batch_get([(pk, t) for t in dict.fromkeys(threads)])})

    def advance_thread_tail(self, bot: str, thread: str, at: int, text: str) -> None:
        """Remember a thread's newest message, unless a newer one is already remembered."""
        item = StateItem(f"thread#{bot}", thread, value=at, data={"text": text, "at": at})
        try:
            self._guard(lambda: item.save(condition=StateItem.value.does_not_exist() | (StateItem.value <= at)))
        except Unavailable as exc:
            if "ConditionalCheckFailed" not in str(exc.__cause__):
                raise

    def create_many(self, records: list[MemoryRecord]) -> list[MemoryRecord]:
        """Write new records with their unique keys, 50 per transaction; a chunk that hits a taken key
        is retried one record at a time. Returns the records written (duplicates left out)."""
        written: list[MemoryRecord] = []
        for start in range(0, len(records), 50):
            chunk = records[start : start + 50]
            try:
                self._guard(lambda: self._create_chunk(chunk))
                written.extend(chunk)
            except TransactWriteError:
                for record in chunk:
                    try:
                        self.create(record)
                        written.append(record)
                    except Duplicate:
                        pass
        return written

    def _create_chunk(self, chunk: list[MemoryRecord]) -> None:
        with TransactWrite(connection=self._connection) as tx:
            for record in chunk:
                tx.save(record, condition=MemoryRecord.id.does_not_exist())
                if record.unique_key:
                    claim = StateItem(_unique_pk(record.bot), record.unique_key, memory_id=record.id)
                    tx.save(claim, condition=StateItem.pk.does_not_exist())

    def find_unique(self, bot: str, key: str) -> int | None:
        """The memory id holding a unique key, if any."""

        def get():
            try:
                return int(StateItem.get(_unique_pk(bot), key).memory_id)
            except StateItem.DoesNotExist:
                return None

        return self._guard(get)

    def create(self, record: MemoryRecord) -> None:
        """Write a new record and claim its unique key together, or raise Duplicate."""
        try:
            self._guard(lambda: self._create(record))
        except TransactWriteError as exc:
            self._raise_duplicate(exc, record.bot, record.unique_key)

    def _create(self, record: MemoryRecord) -> None:
        with TransactWrite(connection=self._connection) as tx:
            tx.save(record, condition=MemoryRecord.id.does_not_exist())
            if record.unique_key:
                claim = StateItem(_unique_pk(record.bot), record.unique_key, memory_id=record.id)
                tx.save(claim, condition=StateItem.pk.does_not_exist())

    def _raise_duplicate(self, exc: TransactWriteError, bot: str, key: str | None):
        reasons = [getattr(r, "code", None) for r in (exc.cancellation_reasons or []) if r]
        if key and "ConditionalCheckFailed" in reasons:
            holder = self.find_unique(bot, key)
            if holder is not None:
                raise Duplicate(holder) from exc
        raise Unavailable(f"DynamoDB refused the write: {exc.msg}") from exc

    def get(self, bot: str, memory_id: int) -> MemoryRecord | None:
        """One record, or None."""

        def get():
            try:
                return MemoryRecord.get(bot, memory_id)
            except MemoryRecord.DoesNotExist:
                return None

        return self._guard(get)

    def batch_get(self, bot: str, ids: list[int]) -> dict[int, MemoryRecord]:
        """Records by id (missing ones left out)."""
        return self._guard(lambda: {int(r.id): r for r in MemoryRecord.batch_get([(bot, i) for i in ids])})

    def change_text(self, record: MemoryRecord, text: str, unique_key: str | None) -> None:
        """Give a record new text and move its unique key, in one transaction; Duplicate if taken."""
        old_key = record.unique_key
        stamp = now_ms()

        def write():
            with TransactWrite(connection=self._connection) as tx:
                tx.update(
                    record,
                    actions=[
                        MemoryRecord.text.set(text),
                        MemoryRecord.unique_key.set(unique_key) if unique_key else MemoryRecord.unique_key.remove(),
                        MemoryRecord.updated_at.set(stamp),
                        MemoryRecord.vector_model.remove(),
                        MemoryRecord.pending_bot.set(record.bot),
                    ],
                    condition=MemoryRecord.id.exists(),
                )
                if old_key and old_key != unique_key:
                    tx.delete(StateItem(_unique_pk(record.bot), old_key))
                if unique_key and unique_key != old_key:
                    claim = StateItem(_unique_pk(record.bot), unique_key, memory_id=record.id)
                    tx.save(claim, condition=StateItem.pk.does_not_exist())

        try:
            self._guard(write)
        except TransactWriteError as exc:
            self._raise_duplicate(exc, record.bot, unique_key)
        record.text, record.unique_key, record.updated_at = text, unique_key, stamp
        record.vector_model, record.pending_bot = None, record.bot

    def delete(self, records: list[MemoryRecord]) -> None:
        """Delete records and the unique keys they hold (each record with its key atomically)."""

        def run():
            # 100 actions per transaction at most; a record and its key take two.
            for start in range(0, len(records), 50):
                with TransactWrite(connection=self._connection) as tx:
                    for record in records[start : start + 50]:
                        tx.delete(record)
                        if record.unique_key:
                            tx.delete(StateItem(_unique_pk(record.bot), record.unique_key))

        self._guard(run)

    def mark_indexed(self, record: MemoryRecord, vector_model: str | None) -> bool:
        """The record's point is written (with a dense vector of that model, when given);
        False when the record no longer exists."""
        actions = [MemoryRecord.pending_bot.remove()]
        actions.append(MemoryRecord.vector_model.set(vector_model) if vector_model else MemoryRecord.vector_model.remove())
        try:
            self._guard(lambda: record.update(actions=actions, condition=MemoryRecord.id.exists()))
        except Unavailable as exc:
            if isinstance(exc.__cause__, UpdateError) and exc.__cause__.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def mark_pending(self, record: MemoryRecord) -> None:
        """The record still needs its point (or its dense vector) written."""
        self._guard(lambda: record.update(actions=[MemoryRecord.pending_bot.set(record.bot)]))

    def pending_ids(self, bot: str, limit: int) -> list[int]:
        """Ids of a bot's records waiting for vectors, oldest first."""
        return self._guard(lambda: [int(r.id) for r in MemoryRecord.pending.query(bot, limit=limit)][:limit])

    def bots_with_pending(self) -> list[str]:
        """Bots that have records waiting for vectors (a scan of the sparse index: small by design)."""
        return self._guard(lambda: sorted({r.pending_bot for r in MemoryRecord.pending.scan()}))

    def newest(
        self,
        bot: str,
        kind: str,
        limit: int,
        server: str | None = None,
        project: str | None = None,
        user: str | None = None,
    ) -> list[MemoryRecord]:
        """Up to `limit` records of a kind, newest first, narrowed by scope."""
        condition = None
        for attr, value in ((MemoryRecord.server, server), (MemoryRecord.project, project), (MemoryRecord.user, user)):
            if value is not None:
                condition = attr == value if condition is None else condition & (attr == value)

        def run():
            rows = MemoryRecord.by_kind.query(
                f"{bot}#{kind}", filter_condition=condition, scan_index_forward=False, page_size=min(limit, 500)
            )
            out = []
            for row in rows:
                out.append(row)
                if len(out) >= limit:
                    break
            return out

        return self._guard(run)

    def iter_user(self, bot: str, user: str) -> Iterator[int]:
        """Ids of every record of a bot attributed to a user."""
        return self._guard(lambda: [int(r.id) for r in MemoryRecord.by_user.query(f"{bot}#{user}")])

    def iter_scope(self, bot: str, kind: str, max_records: int) -> list[MemoryRecord]:
        """Up to `max_records` newest records of a kind (the words fallback when the index is down)."""
        return self.newest(bot, kind, max_records)
