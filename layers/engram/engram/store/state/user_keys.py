"""Keys bound to one user of one bot, kept as two items each: one found by the key's id (what a request's
token is checked against: the digest of its secret), one under the user (what listing and forget read)."""

from __future__ import annotations

from ...bookkeeping import UserKey
from .. import keys
from ..dynamo import guard
from ..models import StateItem
from ._items import get


def _user_key(item: StateItem) -> UserKey:
    data = item.data or {}
    return UserKey(
        key_id=str(data["keyId"]),
        bot=str(data["bot"]),
        user=str(data["user"]),
        name=data.get("name"),
        created_at=int(item.value or 0),
    )


def _items(key: UserKey, digest: str) -> tuple[StateItem, StateItem]:
    data = {"keyId": key.key_id, "bot": key.bot, "user": key.user, "name": key.name}
    listed = StateItem(keys.user_keys_pk(key.bot, key.user), key.key_id, value=key.created_at, data=data)
    found = StateItem(*keys.user_key(key.key_id), value=key.created_at, tag=digest, data=data)
    return listed, found


class UserKeys:
    """Per-user keys: add, find by id (with the digest to check), list, revoke, and every one of a user's
    gone with the user."""

    def add(self, key: UserKey, digest: str) -> None:
        """Keep a new key: listed under its user first, so a key that can open anything is always one
        forget_user finds."""
        listed, found = _items(key, digest)
        guard(listed.save)
        guard(found.save)

    def find(self, key_id: str) -> tuple[UserKey, str] | None:
        """The key with this id and the digest of its secret (strongly consistent: a revoked key stops
        at once)."""
        item = guard(lambda: get(*keys.user_key(key_id)))
        if item is None or not item.tag:
            return None
        return _user_key(item), item.tag

    def of_user(self, bot: str, user: str) -> list[UserKey]:
        """A user's keys, oldest first."""
        items = guard(lambda: list(StateItem.query(keys.user_keys_pk(bot, user))))
        return sorted((_user_key(i) for i in items), key=lambda k: (k.created_at, k.key_id))

    def revoke(self, bot: str, user: str, key_id: str) -> bool:
        """Delete one of a user's keys (False: no such key of this user). The key stops opening anything
        first, then leaves the listing."""
        listed = guard(lambda: get(keys.user_keys_pk(bot, user), key_id))
        if listed is None:
            return False
        guard(StateItem(*keys.user_key(key_id)).delete)
        guard(listed.delete)
        return True

    def forget(self, bot: str, user: str) -> int:
        """Every key of a user gone; how many."""
        listed = self.of_user(bot, user)

        def run() -> None:
            with StateItem.batch_write() as batch:
                for key in listed:
                    batch.delete(StateItem(*keys.user_key(key.key_id)))
                    batch.delete(StateItem(keys.user_keys_pk(bot, user), key.key_id))

        if listed:
            guard(run)
        return len(listed)
