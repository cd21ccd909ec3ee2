"""`make test`: every tier in one run, as three pytest processes side by side, each with its own log.

The container tier (Docker builds, compose, sam local) is the longest and waits mostly on Docker; the deploy
and browser tiers wait on subprocesses and Chromium; unit and integration wait on local servers and run on
two xdist workers (a module per worker, so a module's stack starts once). Run one after another they took
27 minutes here; side by side the wall time is about the container tier's. Each log is printed whole when
its process ends; the exit status is the first failure's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".test-logs"
RUNS = {
    "container": ["tests/container"],
    "deploy+browser": ["tests/deploy", "tests/browser"],
    "unit+integration": [
        "-n",
        "2",
        "--dist",
        "loadfile",
        "--no-loadscope-reorder",
        "tests/unit",
        "tests/integration",
    ],
}


def main() -> int:
    LOGS.mkdir(exist_ok=True)
    started = time.monotonic()
    running = {}
    for name, args in RUNS.items():
        log = open(LOGS / f"{name}.log", "w")  # noqa: SIM115 (closed when its process ends, below)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        running[name] = (subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log)
        print(f"started {name}: {' '.join(command[1:])} (log: .test-logs/{name}.log)", flush=True)
    status = 0
    while running:
        for name, (process, log) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            minutes = (time.monotonic() - started) / 60
            print(f"\n===== {name}: exit {process.returncode} after {minutes:.1f} min =====", flush=True)
            print((LOGS / f"{name}.log").read_text(), flush=True)
            status = status or process.returncode
            del running[name]
        time.sleep(1)
    print(f"all tiers: {(time.monotonic() - started) / 60:.1f} min, exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
