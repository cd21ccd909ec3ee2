"""Discord: who has opted in (consent) and the servers a catch-up tick visits (the roster)."""

from __future__ import annotations

from ...bookkeeping import Consent, RosterMark
from .. import keys
from ..dynamo import attempt, guard
from ..models import StateItem
from ._items import get


class Roster:
    """The servers some opted-in user is in, visited by catch-up in turn, and where the turn stands."""

    def add(self, bot: str, guilds: list[str]) -> None:
        """Servers some opted-in user is in (kept after they leave or are forgotten: a guild id names no
        one, and a visit to a server with no one opted in stores nothing)."""
        if not guilds:
            return

        def run() -> None:
            with StateItem.batch_write() as batch:
                for guild in sorted(set(guilds)):
                    batch.save(StateItem(keys.roster_pk(bot), guild))

        guard(run)

    def drop(self, bot: str, guild: str) -> None:
        """A server the bot is no longer in."""
        guard(StateItem(keys.roster_pk(bot), guild).delete)

    def page(self, bot: str, after: str | None, limit: int) -> list[str]:
        """Up to `limit` servers of the roster in key order, from after `after` (one query, `limit` items)."""
        condition = None if after is None else StateItem.sk > after
        return guard(
            lambda: [i.sk for i in StateItem.query(keys.roster_pk(bot), condition, limit=limit)][:limit]
        )

    def mark(self, bot: str) -> RosterMark:
        """Where the rotation stands (a fresh mark before the first tick)."""
        # stale: a tick visits a page of servers again, whose catch-up is idempotent
        item = guard(lambda: get(*keys.roster_mark(bot), consistent=False))
        return RosterMark.from_data(dict(item.data or {})) if item is not None else RosterMark()

    def set_mark(self, bot: str, mark: RosterMark) -> None:
        guard(lambda: StateItem(*keys.roster_mark(bot), data=mark.to_data()).save())

    def mark_left(self, bot: str, guild: str, due: int) -> None:
        """A server the bot left, its memories due to be deleted at `due` (ms); marked again keeps the
        earlier due time (a second sighting does not postpone the deletion)."""
        item = StateItem(keys.servers_left_pk(bot), guild, value=due)
        attempt(lambda: item.save(condition=StateItem.pk.does_not_exist()))

    def left_due(self, bot: str, now: int, limit: int) -> list[str]:
        """Up to `limit` left servers whose deletion is due (one query over the few servers left)."""
        due = StateItem.value <= now
        items = guard(lambda: list(StateItem.query(keys.servers_left_pk(bot), filter_condition=due)))
        return [i.sk for i in items][:limit]

    def clear_left(self, bot: str, guild: str) -> None:
        """Deleted, or the bot is back: no longer a left server."""
        guard(StateItem(keys.servers_left_pk(bot), guild).delete)


class Consents:
    """Discord users' opt-ins; giving one puts the user's servers on the roster."""

    def __init__(self, roster: Roster) -> None:
        self._roster = roster

    def get(self, bot: str, user: str) -> Consent | None:
        """A user's consent, or None."""
        item = guard(lambda: get(*keys.consent(bot, user)))
        if item is None:
            return None
        data = item.data or {}
        guilds = data.get("guilds")
        return Consent(int(data.get("consentedAt") or 0), tuple(guilds) if guilds is not None else None)

    def consenting(self, bot: str, users: set[str]) -> set[str]:
        """Which of `users` have opted in, read now, not cached (one batch of their keys: never every
        consent of the bot)."""
        wanted = [u for u in users if u]
        if not wanted:
            return set()
        found = guard(
            lambda: list(StateItem.batch_get([keys.consent(bot, u) for u in wanted], consistent_read=True))
        )
        return {i.sk.split("#", 1)[1] for i in found}

    def _page(self, bot: str, after: str | None = None, limit: int | None = None) -> list[StateItem]:
        """The bot's consents in key order, from after the consent key `after`, at most `limit`."""
        condition = (
            StateItem.sk.startswith(keys.CONSENT_PREFIX)
            if after is None
            else StateItem.sk.between(after + "\x00", keys.CONSENT_PREFIX + "\uffff")
        )
        return guard(
            lambda: list(StateItem.query(keys.discord_pk(bot), condition, consistent_read=True, limit=limit))[
                :limit
            ]
        )

    def anyone(self, bot: str) -> bool:
        """Whether anyone has opted in: one item read, however many have."""
        return bool(self._page(bot, limit=1))

    def guilds_page(
        self, bot: str, after: str | None, limit: int
    ) -> tuple[list[list[str] | None], str | None]:
        """A page of consents' server lists (None for one given before engram kept them), and the key to
        read on from (None: the last page)."""
        page = self._page(bot, after, limit)
        lists = [(i.data or {}).get("guilds") for i in page]
        return lists, (page[-1].sk if len(page) == limit else None)

    def give(self, bot: str, user: str, at: int, guilds: list[str] | None = None) -> None:
        """Opt a user in; `guilds`: the servers they are a member of (what catch-up reads for them)."""
        data = {"consentedAt": at, **({"guilds": sorted(guilds)} if guilds is not None else {})}
        guard(lambda: StateItem(*keys.consent(bot, user), value=1, data=data).save())
        self._roster.add(bot, guilds or [])

    def add_guilds(self, bot: str, user: str, guilds: list[str]) -> None:
        """Servers a consenting user is in that their consent does not name yet (found by their remember's
        later jobs, or they joined after opting in)."""
        item = guard(lambda: get(*keys.consent(bot, user)))
        data = dict(item.data or {}) if item is not None else None
        if data is None or "guilds" not in data or set(guilds) <= set(data["guilds"]):
            return
        data["guilds"] = sorted({*data["guilds"], *guilds})
        kept = attempt(
            lambda: StateItem(*keys.consent(bot, user), value=1, data=data).save(
                condition=StateItem.pk.exists()
            )
        )  # a forget meanwhile wins: no consent is written back
        if kept:
            self._roster.add(bot, guilds)
