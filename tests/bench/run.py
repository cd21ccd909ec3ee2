"""`make bench`: retrieval quality on LoCoMo and hot-path speed, throughput and footprint, measured here.

Prints one table and writes every figure to bench-results/latest.json. `--quick` runs a few-second
version (CI runs it so the benchmark never rots). Nothing here needs the network.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")

import httpx  # noqa: E402

from engram.bookkeeping import ForgetUnderWay  # noqa: E402
from engram.store import StateStore  # noqa: E402
from engram.store.state import Tombstones  # noqa: E402
from tests.bench.leaveout import speaker_id  # noqa: E402
from tests.bench.locomo import KS, ask, evaluate, load, score  # noqa: E402

KEY = "bench-key"


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of values, in the values' unit."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def ms(values: list[float]) -> dict:
    """p50 / p95 in milliseconds of durations in seconds."""
    return {"p50_ms": round(pct(values, 50) * 1000, 2), "p95_ms": round(pct(values, 95) * 1000, 2)}


# ----- plain BM25, the baseline every claim is measured against -------------------------------------


class PlainBM25:
    """Textbook BM25 (k1=1.2, b=0.75, lower-cased \\w+ tokens, no stemming, no stop words)."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.tokens = [re.findall(r"\w+", d.lower()) for d in docs]
        self.k1, self.b = k1, b
        self.avg = statistics.fmean(len(t) for t in self.tokens) or 1.0
        df = Counter(w for t in self.tokens for w in set(t))
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}
        self.tf = [Counter(t) for t in self.tokens]

    def top(self, query: str, k: int) -> list[int]:
        """Indices of the k best documents."""
        q = set(re.findall(r"\w+", query.lower()))
        scores = []
        for i, tf in enumerate(self.tf):
            norm = self.k1 * (1 - self.b + self.b * len(self.tokens[i]) / self.avg)
            s = sum(self.idf[w] * tf[w] * (self.k1 + 1) / (tf[w] + norm) for w in q if w in tf)
            if s > 0:
                scores.append((s, i))
        scores.sort(key=lambda x: -x[0])
        return [i for _, i in scores[:k]]


# ----- LoCoMo through the public Memory API ---------------------------------------------------------


def bench_locomo(stack, path: Path, quick: bool) -> dict:
    """Every turn stored through HTTP twice — as chat messages (batches with threadId and createdAt) and
    as facts (one POST per turn, no thread) — and every question asked through HTTP and in-process with
    the shipped settings, per conversation; the engine's words-only and meaning-only modes and plain
    BM25 on the messages in the same run."""
    from engram.text import format_memory_id
    from engram.vectors import Query, Scope

    conversations = load(path)
    if quick:
        conversations = conversations[:1]
        conversations[0].questions = conversations[0].questions[:40]
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    ingest_s, n_turns, fact_s = 0.0, 0, 0.0
    fact_ids: dict[str, dict[str, str]] = {}  # per conversation: memory id -> the turn it holds
    for conv in conversations:
        bot = f"locomo-{conv.sample_id}"
        for start in range(0, len(conv.turns), 100):
            batch = conv.turns[start : start + 100]
            body = {
                "messages": [
                    {
                        "id": t.dia_id,
                        "text": t.text,
                        "createdAt": t.created_at.isoformat(),
                        "threadId": conv.sample_id,
                        "userId": speaker_id(t.speaker),
                    }
                    for t in batch
                ]
            }
            t0 = time.perf_counter()
            r = api.post(f"/v1/bots/{bot}/messages", json=body)
            ingest_s += time.perf_counter() - t0
            r.raise_for_status()
            n_turns += len(batch)
        fact_ids[conv.sample_id] = {}
        for t in conv.turns:
            t0 = time.perf_counter()
            r = api.post(
                f"/v1/bots/{bot}-facts/memories", json={"text": t.text, "userId": speaker_id(t.speaker)}
            )
            fact_s += time.perf_counter() - t0
            r.raise_for_status()
            fact_ids[conv.sample_id].setdefault(r.json()["id"], t.dia_id)  # the same words twice are one fact

    latencies: list[float] = []

    def via_api(kind):
        def search(conv, question, k):
            bot = f"locomo-{conv.sample_id}" + ("-facts" if kind == "fact" else "")
            t0 = time.perf_counter()
            r = api.get(f"/v1/bots/{bot}/memories", params={"query": question, "kind": kind, "limit": k})
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()
            memories = r.json()["memories"]
            return (
                [m["sourceMessageId"] for m in memories]
                if kind == "message"
                else [fact_ids[conv.sample_id][m["id"]] for m in memories]
            )

        return search

    service = stack.engine.service

    def in_process(kind, min_score=0.0):
        def search(conv, question, k):
            bot = f"locomo-{conv.sample_id}" + ("-facts" if kind == "fact" else "")
            found = service.recall(Scope(bot=bot, kind=kind), question, k, min_score)
            return (
                [m.source_id for m in found]
                if kind == "message"
                else [fact_ids[conv.sample_id][format_memory_id(m.id)] for m in found]
            )

        return search

    def engine_mode(mode):
        def search(conv, question, k):
            scope = Scope(bot=f"locomo-{conv.sample_id}", kind="message")
            words = service.words.query(question) if mode == "words" else None
            dense = (service.dense_name, service.embedder.embed([question])[0]) if mode == "meaning" else None
            return [
                h.payload["sourceId"]
                for h in service.index.search(scope, Query(words, dense, k, service.retrieval.fusion(0)))
            ]

        return search

    bm25 = {c.sample_id: PlainBM25([t.text for t in c.turns]) for c in conversations}

    def plain(conv, question, k):
        return [conv.turns[i].dia_id for i in bm25[conv.sample_id].top(question, k)]

    # Asked once over HTTP; scored over all conversations and per conversation
    asked = {kind: ask(conversations, via_api(kind)) for kind in ("message", "fact")}
    messages, facts = score(conversations, asked["message"]), score(conversations, asked["fact"])
    result = {
        "conversations": len(conversations),
        "turns": n_turns,
        "engram messages (HTTP)": messages,
        "engram facts (HTTP)": facts,
        "engram messages (in-process)": evaluate(conversations, in_process("message")),
        "engram facts (in-process)": evaluate(conversations, in_process("fact")),
        **recall_floor(conversations, service, in_process),
        "engram words only": evaluate(conversations, engine_mode("words")),
        "engram meaning only": evaluate(conversations, engine_mode("meaning")),
        "plain BM25": evaluate(conversations, plain),
        "R@10 per conversation (HTTP; messages, facts)": {
            c.sample_id: [score([c], asked["message"])["R@10"], score([c], asked["fact"])["R@10"]]
            for c in conversations
        },
        "search latency (HTTP)": ms(latencies),
        "ingest messages/s (HTTP, batches of 100)": round(n_turns / ingest_s, 1),
        "facts/s (HTTP, one per request)": round(n_turns / fact_s, 1),
    }
    result["R@10 vs plain BM25"] = round(messages["R@10"] / result["plain BM25"]["R@10"], 3)
    return result


