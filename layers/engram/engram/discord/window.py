"""Edits and deletions: a channel's newest page, re-read, is compared with what is stored from it."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from ..clock import now_ms
from ..errors import NotFound
from .objects import Message

if TYPE_CHECKING:
    from .core import DiscordCore

log = logging.getLogger(__name__)
# Messages stored from a channel are watched for edits and deletions while they are among its newest 100
# and younger than this (REST has no edit or delete events for a webhook bot: only a re-read shows them)
WINDOW_DAYS = 7


def timestamp_ms(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


class Window:
    """Edits and deletions of stored messages, seen by re-reading a channel's newest page."""

    def __init__(self, core: DiscordCore) -> None:
        self.core = core
        self.bot, self.settings = core.bot, core.settings
        self.state, self.service = core.state, core.service

    def apply_window(self, guild: str, channel: str, page: list[Message], whole: bool) -> tuple[int, int]:
        """(The caller notes the re-read's time with the channel's newest id.) Compare the channel's newest
        page with the messages stored from it: one gone from Discord is
        deleted (its words leave other contexts too), one edited takes its new text, attachments and
        vectors. `whole`: the page is the channel's entire history. Returns (edited, deleted)."""
        watched = self.state.channels.recent(self.bot, channel, now_ms() // 1000)
        if not watched:
            return 0, 0
        ids = [int(m.id) for m in page]
        low, high = (0 if whole else min(ids)), max(ids)
        by_id = {m.id: m for m in page}
        done, edited, deleted, renoted = [], 0, 0, []
        for message_id, (memory_id, seen_edit) in watched.items():
            if int(message_id) > high:
                continue  # stored after this page was read
            if int(message_id) < low:
                done.append(message_id)  # older than the window: no longer watched
                continue
            message = by_id.get(message_id)
            if message is None:  # deleted on Discord: its owner deleted it, so do we
                try:
                    self.service.remove(self.bot, memory_id)
                    deleted += 1
                except NotFound:
                    pass
                done.append(message_id)
                continue
            if (message.edited_timestamp or "") == seen_edit:
                continue
            if self.apply_edit(guild, channel, memory_id, message):
                edited += 1
                renoted.append(message)
            else:
                done.append(message_id)
        self.state.channels.drop_recent(self.bot, channel, done)
        if renoted:
            self.core.note_stored(channel, [(m, watched[m.id][0]) for m in renoted])
        if edited or deleted:
            log.info("window of %s: %d edited, %d deleted", channel, edited, deleted)
        return edited, deleted

    def apply_edit(self, guild: str, channel: str, memory_id: int, message: Message) -> bool:
        """Give a stored message its edited text and attachments; False when there is nothing to keep
        (it is no longer stored). A message whose content came back empty is left as it is: without the
        Message Content intent every message of others looks empty, which is no edit."""
        text = message.words(self.core.channels.names)
        if not text and not message.attachments:
            return True
        edited = self.service.edit_message(
            self.bot, memory_id, text, self.core.content_of(guild, channel, message)
        )
        return edited is not None
