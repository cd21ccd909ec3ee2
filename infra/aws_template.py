"""Read template.yaml and build its DynamoDB tables and SQS queues on a local engine (moto)."""

from __future__ import annotations

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


def create_queues(sqs_client, name: str) -> str:
    """Create the jobs queue and its DLQ with the template's redrive settings; returns the queue URL."""
    template = load_template()["Resources"]
    props = template["JobsQueue"]["Properties"]
    dlq_url = sqs_client.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs_client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = f'{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"{props["RedrivePolicy"]["maxReceiveCount"]}"}}'
    return sqs_client.create_queue(
        QueueName=name,
        Attributes={"VisibilityTimeout": str(props["VisibilityTimeout"]), "RedrivePolicy": redrive},
    )["QueueUrl"]
