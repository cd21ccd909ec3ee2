"""Loaded first in a simulated Lambda process: records every AWS API call the function's code makes
(service, operation, the resources it names) to the JSON-lines file named by ENGRAM_TEST_CALL_LOG, so
the test can hold the calls against the IAM policies the template grants. botocore is patched only
once the code imports it, so init timings stay honest."""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import threading

_lock = threading.Lock()


def _resources(params: dict) -> dict:
    """The parts of a request that name what IAM authorises it on."""
    out: dict = {}
    if "TableName" in params:
        out["tables"] = [params["TableName"]]
    if "IndexName" in params:
        out["index"] = params["IndexName"]
    if "RequestItems" in params:
        out["tables"] = sorted(params["RequestItems"])
    if "TransactItems" in params:
        out["tables"] = sorted({next(iter(item.values()))["TableName"] for item in params["TransactItems"]})
    if "QueueUrl" in params:
        out["queue_url"] = params["QueueUrl"]
    if "Name" in params:
        out["names"] = [params["Name"]]
    if "Names" in params:
        out["names"] = list(params["Names"])
    return out


def _record(service: str, operation: str, params: dict) -> None:
    path = os.environ.get("ENGRAM_TEST_CALL_LOG")
    if not path:
        return
    line = json.dumps({"service": service, "operation": operation, **_resources(params)})
    with _lock, open(path, "a") as log:
        log.write(line + "\n")


def _patch(base_client) -> None:
    original = base_client._make_api_call

    def _make_api_call(self, operation_name, api_params):
        _record(self.meta.service_model.endpoint_prefix, operation_name, api_params or {})
        return original(self, operation_name, api_params)

    base_client._make_api_call = _make_api_call


class _BotocoreClientHook(importlib.abc.MetaPathFinder):
    """Patches botocore.client.BaseClient right after botocore.client is first imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "botocore.client":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            _patch(module.BaseClient)

        spec.loader.exec_module = exec_then_patch
        return spec


def install() -> None:
    """Start recording (a no-op without ENGRAM_TEST_CALL_LOG)."""
    if os.environ.get("ENGRAM_TEST_CALL_LOG") and "botocore.client" not in sys.modules:
        sys.meta_path.insert(0, _BotocoreClientHook())
