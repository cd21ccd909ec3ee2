"""How many torch threads the local embedder should use, measured: one query embed alone, under
concurrent searches, and batched ingest, for each thread count, each in its own process (torch's thread
count is per process). `python tests/bench/threads.py` prints the figures; `make bench` keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, statistics, sys, threading, time
threads, queries, quick = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
from engram.embedders.local import LocalEmbedder
e = LocalEmbedder(threads=threads)
e.embed(["warm up"])
texts = [f"What did person {i} say about the garden, the trip in May and the new job?" for i in
range(queries)]
def one(out, chunk):
    for t in chunk:
        t0 = time.perf_counter(); e.embed_queries([t]); out.append(time.perf_counter() - t0)
def pct(v, q):
    v = sorted(v); return round(v[min(len(v) - 1, int(q * len(v)))] * 1000, 2)
res = {}
alone = []
one(alone, texts)
res["alone"] = {"p50_ms": pct(alone, .5), "p95_ms": pct(alone, .95)}
for clients in (2, 4):
    lat, workers = [], []
    t0 = time.perf_counter()
    for c in range(clients):
        w = threading.Thread(target=one, args=(lat, texts[c::clients] * 1)); w.start(); workers.append(w)
    for w in workers: w.join()
    took = time.perf_counter() - t0
    res[f"{clients} concurrent"] = {"p50_ms": pct(lat, .5), "p95_ms": pct(lat, .95), "queries/s":
    round(len(lat) / took, 1)}
batch = [f"Message {i}: we talked about the garden, the trip in May and the new job at length." for i in
range(128 if quick else 512)]
t0 = time.perf_counter(); e.embed(batch); took = time.perf_counter() - t0
res["batched texts/s"] = round(len(batch) / took, 1)
print(json.dumps(res))
"""


def measure(counts=(1, 2, 0), queries: int = 200, quick: bool = False) -> dict:
    """Per thread count: single-query latency alone and under 2 and 4 concurrent searchers, batched
    throughput; each count in a fresh process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "layers" / "engram")}
    out = {}
    for n in counts:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, str(n), str(queries), "1" if quick else "0"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        label = "chosen per call (the default)" if n == 0 else f"{n} thread{'s' if n > 1 else ''}"
        out[label] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
