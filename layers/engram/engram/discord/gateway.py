"""Capture through Discord's gateway: one small always-on process that hears what changes on Discord as it
happens (new messages, edits, deletions, deleted channels and threads, servers left) and forwards it, in
batches, to the jobs queue, where the worker applies it idempotently by message id (engram.discord.events).

The connection is discord.py's (AutoShardedClient): identify, heartbeats, resume and reconnect, zlib-stream
and shards as Discord's gateway docs require are a well-kept library's work, not ours. engram reads each
dispatch as it arrives (`on_socket_raw_receive`, before the library's own parsing) and keeps no cache of
its own beyond which channels are threads of which parent. Polling stays: it closes any gap after downtime
and is the whole capture where no gateway runs."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..jobs import GatewayJob

if TYPE_CHECKING:
    import discord

    from ..config.discord import DiscordSettings

log = logging.getLogger(__name__)
# developers/events/gateway-events.mdx: what reaches memory
MESSAGES = frozenset({"MESSAGE_CREATE", "MESSAGE_UPDATE"})
REMOVALS = frozenset(
    {"MESSAGE_DELETE", "MESSAGE_DELETE_BULK", "CHANNEL_DELETE", "THREAD_DELETE", "GUILD_DELETE"}
)
PLACES = frozenset({"GUILD_CREATE", "THREAD_CREATE", "THREAD_UPDATE", "THREAD_LIST_SYNC", "CHANNEL_CREATE"})
THREAD_TYPES = (10, 11, 12)
BATCH_EVENTS = 50  # a job's events at most
BATCH_BYTES = 200_000  # ... and its size (SQS takes 256 KB a message)
CONSENT_TTL_S = 60.0  # how long an answer of "has this person opted in?" is reused


class ConsentCache:
    """Who has opted in, asked in batches and remembered for CONSENT_TTL_S: a message of someone who opted
    in a moment ago may be missed until then, and the REST catch-up (and their backfill) stores it."""

    def __init__(self, consenting: Callable[[set[str]], set[str]], ttl_s: float = CONSENT_TTL_S) -> None:
        self._consenting = consenting
        self._ttl_s = ttl_s
        self._known: dict[str, tuple[bool, float]] = {}

    def of(self, users: set[str]) -> set[str]:
        now = time.monotonic()
        stale = {u for u in users if u not in self._known or now - self._known[u][1] > self._ttl_s}
        if stale:
            yes = self._consenting(stale)
            self._known.update({u: (u in yes, now) for u in stale})
        return {u for u in users if self._known[u][0]}


class EventBatcher:
    """Dispatches in, jobs out: what reaches memory is kept (a message only if its author opted in, or it is
    the bot's reply to someone who did; every deletion, since who wrote a deleted message is not said), each
    message noted with its thread's parent and privacy (the worker cannot look them up cheaply)."""

    def __init__(self, application_id: str, consents: ConsentCache) -> None:
        self.application_id = application_id
        self.consents = consents
        self._pending: list[dict[str, Any]] = []
        self._parents: dict[str, tuple[str, bool]] = {}  # thread -> (its channel, private)
        self._lock = threading.Lock()

    def add(self, payload: dict[str, Any]) -> None:
        """One gateway payload (op 0 dispatches are kept, the rest ignored)."""
        dispatch = _dispatch(payload)
        if dispatch is None:
            return
        event, data = dispatch
        if event == "READY":  # the bot user's own id (an older app's differs from the application's)
            self.application_id = str((data.get("user") or {}).get("id") or self.application_id)
        elif event in PLACES:
            self._learn(event, data)
        elif event in MESSAGES:
            self._keep(self._noted(event, data))
        elif _removes(event, data):
            self._keep({"t": event, "d": _removal(data)})

    def _keep(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(event)

    def _noted(self, event: str, data: dict[str, Any]) -> dict[str, Any]:
        """A message event with its thread's parent and privacy, where known."""
        parent = self._parents.get(str(data.get("channel_id") or ""))
        noted: dict[str, Any] = {"t": event, "d": data}
        if parent is not None:
            noted.update(parent_id=parent[0], private=parent[1])
        return noted

    def _learn(self, event: str, data: dict[str, Any]) -> None:
        if event == "GUILD_CREATE":
            places = [*(data.get("channels") or []), *(data.get("threads") or [])]
        elif event == "THREAD_LIST_SYNC":
            places = list(data.get("threads") or [])
        else:
            places = [data]
        for place in places:
            if isinstance(place, dict) and place.get("type") in THREAD_TYPES and place.get("parent_id"):
                self._parents[str(place["id"])] = (str(place["parent_id"]), place.get("type") == 12)

    def take(self) -> list[GatewayJob]:
        """The events gathered since the last take, those of people who have not opted in left out, as jobs
        of at most BATCH_EVENTS events and BATCH_BYTES."""
        with self._lock:
            pending, self._pending = self._pending, []
        people = {who for e in pending for who in self._people(e) or ()}
        opted_in = self.consents.of(people) if people else set()
        return _in_jobs([e for e in pending if self._forwarded(e, opted_in)])

    def _forwarded(self, event: dict[str, Any], opted_in: set[str]) -> bool:
        """Every removal; a message of someone who opted in; an edit that does not say whose (the worker
        changes it only if it is stored)."""
        if event["t"] not in MESSAGES:
            return True
        people = self._people(event)
        return people is None or bool(people & opted_in)

    def _people(self, event: dict[str, Any]) -> set[str] | None:
        """Whose a message event could be stored as: its author, or whom the bot's reply answers; None when
        the event does not say (an edit without its author)."""
        data = event["d"]
        author = data.get("author") or {}
        if author.get("id") is None:
            return None
        if str(author["id"]) != self.application_id:
            return set() if author.get("bot") else {str(author["id"])}
        if data.get("interaction_metadata") or data.get("interaction"):
            return set()  # an /ask answer: /ask stores it whole
        replied = ((data.get("referenced_message") or {}).get("author") or {}).get("id")
        return {str(replied)} if replied else set()


def _in_jobs(events: list[dict[str, Any]]) -> list[GatewayJob]:
    """Events in jobs of at most BATCH_EVENTS events and BATCH_BYTES, in order."""
    jobs: list[GatewayJob] = []
    batch: list[dict[str, Any]] = []
    size = 0
    for event in events:
        length = len(json.dumps(event))
        if batch and (len(batch) == BATCH_EVENTS or size + length > BATCH_BYTES):
            jobs.append(GatewayJob(events=batch, issued_at=_now_ms()))
            batch, size = [], 0
        batch.append(event)
        size += length
    if batch:
        jobs.append(GatewayJob(events=batch, issued_at=_now_ms()))
    return jobs


def _dispatch(payload: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A dispatch's event name and data (op 0); None for anything else (a heartbeat's ACK, HELLO)."""
    event, data = payload.get("t"), payload.get("d")
    if payload.get("op") != 0 or not isinstance(event, str) or not isinstance(data, dict):
        return None
    return event, data


def _removes(event: str, data: dict[str, Any]) -> bool:
    """A removal to forward: not a guild that is only unavailable (an outage is not the bot leaving)."""
    return event in REMOVALS and not (event == "GUILD_DELETE" and data.get("unavailable"))


def _removal(data: dict[str, Any]) -> dict[str, Any]:
    """What a removal needs of its payload: ids only (a deleted message's event carries no text)."""
    keep = ("id", "ids", "channel_id", "guild_id", "parent_id", "type")
    return {k: data[k] for k in keep if k in data}


def _now_ms() -> int:
    return int(time.time() * 1000)


class GatewayCapture:
    """The gateway connection (discord.py) feeding an EventBatcher, flushed to the queue every `every_s`."""

    def __init__(
        self,
        settings: DiscordSettings,
        send: Callable[[GatewayJob], None],
        consenting: Callable[[set[str]], set[str]],
        every_s: float = 0.5,
    ) -> None:
        self.settings = settings
        self.send = send
        self.every_s = every_s
        self.batcher = EventBatcher(settings.application_id or "", ConsentCache(consenting))
        self.forwarded = 0
        self._client: discord.AutoShardedClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def gateway_url(self, token: str) -> str:
        """Where to connect (Get Gateway Bot): raises when Discord will not say, and capture stays with
        polling."""
        import httpx

        answer = httpx.get(
            f"{self.settings.api_base.rstrip('/')}/gateway/bot",
            headers={
                "Authorization": f"Bot {token}",
                "User-Agent": "DiscordBot (https://github.com/engram, 1.0)",
            },
            timeout=10,
        )
        answer.raise_for_status()
        return str(answer.json()["url"])

    def client(self, gateway_url: str) -> discord.AutoShardedClient:
        """discord.py's client: only the intents engram needs, no message or member cache, every raw payload
        handed to the batcher. It connects where Get Gateway Bot says, identifying anew there too (discord.py
        would otherwise identify anew at its built-in wss://gateway.discord.gg)."""
        import discord
        import discord.gateway
        import discord.http
        import yarl

        discord.http.Route.BASE = self.settings.api_base.rstrip("/")  # one API per process (tests: a fake)
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.message_content = True
        client = discord.AutoShardedClient(
            intents=intents,
            enable_debug_events=True,
            max_messages=None,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
        )

        @client.event
        async def on_socket_raw_receive(raw: str) -> None:
            try:
                payload = json.loads(raw)
            except ValueError:
                return
            if isinstance(payload, dict):
                self.batcher.add(payload)

        return client

    async def run(self) -> None:
        """Connect and forward until closed; raises when the gateway cannot be reached at all (no token, no
        `GET /gateway/bot`): the caller then leaves capture to polling."""
        token = self.settings.resolve_bot_token()
        if not token or not self.settings.application_id:
            raise RuntimeError("Discord is not configured (no bot token or application id)")
        self._loop = asyncio.get_running_loop()
        url = await asyncio.to_thread(self.gateway_url, token)
        self._client = self.client(url)
        flusher = asyncio.create_task(self._flush_every())
        try:
            await self._client.start(token)
        finally:
            flusher.cancel()
            self.flush()

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            await asyncio.to_thread(self.flush)

    def flush(self) -> None:
        """Send what was gathered (a queue that fails keeps nothing: the REST catch-up closes that gap)."""
        try:
            for job in self.batcher.take():
                self.send(job)
                self.forwarded += len(job.events)
        except Exception:
            log.exception("gateway events could not be queued; the catch-up will find them")

    def stop(self) -> None:
        """Close the connection (from another thread)."""
        if self._client is not None and self._loop is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._client.close(), self._loop)

    def start_thread(self) -> threading.Thread:
        """Run in a thread of its own (the local stack): a gateway that cannot be reached is logged, and
        capture stays with polling."""

        def main() -> None:
            try:
                asyncio.run(self.run())
            except Exception as exc:
                log.warning("no Discord gateway (%s): capture by polling only", exc)

        thread = threading.Thread(target=main, name="discord-gateway", daemon=True)
        thread.start()
        return thread
