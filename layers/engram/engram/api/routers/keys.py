"""Keys for people: minted by the admin for one user of one bot, listed and revoked (engram.access_keys).
A user key opens the proxy and /mcp as that user; not the Memory API."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from ... import access_keys
from ...bookkeeping import UserKey
from ...clock import now_ms
from ...shapes import iso
from ...text import NAME_PATTERN
from ..deps import ERRORS, SMALL_BODY, Admin, Bot
from ..schemas import ErrorResponse, NewUserKey, UserKeyCreated, UserKeyList

router = APIRouter(tags=["keys"], responses=ERRORS)
UserId = Annotated[str, Path(description="The user the key speaks for.", pattern=NAME_PATTERN)]
KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="The key's id (not its secret).")]


def _out(key: UserKey) -> dict[str, Any]:
    return {
        "id": key.key_id,
        "bot": key.bot,
        "userId": key.user,
        "name": key.name,
        "createdAt": iso(key.created_at),
    }


@router.post(
    "/v1/bots/{bot}/users/{userId}/keys",
    status_code=201,
    response_model=UserKeyCreated,
    max_body_size=SMALL_BODY,
)
def mint_user_key(bot: Bot, userId: UserId, eng: Admin, body: NewUserKey | None = None) -> dict[str, Any]:
    """Mint a key bound to this user of this bot: the proxy and /mcp take it as that user (no LibreChat
    header needed; none believed). The answer is the only time the key is shown."""
    key, token = access_keys.mint(eng.state.user_keys, bot, userId, body.name if body else None, now_ms())
    return {**_out(key), "key": token}


@router.get("/v1/bots/{bot}/users/{userId}/keys", response_model=UserKeyList)
def list_user_keys(bot: Bot, userId: UserId, eng: Admin) -> dict[str, Any]:
    """A user's keys, oldest first (ids and names; never the secrets)."""
    return {"keys": [_out(k) for k in eng.state.user_keys.of_user(bot, userId)]}


@router.delete(
    "/v1/bots/{bot}/users/{userId}/keys/{keyId}",
    status_code=204,
    responses={404: {"model": ErrorResponse, "description": "This user has no such key"}},
)
def revoke_user_key(bot: Bot, userId: UserId, keyId: KeyId, eng: Admin) -> None:
    """Revoke a key: it opens nothing from this answer on."""
    access_keys.revoke(eng.state.user_keys, bot, userId, keyId)
