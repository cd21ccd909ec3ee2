"""A fake Discord gateway on 127.0.0.1, written from developers/events/gateway.mdx: HELLO with a heartbeat
interval, IDENTIFY answered by READY (a session id, a resume URL) and a GUILD_CREATE per guild, heartbeats
acknowledged, dispatches numbered by a per-session sequence, RESUME replaying what a dropped connection
missed and then RESUMED, RECONNECT (op 7) and INVALID_SESSION (op 9) on demand, and zlib-stream transport
compression (one zlib context per connection, each payload flushed with Z_SYNC_FLUSH: the client knows a
payload is whole by its 00 00 ff ff suffix). Served by aiohttp in a thread of its own."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests import fake_discord_shapes as shapes

HELLO, HEARTBEAT, IDENTIFY, RESUME, RECONNECT, INVALID_SESSION, HEARTBEAT_ACK = 10, 1, 2, 6, 7, 9, 11
DISPATCH = 0
VOICE_FIELDS = {"bitrate": 64000, "user_limit": 0, "rtc_region": None}  # a voice or stage channel's own


@dataclass
class Session:
    id: str
    seq: int = 0
    sent: list[dict[str, Any]] = field(default_factory=list)  # every dispatch, for a RESUME to replay


class Connection:
    def __init__(self, ws: web.WebSocketResponse, compress: bool, transport: Any) -> None:
        self.ws, self.transport = ws, transport
        self.zlib = zlib.compressobj() if compress else None
        self.session: Session | None = None

    async def send(self, payload: dict[str, Any]) -> None:
        text = json.dumps(payload)
        if self.zlib is None:
            await self.ws.send_str(text)
        else:
            await self.ws.send_bytes(self.zlib.compress(text.encode()) + self.zlib.flush(zlib.Z_SYNC_FLUSH))


class FakeGateway:
    """The gateway for one bot of a FakeDiscord (whose guilds, channels and roles it announces)."""

    def __init__(self, rest, heartbeat_ms: int = 1000) -> None:
        self.rest = rest
        self.heartbeat_ms = heartbeat_ms
        self.sessions: dict[str, Session] = {}
        self.current: Connection | None = None
        self.identified = 0
        self.resumed = 0
        self.heartbeats = 0
        self.compressed: list[bool] = []  # whether each connection asked for zlib-stream
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- serving ----------------------------------------------------------------------------------

    def start(self) -> FakeGateway:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_get("/gateway", self._socket)
            self._runner = web.AppRunner(app)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fake-gateway", daemon=True)
        self._thread.start()
        ready.wait(10)
        self.url = f"ws://127.0.0.1:{self.port}/gateway"
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        compress = request.query.get("compress") == "zlib-stream"
        self.compressed.append(compress)
        conn = Connection(ws, compress, request.transport)
        await conn.send({"op": HELLO, "d": {"heartbeat_interval": self.heartbeat_ms}, "s": None, "t": None})
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            payload = json.loads(message.data)
            await self._received(conn, payload)
        if self.current is conn:
            self.current = None
        return ws

    async def _received(self, conn: Connection, payload: dict[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if op == HEARTBEAT:
            self.heartbeats += 1
            await conn.send({"op": HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == IDENTIFY:
            if data.get("token") != self.rest_token:
                await conn.ws.close(code=4004, message=b"Authentication failed")
                return
            self.identified += 1
            session = Session(id=f"session-{time.time_ns()}")
            self.sessions[session.id] = session
            conn.session, self.current = session, conn
            await self._dispatch_to(conn, "READY", self._ready(session))
            for guild in self.rest.guilds:
                await self._dispatch_to(conn, "GUILD_CREATE", self._guild(guild["id"]))
        elif op == RESUME:
            session = self.sessions.get(data.get("session_id"))
            if session is None or data.get("token") != self.rest_token:
                await conn.send({"op": INVALID_SESSION, "d": False, "s": None, "t": None})
                return
            self.resumed += 1
            conn.session, self.current = session, conn
            for missed in [p for p in session.sent if p["s"] > int(data.get("seq") or 0)]:
                await conn.send(missed)
            await self._dispatch_to(conn, "RESUMED", {})

    @property
    def rest_token(self) -> str:
        from tests.fake_discord import TOKEN

        return TOKEN

    async def _dispatch_to(self, conn: Connection | None, event: str, data: dict[str, Any]) -> None:
        """Number a dispatch in the current session and send it (kept for a RESUME either way)."""
        session = conn.session if conn is not None else None
        if session is None:
            return
        session.seq += 1
        payload = {"op": DISPATCH, "t": event, "s": session.seq, "d": data}
        session.sent.append(payload)
        if conn is not None and not conn.ws.closed:
            await conn.send(payload)

    # --- what a test makes happen ----------------------------------------------------------------

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """An event in the session: sent if a connection is open, else numbered and kept for the RESUME to
        replay (what Discord does for a session whose connection dropped)."""

        async def go() -> None:
            if self.current is not None:
                await self._dispatch_to(self.current, event, data)
                return
            session = max(self.sessions.values(), key=lambda s: int(s.id.split("-")[1]))
            session.seq += 1
            session.sent.append({"op": DISPATCH, "t": event, "s": session.seq, "d": data})

        self._run(go())

    def drop(self) -> None:
        """The connection drops (no close frame): the client resumes."""

        async def go() -> None:
            if self.current is not None:
                conn, self.current = self.current, None
                if conn.transport is not None:
                    conn.transport.abort()

        self._run(go())

    def reconnect(self) -> None:
        """op 7 RECONNECT: the client reconnects and resumes."""
        self._run(self._op(RECONNECT, None))

    def invalidate(self) -> None:
        """op 9 INVALID_SESSION, not resumable: the client identifies anew."""
        self._run(self._op(INVALID_SESSION, False))

    async def _op(self, op: int, data: Any) -> None:
        if self.current is not None:
            await self.current.send({"op": op, "d": data, "s": None, "t": None})

    # --- payloads ----------------------------------------------------------------------------------

    def _ready(self, session: Session) -> dict[str, Any]:
        from tests.fake_discord import APP_ID

        return {
            "v": 10,
            "user": {
                "id": APP_ID,
                "username": "engram",
                "discriminator": "0000",
                "global_name": None,
                "avatar": None,
                "bot": True,
                "flags": 0,
            },
            "guilds": [{"id": g["id"], "unavailable": True} for g in self.rest.guilds],
            "session_id": session.id,
            "resume_gateway_url": self.url,
            "shard": [0, 1],
            "application": {"id": APP_ID, "flags": 1 << 19},
        }

    def _guild(self, guild: str) -> dict[str, Any]:
        """GUILD_CREATE: the guild with its channels, active threads and roles (developers/events/
        gateway-events.mdx, Guild Create: the guild object plus joined_at, large, member_count, members,
        channels, threads, presences, voice_states...)."""
        name = next(g["name"] for g in self.rest.guilds if g["id"] == guild)
        return {
            "id": guild,
            "name": name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "owner_id": "1",
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": [shapes.role(r, i) for i, r in enumerate(self.rest.roles.get(guild, []))],
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "joined_at": "2026-01-01T00:00:00+00:00",
            "large": False,
            "unavailable": False,
            "member_count": 3,
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "channels": [
                shapes.guild_channel({**VOICE_FIELDS, **c} if c.get("type") in (2, 13) else c, guild, i)
                for i, c in enumerate(self.rest.channels.get(guild, []))
            ],
            "threads": [shapes.thread(t, guild) for t in self.rest.threads.get(guild, [])],
        }
