"""Operating the stack: stages that share nothing, data kept safe, alarms on what matters, logs with a
retention, and metrics from the built functions (the template as SAM deploys it)."""

from __future__ import annotations

import json
import tomllib

import pytest

from tests.deploy import harness

# The property that names a resource in a namespace wider than the stack (account and region): a value
# set there is claimed by one stack only; left out, CloudFormation generates one from the stack name.
NAMING = {
    "AWS::Lambda::LayerVersion": "LayerName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::CloudWatch::Alarm": "AlarmName",
    "AWS::IAM::Role": "RoleName",
    "AWS::CloudWatch::Dashboard": "DashboardName",
    "AWS::ApiGatewayV2::Api": "Name",
    "AWS::SSM::Parameter": "Name",
    "AWS::Events::Rule": "Name",
}
FUNCTIONS = (
    "HttpFunction",
    "InteractionsFunction",
    "StreamingProxyFunction",
    "WorkerFunction",
    "ScheduleFunction",
)


def _overrides(env: str) -> dict[str, str]:
    """The parameter values `sam deploy --config-env <env>` passes (samconfig.toml)."""
    config = tomllib.loads((harness.ROOT / "samconfig.toml").read_text())[env]["deploy"]["parameters"]
    return dict(item.split("=", 1) for item in config["parameter_overrides"]), config["stack_name"]


def _names(stack: harness.Stack) -> dict[str, set[str]]:
    """Every name the stack would claim outside itself: explicit resource names, the SSM parameters its
    functions read and may read, and (for names CloudFormation generates) the stack-name prefix."""
    explicit, ssm = set(), set()
    for resource in stack.template["Resources"].values():
        props = stack.resolve(resource.get("Properties", {}))
        name_property = NAMING.get(resource["Type"])
        if name_property and props.get(name_property):
            explicit.add(f"{resource['Type']}:{props[name_property]}")
        for name, value in (props.get("Environment", {}).get("Variables", {}) or {}).items():
            if name.endswith("_PARAMETER") and value:
                ssm.add(value)
        for policy in props.get("Policies", []) or []:
            for statement in (policy.get("PolicyDocument", {}) or {}).get("Statement", []):
                for arn in (
                    statement.get("Resource", [])
                    if isinstance(statement.get("Resource"), list)
                    else [statement.get("Resource")]
                ):
                    if isinstance(arn, str) and ":parameter/" in arn:
                        ssm.add(arn.split(":parameter", 1)[1])
    return {"explicit": explicit, "ssm": ssm, "generated prefix": {stack.name}}


@pytest.fixture(scope="module")
def stages():
    out = {}
    for env in ("dev", "prod"):
        overrides, stack_name = _overrides(env)
        out[env] = harness.Stack(harness.sam_transform(overrides), overrides, name=stack_name)
    return out


def test_dev_and_prod_share_nothing(stages):
    dev, prod = (_names(stages[e]) for e in ("dev", "prod"))
    assert dev["ssm"] and prod["ssm"]
    assert all(p.startswith("/engram/dev/") for p in dev["ssm"]), dev["ssm"]
    assert all(p.startswith("/engram/prod/") for p in prod["ssm"]), prod["ssm"]
    for kind in dev:
        assert dev[kind].isdisjoint(prod[kind]), (kind, dev[kind] & prod[kind])
    assert "AWS::Lambda::LayerVersion:engram-dev" in dev["explicit"]
    assert "AWS::Lambda::LayerVersion:engram-prod" in prod["explicit"]
    print(json.dumps({e: {k: sorted(v) for k, v in _names(stages[e]).items()} for e in stages}, indent=1))


def test_the_tables_survive_a_bad_deploy(stages):
    for logical, table in stages["prod"].resources("AWS::DynamoDB::Table").items():
        assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain", logical
        props = table["Properties"]
        assert props["DeletionProtectionEnabled"] is True, logical
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, logical


def test_every_queue_is_encrypted(stages):
    queues = stages["prod"].resources("AWS::SQS::Queue")
    assert len(queues) == 6  # a queue per class of job (engram.jobs.QUEUE_OF_CLASS) and the DLQ
    assert all(q["Properties"].get("SqsManagedSseEnabled") is True for q in queues.values())


