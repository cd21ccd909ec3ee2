"""The gateway's events applied to memory, in the order heard, each idempotent by message id (a job SQS
delivers twice changes nothing more): a new message is stored as a catch-up stores it (consent read again,
disallowed channels and retention honoured), an edit takes its new text, a deletion of a message, a channel,
a thread or a forum post removes what was stored of it, a server the bot left is deleted after its grace."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from ..jobs import GatewayJob
from .core import DiscordCore
from .objects import Message
from .sources import Sources
from .window import Window

log = logging.getLogger(__name__)


class GatewayEvents:
    """apply: one GatewayJob's events."""

    def __init__(self, core: DiscordCore, window: Window, sources: Sources) -> None:
        self.core, self.window, self.sources = core, window, sources
        self.bot, self.service = core.bot, core.service

    def apply(self, job: GatewayJob) -> None:
        for event in job.events:
            name, data = event.get("t"), event.get("d")
            if not isinstance(data, dict):
                continue
            try:
                self._apply_one(str(name), data, event, job.issued_at or None)
            except ValidationError as exc:  # a payload not shaped as Discord documents it: skipped, said
                log.warning("a gateway %s event could not be read: %s", name, exc.errors()[:1])

    def _apply_one(self, name: str, data: dict[str, Any], event: dict[str, Any], heard: int | None) -> None:
        if name == "MESSAGE_CREATE":
            self._created(data, event, heard)
        elif name == "MESSAGE_UPDATE":
            self._edited(data)
        elif name in ("MESSAGE_DELETE", "MESSAGE_DELETE_BULK"):
            self._deleted([str(i) for i in data.get("ids") or [data.get("id")] if i])
        elif name in ("CHANNEL_DELETE", "THREAD_DELETE"):
            self.sources.channel_gone(str(data["id"]))
        elif name == "GUILD_DELETE":
            self.core.state.roster.drop(self.bot, str(data["id"]))
            self.sources.server_left(str(data["id"]))

    def _deleted(self, message_ids: list[str]) -> None:
        removed = self.service.remove_sources(self.bot, message_ids)
        if removed:
            log.info("gateway: %d deleted messages removed", removed)

    def _created(self, data: dict[str, Any], event: dict[str, Any], heard: int | None) -> None:
        message = Message.model_validate(data)
        guild, channel = data.get("guild_id"), message.channel_id
        if not guild or not channel:
            return  # a DM: nothing of it is server memory
        self.core.channels.learn(channel, event.get("parent_id"), bool(event.get("private")))
        # the channel's newest-read mark is not moved: events missed while the gateway was away lie
        # before this one, and the catch-up reads from that mark
        # received when the gateway heard it: a forget since then refuses it, however late the job runs
        self.core.store_messages(str(guild), channel, [message], origin=heard)

    def _edited(self, data: dict[str, Any]) -> None:
        stored = self.service.by_source(self.bot, str(data.get("id") or ""))
        if stored is None or "content" not in data:
            return  # not a message engram keeps, or an update that is not of its text (an embed resolved)
        message = _edited_message(data, stored.content if isinstance(stored.content, dict) else {})
        guild = str(data.get("guild_id") or stored.server or "")
        self.window.apply_edit(guild, message.channel_id or "", stored.id, message)


def _edited_message(data: dict[str, Any], content: dict[str, Any]) -> Message:
    """An update's message, what it leaves out (its author, its time) taken from what is stored."""
    author = data.get("author") or {"id": content.get("authorId"), "username": content.get("author")}
    merged: dict[str, Any] = {
        "id": data["id"],
        "channel_id": data.get("channel_id") or content.get("channelId"),
        "author": author,
        "timestamp": data.get("timestamp") or content.get("timestamp"),
        **{k: data[k] for k in ("content", "edited_timestamp", "attachments", "embeds") if k in data},
    }
    return Message.model_validate(merged)
