"""template.yaml is the one declaration of tables and functions; check what code relies on."""

import ast
import json
import re
import shlex
from pathlib import Path

from engram.store.models import MemoryRecord, StateItem
from infra.aws_template import load_template, table_definitions

ROOT = Path(__file__).resolve().parents[2]


def defines(source: str, name: str) -> bool:
    """Whether a module defines `name` at its top level (a def or an assignment, not a word in a comment)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def commands(script: str) -> list[list[str]]:
    """The commands of a shell script, continuation lines joined and comments left out, as words."""
    joined = re.sub(r"\\\n", " ", script)
    words = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [w for w in words if w]


def test_every_function_handler_exists():
    resources = load_template()["Resources"]
    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    assert functions
    for resource in functions.values():
        handler, code = resource["Properties"]["Handler"], ROOT / resource["Properties"]["CodeUri"]
        if handler.endswith(".sh"):  # a Lambda Web Adapter start script: it must start the app it names
            runs = [c for c in commands((code / handler).read_text()) if "exec" in c]
            assert len(runs) == 1 and runs[0][-1] == "app:app"
            assert runs[0][runs[0].index("-m") + 1] == "uvicorn"
            assert defines((code / "app.py").read_text(), "app")
            continue
        module, _, attr = handler.partition(".")
        assert defines((code / f"{module}.py").read_text(), attr), handler


def test_model_indexes_match_the_template():
    tables = table_definitions()
    declared = {
        i["IndexName"]: (i["KeySchema"], i["Projection"])
        for table in ("MemoriesTable", "StateTable")
        for i in tables[table]["GlobalSecondaryIndexes"]
    }
    for index in (
        MemoryRecord.by_user,
        MemoryRecord.by_kind,
        MemoryRecord.by_kind_keys,
        MemoryRecord.pending,
        StateItem.by_owner,
    ):
        schema = index._get_schema()
        key_schema, projection = declared[schema["index_name"]]
        assert sorted(key_schema, key=str) == sorted(schema["key_schema"], key=str)
        assert projection == schema["projection"]


def test_workers_report_partial_batch_failures_and_have_a_dlq():
    resources = load_template()["Resources"]
    for mapping in _mappings().values():
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "deadLetterTargetArn" in resources["JobsQueue"]["Properties"]["RedrivePolicy"]


def test_streaming_proxy_uses_a_response_stream_function_url():
    fn = load_template()["Resources"]["StreamingProxyFunction"]["Properties"]
    assert fn["FunctionUrlConfig"]["InvokeMode"] == "RESPONSE_STREAM"
    assert fn["Environment"]["Variables"]["AWS_LWA_INVOKE_MODE"] == "response_stream"


def test_the_layer_is_built_for_the_templates_runtime_and_architecture():
    """layers/engram/Makefile picks wheels for the Lambda runtime, whatever Python the host has."""
    globals_ = load_template()["Globals"]["Function"]
    makefile = (ROOT / "layers/engram/Makefile").read_text()
    version = globals_["Runtime"].removeprefix("python")
    platform = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}[
        globals_["Architectures"][0]
    ]
    assert f"LAMBDA_PYTHON_VERSION := {version}\n" in makefile
    assert f"LAMBDA_PLATFORM := {platform}\n" in makefile
    assert "--only-binary=:all:" in makefile and "--python-version $(LAMBDA_PYTHON_VERSION)" in makefile
    assert load_template()["Resources"]["EngramLayer"]["Properties"]["CompatibleRuntimes"] == [
        globals_["Runtime"]
    ]


def _functions():
    resources = load_template()["Resources"]
    return {k: v["Properties"] for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}


def test_queues_hide_a_batch_longer_than_the_worker_can_run():
    """AWS's rule for Lambda event sources: visibility timeout >= 6x the function's timeout."""
    resources = load_template()["Resources"]
    worker = _functions()["WorkerFunction"]
    for mapping in _mappings().values():
        queue = mapping["EventSourceArn"]["GetAtt"].split(".")[0]
        assert resources[queue]["Properties"]["VisibilityTimeout"] >= 6 * worker["Timeout"]


def _mappings() -> dict:
    """The worker's event source mappings (its queues), by logical id."""
    resources = load_template()["Resources"]
    return {
        name: r["Properties"]
        for name, r in resources.items()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": "WorkerFunction"}
    }


def test_the_worker_polls_each_of_its_queues_with_a_policy_for_that_queue_alone():
    """Issue 46: SAM's SQS events attach AWSLambdaSQSQueueExecutionRole (receive and delete on every queue
    of the account, no ChangeMessageVisibility for the back-off). The mappings are written out under SAM's
    own logical ids, and the worker's role may poll exactly the queues they name."""
    from engram.jobs import QUEUE_OF_CLASS

    worker = _functions()["WorkerFunction"]
    assert "Events" not in worker
    mappings = _mappings()
    polled = sorted(m["EventSourceArn"]["GetAtt"].removesuffix(".Arn") for m in mappings.values())
    allowed = sorted(
        p["SQSPollerPolicy"]["QueueName"]["GetAtt"].removesuffix(".QueueName")
        for p in worker["Policies"]
        if "SQSPollerPolicy" in p
    )
    assert polled == allowed == sorted(QUEUE_OF_CLASS.values())
    # as SAM named them (function + event): a stack deployed with the events keeps its mappings
    assert set(mappings) == {
        f"WorkerFunction{n}" for n in ("Jobs", "Interactive", "Extract", "Index", "Maintenance")
    }
    for other, props in _functions().items():
        assert other == "WorkerFunction" or not [
            p for p in props.get("Policies", []) if "SQSPollerPolicy" in p
        ]


