"""DynamoDB for the local stack: dynalite (LevelDB on disk) in a Node child process.

Acknowledged writes survive a crash of the stack (kill -9): LevelDB appends each write to its log
before dynalite answers. It does not fsync, so a power cut can lose the last writes. dynalite has no
TTL, PITR or transactions: engram uses none of them on its request paths (tests/unit keeps it so)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import httpx

log = logging.getLogger("engram.dynamodb")
HERE = Path(__file__).resolve().parent / "dynamodb"
MIN_NODE = 20


def _pipe(stream: IO[str] | None) -> IO[str]:
    """A pipe the server was started with (stdin, stdout and stderr are always PIPE here)."""
    if stream is None:
        raise RuntimeError("the local DynamoDB was started without its pipes")
    return stream


class NodeMissing(RuntimeError):
    """Node.js (>= 20) is needed for the local DynamoDB and is not there."""


def node_binary() -> str:
    """The `node` on PATH, checked to be new enough; else a message that says what to do."""
    node = shutil.which("node")
    if node is None:
        raise NodeMissing(
            f"the local stack keeps its records in dynalite, which needs Node.js {MIN_NODE} or newer; "
            "install it (https://nodejs.org or your package manager) and run `make run` again"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    major = int(version.lstrip("v").split(".")[0] or 0)
    if major < MIN_NODE:
        raise NodeMissing(
            f"the local DynamoDB (dynalite) needs Node.js {MIN_NODE} or newer; this is {version}"
        )
    return node


def ensure_installed() -> None:
    """`npm ci` the pinned dynalite once (Make does this too; this covers `python -m infra.local_stack`)."""
    if (HERE / "node_modules" / "dynalite" / "package.json").exists():
        return
    node_binary()
    npm = shutil.which("npm")
    if npm is None:
        raise NodeMissing("npm is needed once to install dynalite (infra/dynamodb); install Node.js with npm")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=HERE, check=True)


class LocalDynamoDB:
    """A dynalite server on a free loopback port, its data in `path`; stops with the stack (or with the
    process that started it, however that one ends)."""

    def __init__(self, path: Path, host: str = "127.0.0.1", port: int = 0):
        self.path = Path(path)
        self.host, self.port = host, port
        self.process: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self._compacted = threading.Event()
        self._compact_lock = threading.Lock()

    def start(self, timeout_s: float = 20.0) -> LocalDynamoDB:
        """Start dynalite and wait until it answers; a previous server still letting go of the LevelDB
        lock (its parent was just killed) is waited out."""
        ensure_installed()
        node = node_binary()
        self.path.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        while True:
            process = self.process = subprocess.Popen(
                [node, str(HERE / "serve.js"), str(self.path), self.host, str(self.port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            line = _pipe(process.stdout).readline()
            if line.startswith("{"):
                self.endpoint = f"http://{self.host}:{json.loads(line)['port']}"
                threading.Thread(
                    target=self._drain, args=(self.process,), name="dynalite-log", daemon=True
                ).start()
                if self._answers(process, deadline):
                    return self
            self.stop()
            if time.monotonic() > deadline:
                err = _pipe(process.stderr).read() if process.poll() is not None else ""
                raise RuntimeError(f"the local DynamoDB (dynalite) did not start: {err.strip()[-500:]}")
            time.sleep(0.2)

    def _drain(self, process: subprocess.Popen[str]) -> None:
        """Log what dynalite prints (it is quiet unless something is wrong), and see compactions end."""
        for line in _pipe(process.stdout):
            if line.startswith('{"compacted"'):
                if not json.loads(line)["compacted"]:
                    log.warning("dynalite could not compact: %s", line.rstrip())
                self._compacted.set()
                continue
            log.info("dynalite: %s", line.rstrip())

    def compact(self, timeout_s: float = 60.0) -> bool:
        """Have LevelDB rewrite its files, so that the values of deleted items (a forgotten person's words)
        are in none of them any more; False if it did not finish in time."""
        process = self.process
        if process is None or process.poll() is not None:
            return False
        with self._compact_lock:
            self._compacted.clear()
            stdin = _pipe(process.stdin)
            stdin.write("compact\n")
            stdin.flush()
            return self._compacted.wait(timeout_s)

    def _answers(self, process: subprocess.Popen[str], deadline: float) -> bool:
        """True once a DescribeTable answers (the LevelDB store opened); False if it never does."""
        # dynalite opens LevelDB lazily: a held lock shows as a 500 on the first call, not at start. Not
        # ListTables: dynalite walks every key of its table list for it, which took 6 s a call beside
        # 1,000,000 records (past this probe's 2 s, so the stack never started); a table that does not
        # exist answers 400 as soon as the store is open
        headers = {
            "X-Amz-Target": "DynamoDB_20120810.DescribeTable",
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
            "X-Amz-Date": "20260101T000000Z",
        }
        body = b'{"TableName": "engram-start-probe"}'
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx.post(self.endpoint, content=body, headers=headers, timeout=2)
                if answer.status_code == 200 or "ResourceNotFoundException" in answer.text:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """Stop the server; returns once it has let go of its data directory."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            _pipe(process.stdin).close()  # serve.js exits when its stdin closes
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
