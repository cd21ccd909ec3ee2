"""The Memory API's request and response bodies (what /openapi.json documents)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, create_model, field_validator

from ..shapes import Field as ApiField
from ..shapes import api_fields
from ..text import MEMORY_ID_PATTERN
from ..text import NAME_PATTERN as NAME


class ErrorBody(BaseModel):
    """What went wrong, as clients before 1.3 read it (deprecated: read the problem's own members)."""

    code: str
    message: str


class ErrorResponse(BaseModel):
    """Every error answer: RFC 9457 problem details, served as application/problem+json."""

    type: str = Field(
        examples=["tag:engram-recall,2026:problem:not_found"], description="The problem's kind."
    )
    title: str = Field(examples=["Not Found"], description="The HTTP status's reason phrase.")
    status: int = Field(examples=[404])
    detail: str = Field(description="What went wrong and what to do about it, in words.")
    code: str = Field(examples=["not_found"], description="engram's code (docs/memory-api.md lists them).")
    error: ErrorBody = Field(description="Deprecated since 1.3: the same as code and detail.")


def _memory_out() -> type[BaseModel]:
    """A memory in JSON, made from the one field table (shapes.FIELDS): what the API answers and what its
    schema says cannot differ. A field that may be empty is optional; the rest are always there."""
    fields: dict[str, Any] = {
        str(f.api): (f.api_type, Field(default=None) if _optional(f) else Field(examples=_examples(f)))
        for f in api_fields()
    }
    score: Any = (
        float | None,
        Field(
            default=None,
            ge=0,
            le=1,
            description="On search results: how relevant the memory is, 0-1, the same scale for every query "
            "(0.5: as close as a question and an answer that share no word). Results come in engram's "
            "ranking, which need not follow this score (docs/memory-api.md, Relevance).",
        ),
    )
    model = create_model("MemoryOut", __config__=ConfigDict(extra="allow"), **fields, score=score)
    model.__doc__ = "A memory in JSON."
    return model


def _optional(field: ApiField) -> bool:
    return type(None) in get_args(field.api_type) or field.api_type is Any


def _examples(field: ApiField) -> list[str] | None:
    return [field.example] if field.example else None


MemoryOut = _memory_out()


class MemoryList(BaseModel):
    """Newest first, or best first when a query was given."""

    memories: list[MemoryOut]  # type: ignore[valid-type]  # made from the field table above
    meaning: bool | None = Field(
        None,
        description="Searches only: whether meaning took part. False: words alone "
        "answered (vectors off, the embedder down, or its model still loading).",
    )
    next: str | None = Field(
        None,
        description="Listings only: more may follow this page (a full page, or one a metadata filter "
        "stopped reading early): ask again with before=<next>; the Link header (rel=next) is that URL.",
    )


Metadata = dict[str, str | int | float | bool]
METADATA_DOC = (
    "Your own labels: a flat object of string, number or boolean values (keys of 1-64 letters, digits, "
    "_ or -; at most 4 KB serialized), shown with the memory and filtered on with ?metadata.<key>=<value>."
)
EXPIRES_DOC = (
    "When it stops being a memory (ISO 8601 with a zone, in the future): past it, it is neither listed, "
    "searched, recalled nor exported, and the sweep deletes it."
)


class NewMemory(BaseModel):
    """A fact to remember (1-1,000 characters after trimming)."""

    text: str = Field(max_length=10_000)
    userId: str | None = Field(default=None, pattern=NAME)
    serverId: str | None = Field(default=None, pattern=NAME)
    project: str | None = Field(default=None, pattern=NAME)
    metadata: Metadata | None = Field(default=None, description=METADATA_DOC)
    expiresAt: AwareDatetime | None = Field(default=None, description=EXPIRES_DOC)
    supersedes: str | None = Field(
        default=None,
        pattern=MEMORY_ID_PATTERN,
        examples=["mem:12"],
        description="A memory this fact replaces: that memory takes this text (its old text is kept in its "
        "history) and is answered with 200, instead of a second memory beside it.",
    )


class VersionOut(BaseModel):
    """What a memory said before a change."""

    text: str | None = Field(
        description="Its text then (null: withdrawn where it was written, as a Discord edit)"
    )
    at: str = Field(description="When that text was written (ISO 8601)")
    by: str = Field(
        description="What changed it: api, mcp, extraction, source (an edit where it was written)"
    )


class History(BaseModel):
    """A memory's earlier texts, newest first (the newest ten, within 32 KB)."""

    history: list[VersionOut]


class MemoryChange(BaseModel):
    """What changes in a memory: its text, its metadata (replaced whole; null or {} removes it), its expiry
    (null: never). What is left out stays."""

    text: str | None = Field(default=None, max_length=10_000)
    metadata: Metadata | None = Field(default=None, description=METADATA_DOC)
    expiresAt: AwareDatetime | None = Field(default=None, description=EXPIRES_DOC)


# Chat messages older than this are not chat messages; later than 9999 is not a date Python can show.
EARLIEST_YEAR, LATEST_YEAR = 1900, 9998


class MessageIn(BaseModel):
    """A chat message to store; `id` is its source message id, unique per bot."""

    id: str = Field(min_length=1, max_length=128)
    text: str = ""
    userId: str | None = Field(default=None, pattern=NAME)
    serverId: str | None = Field(default=None, pattern=NAME)
    project: str | None = Field(default=None, pattern=NAME)
    createdAt: AwareDatetime | None = Field(
        default=None, description=f"Between {EARLIEST_YEAR} and {LATEST_YEAR} (UTC)."
    )
    content: dict[str, Any] | None = Field(
        default=None,
        description="Any JSON object of at most 32,768 bytes serialized (else 400). Its `author`, "
        "`displayName`, `nick`, `name` and `authorName` (text) are names its author goes by: a search "
        "naming one favours their memories.",
    )
    savedBy: Literal["bot", "owner", "user"] = "user"
    threadId: str | None = Field(
        default=None, pattern=NAME, description="The conversation (channel, chat) it belongs to."
    )

    @field_validator("createdAt")
    @classmethod
    def _in_range(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return value
        try:
            utc = value.astimezone(UTC)
        except (OverflowError, ValueError) as exc:
            raise ValueError(f"createdAt must be between {EARLIEST_YEAR} and {LATEST_YEAR} (UTC)") from exc
        if not EARLIEST_YEAR <= utc.year <= LATEST_YEAR:
            raise ValueError(f"createdAt must be between {EARLIEST_YEAR} and {LATEST_YEAR} (UTC)")
        return utc

    def created_ms(self) -> int | None:
        """createdAt in epoch milliseconds, how records keep time."""
        return int(self.createdAt.timestamp() * 1000) if self.createdAt else None


class MessageBatch(BaseModel):
    """Up to 500 messages, stored idempotently."""

    messages: list[MessageIn] = Field(min_length=1, max_length=500)


class MessageBatchResult(BaseModel):
    """How many were new, and every message's memory id in input order."""

    created: int
    ids: list[str]


class ForgetResult(BaseModel):
    """What a forget deleted, per store: `facts`, `messages`, `vectors`, `contexts` (other people's
    records whose context quoted the user, cleared), `claims`, and `state` (consent, backfill, exportLimit,
    tokens, cursors, chatSettings, keys); `done` (false: jobs are finishing it, and every read hides the user
    meanwhile) and `left` (records still to delete)."""

    deleted: dict[str, bool | int | dict[str, int]]


class ServerRemoved(BaseModel):
    """A server's memories deleted: how many this call deleted, and whether none is left (`done` false: call
    again; each call deletes for at most about 20 seconds)."""

    deleted: int
    done: bool


class EmbeddingSettingsOut(BaseModel):
    """Where vectors come from: `local`, `remote` (a provider and model) or `off` (words only)."""

    embedder: Literal["local", "remote", "off"]
    embeddingProvider: str | None = None
    embeddingModel: str | None = None
    messageVectors: int


class EmbeddingSettingsPatch(BaseModel):
    """Only what is named changes. A new model embeds a test string before anything changes."""

    model_config = ConfigDict(extra="forbid")
    embedder: Literal["local", "remote", "off"] | None = None
    embeddingProvider: str | None = Field(default=None, max_length=128)
    embeddingModel: str | None = Field(default=None, max_length=256)
    messageVectors: int | None = Field(default=None, ge=0, le=100_000)


class EmbeddingProgress(BaseModel):
    """How far the current model's vectors have got."""

    model: str | None
    memories: int
    memoriesWithVectors: int
    messages: int
    withVectors: int
    error: str | None = None
    mixing: bool = False


class Health(BaseModel):
    """Liveness; the details only for the admin key."""

    model_config = ConfigDict(extra="allow")
    ok: bool


class ImportCounts(BaseModel):
    """Lines stored as new memories, and lines whose memory was already there."""

    created: int
    existing: int


class ImportLineError(BaseModel):
    """A line that was not stored, and why."""

    line: int
    error: str


class ImportResult(BaseModel):
    """What an import stored."""

    facts: ImportCounts
    messages: ImportCounts
    forgotten: int = Field(
        0, description="Forgets the file carried, applied before its lines (its users' lines are refused)"
    )
    errors: list[ImportLineError]


class BotList(BaseModel):
    """The bots that have memories."""

    bots: list[str]


class NewUserKey(BaseModel):
    """A key for one user of one bot; `name` says where it is used (a laptop, Claude Desktop)."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, max_length=100, examples=["Claude Desktop"])


class UserKeyOut(BaseModel):
    """One of a user's keys (its secret is never shown again)."""

    id: str = Field(examples=["3f9c2a4b7d1e8f60"])
    bot: str
    userId: str
    name: str | None = None
    createdAt: datetime


class UserKeyCreated(UserKeyOut):
    """A key just minted: `key` is shown this once (engram keeps only its digest)."""

    key: str = Field(
        description="The key: Authorization: Bearer <key> on the proxy and /mcp, as this user only.",
        examples=["egk_3f9c2a4b7d1e8f60_…"],
    )


class UserKeyList(BaseModel):
    """A user's keys, oldest first."""

    keys: list[UserKeyOut]
