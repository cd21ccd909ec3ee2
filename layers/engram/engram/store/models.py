"""The two DynamoDB tables as pynamodb models: only the store package touches them."""

from __future__ import annotations

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, IncludeProjection, KeysOnlyProjection
from pynamodb.models import Model

from ..config import Settings


class ByUser(GlobalSecondaryIndex["MemoryRecord"]):
    """Every record a user is attributed to, per bot: what forget walks."""

    class Meta:
        index_name = "byUser"
        projection = KeysOnlyProjection()

    bot_user = UnicodeAttribute(hash_key=True, attr_name="botUser")
    id = NumberAttribute(range_key=True)


class ByKind(GlobalSecondaryIndex["MemoryRecord"]):
    """Records of one kind per bot, newest (highest id) first when read backwards."""

    class Meta:
        index_name = "byKind"
        projection = AllProjection()

    bot_kind = UnicodeAttribute(hash_key=True, attr_name="botKind")
    id = NumberAttribute(range_key=True)


class ByKindKeys(GlobalSecondaryIndex["MemoryRecord"]):
    """Records of one kind per bot, as byKind, holding only their keys and what a listing's filter reads
    (serverId, project): a record's later changes (its vectors written, its text edited) do not rewrite
    it, and it copies no text (byKind, ALL, was ~8 of a stored message's ~20 write units and a second copy
    of the table). A page's records are read by key. Read once the table has it ACTIVE (kinds.py)."""

    class Meta:
        index_name = "byKindKeys"
        projection = IncludeProjection(["serverId", "project"])

    bot_kind = UnicodeAttribute(hash_key=True, attr_name="botKind")
    id = NumberAttribute(range_key=True)


class Pending(GlobalSecondaryIndex["MemoryRecord"]):
    """Sparse: only records whose vectors still have to be written appear here."""

    class Meta:
        index_name = "pending"
        projection = KeysOnlyProjection()

    pending_bot = UnicodeAttribute(hash_key=True, attr_name="pendingBot")
    id = NumberAttribute(range_key=True)


class ByLine(GlobalSecondaryIndex["MemoryRecord"]):
    """Sparse: the records of one line (a thread's messages; an author's facts in one scope) in time
    order, what a memory's window (the turns around it) is read from."""

    class Meta:
        index_name = "byLine"
        projection = KeysOnlyProjection()

    line = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True, attr_name="createdAt")


class ByScope(GlobalSecondaryIndex["MemoryRecord"]):
    """Sparse: a bot's records of one kind in one server (or, when they have no server, one project),
    newest first when read backwards: listing a server reads that server's records, not the bot's.
    Keys only: a listing reads the page's records by key, so each write copies a small item, not the
    record's text and content."""

    class Meta:
        index_name = "byScope"
        projection = KeysOnlyProjection()

    scope = UnicodeAttribute(hash_key=True)
    id = NumberAttribute(range_key=True)


class MemoryRecord(Model):
    """One memory: a fact, or a stored chat message with its whole content."""

    class Meta:
        table_name = "engram-memories"
        region = "us-east-1"
        host: str | None = None  # a local engine's endpoint (bind_tables)

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
    metadata = JSONAttribute(null=True)
    versions = JSONAttribute(null=True)
    expires_at = NumberAttribute(null=True, attr_name="expiresAt")
    unique_key = UnicodeAttribute(null=True, attr_name="uniqueKey")
    thread = UnicodeAttribute(null=True)
    context = UnicodeAttribute(null=True)
    # whose words the context is, and from which record: what a forget, delete or change clears
    context_author = UnicodeAttribute(null=True, attr_name="contextAuthor")
    context_source = NumberAttribute(null=True, attr_name="contextSource")
    # the model of the dense vector its point was written with (re-embedding asks the index, not this)
    vector_model = UnicodeAttribute(null=True, attr_name="vectorModel")
    created_at = NumberAttribute(attr_name="createdAt")
    received_at = NumberAttribute(null=True, attr_name="receivedAt")
    updated_at = NumberAttribute(attr_name="updatedAt")
    bot_user = UnicodeAttribute(null=True, attr_name="botUser")
    bot_kind = UnicodeAttribute(attr_name="botKind")
    pending_bot = UnicodeAttribute(null=True, attr_name="pendingBot")
    line = UnicodeAttribute(null=True)  # "<bot>#<thread>" or "<bot>#fact#<scope>#<user>" (byLine)
    scope = UnicodeAttribute(null=True)  # "<bot>#<kind>#s:<server>" or "<bot>#<kind>#p:<project>" (byScope)

    by_user = ByUser()
    by_kind = ByKind()
    by_kind_keys = ByKindKeys()
    pending = Pending()
    by_line = ByLine()
    by_scope = ByScope()


class ByOwner(GlobalSecondaryIndex["StateItem"]):
    """Sparse: the state items made in a user's name (unique claims), per bot: what a forget releases,
    leftovers of a crash between a claim and its record included, without reading anyone else's."""

    class Meta:
        index_name = "byOwner"
        projection = IncludeProjection(["memoryId"])

    owner = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class StateItem(Model):
    """Everything that is not a memory: unique keys, counters, settings, consent, cursors."""

    class Meta:
        table_name = "engram-state"
        region = "us-east-1"
        host: str | None = None

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    memory_id = NumberAttribute(null=True, attr_name="memoryId")
    value = NumberAttribute(null=True)
    tally = NumberAttribute(null=True, attr_name="count")  # not `count`: that is Model.count, a query
    tag = UnicodeAttribute(null=True)
    data = JSONAttribute(null=True)
    members = UnicodeSetAttribute(null=True)  # e.g. the channels of a backfill run already counted done
    expires_at = NumberAttribute(null=True, attr_name="expiresAt")
    planned = NumberAttribute(null=True)  # a backfill run's channels found so far (an added count)
    owner = UnicodeAttribute(null=True)  # "<bot>#<user>" on a claim made in a user's name (byOwner)

    by_owner = ByOwner()


def bind_tables(settings: Settings) -> None:
    """Point both models at the tables, region and endpoint these settings name. pynamodb keeps a table
    per model class, so this is process-wide: it is called once where a process builds its engine (and by
    the interactions function, which builds none), never as a constructor's side effect."""
    for model, table in ((MemoryRecord, settings.memories_table), (StateItem, settings.state_table)):
        model.Meta.table_name = table
        model.Meta.region = settings.aws_region
        model.Meta.host = settings.dynamodb_endpoint
        model._connection = None  # the connection caches its host: rebuild it for these settings
