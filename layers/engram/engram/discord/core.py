"""The part of Discord memory every other part uses: consent, replies, readable channels, and storing a
page of messages (and watching what was stored for edits and deletions)."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..clock import now_ms
from ..config.discord import DiscordSettings
from ..jobs import JobQueue
from ..ports import StatePort
from ..service import ChatMessage, MemoryService
from .attachments import Interpreter, SafeFetcher
from .objects import Channel, Message
from .rest import PERSON_MESSAGE_TYPES, DiscordClient, DiscordError, RateLimited
from .visibility import Visibility
from .window import WINDOW_DAYS, timestamp_ms

log = logging.getLogger(__name__)
TOKEN_LIFETIME_MS = 15 * 60 * 1000  # how long Discord honours an interaction token
EMPTY_PAGE_SIGN = 5  # this many messages of others, every one empty: the intent is missing
UNREADABLE_RETRY_S = 3600  # a channel Discord refused is tried again after an hour, then 2, 4, ...
UNREADABLE_MAX_S = 7 * 86_400  # ... hours, at most a week apart
REPLY_WAIT_S = 10.0  # a 429 this short on an answer is waited out in the job


class ChannelsSeen:
    """What this process has seen of channels in a listing: each one's newest message id, and of a thread its
    channel (whose permissions it follows) and whether it is private (its words reach no one outside it).
    Jobs carry these, so a worker that never listed the server still knows them."""

    def __init__(self) -> None:
        self._parents: dict[str, str] = {}
        self._private: set[str] = set()
        self._last_message: dict[str, str | None] = {}
        self.names: dict[str, str] = {}  # channel id -> its name, for a mention of it in a message

    def listed(self, channel: Channel) -> None:
        """A channel (or thread) as a listing gave it."""
        self._last_message[channel.id] = channel.last_message_id
        if channel.name:
            self.names[channel.id] = channel.name
        if channel.type in (10, 11, 12):
            self.learn(channel.id, channel.parent_id, private=channel.type == 12)

    def last_message(self, channel: str) -> str | None:
        """Its newest message id at the last listing (None: never listed, or no message yet)."""
        return self._last_message.get(channel)

    def learn(self, channel: str | None, parent_id: str | None, private: bool) -> None:
        """Remember a thread's channel and privacy (a job's or a channel listing's)."""
        if not channel:
            return
        if parent_id:
            self._parents[channel] = parent_id
        if private:
            self._private.add(channel)

    def parent(self, channel: str) -> str | None:
        return self._parents.get(channel)

    def is_private(self, channel: str) -> bool:
        return channel in self._private

    def carried(self, guild: str, channel: str) -> dict[str, Any]:
        """What a job about a channel carries of it: its server and id, its newest message id and, of a
        thread, its channel and privacy."""
        return {
            "guild": guild,
            "channel": channel,
            "last_message_id": self.last_message(channel),
            "parent_id": self.parent(channel),
            "private": self.is_private(channel),
        }


