"""Interactions function: Discord's webhook on API Gateway. Lean on purpose (answers within 3 s, cold
start included): signature check, PING, and deferral to the worker; no model or vector index here."""

import base64

from engram.config import get_settings
from engram.discord.interactions import consent_status, handle_interaction
from engram.discord.settings import get_discord_settings
from engram.jobs import build_queue
from engram.records import RecordStore

settings = get_discord_settings()
RecordStore(get_settings())  # binds the DynamoDB tables
queue = build_queue(get_settings())
status = consent_status(settings)


def handler(event, context):
    """API Gateway HTTP API event in, Discord interaction response out."""
    raw = event.get("body") or ""
    raw = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode()
    code, body = handle_interaction(raw, event.get("headers") or {}, settings, lambda: queue, status)
    import json

    return {"statusCode": code, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}
