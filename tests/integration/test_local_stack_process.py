"""`make run`'s process for real: starts, answers, stops on Ctrl-C, and keeps its state across a restart."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(data_dir: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "ENGRAM_DATA_DIR": str(data_dir), "ENGRAM_PORT": str(port)}
    env.pop("ENGRAM_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra.local_stack"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read())
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("the local stack did not answer /healthz in 90 s")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def test_state_survives_a_restart(tmp_path):
    port = free_port()
    proc = start(tmp_path, port)
    key = (tmp_path / "api-key").read_text().strip()
    auth = {"Authorization": f"Bearer {key}"}
    base = f"http://127.0.0.1:{port}/v1/bots/restart/memories"
    try:
        first = httpx.post(base, json={"text": "Lena's birthday is on the ninth of March."}, headers=auth).json()
        httpx.post(base, json={"text": "The garage door code is 4417."}, headers=auth)
    finally:
        out = stop(proc)
    assert key in out  # printed at start
    assert "state saved" in out

    proc = start(tmp_path, port)
    try:
        assert (tmp_path / "api-key").read_text().strip() == key  # generated once
        listed = httpx.get(base, headers=auth).json()["memories"]
        assert [m["text"] for m in listed] == ["The garage door code is 4417.", "Lena's birthday is on the ninth of March."]
        found = httpx.get(base, params={"query": "When was Lena born?", "limit": 1}, headers=auth).json()["memories"]
        assert found[0]["id"] == first["id"]
        again = httpx.post(base, json={"text": "lena's birthday is on the ninth of march."}, headers=auth)
        assert again.status_code == 200 and again.json()["id"] == first["id"]
        third = httpx.post(base, json={"text": "A new fact after the restart."}, headers=auth).json()
        assert int(third["id"].split(":")[1]) > int(first["id"].split(":")[1])  # ids keep counting
    finally:
        stop(proc)
