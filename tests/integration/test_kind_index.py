"""A bot's whole kind is listed from byKindKeys (keys and scope: a record's later updates leave it alone)
once the table has it, and from byKind (the whole item) on a table made before it, until DynamoDB has
filled it (issue 46). Under moto: the template's tables, and a memories table as it was before."""

from __future__ import annotations

import time

import pytest

from engram.engine import build_engine
from engram.record import Paging
from engram.service import ChatMessage
from engram.vectors.edge import EdgeIndex
from infra.aws_template import table_definitions
from tests.integration.conftest import TABLES, moto_settings


@pytest.fixture
def queried(monkeypatch):
    """The index each Query of a memories table named."""
    from pynamodb.connection.base import Connection

    names: list[str] = []
    call = Connection._make_api_call

    def counted(connection, operation, kwargs):
        if operation == "Query" and "memories" in kwargs.get("TableName", ""):
            names.append(kwargs.get("IndexName") or "")
        return call(connection, operation, kwargs)

    monkeypatch.setattr(Connection, "_make_api_call", counted)
    return names


@pytest.mark.parametrize("table", ["template", "before byKindKeys"])
def test_a_whole_kind_is_listed_from_the_index_the_table_has(aws, embedder, tmp_path, queried, table):
    name = TABLES["MemoriesTable"]
    if table != "template":
        name = "t-older-memories"
        older = dict(table_definitions()["MemoriesTable"])
        older["GlobalSecondaryIndexes"] = [
            i for i in older["GlobalSecondaryIndexes"] if i["IndexName"] != "byKindKeys"
        ]
        aws["dynamodb"].create_table(TableName=name, **older)
    settings = moto_settings(aws, tmp_path).model_copy(update={"memories_table": name})
    engine = build_engine(
        settings, index=EdgeIndex(tmp_path / "shard"), embedder=embedder, sqs_client=aws["sqs"]
    )
    service = engine.service
    said = [
        ChatMessage(source_id=f"m{n}", text=f"message {n} about sails", server="s1" if n % 2 else "s2")
        for n in range(30)
    ]
    ids = sorted(int(m.id) for m in service.add_messages("b", said).memories)
    records = service.records
    queried.clear()
    page = records.page("b", "message", Paging(None, 12))
    assert [int(r.id) for r in page] == ids[::-1][:12] and page[0].text.startswith("message")
    oldest = records.page("b", "message", Paging(ids[3], 5, oldest_first=True))
    assert [int(r.id) for r in oldest] == ids[4:9]
    newest = records.newest("b", "message", 10)
    assert [int(r.id) for r in newest] == ids[::-1][:10] and {r.server for r in newest} == {"s1", "s2"}
    expected = "byKindKeys" if table == "template" else "byKind"
    assert queried and set(queried) == {expected}, queried
    engine.service.index.close()


def test_a_listing_asks_every_shard_for_its_first_page_at_once(aws, embedder, tmp_path, monkeypatch):
    """A bot's kind sits under keys.READ_SHARDS keys; a listing needs the first page of each before its
    first row. Asked one after another, each round trip of DynamoDB's adds to the listing's time."""
    from pynamodb.connection.base import Connection

    from engram.store import keys

    settings = moto_settings(aws, tmp_path)
    engine = build_engine(
        settings, index=EdgeIndex(tmp_path / "shard"), embedder=embedder, sqs_client=aws["sqs"]
    )
    service = engine.service
    said = [ChatMessage(source_id=f"m{n}", text=f"message {n}") for n in range(40)]
    ids = sorted(int(m.id) for m in service.add_messages("b", said).memories)
    asked: list[tuple[float, float]] = []
    call = Connection._make_api_call

    def slow(connection, operation, kwargs):
        if operation != "Query" or "memories" not in kwargs.get("TableName", ""):
            return call(connection, operation, kwargs)
        began = time.monotonic()
        time.sleep(0.2)  # a round trip, made long
        out = call(connection, operation, kwargs)
        asked.append((began, time.monotonic()))
        return out

    monkeypatch.setattr(Connection, "_make_api_call", slow)
    newest = service.records.newest("b", "message", 10)
    assert [int(r.id) for r in newest] == ids[::-1][:10]
    firsts = sorted(asked)[: keys.READ_SHARDS]
    assert len(firsts) == keys.READ_SHARDS
    # together: every first page was asked before any of them was answered
    assert max(b for b, _ in firsts) < min(e for _, e in firsts), firsts
    engine.service.index.close()


def test_readers_waiting_on_the_first_table_check_read_the_index_it_found(monkeypatch):
    """Listings at a stack's start all ask at once whether byKindKeys is there: those that waited for the
    first DescribeTable went on to byKind — which a table made with byKindKeys alone does not have (503s
    under the 32-client load)."""
    from concurrent.futures import ThreadPoolExecutor

    from engram.store.kinds import KindIndex
    from engram.store.models import MemoryRecord

    def described():
        time.sleep(0.2)  # the first check is still out when the others ask
        return {"GlobalSecondaryIndexes": [{"IndexName": "byKindKeys", "IndexStatus": "ACTIVE"}]}

    monkeypatch.setattr(MemoryRecord, "describe_table", described)
    kinds = KindIndex()
    with ThreadPoolExecutor(8) as pool:
        chosen = list(pool.map(lambda _: kinds.index(), range(8)))
    assert all(index is MemoryRecord.by_kind_keys for index in chosen)
