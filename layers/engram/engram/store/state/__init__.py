"""Everything in StateTable that is not a record's bookkeeping, as small stores by concern, each handing
out typed values (engram.bookkeeping): embedder and chat settings, re-embed runs, follow-on claims of job
chains, tombstones and forgets under way, Discord consent and the roster, backfill runs and cursors,
channels, marks and limits.
`StateStore` holds one of each, and deletes everything of a user's across them (`forget_user`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ports import SpreadPass, StatePort
from .. import keys
from ..dynamo import guard
from ..models import StateItem
from .backfill import BackfillRuns, Cursors
from .channels import Channels, move_channel
from .consent import Consents, Roster
from .expiries import Expiries
from .follow_ons import FollowOns
from .forgets import ScanClient, Tombstones
from .marks import Limits, Marks
from .reembed import ReembedRuns
from .settings import ChatSettingsStore, EmbedderSettingsStore
from .user_keys import UserKeys

__all__ = [
    "BackfillRuns",
    "Channels",
    "ChatSettingsStore",
    "Consents",
    "Cursors",
    "EmbedderSettingsStore",
    "Expiries",
    "FollowOns",
    "Limits",
    "Marks",
    "ReembedRuns",
    "Roster",
    "ScanClient",
    "StateStore",
    "Tombstones",
    "UserKeys",
    "move_channel",
]


class StateStore:
    """The state stores, one of each concern; every key they use comes from `keys`."""

    def __init__(self) -> None:
        self.embedder_settings = EmbedderSettingsStore()
        self.chat_settings = ChatSettingsStore()
        self.reembeds = ReembedRuns()
        self.follow_ons = FollowOns()
        self.tombstones = Tombstones()
        self.roster = Roster()
        self.consents = Consents(self.roster)
        self.backfills = BackfillRuns()
        self.cursors = Cursors()
        self.channels = Channels()
        self.marks = Marks()
        self.limits = Limits()
        self.expiries = Expiries()
        self.user_keys = UserKeys()

    def spread_passes(self) -> list[SpreadPass]:
        """The kinds of state item once kept under one key per bot (store/spread.py)."""
        return [self.channels.spread_keys]

    def forget_user(self, bot: str, user: str) -> dict[str, int]:
        """Delete every state item about a user of a bot: Discord consent, backfill run, export limit,
        tokens and cursors; LibreChat memory settings; keys minted for the user. Returns how many of each
        kind went."""
        discord = keys.discord_pk(bot)
        singles = {
            "consent": keys.consent(bot, user),
            "backfill": keys.backfill_run(bot, user),
            "exportLimit": keys.export_limit(bot, user),
        }

        def run() -> dict[str, int]:
            out = {}
            present = {(i.pk, i.sk) for i in StateItem.batch_get(list(singles.values()))}
            groups = {
                "tokens": list(StateItem.query(discord, StateItem.sk.startswith(keys.tokens_prefix(user)))),
                "cursors": list(StateItem.query(keys.cursors_pk(bot, user))),
                "chatSettings": list(StateItem.query(keys.chat_settings_pk(bot, user))),
            }
            with StateItem.batch_write() as batch:
                for name, key in singles.items():
                    out[name] = int(key in present)
                    if key in present:
                        batch.delete(StateItem(*key))
                for name, items in groups.items():
                    out[name] = len(items)
                    for item in items:
                        batch.delete(item)
            return out

        revoked = self.user_keys.forget(bot, user)  # first: a key of theirs opens nothing from here on
        return {**guard(run), "keys": revoked}


if TYPE_CHECKING:  # mypy holds StateStore to engram.ports.StatePort (a Protocol is checked where it is used)
    _conforms: StatePort = StateStore()
