"""What ties records to the words of others: each thread's newest stored message (its tail, the context
the next message quotes), and the carriers index (which records quote whose words), so a forget, a delete
or a change reaches every record that carries someone's words."""

from __future__ import annotations

from functools import partial
from typing import Any

from ..bookkeeping import ThreadTail
from ..record import Record, carrier_notes
from . import keys
from .dynamo import attempt, guard
from .models import StateItem
from .spread import tail_keys
from .state._items import batch_get as _batch_get_state


def _tail(data: dict[str, Any]) -> ThreadTail:
    memory_id = data.get("id")
    return ThreadTail(
        text=data.get("text"),
        at=int(data.get("at") or 0),
        user=data.get("user"),
        id=int(memory_id) if memory_id is not None else None,
    )


class ThreadTails:
    """Each thread's newest stored message: whose words, which record, when."""

    def __init__(self) -> None:
        self.tail_keys = tail_keys()  # where thread tails sit (spread; older ones under the plain key)

    _guard = staticmethod(guard)

    def of(self, bot: str, threads: list[str]) -> dict[str, ThreadTail]:
        """The newest stored message of each thread."""
        newest: dict[str, StateItem] = {}
        for item in self._tail_items(bot, threads):
            # under the spread key and the plain one until the spread pass: the newer one is the tail
            if item.sk not in newest or int(item.value or 0) > int(newest[item.sk].value or 0):
                newest[item.sk] = item
        return {t: _tail(item.data or {}) for t, item in newest.items()}

    def _tail_items(self, bot: str, threads: list[str]) -> list[StateItem]:
        """Every tail item of these threads, under whichever of their keys."""
        wanted = [(pk, t) for t in dict.fromkeys(threads) for pk in self.tail_keys.lookups(bot, t)]
        out: list[StateItem] = []
        for start in range(0, len(wanted), 100):
            out += self._guard(partial(_batch_get_state, wanted[start : start + 100]))
        return out

    def advance(
        self, bot: str, thread: str, at: int, text: str, user: str | None = None, memory_id: int | None = None
    ) -> None:
        """Remember a thread's newest message (whose words, and which record), unless a newer one is."""
        item = StateItem(
            keys.thread_tail_pk(bot, thread),
            thread,
            value=at,
            data={"text": text, "at": at, "user": user, "id": memory_id},
        )
        attempt(lambda: item.save(condition=StateItem.value.does_not_exist() | (StateItem.value <= at)))

    def drop(
        self, bot: str, threads: list[str], user: str | None = None, memory_id: int | None = None
    ) -> int:
        """Forget the remembered newest text of these threads where that user wrote it (or where it is
        that record's text); returns how many were dropped."""
        # each item on its own (a plain one not moved yet may hold their words under a newer spread one)
        mine = [
            (i.pk, i.sk)
            for i in self._tail_items(bot, threads)
            if (user is not None and (i.data or {}).get("user") == user)
            or (memory_id is not None and (i.data or {}).get("id") == memory_id)
        ]

        def run() -> None:
            with StateItem.batch_write() as batch:
                for pk, thread in mine:
                    batch.delete(StateItem(pk, thread))

        if mine:
            self._guard(run)
        return len({thread for _, thread in mine})


class Carriers:
    """Which records quote whose words (a context, a reply, an answer drawn on them)."""

    _guard = staticmethod(guard)

    def note(self, records: list[Record]) -> None:
        """For every record whose context quotes someone else, an item under that author: so a forget, a
        delete or a change can find the records that carry those words."""
        notes = carrier_notes(records)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for author, r in notes:
                    batch.save(
                        StateItem(
                            keys.carriers_pk(r.bot, author),
                            keys.carrier_sk(int(r.id)),
                            memory_id=r.context_source if author == r.context_author else None,
                        )
                    )

        if notes:
            self._guard(run)

    def of(self, bot: str, author: str | None, source: int | None = None) -> list[int]:
        """Ids of records whose context quotes this author (only from this source record, if given)."""
        condition = StateItem.memory_id == source if source is not None else None
        return self._guard(
            lambda: [
                int(i.sk) for i in StateItem.query(keys.carriers_pk(bot, author), filter_condition=condition)
            ]
        )

    def drop(self, bot: str, author: str | None, carrier_ids: list[int]) -> None:
        """The carriers no longer quote this author."""

        def run() -> None:
            with StateItem.batch_write() as batch:
                for carrier in carrier_ids:
                    batch.delete(StateItem(keys.carriers_pk(bot, author), keys.carrier_sk(carrier)))

        if carrier_ids:
            self._guard(run)