def test_every_function_logs_json_to_a_group_with_a_retention(stages):
    stack = stages["prod"]
    groups = stack.resources("AWS::Logs::LogGroup")
    functions = stack.resources("AWS::Lambda::Function")
    assert set(FUNCTIONS) <= set(functions)
    for logical in FUNCTIONS:
        props = functions[logical]["Properties"]
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        group = props["LoggingConfig"]["LogGroup"]["Ref"]
        assert int(stack.resolve(groups[group]["Properties"]["RetentionInDays"])) == 90  # prod's samconfig
        # traced, but Discord's interactions: the X-Ray SDK's import is off its 3 s cold path (issue 46)
        mode = "PassThrough" if logical == "InteractionsFunction" else "Active"
        assert props["TracingConfig"] == {"Mode": mode}
        assert stack.resolve(props["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]) == "engram"


def test_alarms_watch_what_pages_someone(stages):
    stack = stages["prod"]
    alarms = {
        logical: stack.resolve(a["Properties"])
        for logical, a in stack.resources("AWS::CloudWatch::Alarm").items()
    }
    topic = {"Ref": "AlarmTopic"}
    assert all(
        stack.template["Resources"][logical]["Properties"]["AlarmActions"] == [topic] for logical in alarms
    )

    def metrics(alarm: dict) -> list[dict]:
        """An alarm's metrics: its one, or those its math is made of."""
        if "MetricName" in alarm:
            return [alarm]
        return [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]

    def watching(metric: str, dimension_value) -> list[dict]:
        return [
            a
            for a in alarms.values()
            if any(
                m["MetricName"] == metric and any(d["Value"] == dimension_value for d in m["Dimensions"])
                for m in metrics(a)
            )
        ]

    def physical(logical: str) -> str:
        return stack.resolve({"Ref": logical})

    dlq = stack.resolve({"Fn::GetAtt": ["JobsDeadLetterQueue", "QueueName"]})
    assert watching("ApproximateNumberOfMessagesVisible", dlq)[0]["Threshold"] == 0
    for queue in ("JobsQueue", "InteractiveQueue", "ExtractQueue", "IndexQueue", "MaintenanceQueue"):
        assert watching("ApproximateAgeOfOldestMessage", stack.resolve({"Fn::GetAtt": [queue, "QueueName"]}))
    for logical in FUNCTIONS:
        for metric in ("Errors", "Throttles"):
            assert watching(metric, physical(logical)), (logical, metric)
        # errors as a share of the invocations: one error in a million calls pages nobody
        [errors] = watching("Errors", physical(logical))
        assert watching("Invocations", physical(logical)) == [errors] and float(errors["Threshold"]) == 1
    for table in ("MemoriesTable", "StateTable"):
        throttled = watching("WriteThrottleEvents", physical(table))
        assert throttled and throttled == watching("ReadThrottleEvents", physical(table))
    slow = watching("Duration", physical("InteractionsFunction"))[0]
    assert slow["ExtendedStatistic"] == "p99" and float(slow["Threshold"]) == 2500
    assert watching("5xx", physical("HttpApi"))
    assert watching("Url5xxCount", physical("StreamingProxyFunction"))
    invalid = watching("discordInvalidRequests", "prod")[0]  # the metric RateLimits counts
    assert (
        invalid["Namespace"] == "engram" and invalid["Period"] == 600 and float(invalid["Threshold"]) < 10_000
    )
    subscriptions = stack.resources("AWS::SNS::Subscription")
    assert [s["Properties"]["Endpoint"] for s in subscriptions.values()] == [{"Ref": "AlarmEmail"}]


def test_built_functions_publish_cold_starts_and_phase_timings(deployment):
    """Powertools metrics (EMF on stdout, which Lambda sends to CloudWatch) from the built worker and
    interactions functions, in the one namespace, with the stage."""
    worker = deployment.start("WorkerFunction")
    record = json.loads((harness.ROOT / "events" / "sqs-sweep-job.json").read_text())
    assert worker.invoke(record)["error"] is None

    def metrics(process) -> dict[str, dict]:
        out = {}
        for line in process.logs:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            for directive in (doc.get("_aws") or {}).get("CloudWatchMetrics", []):
                assert directive["Namespace"] == "engram"
                for m in directive["Metrics"]:
                    out[m["Name"]] = doc
        return out

    emitted = metrics(worker)
    assert "ColdStart" in emitted and "job-sweepMs" in emitted, worker.logs
    assert "pendingRecords" in emitted  # the backlog waiting for vectors, each sweep (issue 46)
    assert emitted["job-sweepMs"]["stage"] == deployment.stack.parameters["Stage"]


def test_the_doors_someone_waits_on_have_reserved_concurrency(stages):
    """Workers in a burst must not take the room Discord's 3 s or a LibreChat turn needs: the HTTP,
    interactions and streaming proxy functions each keep theirs (0 in the parameters reserves none)."""
    stack = stages["prod"]
    functions = stack.resources("AWS::Lambda::Function")
    reserved = {
        logical: int(stack.resolve(functions[logical]["Properties"]["ReservedConcurrentExecutions"]))
        for logical in ("HttpFunction", "InteractionsFunction", "StreamingProxyFunction")
    }
    assert reserved == {"HttpFunction": 20, "InteractionsFunction": 10, "StreamingProxyFunction": 20}
    assert "ReservedConcurrentExecutions" not in functions["WorkerFunction"]["Properties"]
