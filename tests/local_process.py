"""`make run`'s process for tests: started with the environment a user would set, killed with kill -9,
started again on the same data dir."""

from __future__ import annotations

import json
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


PORT_TAKEN = "address already in use"


def logged_message(line: str) -> str:
    """A log line's message: the stack logs JSON lines (Powertools' format), or plain ones with
    ENGRAM_LOG_FORMAT=text."""
    if line.startswith("{"):
        try:
            return str(json.loads(line).get("message", ""))
        except ValueError:
            return line
    return line


def answers_as_engram(port: int, headers: dict[str, str] | None = None) -> bool:
    """Whether engram itself answers /healthz on the port: its JSON, not merely a 200. A port freed by a
    stop can be taken by another test's server before the restart binds it (CI: a moto server on the
    port answered 200 "healthy: dynamodb…" while the stack exited on "address already in use")."""
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", headers=headers, timeout=1)
        return (
            r.status_code == 200
            and r.headers.get("content-type", "").startswith("application/json")
            and (r.json().get("ok") is True)
        )
    except (httpx.HTTPError, ValueError):
        return False


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
        """Start (or restart) the process on a port free now: the one it had may have been taken since
        its stop. A start that loses the port to another process in between is tried again on another."""
        for attempt in range(3):
            if attempt or self.proc is not None:
                self._use_port(free_port())
            if attempt:  # which port was lost is in the log; a fixed DynamoDB or SQS port may be it
                for name in ("ENGRAM_DYNAMODB_PORT", "ENGRAM_SQS_PORT"):
                    if self.env.get(name, "0") != "0":
                        self.env[name] = str(free_port())
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
            ok = wait_until(
                lambda: answers_as_engram(self.port) or self.proc.poll() is not None,
                timeout_s=90,
                every_s=0.1,
            )
            if ok and self.proc.poll() is None:
                return self
            if PORT_TAKEN not in self.read_log():
                break
        raise AssertionError(self.read_log())

    def _use_port(self, port: int) -> None:
        self.port, self.env["ENGRAM_PORT"] = port, str(port)
        self.url = f"http://127.0.0.1:{port}"
        self.api.base_url = httpx.URL(self.url)

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
            said = logged_message(line)
            if "queued jobs from before the last stop" in said:
                return int(said.split(" queued jobs")[0].rsplit(" ", 1)[-1])
        return 0
