"""A fake Discord REST API (and a fake Ollama: chat and embed) on 127.0.0.1: guilds, channels, threads,
paginated
history, a 429 on first touch of one channel, interaction webhooks and DMs; records what it is asked."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from tests import fake_discord_shapes as shapes
from tests.discord_spec import spec_document
from tests.support import ServedApp

APP_ID = "900"
TOKEN = "bot-token-123"
ALICE, BOB = "1001", "1002"
# Discord's ids are snowflakes (reference.mdx, "Snowflakes"): the fake's world uses real-looking ones
G1 = "1100000000000000001"
G2 = "1100000000000000002"
C11 = "1110000000000000011"
C12 = "1110000000000000012"
C13 = "1110000000000000013"
C21 = "1110000000000000021"
T14 = "1120000000000000014"
# what the fake serves that is not Discord's API (web pages, images, a fake Ollama)
NOT_DISCORD = {"/page", "/to-metadata", "/big", "/cat.png", "/api/embed", "/api/chat"}
MESSAGES_BUCKET = "41f9a2c8e0d7b6a5"  # Get Channel Messages' bucket hash: the same for every channel


def dm_channel(user: str) -> str:
    """The DM channel the fake opens with a user (Create DM answers a channel of type 1): a snowflake."""
    return str(1_300_000_000_000_000_000 + int(user))


def _user(uid, name, bot=False):
    return {"id": uid, "username": name, "global_name": name.title(), "bot": bot}


class FakeDiscord(ServedApp):
    """History is made up front; `.sent` holds every webhook edit, followup and DM."""

    def __init__(self):
        self.app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)  # only what Discord serves
        self.sent: list[dict] = []
        self.chat_requests: list[dict] = []
        self.embed_requests: list[dict] = []
        self.history_reads: list[str] = []
        self.message_reads: list[str] = []  # Get Channel Message: a recalled message confirmed to exist
        self.requests: list[str] = []  # every request, "GET /channels/c11/messages"
        self.statuses: list[int] = []  # ... and the status each was answered with
        self.arrivals: list[float] = []  # when each request arrived (time.monotonic)
        # every answer checked against Discord's OpenAPI document (tests/discord_spec.py): loaded now, so a
        # missing document fails the test at once and plainly
        self.check_spec = True
        spec_document()
        self.forbidden_answers = 0  # 403s earned (each counts toward Discord's invalid-request limit)
        self.spec_problems: list[str] = []  # answers that do not match it
        self.spec_checked: set[tuple[str, str, int]] = set()
        self.routes: list[
            str
        ] = []  # and its route, "GET /channels/{channel}/messages" (counted by the bench)
        self.rate_limited_once = {C21}
        # topics/rate-limits.mdx: per-route buckets (a channel's messages are one, keyed by the channel: a
        # "major parameter"), told in X-RateLimit-Limit/-Remaining/-Reset-After/-Bucket on every answer; a
        # request past a used-up bucket gets 429 with retry_after
        self.bucket_limit, self.bucket_window_s = 1000, 1.0
        self.bucket_hits: dict[str, list[float]] = {}
        self.too_many = 0  # 429s a client earned by ignoring the headers
        # The Message Content intent (developers/events/gateway.mdx, "Message Content Intent"): privileged and
        # off until the operator turns it on; without it REST messages come back with empty content,
        # attachments and embeds, except the app's own, DMs with it and messages that mention it
        self.content_intent = True
        self.answer = "Here is what I remember."
        self.fail_guilds = 0  # answer the next n guild lists with a 500, as Discord sometimes does
        self.fail_channel_lists = 0  # ... and the next n lists of a server's channels
        # topics/opcodes-and-status-codes.mdx, JSON error codes: 50007 "Cannot send messages to this user"
        # (the user's DMs are closed to the server's members)
        self.closed_dms: set[str] = set()
        self.dead_tokens: set[str] = set()  # interaction tokens Discord no longer honours
        self.webhook_429_once: set[str] = set()  # tokens whose next webhook call meets a 429
        self.forbidden: set[str] = set()  # channels without View Channel for the bot
        # resources/channel.mdx, "List Public/Private Archived Threads": per parent channel, newest first,
        # paged by archive timestamp; private ones need Manage Threads (403 without)
        self.archived: dict[str, dict[str, list[dict]]] = {}
        self.private_threads_forbidden = False
        self.no_history: set[str] = set()  # channels without Read Message History for the bot
        self.next_id = 1_200_000_000_000_000_000  # message ids: snowflakes, rising with time
        # resources/channel.mdx: `last_message_id` is the last message *sent* ("may not point to an existing
        # or
        # valid message"): a deletion does not move it back, and an edit does not move it at all
        self.last_sent: dict[str, str] = {}
        self.guilds = [{"id": G1, "name": "Alpha"}, {"id": G2, "name": "Beta"}]
        self.channels = {
            G1: [
                {"id": C11, "type": 0, "name": "general"},
                {"id": C12, "type": 0, "name": "secret"},
                {"id": C13, "type": 2, "name": "voice"},
            ],
            G2: [{"id": C21, "type": 0, "name": "lobby"}],
        }
        self.threads = {G1: [{"id": T14, "type": 11, "name": "a thread", "parent_id": C11}], G2: []}
        # topics/permissions.mdx: @everyone is the role whose id is the guild's; permissions are decimal
        # strings
        everyone = str((1 << 10) | (1 << 11) | (1 << 16))  # VIEW_CHANNEL, SEND_MESSAGES, READ_MESSAGE_HISTORY
        self.roles = {g: [{"id": g, "name": "@everyone", "permissions": everyone}] for g in (G1, G2)}
        # (guild, user) -> role ids; Get Guild Member answers 404 (10007 Unknown Member) for anyone else
        # the bot is a member too (its user id is the application's), with no role of its own
        self.members: dict[tuple[str, str], list[str]] = {
            (g, u): [] for g in (G1, G2) for u in (ALICE, BOB, APP_ID)
        }
        self.history: dict[str, list[dict]] = {c: [] for c in (C11, C12, T14, C21)}
        self.gateway_url: str | None = None  # a FakeGateway's, when one is offered (GET /gateway/bot)
        self.deleted_channels: set[str] = set()  # channels and threads deleted: 404, 10003 Unknown Channel
        # an interaction's token -> (its channel, its id, its user): the answers posted through the token land
        # in that channel's history with `interaction_metadata`, as Discord shows them to anyone reading it
        self.interactions: dict[str, tuple[str, str, str]] = {}
        self._make_history()
        self._routes()

    def _id(self) -> str:
        # a real snowflake's time is its top bits (reference.mdx, "Snowflakes"): each message a millisecond
        # after the last, as messages sent one after another are
        self.next_id += 1 << 22
        return str(self.next_id)

    def add(self, channel: str, author: dict, content: str, **extra) -> dict:
        """Append a message (newest last internally)."""
        message = {
            "id": self._id(),
            "channel_id": channel,
            "author": author,
            "content": content,
            "timestamp": "2026-11-01T10:00:00+00:00",
            "edited_timestamp": None,
            "attachments": [],
            **extra,
        }
        self.history[channel].append(message)
        self.last_sent[channel] = message["id"]
        return message

    def edit(self, message_id: str, content: str) -> dict:
        """A message edited by its author (resources/message.mdx: `edited_timestamp` is set, `id` kept)."""
        message = self.find(message_id)
        message["content"] = content
        message["edited_timestamp"] = datetime.now(UTC).isoformat()
        return message

    def delete(self, message_id: str) -> None:
        """A message deleted on Discord: gone from the history, the channel's last_message_id unchanged."""
        for messages in self.history.values():
            messages[:] = [m for m in messages if m["id"] != message_id]

    def _make_history(self):
        alice, bob, other = _user(ALICE, "alice"), _user(BOB, "bob"), _user("77", "otherbot", bot=True)
        me = _user(APP_ID, "engram", bot=True)
        for i in range(120):  # c11: 250 messages -> three pages of 100
            a = self.add(C11, alice, f"alice message {i} about gardening")
            self.add(C11, me, f"bot reply {i} to alice", referenced_message={"id": a["id"], "author": alice})
            if i < 5:
                self.add(C11, bob, f"bob message {i}")
        self.add(C11, alice, "")  # empty: skipped
        self.add(
            C11,
            alice,
            "",
            attachments=[
                {
                    "id": "1400000000000000001",
                    "filename": "p.png",
                    "content_type": "image/png",
                    "url": "http://x/p.png",
                }
            ],
        )
        self.add(C11, other, "another bot talking")
        for i in range(3):
            self.add(C12, alice, f"alice in a disallowed channel {i}")
        for i in range(4):
            self.add(T14, alice, f"alice in a thread {i} about compost")
        for i in range(15):
            self.add(C21, alice, f"alice in Beta {i} about sailing boats")
            self.add(C21, bob, f"bob in Beta {i}")

    def delete_channel(self, channel: str) -> None:
        """A channel, thread or forum post deleted: unlisted; its messages answer 10003 Unknown Channel."""
        for listed in (*self.channels.values(), *self.threads.values()):
            listed[:] = [c for c in listed if c["id"] != channel]
        self.history.pop(channel, None)
        self.deleted_channels.add(channel)

    def find(self, message_id: str) -> dict | None:
        """A message of the history by id."""
        return next((m for ms in self.history.values() for m in ms if m["id"] == message_id), None)

    def expected_for(self, user: str, allowed: set[str]) -> set[str]:
        """Message ids the backfill must store for a user."""
        out = set()
        for channel, messages in self.history.items():
            if channel not in allowed:
                continue
            for m in messages:
                if (
                    m["author"]["id"] == user
                    and m["content"]
                    or m["author"]["id"] == APP_ID
                    and (m.get("referenced_message") or {}).get("author", {}).get("id") == user
                ):
                    out.add(m["id"])
        return out

    def _bucket(self, channel: str, remaining: int, reset_after: float) -> dict:
        return {
            "x-ratelimit-limit": str(self.bucket_limit),
            "x-ratelimit-remaining": str(max(remaining, 0)),
            "x-ratelimit-reset-after": f"{max(reset_after, 0):.3f}",
            # one hash for the route, counted per channel (the major parameter), as Discord answers it
            "x-ratelimit-bucket": MESSAGES_BUCKET,
        }

    @staticmethod
    def _page(items: list[dict], before: str | None, after: str | None, limit: int) -> list[dict]:
        """Get Channel Messages: newest first; `after` gives the oldest `limit` after that id, newest
        first."""
        if before:
            items = [m for m in items if int(m["id"]) < int(before)]
        if after:
            items = [m for m in items if int(m["id"]) > int(after)]
            return list(reversed(items[:limit]))
        return list(reversed(items[-limit:])) if items else []

    def _bot_may_manage_threads(self, channel: str) -> bool:
        """Whether the bot's roles grant Manage Threads in the guild of a channel (no overwrite grants it)."""
        guild = next((g for g, cs in self.channels.items() if any(c["id"] == channel for c in cs)), None)
        if guild is None:
            return False
        held = {guild, *self.members.get((guild, APP_ID), [])}
        perms = 0
        for r in self.roles.get(guild, []):
            if r["id"] in held:
                perms |= int(r.get("permissions") or 0)
        return bool(perms & ((1 << 34) | (1 << 3)))

    def _posted(self, channel: str, body: dict, files: list[dict] | None = None) -> dict:
        """The message Discord answers a post with: the app's own, its content and its uploads."""
        return shapes.message(
            {
                "id": self._id(),
                "channel_id": channel,
                "content": body.get("content", ""),
                "flags": int(body.get("flags") or 0),
                "author": _user(APP_ID, "engram", bot=True),
                "attachments": [
                    {"id": self._id(), "filename": f["filename"], "url": "https://cdn.discord.test/x"}
                    for f in files or []
                ],
            }
        )

    def stop(self) -> None:
        """Stop serving; every answer it gave must have been Discord's (a test using the fake fails here
        otherwise, naming what was not)."""
        super().stop()
        if self.check_spec and self.spec_problems:
            shown = "\n".join(dict.fromkeys(self.spec_problems))
            raise AssertionError(f"the fake Discord answered outside Discord's OpenAPI document:\n{shown}")

    async def _checked(self, request: Request, response):
        """Check an answer against Discord's OpenAPI document (tests/discord_spec.py); what does not match
        is kept in `spec_problems` (a test asserts there is none) and the answer goes out as it is."""
        from tests.discord_spec import problems

        body = b"".join([chunk async for chunk in response.body_iterator])
        data = json.loads(body) if body and "json" in response.headers.get("content-type", "") else None
        found = problems(request.method, request.url.path, response.status_code, data)
        self.spec_problems += found
        self.spec_checked.add((request.method, request.url.path.split("/")[1], response.status_code))
        return Response(
            body, status_code=response.status_code, headers=dict(response.headers), media_type=None
        )

    def _routes(self):
        app = self.app

        @app.middleware("http")
        async def count(request: Request, call_next):
            self.arrivals.append(time.monotonic())
            response = await call_next(request)
            route = request.scope.get("route")
            self.statuses.append(response.status_code)
            self.requests.append(f"{request.method} {request.url.path}")
            self.routes.append(f"{request.method} {getattr(route, 'path', request.url.path)}")
            if request.url.path in NOT_DISCORD or not self.check_spec:
                return response
            return await self._checked(request, response)

        def bot_auth(request: Request):
            return request.headers.get("authorization") == f"Bot {TOKEN}"

        @app.get("/applications/@me")
        async def application(request: Request):
            # flags (resources/application.mdx): GATEWAY_MESSAGE_CONTENT 1 << 18, _LIMITED 1 << 19 (an app in
            # fewer than 100 servers, as a test bot is)
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            return shapes.application(APP_ID, (1 << 19) if self.content_intent else 0)

        def as_seen(message: dict) -> dict:
            """A message as the app is given it: without the intent, others' messages lose their content."""
            mine = message["author"]["id"] == APP_ID
            mentioned = any(u.get("id") == APP_ID for u in message.get("mentions", []))
            if self.content_intent or mine or mentioned:
                return message
            return {**message, "content": "", "attachments": [], "embeds": []}

        @app.get("/users/@me")
        async def me(request: Request):
            # what a gateway client (discord.py) reads at login: the bot's own user
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            return {
                **shapes.user(_user(APP_ID, "engram", bot=True)),
                "flags": 0,
                "mfa_enabled": False,
                "locale": "en-US",
            }

        @app.get("/oauth2/applications/@me")
        async def application_of_bot(request: Request):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            return shapes.application(APP_ID, (1 << 19) if self.content_intent else 0)

        @app.get("/gateway/bot")
        async def gateway_bot(request: Request):
            # topics/gateway.mdx, Get Gateway Bot: where to connect and how many shards
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            if self.gateway_url is None:  # no gateway offered: capture by polling only
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            return {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}

        @app.get("/users/@me/guilds")
        async def guilds(request: Request):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            if self.fail_guilds > 0:
                self.fail_guilds -= 1
                return JSONResponse({"message": "500: Internal Server Error", "code": 0}, status_code=500)
            # by id, after `after`, at most `limit` (1-200, default 200): openapi.json's /users/@me/guilds
            after = int(request.query_params.get("after") or 0)
            limit = int(request.query_params.get("limit") or 200)
            if not 1 <= limit <= 200:
                return JSONResponse({"message": "Invalid Form Body", "code": 50035}, status_code=400)
            mine = sorted((g for g in self.guilds if int(g["id"]) > after), key=lambda g: int(g["id"]))
            return [shapes.my_guild(g) for g in mine[:limit]]

        @app.get("/guilds/{guild}/channels")
        async def channels(guild: str, request: Request):
            # every channel is listed, whatever the bot may see in it; each carries its newest message id
            # (resources/channel.mdx, `last_message_id`)
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            if self.fail_channel_lists > 0:
                self.fail_channel_lists -= 1
                return JSONResponse({"message": "500: Internal Server Error", "code": 0}, status_code=500)
            if guild not in self.channels:  # a server the bot is not in (or no longer)
                return JSONResponse({"message": "Unknown Guild", "code": 10004}, status_code=404)
            return [
                shapes.guild_channel({**c, "last_message_id": self.last_sent.get(c["id"])}, guild, i)
                for i, c in enumerate(self.channels[guild])
            ]

        @app.get("/guilds/{guild}/roles")
        async def roles(guild: str, request: Request):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            return [shapes.role(r, i) for i, r in enumerate(self.roles[guild])]

        @app.get("/guilds/{guild}/members/{user}")
        async def member(guild: str, user: str, request: Request):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            if (guild, user) not in self.members:
                return JSONResponse({"message": "Unknown Member", "code": 10007}, status_code=404)
            return shapes.member(user, self.members[(guild, user)])

        @app.get("/channels/{channel}/threads/archived/{kind}")
        async def archived(
            channel: str, kind: str, request: Request, limit: int = 50, before: str | None = None
        ):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            if kind == "private" and (
                self.private_threads_forbidden or not self._bot_may_manage_threads(channel)
            ):
                self.forbidden_answers += 1
                return JSONResponse({"message": "Missing Permissions", "code": 50013}, status_code=403)
            threads = self.archived.get(channel, {}).get(kind, [])
            if before:
                threads = [t for t in threads if t["thread_metadata"]["archive_timestamp"] < before]
            guild = next((g for g, cs in self.channels.items() if any(c["id"] == channel for c in cs)), "0")
            return {
                "threads": [shapes.thread(t, guild) for t in threads[:limit]],
                "members": [],
                "has_more": len(threads) > limit,
            }

        @app.get("/guilds/{guild}/threads/active")
        async def threads(guild: str, request: Request):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            return {
                "threads": [
                    shapes.thread({**t, "last_message_id": self.last_sent.get(t["id"])}, guild)
                    for t in self.threads[guild]
                ],
                "members": [],
                "has_more": False,
            }

        @app.get("/channels/{channel}/messages")
        async def messages(
            channel: str,
            request: Request,
            limit: int = 50,
            before: str | None = None,
            after: str | None = None,
        ):
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            self.history_reads.append(channel)
            if channel in self.deleted_channels:
                return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
            # topics/permissions.mdx: without VIEW_CHANNEL a channel's messages answer 403 (50001 Missing
            # Access); without READ_MESSAGE_HISTORY they answer 200 with an empty list
            if channel in self.forbidden:
                return JSONResponse({"message": "Missing Access", "code": 50001}, status_code=403)
            if channel in self.no_history:
                return []
            now = time.monotonic()
            hits = [t for t in self.bucket_hits.get(channel, []) if now - t < self.bucket_window_s]
            if len(hits) >= self.bucket_limit:
                self.too_many += 1
                wait = self.bucket_window_s - (now - hits[0])
                return JSONResponse(
                    {
                        "message": "You are being rate limited.",
                        "code": 0,
                        "retry_after": round(wait, 3),
                        "global": False,
                    },
                    status_code=429,
                    headers=self._bucket(channel, 0, wait),
                )
            hits.append(now)
            self.bucket_hits[channel] = hits
            limits = self._bucket(
                channel, self.bucket_limit - len(hits), self.bucket_window_s - (now - hits[0])
            )
            if channel in self.rate_limited_once:
                self.rate_limited_once.discard(channel)
                return JSONResponse(
                    {
                        "message": "You are being rate limited.",
                        "code": 0,
                        "retry_after": 0.2,
                        "global": False,
                    },
                    status_code=429,
                )
            items = self.history.get(channel, [])
            page = self._page(items, before, after, limit)
            return JSONResponse([shapes.message(as_seen(m)) for m in page], headers=limits)

        @app.get("/channels/{channel}/messages/{message_id}")
        async def one_message(channel: str, message_id: str, request: Request):
            # resources/message.mdx, Get Channel Message: needs View Channel and Read Message History
            if not bot_auth(request):
                return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
            self.message_reads.append(message_id)  # not a history read: one message, confirmed
            if channel in self.deleted_channels:
                return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
            if channel in self.forbidden or channel in self.no_history:
                self.forbidden_answers += 1
                return JSONResponse({"message": "Missing Access", "code": 50001}, status_code=403)
            found = next((m for m in self.history.get(channel, []) if m["id"] == message_id), None)
            if found is None:
                return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
            return shapes.message(as_seen(found))

        def land(token: str, message: dict, original: str | None = None) -> None:
            """An answer posted through an interaction's token, into its channel's history as Discord keeps
            it: the app's message with `interaction_metadata` (a followup's names the original response)."""
            if token not in self.interactions:
                return
            channel, interaction_id, user = self.interactions[token]
            metadata = {
                "id": interaction_id if interaction_id.isdigit() else self._id(),
                "type": 2,
                "user": shapes.user(_user(user, "u")),
                "authorizing_integration_owners": {"0": "0"},
            }
            if original is not None:
                metadata["original_response_message_id"] = original
            landed = {**message, "channel_id": channel, "interaction_metadata": metadata}
            self.history.setdefault(channel, []).append(landed)
            self.last_sent[channel] = message["id"]

        def original_of(token: str) -> str | None:
            return next((s["id"] for s in self.sent if s.get("token") == token and s["kind"] == "edit"), None)

        def webhook_refusal(token: str) -> JSONResponse | None:
            """topics/rate-limits.mdx: a webhook route has its own bucket and can answer 429 with retry_after;
            interactions/receiving-and-responding.mdx: a token that died (a reply later than 3 s, or after
            15 minutes) answers 404, 10015 Unknown Webhook."""
            if token in self.dead_tokens:
                return JSONResponse({"message": "Unknown Webhook", "code": 10015}, status_code=404)
            if token in self.webhook_429_once:
                self.webhook_429_once.discard(token)
                return JSONResponse(
                    {
                        "message": "You are being rate limited.",
                        "code": 0,
                        "retry_after": 0.4,
                        "global": False,
                    },
                    status_code=429,
                    headers={
                        "x-ratelimit-limit": "5",
                        "x-ratelimit-remaining": "0",
                        "x-ratelimit-reset-after": "0.4",
                        "x-ratelimit-bucket": "9c1d3e5f7a",
                        "x-ratelimit-scope": "user",
                        "retry-after": "1",
                    },
                )
            return None

        @app.patch("/webhooks/{app_id}/{token}/messages/@original")
        async def edit(app_id: str, token: str, request: Request):
            refused = webhook_refusal(token)
            if refused is not None:
                return refused
            body = await request.json()
            original = original_of(token)
            message = self._posted("0", body)
            if original is not None:  # the original response edited again: the same message
                message["id"] = original
                for messages in self.history.values():
                    for m in messages:
                        if m["id"] == original:
                            m["content"] = message["content"]
            else:
                land(token, message)
            self.sent.append({"kind": "edit", "token": token, **body, "id": message["id"]})
            return message

        @app.post("/webhooks/{app_id}/{token}")
        async def followup(app_id: str, token: str, request: Request):
            refused = webhook_refusal(token)
            if refused is not None:
                return refused
            body = await request.json()
            message = self._posted("0", body)
            land(token, message, original=original_of(token))
            self.sent.append({"kind": "followup", "token": token, **body, "id": message["id"]})
            return message

        @app.post("/users/@me/channels")
        async def create_dm(request: Request):
            recipient = (await request.json())["recipient_id"]
            return shapes.dm(dm_channel(recipient), recipient)

        @app.post("/channels/{channel}/messages")
        async def post(channel: str, request: Request):
            if channel in {dm_channel(u) for u in self.closed_dms}:
                return JSONResponse(
                    {"message": "Cannot send messages to this user", "code": 50007}, status_code=403
                )
            if request.headers.get("content-type", "").startswith("multipart/form-data"):
                form = await request.form()
                body = json.loads(form["payload_json"])
                upload = form["files[0]"]
                files = [
                    {
                        "filename": upload.filename,
                        "content_type": upload.content_type,
                        "data": await upload.read(),
                    }
                ]
                self.sent.append({"kind": "channel", "channel": channel, "files": files, **body})
                return self._posted(channel, body, files)
            body = await request.json()
            self.sent.append({"kind": "channel", "channel": channel, **body})
            return self._posted(channel, body)

        @app.get("/page")
        async def page():
            html = (
                "<html><head><title>Growing tomatoes</title></head><body><nav>menu</nav>"
                "<article><h1>Growing tomatoes</h1>"
                + "<p>Tomatoes need six hours of sun, deep watering twice a week and stakes by June.</p>" * 5
                + "</article><footer>footer</footer></body></html>"
            )
            return HTMLResponse(html)

        @app.get("/to-metadata")
        async def to_metadata():
            return RedirectResponse("http://169.254.169.254/latest/meta-data/", status_code=302)

        @app.get("/big")
        async def big():
            return HTMLResponse("<p>" + "x" * 5_000_000 + "</p>")

        @app.get("/cat.png")
        async def cat():
            return Response(b"\x89PNG\r\n\x1a\n fake image bytes", media_type="image/png")

        @app.post("/api/embed")
        async def embed(request: Request):
            from tests.support import HashEmbedder

            body = await request.json()
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            self.embed_requests.append(body)
            return {"model": body["model"], "embeddings": HashEmbedder().embed(texts)}

        @app.post("/api/chat")
        async def chat(request: Request):
            body = await request.json()
            self.chat_requests.append(body)
            if any(m.get("images") for m in body["messages"]):
                return {
                    "model": body["model"],
                    "message": {"role": "assistant", "content": "A grey cat asleep on a windowsill."},
                    "done": True,
                }
            return {
                "model": body["model"],
                "message": {"role": "assistant", "content": self.answer},
                "done": True,
            }
