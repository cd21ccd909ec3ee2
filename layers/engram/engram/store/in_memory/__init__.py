"""The state stores in memory: the same behaviour as the DynamoDB ones (engram.store.state), conditions
included, held to it by one contract suite (tests/contracts/state.py) run against both. Unit tests run the
memory rules against these; nothing here touches a network or a file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ports import SpreadPass, StatePort
from ._core import (
    MemoryChatSettings,
    MemoryEmbedderSettings,
    MemoryExpiries,
    MemoryFollowOns,
    MemoryLimits,
    MemoryMarks,
    MemoryReembedRuns,
    MemoryTombstones,
    MemoryUserKeys,
)
from ._discord import MemoryBackfillRuns, MemoryChannels, MemoryConsents, MemoryCursors, MemoryRoster
from ._records import InMemoryRecords

__all__ = ["InMemoryRecords", "InMemoryState"]


class InMemoryState:
    """Every state store in memory (engram.ports.StatePort)."""

    def __init__(self) -> None:
        self.embedder_settings = MemoryEmbedderSettings()
        self.chat_settings = MemoryChatSettings()
        self.reembeds = MemoryReembedRuns()
        self.follow_ons = MemoryFollowOns()
        self.tombstones = MemoryTombstones()
        self.roster = MemoryRoster()
        self.consents = MemoryConsents(self.roster)
        self.backfills = MemoryBackfillRuns()
        self.cursors = MemoryCursors()
        self.channels = MemoryChannels()
        self.marks = MemoryMarks()
        self.limits = MemoryLimits()
        self.expiries = MemoryExpiries()
        self.user_keys = MemoryUserKeys()

    def forget_user(self, bot: str, user: str) -> dict[str, int]:
        """Everything of the user's that the DynamoDB store's forget deletes, counted the same way."""
        tokens = [k for k in self.backfills.tokens if k[:2] == (bot, user)]
        cursors = [k for k in self.cursors.held if k[:2] == (bot, user)]
        settings = self.chat_settings.held.pop((bot, user), {})
        out = {
            "consent": int(self.consents.held.pop((bot, user), None) is not None),
            "backfill": int(self.backfills.runs.pop((bot, user), None) is not None),
            "exportLimit": int(self.limits.exports.pop((bot, user), None) is not None),
            "tokens": len(tokens),
            "cursors": len(cursors),
            "chatSettings": len(settings),
            "keys": self.user_keys.forget(bot, user),
        }
        for token in tokens:
            del self.backfills.tokens[token]
        for cursor in cursors:
            del self.cursors.held[cursor]
        return out

    def spread_passes(self) -> list[SpreadPass]:
        """Nothing here was ever kept under one key per bot."""
        return []


# mypy holds InMemoryState to engram.ports.StatePort here (a Protocol is checked where it is used)
if TYPE_CHECKING:
    _conforms: StatePort = InMemoryState()
