"""The interactions webhook: verify, answer PING, and answer every command within Discord's 3 seconds —
slow work is deferred to the worker through SQS. Kept lean: no model, no vector index on this path."""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, Mapping

from ..jobs import DiscordJob, JobQueue
from .settings import DiscordSettings
from .verify import verify_request

log = logging.getLogger(__name__)

PING, APPLICATION_COMMAND = 1, 2
PONG, CHANNEL_MESSAGE, DEFERRED = 1, 4, 5
EPHEMERAL = 64


def _message(content: str, ephemeral: bool = True) -> dict:
    data = {"content": content, "allowed_mentions": {"parse": []}}
    if ephemeral:
        data["flags"] = EPHEMERAL
    return {"type": CHANNEL_MESSAGE, "data": data}


def handle_interaction(raw: bytes, headers: Mapping[str, str], settings: DiscordSettings,
                       queue: Callable[[], JobQueue], status: Callable[[str], str]) -> tuple[int, dict]:
    """(HTTP status, JSON body) for one interaction request."""
    lower = {k.lower(): v for k, v in headers.items()}
    if not verify_request(settings.public_key, lower.get("x-signature-ed25519"), lower.get("x-signature-timestamp"),
                          raw, settings.max_signature_age_s):
        return 401, {"error": "invalid request signature"}
    try:
        body = json.loads(raw)
    except ValueError:
        return 400, {"error": "the body is not JSON"}
    kind = body.get("type")
    if kind == PING:
        return 200, {"type": PONG}
    if kind != APPLICATION_COMMAND:
        return 400, {"error": f"unsupported interaction type {kind}"}
    data = body.get("data") or {}
    user = ((body.get("member") or {}).get("user") or body.get("user") or {}).get("id")
    if not user:
        return 400, {"error": "no user in the interaction"}
    job = dict(user=user, guild=body.get("guild_id"), channel=body.get("channel_id"), token=body.get("token"),
               interaction_id=body.get("id"), issued_at=int(time.time() * 1000))
    name = data.get("name")
    options = data.get("options") or []
    if name == "memory" and options:
        sub = options[0].get("name")
        if sub == "status":
            return 200, _message(status(user))
        if sub in ("remember", "forget"):
            queue().send(DiscordJob(action=sub, **job))
            return 200, {"type": DEFERRED, "data": {"flags": EPHEMERAL}}
    if name == "ask":
        prompt = next((o.get("value") for o in options if o.get("name") == "prompt"), None)
        if not isinstance(prompt, str) or not prompt.strip():
            return 200, _message("/ask needs a prompt.")
        if not job["guild"]:
            return 200, _message("/ask works in a server channel, where its memories live.")
        queue().send(DiscordJob(action="ask", prompt=prompt[:6000], **job))
        return 200, {"type": DEFERRED}
    return 200, _message("I don't know that command.")


def consent_status(settings: DiscordSettings) -> Callable[[str], str]:
    """The status answer from DynamoDB alone (fast enough for the 3-second window)."""

    def status(user: str) -> str:
        from ..records import MemoryRecord, StateItem

        pk = f"discord#{settings.bot}"
        try:
            StateItem.get(pk, f"consent#{user}")
        except StateItem.DoesNotExist:
            return "Long-term memory is off for you. Use /memory remember to opt in."
        stored = MemoryRecord.by_user.count(f"{settings.bot}#{user}")
        try:
            run = StateItem.get(pk, f"backfill#{user}")
            total, left = int(run.data.get("channels", 0)), int(run.value or 0)
            progress = "complete" if left <= 0 else f"{total - left} of {total} channels done"
            backfill = f"Backfill: {progress}."
        except StateItem.DoesNotExist:
            backfill = "Backfill: not started."
        return f"Long-term memory is on for you. {backfill} Memories stored: {stored}."

    return status
