"""Reading StateTable items: one strongly consistent get, one batch get (used by the record store too)."""

from __future__ import annotations

from ..models import StateItem


def batch_get(item_keys: list[tuple[str, str]], consistent: bool = False) -> list[StateItem]:
    return list(StateItem.batch_get(item_keys, consistent_read=consistent))


def get(pk: str, sk: str) -> StateItem | None:
    try:
        return StateItem.get(pk, sk, consistent_read=True)
    except StateItem.DoesNotExist:
        return None
