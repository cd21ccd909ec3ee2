"""Comparing a presented key with the expected one, the same way at every door."""

from __future__ import annotations

import hmac


def key_matches(presented: str | None, expected: str | None) -> bool:
    """Constant-time comparison; no expected key means nobody gets in."""
    return bool(expected and presented and hmac.compare_digest(presented.strip().encode(), expected.encode()))
