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


def table_definitions(template: dict | None = None) -> dict[str, dict]:
    """CreateTable arguments for every AWS::DynamoDB::Table, by logical id."""
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
            args["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        out[logical_id] = args
    return out


def create_tables(dynamodb_client, names: dict[str, str]) -> None:
    """Create the template's tables (logical id -> table name) unless they exist."""
    existing = set(dynamodb_client.list_tables()["TableNames"])
    for logical_id, args in table_definitions().items():
        name = names[logical_id]
        if name not in existing:
            dynamodb_client.create_table(TableName=name, **args)


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
