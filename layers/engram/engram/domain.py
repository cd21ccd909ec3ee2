"""What a memory is to the front doors: a chat message to store, a memory as shown, search results,
and the checks every name and limit passes."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidInput
from .record import MemoryFields, Record, field_names
from .shapes import api_json, from_payload
from .text import NAME_PATTERN, check_json, check_text
from .vectors import Hit

log = logging.getLogger(__name__)

Kind = Literal["fact", "message"]
SavedBy = Literal["bot", "owner", "user"]
DEFAULT_LIMIT, MAX_LIMIT = 200, 500
MAX_BATCH = 500
INGEST_CHUNK = 50
MAX_CONTEXT_CHARS = 2000
MAX_MESSAGE_CHARS = 16_000
# A message's content, serialized: far below DynamoDB's 400 KB item, so one oversized message fails alone
# with a clear 400 instead of failing its whole batch write after its claims are made (issue 32)
MAX_CONTENT_BYTES = 32_768
FALLBACK_SCAN = 2000
# ... read from at most this many of the kind's newest records, matching the scope or not: a server's search
# in a bot of 100 M messages reads 20 pages (~2 s), not the bot's whole partition (a 30 s walk a search)
FALLBACK_READ = 10_000
_NAME = re.compile(NAME_PATTERN)


def check_name(what: str, value: str | None) -> str | None:
    """Bot, user, server and project names: 1-128 plain characters, or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidInput(f"{what} must be 1-128 letters, digits or _.:@- (got {value!r})")
    return value


def required_name(what: str, value: str | None) -> str:
    """A name that must be given (a bot, the user a forget is for)."""
    name = check_name(what, value)
    if name is None:
        raise InvalidInput(f"{what} is required")
    return name


def check_limit(limit: int | None) -> int:
    """A list or search limit: 1-500, 200 when not given."""
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


@dataclass(slots=True)
class ChatMessage:
    """A chat message to store: its source id is unique per bot, so storing it twice does nothing."""

    source_id: str
    text: str
    user: str | None = None
    server: str | None = None
    project: str | None = None
    created_at: int | None = None
    content: Any = None
    saved_by: str = "user"
    thread: str | None = None
    # An import (or a backfill page) carries these; otherwise they are made at write time. Whose words the
    # context is and from which record, so that forgetting that person reaches them.
    context: str | None = None
    updated_at: int | None = None
    context_author: str | None = None
    context_source: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source_id, str) or not 1 <= len(self.source_id) <= 128:
            raise InvalidInput("a message needs a source message id of 1-128 characters")
        if not isinstance(self.text, str) or len(self.text) > MAX_MESSAGE_CHARS:
            raise InvalidInput(f"message text must be a string of at most {MAX_MESSAGE_CHARS} characters")
        check_text("a message id", self.source_id)
        check_text(f"message {self.source_id!r} text", self.text)
        self._check_content()
        if not self.text.strip() and not self.content:
            raise InvalidInput(f"message {self.source_id} has no text and no content")
        (
            check_name("userId", self.user),
            check_name("serverId", self.server),
            check_name("project", self.project),
        )
        check_name("threadId", self.thread)
        if self.saved_by not in ("bot", "owner", "user"):
            raise InvalidInput("savedBy must be bot, owner or user")
        self._check_context()

    def _check_content(self) -> None:
        check_json(f"message {self.source_id!r} content", self.content)
        if self.content is None:
            return
        size = len(json.dumps(self.content, ensure_ascii=False, separators=(",", ":"), default=str).encode())
        if size > MAX_CONTENT_BYTES:
            limit = f"{MAX_CONTENT_BYTES:,}"
            raise InvalidInput(
                f"message {self.source_id!r} content is {size:,} bytes as JSON; at most {limit}"
            )

    def _check_context(self) -> None:
        if self.context is None:
            return
        if not isinstance(self.context, str) or len(self.context) > MAX_CONTEXT_CHARS:
            raise InvalidInput(
                f"message {self.source_id!r} context must be at most {MAX_CONTEXT_CHARS} characters"
            )
        check_text(f"message {self.source_id!r} context", self.context)


@dataclass(slots=True)
class Memory(MemoryFields):
    """A memory as the front doors show it: a record's shown fields, and its score where it was searched."""

    score: float | None = None

    @classmethod
    def from_record(cls, r: Record) -> Memory:
        """From a stored record."""
        shown = {name: getattr(r, name) for name in field_names(MemoryFields)}
        return cls(
            **shown | {"id": int(r.id), "created_at": int(r.created_at), "updated_at": int(r.updated_at)}
        )

    @classmethod
    def from_hit(cls, hit: Hit) -> Memory:
        """From a search hit's payload (no second round trip)."""
        fields = from_payload(hit.payload)
        fields.setdefault("saved_by", "owner")
        fields.setdefault("created_at", 0)
        fields.setdefault("updated_at", 0)
        return cls(id=hit.id, score=hit.score, **{k: v for k, v in fields.items() if k in field_names(cls)})

    def to_json(self) -> dict[str, Any]:
        """The Memory API's JSON shape (engram.shapes)."""
        out = api_json(self)
        if self.score is not None:
            out["score"] = round(self.score, 6)
        return out


class Found(list[Memory]):
    """Search results, best first, and whether meaning took part (False: words only, because vectors
    are off, the embedder is down or its model is still loading)."""

    meaning: bool = False
