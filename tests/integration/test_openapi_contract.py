"""The OpenAPI document says what the server does: schemathesis generates requests for every operation
from the live app's /openapi.json, with the documented auth, and holds every response to the document.
Zero server errors."""

from __future__ import annotations

import json

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.conftest import KEY

ADMIN = {"Authorization": f"Bearer {KEY}"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 25  # per operation; every run is a new sample


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value) -> bytes:
    """The import body: whatever string hypothesis made, as lines of (most likely invalid) JSON."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


# schemathesis's pytest loader does not run under pytest 9; its Python API with hypothesis does the same.
def each_operation(stack, examples: int, run_case) -> dict[str, int]:
    """Run `run_case(case)` on generated cases of every documented operation; cases run per operation."""
    schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    ran: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        ran[label] = 0
        _cases(operation, examples, run_case, ran, label)()
    return ran


def _cases(operation, examples: int, run_case, ran: dict[str, int], label: str):
    """A hypothesis test over one operation's generated cases, counting them under its label."""

    @given(case=operation.as_strategy())
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case):
        ran[label] += 1
        run_case(case)

    return run


def test_every_operation_answers_as_documented(stack):
    ran = each_operation(stack, EXAMPLES, lambda case: case.call_and_validate(headers=ADMIN, checks=CHECKS))
    assert len(ran) >= 10 and all(ran.values())
    print(f"schemathesis: {sum(ran.values())} cases over {len(ran)} operations, 0 server errors")


def test_every_operation_refuses_strangers_as_documented(stack):
    def stranger(case):
        response = case.call(headers={"Authorization": "Bearer wrong"})
        if case.path.startswith("/v1/"):
            assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
        else:
            assert response.status_code < 500

    each_operation(stack, 5, stranger)


def test_the_document_matches_the_server(stack):
    doc = httpx.get(f"{stack.url}/openapi.json").json()
    operations = [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]
    assert not [f"{m} {p}" for p, m, op in operations if "422" in op["responses"]]  # errors are 400
    assert doc["components"]["securitySchemes"]["adminKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["adminKey"]["description"],
    }
    for path, method, op in operations:
        if path.startswith("/v1/"):
            assert op.get("security") == [{"adminKey": []}], f"{method} {path}"
    patch = doc["paths"]["/v1/settings"]["patch"]
    assert patch["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EmbeddingSettingsPatch"
    }
