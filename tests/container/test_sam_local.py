"""`make sam-local` as a developer runs it: every function of the built template invoked through SAM's
Runtime Interface Emulator in the local look-alike of the Lambda Python 3.11 image, against make run's
DynamoDB and SQS, each answer checked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_function_answers_through_sam_local_invoke(tmp_path):
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path), "ENGRAM_API_KEY": "sam-admin-key", "ENGRAM_PROXY_KEY": "sam-proxy-key"}
    done = subprocess.run(["make", "-s", "sam-local"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    lines = [line for line in out.splitlines() if line[:4] in ("ok  ", "FAIL", "skip")]
    invoked = {line.split()[1] for line in lines if line.startswith("ok")}
    assert invoked == {"HttpFunction", "InteractionsFunction", "WorkerFunction", "ScheduleFunction"}, out
    assert [line.split()[1] for line in lines if line.startswith("skip")] == ["StreamingProxyFunction"]
