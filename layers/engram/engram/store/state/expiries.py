"""The memories that expire, per bot, by time: what the sweep reads to delete them when they come due."""

from __future__ import annotations

from ...record import Record
from .. import keys
from ..dynamo import guard
from ..models import StateItem


class Expiries:
    """The memories that expire, per bot, by time: one small item each (its time and id), so the sweep
    reads what came due and nothing else."""

    def note(self, records: list[Record]) -> None:
        """Each record with an expiry, listed under its time (a record relabelled is listed again; the
        sweep reads the record's own expiry before deleting)."""
        due = [r for r in records if r.expires_at is not None]

        def run() -> None:
            with StateItem.batch_write() as batch:
                for r in due:
                    batch.save(
                        StateItem(keys.expiries_pk(r.bot), keys.expiry_sk(int(r.expires_at or 0), int(r.id)))
                    )

        if due:
            guard(run)

    def due(self, bot: str, now: int, limit: int) -> list[tuple[int, int]]:
        """Up to `limit` (expiry, id) listed at or before `now`, oldest first."""
        through = keys.expiry_sk(now, 10**16 - 1)
        return guard(
            lambda: [
                keys.expiry_entry(i.sk)
                for i in StateItem.query(keys.expiries_pk(bot), StateItem.sk <= through, limit=limit)
            ]
        )

    def drop(self, bot: str, entries: list[tuple[int, int]]) -> None:
        """These entries are done with (their records deleted, or no longer expiring then)."""

        def run() -> None:
            with StateItem.batch_write() as batch:
                for at, memory_id in entries:
                    batch.delete(StateItem(keys.expiries_pk(bot), keys.expiry_sk(at, memory_id)))

        if entries:
            guard(run)
