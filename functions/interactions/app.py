"""Interactions function: Discord's webhook on API Gateway. Lean on purpose (answers within 3 s, cold
start included): signature check, PING, and deferral to the worker; no model or vector index here.
DynamoDB and SQS clients are made on the first request that needs them: a PING needs neither."""

import base64
import json
from functools import lru_cache

from engram.config import get_discord_settings, get_settings
from engram.discord.interactions import answer_headers, consent_status, handle_interaction, seen_once
from engram.observability import instrumented_untraced, timed

settings = get_discord_settings()


@lru_cache(maxsize=1)
def queue():
    """The jobs queues (interactive jobs go on their own)."""
    from engram.jobs import build_queue

    return build_queue(get_settings())


@lru_cache(maxsize=1)
def stores():
    """The DynamoDB stores, made on the first request that reads one (a PING reads none)."""
    from engram.store import RecordStore, StateStore, bind_tables

    bind_tables(get_settings())
    return StateStore(), RecordStore()


def status(user: str) -> str:
    """The /memory status answer, from DynamoDB."""
    state, records = stores()
    return consent_status(settings, state, records)(user)


def first_time(interaction_id: str) -> bool:
    """False for an interaction id already handled (a replayed request)."""
    return seen_once(settings, stores()[0].limits)(interaction_id)


@instrumented_untraced  # no X-Ray SDK on the 3 s cold path (template: Tracing PassThrough)
def handler(event, context):
    """API Gateway HTTP API event in, Discord interaction response out."""
    raw = event.get("body") or ""
    raw = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode()
    with timed("interaction"):
        code, body = handle_interaction(raw, event.get("headers") or {}, settings, queue, status, first_time)
    return {"statusCode": code, "headers": answer_headers(code), "body": json.dumps(body)}
