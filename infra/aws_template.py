"""Read template.yaml and build its DynamoDB tables and SQS queues on a local engine (moto)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"


class _CfnLoader(yaml.SafeLoader):
    """YAML loader that keeps CloudFormation's short tags (!Ref, !GetAtt, ...) as plain values."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node)}
    return {suffix: loader.construct_mapping(node)}


_CfnLoader.add_multi_constructor("!", _tag)


def load_template(path: Path = TEMPLATE) -> dict:
    """The template as a dict, short tags kept as {"Ref": ...}-like dicts."""
    return yaml.load(path.read_text(), Loader=_CfnLoader)


# A table made here (the local stack, moto) is made as a new installation's would be: byKindKeys only, the
# byKind it replaced left out (an installation from before keeps it one deploy: docs/operating.md)
NEW_INSTALLATION = {"ByKindIndex": "drop"}


def table_definitions(
    template: dict | None = None, parameters: dict[str, str] | None = None
) -> dict[str, dict]:
    """CreateTable arguments for every AWS::DynamoDB::Table, by logical id, with the template's parameter
    defaults (or `parameters` where given) deciding its conditional indexes."""
    template = template or load_template()
    out = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::DynamoDB::Table":
            continue
        props = resource["Properties"]
        args = {
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if props.get("GlobalSecondaryIndexes"):
            args["GlobalSecondaryIndexes"] = _indexes(
                template, props["GlobalSecondaryIndexes"], parameters or {}
            )
        out[logical_id] = args
    return out


def _indexes(template: dict, declared: list, parameters: dict[str, str]) -> list[dict]:
    """A table's indexes as the template's parameter defaults make them: an `!If [condition, index,
    AWS::NoValue]` taken by its condition (an `!Equals` of a parameter's default and a value)."""
    out = []
    for index in declared:
        choice = index.get("If", index.get("Fn::If")) if isinstance(index, dict) else None
        if choice is not None:
            condition, then, otherwise = choice
            index = then if _holds(template, condition, parameters) else otherwise
        if isinstance(index, dict) and index.get("Ref") == "AWS::NoValue":
            continue
        out.append(index)
    return out


def _holds(template: dict, name: str, parameters: dict[str, str]) -> bool:
    rule = template["Conditions"][name]
    left, right = rule.get("Equals", rule.get("Fn::Equals"))
    values = [
        parameters.get(side["Ref"], template["Parameters"][side["Ref"]].get("Default"))
        if isinstance(side, dict)
        else side
        for side in (left, right)
    ]
    return str(values[0]) == str(values[1])


def create_tables(dynamodb_client, names: dict[str, str]) -> None:
    """Create the template's tables (logical id -> table name) unless they exist; a table made before an
    index was added to the template gets it (add_missing_indexes)."""
    existing = set(dynamodb_client.list_tables()["TableNames"])
    for logical_id, args in table_definitions(parameters=NEW_INSTALLATION).items():
        name = names[logical_id]
        if f"{name}{REBUILDING}" in existing:  # a rebuild was cut off: finish it (or start it again)
            _rebuild(dynamodb_client, name, args)
        elif name not in existing:
            dynamodb_client.create_table(TableName=name, **args)
        else:
            add_missing_indexes(dynamodb_client, name, args)


# A local table is rebuilt through a copy named so, which is complete once it holds this marker item.
REBUILDING = "-rebuilding"
COPIED = "engram:copy-complete"


def add_missing_indexes(dynamodb_client, name: str, args: dict) -> bool:
    """Give an existing table the template's global secondary indexes it lacks. dynalite cannot add one
    to a table (UpdateTable ignores GlobalSecondaryIndexUpdates), so the table is copied, made again with
    every index and filled from the copy; a start cut off anywhere in that finishes it (or starts again
    from the untouched table). On AWS CloudFormation adds the index itself."""
    table = dynamodb_client.describe_table(TableName=name)["Table"]
    have = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    if {i["IndexName"] for i in args.get("GlobalSecondaryIndexes", [])} <= have:
        return False
    _rebuild(dynamodb_client, name, args)
    return True


def _rebuild(dynamodb_client, name: str, args: dict) -> None:
    copy = f"{name}{REBUILDING}"
    marker = {
        a["AttributeName"]: {a["AttributeType"]: COPIED if a["AttributeType"] == "S" else "0"}
        for a in args["AttributeDefinitions"]
        if a["AttributeName"] in {k["AttributeName"] for k in args["KeySchema"]}
    }
    tables = set(dynamodb_client.list_tables()["TableNames"])
    complete = copy in tables and "Item" in dynamodb_client.get_item(TableName=copy, Key=marker)
    if not complete:  # the table itself is whole: copy it (again)
        if copy in tables:
            _drop(dynamodb_client, copy)
        keys = {k["AttributeName"] for k in args["KeySchema"]}
        _make(
            dynamodb_client,
            copy,
            KeySchema=args["KeySchema"],
            AttributeDefinitions=[a for a in args["AttributeDefinitions"] if a["AttributeName"] in keys],
            BillingMode="PAY_PER_REQUEST",
        )
        _copy(dynamodb_client, name, copy)
        dynamodb_client.put_item(TableName=copy, Item=marker)
    if name in tables:
        _drop(dynamodb_client, name)
    _make(dynamodb_client, name, **args)
    _copy(dynamodb_client, copy, name, skip=marker)
    _drop(dynamodb_client, copy)


def _make(dynamodb_client, name: str, **args) -> None:
    """Create a table and wait until it takes writes."""
    dynamodb_client.create_table(TableName=name, **args)
    dynamodb_client.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )


def _drop(dynamodb_client, name: str) -> None:
    """Delete a table and wait until it is gone (its name free again)."""
    dynamodb_client.delete_table(TableName=name)
    dynamodb_client.get_waiter("table_not_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )


def _copy(dynamodb_client, source: str, target: str, skip: dict | None = None) -> None:
    """Every item of one table put into another, 25 at a time (puts: a copy made twice is the same)."""
    for page in dynamodb_client.get_paginator("scan").paginate(TableName=source):
        items = [i for i in page["Items"] if skip is None or any(i.get(k) != v for k, v in skip.items())]
        for start in range(0, len(items), 25):
            requests = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
            while requests:
                left = dynamodb_client.batch_write_item(RequestItems={target: requests})["UnprocessedItems"]
                requests = left.get(target, [])


def create_queues(sqs_client, prefix: str, visibility_s: int | None = None) -> dict[str, str]:
    """Create every SQS queue of the template as `<prefix>-<logical id>` (dead-letter queues first, with
    the template's visibility and redrive settings, or `visibility_s`); returns queue URLs by logical id."""
    resources = load_template()["Resources"]
    queues = {k: v.get("Properties") or {} for k, v in resources.items() if v["Type"] == "AWS::SQS::Queue"}
    urls: dict[str, str] = {}
    arns: dict[str, str] = {}
    for logical_id in sorted(queues, key=lambda k: "RedrivePolicy" in queues[k]):
        props = queues[logical_id]
        attributes = {}
        if "VisibilityTimeout" in props:
            attributes["VisibilityTimeout"] = str(visibility_s or props["VisibilityTimeout"])
        if "MessageRetentionPeriod" in props:
            attributes["MessageRetentionPeriod"] = str(props["MessageRetentionPeriod"])
        if "RedrivePolicy" in props:
            target = props["RedrivePolicy"]["deadLetterTargetArn"]["GetAtt"].split(".")[0]
            attributes["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": arns[target],
                    "maxReceiveCount": str(props["RedrivePolicy"]["maxReceiveCount"]),
                }
            )
        url = sqs_client.create_queue(QueueName=f"{prefix}-{logical_id}", Attributes=attributes)["QueueUrl"]
        urls[logical_id] = url
        arns[logical_id] = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
    return urls