def recall_floor(conversations, service, in_process) -> dict:
    """Recall with its default relevance floor (MEMORY_RECALL_MIN_SCORE, MEMORY_MIN_SCORE): what it keeps
    of the evidence, and how many requests unrelated to a conversation inject nothing at all from it
    (tests/bench/unrelated.py; and the next conversation's questions, which are about other people's
    lives: a harder test, as LoCoMo's conversations share their topics)."""
    from engram.config.proxy import ProxySettings
    from engram.vectors import Scope
    from tests.bench.unrelated import REQUESTS

    floor = ProxySettings.model_fields["recall_min_score"].default
    out: dict = {}
    for kind in ("message", "fact"):
        out[f"engram {kind}s (in-process, recall floor {floor})"] = evaluate(
            conversations, in_process(kind, floor)
        )
    nothing: dict[str, list[bool]] = {"requests": [], "another conversation's questions": []}
    for n, conv in enumerate(conversations):
        scope = Scope(bot=f"locomo-{conv.sample_id}-facts", kind="fact")
        others = conversations[(n + 1) % len(conversations)].questions[:40] if len(conversations) > 1 else []
        for name, asked in (
            ("requests", REQUESTS),
            ("another conversation's questions", [q.text for q in others]),
        ):
            nothing[name] += [not service.recall(scope, text, 6, floor) for text in asked]
    out[f"unrelated asks that recall nothing (facts, floor {floor})"] = {
        name: round(statistics.fmean(v), 3) for name, v in nothing.items() if v
    }
    return out


def bench_leave_out(path: Path, quick: bool, embedder, labels: bool = True, pieces: bool = False) -> dict:
    """Leave-conversations-out figures (tests/bench/leaveout.py); quick: two conversations, 30 questions
    each, today's settings and the window steps. Without `labels`, each turn's text as Discord stores a
    message (no "Speaker: " label: its author is known by its user id alone), and only the author label and
    names judged, on top of the shipped settings. With `pieces`, each turn sent as its sentences, and a
    thread's turns counted by author judged on top of the shipped settings."""
    from dataclasses import asdict

    from engram.retrieval import Retrieval
    from tests.bench import leaveout

    conversations = load(path)
    steps, today = leaveout.STEPS, None
    if pieces:
        conversations = leaveout.in_pieces(conversations)
        shipped = {k: v for k, v in asdict(Retrieval()).items() if k in leaveout.TODAY}
        steps = [("shipped settings, turns not by author (fixed)", {}), leaveout.BY_AUTHOR]
        today = {**shipped, "window_by_author": False}
    elif not labels:
        conversations = leaveout.without_labels(conversations)
        shipped = {k: v for k, v in asdict(Retrieval()).items() if k in leaveout.TODAY}
        steps = [
            ("shipped settings, names off, no author label (fixed)", {}),
            leaveout.AUTHOR_LABEL,
            leaveout.NAMES,
        ]
        today = {**shipped, "name_weight": 0.0, "author_label": False}
    if quick:
        conversations = conversations[:2]
        for c in conversations:
            c.questions = c.questions[:30]
        steps = steps[:1] + [s for s in steps[1:] if s[0].startswith(("window", "people", "author"))]
    return leaveout.run(
        conversations,
        embedder=embedder,
        steps=steps,
        log=lambda line: print(line, file=sys.stderr),
        today=today,
    )


# ----- the proxy's added latency -------------------------------------------------------------------


def bench_proxy(stack, upstream, quick: bool) -> dict:
    """Median time of a chat turn straight to a fake upstream and through the proxy (both on 127.0.0.1):
    warm caches (the same question again) and cold recall (a new question: one embed + one query)."""
    n = 30 if quick else 200
    body = {"model": "fake", "messages": [{"role": "user", "content": "What tea do I like?"}]}
    auth = {
        "Authorization": f"Bearer {KEY}",
        "x-librechat-user-id": "bench",
        "x-librechat-conversation-id": "bench-conv",
    }
    client = httpx.Client(timeout=30)
    client.post(
        f"{stack.url}/fake/v1/chat/completions",
        headers=auth,
        json={
            "model": "fake",
            "messages": [{"role": "user", "content": "/memory save The user likes genmaicha tea."}],
        },
    )

    def timed(url, payload, headers):
        out = []
        for i in range(n):
            data = payload(i)
            t0 = time.perf_counter()
            client.post(url, json=data, headers=headers).raise_for_status()
            out.append(time.perf_counter() - t0)
        return out

    direct = timed(f"{upstream.url}/v1/chat/completions", lambda i: body, {})
    warm = timed(f"{stack.url}/fake/v1/chat/completions", lambda i: body, auth)
    cold = timed(
        f"{stack.url}/fake/v1/chat/completions",
        lambda i: {**body, "messages": [{"role": "user", "content": f"Question number {i} about tea?"}]},
        auth,
    )
    d, w, c = ms(direct), ms(warm), ms(cold)
    return {
        "direct to upstream": d,
        "through proxy, warm caches": w,
        "through proxy, new question (embed + recall)": c,
        "added p50 ms (warm)": round(w["p50_ms"] - d["p50_ms"], 2),
        "added p50 ms (new question)": round(c["p50_ms"] - d["p50_ms"], 2),
    }


# ----- Discord: the interactions function's cold start, and backfill throughput -------------------

