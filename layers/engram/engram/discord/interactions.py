"""The interactions webhook: verify, answer PING, and answer every command within Discord's 3 seconds —
slow work is deferred to the worker through SQS. Kept lean: no model, no vector index on this path."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from ..config.discord import DiscordSettings
from ..jobs import AskJob, ExportJob, ForgetMeJob, ForgetMessageJob, JobQueue, RememberJob
from ..problems import problem, problem_headers
from ..text import NAME_PATTERN, encodable
from .verify import verify_request

if TYPE_CHECKING:
    from ..ports import LimitsPort, RecordsPort, StatePort

log = logging.getLogger(__name__)

PING, APPLICATION_COMMAND = 1, 2
PONG, CHANNEL_MESSAGE, DEFERRED = 1, 4, 5
MESSAGE_COMMAND = 3
FORGET_THIS_MESSAGE = "Forget this message"
EPHEMERAL = 64


# /memory's subcommands answered later, by a job
MEMORY_COMMANDS: dict[str, type[RememberJob | ForgetMeJob | ExportJob]] = {
    "remember": RememberJob,
    "forget": ForgetMeJob,
    "export": ExportJob,
}


def _message(content: str, ephemeral: bool = True) -> dict[str, Any]:
    data: dict[str, object] = {"content": content, "allowed_mentions": {"parse": []}}
    if ephemeral:
        data["flags"] = EPHEMERAL
    return {"type": CHANNEL_MESSAGE, "data": data}


# Ids become scope names: the service's name rule.
_ID = NAME_PATTERN


class _User(BaseModel):
    id: str = Field(pattern=_ID)


class _Member(BaseModel):
    user: _User | None = None
    # the member's permissions in the channel, overwrites included (interactions/receiving-and-responding.mdx)
    permissions: str | None = Field(None, pattern=r"^\d{1,20}$")


class _Option(BaseModel):
    name: str = Field(max_length=64)
    value: str | int | float | bool | None = None
    options: list[_Option] | None = None


class _Data(BaseModel):
    name: str = Field("", max_length=64)
    type: int = 1  # 1 a slash command, 3 a message's context menu (interactions/application-commands.mdx)
    options: list[_Option] = Field(default_factory=list, max_length=25)
    target_id: str | None = Field(None, pattern=_ID)  # the message a context-menu command was used on


class _Channel(BaseModel):
    """The partial channel sent with every interaction (interactions/receiving-and-responding.mdx)."""

    type: int | None = None
    parent_id: str | None = Field(None, pattern=_ID)


class Interaction(BaseModel):
    """The parts of an interaction engram reads, with their types checked (a signed body is still input)."""

    type: int
    id: str | None = Field(None, pattern=_ID)
    token: str | None = Field(None, max_length=500)
    guild_id: str | None = Field(None, pattern=_ID)
    channel_id: str | None = Field(None, pattern=_ID)
    channel: _Channel | None = None
    app_permissions: str | None = Field(None, pattern=r"^\d{1,20}$")  # the bot's, in this channel
    member: _Member | None = None
    user: _User | None = None
    data: _Data | None = None


Answer = tuple[int, dict[str, Any]]
NOT_CONFIGURED = (
    "Discord is not configured on this stack: set DISCORD_PUBLIC_KEY to the application's public key "
    "(Developer Portal, General Information) and restart it"
)
_CODES = {400: "invalid", 401: "unauthorized", 503: "unavailable"}


def refusal(status: int, detail: str, code: str | None = None) -> Answer:
    """An interaction refused, as problem details (the `error` member the bare string clients read before
    1.3)."""
    code = code or _CODES.get(status, "error")
    return status, problem(status, code, detail, legacy=detail)


def answer_headers(status: int) -> dict[str, str]:
    """The answer's headers: JSON, or problem details with WWW-Authenticate for a refusal."""
    return problem_headers(status, realm="discord") if status >= 400 else {"content-type": "application/json"}


MANAGE_MESSAGES = 1 << 13  # topics/permissions.mdx: a moderator's; "Forget this message" on anyone's message


def handle_interaction(
    raw: bytes,
    headers: Mapping[str, str],
    settings: DiscordSettings,
    queue: Callable[[], JobQueue],
    status: Callable[[str], str],
    first_time: Callable[[str], bool] | None = None,
) -> Answer:
    """(HTTP status, JSON body) for one interaction request. `first_time(interaction id)` is False for
    an interaction already handled: a replay of a signed request is refused."""
    unsigned = _unsigned(raw, headers, settings)
    if unsigned is not None:
        return unsigned
    try:
        body = Interaction.model_validate_json(raw)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:3])
        return refusal(400, f"not an interaction engram understands: {where}")
    if body.type == PING:
        return 200, {"type": PONG}
    if body.type != APPLICATION_COMMAND:
        return refusal(400, f"unsupported interaction type {body.type}")
    user = _user(body)
    if user is None:
        return refusal(400, "no user in the interaction")
    refused = _refused(body, first_time)
    if refused is not None:
        return refused
    return _command(body, user, queue, status)


