"""What engram costs a month at size, from a stated load model: a Discord bot in 10,000 servers holding 100 M
messages, and 1,000 LibreChat users. Each line is a count from the model times a unit figure measured
elsewhere (named beside it) times a list price (tests/bench/costs.py), before and after issue 46.

    python -m tests.bench.cost_model      # the table docs/operating.md shows (a unit test keeps them equal)

Qdrant's line is its memory: what it must hold in RAM per point, from the collection's settings
(engram.vectors.server), priced at the rate the review that filed issue 46 used (its ~$7,000 a month for
~500 GB). Its sizes are estimates from Qdrant's storage layout, not measurements of a 100 M collection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tests.bench.costs import PRICES

MONTH_DAYS = 30

# ----- the load model ------------------------------------------------------------------------------------
STORED_MEMORIES = 100_000_000  # Discord messages kept (LibreChat's facts are a rounding error beside them)
NEW_MESSAGES_A_DAY = 100_000  # stored by catch-up across the 10,000 servers
ASKS_A_DAY = 20_000
LIBRECHAT_TURNS_A_DAY = 30_000  # 1,000 users, 30 turns a day each
TICKS_A_DAY = 144  # catch-up every 10 minutes (CatchUpRate)

# ----- unit figures -------------------------------------------------------------------------------------
DIMENSIONS = 384  # all-MiniLM-L6-v2 and multilingual-e5-small
FLOAT_BYTES, INT8_BYTES = 4 * DIMENSIONS, DIMENSIONS
GRAPH_BYTES = 160  # a per-tenant HNSW graph's links, m = 16: ~32 links of 4 bytes and their layers
WORDS_BYTES = 300  # the sparse words vector and its inverted index: ~25 terms of 8 bytes, 1.5x overhead
PAYLOAD_INDEX_BYTES = 100  # keyword indexes on bot, server, project, user; kind, createdAt
PAYLOAD_BYTES = 1_000  # the stored payload (on disk before and after)
QDRANT_OVERHEAD = 1.10  # id tracker, segment bookkeeping, the optimizer's working room
QDRANT_RAM_GB_MONTH = 13.9  # the review's rate: ~$7,000 a month for ~500 GB of RAM (a managed cluster)
QDRANT_DISK_GB_MONTH = 0.10  # block storage (gp3 $0.08) with its share of snapshots
# DynamoDB write units per stored message: the review's figure for real ~1.2 KB items (the bench's small
# items took 15.3: docs/operating.md, At scale), of which byKind's whole copy took 4 (2 to store, 2 again
# when its vectors' mark rewrote it); byKindKeys takes 1 (tests/unit/test_index_units.py), once a stack
# deploys with ByKindIndex=drop
WRITE_UNITS_A_MESSAGE = {"before": 20.0, "after": 17.0}
READ_UNITS_A_MESSAGE = 11.5  # At scale: a busy tick's read units per stored message
# the record, its byKind copy (after: byKindKeys' keys and scope), its other index entries and state items
ITEM_KB = {"before": 1.2 + 1.2 + 0.3, "after": 1.2 + 0.1 + 0.3}
QUIET_TICK_READ_UNITS = 1_010  # At scale: a tick visits 1,000 servers of the roster
QUIET_TICK_JOBS = 41
JOB_S = {"catch-up": 0.3, "ask": 1.5, "extract": 0.2, "index": 0.3}  # a job's own work, warm (worker)
MODEL_WAIT_S = {"ask": 5.0, "turn": 6.0, "extract": 2.0}  # Lambda bills the wait for a model's answer
WORKER_GB, PROXY_GB = 0.5, 0.5
LOG_KB_AN_INVOCATION = 1.5
XRAY_SAMPLED = 0.05  # X-Ray's default: the first request a second, then 5 %
ALARMS, METRICS = 22, 12  # the template's alarms; engram's custom metrics


@dataclass(frozen=True)
class Qdrant:
    """What a point keeps in RAM and on disk, in bytes."""

    ram: float
    disk: float

    def gb(self, points: int) -> tuple[float, float]:
        return points * self.ram * QDRANT_OVERHEAD / 1e9, points * self.disk / 1e9


# Before: named vectors made with size and distance only, so both vectors' originals sat in RAM with an
# int8 copy and a per-tenant graph each; the words index in RAM.
BEFORE = Qdrant(
    ram=2 * (FLOAT_BYTES + INT8_BYTES + GRAPH_BYTES) + WORDS_BYTES + PAYLOAD_INDEX_BYTES,
    disk=PAYLOAD_BYTES,
)
# After (engram.vectors.server): the searched vector's originals on disk, its int8 copy and graph in RAM;
# the own vector on disk with no graph and no copy; the words index on disk.
AFTER = Qdrant(
    ram=INT8_BYTES + GRAPH_BYTES + PAYLOAD_INDEX_BYTES,
    disk=2 * FLOAT_BYTES + WORDS_BYTES + PAYLOAD_BYTES,
)


def qdrant_line(layout: Qdrant) -> float:
    ram, disk = layout.gb(STORED_MEMORIES)
    return ram * QDRANT_RAM_GB_MONTH + disk * QDRANT_DISK_GB_MONTH


def aws_lines(when: str) -> dict[str, float]:
    """The AWS lines of a month, "before" or "after" (they did not move much: the saving is in Qdrant)."""
    days = MONTH_DAYS
    messages, asks, turns = NEW_MESSAGES_A_DAY * days, ASKS_A_DAY * days, LIBRECHAT_TURNS_A_DAY * days
    gb_s = PRICES["lambda GB-second (x86)"]
    jobs = {
        "catch-up": messages + TICKS_A_DAY * days * QUIET_TICK_JOBS,
        "ask": asks,
        "extract": turns,
        "index": messages + turns,
    }
    lambda_cost = sum(n * JOB_S[k] * WORKER_GB * gb_s for k, n in jobs.items())
    lambda_cost += asks * MODEL_WAIT_S["ask"] * WORKER_GB * gb_s
    lambda_cost += turns * (MODEL_WAIT_S["turn"] * PROXY_GB + MODEL_WAIT_S["extract"] * WORKER_GB) * gb_s
    invocations = sum(jobs.values()) + asks + turns  # and one interaction per /ask
    lambda_cost += invocations * PRICES["lambda request"]
    traced = invocations - (asks if when == "after" else 0)  # Discord's interactions untraced
    reads = messages * READ_UNITS_A_MESSAGE + TICKS_A_DAY * days * QUIET_TICK_READ_UNITS
    return {
        "Lambda": lambda_cost,
        "API Gateway": (asks + turns) * PRICES["http api request"],
        "DynamoDB requests": messages * WRITE_UNITS_A_MESSAGE[when] * PRICES["dynamodb write request unit"]
        + reads * PRICES["dynamodb read request unit"],
        "DynamoDB storage + PITR": STORED_MEMORIES
        * ITEM_KB[when]
        / 1e6
        * (PRICES["dynamodb GB-month"] + PRICES["dynamodb PITR GB-month"]),
        "SQS": sum(jobs.values()) * 3 * PRICES["sqs request"],  # send, receive, delete
        "Logs + X-Ray": invocations * LOG_KB_AN_INVOCATION / 1e6 * PRICES["logs ingested GB"]
        + traced * XRAY_SAMPLED * PRICES["xray trace"],
        "alarms + metrics": ALARMS * PRICES["alarm-month"] + METRICS * PRICES["custom metric-month"],
    }


def rows() -> list[tuple[str, float, float, str]]:
    """(line, before, after, what changed it)."""
    before, after = aws_lines("before"), aws_lines("after")
    ram_before, _ = BEFORE.gb(STORED_MEMORIES)
    ram_after, disk_after = AFTER.gb(STORED_MEMORIES)
    out = [
        (
            f"Qdrant, 100 M points ({ram_before:,.0f} GB RAM before; {ram_after:,.0f} GB RAM and "
            f"{disk_after:,.0f} GB disk after)",
            qdrant_line(BEFORE),
            qdrant_line(AFTER),
            "originals on disk, int8 copies in RAM; the own vector with no graph and no copy; words on disk",
        )
    ]
    why = {
        "Logs + X-Ray": "Discord's interactions untraced (X-Ray off its 3 s cold path)",
        "DynamoDB requests": "byKindKeys (keys and scope) for byKind (whole items): 1 write a message, not 4",
        "DynamoDB storage + PITR": "no second copy of every record in byKind",
    }
    out += [(line, before[line], after[line], why.get(line, "")) for line in before]
    return out


def table() -> str:
    lines = [
        "| a month of the load model | before | after | what changed it |",
        "|---|---|---|---|",
    ]
    body = rows()
    for line, before, after, why in body:
        lines.append(f"| {line} | {before:,.2f} | {after:,.2f} | {why} |")
    total_before, total_after = sum(r[1] for r in body), sum(r[2] for r in body)
    lines.append(f"| **total (USD)** | **{total_before:,.2f}** | **{total_after:,.2f}** | |")
    return "\n".join(lines)


# ----- concurrency, from the same load model (Little's law) ------------------------------------------------
PEAK_TO_AVERAGE = 3.0  # the busiest hour against the day's average (chat traffic follows the day)
# what each holds a slot for, seconds: a turn streams the model's answer; an /ask waits for its memories (at
# most DISCORD_ASK_MEMORY_BUDGET_MS) and its chat model; an extraction for its model; a catch-up or index
# job for its pages; an interaction for a signature check and a queue send
SLOTS = {
    "LibreChat turns (StreamingProxyFunction)": (LIBRECHAT_TURNS_A_DAY, 6.0, "ProxyConcurrency", 20),
    "/ask (interactive queue)": (ASKS_A_DAY, 1.0 + 5.0 + 1.5, "InteractiveConcurrency", 3),
    "extractions (extract queue)": (LIBRECHAT_TURNS_A_DAY, 2.2, "ExtractConcurrency", 3),
    "catch-up jobs (ingest queue)": (
        NEW_MESSAGES_A_DAY + TICKS_A_DAY * QUIET_TICK_JOBS,
        0.3,
        "IngestConcurrency",
        5,
    ),
    "Discord interactions (InteractionsFunction)": (ASKS_A_DAY * 2, 0.01, "InteractionsConcurrency", 10),
}


def concurrency_rows() -> list[tuple[str, float, float, int, str, int]]:
    """(door, peak arrivals a second, seconds each holds, slots needed, parameter, its default)."""
    out = []
    for door, (a_day, holds_s, parameter, default) in SLOTS.items():
        peak = a_day / 86_400 * PEAK_TO_AVERAGE
        out.append((door, peak, holds_s, math.ceil(peak * holds_s), parameter, default))
    return out


def concurrency_table() -> str:
    lines = [
        "| at its busiest | arrivals a second | each holds | slots needed | parameter (default) |",
        "|---|---|---|---|---|",
    ]
    for door, peak, holds_s, needed, parameter, default in concurrency_rows():
        lines.append(f"| {door} | {peak:.2f} | {holds_s:g} s | {needed} | `{parameter}` ({default}) |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(concurrency_table())
