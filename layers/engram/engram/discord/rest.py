"""Discord's REST API with the bot token: guilds, channels, message history, interaction webhooks, DMs.
A 429 becomes RateLimited so the job is delayed on the queue instead of sleeping in Lambda (the limits
themselves: engram.discord.limits)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import ValidationError

from ..breaker import guarded
from .errors import DiscordError
from .limits import RateLimited, RateLimits
from .objects import Channel, Member, Message, PartialGuild, Role, User
from .objects import channels as parse_channels
from .objects import messages as parse_messages
from .visibility import Guild, permissions

__all__ = ["DiscordClient", "DiscordError", "RateLimited", "RateLimits"]


# resources/channel.mdx, channel types: text (0), announcement (5), and the text chat of voice (2) and stage
# (13) channels hold messages; forum (15) and media (16) channels hold only posts, which are threads
TEXT_CHANNELS = {0, 5, 2, 13}
THREAD_PARENTS = {0, 5, 15, 16}
THREADS = {10, 11, 12}
# resources/message.mdx, message types a person writes (DEFAULT, REPLY, and the two command kinds); the rest
# (THREAD_CREATED 18, pins, joins, boosts ...) are system messages, never stored
PERSON_MESSAGE_TYPES = {0, 19, 20, 23}
# resources/message.mdx, Message Flags
SUPPRESS_EMBEDS = 1 << 2
EPHEMERAL = 1 << 6


VIEW_AND_HISTORY = (1 << 10) | (1 << 16)
MANAGE_THREADS = 1 << 34


def archived_kinds(channel: Channel, own: int | None) -> list[str]:
    """Which archived-thread listings a channel can answer (resources/channel.mdx): public ones under text,
    announcement, forum and media channels with Read Message History; private ones only under text channels
    (the only type that has them), with Manage Threads too. `own`: the bot's permissions there (None:
    unknown, every listing the type allows)."""
    kind = channel.type
    kinds = []
    if kind in THREAD_PARENTS and (own is None or own & VIEW_AND_HISTORY == VIEW_AND_HISTORY):
        kinds.append("public")
    if kind == 0 and (
        own is None or own & (VIEW_AND_HISTORY | MANAGE_THREADS) == VIEW_AND_HISTORY | MANAGE_THREADS
    ):
        kinds.append("private")
    return kinds


class DiscordClient:
    """A small, synchronous Discord REST client (httpx; the transport is injectable for tests)."""

    def __init__(
        self,
        api_base: str,
        bot_token: str | None,
        application_id: str | None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 10.0,
        limits: RateLimits | None = None,
    ) -> None:
        headers = {"User-Agent": "DiscordBot (https://github.com/engram, 1.0)"}
        if bot_token:
            headers["Authorization"] = f"Bot {bot_token}"
        self.application_id = application_id
        self.limits = limits or RateLimits()
        # a Discord that hangs is rested, its calls failing at once (engram.breaker)
        self._http = httpx.Client(
            base_url=api_base.rstrip("/"),
            headers=headers,
            timeout=timeout_s,
            transport=guarded(transport, "Discord"),
        )

    def _object(self, method: str, path: str, auth: bool = True, **kwargs: Any) -> dict[str, Any]:
        """A call answered with a JSON object ({} for an empty answer)."""
        answer = self._call(method, path, auth, **kwargs)
        return answer if isinstance(answer, dict) else {}

    def _posted(self, method: str, path: str, auth: bool = True, **kwargs: Any) -> Message | None:
        """A call answered with the message it posted or edited (None: Discord sent no message back)."""
        answer = self._object(method, path, auth, **kwargs)
        return Message.model_validate(answer) if answer.get("id") else None

    def _objects(self, method: str, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        """A call answered with a JSON list of objects."""
        answer = self._call(method, path, True, **kwargs)
        return [o for o in answer if isinstance(o, dict)] if isinstance(answer, list) else []

    def _call(self, method: str, path: str, auth: bool = True, **kwargs: Any) -> Any:
        request = self._http.build_request(method, path, **kwargs)
        if not auth:  # a webhook call: the interaction token in the path is its credential, no header at all
            request.headers.pop("Authorization", None)
        self.limits.before(method, path)
        response = self._http.send(request)
        if response.status_code == 429:
            data = (
                response.json()
                if response.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            retry = float(data.get("retry_after") or response.headers.get("retry-after") or 1)
            self.limits.after(method, path, 429, response.headers, retry)
            if data.get("global"):
                self.limits.global_stop(retry)
            raise RateLimited(retry, bool(data.get("global")))
        self.limits.after(method, path, response.status_code, response.headers)
        if response.status_code >= 400:
            raise DiscordError(response.status_code, response.text)
        return response.json() if response.content else None

    def application(self) -> dict[str, Any]:
        """The application itself (`GET /applications/@me`): its flags say which privileged intents it has."""
        return self._object("GET", "/applications/@me")

    def guilds(self) -> list[PartialGuild]:
        """Every guild the bot is in (paginated by id: one request per 200)."""
        out: list[PartialGuild] = []
        after = "0"
        while True:
            page = self.guilds_page(after, 200)
            out.extend(page)
            if len(page) < 200:
                return out
            after = page[-1].id

    def guilds_page(self, after: str, limit: int) -> list[PartialGuild]:
        """Up to `limit` (≤ 200) guilds of the bot with ids above `after`, by id (resources/user.mdx, Get
        Current User Guilds)."""
        found = self._objects("GET", "/users/@me/guilds", params={"limit": limit, "after": after})
        return [PartialGuild.model_validate(g) for g in found]

    def readable_channels(self, guild_id: str, archived: bool = False) -> list[Channel]:
        """A guild's channels that hold messages (text, announcement, voice and stage chat) and its active
        threads (forum and media posts among them); with `archived`, the archived threads too — asked for
        only where Discord could answer (topics/rate-limits.mdx: every 403 counts toward the invalid-request
        limit)."""
        listed = self.all_channels(guild_id)
        channels = [c for c in listed if c.type in TEXT_CHANNELS]
        try:
            threads = self.active_threads(guild_id)
        except DiscordError:
            threads = []
        if archived:  # threads archive after a day or a week of silence: most thread history is in these
            mine = self._own_permissions(guild_id, listed)
            for parent in listed:
                for kind in archived_kinds(parent, None if mine is None else mine.get(parent.id, 0)):
                    threads += self.archived_threads(parent.id, kind)
        seen: set[str] = set()
        out: list[Channel] = []
        for c in channels + [t for t in threads if t.type in THREADS]:
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)
        return out

    def _own_permissions(self, guild_id: str, channels: list[Channel]) -> dict[str, int] | None:
        """The bot's own permissions in each channel (its roles from Get Guild Member with its own id), or
        None when Discord would not say (then every listing is tried, as before)."""
        try:
            roles = {r.id: r.permissions for r in self.roles(guild_id)}
            own = set(self.member(guild_id, str(self.application_id)).roles)
        except (DiscordError, RateLimited, ValidationError):
            return None
        guild = Guild(guild_id, roles, {c.id: list(c.permission_overwrites) for c in channels})
        return {c.id: permissions(guild, c.id, own, str(self.application_id)) for c in channels}

    def archived_threads(self, channel_id: str, kind: str = "public") -> list[Channel]:
        """A channel's archived threads of one kind (public, or private: those need Manage Threads),
        paged by archive time (resources/channel.mdx). A refusal (any 4xx but a 429) leaves them out; it
        never fails the listing it is part of."""
        out: list[Channel] = []
        before = None
        while True:
            params = {"limit": 100, **({"before": before} if before else {})}
            try:
                page = self._call("GET", f"/channels/{channel_id}/threads/archived/{kind}", params=params)
            except DiscordError as exc:
                if 400 <= exc.status < 500:
                    break
                raise
            threads = parse_channels(page.get("threads"))
            out += threads
            if not page.get("has_more") or not threads:
                break
            metadata = threads[-1].thread_metadata
            before = metadata.archive_timestamp if metadata is not None else None
            if not before:
                break
        return out

    def roles(self, guild_id: str) -> list[Role]:
        """The guild's roles with their permissions (@everyone's id is the guild's)."""
        return [Role.model_validate(r) for r in self._objects("GET", f"/guilds/{guild_id}/roles")]

    def all_channels(self, guild_id: str) -> list[Channel]:
        """Every channel of the guild, with its permission overwrites."""
        return parse_channels(self._objects("GET", f"/guilds/{guild_id}/channels"))

    def active_threads(self, guild_id: str) -> list[Channel]:
        """The guild's active threads (each names its parent channel)."""
        threads = self._object("GET", f"/guilds/{guild_id}/threads/active").get("threads")
        return parse_channels(
            [t for t in threads if isinstance(t, dict)] if isinstance(threads, list) else []
        )

    def member(self, guild_id: str, user_id: str) -> Member:
        """One member of the guild (their roles)."""
        return Member.model_validate(self._object("GET", f"/guilds/{guild_id}/members/{user_id}"))

    def messages(
        self, channel_id: str, before: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[Message]:
        """Up to `limit` messages, newest first (Discord's order)."""
        params: dict[str, str | int] = {"limit": limit}
        if before:
            params["before"] = before
        if after:
            params["after"] = after
        return parse_messages(self._objects("GET", f"/channels/{channel_id}/messages", params=params))

    def me(self) -> User:
        """The bot's own user (Get Current User): its id is the application's for apps made since 2020, not
        for older ones."""
        return User.model_validate(self._object("GET", "/users/@me"))

    def message(self, channel_id: str, message_id: str) -> Message:
        """One message (Get Channel Message): DiscordError 404 with UNKNOWN_MESSAGE when it was deleted,
        UNKNOWN_CHANNEL when its channel or thread was."""
        return Message.model_validate(self._object("GET", f"/channels/{channel_id}/messages/{message_id}"))

    def edit_original(self, token: str, content: str) -> Message | None:
        """Edit the deferred interaction response (the token lives 15 minutes)."""
        return self._posted(
            "PATCH",
            f"/webhooks/{self.application_id}/{token}/messages/@original",
            # SUPPRESS_EMBEDS: an answer quoting a link someone posted does not unfurl its preview again
            json={"content": content[:2000], "allowed_mentions": {"parse": []}, "flags": SUPPRESS_EMBEDS},
            auth=False,
        )

    def followup(self, token: str, content: str, ephemeral: bool = False) -> Message | None:
        """A followup message on an interaction."""
        body: dict[str, object] = {"content": content[:2000], "allowed_mentions": {"parse": []}}
        body["flags"] = SUPPRESS_EMBEDS | (EPHEMERAL if ephemeral else 0)
        return self._posted("POST", f"/webhooks/{self.application_id}/{token}", json=body, auth=False)

    def direct_file(
        self, user_id: str, content: str, filename: str, data: bytes, media_type: str
    ) -> Message | None:
        """A DM carrying one attachment (multipart: the message as payload_json, the file as files[0])."""
        channel = self._call("POST", "/users/@me/channels", json={"recipient_id": user_id})
        payload = {
            "content": content[:2000],
            "allowed_mentions": {"parse": []},
            "attachments": [{"id": 0, "filename": filename}],
        }
        return self._posted(
            "POST",
            f"/channels/{channel['id']}/messages",
            data={"payload_json": json.dumps(payload)},
            files={"files[0]": (filename, data, media_type)},
        )

    def direct_message(self, user_id: str, content: str) -> Message | None:
        """A DM with the bot token: the way to answer after the interaction token has expired."""
        channel = self._call("POST", "/users/@me/channels", json={"recipient_id": user_id})
        return self._posted(
            "POST",
            f"/channels/{channel['id']}/messages",
            json={"content": content[:2000], "allowed_mentions": {"parse": []}},
        )