def _unsigned(raw: bytes, headers: Mapping[str, str], settings: DiscordSettings) -> Answer | None:
    """The refusal of a request Discord did not sign (or of any, on a stack with no Discord key)."""
    if not settings.public_key:
        return refusal(503, NOT_CONFIGURED, "discord_not_configured")
    lower = {k.lower(): v for k, v in headers.items()}
    signed = verify_request(
        settings.public_key,
        lower.get("x-signature-ed25519"),
        lower.get("x-signature-timestamp"),
        raw,
        settings.max_signature_age_s,
        max_future_s=settings.max_signature_future_s,
    )
    return None if signed else refusal(401, "invalid request signature")


def _refused(body: Interaction, first_time: Callable[[str], bool] | None) -> Answer | None:
    """Why a signed command is not run (None: it has an id, seen here for the first time)."""
    if not body.id:
        return refusal(400, "no interaction id")
    if first_time is None:
        return None
    try:
        fresh = first_time(body.id)
    except Exception:  # cannot tell a replay from a first delivery: refuse rather than risk it
        log.exception("could not record the interaction id")
        return refusal(503, "cannot take commands just now; try again")
    return None if fresh else refusal(401, "this interaction was already handled (a replayed request)")


def _user(body: Interaction) -> _User | None:
    """Who ran the command: the member's user in a server, the user in a DM."""
    return body.member.user if body.member and body.member.user else body.user


def _command(
    body: Interaction, user: _User, queue: Callable[[], JobQueue], status: Callable[[str], str]
) -> Answer:
    """Answer a command now (status, a refusal) or defer it and queue its job."""
    job = _job_fields(body, user)
    data = body.data or _Data(name="")
    if data.type == MESSAGE_COMMAND and data.name == FORGET_THIS_MESSAGE:
        if not data.target_id:
            return refusal(400, "a message command needs its target message")
        permissions = int(body.member.permissions or 0) if body.member is not None else 0
        moderator = bool(body.guild_id) and permissions & MANAGE_MESSAGES == MANAGE_MESSAGES
        queue().send(ForgetMessageJob(target_id=data.target_id, moderator=moderator, **job))
        return 200, {"type": DEFERRED, "data": {"flags": EPHEMERAL}}
    if data.name == "memory" and data.options:
        sub = data.options[0].name
        if sub == "status":
            return 200, _message(status(user.id))
        if sub in MEMORY_COMMANDS:
            queue().send(MEMORY_COMMANDS[sub](**job))
            return 200, {"type": DEFERRED, "data": {"flags": EPHEMERAL}}
    if data.name == "ask":
        return _ask(data, job, queue)
    return 200, _message("I don't know that command.")


def _job_fields(body: Interaction, user: _User) -> dict[str, Any]:
    """What every job a command queues carries: who, where, the token to answer with, when."""
    job: dict[str, Any] = dict(
        user=user.id,
        guild=body.guild_id,
        channel=body.channel_id,
        token=body.token,
        interaction_id=body.id,
        issued_at=int(time.time() * 1000),
    )
    if body.channel is not None:  # a thread's parent and type: whose permissions apply to an answer here
        job.update(channel_type=body.channel.type, parent_id=body.channel.parent_id)
    if body.app_permissions is not None:
        job.update(app_permissions=int(body.app_permissions))
    return job


def _ask(data: _Data, job: dict[str, Any], queue: Callable[[], JobQueue]) -> Answer:
    prompt = next((o.value for o in data.options if o.name == "prompt"), None)
    if not isinstance(prompt, str) or not prompt.strip():
        return 200, _message("/ask needs a prompt.")
    if not encodable(prompt):
        return refusal(400, "the prompt contains a lone surrogate (an invalid Unicode character)")
    if not job["guild"]:
        return 200, _message("/ask works in a server channel, where its memories live.")
    queue().send(AskJob(prompt=prompt[:6000], **job))
    return 200, {"type": DEFERRED}


def seen_once(settings: DiscordSettings, limits: LimitsPort, window_s: int = 900) -> Callable[[str], bool]:
    """True the first time an interaction id is seen, False after: a conditional write of a short-lived
    record (expiresAt lets DynamoDB's TTL remove it once no signature for it could still be fresh)."""

    def first_time(interaction_id: str) -> bool:
        return limits.first_sight(settings.bot, interaction_id, int(time.time()) + window_s)

    return first_time


def consent_status(settings: DiscordSettings, state: StatePort, records: RecordsPort) -> Callable[[str], str]:
    """The status answer from the stores alone (fast enough for the 3-second window: no engine is built)."""

    def status(user: str) -> str:
        from .intents import INTENT_OFF

        if state.consents.get(settings.bot, user) is None:
            return "Long-term memory is off for you. Use /memory remember to opt in."
        stored = records.count_user(settings.bot, user)
        run = state.backfills.get(settings.bot, user)
        if run is None:
            backfill = "Backfill: not started."
        else:
            progress = "complete" if run.left <= 0 else f"{run.done} of {run.channels} channels done"
            backfill = f"Backfill: {progress}."
        intent = state.channels.content_intent(settings.bot)
        warning = f" {INTENT_OFF}" if intent is not None and not intent.on else ""
        unreadable = len(state.channels.unreadable(settings.bot))
        unread = (
            f" Channels I may not read: {unreadable} (View Channel or Read Message History missing)."
            if unreadable
            else ""
        )
        return f"Long-term memory is on for you. {backfill} Memories stored: {stored}.{unread}{warning}"

    return status
