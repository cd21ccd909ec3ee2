"""template.yaml is the one declaration of tables and functions; check what code relies on."""

from pathlib import Path

from engram.records import MemoryRecord
from infra.aws_template import load_template, table_definitions

ROOT = Path(__file__).resolve().parents[2]


def test_every_function_handler_exists():
    resources = load_template()["Resources"]
    functions = {k: v for k, v in resources.items() if v["Type"] == "AWS::Serverless::Function"}
    assert functions
    for resource in functions.values():
        handler, code = resource["Properties"]["Handler"], ROOT / resource["Properties"]["CodeUri"]
        if handler.endswith(".sh"):  # a Lambda Web Adapter start script: it must start the app it names
            script = (code / handler).read_text()
            assert "uvicorn" in script and "app:app" in script and (code / "app.py").exists()
            continue
        module, _, attr = handler.partition(".")
        source = (code / f"{module}.py").read_text()
        assert f"def {attr}(" in source or f"{attr} = " in source


def test_model_indexes_match_the_template():
    memories = table_definitions()["MemoriesTable"]
    declared = {i["IndexName"]: (i["KeySchema"], i["Projection"]) for i in memories["GlobalSecondaryIndexes"]}
    for index in (MemoryRecord.by_user, MemoryRecord.by_kind, MemoryRecord.pending):
        schema = index._get_schema()
        key_schema, projection = declared[schema["index_name"]]
        assert sorted(key_schema, key=str) == sorted(schema["key_schema"], key=str)
        assert projection == schema["projection"]


def test_workers_report_partial_batch_failures_and_have_a_dlq():
    resources = load_template()["Resources"]
    event = resources["WorkerFunction"]["Properties"]["Events"]["Jobs"]["Properties"]
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
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
    platform = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}[globals_["Architectures"][0]]
    assert f"LAMBDA_PYTHON_VERSION := {version}\n" in makefile
    assert f"LAMBDA_PLATFORM := {platform}\n" in makefile
    assert "--only-binary=:all:" in makefile and "--python-version $(LAMBDA_PYTHON_VERSION)" in makefile
    assert load_template()["Resources"]["EngramLayer"]["Properties"]["CompatibleRuntimes"] == [globals_["Runtime"]]
