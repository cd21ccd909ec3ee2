"""Discord's request signatures: Ed25519 over timestamp + raw body with the application's public key."""

from __future__ import annotations

import time

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey


def verify_request(
    public_key_hex: str | None,
    signature_hex: str | None,
    timestamp: str | None,
    body: bytes,
    max_age_s: int = 300,
    now: float | None = None,
    max_future_s: int = 30,
) -> bool:
    """True only for a valid signature on a fresh timestamp (Discord sends forged ones on purpose): at
    most max_age_s old and at most max_future_s ahead of our clock."""
    if not public_key_hex or not signature_hex or not timestamp:
        return False
    try:
        sent = int(timestamp)
        age = (now if now is not None else time.time()) - sent
        if age > max_age_s or -age > max_future_s:
            return False  # a replayed (or pre-dated) request
        VerifyKey(bytes.fromhex(public_key_hex)).verify(
            timestamp.encode() + body, bytes.fromhex(signature_hex)
        )
        return True
    except (BadSignatureError, ValueError, TypeError):
        return False
