"""What engram costs on AWS: the AWS calls each operation makes, counted on the functions `sam build`
makes (tests/deploy: every call recorded), and their warm durations; then a month of four workloads
priced at AWS's published on-demand prices (us-east-1)."""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter

# AWS list prices, us-east-1, on-demand (aws.amazon.com/<service>/pricing), as of 2026-11.
PRICES = {
    "lambda request": 0.20 / 1e6,
    "lambda GB-second (x86)": 0.0000166667,
    "http api request": 1.00 / 1e6,
    "dynamodb write request unit": 0.625 / 1e6,
    "dynamodb read request unit": 0.125 / 1e6,
    "dynamodb GB-month": 0.25,
    "dynamodb PITR GB-month": 0.20,
    "sqs request": 0.40 / 1e6,
    "logs ingested GB": 0.50,
    "logs stored GB-month": 0.03,
    "xray trace": 5.00 / 1e6,
    "alarm-month": 0.10,
    "custom metric-month": 0.30,
}
DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem"}
DYNAMODB_READS = {"GetItem", "Query", "Scan", "BatchGetItem"}


def _count(calls: list[dict]) -> Counter:
    return Counter(f"{c['service']}:{c['operation']}" for c in calls)


def bench_calls_per_operation(repeats: int = 5) -> dict:
    """Warm function processes; per operation the median AWS calls and duration (ms)."""
    from infra.poller import sqs_event
    from tests.deploy import harness
    from tests.deploy.conftest import KEY, PROXY_KEY, make_deployment
    from tests.deploy.test_functions import event as sample
    from tests.deploy.test_functions import keyed, signed

    out: dict = {}
    with make_deployment() as d:
        http = d.start("HttpFunction")
        worker = d.start("WorkerFunction")
        interactions = d.start("InteractionsFunction")
        http.invoke(keyed(sample("apigw-http-list-memories.json")))  # warm: clients made, secrets read
        interactions.invoke(signed(d, sample("discord-memory-status.json")))

        def measure(label: str, logical: str, process, make_event, after=None) -> None:
            counts, durations = [], []
            for i in range(repeats):
                before = len(d.calls(logical))
                answer = process.invoke(make_event(i))
                assert answer["error"] is None, answer["error"]
                counts.append(_count(d.calls(logical)[before:]))
                durations.append(answer["ms"])
                if after:
                    after()
            ops = sorted(set().union(*counts))
            out[label] = {
                "function": logical,
                "warm ms": round(statistics.median(durations), 1),
                "calls": {op: statistics.median(c.get(op, 0) for c in counts) for op in ops},
            }

        def add(i):
            e = keyed(sample("apigw-http-add-memory.json"))
            e["body"] = json.dumps(
                {"text": f"Cost bench fact {i}: the ferry leaves at {i} o'clock.", "userId": "u1"}
            )
            return e

        def search(i):
            return harness.apigw_event(
                "GET",
                "/v1/bots/demo/memories",
                headers={"authorization": f"Bearer {KEY}"},
                query=f"query=ferry+{i}&limit=10",
            )

        def batch(i):
            messages = [
                {
                    "id": f"cost-{i}-{j}",
                    "text": f"message {j} of batch {i} about the harbour",
                    "userId": "u1",
                    "serverId": "g1",
                    "threadId": "c1",
                }
                for j in range(100)
            ]
            return harness.apigw_event(
                "POST",
                "/v1/bots/demo/messages",
                json.dumps({"messages": messages}),
                {"authorization": f"Bearer {KEY}", "content-type": "application/json"},
            )

        measure("add a fact (HTTP API)", "HttpFunction", http, add)
        measure("store 100 chat messages (one batch)", "HttpFunction", http, batch)
        measure("search (HTTP API)", "HttpFunction", http, search)
        measure(
            "list newest (HTTP API)",
            "HttpFunction",
            http,
            lambda i: keyed(sample("apigw-http-list-memories.json")),
        )
        turn_headers = {
            "authorization": f"Bearer {PROXY_KEY}",
            "content-type": "application/json",
            "x-librechat-user-id": "alice",
            "x-librechat-conversation-id": "conv-cost",
        }

        def turn(i):
            body = json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": f"My favourite number is {i}."}]}
            )
            return harness.apigw_event("POST", "/oa/v1/chat/completions", body, turn_headers)

        d.discard("ExtractQueue")  # extraction has its queue (engram.jobs.QUEUE_OF_CLASS)
        measure("LibreChat turn: recall + upstream (HTTP API)", "HttpFunction", http, turn)
        jobs = [m for m in d.receive("ExtractQueue") if json.loads(m["Body"])["kind"] == "extract"][:repeats]
        measure(
            "LibreChat turn: extraction job (worker)",
            "WorkerFunction",
            worker,
            lambda i: sqs_event([jobs[i]], d.stack.physical["ExtractQueue"]["Arn"], harness.REGION),
        )
        measure(
            "Discord /memory status (interactions)",
            "InteractionsFunction",
            interactions,
            lambda i: signed(d, sample("discord-memory-status.json")),
        )
    return out


