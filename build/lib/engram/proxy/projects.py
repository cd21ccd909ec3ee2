"""Which LibreChat project a conversation belongs to: conversations.chatProjectId -> chatprojects.name,
read-only from LibreChat's MongoDB, cached, retried once for a brand-new chat, projectless when down."""

from __future__ import annotations

import logging
import time
from typing import Any

from .cache import StatsCache

log = logging.getLogger(__name__)


class ProjectResolver:
    """Looks up a conversation's project name; None means projectless (or Mongo unavailable)."""

    def __init__(self, database=None, cache: StatsCache | None = None, retry_delay_s: float = 0.3):
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

    def project(self, user: str, conversation: str) -> str | None:
        """The project name of a conversation of this user."""
        if self.db is None or not conversation:
            return None
        key = (user, conversation)
        name = self.cache.get_or(key, lambda: self._lookup(user, conversation, retry=True))
        if name is _UNKNOWN:  # not written yet or Mongo failed: don't remember that for long
            self.cache.discard(key)
            return None
        return name

    def _lookup(self, user: str, conversation: str, retry: bool):
        self.lookups += 1
        try:
            doc = self.db["conversations"].find_one(
                {"conversationId": conversation, "user": user}, {"chatProjectId": 1}
            )
            if doc is None and retry:
                # LibreChat may not have written a brand-new conversation yet
                time.sleep(self.retry_delay_s)
                doc = self.db["conversations"].find_one(
                    {"conversationId": conversation, "user": user}, {"chatProjectId": 1}
                )
            if doc is None:
                return _UNKNOWN
            project_id = doc.get("chatProjectId")
            if not project_id:
                return None
            candidates = [project_id]
            if isinstance(project_id, str):
                from bson import ObjectId

                if ObjectId.is_valid(project_id):
                    candidates.append(ObjectId(project_id))
            project = self.db["chatprojects"].find_one({"_id": {"$in": candidates}}, {"name": 1})
            return (project or {}).get("name") or None
        except Exception as exc:  # slow or down: projectless for this turn, never a failed turn
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("project lookup failed, treating the chat as projectless: %s", self.last_error)
            return _UNKNOWN


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


_UNKNOWN = _Unknown()
