"""`make run`'s process for tests: started with the environment a user would set, killed with kill -9,
started again on the same data dir."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from infra.poller import settle
from tests.support import wait_until

ROOT = Path(__file__).resolve().parent.parent
KEY, PROXY_KEY = "crash-admin-key", "crash-proxy-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """The local stack as a process, with the environment a user would set."""

    def __init__(self, data_dir: Path, env: dict[str, str]):
        self.data_dir, self.port = data_dir, free_port()
        self.env = {
            **os.environ,
            "ENGRAM_DATA_DIR": str(data_dir),
            "ENGRAM_PORT": str(self.port),
            "ENGRAM_API_KEY": KEY,
            "ENGRAM_PROXY_KEY": PROXY_KEY,
            "ENGRAM_DYNAMODB_PORT": "0",
            "ENGRAM_SQS_PORT": "0",
            **env,
        }
        self.url = f"http://127.0.0.1:{self.port}"
        self.api = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        self.proc: subprocess.Popen | None = None
        self.output = ""

    def start(self) -> Stack:
        # kept open while the process runs (it writes there); closed by stop()
        log = open(self.data_dir / f"stack-{time.monotonic_ns()}.log", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "infra.local_stack"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._log = log
        ok = wait_until(lambda: self._answers() or self.proc.poll() is not None, timeout_s=90, every_s=0.1)
        assert ok and self.proc.poll() is None, self.read_log()
        return self

    def client(self, service: str):  # noqa: ANN201 - boto3's client types are generated per service
        """A boto3 client of the stack's own DynamoDB or SQS (the test fixed their ports in the env)."""
        import boto3

        port = self.env[{"dynamodb": "ENGRAM_DYNAMODB_PORT", "sqs": "ENGRAM_SQS_PORT"}[service]]
        return boto3.client(
            service,
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )

    def settle(self, timeout_s: float = 60) -> None:
        """Until every queued job has run (tests.support.settle), read from the stack's own SQS."""
        settle(self.client("sqs"), timeout_s)

    def health(self) -> dict:
        """What /healthz tells the admin key (embedderWarm among it)."""
        return self.api.get("/healthz", timeout=5).json()

    def wait_warm(self, timeout_s: float = 120) -> Stack:
        """Wait for what the stack reports: the embedder's model loaded (searches use meaning from then
        on)."""
        assert wait_until(lambda: self.health().get("embedderWarm"), timeout_s=timeout_s, every_s=0.2), (
            self.read_log()
        )
        return self

    def _answers(self) -> bool:
        try:
            return self.api.get("/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def read_log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def kill(self) -> None:
        """kill -9: no signal handler, no cleanup."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.output += self.read_log()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.api.close()

    def replayed(self) -> int:
        """How many queued jobs the last start found in the journal and queued again."""
        for line in reversed(self.read_log().splitlines()):
            if "queued jobs from before the last stop" in line:
                return int(line.split(" queued jobs")[0].rsplit(" ", 1)[-1])
        return 0