COLD_START = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, "functions/interactions")
import app
from nacl.signing import SigningKey
signer = SigningKey(bytes.fromhex(sys.argv[1]))
def event(body):
    raw, ts = json.dumps(body), str(int(time.time()))
    sig = signer.sign(ts.encode() + raw.encode()).signature.hex()
    return {"body": raw, "headers": {"x-signature-ed25519": sig, "x-signature-timestamp": ts}}
from infra.poller import LambdaContext
assert json.loads(app.handler(event({"type": 1}), LambdaContext())["body"]) == {"type": 1}
cold = time.perf_counter() - t0
command = {"type": 2, "id": "1", "token": "t", "guild_id": "1100000000000000001",
           "channel_id": "1110000000000000001", "member": {"user": {"id": "42"}},
           "data": {"name": "memory", "options": [{"name": "status"}]}}
times = []
for _ in range(20):
    t = time.perf_counter(); app.handler(event(command), LambdaContext()); times.append(time.perf_counter() -
    t)
print(json.dumps({"cold": cold, "command": sorted(times)}))
"""


def bench_interactions(stack) -> dict:
    """A /memory status command (DynamoDB reads on the local stack's moto) twenty times per process
    (cold starts are measured on the built artifact by bench_cold_start)."""
    from nacl.signing import SigningKey

    signer = SigningKey.generate()
    env = {
        **os.environ,
        "DISCORD_PUBLIC_KEY": signer.verify_key.encode().hex(),
        "DISCORD_APPLICATION_ID": "900",
        "ENGRAM_DYNAMODB_ENDPOINT": stack.settings.dynamodb_endpoint,
        "ENGRAM_SQS_ENDPOINT": stack.settings.sqs_endpoint,
        "ENGRAM_JOBS_QUEUE_URL": stack.settings.jobs_queue_url,
    }
    commands = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", COLD_START, signer.encode().hex()],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        commands.extend(figures["command"])
    return {"/memory status (warm)": ms(commands)}


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM), MB: what its Lambda MemorySize must hold."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for {pid}")


def bench_cold_start(repeats: int) -> dict:
    """Each function from the artifact `sam build` makes, in a fresh interpreter of the runtime's Python
    with the template's environment (tests/deploy): init (the handler module's import), its first request,
    and process start to first response; medians of `repeats` fresh processes; and each process's peak
    resident memory (one Lambda environment serves one request at a time: this is what it holds), the
    streaming proxy's also after 20 streamed turns."""
    import httpx

    from tests.deploy import harness
    from tests.deploy.conftest import PROXY_KEY, make_deployment
    from tests.deploy.test_functions import event as sample
    from tests.deploy.test_functions import keyed, signed

    turn = json.dumps({"model": "m", "messages": [{"role": "user", "content": "What did I say about tea?"}]})
    turn_headers = {
        "authorization": f"Bearer {PROXY_KEY}",
        "content-type": "application/json",
        "x-librechat-user-id": "alice",
        "x-librechat-conversation-id": "conv-cold",
    }
    out: dict = {}
    with make_deployment() as d:
        cases = [
            ("interactions: PING", "InteractionsFunction", lambda: signed(d, sample("discord-ping.json"))),
            (
                "interactions: /memory status",
                "InteractionsFunction",
                lambda: signed(d, sample("discord-memory-status.json")),
            ),
            ("http: list memories", "HttpFunction", lambda: keyed(sample("apigw-http-list-memories.json"))),
            (
                "http: LibreChat turn (recall + upstream)",
                "HttpFunction",
                lambda: harness.apigw_event("POST", "/oa/v1/chat/completions", turn, turn_headers),
            ),
            ("worker: index job", "WorkerFunction", lambda: sample("sqs-sweep-job.json")),
            ("schedule: sweep", "ScheduleFunction", lambda: {"job": "sweep"}),
        ]
        for label, logical, make_event in cases:
            inits, firsts, totals, peaks = [], [], [], []
            for _ in range(repeats):
                process = d.start(logical)
                answer = process.invoke(make_event())
                assert answer["error"] is None, answer["error"]
                (
                    inits.append(process.init_ms),
                    firsts.append(answer["ms"]),
                    totals.append(process.first_response_ms),
                    peaks.append(peak_rss_mb(process.process.pid)),
                )
                process.close()
            out[label] = {
                "init_ms": round(statistics.median(inits)),
                "first_request_ms": round(statistics.median(firsts)),
                "start_to_first_response_ms": round(statistics.median(totals)),
                "peak_rss_mb": max(peaks),
                "memory_size_mb": d.function(logical).memory,
            }
        readies, totals, peaks = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            web = d.start_web("StreamingProxyFunction")
            response = httpx.post(
                f"{web.url}/oa/v1/chat/completions", content=turn, headers=turn_headers, timeout=30
            )
            assert response.status_code == 200, response.text
            readies.append(web.ready_ms), totals.append((time.perf_counter() - started) * 1000)
            peaks.append(peak_rss_mb(web.process.pid))
            web.close()
        ready = statistics.median(readies)
        memory = d.function("StreamingProxyFunction").memory
        out["streaming proxy: LibreChat turn"] = {
            "init_ms": round(ready),
            "first_request_ms": round(statistics.median(totals) - ready),
            "start_to_first_response_ms": round(statistics.median(totals)),
            "peak_rss_mb": max(peaks),
            "memory_size_mb": memory,
        }
        out["streaming proxy: 20 streamed turns"] = _streamed_turns(d, turn, turn_headers) | {
            "memory_size_mb": memory
        }
        out["layer unzipped (MB, limit 250)"] = dir_mb(d.build / "EngramLayer")
    return out


def _streamed_turns(d, turn: str, headers: dict[str, str], turns: int = 20) -> dict:
    """One streaming proxy process answering `turns` streamed LibreChat turns (SSE, read to the end), each
    with a new message of its conversation: its peak resident memory after the first and after the last."""
    import httpx

    web = d.start_web("StreamingProxyFunction")
    body = json.loads(turn)
    peaks = []
    try:
        for i in range(turns):
            body["messages"].append({"role": "user", "content": f"Turn {i}: I had green tea at {i} o'clock."})
            with httpx.stream(
                "POST",
                f"{web.url}/oa/v1/chat/completions",
                json={**body, "stream": True},
                headers=headers,
                timeout=30,
            ) as response:
                assert response.status_code == 200, response.read()
                events = [line for line in response.iter_lines() if line.startswith("data:")]
            assert events and events[-1] == "data: [DONE]", events[-3:]
            peaks.append(peak_rss_mb(web.process.pid))
    finally:
        web.close()
    return {"peak_rss_mb_first_turn": peaks[0], "peak_rss_mb": peaks[-1], "turns": turns}


