"""Keys for people: a key bound to one user of one bot, which opens the proxy and /mcp as that user and
nothing else (no LibreChat header needed, none believed: the key says who). Minted, listed and revoked by
the admin; stored as a digest; gone with a forget (StatePort.forget_user).

A token reads `egk_<id>_<secret>`: the id finds the key in one read, the secret (32 random bytes) is
checked against its SHA-256 digest. A digest with no slow hash is enough for a secret of 256 random bits:
there is no guessable password behind it to brute-force."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from .bookkeeping import UserKey
from .domain import check_name
from .errors import NotFound
from .ports import UserKeysPort

PREFIX = "egk_"
NAME_LIMIT = 100


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_user_key(token: str | None) -> bool:
    """Whether a presented token is shaped like a user key (only those cost a read)."""
    return bool(token) and str(token).startswith(PREFIX)


def mint(keys: UserKeysPort, bot: str, user: str, name: str | None, now_ms: int) -> tuple[UserKey, str]:
    """A new key for a user of a bot, and its token: shown this once, never kept."""
    check_name("bot", bot)
    check_name("userId", user)
    key = UserKey(
        key_id=secrets.token_hex(8),
        bot=bot,
        user=user,
        name=(name or "").strip()[:NAME_LIMIT] or None,
        created_at=now_ms,
    )
    secret = secrets.token_urlsafe(32)
    keys.add(key, digest(secret))
    return key, f"{PREFIX}{key.key_id}_{secret}"


def check(keys: UserKeysPort, token: str | None) -> UserKey | None:
    """The key a token is, or None (not a user key, no such key, revoked, or a wrong secret)."""
    if not token or not looks_like_user_key(token):
        return None
    key_id, _, secret = token[len(PREFIX) :].partition("_")
    if not key_id or not secret or len(token) > 200:
        return None
    found = keys.find(key_id)
    if found is None:
        return None
    key, kept = found
    return key if hmac.compare_digest(kept, digest(secret)) else None


def revoke(keys: UserKeysPort, bot: str, user: str, key_id: str) -> None:
    """Delete one of a user's keys; 404 for a key this user does not have."""
    if not keys.revoke(bot, user, key_id):
        raise NotFound(f"user {user!r} of bot {bot!r} has no key {key_id!r}")
