"""What a memory is to the front doors: a chat message to store, a memory as shown, search results,
and the checks every name and limit passes."""

from __future__ import annotations

import json
import logging
import math
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


MAX_METADATA_BYTES = 4096
_METADATA_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_metadata(value: Any) -> dict[str, str | int | float | bool] | None:
    """A memory's metadata: a flat JSON object of string, number or boolean values under keys of 1-64
    letters, digits, _ or - (a key is named in a filter as metadata.<key>), at most 4 KB serialized; None
    or {} for none."""
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("metadata must be a JSON object")
    for key, item in value.items():
        _check_metadata_item(key, item)
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(f"metadata is {size} bytes serialized; at most {MAX_METADATA_BYTES}")
    return dict(value)


def _check_metadata_item(key: Any, item: Any) -> None:
    if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key):
        raise InvalidInput(f"metadata keys must be 1-64 letters, digits, _ or - (got {key!r})")
    finite = not isinstance(item, float) or math.isfinite(item)
    if not isinstance(item, str | int | float | bool) or not finite:
        raise InvalidInput(f"metadata.{key} must be a string, a number or a boolean")
    if isinstance(item, str):
        check_text(f"metadata.{key}", item)


def metadata_filter(params: dict[str, str]) -> dict[str, str]:
    """The `metadata.<key>=<value>` filters of a request (every key must be one metadata can have)."""
    out = {}
    for name, value in params.items():
        key = name.removeprefix("metadata.")
        if not _METADATA_KEY.fullmatch(key):
            raise InvalidInput(f"{name}: metadata keys are 1-64 letters, digits, _ or -")
        out[key] = value
    return out


def matches_metadata(metadata: dict[str, Any] | None, wanted: dict[str, str]) -> bool:
    """Whether a memory's metadata has every wanted value (a filter's value is text: `true` matches the
    boolean, `3` the number 3 and the text "3")."""
    held = metadata or {}
    return all(key in held and same_value(held[key], text) for key, text in wanted.items())


def same_value(value: Any, text: str) -> bool:
    """A stored metadata value against a filter's text."""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, int | float):
        try:
            return float(text) == float(value)
        except ValueError:
            return False
    return bool(value == text)


def check_expiry(expires_at: int | None, now: int) -> int | None:
    """When a memory stops being one (epoch ms), which must be ahead of now; None: never."""
    if expires_at is None:
        return None
    if expires_at <= now:
        raise InvalidInput("expiresAt is not in the future")
    return int(expires_at)


@dataclass(frozen=True, slots=True)
class Terms:
    """What the caller says of a memory besides its words: its metadata and when it expires (epoch ms)."""

    metadata: dict[str, Any] | None = None
    expires_at: int | None = None

    def checked(self, now: int) -> Terms:
        """These terms, refused (InvalidInput) unless the metadata is flat and small and the expiry ahead."""
        return Terms(check_metadata(self.metadata), check_expiry(self.expires_at, now))


NO_TERMS = Terms()


@dataclass(frozen=True, slots=True)
class Version:
    """What a memory said before a change: its text (None: withdrawn at its source), when that text was
    written (ms), and what changed it (api, mcp, extraction, source)."""

    text: str | None
    at: int
    by: str


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


def check_min_score(min_score: float | None, name: str = "minScore") -> float:
    """A relevance floor: a number from 0 to 1 (engram.relevance), 0 when not given."""
    if min_score is None:
        return 0.0
    if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 <= min_score <= 1:
        raise InvalidInput(f"{name} must be a number from 0 to 1")
    return float(min_score)


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
    metadata: dict[str, Any] | None = None
    expires_at: int | None = None
    versions: list[dict[str, Any]] | None = None  # its earlier texts (an import carries them)

    def __post_init__(self) -> None:
        if not isinstance(self.source_id, str) or not 1 <= len(self.source_id) <= 128:
            raise InvalidInput("a message needs a source message id of 1-128 characters")
        if not isinstance(self.text, str) or len(self.text) > MAX_MESSAGE_CHARS:
            raise InvalidInput(f"message text must be a string of at most {MAX_MESSAGE_CHARS} characters")
        check_text("a message id", self.source_id)
        check_text(f"message {self.source_id!r} text", self.text)
        self._check_content()
        self.metadata = check_metadata(self.metadata)
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


@dataclass(frozen=True, slots=True)
class Added:
    """What a batch of chat messages became: every message's memory in input order (new or already
    there), and the ones this call created."""

    memories: list[Memory]
    fresh: list[Memory]

    @property
    def created(self) -> int:
        return len(self.fresh)


class Found(list[Memory]):
    """Search results, best first, and whether meaning took part (False: words only, because vectors
    are off, the embedder is down or its model is still loading)."""

    meaning: bool = False
    # a listing that stopped reading before its page was full (a metadata filter over many memories):
    # the id to page on from (`before`), as more may match past it
    read_to: int | None = None


def rewritten(content: Any, old: str, new: str) -> Any:
    """A message's content with its old words replaced wherever a string holds them (the caller's own
    JSON: `message`, `text`, or any field they chose), so a change leaves no copy of the old text."""
    if isinstance(content, str):
        return content.replace(old, new) if old else content
    if isinstance(content, list):
        return [rewritten(item, old, new) for item in content]
    if isinstance(content, dict):
        return {key: rewritten(value, old, new) for key, value in content.items()}
    return content
