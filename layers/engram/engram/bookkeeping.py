"""What engram keeps beside the memories, as typed values: a user's consent, a backfill run and its
cursors, what catch-up knows of a channel, where the catch-up rotation stands, a re-embed pass's chains,
a forget under way. The stores (engram.ports) hand these out; no one indexes a dict by a camelCase key."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, Field, JsonValue

# A JSON object as it is stored (a chat message's content, with its attachments and reply)
JsonObject = dict[str, JsonValue]


class EmbeddingSettings(BaseModel):
    """Where vectors come from (stored once a PATCH changed them; the environment's defaults before)."""

    embedder: Literal["local", "remote", "off"] = "local"
    embeddingProvider: str | None = None
    embeddingModel: str | None = None
    messageVectors: int = Field(8000, ge=0, le=100_000)


@dataclass(frozen=True)
class ThreadTail:
    """A thread's newest stored message: its text, when (ms), whose words, and which record."""

    text: str | None
    at: int
    user: str | None = None
    id: int | None = None


@dataclass(frozen=True)
class ExtractionHealth:
    """How post-turn extraction has been going for a bot: when it last stored or found nothing (ok) and
    when it last failed (ms), why (the model's or the network's words, never a memory's), and how many
    extractions in a row have failed."""

    ok_at: int = 0
    failed_at: int = 0
    why: str = ""
    failures: int = 0

    @property
    def failing(self) -> bool:
        return self.failures > 0 and self.failed_at >= self.ok_at


@dataclass(frozen=True)
class Consent:
    """A Discord user's opt-in: when, and the servers they are in (None for a consent given before engram
    kept them)."""

    consented_at: int
    guilds: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BackfillRun:
    """A user's latest backfill run. `left` counts channels still to read and planning jobs still to run
    (servers to look through); `channels` the channels found so far, `done` those finished; `count` the
    messages stored."""

    run: str
    left: int
    count: int
    channels: int
    done: int
    issued_at: int = 0


@dataclass(frozen=True)
class RunCount:
    """A backfill run right after a count was made in it: what is left, and how many messages so far."""

    left: int
    count: int
    issued_at: int = 0


@dataclass(frozen=True)
class Cursor:
    """Where a user's backfill of one channel stands: the oldest message read (`before`), whether the
    channel is done, the run and the chain's next step, what its last link stored, and whether that next
    link is queued (so a duplicate queues no second chain)."""

    before: str | None = None
    done: bool = False
    run: str | None = None
    step: int | None = None
    stored: int | None = None
    queued: bool | None = None

    def moved(self, **changes: Any) -> Cursor:
        return replace(self, **changes)

    # Stored as one JSON map whose keys and their order are the store's condition (`mark_queued` writes
    # only while the item still holds exactly what was saved): the order is fixed here, once.
    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"before": self.before, "done": self.done}
        for name in ("run", "step", "stored", "queued"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Cursor:
        return cls(
            before=data.get("before"),
            done=bool(data.get("done")),
            run=data.get("run"),
            step=int(data["step"]) if data.get("step") is not None else None,
            stored=int(data["stored"]) if data.get("stored") is not None else None,
            queued=bool(data["queued"]) if "queued" in data else None,
        )


@dataclass(frozen=True)
class ChannelSeen:
    """What catch-up knows of a channel, each only once known: the newest message id seen, when the newest
    message stored from it was stored (ms), and when its window was last read again (s)."""

    newest: str | None = None
    stored_at: int | None = None
    window_at: int | None = None

    def to_data(self) -> dict[str, Any]:
        names = (("newest", self.newest), ("storedAt", self.stored_at), ("windowAt", self.window_at))
        return {name: value for name, value in names if value is not None}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ChannelSeen:
        stored_at, window_at = data.get("storedAt"), data.get("windowAt")
        return cls(
            newest=data.get("newest"),
            stored_at=int(stored_at) if stored_at is not None else None,
            window_at=int(window_at) if window_at is not None else None,
        )

    def merged(self, other: ChannelSeen) -> ChannelSeen:
        """Both as one: each the later of the two (none ever moves back)."""
        return ChannelSeen(
            newest=_later(self.newest, other.newest),
            stored_at=_later(self.stored_at, other.stored_at),
            window_at=_later(self.window_at, other.window_at),
        )


Stamp = TypeVar("Stamp", int, str)  # a time, or a Discord id (a snowflake: later is larger)


def _later(a: Stamp | None, b: Stamp | None) -> Stamp | None:
    if a is None or b is None:
        return b if a is None else a
    return a if int(a) >= int(b) else b


@dataclass(frozen=True)
class RosterMark:
    """Where the catch-up rotation stands: the last server visited, the tick's number, whether every
    consent given before the roster existed is in it, and how far that was read."""

    after: str | None = None
    turn: int = 0
    built: bool = False
    consents_after: str | None = None
    every_server: bool = False  # a consent naming no servers put every server of the bot in, once
    # when the rotation last started again from the roster's first server (ms; 0: not yet known): how long
    # a quiet server has waited at most for its visit is the time since (the catch-up lag)
    round_started: int = 0

    def moved(self, **changes: Any) -> RosterMark:
        return replace(self, **changes)

    def visited(self, now: int, wrapped: bool) -> tuple[RosterMark, float | None]:
        """A tick's visit: the rotation started again when it reached the roster's first server
        (`wrapped`), and the lag before it — seconds since the rotation last started again, the most a
        quiet server has waited for its visit (None: not known yet)."""
        lag_s = (now - self.round_started) / 1000 if self.round_started else None
        started = now if wrapped or not self.round_started else self.round_started
        return replace(self, round_started=started), lag_s

    def to_data(self) -> dict[str, Any]:
        return {
            "after": self.after,
            "turn": self.turn,
            "built": self.built,
            "consentsAfter": self.consents_after,
            "everyServer": self.every_server,
            "roundStarted": self.round_started,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RosterMark:
        return cls(
            after=data.get("after"),
            turn=int(data.get("turn") or 0),
            built=bool(data.get("built")),
            consents_after=data.get("consentsAfter"),
            every_server=bool(data.get("everyServer")),
            round_started=int(data.get("roundStarted") or 0),
        )


@dataclass(frozen=True)
class ContentIntent:
    """Whether the app can read message text, how that was learnt (its flags, or a page of other people's
    messages that all came back empty), and when (ms)."""

    on: bool
    how: str
    at: int


@dataclass(frozen=True)
class Unreadable:
    """A channel Discord would not let the bot read: why, and when to try again (s)."""

    reason: str
    retry_at: int
    strikes: int = 1  # refusals in a row: each doubles the wait before the next try


class ChainEnd(NamedTuple):
    """A re-embed pass told that one of its chains is through."""

    left: int  # chains still running
    followed: bool  # what follows the pass's last chain was done


class ForgetUnderWay(NamedTuple):
    """A forget that has not finished: when it was made and when it last made progress (ms)."""

    at: int
    touched: int


class Tombstone(NamedTuple):
    """A forget recorded (its tombstone): whose, and when (ms)."""

    bot: str
    user: str
    at: int


@dataclass(frozen=True)
class UserKey:
    """A key bound to one user of one bot (engram.access_keys): what it is called and when it was made.
    The secret itself is never kept, only its digest."""

    key_id: str
    bot: str
    user: str
    name: str | None
    created_at: int  # ms
