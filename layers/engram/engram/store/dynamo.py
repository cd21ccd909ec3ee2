"""How the store talks to DynamoDB: one error rule (a failure is Unavailable, a failed condition is told
apart) and the two conditional writes everything else is built from."""

from __future__ import annotations

from pynamodb.exceptions import PynamoDBException

from ..errors import Unavailable


def guard(fn):
    """Run a DynamoDB call; its failures become Unavailable (the front doors answer 503)."""
    try:
        return fn()
    except PynamoDBException as exc:
        raise Unavailable(f"DynamoDB failed: {exc.msg}") from exc


def conditional(exc: Exception) -> bool:
    """Whether a wrapped DynamoDB error is a failed condition (someone else got there first)."""
    return "ConditionalCheckFailed" in str(exc.__cause__ or exc)


def attempt(fn) -> bool:
    """A conditional write: True when it was made, False when its condition failed."""
    try:
        guard(fn)
    except Unavailable as exc:
        if conditional(exc):
            return False
        raise
    return True


def update_if_exists(item, actions) -> bool:
    """Update an item only while it still exists (an unconditional update would write a stub of a
    deleted one back); False when it is gone."""
    return attempt(lambda: item.update(actions=actions, condition=type(item).id.exists()))
