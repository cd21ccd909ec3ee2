"""The local stack as users run it (`python -m infra.local_stack`, a real process): kill -9 trials,
scale (list newest, RSS, restart at 100k memories), and load held by 32 concurrent clients."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else 0.0


def _ms(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50_ms": round(_pct(values, 0.5) * 1000, 1),
        "p95_ms": round(_pct(values, 0.95) * 1000, 1),
    }


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its children (the Node DynamoDB included), from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                todo.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return round(total / 1024, 1)


class StackProcess:
    """`make run`'s process on a data dir."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None):
        self.data_dir, self.port = data_dir, _free_port()
        self.env = {
            **os.environ,
            "ENGRAM_DATA_DIR": str(data_dir),
            "ENGRAM_PORT": str(self.port),
            "ENGRAM_API_KEY": KEY,
            "ENGRAM_DYNAMODB_PORT": "0",
            "ENGRAM_SQS_PORT": "0",
            **(env or {}),
        }
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 300) -> float:
        """Start and return the seconds until /healthz answers."""
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "infra.local_stack"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while time.perf_counter() - t0 < timeout_s:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the local stack exited at start")
            time.sleep(0.05)
        raise RuntimeError("the local stack did not answer")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)

    def wait_warm(self, timeout_s: float = 120) -> None:
        with self.client() as api:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not api.get("/healthz").json().get("embedderWarm"):
                time.sleep(0.2)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=120)


# ----- kill -9 trials ------------------------------------------------------------------------------


def _writer(api: httpx.Client, bot: str, tag: str, acked: list[str], stop: threading.Event) -> None:
    """Facts and batches as fast as they are answered; every acknowledged id is kept."""
    i = 0
    while not stop.is_set():
        i += 1
        try:
            if i % 3:
                r = api.post(
                    f"/v1/bots/{bot}/memories",
                    json={"text": f"{tag} fact {i}: the ferry leaves at {i % 24}:00"},
                )
                if r.status_code in (200, 201):
                    acked.append(r.json()["id"])
            else:
                batch = [
                    {
                        "id": f"{tag}-{i}-{j}",
                        "text": f"{tag} message {i}.{j} about the harbour",
                        "threadId": tag,
                    }
                    for j in range(20)
                ]
                r = api.post(f"/v1/bots/{bot}/messages", json={"messages": batch})
                if r.status_code in (200, 201):
                    acked.extend(r.json()["ids"])
        except httpx.HTTPError:
            return  # the stack died under us: what was acknowledged before counts


def bench_kill_trials(trials: int) -> dict:
    """Each trial: four writers, kill -9 at a random moment, restart; count acknowledged writes that are
    gone, and the orphan points a reconcile still finds after the start-up one."""
    data_dir = Path(tempfile.mkdtemp(prefix="engram-kill-"))
    rng = random.Random(11)
    stack = StackProcess(data_dir)
    acked_total, lost, orphans_at_start, orphans_left, restart_s = 0, 0, 0, 0, []
    try:
        stack.start()
        stack.wait_warm()
        for trial in range(trials):
            acked: list[str] = []
            stop = threading.Event()
            clients = [stack.client() for _ in range(4)]
            writers = [
                threading.Thread(target=_writer, args=(c, "kill", f"t{trial}w{w}", acked, stop), daemon=True)
                for w, c in enumerate(clients)
            ]
            for w in writers:
                w.start()
            time.sleep(rng.uniform(1.0, 3.0))
            stack.kill()
            stop.set()
            for w in writers:
                w.join(timeout=10)
            restart_s.append(stack.start())
            with stack.client() as api:
                for memory_id in acked:
                    if api.get(f"/v1/bots/kill/memories/{memory_id}").status_code != 200:
                        lost += 1
                acked_total += len(acked)
                deadline = time.monotonic() + 300
                while api.get("/v1/index").json()["last"] is None and time.monotonic() < deadline:
                    time.sleep(0.2)  # the start-up reconcile
                orphans_at_start += api.get("/v1/index").json()["orphans_deleted"]
                api.post("/v1/index/reconcile", params={"bot": "kill"}).raise_for_status()
                time.sleep(0.5)
                while api.get("/v1/index").json()["action"] != "idle" and time.monotonic() < deadline:
                    time.sleep(0.2)
                orphans_left += api.get("/v1/index").json()["orphans_deleted"]
    finally:
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "trials": trials,
        "acknowledged writes": acked_total,
        "acknowledged writes lost (goal 0)": lost,
        "orphan points removed by the start-up reconcile": orphans_at_start,
        "orphan points left after restart + reconcile (goal 0)": orphans_left,
        "restart to /healthz, median s": round(sorted(restart_s)[len(restart_s) // 2], 2),
    }


# ----- scale ---------------------------------------------------------------------------------------

FILL = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, ".")
from infra.local_stack import LocalStack
from tests.bench.run import synthetic_points
from engram.store import keys
from engram.store.models import MemoryRecord
n, data_dir = int(sys.argv[1]), Path(sys.argv[2])
stack = LocalStack(data_dir, port=0, api_key="k").start()
stack.engine.service.embedder.embed(["warm up"])
name = stack.engine.service.dense_name
stack.engine.service.index.ensure_dense(name, 384)
batch = []
with MemoryRecord.batch_write() as records:
    for p in synthetic_points(n, 384):
        p.dense = {name: p.dense["dense-bench"]}
        batch.append(p)
        pl = p.payload
        records.save(MemoryRecord(bot=keys.record_pk(pl["bot"], p.id), id=p.id, kind=pl["kind"],
                                  text=pl["text"], saved_by="bot",
                                  created_at=pl["createdAt"], updated_at=pl["updatedAt"], server=pl["server"],
                                  project=pl["project"], user=pl["user"],
                                  bot_kind=keys.bot_kind(pl["bot"], pl["kind"], p.id),
                                  bot_user=f"{pl['bot']}#{pl['user']}", vector_model=name))
        if len(batch) == 1000:
            stack.engine.service.index.upsert(batch); batch = []