class DiscordCore:
    """What every part of Discord memory shares: the application's settings, the memory service, the
    queue and the Discord client; consent, replies, which channels can be read, and storing a page."""

    def __init__(
        self,
        settings: DiscordSettings,
        service: MemoryService,
        queue: JobQueue,
        client: DiscordClient,
        state: StatePort,
        ollama: httpx.Client,
        interpreter: Interpreter | None = None,
    ) -> None:
        self.settings = settings
        self.service = service
        # consent, backfill runs, cursors, tokens, the channels seen: Discord's own state, in the store
        self.state = state
        self.queue = queue
        self.client = client
        self.channels = ChannelsSeen()
        self._own_id: str | None = None
        self._own_id_guessed = 0.0  # when a guessed own id is to be asked for again (0: asked, known)
        self.visibility = Visibility(client)
        self.ollama = ollama
        # /ask's chat model on an OpenAI-compatible API (DISCORD_ASK_CHAT_URL); None: Ollama's /api/chat
        self.chat: httpx.Client | None = None
        self.interpreter = interpreter or Interpreter(
            SafeFetcher(allow=sorted(settings.fetch_allow_networks)), self.ollama, settings.vision_model
        )

    @property
    def bot(self) -> str:
        return self.settings.bot

    @property
    def own_id(self) -> str:
        """The bot user's id, which writes its messages: the application's id for apps made since 2020, asked
        of Discord once (Get Current User) since an older app's bot user has an id of its own."""
        if self._own_id is None or (self._own_id_guessed and time.monotonic() > self._own_id_guessed):
            try:
                self._own_id, self._own_id_guessed = (
                    self.client.me().id or self.settings.application_id or "",
                    0.0,
                )
            except (DiscordError, RateLimited, httpx.HTTPError) as exc:
                # taken as the application's (right for every app made since 2020) and asked again in a
                # minute, not on every message of the page being stored
                log.warning("the bot's own user id is unknown (%s): taken as the application's", exc)
                self._own_id, self._own_id_guessed = self.settings.application_id or "", time.monotonic() + 60
        return self._own_id

    # ----- consent and progress ---------------------------------------------------------------

    def consented(self, user: str) -> bool:
        """Whether a user has opted in (read now: a forget may have happened a moment ago)."""
        return self.state.consents.get(self.bot, user) is not None

    def anyone_consents(self) -> bool:
        """Whether anyone has opted in (one key read, however many have)."""
        return self.state.consents.anyone(self.bot)

    # ----- replies ------------------------------------------------------------------------------

    def reply(self, job_token: str | None, issued_at: int, user: str | None, content: str) -> Message | None:
        """Edit the deferred response while the token lives; after that, or when Discord says the token is
        gone (404, 10015 Unknown Webhook: a cold start past 3 s invalidates it), a DM with the bot token. A
        short 429 is waited out: an answer is not dropped for it."""
        posted = self.reply_parts(job_token, issued_at, user, [content])
        return posted[0] if posted else None

    def reply_parts(
        self, job_token: str | None, issued_at: int, user: str | None, parts: list[str]
    ) -> list[Message]:
        """A reply in several messages: the first as `reply` sends it, the rest as followups on the same
        token, or, where the first went by DM (the token is gone), by DM too. Returns what was posted; the
        first part's failure sends nothing more."""
        first, by_dm = self._first_part(job_token, issued_at, user, parts[0])
        if first is None:
            return []
        posted = [first]
        for part in parts[1:]:
            try:
                if by_dm and user:
                    sent = self.deliver(functools.partial(self.client.direct_message, user, part))
                else:
                    sent = self.deliver(functools.partial(self.client.followup, job_token or "", part))
            except (DiscordError, RateLimited) as exc:
                log.warning("could not send the rest of an answer: %s", exc)
                break
            if sent is not None:
                posted.append(sent)
        return posted

    def _first_part(
        self, job_token: str | None, issued_at: int, user: str | None, content: str
    ) -> tuple[Message | None, bool]:
        """(the message, whether it went by DM)."""
        if job_token and now_ms() - issued_at < TOKEN_LIFETIME_MS - 30_000:
            try:
                return self.deliver(lambda: self.client.edit_original(job_token, content)), False
            except DiscordError as exc:
                if exc.status not in (401, 404):
                    log.warning("could not deliver a reply: %s", exc)
                    return None, False
                log.warning("the interaction token is gone (%s); answering by DM", exc.status)
            except RateLimited as exc:
                log.warning("could not deliver a reply: rate limited for %.1f s", exc.retry_after)
                return None, False
        if not user:
            return None, True
        try:
            return self.deliver(lambda: self.client.direct_message(user, content)), True
        except (DiscordError, RateLimited) as exc:
            log.warning("could not deliver a reply: %s", exc)
        return None, True

    def deliver(self, send: Callable[[], Message | None]) -> Message | None:
        """Send an answer, waiting out 429s of up to REPLY_WAIT_S (three tries): a job that holds a finished
        answer should not be retried for it (the answer would come by DM ~18 minutes later)."""
        for attempt in range(3):
            try:
                return send()
            except RateLimited as exc:
                if attempt == 2 or exc.retry_after > REPLY_WAIT_S:
                    raise
                time.sleep(exc.retry_after)
        return None

    def readable_channels(self, guilds: list[str], archived: bool = False) -> list[tuple[str, str]]:
        """(guild, channel) of every channel the bot can read in these servers, except the disallowed ones
        (each channel's newest message id kept in `channels`); with `archived`, archived threads too
        (a backfill: a catch-up needs none, as a new message in a thread makes it active again)."""
        out = []
        for guild in guilds:
            for c in self.client.readable_channels(guild, archived=archived):
                if not self.settings.disallowed(c.id, c.parent_id):
                    out.append((guild, c.id))
                    self.channels.listed(c)
        return out

    def member_guilds(self, guilds: list[str], user: str) -> list[str]:
        """Which of these servers a user is in (one Get Guild Member each)."""
        return [g for g in guilds if self._is_member(g, user)]

    def _is_member(self, guild: str, user: str) -> bool:
        """Whether a user is in a guild (Get Guild Member answers 404, 10007 Unknown Member, when not). One
        request per guild instead of listing its channels and threads; any other answer reads the guild."""
        try:
            self.client.member(guild, user)
            return True
        except DiscordError as exc:
            return exc.status != 404

    def split_unreadable(self, channels: list[tuple[str, str]]) -> tuple[list[Any], list[Any], int]:
        """(channels to read, channels marked unreadable whose hour is up, how many stay skipped): a channel
        Discord refused is not asked again every tick (every 401/403/429 counts toward Discord's 10,000
        invalid requests per 10 minutes per IP)."""
        marked = self.state.channels.unreadable(self.bot, [c for _, c in channels])
        now_s = now_ms() // 1000
        fresh = [(g, c) for g, c in channels if c not in marked]
        due = [(g, c) for g, c in channels if c in marked and marked[c].retry_at <= now_s]
        return fresh, due, len(channels) - len(fresh) - len(due)

    def read_page(self, channel: str, before: str | None = None, limit: int = 100) -> list[Message] | None:
        """A page of a channel's history, or None when Discord refuses it (403, 404): then the channel is
        marked unreadable, to be skipped, never failed (a failure would retry it into the DLQ every tick)."""
        try:
            return self.client.messages(channel, before=before, limit=limit)
        except DiscordError as exc:
            if exc.status not in (403, 404):
                raise
            self.unreadable_now(channel, f"Discord answered {exc.status}")
            return None

    def unreadable_now(self, channel: str, reason: str) -> None:
        """Mark a channel unreadable, to be tried again in UNREADABLE_RETRY_S, doubled for every refusal in a
        row up to UNREADABLE_MAX_S: a channel hidden from the bot for good costs a 403 a week, not an hour
        (each counts toward Discord's invalid-request limit)."""
        before = self.state.channels.unreadable(self.bot, [channel]).get(channel)
        strikes = before.strikes + 1 if before is not None else 1
        wait_s = min(UNREADABLE_RETRY_S * 2 ** (strikes - 1), UNREADABLE_MAX_S)
        log.info("channel %s cannot be read (%s): skipped for %d s", channel, reason, wait_s)
        # jittered (±20%): channels refused in one tick must not all come due in one later tick, a burst of
        # 403s toward Discord's invalid-request limit
        retry_s = int(wait_s * random.uniform(0.8, 1.2))
        self.state.channels.mark_unreadable(self.bot, channel, reason, now_ms() // 1000 + retry_s, strikes)

    def store_messages(
        self,
        guild: str,
        channel: str,
        page: list[Message],
        users: set[str] | None = None,
        origin: int | None = None,
        backfill: bool = False,
    ) -> int:
        """Store the messages of consenting users and the bot's replies to them; returns how many were new.
        Consent is read right before the write, for `users` (a backfill's one user) or, by default, for only
        the people on the page (its authors, and whom the bot's messages answer: at most two a message, so a
        catch-up's work is bounded by its page, never by how many have opted in). The write itself refuses
        users forgotten since `origin` (when the job was queued): a forget between the fetch and the store
        wins. A backfill page is older than what is stored: its oldest message's context is not the
        channel's newest one."""
        if not page or self.settings.disallowed(channel, self.channels.parent(channel)):
            return 0  # a disallowed channel, or a thread or forum post under one: nothing of it is stored
        page = [m for m in page if m.type in PERSON_MESSAGE_TYPES]  # no system messages
        cutoff = self.settings.retention_cutoff_ms(now_ms())
        if cutoff is not None:  # DISCORD_RETENTION_DAYS: what is past it is not stored at all
            page = [m for m in page if (timestamp_ms(m.timestamp) or 0) >= cutoff]
        self._notice_missing_content(page)
        checked_at = now_ms()
        users = self.state.consents.consenting(self.bot, self._people(page) if users is None else set(users))
        if not users:
            return 0
        batch = [c for c in (self._chat_message(guild, channel, m, users) for m in page) if c is not None]
        if not batch:
            return 0
        origin = checked_at if origin is None else min(origin, checked_at)
        added = self.service.add_messages(self.bot, batch, origin=origin, stored_tails=not backfill)
        fresh, created = added.fresh, added.created
        by_id = {m.id: m for m in page}
        self.note_stored(channel, [(by_id[f.source_id], f.id) for f in fresh if f.source_id in by_id])
        return created

    def _chat_message(
        self, guild: str, channel: str, message: Message, users: set[str]
    ) -> ChatMessage | None:
        """A message as engram stores it, if it is a consenting user's (or the bot's answer to one) and
        holds something: text, or images a vision model can describe."""
        owner, saved_by = self._owner(message, users)
        if owner is None:
            return None
        text = message.words(self.channels.names)
        images = [a for a in message.attachments if (a.content_type or "").startswith("image/")]
        if not text and not (images and self.settings.vision_model):
            return None  # empty, or image-only without vision
        return ChatMessage(
            source_id=message.id,
            text=text,
            user=owner,
            server=guild,
            thread=channel,
            created_at=timestamp_ms(message.timestamp),
            saved_by=saved_by,
            content=self.content_of(guild, channel, message),
        )

    def _notice_missing_content(self, page: list[Message]) -> None:
        """A page of other people's messages that all came back empty (no text, attachments or embeds):
        the sign of a missing Message Content intent, noted for /memory status and the backfill's reply."""
        others = [m for m in page if not m.author.bot and m.author.id != self.own_id]
        if len(others) >= EMPTY_PAGE_SIGN and all(m.empty for m in others):
            self.state.channels.note_content_intent(self.bot, False, "empty page", now_ms())

    def _people(self, page: list[Message]) -> set[str]:
        """Everyone a page's messages could be stored for: their authors, and whom the bot's replies are
        to."""
        people: set[str | None] = set()
        for message in page:
            if message.author.id != self.own_id:
                people.add(message.author.id)
            elif not message.commanded_by:  # a command's answer is never stored from a page (see _owner)
                people.add(message.replied_author)
        return {p for p in people if p}

    def _owner(self, message: Message, users: set[str]) -> tuple[str | None, str]:
        author = message.author
        if author.id == self.own_id:
            if message.commanded_by:
                # an answer to a command (each part of a long /ask answer too): /ask stores it whole, once,
                # with whose words it drew on; stored here it would be the asker's words, quoting no one
                return None, "bot"
            replied = message.replied_author
            return (replied, "bot") if replied in users else (None, "bot")
        if author.bot or author.id not in users:
            return None, "user"
        return author.id, "user"

    def content_of(self, guild: str, channel: str, message: Message) -> dict[str, Any]:
        # No roles: a message read over REST carries no member object (resources/message.mdx: `member` only
        # on Gateway events), so there is nothing true to store; a Gateway message's member gives the
        # author's server nickname. A reply keeps which message it answers and
        # whose it was — ids only, never that message's text, which is someone else's words.
        author = message.author
        content: dict[str, Any] = {
            "author": author.username,
            "displayName": author.global_name or author.username,
            "authorId": author.id or None,
            "isBot": author.bot,
            "timestamp": message.timestamp,
            "channelId": channel,
            "serverId": guild,
            "message": message.content,
            "attachments": self.interpreter.attachments(message),
        }
        parent = self.channels.parent(channel)
        if parent:  # so /ask can place an archived thread's memories
            content["parentId"] = parent
        if self.channels.is_private(channel):
            content["privateThread"] = True
        if message.member and message.member.nick:  # their server nickname: a name questions may use
            content["nick"] = message.member.nick
        if message.replied_id:
            content["replyTo"] = {"messageId": message.replied_id, "authorId": message.replied_author}
        return content

    def note_stored(self, channel: str, stored: list[tuple[Message, int]]) -> None:
        """Watch messages just stored (or edited) from a channel, (message, record id), while they are young
        enough for the window."""
        horizon = now_ms() - WINDOW_DAYS * 86_400_000
        entries, newest = [], 0
        for message, memory_id in stored:
            sent = timestamp_ms(message.timestamp) or 0
            if sent <= horizon:
                continue
            expires = (sent + WINDOW_DAYS * 86_400_000) // 1000
            entries.append((message.id, int(memory_id), message.edited_timestamp or "", expires))
            newest = max(newest, sent)
        if entries:
            self.state.channels.note_recent(self.bot, channel, entries, newest)
