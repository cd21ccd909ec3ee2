"""How the store talks to DynamoDB: one error rule (a failure is Unavailable, a failed condition is told
apart) and the two conditional writes everything else is built from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pynamodb.exceptions import PynamoDBException
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.models import Model

from ..errors import Unavailable

T = TypeVar("T")


def guard(fn: Callable[[], T]) -> T:
    """Run a DynamoDB call; its failures become Unavailable (the front doors answer 503)."""
    try:
        return fn()
    except PynamoDBException as exc:
        raise Unavailable(f"DynamoDB failed: {exc.msg}") from exc


def conditional(exc: Exception) -> bool:
    """Whether a wrapped DynamoDB error is a failed condition (someone else got there first)."""
    return "ConditionalCheckFailed" in str(exc.__cause__ or exc)


def attempt(fn: Callable[[], Any]) -> bool:
    """A conditional write: True when it was made, False when its condition failed."""
    try:
        guard(fn)
    except Unavailable as exc:
        if conditional(exc):
            return False
        raise
    return True


def update_if_exists(item: Model, exists: Condition, actions: Sequence[Action]) -> bool:
    """Update an item only while it still exists (`exists`: its key attribute's exists()); an unconditional
    update would write a stub of a deleted one back. False when it is gone."""
    return attempt(lambda: item.update(actions=list(actions), condition=exists))
