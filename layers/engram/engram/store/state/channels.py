"""Discord channels as catch-up knows them: the newest message seen and when the window was read again,
the messages stored lately (whose edits and deletions are watched), the channels Discord would not let the
bot read, and whether the app can read message text at all."""

from __future__ import annotations

from functools import partial

from ...bookkeeping import ChannelSeen, ContentIntent, Unreadable
from .. import keys
from ..dynamo import guard
from ..models import StateItem
from ..spread import PlainKey
from ._items import batch_get, get


def move_channel(spread_pk: str, item: StateItem) -> None:
    """A channel's state under the plain key merged into its spread item, then deleted (nothing writes the
    plain key any more, so a move cut off anywhere is made again, the same)."""
    spread = get(spread_pk, item.sk)
    held = ChannelSeen.from_data(dict(spread.data or {})) if spread is not None else ChannelSeen()
    merged = held.merged(ChannelSeen.from_data(dict(item.data or {})))
    StateItem(spread_pk, item.sk, data=merged.to_data()).save()
    StateItem(item.pk, item.sk).delete()


class Channels:
    """What catch-up knows of each channel of a bot."""

    # where channels' catch-up state sits (spread; older items under the plain key): one per process
    spread_keys = PlainKey(keys.channels_pk, move_channel)

    def newest(self, bot: str, channel: str) -> str | None:
        """The newest message id seen in a channel (where catch-up starts)."""
        return self.seen(bot, channel).newest

    def seen(self, bot: str, channel: str) -> ChannelSeen:
        """What catch-up knows of a channel (nothing yet: every field None)."""
        # read strongly consistent, as before: `see` writes back what it reads
        return self.seen_many(bot, [channel], consistent=True).get(channel, ChannelSeen())

    def seen_many(self, bot: str, channels: list[str], consistent: bool = False) -> dict[str, ChannelSeen]:
        """`seen` of each of these channels (batched reads; unseen ones left out)."""
        wanted = [(pk, c) for c in dict.fromkeys(channels) for pk in self.spread_keys.lookups(bot, c)]
        out: dict[str, ChannelSeen] = {}
        for start in range(0, len(wanted), 100):
            for i in guard(partial(batch_get, wanted[start : start + 100], consistent)):
                # under the spread key and the plain one until the spread pass: merged
                out[i.sk] = out.get(i.sk, ChannelSeen()).merged(ChannelSeen.from_data(dict(i.data or {})))
        return out

    def see(self, bot: str, channel: str, learnt: ChannelSeen) -> None:
        """Merge what was just learnt of a channel (newest never moves back, storedAt never either)."""
        # One small item per channel, written by that channel's catch-up job; a lost race costs one re-read
        current = self.seen(bot, channel)
        merged = current.merged(learnt)
        if merged != current:
            guard(lambda: StateItem(*keys.channel_seen(bot, channel), data=merged.to_data()).save())

    def remember_newest(self, bot: str, channel: str, message_id: str) -> None:
        """Move a channel's newest seen id forward (never back)."""
        self.see(bot, channel, ChannelSeen(newest=message_id))

    def note_recent(
        self, bot: str, channel: str, entries: list[tuple[str, int, str, int]], stored_at: int
    ) -> None:
        """Messages just stored (or edited) from a channel: (message id, record id, edited time, expires
        s)."""
        if not entries:
            return
        pk = keys.recent_pk(bot, channel)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for message, record, edited, expires in entries:
                    batch.save(StateItem(pk, message, memory_id=record, tag=edited, expires_at=expires))

        guard(run)
        self.see(bot, channel, ChannelSeen(stored_at=stored_at))

    def recent(self, bot: str, channel: str, now_s: int) -> dict[str, tuple[int, str]]:
        """{message id: (record id, edited time)} of a channel's messages stored lately and not expired
        (DynamoDB's TTL deletes late, dynalite never)."""
        return guard(
            lambda: {
                i.sk: (int(i.memory_id or 0), i.tag or "")
                for i in StateItem.query(keys.recent_pk(bot, channel))
                if int(i.expires_at or 0) > now_s
            }
        )

    def drop_recent(self, bot: str, channel: str, messages: list[str]) -> None:
        """Stop watching these messages of a channel (deleted, or out of the window)."""
        if not messages:
            return
        pk = keys.recent_pk(bot, channel)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for message in messages:
                    batch.delete(StateItem(pk, message))

        guard(run)

    def note_content_intent(self, bot: str, on: bool, how: str, at: int) -> None:
        """Remember whether the app can read message text, and how that was learnt (flags, or a page of
        other people's messages that all came back empty)."""
        guard(lambda: StateItem(*keys.content_intent(bot), value=int(on), data={"how": how, "at": at}).save())

    def content_intent(self, bot: str) -> ContentIntent | None:
        """As last noted, or None (never checked)."""
        # stale by a second at most: the note is re-made by the next check anyway
        item = guard(lambda: get(*keys.content_intent(bot), consistent=False))
        if item is None:
            return None
        data = item.data or {}
        return ContentIntent(bool(item.value), str(data.get("how") or ""), int(data.get("at") or 0))

    def mark_unreadable(self, bot: str, channel: str, reason: str, retry_at_s: int, strikes: int = 1) -> None:
        """A channel Discord would not let the bot read, when to try it again, and how many times in a row
        it refused."""
        item = StateItem(keys.unreadable_pk(bot), channel, value=retry_at_s, tag=reason, tally=strikes)
        guard(item.save)

    def unreadable(self, bot: str, channels: list[str] | None = None) -> dict[str, Unreadable]:
        """The channels marked unreadable: of these `channels` (one batch of their keys: a server's visit
        reads its own, never the bot's every mark), or all (one query)."""
        if channels is not None:
            wanted = [(keys.unreadable_pk(bot), c) for c in dict.fromkeys(channels)]
            found = guard(lambda: batch_get(wanted)) if wanted else []
        else:
            found = guard(lambda: list(StateItem.query(keys.unreadable_pk(bot))))
        return {i.sk: Unreadable(i.tag or "", int(i.value or 0), int(i.tally or 1)) for i in found}

    def active_threads(self, bot: str, guilds: list[str]) -> dict[str, set[str]]:
        """The threads each server's last visit found active (none before its first): one batched,
        eventually consistent read for a job's servers (half a read unit each)."""
        wanted = [keys.active_threads(bot, g) for g in dict.fromkeys(guilds)]
        found = guard(lambda: batch_get(wanted)) if wanted else []
        known = {i.sk: set(i.members or ()) for i in found}
        return {g: known.get(g, set()) for g in guilds}

    def set_active_threads(self, bot: str, guild: str, threads: set[str]) -> None:
        item = StateItem(*keys.active_threads(bot, guild), members=set(threads) or None)
        guard(item.save)

    def readable_again(self, bot: str, channel: str) -> None:
        guard(StateItem(keys.unreadable_pk(bot), channel).delete)