# Request units per call for engram's items (a few hundred bytes; reads eventually consistent, 0.5 RRU per
# 4 KB): a batch write is 25 items, a batch read up to 100 small items, a query of 50 memories ~25 KB.
UNITS = {
    "PutItem": (1, 0),
    "UpdateItem": (1, 0),
    "DeleteItem": (1, 0),
    "BatchWriteItem": (25, 0),
    "GetItem": (0, 0.5),
    "Query": (0, 3.5),
    "Scan": (0, 3.5),
    "BatchGetItem": (0, 50),
}


def _dynamodb_units(calls: dict) -> tuple[float, float]:
    """Write and read request units of one operation's calls."""
    writes = reads = 0.0
    for op, n in calls.items():
        service, name = op.split(":")
        if service == "dynamodb" and name in UNITS:
            writes += n * UNITS[name][0]
            reads += n * UNITS[name][1]
    return writes, reads


# Time a function spends waiting on a model, which the fakes answer at once but Lambda bills: a LibreChat
# turn's reply (the buffered HTTP path waits for all of it) and the extraction model's answer.
MODEL_WAIT_MS = {
    "LibreChat turn: recall + upstream (HTTP API)": 6_000,
    "LibreChat turn: extraction job (worker)": 2_000,
}


def monthly(
    operations: dict, per_month: dict[str, float], stored_items: int, memory_mb: dict[str, int]
) -> dict:
    """One month of a workload: each operation `per_month[label]` times, `stored_items` records kept."""
    lines: Counter = Counter()
    for label, count in per_month.items():
        op = operations[label]
        ms = op["warm ms"] + MODEL_WAIT_MS.get(label, 0)
        lines["Lambda"] += count * (
            PRICES["lambda request"]
            + ms / 1000 * memory_mb[op["function"]] / 1024 * PRICES["lambda GB-second (x86)"]
        )
        if op["function"] in ("HttpFunction", "InteractionsFunction") and not label.startswith("store 100"):
            lines["API Gateway (HTTP API)"] += count * PRICES["http api request"]
        writes, reads = _dynamodb_units(op["calls"])
        lines["DynamoDB requests"] += count * (
            writes * PRICES["dynamodb write request unit"] + reads * PRICES["dynamodb read request unit"]
        )
        sends = sum(n for k, n in op["calls"].items() if k.startswith("sqs:Send"))
        lines["SQS"] += count * sends * 3 * PRICES["sqs request"]  # send, receive, delete
        lines["CloudWatch Logs + X-Ray"] += count * (
            1.5e-6 * PRICES["logs ingested GB"] + PRICES["xray trace"] * 0.05
        )
    gb = stored_items * 1.5e-6  # ~1.5 KB per record with its state items and indexes
    lines["DynamoDB storage + PITR"] += gb * (PRICES["dynamodb GB-month"] + PRICES["dynamodb PITR GB-month"])
    lines["alarms + metrics"] += 16 * PRICES["alarm-month"] + 12 * PRICES["custom metric-month"]
    return {k: round(v, 2) for k, v in sorted(lines.items())} | {
        "total (USD/month)": round(sum(lines.values()), 2)
    }


def bench_costs(repeats: int = 5) -> dict:
    """Calls per operation, and four workloads priced."""
    return price(bench_calls_per_operation(repeats))


def price(ops: dict) -> dict:
    """Four workloads priced from the measured operations."""
    ops = {k: v for k, v in ops.items() if not k.startswith("Discord: 100")}
    memory = {
        "HttpFunction": 1024,
        "InteractionsFunction": 256,
        "WorkerFunction": 512,
        "StreamingProxyFunction": 512,  # ProxyMemorySize's default
    }
    month = 30
    # Discord messages arrive through catch-up jobs (worker, 512 MB) that store them in batches: priced as
    # the HTTP batch of 100 (the same service call) per 100 messages, plus the job's SQS messages.
    batch = dict(ops["store 100 chat messages (one batch)"])
    ops["Discord: 100 messages caught up (worker)"] = {
        **batch,
        "function": "WorkerFunction",
        "calls": {**batch["calls"], "sqs:SendMessage": 1},
    }
    workloads = {
        "Discord server, 100k stored messages (3k new a day, 200 /ask a day)": (
            {
                "Discord: 100 messages caught up (worker)": 30 * month,
                "search (HTTP API)": 200 * month,
                "Discord /memory status (interactions)": 50 * month,
            },
            100_000,
        ),
        "Discord server, 10M stored messages (300k new a day, 20k /ask a day)": (
            {
                "Discord: 100 messages caught up (worker)": 3_000 * month,
                "search (HTTP API)": 20_000 * month,
                "Discord /memory status (interactions)": 2_000 * month,
            },
            10_000_000,
        ),
        "LibreChat, 1,000 turns a day": (
            {
                "LibreChat turn: recall + upstream (HTTP API)": 1_000 * month,
                "LibreChat turn: extraction job (worker)": 1_000 * month,
            },
            50_000,
        ),
        "LibreChat, 100,000 turns a day": (
            {
                "LibreChat turn: recall + upstream (HTTP API)": 100_000 * month,
                "LibreChat turn: extraction job (worker)": 100_000 * month,
            },
            5_000_000,
        ),
    }
    priced = {
        name: monthly(ops, per_month, stored, memory) for name, (per_month, stored) in workloads.items()
    }
    return {"operations": ops, "workloads": priced, "prices": PRICES, "measured": time.strftime("%Y-%m-%d")}


if __name__ == "__main__":
    print(json.dumps(bench_costs(), indent=1))
