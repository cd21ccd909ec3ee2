"""`make sam-local` as a developer runs it: the Lambda Python 3.11 look-alike built, `sam build`, `make run`'s
stack started for the run, then every function of the built template invoked through SAM's Runtime
Interface Emulator with the events in events/ (its answer checked), and `sam local start-api` serving the
HTTP routes. Nothing of SAM's is left running after it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from infra.aws_template import load_template
from infra.sam_local import INVOCATIONS, SKIPPED

ROOT = Path(__file__).resolve().parents[2]


def _sam_containers() -> list[str]:
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=sam.cli.container.type=lambda"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_make_sam_local_invokes_every_function_and_serves_the_api(tmp_path):
    env = {**os.environ, "ENGRAM_DATA_DIR": str(tmp_path)}
    env.pop("MAKEFLAGS", None)
    done = subprocess.run(
        ["make", "-s", "sam-local"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    lines = [line.split() for line in done.stdout.splitlines() if line[:4] in ("ok  ", "FAIL", "skip")]
    passed = {(words[1], words[2]) for words in lines if words[0] == "ok"}
    assert {(function, event) for function, event, _ in INVOCATIONS} <= passed, out[-4000:]
    assert {("start-api", "GET"), ("start-api", "POST")} <= passed
    # every function of the template was invoked, but the one whose layer only AWS can hand out
    functions = {
        name for name, r in load_template()["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
    }
    assert {function for function, _, _ in INVOCATIONS} == functions - set(SKIPPED)
    assert not any(words[0] == "FAIL" for words in lines), out[-4000:]
    assert _sam_containers() == [], "SAM left containers behind"
    # the stack it started for the run is stopped again, with everything on disk
    assert "every write is on disk" in (tmp_path / "sam-local-stack.log").read_text()