def test_only_the_functions_that_call_ollama_join_the_vpc():
    assert "VpcConfig" not in load_template()["Globals"]["Function"]
    in_vpc = {name for name, props in _functions().items() if "VpcConfig" in props}
    assert in_vpc == {"HttpFunction", "StreamingProxyFunction", "WorkerFunction"}
    rules = load_template()["Rules"]
    assert {"SubnetsNeedSecurityGroups", "OllamaNeedsItsUrl"} <= set(rules)


def test_the_interactions_function_reads_no_secret_and_queues_only_interactive_jobs():
    policies = _functions()["InteractionsFunction"]["Policies"]
    assert not [p for p in policies if "SSMParameterReadPolicy" in p]
    sends = [
        p["SQSSendMessagePolicy"]["QueueName"]["GetAtt"] for p in policies if "SQSSendMessagePolicy" in p
    ]
    assert sends == ["InteractiveQueue.QueueName"]


def test_the_streaming_proxy_is_ready_on_a_path_that_touches_nothing():
    from fastapi.testclient import TestClient

    from engram.api.app import create_app

    def no_engine():
        raise AssertionError("the readiness check touched the engine")

    path = _functions()["StreamingProxyFunction"]["Environment"]["Variables"]["AWS_LWA_READINESS_CHECK_PATH"]
    assert path == "/livez"
    assert TestClient(create_app(engine_factory=no_engine)).get(path).json() == {"ok": True}


def test_sample_schedule_events_are_what_the_rules_send():
    import json

    events = _functions()["ScheduleFunction"]["Events"]
    sent = sorted(json.loads(e["Properties"]["Input"])["job"] for e in events.values())
    samples = sorted(json.loads(p.read_text())["job"] for p in (ROOT / "events").glob("schedule-*.json"))
    assert sent == samples


def test_the_layer_uses_no_dynamodb_feature_the_local_dynamodb_lacks():
    """dynalite (make run, the integration tests) has no transactions, PartiQL or TTL expiry: engram's
    code must not need them (a TTL attribute may be set, but nothing may rely on items expiring)."""
    banned = re.compile(
        r"TransactWrite|TransactGet|transact_write|transact_get|execute_statement|ExecuteStatement"
        r"|update_time_to_live|UpdateTimeToLive"
    )
    package = Path(__file__).resolve().parents[2] / "layers" / "engram" / "engram"
    found = [
        f"{p.relative_to(package)}:{n}"
        for p in package.rglob("*.py")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if banned.search(line)
    ]
    assert found == []


def test_sam_local_s_env_json_names_every_queue_the_functions_are_given():
    """`sam local` cannot resolve a queue's !Ref (it would hand the function the bare logical id): env.json
    must give every queue URL the template's functions read (the container tier's sam-local found one
    missing, a schedule's sweep sent to "IndexQueue")."""
    import json

    template = load_template()
    queues = {k for k, v in template["Resources"].items() if v["Type"] == "AWS::SQS::Queue"}
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    wanted = {
        name for name, value in variables.items() if isinstance(value, dict) and value.get("Ref") in queues
    }
    given = json.loads((ROOT / "env.json").read_text())["Parameters"]
    assert wanted and wanted <= set(given), wanted - set(given)


def test_the_worker_may_dead_letter_what_is_no_job_and_nothing_else_may():
    sends = {
        name: [
            p["SQSSendMessagePolicy"]["QueueName"]["GetAtt"]
            for p in props["Policies"]
            if "SQSSendMessagePolicy" in p
        ]
        for name, props in _functions().items()
        if isinstance(props.get("Policies"), list)
    }
    assert "JobsDeadLetterQueue.QueueName" in sends["WorkerFunction"]
    assert [n for n, queues in sends.items() if "JobsDeadLetterQueue.QueueName" in queues] == [
        "WorkerFunction"
    ]


def test_each_function_may_read_its_own_secrets_and_no_other():
    """Issue 46: every function in the VPC could read every secret of its stage (`engram/<stage>/*`). Each
    now names the parameters it reads: the functions open to the internet never the bot token, the worker
    never the admin key; every secret the template names is someone's."""
    grants = {
        name: {
            p["SSMParameterReadPolicy"]["ParameterName"]["Sub"].removeprefix("engram/${Stage}/")
            for p in props.get("Policies", [])
            if "SSMParameterReadPolicy" in p
        }
        for name, props in _functions().items()
    }
    assert not [g for names in grants.values() for g in names if "*" in g or "/" in g]
    assert "discord-bot-token" not in grants["HttpFunction"] | grants["StreamingProxyFunction"]
    assert "api-key" not in grants["WorkerFunction"] and not grants["InteractionsFunction"]
    variables = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    named = set()
    for name, value in variables.items():
        if name.endswith("_PARAMETER"):
            text = json.dumps(value)
            named |= {m for m in re.findall(r"/engram/\$\{Stage\}/([a-z-]+)", text)}
    assert named and named == set().union(*grants.values()), named ^ set().union(*grants.values())
