"""Tests drive engram through what it offers (its constructors, its ports, its public methods), never its
private attributes: a test that reaches `._something` of engram's pins an implementation, and breaks when
the code is reshaped while the behaviour holds (or, worse, keeps passing against a seam nothing uses)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Third-party seams the tests count requests through, each with why
THIRD_PARTY = {
    "_make_api_call": "pynamodb's and botocore's one request seam: how a test counts DynamoDB and SSM calls",
    "_get_schema": "pynamodb's index schema: checked against the template's",
}
# The bench measures the package from the inside (its costs per step); it is not a test of behaviour
SKIP = {TESTS / "bench"}


def _files():
    for path in sorted(TESTS.rglob("*.py")):
        if not any(skip in path.parents for skip in SKIP):
            yield path, ast.parse(path.read_text(), filename=str(path))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_test_reaches_a_private_attribute():
    offences = []
    for path, tree in _files():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in THIRD_PARTY
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                offences.append(f"{path.relative_to(TESTS)}:{node.lineno}: .{node.attr}")
    assert offences == []


def test_no_test_imports_a_private_name_of_engram():
    offences = []
    for path, tree in _files():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("engram", "infra")):
                offences += [
                    f"{path.relative_to(TESTS)}:{node.lineno}: {a.name}"
                    for a in node.names
                    if _private(a.name)
                ]
    assert offences == []