stack.engine.service.index.upsert(batch)
stack.stop()
"""


def bench_scale(n: int) -> dict:
    """n memories in both stores (written directly), then the stack as a process on them: time to be
    ready after a restart, list newest p95 over HTTP, and the RSS of the whole stack with the model warm."""
    data_dir = Path(tempfile.mkdtemp(prefix="engram-scale-"))
    try:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", FILL, str(n), str(data_dir)],
            cwd=ROOT,
            check=True,
            env={**os.environ, "ENGRAM_API_KEY": "k"},
            capture_output=True,
        )
        fill_s = time.perf_counter() - t0
        stack = StackProcess(data_dir)
        try:
            ready_s = stack.start()
            stack.wait_warm()  # lists timed after the model's load, which takes both cores for seconds
            with stack.client() as api:
                timed: dict[str, list[float]] = defaultdict(list)
                for i in range(200):
                    for label, params in (
                        ("newest 50 facts", {"limit": 50}),
                        ("newest 50 of one user", {"limit": 50, "userId": f"u{i % 50}"}),
                    ):
                        t1 = time.perf_counter()
                        api.get("/v1/bots/bench/memories", params=params).raise_for_status()
                        timed[label].append(time.perf_counter() - t1)
            rss = tree_rss_mb(stack.proc.pid)
        finally:
            stack.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "memories": n,
        "fill (direct) s": round(fill_s, 1),
        "ready after a restart s (goal <= 5)": round(ready_s, 2),
        **{f"list {k} (HTTP; goal p95 <= 50 ms)": _ms(v) for k, v in timed.items()},
        "stack RSS with the model warm MB (goal <= 1536)": rss,
    }


# ----- load ----------------------------------------------------------------------------------------


def bench_load(clients: int, seconds: float) -> dict:
    """`clients` threads for `seconds` against the stack process: 30 % single adds, 10 % batches of 20
    messages, 40 % searches, 20 % lists; errors and p50/p95 per operation."""
    data_dir = Path(tempfile.mkdtemp(prefix="engram-load-"))
    stack = StackProcess(data_dir)
    timed: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    lock = threading.Lock()
    words = [
        "garden",
        "boat",
        "tea",
        "violin",
        "bakery",
        "train",
        "river",
        "cat",
        "dog",
        "mountain",
        "coffee",
        "book",
        "music",
        "rain",
        "ferry",
    ]
    try:
        stack.start()
        stack.wait_warm()
        deadline = time.monotonic() + seconds

        def client(c: int) -> None:
            rng = random.Random(c)
            with stack.client() as api:
                i = 0
                while time.monotonic() < deadline:
                    i += 1
                    roll = rng.random()
                    bot = f"load{c % 4}"
                    text = " ".join(rng.choice(words) for _ in range(8))
                    if roll < 0.3:
                        op, call = (
                            "add",
                            lambda bot=bot, i=i, text=text: api.post(
                                f"/v1/bots/{bot}/memories", json={"text": f"{c}.{i} {text}"}
                            ),
                        )
                    elif roll < 0.4:
                        batch = [
                            {"id": f"{c}-{i}-{j}", "text": f"{text} {j}", "threadId": f"t{c}"}
                            for j in range(20)
                        ]
                        op, call = (
                            "batch of 20",
                            lambda bot=bot, batch=batch: api.post(
                                f"/v1/bots/{bot}/messages", json={"messages": batch}
                            ),
                        )
                    elif roll < 0.8:
                        op, call = (
                            "search",
                            lambda bot=bot, text=text: api.get(
                                f"/v1/bots/{bot}/memories", params={"query": text, "limit": 10}
                            ),
                        )
                    else:
                        op, call = (
                            "list",
                            lambda bot=bot: api.get(f"/v1/bots/{bot}/memories", params={"limit": 50}),
                        )
                    t0 = time.perf_counter()
                    try:
                        ok = call().status_code < 300
                    except httpx.HTTPError:
                        ok = False
                    took = time.perf_counter() - t0
                    with lock:
                        timed[op].append(took)
                        if not ok:
                            errors[op] += 1

        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    total = sum(len(v) for v in timed.values())
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": total,
        "requests/s": round(total / seconds, 1),
        "errors (goal 0)": sum(errors.values()),
        **{op: {**_ms(v), "errors": errors[op]} for op, v in sorted(timed.items())},
    }
