"""The Discord objects engram reads, as Discord documents them (discord-api-docs: resources/message.mdx,
resources/user.mdx, resources/channel.mdx, resources/guild.mdx): only the fields engram uses, every other
field Discord adds kept but unread (`extra="allow"`, so a message passed on keeps what Discord sent). Parsed
once where they come in (the REST client); the rest of the Discord door reads attributes, never nested
`.get()`s of raw JSON."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_KEEP = ConfigDict(extra="allow", populate_by_name=True)


class User(BaseModel):
    """resources/user.mdx: who wrote a message (a bot, an app's webhook, a person)."""

    model_config = _KEEP
    id: str = ""
    username: str | None = None
    global_name: str | None = None  # the display name, when the user set one
    bot: bool = False


class Attachment(BaseModel):
    """resources/message.mdx, Attachment Object."""

    model_config = _KEEP
    id: str | None = None
    filename: str | None = None
    content_type: str | None = None
    url: str | None = None
    size: int | None = None


class MessageReference(BaseModel):
    """resources/message.mdx, Message Reference Structure: what a reply (or a forward) points to."""

    model_config = _KEEP
    message_id: str | None = None
    channel_id: str | None = None
    guild_id: str | None = None


class InteractionMetadata(BaseModel):
    """resources/message.mdx, Message Interaction Metadata (and the older `interaction`): whose command
    an app's message answers."""

    model_config = _KEEP
    id: str | None = None
    user: User | None = None
    # a followup's: the interaction's first answer (so its parts are one answer, never the asker's words)
    original_response_message_id: str | None = None


class Message(BaseModel):
    """resources/message.mdx, Message Object."""

    model_config = _KEEP
    id: str
    channel_id: str | None = None
    type: int = 0
    author: User = Field(default_factory=User)
    content: str = ""
    timestamp: str | None = None
    edited_timestamp: str | None = None
    attachments: list[Attachment] = Field(default_factory=list)
    embeds: list[dict[str, Any]] = Field(default_factory=list)
    referenced_message: Message | None = None
    message_reference: MessageReference | None = None
    interaction_metadata: InteractionMetadata | None = None
    interaction: InteractionMetadata | None = None
    mentions: list[User] = Field(default_factory=list)
    # topics/gateway-events.mdx, Message Create's extra fields: the author as a (partial) member of the
    # server — their nickname there; a message read over REST has none
    member: Member | None = None
    flags: int = 0
    # a forward's copy of the message it forwards; a poll; stickers (no words of their own)
    message_snapshots: list[dict[str, Any]] = Field(default_factory=list)
    poll: dict[str, Any] | None = None
    sticker_items: list[dict[str, Any]] = Field(default_factory=list)

    def words(self, channel_names: Mapping[str, str] | None = None) -> str:
        """What the message says, as text to store and search: mentions by name (`<@id>` as @Name, a
        channel as #name where known, a role as @role), a forwarded message's text, a poll's question and
        answers, and a voice message noted as one (its audio is not transcribed)."""
        names = {u.id: u.global_name or u.username or "someone" for u in self.mentions}
        text = _MENTION.sub(lambda m: _mention(m, names, channel_names or {}), self.content).strip()
        parts = [text, *map(_forwarded, self.message_snapshots), _poll(self.poll), self._voice()]
        return "\n".join(p for p in parts if p)

    def _voice(self) -> str:
        """A voice message, noted with its length (its audio is not transcribed)."""
        if not self.flags & VOICE_MESSAGE:
            return ""
        seconds = next(((a.model_extra or {}).get("duration_secs") for a in self.attachments), None)
        return f"(voice message{f', {round(float(seconds))} s' if seconds else ''})"

    @property
    def commanded_by(self) -> list[str]:
        """Whose command an app's message answers (its interaction metadata, then the older field)."""
        sources = (self.interaction_metadata, self.interaction)
        return [s.user.id for s in sources if s is not None and s.user is not None and s.user.id]

    @property
    def replied_author(self) -> str | None:
        """Whose message this one replies to, when Discord sent the message it answers."""
        replied = self.referenced_message
        return replied.author.id or None if replied is not None else None

    @property
    def replied_id(self) -> str | None:
        """Which message this one replies to (the message sent with it, else the reference)."""
        if self.referenced_message is not None:
            return self.referenced_message.id
        return self.message_reference.message_id if self.message_reference is not None else None

    @property
    def empty(self) -> bool:
        """No text, no attachment, no embed: what every message of others looks like without the Message
        Content intent."""
        return not (
            self.content
            or self.attachments
            or self.embeds
            or self.message_snapshots
            or self.poll
            or self.sticker_items
        )


VOICE_MESSAGE = 1 << 13  # resources/message.mdx, Message Flags: IS_VOICE_MESSAGE
# reference.mdx, Message Formatting: <@id> and <@!id> a user, <#id> a channel, <@&id> a role
_MENTION = re.compile(r"<(@!?|#|@&)(\d{1,20})>")


def _forwarded(snapshot: dict[str, Any]) -> str:
    """A forward's copy of the message it forwards (resources/message.mdx, Message Snapshot)."""
    text = str((snapshot.get("message") or {}).get("content") or "").strip()
    return f"(forwarded) {text}" if text else ""


def _poll(poll: dict[str, Any] | None) -> str:
    """A poll's question and answers (resources/poll.mdx)."""
    if not poll:
        return ""
    question = str((poll.get("question") or {}).get("text") or "")
    answers = [str((a.get("poll_media") or {}).get("text") or "") for a in poll.get("answers") or []]
    return f"(poll) {question} " + " / ".join(a for a in answers if a)


def _mention(match: re.Match[str], users: Mapping[str, str], channels: Mapping[str, str]) -> str:
    kind, snowflake = match.group(1), match.group(2)
    if kind == "#":
        return f"#{channels[snowflake]}" if snowflake in channels else "#channel"
    if kind == "@&":
        return "@role"
    return f"@{users[snowflake]}" if snowflake in users else "@someone"


def position(message_id: str) -> str:
    """Where a message stands in its channel, as a snowflake that is no one's message id: the one just
    before the millisecond it was sent ((ms << 22) - 1). What catch-up keeps as a channel's newest read:
    ordered like the ids, never naming a message of someone who may be forgotten later. Reading after it
    reads that millisecond again, which costs nothing (storing is idempotent)."""
    return str(((int(message_id) >> 22) << 22) - 1)


def sent_after(message_id: str, kept: str) -> bool:
    """Whether a message was sent after a position (or a message id, as kept before positions) —
    compared by millisecond: a message of the position's own millisecond existed when it was read (its
    snowflake's time is its creation), so it is never new."""
    return int(message_id) >> 22 > (int(kept) + 1) >> 22


def messages(raw: Any) -> list[Message]:
    """A list of Discord's message objects, parsed (a list is what Get Channel Messages answers)."""
    return [Message.model_validate(m) for m in raw or []]


class Overwrite(BaseModel):
    """resources/channel.mdx, Overwrite Object: a role's (type 0) or a member's (type 1) allow and deny
    bits in one channel (Discord sends them as strings of digits)."""

    model_config = _KEEP
    id: str
    type: int = 0
    allow: int = 0
    deny: int = 0


class ThreadMetadata(BaseModel):
    """resources/channel.mdx, Thread Metadata Object."""

    model_config = _KEEP
    archived: bool = False
    archive_timestamp: str | None = None


class Channel(BaseModel):
    """resources/channel.mdx, Channel Object (a thread is a channel with a parent)."""

    model_config = _KEEP
    id: str
    type: int = 0
    name: str | None = None
    guild_id: str | None = None
    parent_id: str | None = None
    last_message_id: str | None = None
    nsfw: bool = False
    permission_overwrites: list[Overwrite] = Field(default_factory=list)
    thread_metadata: ThreadMetadata | None = None


class Role(BaseModel):
    """resources/guild.mdx... topics/permissions.mdx, Role Object: its permission bits (a string)."""

    model_config = _KEEP
    id: str
    permissions: int = 0


class Member(BaseModel):
    """resources/guild.mdx, Guild Member Object: the roles a member holds, and their server nickname."""

    model_config = _KEEP
    roles: list[str] = Field(default_factory=list)
    user: User | None = None
    nick: str | None = None


class PartialGuild(BaseModel):
    """resources/user.mdx, Get Current User Guilds: a server the bot is in."""

    model_config = _KEEP
    id: str
    name: str | None = None


def channels(raw: Any) -> list[Channel]:
    """A list of Discord's channel objects, parsed."""
    return [Channel.model_validate(c) for c in raw or []]
