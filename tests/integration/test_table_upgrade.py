"""A data dir made before an index was added to the template: the local stack's start gives its table the
index (dynalite cannot add one in place), keeps every item, and finishes a rebuild cut off anywhere."""

from __future__ import annotations

import boto3
import pytest

from infra.aws_template import COPIED, REBUILDING, create_tables, table_definitions
from infra.local_dynamodb import LocalDynamoDB

TABLES = {"MemoriesTable": "up-memories", "StateTable": "up-state"}
STATE = TABLES["StateTable"]
ITEMS = 120  # more than one batch, fewer than a page


@pytest.fixture
def dynamodb(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    server = LocalDynamoDB(tmp_path / "dynamodb").start()
    yield boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server.endpoint)
    server.stop()


def old_state_table(client, name: str = STATE) -> None:
    """The state table as the template made it before byOwner: no index, the same items."""
    args = table_definitions()["StateTable"]
    client.create_table(
        TableName=name,
        KeySchema=args["KeySchema"],
        AttributeDefinitions=[a for a in args["AttributeDefinitions"] if a["AttributeName"] in ("pk", "sk")],
        BillingMode="PAY_PER_REQUEST",
    )
    # dynalite makes a table ACTIVE on its next tick: a write before then is "not found" (seen under load)
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    fill(client, name, range(ITEMS))


def fill(client, name: str, numbers) -> None:
    for n in numbers:
        item = {"pk": {"S": "unique#bot1"}, "sk": {"S": f"src#{n:04d}"}, "memoryId": {"N": str(n)}}
        if n % 2:
            item["owner"] = {"S": f"bot1#user{n % 3}"}
        client.put_item(TableName=name, Item=item)


def items(client, name: str = STATE) -> list[dict]:
    return [i for page in client.get_paginator("scan").paginate(TableName=name) for i in page["Items"]]


def upgraded(client) -> None:
    """Every item kept, the index there and answering, no copy left."""
    assert sorted(i["sk"]["S"] for i in items(client)) == [f"src#{n:04d}" for n in range(ITEMS)]
    indexes = client.describe_table(TableName=STATE)["Table"].get("GlobalSecondaryIndexes", [])
    assert [i["IndexName"] for i in indexes] == ["byOwner"]
    owned = client.query(
        TableName=STATE,
        IndexName="byOwner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "bot1#user1"}},
    )["Items"]
    assert sorted(int(i["memoryId"]["N"]) for i in owned) == [n for n in range(ITEMS) if n % 2 and n % 3 == 1]
    assert f"{STATE}{REBUILDING}" not in client.list_tables()["TableNames"]


def test_a_table_made_before_an_index_gets_it_and_keeps_every_item(dynamodb):
    old_state_table(dynamodb)
    create_tables(dynamodb, TABLES)
    upgraded(dynamodb)
    create_tables(dynamodb, TABLES)  # the next start changes nothing
    upgraded(dynamodb)


def test_a_rebuild_cut_off_while_copying_starts_again_from_the_untouched_table(dynamodb):
    old_state_table(dynamodb)
    old_state_table(dynamodb, f"{STATE}{REBUILDING}")
    dynamodb.delete_item(
        TableName=f"{STATE}{REBUILDING}", Key={"pk": {"S": "unique#bot1"}, "sk": {"S": "src#0007"}}
    )
    create_tables(dynamodb, TABLES)  # no marker in the copy: it is not trusted
    upgraded(dynamodb)


def test_a_rebuild_cut_off_after_the_table_was_dropped_is_finished_from_the_copy(dynamodb):
    old_state_table(dynamodb, f"{STATE}{REBUILDING}")
    dynamodb.put_item(TableName=f"{STATE}{REBUILDING}", Item={"pk": {"S": COPIED}, "sk": {"S": COPIED}})
    create_tables(dynamodb, TABLES)  # the table itself is gone: the complete copy is all there is
    upgraded(dynamodb)
