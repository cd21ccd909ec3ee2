"""Reading StateTable items: one get, one batch get (used by the record store too).

A get is strongly consistent unless its caller names why a read up to a second old is harmless
(`consistent=False`, half the read units): a progress figure, a note shown to operators, a mark whose stale
value only repeats idempotent work. Consent, tombstones, claims, cursors, settings and what a cache is
checked against stay strongly consistent: a stale one could store what was withdrawn or show what was
deleted."""

from __future__ import annotations

from ..models import StateItem


def batch_get(item_keys: list[tuple[str, str]], consistent: bool = False) -> list[StateItem]:
    return list(StateItem.batch_get(item_keys, consistent_read=consistent))


def get(pk: str, sk: str, consistent: bool = True) -> StateItem | None:
    try:
        return StateItem.get(pk, sk, consistent_read=consistent)
    except StateItem.DoesNotExist:
        return None
