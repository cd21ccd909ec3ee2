"""What LibreChat's MongoDB says about the users, chats and messages engram's facts came from, read-only:
the source engram's copies answer to. A fact keeps the chat and the user message it was extracted from
(`FactSource`); LibreChat deleting the account, the chat or the message, or editing the message into a new
branch, takes the fact with it (engram.proxy.reconcile).

LibreChat's schema (@librechat/data-schemas 0.0.71, `userSchema`, `convoSchema`, `messageSchema`): `users`
by `_id` (an ObjectId; LibreChat's user id is its hex string), `conversations` by `conversationId` and
`user`, `messages` by `messageId`, `conversationId`, `user`, with `parentMessageId`, `isCreatedByUser`,
`text` (the user's words as typed: no file text, no quotes) and `createdAt`. Deleting an account removes
the user (`deleteUserById`), deleting a chat its conversation and messages (`deleteConvos`); editing a user
message and sending it makes a sibling: a newer user message under the same parent."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PREFIX = "librechat:"
NO_PARENT = "00000000-0000-0000-0000-000000000000"  # LibreChat's Constants.NO_PARENT: a chat's first message
# how many of a parent's newest user messages a turn is matched among (a turn edited more often is rare)
SIBLINGS_READ = 10


class SourceUnavailable(Exception):
    """LibreChat's MongoDB could not be read (down, slow, refused)."""


@dataclass(frozen=True)
class FactSource:
    """Where a fact was said: a LibreChat chat, and the user message in it (None: not found when it was
    stored). Kept as the fact's source id, `librechat:<conversation>:<message>`."""

    conversation: str
    message: str | None = None

    def __str__(self) -> str:
        return f"{PREFIX}{self.conversation}:{self.message or ''}"

    @classmethod
    def parse(cls, source_id: str | None) -> FactSource | None:
        if not source_id or not source_id.startswith(PREFIX):
            return None
        conversation, _, message = source_id[len(PREFIX) :].rpartition(":")
        return cls(conversation, message or None) if conversation else None


@dataclass(frozen=True)
class StoredMessage:
    """A user message as LibreChat keeps it: its chat, the message it answers, and when it was written."""

    conversation: str
    parent: str | None
    created: Any


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _user_ids(users: Iterable[str]) -> list[Any]:
    """LibreChat's user ids as `users._id` holds them: ObjectIds (and the strings, for a stand-in)."""
    from bson import ObjectId

    ids: list[Any] = []
    for user in users:
        ids.append(user)
        if ObjectId.is_valid(user):
            ids.append(ObjectId(user))
    return ids


def _newest_by_parent(
    docs: list[dict[str, Any]], parents: set[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """Of these messages, the id of the newest under each (conversation, parent) asked about."""
    newest: dict[tuple[str, str], tuple[Any, str]] = {}
    for doc in docs:
        key = (doc["conversationId"], doc.get("parentMessageId") or "")
        seen, created = newest.get(key), doc.get("createdAt")
        if key in parents and (seen is None or (created is not None and created > seen[0])):
            newest[key] = (created, doc["messageId"])
    return {key: message for key, (_, message) in newest.items()}


class LibreChatSource:
    """Reads of LibreChat's MongoDB, batched: one query per question for a whole page of facts."""

    def __init__(self, database: Any) -> None:
        self.db = database

    def _read(self, read: Any) -> Any:
        try:
            return read()
        except Exception as exc:  # pymongo's errors: a source we cannot read is never a deletion
            raise SourceUnavailable(f"{type(exc).__name__}: {exc}"[:300]) from exc

    def existing_users(self, users: set[str]) -> set[str]:
        """Which of these LibreChat user ids still have an account."""
        if not users:
            return set()
        found = self._read(
            lambda: list(self.db["users"].find({"_id": {"$in": _user_ids(users)}}, {"_id": 1}))
        )
        return {str(doc["_id"]) for doc in found} & users

    def existing_chats(self, chats: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these (user, conversation) chats LibreChat still has."""
        if not chats:
            return set()
        query = {"conversationId": {"$in": sorted({c for _, c in chats})}}
        found = self._read(
            lambda: list(self.db["conversations"].find(query, {"conversationId": 1, "user": 1}))
        )
        return {(str(doc.get("user")), doc["conversationId"]) for doc in found} & chats

    def user_messages(self, ids: set[str]) -> dict[str, StoredMessage]:
        """These user messages as LibreChat still has them (a message not returned is gone)."""
        if not ids:
            return {}
        query = {"messageId": {"$in": sorted(ids)}}
        fields = {"messageId": 1, "conversationId": 1, "parentMessageId": 1, "createdAt": 1}
        found = self._read(lambda: list(self.db["messages"].find(query, fields)))
        return {
            doc["messageId"]: StoredMessage(
                doc["conversationId"], doc.get("parentMessageId"), doc.get("createdAt")
            )
            for doc in found
        }

    def newest_answers_to(self, parents: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """For each (conversation, parent message), the newest user message written under it: an edit sent
        again is a newer sibling, and the branch it makes is the chat as it stands."""
        if not parents:
            return {}
        query = {
            "conversationId": {"$in": sorted({c for c, _ in parents})},
            "parentMessageId": {"$in": sorted({p for _, p in parents})},
            "isCreatedByUser": True,
        }
        fields = {"messageId": 1, "conversationId": 1, "parentMessageId": 1, "createdAt": 1}
        found = self._read(lambda: list(self.db["messages"].find(query, fields)))
        return _newest_by_parent(found, parents)

    def turn_message(self, user: str, conversation: str, parent: str | None, said: str) -> str | None:
        """The id LibreChat stored the turn's user message under: the newest user message of the chat
        (under `parent`, when the endpoint sends it) whose words are the turn's (None: not written, or
        words that are not a message of the user's)."""
        query: dict[str, Any] = {"conversationId": conversation, "user": user, "isCreatedByUser": True}
        if parent:
            query["parentMessageId"] = parent
        fields = {"messageId": 1, "text": 1}
        found = self._read(
            lambda: list(self.db["messages"].find(query, fields).sort("createdAt", -1).limit(SIBLINGS_READ))
        )
        words = _words(said)
        return next((doc["messageId"] for doc in found if _words(str(doc.get("text") or "")) == words), None)
