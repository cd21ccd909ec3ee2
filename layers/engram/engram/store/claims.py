"""Unique keys: which memory holds a fact's folded text in its scope, or a message's source id.

A claim (StateTable item) is valid only while that memory exists and still holds the key, so a claim left
behind by a crash is simply taken over. No multi-item transactions: dynalite has none, and on AWS they
would double the write cost."""

from __future__ import annotations

from functools import partial
from typing import Protocol

from ..clock import now_ms
from ..errors import Unavailable
from ..record import Duplicate, Record
from . import keys
from .dynamo import attempt, guard
from .models import StateItem
from .spread import claim_keys
from .state._items import batch_get as _batch_get_state
from .state._items import get as _get_state

_unique_pk = keys.unique_pk
# A claim younger than this whose record is missing belongs to a write still in flight.
CLAIM_IN_FLIGHT_MS = 30_000


class KeyClaims(Protocol):
    """Claiming and releasing a unique key (either store's claims)."""

    def claim(self, bot: str, key: str, memory_id: int, user: str | None = None) -> int | None: ...
    def release(self, bot: str, key: str, memory_id: int) -> None: ...


def hold_key(claims: KeyClaims, record: Record) -> None:
    """Claim a record's unique key for it before it is written; Duplicate names the memory holding it."""
    if record.unique_key:
        holder = claims.claim(record.bot, record.unique_key, int(record.id), record.user)
        if holder is not None:
            raise Duplicate(holder)


def let_go(claims: KeyClaims, records: list[Record]) -> None:
    """Release the keys these records claimed (their writes were refused)."""
    for record in records:
        if record.unique_key:
            claims.release(record.bot, record.unique_key, int(record.id))


class RecordReader(Protocol):
    """What settling a claim reads of the records (the record store)."""

    def get(self, bot: str, memory_id: int) -> Record | None: ...
    def batch_get(self, bot: str, ids: list[int]) -> dict[int, Record]: ...


class Claims:
    """The claims of a bot's unique keys."""

    def __init__(self, records: RecordReader) -> None:
        self._records = records
        self.claim_keys = claim_keys()  # where claims sit (spread; older ones under the plain key)

    _guard = staticmethod(guard)

    def _holder(self, bot: str, key: str, memory_id: int) -> Record | None:
        record = self._records.get(bot, memory_id)
        return record if record is not None and record.unique_key == key else None

    def find_unique(self, bot: str, key: str) -> Record | None:
        """The memory that holds a unique key, if any."""
        return self._holders(bot, [key]).get(key)

    def find_uniques(self, bot: str, unique_keys: list[str]) -> dict[str, int]:
        """The memory ids holding any of these unique keys (batch reads; stale claims left out)."""
        return {k: int(r.id) for k, r in self._holders(bot, unique_keys).items()}

    def _holders(self, bot: str, unique_keys: list[str]) -> dict[str, Record]:
        """The records holding any of these unique keys, by key (stale claims left out)."""
        wanted = list(dict.fromkeys(unique_keys))
        if not wanted:
            return {}
        lookups = [(pk, k) for k in wanted for pk in self.claim_keys.lookups(bot, k)]
        found: dict[str, int] = {}
        for start in range(0, len(lookups), 100):
            chunk = lookups[start : start + 100]
            for i in self._guard(partial(_batch_get_state, chunk)):
                # under the spread key and the plain one only while a move is cut off: the same memory
                found.setdefault(i.sk, int(i.memory_id))
        records = self._records.batch_get(bot, list(set(found.values()))) if found else {}
        return {k: records[i] for k, i in found.items() if i in records and records[i].unique_key == k}

    def _plain_holder(self, bot: str, key: str) -> int | None:
        """A claim on `key` made before claims were spread, still under the bot's plain key: its memory's id
        while that memory holds the key (or is being written with it). A stale one is dropped, so the key
        can be claimed under its spread key."""
        if not self.claim_keys.plain_left(bot):
            return None
        pk = _unique_pk(bot)
        current = self._guard(partial(_get_state, pk, key))
        if current is None:
            return None
        holder = int(current.memory_id)
        in_flight = now_ms() - int(current.value or 0) < CLAIM_IN_FLIGHT_MS
        if in_flight or self._holder(bot, key, holder) is not None:
            return holder
        attempt(lambda: StateItem(pk, key).delete(condition=StateItem.memory_id == holder))
        return None

    def claim(self, bot: str, key: str, memory_id: int, user: str | None = None) -> int | None:
        """Claim a unique key for a memory written in a user's name; returns the id of the memory already
        holding it (or being written with it right now), else None."""
        # a claim made before the spread is looked for first: it is never written under the spread key
        # while it holds (and the claims pass writes the spread copy before it deletes the plain one)
        held = self._plain_holder(bot, key)
        if held is not None:
            return held
        pk, owner = keys.claim_pk(bot, key), keys.bot_user(bot, user)
        for _ in range(3):
            if attempt(
                lambda: StateItem(pk, key, memory_id=memory_id, value=now_ms(), owner=owner).save(
                    condition=StateItem.pk.does_not_exist()
                )
            ):
                return None
            current = self._guard(partial(_get_state, pk, key))
            if current is None:
                continue  # released meanwhile: try again (a miss was a 503 before, not a retry)
            holder = int(current.memory_id)
            if self._holder(bot, key, holder) is not None:
                return holder
            if now_ms() - int(current.value or 0) < CLAIM_IN_FLIGHT_MS:
                return holder  # its record is being written right now
            # a claim whose memory is gone or says something else now: take it over
            mine = StateItem(pk, key, memory_id=memory_id, value=now_ms(), owner=owner)
            if attempt(partial(mine.save, condition=StateItem.memory_id == holder)):
                return None
        raise Unavailable(f"could not settle which memory holds {key!r}; try again")

    def release(self, bot: str, key: str, memory_id: int) -> None:
        """Drop a claim if this memory still holds it."""
        for pk in self.claim_keys.lookups(bot, key):
            attempt(partial(StateItem(pk, key).delete, condition=StateItem.memory_id == memory_id))

    def stale(self, bot: str, user: str) -> list[str]:
        """The claims made in a user's name whose memory no longer holds them: what a crash between a
        claim and its record leaves, and what a forget releases once the user's records are gone. Read
        through the byOwner index, so the work is the user's claims, never the bot's."""
        claims = self._guard(
            lambda: {
                i.sk: int(i.memory_id or 0)
                for i in StateItem.by_owner.query(keys.bot_user(bot, user))
                if keys.is_claim_pk(bot, i.pk)
            }
        )
        if not claims:
            return []
        records = self._records.batch_get(bot, list(set(claims.values())))
        # a record the user wrote after the forget (a new remember) keeps its claim, or a duplicate gets in
        return [k for k, i in claims.items() if i not in records or records[i].unique_key != k]

    def drop(self, bot: str, claim_keys: list[str]) -> None:
        """Delete these claims outright."""

        def run() -> None:
            with StateItem.batch_write() as batch:
                for key in claim_keys:
                    for pk in self.claim_keys.lookups(bot, key):
                        batch.delete(StateItem(pk, key))

        if claim_keys:
            self._guard(run)
