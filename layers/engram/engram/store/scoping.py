"""Which of a bot's records carry their byScope key: the marks that say a kind is stamped (its scoped
listings read the index) and that some record names a server and a project, and the claims on the passes
that stamp older records and spread older state items (queued by the sweep)."""

from __future__ import annotations

from typing import Protocol

from ..clock import now_ms
from ..record import KINDS, Record
from . import keys
from .dynamo import attempt, guard
from .models import StateItem


class BotLister(Protocol):
    def bots(self) -> list[str]: ...


class ScopeMarks:
    """The scope marks of every bot, each read once per process (they never go back)."""

    def __init__(self, records: BotLister) -> None:
        self._records = records
        self._known: set[tuple[str, str]] = set()  # scopes_ready / mixed_scopes keys known set (they stay)

    _guard = staticmethod(guard)

    def forget_known(self) -> None:
        """Know nothing of any bot's marks, as a new process does (each is read again when needed)."""
        self._known.clear()

    def mark_ready(self, bot: str, kind: str) -> None:
        """Every record of the bot's kind carries its byScope key (see keys.scopes_ready)."""
        self._mark(keys.scopes_ready(bot, kind))

    def _mark(self, key: tuple[str, str]) -> None:
        if key not in self._known:
            self._guard(lambda: StateItem(*key, value=now_ms()).save())
            self._known.add(key)

    def note_mixed(self, records: list[Record]) -> None:
        """A record naming a server and a project is listed under its server: say so before it is written
        (a project's listing then reads the kind's index as well, and misses nothing)."""
        for r in records:
            if r.server and r.project:
                self._mark(keys.mixed_scopes(r.bot))

    def state(self, bot: str, kind: str) -> tuple[bool, bool]:
        """(every record of the kind carries its byScope key, some record names a server and a project)."""
        wanted = [keys.scopes_ready(bot, kind), keys.mixed_scopes(bot)]
        unknown = [k for k in wanted if k not in self._known]
        if unknown:
            found = self._guard(lambda: {(i.pk, i.sk) for i in StateItem.batch_get(unknown)})
            self._known.update(found)
        return wanted[0] in self._known, wanted[1] in self._known

    def unscoped(self) -> dict[str, list[str]]:
        """The bots (and their kinds) whose records do not all carry their byScope key yet: older bots,
        until their stamp pass ends (one batch read; nothing once this process has seen them ready)."""
        bots = self._records.bots()
        wanted = [keys.scopes_ready(b, k) for b in bots for k in KINDS]
        unknown = [k for k in wanted if k not in self._known]
        if unknown:
            self._known.update(self._guard(lambda: {(i.pk, i.sk) for i in StateItem.batch_get(unknown)}))
        out: dict[str, list[str]] = {}
        for bot in bots:
            for kind in KINDS:
                if keys.scopes_ready(bot, kind) not in self._known:
                    out.setdefault(bot, []).append(kind)
        return out

    def claim_stamp(self, bot: str, again_after_ms: int) -> bool:
        """Whether this caller queues the bot's stamp pass: once, and again only after `again_after_ms` (a
        pass whose job dead-lettered is started again, from the newest record: stamping is idempotent)."""
        return self._claim_pass(keys.stamp_queued(bot), again_after_ms)

    def claim_spread_pass(self, bot: str, again_after_ms: int) -> bool:
        """Whether this caller queues the bot's spread pass (store/spread.py): as claim_stamp."""
        return self._claim_pass(keys.spread_queued(bot), again_after_ms)

    def _claim_pass(self, key: tuple[str, str], again_after_ms: int) -> bool:
        now = now_ms()
        item = StateItem(*key, value=now)
        return attempt(
            lambda: item.save(
                condition=StateItem.value.does_not_exist() | (StateItem.value < now - again_after_ms)
            )
        )