def bench_backfill(embedder) -> dict:
    """/memory remember against the fake Discord: messages stored per second, history to final count."""
    from nacl.signing import SigningKey

    from engram.config.discord import DiscordSettings
    from infra.local_stack import LocalStack
    from tests.fake_discord import ALICE, APP_ID, C11, C12, C21, T14, TOKEN, FakeDiscord

    fake = FakeDiscord().start()
    fake.rate_limited_once = set()
    signer = SigningKey.generate()
    settings = DiscordSettings(
        DISCORD_APPLICATION_ID=APP_ID,
        DISCORD_PUBLIC_KEY=signer.verify_key.encode().hex(),
        DISCORD_BOT_TOKEN=TOKEN,
        DISCORD_API_BASE=fake.url,
    )
    data_dir = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    stack = LocalStack(data_dir, port=0, api_key=KEY, embedder=embedder, discord_settings=settings).start()
    try:
        from engram.jobs import RememberJob
        from engram.store import now_ms

        t0 = time.perf_counter()
        stack.discord.run(RememberJob(user=ALICE, token="bench", issued_at=now_ms()))
        deadline = time.monotonic() + 600
        while (
            not any("Backfill complete" in s.get("content", "") for s in fake.sent)
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        took = time.perf_counter() - t0
        stored = len(fake.expected_for(ALICE, {C11, C12, T14, C21}))
        return {"messages stored": stored, "seconds": round(took, 2), "messages/s": round(stored / took, 1)}
    finally:
        stack.stop()
        fake.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# ----- re-embedding ---------------------------------------------------------------------------------


def bench_reembed(embedder, n: int) -> dict:
    """n chat messages stored with vectors off, then `PATCH /v1/settings {"embedder": "local"}`: records/s
    until the progress shows full coverage, and the search latency a client sees meanwhile."""
    import threading

    from engram.service import ChatMessage
    from infra.local_stack import LocalStack

    data_dir = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    stack = LocalStack(data_dir, port=0, api_key=KEY, embedder=embedder).start()
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    try:
        api.patch("/v1/settings", json={"embedder": "off"}).raise_for_status()
        rng = random.Random(5)
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
        ]
        for start in range(0, n, 500):
            batch = [
                ChatMessage(
                    source_id=f"r{i}",
                    text=" ".join(rng.choice(words) for _ in range(10)),
                    user=f"u{i % 20}",
                    server=f"g{i % 4}",
                    thread=f"c{i % 8}",
                )
                for i in range(start, min(n, start + 500))
            ]
            stack.engine.service.add_messages("reembed", batch)
        latencies, stop = [], threading.Event()

        def searcher():
            client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
            while not stop.is_set():
                t0 = time.perf_counter()
                client.get(
                    "/v1/bots/reembed/memories",
                    params={"query": rng.choice(words), "kind": "message", "limit": 10},
                )
                latencies.append(time.perf_counter() - t0)
                time.sleep(0.25)  # one person searching now and then; each search embeds its query too

        thread = threading.Thread(target=searcher, daemon=True)
        sample = [r.text for r in stack.engine.service.records.newest("reembed", "message", min(n, 1024))]
        t0 = time.perf_counter()
        embedder.embed(sample)
        embedder_rate = len(sample) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        api.patch("/v1/settings", json={"embedder": "local"}).raise_for_status()
        thread.start()
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            p = api.get("/v1/settings/embedding").json()
            if p["withVectors"] == p["messages"] == n:
                break
            time.sleep(0.5)
        took = time.perf_counter() - t0
        stop.set()
        thread.join()
        return {
            "records": n,
            "seconds": round(took, 1),
            "records/s": round(n / took, 1),
            "embedder texts/s on the same texts": round(embedder_rate, 1),
            "re-embed / embedder (goal >= 80 %)": f"{100 * n / took / embedder_rate:.0f} %",
            "search while re-embedding": ms(latencies),
            "searches": len(latencies),
        }
    finally:
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# ----- hot path: recall at 1k / 20k / 100k memories --------------------------------------------------

VOCAB = [f"w{i}" for i in range(8000)]


def synthetic_points(n: int, dim: int, seed: int = 7, windows: bool = True):
    """Points shaped like engram's: one bot, 10 servers, 5 projects, 50 users, facts and messages;
    `windows`: each point's words carry the turns around it, as the shipped settings index them."""
    import numpy as np

    from engram.retrieval import DEFAULT
    from engram.vectors import IndexPoint
    from engram.words import WordVectorizer

    rng = np.random.default_rng(seed)
    # as the shipped settings index them: with a window of the turns around each (a point's words are
    # about five turns' worth, which is what a sparse search walks)
    words = WordVectorizer(window_weight=DEFAULT.words_window)
    turns = DEFAULT.window_turns if DEFAULT.words_window and windows else 0
    zipf = np.minimum(rng.zipf(1.3, size=(n, 12)), len(VOCAB)) - 1
    dense = rng.standard_normal((n, dim)).astype("float32")
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    texts = [" ".join(VOCAB[j] for j in row) for row in zipf]
    for i in range(n):
        text = texts[i]
        window = " ".join(texts[max(0, i - turns) : i] + texts[i + 1 : i + 1 + turns]) if turns else None
        payload = {
            "bot": "bench",
            "kind": "fact" if i % 4 else "message",
            "server": f"s{i % 10}",
            "project": f"p{i % 5}",
            "user": f"u{i % 50}",
            "text": text,
            "savedBy": "bot",
            "createdAt": 1_700_000_000_000 + i,
            "updatedAt": 1_700_000_000_000 + i,
        }
        yield IndexPoint(
            id=i + 1,
            payload=payload,
            words=words.document(text, window=window),
            dense={"dense-bench": dense[i].tolist()},
        )


