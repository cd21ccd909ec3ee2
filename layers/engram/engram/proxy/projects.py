"""What LibreChat's MongoDB says about a chat, read-only, cached, retried once for a brand-new chat: its
project (conversations.chatProjectId, a chatprojects document its user owns; projectless when Mongo is down),
whether it is a temporary chat (conversations.isTemporary / expiredAt), and whether its user turned
LibreChat's memories off (users.personalization.memories === false).

A project is known by its id, not its name: LibreChat's chat projects are private to the user who made them
(chatprojects.user, LibreChat packages/data-schemas/src/schema/chatProject.ts), two users' projects may share
a name, and a rename keeps the id."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .cache import StatsCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatFacts:
    """What LibreChat records about a chat that decides what engram does with it."""

    project: str | None = None  # the chat project's id: what project memories are kept under
    project_name: str | None = None  # its name today, for people to read
    temporary: bool = False  # LibreChat's temporary chat: it deletes it, so engram keeps nothing from it
    memories_off: bool = False  # the user switched off personalization memories in LibreChat's settings
    # LibreChat's MongoDB is configured but said nothing of the chat (not written yet, or down): its
    # opt-outs are unknown, so memory is off for the turn (fail closed) until the worker can read them
    unknown: bool = False


class ProjectResolver:
    """Looks up what LibreChat records about a conversation; no project means projectless (or Mongo
    unavailable)."""

    def __init__(
        self, database: Any = None, cache: StatsCache | None = None, retry_delay_s: float = 0.3
    ) -> None:
        self.db = database
        self.cache = cache or StatsCache(300_000, 5000)
        self.retry_delay_s = retry_delay_s
        self.lookups = 0
        self.errors = 0
        self.last_error: str | None = None

    @classmethod
    def from_uri(
        cls, uri: str | None, db_name: str | None, timeout_ms: int, cache: StatsCache
    ) -> ProjectResolver:
        """Connect lazily to LibreChat's MongoDB (pymongo does not block until the first query)."""
        if not uri:
            return cls(None, cache)
        from pymongo import MongoClient

        client: MongoClient[dict[str, Any]] = MongoClient(
            uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms, socketTimeoutMS=timeout_ms
        )
        database = client[db_name] if db_name else client.get_default_database("LibreChat")
        return cls(database, cache)

    def chat(self, user: str, conversation: str) -> ChatFacts:
        """What LibreChat records about a conversation of this user (nothing, when Mongo is not set)."""
        if self.db is None or not conversation:
            return ChatFacts()
        key = (user, conversation)
        facts = self.cache.get_or(key, lambda: self._lookup(user, conversation, retry=True))
        if facts is _UNKNOWN:  # not written yet or Mongo failed: don't remember that for long
            self.cache.discard(key)
            return ChatFacts(unknown=True)
        return facts if isinstance(facts, ChatFacts) else ChatFacts()

    def _lookup(self, user: str, conversation: str, retry: bool) -> ChatFacts | _Unknown:
        self.lookups += 1
        fields = {"chatProjectId": 1, "isTemporary": 1, "expiredAt": 1}
        try:
            doc = self.db["conversations"].find_one({"conversationId": conversation, "user": user}, fields)
            if doc is None and retry:
                # LibreChat may not have written a brand-new conversation yet
                time.sleep(self.retry_delay_s)
                doc = self.db["conversations"].find_one(
                    {"conversationId": conversation, "user": user}, fields
                )
            if doc is None:
                return _UNKNOWN
            project, name = self._project(user, doc.get("chatProjectId"))
            return ChatFacts(
                project=project,
                project_name=name,
                temporary=bool(doc.get("isTemporary") or doc.get("expiredAt")),
                memories_off=self._memories_off(user),
            )
        except Exception as exc:  # slow or down: projectless for this turn, never a failed turn
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("project lookup failed, treating the chat as projectless: %s", self.last_error)
            return _UNKNOWN

    def _memories_off(self, user: str) -> bool:
        """Whether the user set personalization memories off in LibreChat (users._id is their id)."""
        from bson import ObjectId

        ids: list[Any] = [user] + ([ObjectId(user)] if ObjectId.is_valid(user) else [])
        doc = self.db["users"].find_one({"_id": {"$in": ids}}, {"personalization": 1})
        return ((doc or {}).get("personalization") or {}).get("memories") is False

    def _project(self, user: str, project_id: Any) -> tuple[str | None, str | None]:
        """(id, name) of the chat's project when this user owns it; (None, None) otherwise."""
        if not project_id:
            return None, None
        candidates = [project_id]
        if isinstance(project_id, str):
            from bson import ObjectId

            if ObjectId.is_valid(project_id):
                candidates.append(ObjectId(project_id))
        project = self.db["chatprojects"].find_one({"_id": {"$in": candidates}}, {"name": 1, "user": 1})
        if project is None:
            return None, None
        owner = project.get("user")
        if owner is not None and str(owner) != user:  # another user's project: never theirs to share
            log.warning("a chat points at a project its user does not own; treating it as projectless")
            return None, None
        return str(project["_id"]), project.get("name") or None


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


_UNKNOWN = _Unknown()