class PrecomputedEmbedder:
    """Returns vectors embedded beforehand: recall timed without the embed."""

    provider, model = "bench", "precomputed"

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors

    def embed(self, texts):
        return [self.vectors[t] for t in texts]


class _NoTombstones(Tombstones):
    def under_way(self, bot: str) -> dict[str, ForgetUnderWay]:
        return {}


class NoForgetsUnderWay(StateStore):
    """The state of a bench with no table: nothing is being forgotten."""

    def __init__(self) -> None:
        super().__init__()
        self.tombstones = _NoTombstones()


def bench_recall(sizes: list[int], embedder, queries: int, with_client_mode: bool) -> dict:
    """Scope-filtered recall through MemoryService.recall on the embedded engine (and qdrant-client's
    local mode, over engram's REST client, as the baseline), with and without the query embed."""
    from engram.embedders import vector_name
    from engram.relevance import QUERIES, STATEMENTS
    from engram.service import MemoryService
    from engram.vectors import Scope
    from engram.vectors.edge import EdgeIndex
    from engram.vectors.server import QdrantServerIndex

    rng = random.Random(11)
    qtexts = [" ".join(rng.choice(VOCAB[:300]) for _ in range(4)) + f" question {i}" for i in range(queries)]
    # ... and the relevance reference pairs, which the first search of a process embeds (engram.relevance)
    known = qtexts + list(QUERIES + STATEMENTS)
    qvectors = dict(zip(known, embedder.embed(known), strict=False))

    class Named(PrecomputedEmbedder):
        pass

    out = {}
    for n in sizes:
        engines = [("edge", lambda d: EdgeIndex(Path(d) / "shard"))]
        if n == 20_000:  # the configuration before windows, side by side (issue 31: search stays in bounds)
            engines.append(("edge, points without windows", lambda d: EdgeIndex(Path(d) / "shard")))
        if with_client_mode and n <= 20_000:
            # qdrant-client's local mode, reached through engram's REST client (what the edge engine replaces)
            from tests.fake_qdrant import FakeQdrant

            fake = FakeQdrant().start()
            engines.append(
                (
                    "qdrant-client local",
                    lambda d, fake=fake: QdrantServerIndex.connect(fake.url, None, "bench"),
                )
            )
        for engine_name, make in engines:
            tmp = tempfile.mkdtemp()
            index = make(tmp)
            name = vector_name(Named.provider, Named.model)
            index.ensure_dense(name, 384)
            t0 = time.perf_counter()
            batch = []
            for p in synthetic_points(n, 384, windows="without windows" not in engine_name):
                p.dense = {name: p.dense["dense-bench"]}
                batch.append(p)
                if len(batch) == 1000:
                    index.upsert(batch)
                    batch = []
            index.upsert(batch)
            if hasattr(index, "optimize"):
                index.optimize()
            load_s = time.perf_counter() - t0
            scopes = (
                [Scope(bot="bench", kind="fact", server=f"s{i % 10}") for i in range(5)]
                + [Scope(bot="bench", kind="fact", user=f"u{i}") for i in range(5)]
                + [Scope(bot="bench", kind="message", project=f"p{i}") for i in range(5)]
            )
            # the index alone: no table here, so no forget can be under way (a real recall also reads the
            # bot's forgets under way: one small DynamoDB query)
            warm = MemoryService(
                records=None, index=index, embedder=Named(qvectors), queue=None, state=NoForgetsUnderWay()
            )
            timed = {"without embed": [], "with embed": []}
            for i, q in enumerate(qtexts):
                scope = scopes[i % len(scopes)]
                t0 = time.perf_counter()
                warm.recall(scope, q, 10)
                timed["without embed"].append(time.perf_counter() - t0)
            live = MemoryService(
                records=None, index=index, embedder=embedder, queue=None, state=NoForgetsUnderWay()
            )
            # the real embedder's vectors do not exist here: search its query against ours
            live.indexer.dense_ready.add(name)
            live_name = name

            class Live:
                provider, model = Named.provider, Named.model

                def embed(self, texts):
                    return embedder.embed(texts)

            live.indexer.embedder = Live()
            for i, q in enumerate(qtexts[: max(20, queries // 4)]):
                t0 = time.perf_counter()
                live.recall(scopes[i % len(scopes)], q, 10)
                timed["with embed"].append(time.perf_counter() - t0)
            out[f"{engine_name} @ {n:,}"] = {
                "load_s": round(load_s, 1),
                "recall without embed": ms(timed["without embed"]),
                "recall with embed": ms(timed["with embed"]),
                "_": live_name and None,
            }
            out[f"{engine_name} @ {n:,}"].pop("_")
            index.close()
            shutil.rmtree(tmp, ignore_errors=True)
    return out


# ----- throughput ------------------------------------------------------------------------------------


def bench_throughput(stack, embedder, quick: bool) -> dict:
    """The embedder alone, then the same texts through HTTP: one fact per request, and chat messages in
    batches of 100 (ingest's share of the embedder's own batched throughput, measured in the same run)."""
    texts = [
        f"Fact number {i}: the team's build server {i} runs tests at {i % 24}:00."
        for i in range(256 if quick else 1024)
    ]
    t0 = time.perf_counter()
    embedder.embed(texts)
    batched = len(texts) / (time.perf_counter() - t0)
    singles = texts[: 32 if quick else 128]
    t0 = time.perf_counter()
    for t in singles:
        embedder.embed([t])
    single = len(singles) / (time.perf_counter() - t0)
    messages = [f"{t} (said in chat)" for t in texts]
    t0 = time.perf_counter()
    embedder.embed(messages)
    batched_messages = len(messages) / (time.perf_counter() - t0)
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    n = 32 if quick else 200
    # the same stack with windows off in its indexer, then as shipped: what windows cost a write
    indexer = stack.engine.service.indexer
    shipped = indexer.retrieval
    indexer.retrieval = dataclasses.replace(shipped, words_window=0.0, meaning_window=0.0)
    try:
        adds_before, ingest_before = _writes(api, "nowindow", texts, messages, n)
    finally:
        indexer.retrieval = shipped
    adds, ingest = _writes(api, "", texts, messages, n)
    return {
        "embedder texts/s (batched 64)": round(batched, 1),
        "embedder texts/s (one at a time)": round(single, 1),
        "HTTP adds/s (one fact per request)": round(adds, 1),
        "HTTP adds/s, windows off": round(adds_before, 1),
        "embedder texts/s on the ingest texts": round(batched_messages, 1),
        "HTTP ingest messages/s (batches of 100)": round(ingest, 1),
        "HTTP ingest messages/s, windows off": round(ingest_before, 1),
        "HTTP ingest / embedder (goal >= 80 %)": f"{100 * ingest / batched_messages:.0f} %",
    }


def bench_backfill_vectors(stack, n: int) -> dict:
    """n chat messages in 20 threads imported (vectors by jobs, as a backfill's pages), and the seconds
    until the last one's vector is written: windows off in the indexer, then as shipped (issue 31: within
    5 minutes for 10,000 on 2 cores)."""
    api = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
    indexer = stack.engine.service.indexer
    shipped, out = indexer.retrieval, {}
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for label, settings in (
        ("windows off", dataclasses.replace(shipped, words_window=0.0, meaning_window=0.0)),
        ("as shipped", shipped),
    ):
        bot = f"backfill-{label.split()[-1]}"
        lines = [
            json.dumps(
                {
                    "kind": "message",
                    "text": f"Message {i} about build server {i % 97} and the {VOCAB[i % len(VOCAB)]} plan",
                    "userId": f"u{i % 30}",
                    "threadId": f"c{i % 20}",
                    "sourceMessageId": f"m{i}",
                    "createdAt": (start + timedelta(seconds=i)).isoformat(),
                }
            )
            for i in range(n)
        ]
        indexer.retrieval = settings
        try:
            t0 = time.perf_counter()
            for chunk in range(0, n, 2000):
                body = "\n".join(lines[chunk : chunk + 2000]).encode()
                api.post(f"/v1/bots/{bot}/import", content=body).raise_for_status()
            stored = time.perf_counter() - t0
            deadline = time.monotonic() + 900
            while stack.engine.service.records.pending.ids(bot, 1) and time.monotonic() < deadline:
                time.sleep(0.5)
            took = time.perf_counter() - t0
        finally:
            indexer.retrieval = shipped
        out[label] = {
            "messages": n,
            "stored (s)": round(stored, 1),
            "every vector written (s)": round(took, 1),
            "messages/s": round(n / took, 1),
        }
    return out


def _writes(api, tag: str, texts: list[str], messages: list[str], n: int) -> tuple[float, float]:
    """Facts one per request, then chat messages in batches of 100 over 4 threads: (adds/s, messages/s)."""
    t0 = time.perf_counter()
    for i in range(n):
        api.post(
            f"/v1/bots/throughput{tag}/memories",
            json={"text": f"Throughput fact {i}: {texts[i % len(texts)]}"},
        ).raise_for_status()
    adds = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(0, len(messages), 100):
        batch = [
            {"id": f"x{i}", "text": messages[i], "threadId": f"c{i % 4}"}
            for i in range(start, min(len(messages), start + 100))
        ]
        api.post(f"/v1/bots/ingest{tag}/messages", json={"messages": batch}).raise_for_status()
    return adds, len(messages) / (time.perf_counter() - t0)


# ----- footprint ----------------------------------------------------------------------------------


def dir_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20, 2)


def bench_footprint(quick: bool) -> dict:
    """Package sizes (the layer's is measured on the `sam build` artifact by bench_cold_start)."""
    return {
        f"function {p.name} (MB)": dir_mb(p) for p in sorted((ROOT / "functions").iterdir()) if p.is_dir()
    }


# ----- report --------------------------------------------------------------------------------------


def table(results: dict) -> str:
    lines = []
    loc = results.get("locomo")
    if loc:
        lines.append(
            f"LoCoMo evidence retrieval ({loc['conversations']} conversations, "
            f"{loc['engram messages (HTTP)']['questions']} questions; shipped settings, dev set)"
        )
        lines.append(f"  {'system':<30}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + f"{'all@10':>8}")
        for name in (
            "engram messages (HTTP)",
            "engram facts (HTTP)",
            "engram messages (in-process)",
            "engram facts (in-process)",
            *(name for name in loc if "recall floor" in name),
            "engram words only",
            "engram meaning only",
            "plain BM25",
        ):
            r = loc[name]
            lines.append(
                f"  {name:<30}" + "".join(f"{r['R@' + str(k)]:>8.3f}" for k in KS) + f"{r['all@10']:>8.3f}"
            )
        lines.extend(f"  {name}: {value}" for name, value in loc.items() if name.startswith("unrelated asks"))
        lines.append(f"  R@10 by category (messages): {loc['engram messages (HTTP)']['R@10 by category']}")
        lines.append(
            "  R@10 per conversation (messages, facts): "
            f"{loc['R@10 per conversation (HTTP; messages, facts)']}"
        )
        lines.append(
            f"  engram / plain BM25 at R@10: {loc['R@10 vs plain BM25']}x;  search over HTTP "
            f"p50 {loc['search latency (HTTP)']['p50_ms']} ms, "
            f"p95 {loc['search latency (HTTP)']['p95_ms']} ms;"
            f"  ingest {loc['ingest messages/s (HTTP, batches of 100)']} messages/s, "
            f"{loc['facts/s (HTTP, one per request)']} facts/s"
        )
    for name in (
        "leave-out",
        "leave-out (turns without speaker labels)",
        "leave-out (turns sent in pieces)",
        "leave-out (multilingual-e5-small)",
    ):
        if results.get(name):
            lines.extend(leave_out_lines(name, results[name]))
    if results.get("local models"):
        lines.append("Local models on these cores (load; one query p50/p95; memories/s batched; installed)")
        for model, r in results["local models"].items():
            lines.append(
                f"  {model:<28} load {r['load_s']} s; query {r['query p50_ms']}/{r['query p95_ms']} ms; "
                f"{r['memories/s (batches)']} memories/s; {r['installed MB']} MB"
            )
    if results.get("discord at scale"):
        scale = dict(results["discord at scale"])
        lines.append(
            f"Discord at scale ({scale.pop('world')}): requests / SQS jobs / DynamoDB reads / writes"
        )
        for name, r in scale.items():
            lines.append(
                f"  {name:<52} {r['Discord requests']:>6} / {r['SQS jobs']:>5} / "
                f"{r['DynamoDB reads']:>6} / {r['DynamoDB writes']:>6}"
            )
    if results.get("recall"):
        lines.append(
            "Recall (scope-filtered hybrid, top 10)   without embed p50/p95 ms   with embed p50/p95 ms"
        )
        for name, r in results["recall"].items():
            a, b = r["recall without embed"], r["recall with embed"]
            lines.append(
                f"  {name:<38} {a['p50_ms']:>8} / {a['p95_ms']:<10} {b['p50_ms']:>8} / {b['p95_ms']}"
            )
    if results.get("proxy"):
        lines.append("LibreChat proxy, one non-streaming turn (p50 / p95 ms)")
        for name, r in results["proxy"].items():
            lines.append(
                f"  {name:<44} " + (f"{r['p50_ms']} / {r['p95_ms']}" if isinstance(r, dict) else str(r))
            )
    if results.get("interactions"):
        lines.append("Discord interactions function (p50 / p95 ms)")
        for name, r in results["interactions"].items():
            lines.append(f"  {name:<44} {r['p50_ms']} / {r['p95_ms']}")
    if results.get("cold start"):
        lines.append("Cold start from the built artifact (python3.11, template environment; medians, ms)")
        lines.append(
            f"  {'function: first request':<44} {'init':>6} {'request':>8} {'start->answer':>14}"
            f" {'peak MB / MemorySize':>21}"
        )
        for name, r in results["cold start"].items():
            if isinstance(r, dict) and "init_ms" in r:
                lines.append(
                    f"  {name:<44} {r['init_ms']:>6} {r['first_request_ms']:>8} "
                    f"{r['start_to_first_response_ms']:>14} {r['peak_rss_mb']:>12} / {r['memory_size_mb']}"
                )
            elif isinstance(r, dict):
                lines.append(f"  {name:<44} {'':>30} {r['peak_rss_mb']:>12} / {r['memory_size_mb']}")
            else:
                lines.append(f"  {name:<44} {r}")
    if results.get("embedder threads"):
        lines.append(
            "Local embedder's torch threads (one query alone; under 2 and 4 concurrent searches; batched)"
        )
        for name, r in results["embedder threads"].items():
            lines.append(
                f"  {name:<30} alone {r['alone']['p50_ms']}/{r['alone']['p95_ms']} ms; "
                f"2 concurrent {r['2 concurrent']['p50_ms']}/{r['2 concurrent']['p95_ms']} ms "
                f"({r['2 concurrent']['queries/s']}/s); 4 concurrent {r['4 concurrent']['p50_ms']}/"
                f"{r['4 concurrent']['p95_ms']} ms ({r['4 concurrent']['queries/s']}/s); "
                f"batched {r['batched texts/s']} texts/s"
            )
    if results.get("write to searchable"):
        lines.append(
            "Write to searchable, warm local stack (from the 201; a question sharing no word: meaning)"
        )
        for name, v in results["write to searchable"].items():
            lines.append(
                f"  {name:<44} p50 {v['p50_ms']} / p95 {v['p95_ms']} ms (max {v['max_ms']}, n={v['n']}"
                f", never {v['never (10 s)']})"
            )
    for section in ("throughput", "footprint"):
        if results.get(section):
            lines.append(section.capitalize())
            lines.extend(f"  {k:<44} {v}" for k, v in results[section].items())
    if results.get("costs"):
        lines.append("AWS calls per operation (built functions; warm)")
        for name, op in results["costs"]["operations"].items():
            lines.append(f"  {name:<52} {op['warm ms']:>7} ms  {op['calls']}")
        lines.append("A month on AWS (USD; list prices; Qdrant and the models not included)")
        for name, lines_ in results["costs"]["workloads"].items():
            lines.append(f"  {name}: {lines_}")
    for part, figures in (results.get("local stack") or {}).items():
        lines.append(f"Local stack (make run's process): {part}")
        for k, v in figures.items():
            shown = (
                f"p50 {v['p50_ms']} / p95 {v['p95_ms']} ms (n={v['n']}"
                + (f", errors {v['errors']})" if "errors" in v else ")")
                if isinstance(v, dict)
                else v
            )
            lines.append(f"  {k:<52} {shown}")
    return "\n".join(lines)


def leave_out_lines(name: str, lo: dict) -> list[str]:
    """One leave-out run's table: each step's held-out R@10, spread, interval and whether it was kept."""
    lines = [
        f"LoCoMo {name}, {lo.get('embedder', 'all-minilm-l6-v2')} "
        "(settings chosen on 4 conversations, R@10 on the 5th, every split; kept: up on >= 4 of 5)",
        f"  {'step':<52}{'messages':>10}{'facts':>8}  95% interval messages / facts   splits up  kept"
        "  multi-evidence m / f",
    ]
    for st in lo["steps"]:
        m, f = st["message"], st["fact"]
        interval = "R@10 95% interval (bootstrap over conversations)"
        multi = "R@10 multi-evidence"
        lines.append(
            f"  {st['step']:<52}{m['R@10']:>10.3f}{f['R@10']:>8.3f}  "
            f"{m[interval][0]:.3f}-{m[interval][1]:.3f} / {f[interval][0]:.3f}-{f[interval][1]:.3f}"
            f"{st.get('splits improved', 0):>11}{'  yes' if st['kept'] else '  no'}"
            f"  {m.get(multi) or 0:.3f} / {f.get(multi) or 0:.3f}"
        )
    lines.append(f"  chosen on all five: {lo['chosen on all five']}")
    lines.append(
        f"  shipped: {lo['shipped defaults (engram.retrieval.DEFAULT)']}; on all five (dev): "
        f"{lo['shipped on all five (dev figure, not a leave-out one)']}"
    )
    for name, row in lo.items():
        if name.startswith("shipped at the recall floor"):
            lines.append(f"  {name}: messages {row['message']:.3f}, facts {row['fact']:.3f}")
    if lo.get("each side alone, settings kept (R@10 on all five)"):
        lines.append(
            f"  each side alone (all five): {lo['each side alone, settings kept (R@10 on all five)']}"
        )
    for row in lo.get("judged again on top of the shipped settings") or []:
        m, f, before = row["message"], row["fact"], row["without"]
        lines.append(
            f"  judged again: {row['step']:<38} without {before['message']['R@10']:.3f} / "
            f"{before['fact']['R@10']:.3f}, chosen per split {m['R@10']:.3f} / {f['R@10']:.3f}, "
            f"{row['splits improved']} of {len(m['R@10 per held-out conversation'])} up: "
            f"{'kept' if row['kept'] else 'not kept'}"
        )
    legs = lo.get("each leg's contribution (shipped settings, all five)") or {}
    if legs:
        lines.append(
            "  each leg's contribution: shipped R@10 less shipped without it (every conversation of the run)"
        )
        lines.append(f"    {'leg':<48}{'messages':>10}{'facts':>8}   helps / hurts in (conversations)")
        for leg, row in legs.items():
            m, f = row["adds (messages, facts)"]
            lines.append(
                f"    {leg:<48}{m:>+10.3f}{f:>+8.3f}   "
                f"{row['helps in (conversations)']} / {row['hurts in (conversations)']}"
            )
    lines.append(
        "  MEMORY_RECALL_MODE on the facts (6 memories, 4,000 chars): share of the evidence the model is told"
    )
    for mode, r in lo["recall modes (facts, shipped settings)"].items():
        lines.append(
            f"    {mode:<10} {r['evidence in the block']:.3f}  "
            f"(block {r['block chars (median)']} chars, median)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few seconds: one conversation, 1k memories")
    parser.add_argument("--locomo", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev.json")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench-results" / ("quick.json" if "--quick" in sys.argv else "latest.json"),
    )
    args = parser.parse_args()

    from engram.embedders.local import LocalEmbedder
    from infra.local_stack import LocalStack

    embedder = LocalEmbedder()
    t0 = time.perf_counter()
    embedder.load()
    embedder.embed(["warm up"])
    results: dict = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "embedder load_s": round(time.perf_counter() - t0, 2),
    }
    from engram.config.proxy import ProxySettings
    from tests.fake_upstream import FakeUpstream

    upstream = FakeUpstream().start()
    proxy_settings = ProxySettings(
        UPSTREAMS=json.dumps([{"name": "fake", "baseUrl": upstream.url, "apiKey": "sk-bench"}]),
        ENGRAM_PROXY_KEY=KEY,  # the bench's turns present one key for both doors
        MEMORY_WRITE_MODE="off",  # extraction runs in the worker; keep it out of the timed turns
    )
    data_dir = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    stack = LocalStack(
        data_dir, port=0, api_key=KEY, embedder=embedder, sweep_every_s=30, proxy_settings=proxy_settings
    ).start()
    try:
        if args.locomo.exists():
            results["locomo"] = bench_locomo(stack, args.locomo, args.quick)
            results["leave-out"] = bench_leave_out(args.locomo, args.quick, embedder)
            results["leave-out (turns without speaker labels)"] = bench_leave_out(
                args.locomo, args.quick, embedder, labels=False
            )
            if not args.quick:  # a thought sent in several messages (issue 48)
                results["leave-out (turns sent in pieces)"] = bench_leave_out(
                    args.locomo, False, embedder, pieces=True
                )
            if not args.quick:  # the same protocol with the other local model (issue 31)
                from engram.embedders.e5 import E5Embedder

                results["leave-out (multilingual-e5-small)"] = bench_leave_out(
                    args.locomo, False, E5Embedder()
                )
        else:
            print(f"LoCoMo data not found at {args.locomo}; skipping retrieval", file=sys.stderr)
        results["proxy"] = bench_proxy(stack, upstream, args.quick)
        results["interactions"] = bench_interactions(stack)
        results["throughput"] = bench_throughput(stack, embedder, args.quick)
        results["throughput"]["backfilled messages until every vector"] = bench_backfill_vectors(
            stack, 500 if args.quick else 10_000
        )
        from tests.bench.searchable import measure as bench_searchable

        results["write to searchable"] = bench_searchable(stack.url, KEY, rounds=1 if args.quick else 3)
    finally:
        stack.stop()
        upstream.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    from tests.bench.threads import measure as bench_threads

    results["embedder threads"] = bench_threads(queries=40 if args.quick else 200, quick=args.quick)
    from tests.bench.embedders import measure as bench_local_models

    conversations = load(args.locomo) if args.locomo.exists() else []
    turns = [t.text for c in conversations for t in c.turns] or [f"memory number {i}" for i in range(1024)]
    questions = [q.text for c in conversations for q in c.questions] or [f"question {i}" for i in range(200)]
    results["local models"] = bench_local_models(turns, questions, args.quick)
    results["throughput"]["Discord backfill (fake Discord, local stack)"] = bench_backfill(embedder)
    from tests.bench.discord_costs import bench_discord_costs
    from tests.support import HashEmbedder

    # what is counted does not depend on the embedder: a hashing one keeps this part fast
    results["discord at scale"] = bench_discord_costs(HashEmbedder(), *((10, 2) if args.quick else (50, 10)))
    results["throughput"]["re-embedding (local model)"] = bench_reembed(
        embedder, 300 if args.quick else 20_000
    )
    sizes = [1_000] if args.quick else [1_000, 20_000, 100_000]
    results["recall"] = bench_recall(
        sizes, embedder, queries=40 if args.quick else 200, with_client_mode=not args.quick
    )
    results["footprint"] = bench_footprint(args.quick)
    from tests.bench.durability import bench_kill_trials, bench_load, bench_scale

    results["local stack"] = {
        "kill -9 trials": bench_kill_trials(1 if args.quick else 10),
        "scale": bench_scale(2_000 if args.quick else 100_000),
        "load": bench_load(32, 10 if args.quick else 60),
    }
    results["cold start"] = bench_cold_start(repeats=2 if args.quick else 5)
    from tests.bench.costs import bench_costs

    results["costs"] = bench_costs(repeats=2 if args.quick else 5)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    print(f"\nfigures written to {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
